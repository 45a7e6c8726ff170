"""A config that transformers' own validation refuses (found by the second break-it pass of
issue 28: ``max_position_embeddings: 1e30``) is refused on one ``ERROR:`` line: the
validator's multi-line text is joined, not printed as loose lines after it."""

from __future__ import annotations

import json

import pytest

from test_properties_commands import run_command

pytest.importorskip("transformers")


@pytest.mark.parametrize("command", [["fit", "{p}", "--gpu", "H100"], ["geometry", "{p}", "--max-seq", "100"]])
def test_a_config_transformers_refuses_is_one_error_line(tmp_path, command):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                             "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 1e30}))
    code, doc, err = run_command([a.format(p=p) for a in command])
    assert code == 2 and "\n" not in doc["error"] and "max_position_embeddings" in doc["error"], doc
    lines = err.splitlines()
    assert lines[0].startswith("ERROR: ") and all(ln.startswith(("ERROR: ", "HINT: ")) for ln in lines), err
