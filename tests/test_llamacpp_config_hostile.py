"""A config.json whose ``model_type`` is a list or an object, with other fields broken too,
under ``--engine llama.cpp`` (found by ``benchmarks/fuzz.py --only fit-configs`` in the second
break-it pass of issue 28): the llama.cpp converter mapping looked the type up in a dict
before the config was validated and raised ``TypeError: unhashable type``; it is refused."""

from __future__ import annotations

import json

import pytest

from kvgate.engines.llamacpp.arch import arch_for_config
from test_properties_commands import run_command


@pytest.mark.parametrize("model_type", [[[], [1]], {"a": 1}, ["llama"], 5])
def test_fit_llamacpp_refuses_a_model_type_that_is_not_a_string(tmp_path, model_type):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": model_type, "num_hidden_layers": 4, "num_attention_heads": [-9],
                             "num_key_value_heads": 4, "head_dim": 64, "hidden_size": [[968]],
                             "max_position_embeddings": 4096}))
    code, doc, _ = run_command(["fit", str(p), "--gpu", "L4", "--engine", "llama.cpp"])
    assert code == 2 and "model_type" in doc["error"], doc


@pytest.mark.parametrize("model_type", [[1], {"a": 1}, None, 5])
def test_arch_for_config_names_no_architecture_for_a_type_that_is_not_a_string(model_type):
    assert arch_for_config({}, model_type) is None
    assert arch_for_config({"architectures": ["LlamaForCausalLM"]}, model_type) == "llama"
