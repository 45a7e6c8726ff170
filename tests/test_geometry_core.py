"""Exact geometry: the write-up's slot, and cases 1–4, 8, 9 of shared/cases/README.md."""

import pytest

from kvgate.geometry import GeometryError, KVGeometry, kv_heads_per_rank
from kvgate.model import ConfigError, load_model, spec_from_config
from kvgate.units import GiB, MiB


def geo(name, fmt="bf16", **kw):
    return KVGeometry(load_model(name), fmt, **kw)


def test_source_slot_is_415236096_bytes():
    g = geo("qwen3-30b-a3b", "int8-f32scale")
    # 48 layers × 8192 positions × (2·(4·128) int8 + 2·4 heads·4 B f32 scales)
    assert g.slot_bytes(8192) == 48 * 8192 * (2 * 512 + 8 * 4) == 415_236_096
    assert g.slot_bytes(8192) == 396 * MiB
    assert g.slots_bytes(8192, 8) == 3168 * MiB
    # The write-up's "1.98 GiB" at max_seq 40960 is 1,980 MiB = 1.93 GiB.
    assert g.slot_bytes(40960) == 2_076_180_480 == 1980 * MiB


def test_case1_llama2_7b_fp16():
    g = geo("llama-2-7b", "fp16")
    assert g.bytes_per_token() == 524_288
    assert g.slot_bytes(4196) == 4196 * 524_288
    assert round(g.slot_bytes(4196) / GiB, 3) == 2.049


def test_case2_llama31_8b_vllm_blocks():
    g = geo("llama-3.1-8b")
    assert g.bytes_per_token() == 131_072
    assert g.block_bytes(16) == 2 * MiB
    assert 1952 * g.block_bytes(16) == int(3.8125 * GiB)
    assert 1478 * 16 == 23_648


def test_case3_qwen3_4b_reads_head_dim():
    g = geo("qwen3-4b")
    assert g.bytes_per_token() == 147_456
    # the wrong derivation hidden/heads = 2560/32 = 80 gives 92,160
    wrong = 36 * 2 * 8 * (2560 // 32) * 2
    assert wrong == 92_160 and g.bytes_per_token() != wrong


def test_case4_qwen3_32b_tensor_parallel():
    whole, per_rank = geo("qwen3-32b"), geo("qwen3-32b", tp=4)
    assert whole.bytes_per_token() == 262_144
    assert per_rank.bytes_per_token() == 65_536
    budget = 3258 * MiB  # per-rank KV budget
    assert budget // per_rank.block_bytes(16) == 3258
    assert budget // whole.block_bytes(16) == 814


def test_case9_static_cache_bf16():
    g = geo("qwen3-30b-a3b", "bf16")
    assert g.slots_bytes(8192, 1) == 805_306_368
    assert g.slots_bytes(8192, 4) == 3_221_225_472


def test_kv_heads_per_rank_rules():
    assert kv_heads_per_rank(8, 1) == 8
    assert kv_heads_per_rank(8, 8) == 1
    assert kv_heads_per_rank(4, 8) == 1  # replicated
    with pytest.raises(GeometryError, match="does not divide"):
        kv_heads_per_rank(8, 3)
    with pytest.raises(GeometryError, match="not a multiple"):
        kv_heads_per_rank(4, 6)
    with pytest.raises(GeometryError):
        geo("qwen3-32b", tp=3)


def test_by_layer_sums_to_slot():
    g = geo("qwen3-30b-a3b", "int8-f32scale")
    rows = g.by_layer(8192)
    assert len(rows) == 48
    assert all(r["position_bytes"] == 1056 and r["positions"] == 8192 for r in rows)
    assert sum(r["bytes"] for r in rows) == g.slot_bytes(8192)


def test_k_and_v_formats_may_differ():
    g = KVGeometry(load_model("llama-3.1-8b"), "q8_0", kv_format_v="bf16")
    # K: 1024 values / 32 × 34 = 1088 B; V: 1024 × 2 = 2048 B; 32 layers
    assert g.bytes_per_token() == 32 * (1088 + 2048)


def test_text_config_is_unwrapped():
    cfg = {"architectures": ["X"], "text_config": {"num_hidden_layers": 2, "num_attention_heads": 4,
                                                     "num_key_value_heads": 2, "head_dim": 64, "hidden_size": 128},
           "torch_dtype": "bfloat16"}
    spec = spec_from_config(cfg, name="x", source="test")
    assert spec.num_layers == 2 and spec.dtype == "bfloat16"
    assert KVGeometry(spec).bytes_per_token() == 2 * 2 * 2 * 64 * 2


def test_head_dim_derived_only_when_absent():
    base = {"num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 8, "hidden_size": 1024}
    assert KVGeometry(spec_from_config(base, name="a", source="t")).bytes_per_token() == 2 * 8 * 128 * 2
    assert KVGeometry(spec_from_config({**base, "head_dim": 256}, name="b", source="t")).bytes_per_token() == 2 * 8 * 256 * 2


@pytest.mark.parametrize("missing", ["num_hidden_layers", "num_attention_heads"])
def test_missing_field_is_named(missing):
    cfg = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256}
    del cfg[missing]
    with pytest.raises(ConfigError, match=missing):
        spec_from_config(cfg, name="x", source="t")


def test_mistral_slides_every_layer_and_qwen_switch_off():
    g = geo("mistral-7b-v0.1")
    assert g.model.kinds() == {"sliding": 32}
    assert g.slot_bytes(32768) == g.slot_bytes(4096) == 32 * 4096 * 2 * 8 * 128 * 2
    q = geo("qwen1.5-72b", "fp16")
    assert q.model.kinds() == {"full": 80}
