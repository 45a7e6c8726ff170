"""Shapes no engine runs: refused with an error naming the field, never sized.

KV heads that exceed or do not divide the attention heads (transformers ``repeat_kv``,
vLLM's ``Attention`` need ``num_attention_heads % num_key_value_heads == 0``), a head count
≤ 0, a ``v_head_dim`` of 0 (it used to be read as "same as head_dim"), and a layer count
of 10^30 (which used to hang inside transformers' config class). A weights estimate that
rests on transformers' class defaults lists them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import kvgate
from kvgate.errors import KvgateError
from kvgate.model import spec_from_config
from kvgate.model.weights import weight_bytes

SRC = Path(kvgate.__file__).resolve().parents[1]  # the kvgate under test


def _llama(**kw: object) -> dict:
    return {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "vocab_size": 1000, "intermediate_size": 1024, **kw}


def _raw(**kw: object) -> dict:  # no model_type: read without transformers
    cfg = _llama(**kw)
    del cfg["model_type"]
    return cfg


@pytest.mark.parametrize("make", [_llama, _raw], ids=["transformers", "raw"])
@pytest.mark.parametrize("kv,heads", [(16, 8), (6, 32), (3, 8)])
def test_kv_heads_must_divide_attention_heads(make, kv: int, heads: int) -> None:
    with pytest.raises(KvgateError) as e:
        spec_from_config(make(num_key_value_heads=kv, num_attention_heads=heads), name="x", source="t")
    assert "'num_key_value_heads'" in e.value.message and "'num_attention_heads'" in e.value.message


@pytest.mark.parametrize("make", [_llama, _raw], ids=["transformers", "raw"])
@pytest.mark.parametrize("heads", [0, -4])
def test_attention_heads_must_be_positive(make, heads: int) -> None:
    with pytest.raises(KvgateError) as e:
        spec_from_config(make(num_attention_heads=heads, head_dim=128), name="x", source="t")
    assert "'num_attention_heads' must be a positive integer" in e.value.message


@pytest.mark.parametrize("make", [_llama, _raw], ids=["transformers", "raw"])
def test_v_head_dim_zero_is_not_head_dim(make) -> None:
    with pytest.raises(KvgateError) as e:
        spec_from_config(make(v_head_dim=0), name="x", source="t")
    assert "'v_head_dim' must be a positive integer, got 0" in e.value.message


def test_valid_gqa_still_reads() -> None:
    m = spec_from_config(_llama(v_head_dim=64), name="x", source="t")
    assert (m.layers[0].num_kv_heads, m.layers[0].head_dim, m.layers[0].v_head_dim) == (8, 128, 64)


def test_a_huge_layer_count_is_refused_before_transformers_sees_it() -> None:
    """``GlmMoeDsaConfig.__post_init__`` builds ``indexer_types`` over
    ``range(num_hidden_layers)``: 10^30 never returned. Run in a child so a hang fails."""
    code = ("from kvgate.model import spec_from_config\n"
            "try:\n spec_from_config({'model_type': 'glm_moe_dsa', 'num_hidden_layers': 10**30}, name='x', source='t')\n"
            "except Exception as e:\n print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert out.stdout.startswith("ConfigError model config field 'num_hidden_layers'"), out.stdout + out.stderr
    assert "not a plausible layer count" in out.stdout


def test_weights_estimate_lists_the_class_defaults_it_used(tmp_path: Path) -> None:
    """A LlamaConfig file without vocab_size / intermediate_size: transformers fills 32,000
    and 11,008; the estimate says so (and is built on them: 2 · 32,000 · 512 embeddings +
    2 layers × (4 · 512² attention + 3 · 512 · 11,008 MLP + 2 · 512 norms) + 512 = 68,684,288)."""
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 512,
                             "num_attention_heads": 8}))
    w = weight_bytes(p)
    assert w.params == 2 * 32_000 * 512 + 2 * (4 * 512 * 512 + 3 * 512 * 11_008 + 2 * 512) + 512 == 68_684_288
    note = next(n for n in w.notes if "config class defaults" in n)
    assert "vocab_size 32000" in note and "intermediate_size 11008" in note and "num_key_value_heads 8" in note


def test_weights_estimate_of_a_complete_file_has_no_defaults_note(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 512, "head_dim": 64,
                             "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1000,
                             "intermediate_size": 1024, "tie_word_embeddings": False}))
    assert not [n for n in weight_bytes(p).notes if "config class defaults" in n]
