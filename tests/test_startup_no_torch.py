"""Reading a config.json never imports torch, with or without torch installed (kvgate.model.hf).

With torch installed, transformers' config modules would import it (seconds of start-up for
``kvgate geometry``); kvgate holds torch back while it uses transformers' config classes.
These tests need torch installed (CI: ``KVGATE_TEST_TORCH=1``), run the CLI in a fresh
process, and compare its bytes with transformers' own ``StaticCache`` (the conformance
truth of ``tests/test_conformance_transformers.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "tests" / "data" / "configs"
SRC = str(REPO / "src")

GEOMETRY = """
import contextlib, io, json, sys
from kvgate.cli import main
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    rc = main(["geometry", sys.argv[1], "--max-seq", "8192", "--json"])
print(json.dumps({"rc": rc, "torch": "torch" in sys.modules, "geometry": json.loads(buf.getvalue())}))
"""


def _run(code: str, *args: str) -> dict:
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin", "HOME": str(REPO)})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


# gemma-3-1b: class defaults fill head_dim and the sliding pattern; llama-3.1-405b: its class
# validates hidden_act through transformers.activations (torch's nn); gpt2: aliased fields
@pytest.mark.parametrize("name", ["gemma-3-1b", "llama-3.1-405b", "gpt2"])
def test_geometry_of_a_config_json_imports_no_torch_and_equals_static_cache(name):
    pytest.importorskip("torch")
    from test_conformance_transformers import transformers_layer_bytes

    path = CONFIGS / f"{name}.json"
    out = _run(GEOMETRY, str(path))
    assert out["rc"] == 0
    assert out["torch"] is False  # torch is installed here, and was not imported
    theirs, _ = transformers_layer_bytes(json.loads(path.read_text()), max_cache_len=8192, batch=1)
    g = out["geometry"]
    assert (g["layout"]["name"], g["kv_format_k"], g["max_seq"], g["slots"]) == ("contiguous", "bf16", 8192, 1)
    assert g["slot_bytes"] == sum(theirs)


LATER_TORCH = """
import json, sys
from kvgate.model import hf, torchless
raw = json.load(open(sys.argv[1]))
first = hf.resolve(raw)
out = {"torch_after_resolve": "torch" in sys.modules}
def act_check():  # what type_validators.activation_fn_key asks of ACT2FN
    from transformers.utils import type_validators as tv
    return [len(tv.ACT2FN), "silu" in tv.ACT2FN, "no-such-activation" in tv.ACT2FN, list(tv.ACT2FN.keys())]
out["act_check_without_torch"] = torchless.with_config_classes(act_check)
out["torch_after_act_check"] = "torch" in sys.modules
# something that needs torch inside the held-back window: repeated with torch, correct
zeros = torchless.with_config_classes(lambda: __import__("torch").zeros)

import torch
import transformers
from transformers.utils import import_utils, type_validators
from transformers import modeling_rope_utils, activations
out["fallback_got_real_torch"] = zeros is torch.zeros
out["sys_modules_torch_is_real"] = sys.modules["torch"] is torch and hasattr(torch, "__version__")
out["is_torch_available"] = import_utils.is_torch_available()
out["rope_utils_torch_works"] = float(modeling_rope_utils.torch.ones(3).sum())
out["act_names_equal"] = list(type_validators.ACT2FN) == list(activations.ACT2FN)
out["act_fn_is_real"] = type(type_validators.ACT2FN["silu"]).__name__
out["dtype_with_torch"] = str(transformers.CONFIG_MAPPING["llama"].from_dict(raw).dtype)
out["act_check_with_torch"] = act_check()
out["same_with_torch"] = hf.resolve(raw).config == first.config
# a small llama forward pass: RoPE (modeling_rope_utils), activations, attention
cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, vocab_size=100)
model = transformers.LlamaForCausalLM(cfg)
logits = model(input_ids=torch.tensor([[1, 2, 3]])).logits
out["forward_shape"] = list(logits.shape)
print(json.dumps(out))
"""


def test_nothing_held_back_leaks_into_a_later_torch_model():
    pytest.importorskip("torch")
    out = _run(LATER_TORCH, str(CONFIGS / "llama-3.1-405b.json"))
    assert out["torch_after_resolve"] is False and out["torch_after_act_check"] is False
    assert out["fallback_got_real_torch"] is True and out["sys_modules_torch_is_real"] is True
    assert out["is_torch_available"] is True
    assert out["rope_utils_torch_works"] == 3.0
    assert out["act_names_equal"] is True and out["act_fn_is_real"] == "SiLUActivation"
    assert out["dtype_with_torch"] == "torch.bfloat16"  # the dtype patch did not outlive the window
    # transformers' activation-name check answers the same with torch held back and with torch
    assert out["act_check_without_torch"] == out["act_check_with_torch"]
    assert out["act_check_without_torch"][:3] == [len(out["act_check_with_torch"][3]), True, False]
    assert out["same_with_torch"] is True
    assert out["forward_shape"] == [1, 3, 100]
