"""Layer kinds for every architecture: cases 5–7, hand arithmetic per layer for each
shared config (config.json and a GGUF generated from it), and property tests."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvgate.geometry import Contiguous, KVGeometry
from kvgate.model import ConfigError, LayerSpec, ModelSpec, load_model, spec_from_config

sys.path.insert(0, str(Path(__file__).parent))
from gguf_from_config import write_gguf  # noqa: E402

MiB, GiB = 2**20, 2**30
DATA = Path(__file__).parent / "data" / "configs"


def cfg(shared_dir: Path, name: str) -> dict:
    return json.loads((shared_dir / "cases" / "configs" / f"{name}.json").read_text())


# ----------------------------------------------------------------------------- cases 5-7

def test_case5_gpt_oss_window_honoured_and_full(shared_dir):
    m = spec_from_config(cfg(shared_dir, "gpt-oss-20b"), name="gpt-oss-20b", source="t")
    assert m.kinds() == {"sliding": 12, "full": 12}
    per_tok = 2 * 8 * 64 * 2  # K+V, 8 kv heads × 64, bf16 = 2048 B per layer
    honoured = KVGeometry(m, "bf16").slots_bytes(8192, 32)
    assert honoured == 32 * (12 * 8192 * per_tok + 12 * 128 * per_tok) == 6_543_114_240
    assert round(honoured / GiB, 3) == 6.094
    full = KVGeometry(m, "bf16", layout=Contiguous(sliding_full=True)).slots_bytes(8192, 32)
    assert full == 32 * 24 * 8192 * per_tok == 12 * GiB


def test_case6_deepseek_v3_mla(shared_dir):
    m = spec_from_config(cfg(shared_dir, "deepseek-v3"), name="dsv3", source="t")
    assert m.kinds() == {"mla": 61}
    assert KVGeometry(m, "bf16").bytes_per_token() == 61 * 576 * 2 == 70_272
    q8 = KVGeometry(m, "q8_0").slot_bytes(32768)
    assert q8 == 61 * 32768 * (576 // 32 * 34) == 1_223_294_976
    assert q8 / MiB == 1166.625
    # MLA is replicated on every tensor-parallel rank
    assert KVGeometry(m, "bf16", tp=8).bytes_per_token() == 70_272


def test_case7_qwen15_72b_27_layers(shared_dir):
    full = spec_from_config(cfg(shared_dir, "qwen15-72b"), name="q", source="t")
    m = ModelSpec(name="q27", source="t", layers=full.layers[:27])
    f16 = KVGeometry(m, "fp16").slot_bytes(13000)
    assert f16 == 27 * 13000 * 2 * 64 * 128 * 2 == 11_501_568_000
    assert f16 / MiB == 10968.75
    q4 = KVGeometry(m, "q4_0").slot_bytes(13000)
    assert q4 == 27 * 13000 * 2 * (64 * 128 // 32 * 18) == 3_234_816_000
    # NOTE: 3,234,816,000 B = 3,084.96 MiB (= f16 × 18/64); cases/README.md prints
    # 3,085.3 MiB, which no q4_0 row arithmetic at 13,000 tokens gives.
    assert round(q4 / MiB, 2) == 3084.96
    assert q4 * 64 == f16 * 18  # q4_0 never silently falls back to f16


# ----------------------------------------------------------------------------- per layer

# name -> (layers, {kind: count}, {kind: bytes per position, bf16}, window)
HAND = {
    "llama2-7b": (32, {"full": 32}, {"full": 2 * 32 * 128 * 2}, None),
    "llama31-8b": (32, {"full": 32}, {"full": 2 * 8 * 128 * 2}, None),
    "mixtral-8x7b": (32, {"full": 32}, {"full": 2 * 8 * 128 * 2}, None),
    "qwen15-72b": (80, {"full": 80}, {"full": 2 * 64 * 128 * 2}, None),
    "qwen3-0.6b": (28, {"full": 28}, {"full": 2 * 8 * 128 * 2}, None),
    "qwen3-4b": (36, {"full": 36}, {"full": 2 * 8 * 128 * 2}, None),
    "qwen3-32b": (64, {"full": 64}, {"full": 2 * 8 * 128 * 2}, None),
    "qwen3-30b-a3b": (48, {"full": 48}, {"full": 2 * 4 * 128 * 2}, None),
    "gpt-oss-20b": (24, {"sliding": 12, "full": 12}, {"sliding": 2 * 8 * 64 * 2, "full": 2 * 8 * 64 * 2}, 128),
    "deepseek-v3": (61, {"mla": 61}, {"mla": (512 + 64) * 2}, None),
}


def _check_by_layer(m: ModelSpec, name: str, L: int = 4096) -> None:
    n, kinds, pos, window = HAND[name]
    assert m.num_layers == n and m.kinds() == kinds
    rows = KVGeometry(m, "bf16").by_layer(L)
    for r in rows:
        assert r["position_bytes"] == pos[r["kind"]]
        positions = min(window, L) if r["kind"] == "sliding" else L
        assert r["positions"] == positions
        assert r["bytes"] == positions * pos[r["kind"]]


@pytest.mark.parametrize("name", sorted(HAND))
def test_shared_config_by_layer(shared_dir, name):
    m = spec_from_config(cfg(shared_dir, name), name=name, source="t")
    _check_by_layer(m, name)


@pytest.mark.parametrize("name", sorted(HAND))
def test_shared_config_through_gguf(shared_dir, tmp_path, name):
    from gguf_from_config import n_mtp

    path = write_gguf(cfg(shared_dir, name), tmp_path / f"{name}.gguf")
    m = load_model(path)
    # the converter appends the MTP (nextn) layers to block_count; llama.cpp's main
    # context keeps them out of its cache: 0 bytes each
    mtp = n_mtp(cfg(shared_dir, name))
    assert [l.kind for l in m.layers[len(m.layers) - mtp:]] == ["shared"] * mtp
    full = KVGeometry(m, "q8_0").by_layer(1000)
    assert all(r["bytes"] == 0 for r in full[len(full) - mtp:])
    m.layers = m.layers[: len(m.layers) - mtp]
    _check_by_layer(m, name)
    from_cfg = spec_from_config(cfg(shared_dir, name), name=name, source="t")
    assert KVGeometry(m, "q8_0").by_layer(1000) == KVGeometry(from_cfg, "q8_0").by_layer(1000)


def test_cases_configs_all_covered(shared_dir):
    names = {p.stem for p in (shared_dir / "cases" / "configs").glob("*.json")}
    assert names <= set(HAND), names - set(HAND)


# ----------------------------------------------------------------------------- sliding patterns

def test_gemma2_alternation():
    m = load_model(DATA / "gemma-2-9b.json")
    assert [l.kind for l in m.layers[:4]] == ["sliding", "full", "sliding", "full"]
    assert m.kinds() == {"sliding": 21, "full": 21}
    g = KVGeometry(m, "bf16")
    per = 2 * 8 * 256 * 2
    assert g.slot_bytes(8192) == 21 * 8192 * per + 21 * 4096 * per


def test_gemma3_every_sixth_global():
    m = load_model(DATA / "gemma-3-1b.json")
    assert [i for i, l in enumerate(m.layers) if l.kind == "full"] == [5, 11, 17, 23]
    per = 2 * 1 * 256 * 2
    assert KVGeometry(m, "bf16").slot_bytes(32768) == 4 * 32768 * per + 22 * 512 * per


def test_gemma3_multimodal_text_config_unwrapped():
    inner = json.loads((DATA / "gemma-3-1b.json").read_text())
    m = spec_from_config({"model_type": "gemma3", "text_config": inner, "torch_dtype": "bfloat16"}, name="g", source="t")
    assert m.kinds() == {"sliding": 22, "full": 4}


def test_mistral_all_sliding_and_qwen2_max_window_layers():
    m = load_model("mistral-7b-v0.1")
    assert m.kinds() == {"sliding": 32} and m.layers[0].window == 4096
    base = {"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "sliding_window": 16}
    q = spec_from_config({**base, "use_sliding_window": True, "max_window_layers": 2}, name="q", source="t")
    assert [l.kind for l in q.layers] == ["full", "full", "sliding", "sliding"]


def test_kv_shared_layers_cost_zero():
    c = {"num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "num_kv_shared_layers": 2}
    m = spec_from_config(c, name="s", source="t")
    assert [l.kind for l in m.layers] == ["full"] * 4 + ["shared"] * 2
    g = KVGeometry(m, "bf16")
    assert [r["bytes"] for r in g.by_layer(10)][-2:] == [0, 0]
    assert g.slot_bytes(10) == 4 * 10 * 2 * 2 * 16 * 2


# ----------------------------------------------------------------------------- linear / hybrid

def test_qwen3_next_interval_and_state():
    m = load_model(DATA / "qwen3-next-80b-a3b.json")
    assert m.kinds() == {"linear": 36, "full": 12}
    assert [i for i, l in enumerate(m.layers) if l.kind == "full"] == list(range(3, 48, 4))
    lin = m.layers[0]
    conv_dim = 2 * 16 * 128 + 32 * 128  # q, k (16 heads × 128) and v (32 × 128)
    assert lin.conv_dim == conv_dim == 8192 and lin.conv_kernel == 4
    assert lin.ssm_values == 32 * 128 * 128
    assert lin.state_values == conv_dim * 3 + 32 * 128 * 128 == 548_864
    # contiguous (transformers) keeps all 4 conv columns in bf16, the recurrent state in f32
    g = KVGeometry(m, "bf16", state_format="bf16")
    rows = g.by_layer(4096)
    assert rows[0]["bytes"] == 8192 * 4 * 2 + 524_288 * 4 == 2_162_688
    assert rows[3]["bytes"] == 4096 * 2 * 2 * 256 * 2
    # same through layer_types
    c = json.loads((DATA / "qwen3-next-80b-a3b.json").read_text())
    c2 = dict(c, layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(48)])
    del c2["full_attention_interval"]
    assert spec_from_config(c2, name="q", source="t").layers == m.layers


def test_jamba_period_offset():
    m = load_model(DATA / "jamba-v0.1.json")
    assert [i for i, l in enumerate(m.layers) if l.kind == "full"] == [4, 12, 20, 28]
    lin = m.layers[0]
    d_inner = 2 * 4096
    assert lin.state_values == d_inner * 3 + d_inner * 16 == 155_648
    g = KVGeometry(m, "bf16")  # contiguous = transformers: conv in the model dtype (bf16), ssm f32
    assert g.by_layer(100)[0]["bytes"] == d_inner * 4 * 2 + d_inner * 16 * 4 == 589_824
    g = KVGeometry(m, "bf16", conv_format="fp32")  # each part can be overridden
    assert g.by_layer(100)[0]["bytes"] == (d_inner * 4 + d_inner * 16) * 4
    g = KVGeometry(m, "bf16", ssm_format="bf16")
    assert g.by_layer(100)[0]["bytes"] == (d_inner * 4 + d_inner * 16) * 2


def test_mamba2_all_linear():
    m = load_model(DATA / "mamba-codestral-7b.json")
    assert m.kinds() == {"linear": 64}
    conv_dim = 128 * 64 + 2 * 8 * 128
    assert m.layers[0].state_values == conv_dim * 3 + 128 * 64 * 128 == 1_079_296
    g = KVGeometry(m, "bf16")
    assert g.bytes_per_token() == 0
    assert g.slot_bytes(1) == g.slot_bytes(1_000_000)


def test_hybrid_through_gguf(tmp_path):
    for name in ("qwen3-next-80b-a3b", "jamba-v0.1", "gemma-2-9b", "gemma-3-1b", "mamba-codestral-7b"):
        c = json.loads((DATA / f"{name}.json").read_text())
        a = load_model(DATA / f"{name}.json")
        b = load_model(write_gguf(c, tmp_path / f"{name}.gguf"))
        from gguf_from_config import n_mtp

        b.layers = b.layers[: len(b.layers) - n_mtp(c.get("text_config", c))]  # the converter's MTP layers
        assert [l.kind for l in a.layers] == [l.kind for l in b.layers], name
        ga, gb = KVGeometry(a, "bf16"), KVGeometry(b, "bf16")
        assert ga.by_layer(5000) == gb.by_layer(5000), name


# ----------------------------------------------------------------------------- errors

def test_unreadable_pattern_names_fields():
    c = {"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "attn_layer_period": 2}
    with pytest.raises(ConfigError) as e:
        spec_from_config(c, name="x", source="t")
    assert "attn_layer_offset" in e.value.message and "attn_layer_period=2" in e.value.hint
    c = {"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "mamba_d_state": 16}
    with pytest.raises(ConfigError) as e:
        spec_from_config(c, name="x", source="t")
    assert "mamba_d_state=16" in e.value.hint
    c = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "layer_types": ["full_attention", "weird"]}
    with pytest.raises(ConfigError) as e:
        spec_from_config(c, name="x", source="t")
    assert "weird" in e.value.message and "layer_types=" in e.value.hint
    # A model type transformers does not know, with no layer pattern: refused, named.
    c = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "model_type": "gemma9",
         "sliding_window": 4096}
    with pytest.raises(ConfigError) as e:
        spec_from_config(c, name="x", source="t")
    assert "unknown model_type 'gemma9'" in e.value.message and "sliding_window=4096" in e.value.hint


# ----------------------------------------------------------------------------- properties

MODELS = ["gpt-oss-20b", "deepseek-v3", "qwen3-30b-a3b", "mistral-7b-v0.1"]
EXTRA = ["gemma-3-1b", "qwen3-next-80b-a3b", "jamba-v0.1"]
FORMATS = ["bf16", "fp8", "int8-f32scale", "q8_0", "q4_0", "fp8-f32scale"]


def _model(name: str) -> ModelSpec:
    return load_model(DATA / f"{name}.json") if name in EXTRA else load_model(name)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MODELS + EXTRA), st.sampled_from(FORMATS), st.integers(1, 200_000), st.integers(0, 5000))
def test_monotone_in_max_seq(name, fmt, L, d):
    g = KVGeometry(_model(name), fmt)
    assert g.slot_bytes(L) <= g.slot_bytes(L + d)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(MODELS + EXTRA), st.integers(1, 100_000), st.integers(0, 64))
def test_linear_in_slots(name, L, n):
    g = KVGeometry(_model(name), "bf16")
    assert g.slots_bytes(L, n) == n * g.slot_bytes(L)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["gpt-oss-20b", "qwen3-30b-a3b", "deepseek-v3", "llama-3.1-8b", "qwen3-32b"]),
       st.sampled_from([1, 2, 4, 8, 16]), st.integers(1, 50_000))
def test_tp_per_rank_times_ranks(name, tp, L):
    m = _model(name)
    whole = KVGeometry(m, "bf16").slot_bytes(L)
    per = KVGeometry(m, "bf16", tp=tp).slot_bytes(L)
    assert per * tp >= whole
    replicated = any(l.kind == "mla" or (l.num_kv_heads and l.num_kv_heads < tp) for l in m.layers)
    if not replicated:
        assert per * tp == whole


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4096), st.integers(1, 100_000))
def test_sliding_layer_stops_at_window(W, extra):
    layer = LayerSpec(kind="sliding", num_kv_heads=2, head_dim=64, v_head_dim=64, window=W)
    m = ModelSpec(name="s", source="t", layers=[layer])
    g = KVGeometry(m, "bf16")
    assert g.layer_bytes(0, W) == g.layer_bytes(0, W + extra) == W * 2 * 2 * 64 * 2


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["qwen3-next-80b-a3b", "jamba-v0.1"]), st.integers(1, 500_000), st.integers(1, 500_000))
def test_linear_layer_never_grows(name, a, b):
    m = _model(name)
    g = KVGeometry(m, "bf16")
    for i, l in enumerate(m.layers):
        if l.kind == "linear":
            assert g.layer_bytes(i, a) == g.layer_bytes(i, b) > 0


def test_global_layers_with_their_own_kv_shape():
    c = {"num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "sliding_window": 8, "sliding_window_pattern": 3,
         "global_head_dim": 32, "num_global_key_value_heads": 1}
    m = spec_from_config(c, name="g4", source="t")
    full = [l for l in m.layers if l.kind == "full"]
    assert len(full) == 2 and all((l.num_kv_heads, l.head_dim) == (1, 32) for l in full)
    assert all((l.num_kv_heads, l.head_dim) == (2, 16) for l in m.layers if l.kind == "sliding")


def test_nemotron_h_pattern_and_kimi_k2_mla():
    c = {"num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "hybrid_override_pattern": "M-M*-E", "mamba_num_heads": 8, "mamba_head_dim": 16,
         "ssm_state_size": 32, "n_groups": 2, "conv_kernel": 4}
    m = spec_from_config(c, name="nh", source="t")
    assert [l.kind for l in m.layers] == ["linear", "shared", "linear", "full", "shared", "shared"]
    assert m.layers[0].state_values == (8 * 16 + 2 * 2 * 32) * 3 + 8 * 16 * 32
    kimi = {"model_type": "kimi_k2", "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 64,
            "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}
    k = spec_from_config(kimi, name="k2", source="t")
    assert KVGeometry(k, "bf16").bytes_per_token() == 61 * 576 * 2 == 70_272


# ----------------------------------------------------------------------------- turn 2: T1-T4
# Right values from ../shared/cases/turn2/README.md (sized by transformers 5.24 itself:
# meta device, StaticCache, one forward); each is re-derived by hand below.


def test_t1_gemma3_class_defaults():
    """Gemma3TextConfig defaults: head_dim 256 and a sliding pattern of 6, so of 12 layers
    5 and 11 are full. 131,072 × 1, bf16: full 2 × (2 · 8 · 256 · 2 B) · 131,072 and
    sliding 10 × 8,192 B · min(1,024, 131,072)."""
    m = load_model(DATA / "gemma3-text-defaults.json")
    assert [i for i, l in enumerate(m.layers) if l.kind == "full"] == [5, 11]
    assert {l.head_dim for l in m.layers} == {256}
    row = 2 * 8 * 256 * 2
    assert KVGeometry(m, "bf16").slot_bytes(131_072) == 2 * row * 131_072 + 10 * row * 1024 == 2_231_369_728
    assert any("head_dim 256" in n and "Gemma3TextConfig defaults" in n for n in m.notes)


def test_a_config_that_states_no_size_is_refused_not_sized_from_class_defaults():
    """``{"model_type": "llama"}`` states no layer count and no width: LlamaConfig's defaults
    (32 layers of 4,096) would answer for a model that is not this one (the new-user trial got
    FITS from it). One of the two given is enough to size it with the rest defaulted, noted."""
    with pytest.raises(ConfigError, match="neither a layer count nor a width.*32 layers, hidden_size 4096"):
        spec_from_config({"model_type": "llama"}, name="t", source="test")
    m = spec_from_config({"model_type": "llama", "num_hidden_layers": 2}, name="t", source="test")
    assert m.num_layers == 2 and any("hidden_size 4096" in n for n in m.notes)
    m = spec_from_config({"model_type": "gpt2", "n_layer": 3, "n_embd": 64, "n_head": 4}, name="t", source="test")  # aliases are stated
    assert m.num_layers == 3


def test_t2_gpt2_attribute_aliases():
    """GPT-2's n_layer 12, n_head 12, n_embd 768 (attribute_map): head_dim 64.
    4,096 × 2: 2 · 12 layers · 2 (K, V) · 12 heads · 64 · 2 B · 4,096."""
    m = load_model(DATA / "gpt2.json")
    assert m.num_layers == 12 and m.layers[0].num_kv_heads == 12 and m.layers[0].head_dim == 64
    assert m.max_position_embeddings == 1024  # n_positions
    assert KVGeometry(m, "bf16").slots_bytes(4096, 2) == 2 * 12 * 2 * 12 * 64 * 2 * 4096 == 301_989_888


def test_t3_qwen35_conv_in_model_dtype_recurrent_in_fp32():
    """Qwen3.5-9B: 8 full layers (4 KV heads × 256) and 24 gated-delta-net layers with conv
    [B, 2·16·128 + 32·128 = 8192, 4] in bf16 and recurrent [B, 32, 128, 128] in fp32."""
    m = load_model(DATA / "qwen3.5-9b.json")
    assert m.kinds() == {"linear": 24, "full": 8}
    full = 8 * 2 * 4 * 256 * 2 * 4096
    linear = 24 * (8192 * 4 * 2 + 32 * 128 * 128 * 4)
    assert KVGeometry(m, "bf16").slots_bytes(4096, 2) == 2 * (full + linear) == 372_244_480
    # the old count (conv in fp32) is what an override to fp32 gives
    assert KVGeometry(m, "bf16", conv_format="fp32").slots_bytes(4096, 2) == 375_390_208


def test_t4_deepseek_v32_indexer_keys():
    """DeepSeek-V3.2: 61 MLA layers (512 + 64 latent) plus indexer keys [B, L, 128], all bf16."""
    m = load_model(DATA / "deepseek-v3.2.json")
    assert m.kinds() == {"mla": 61} and {l.index_dim for l in m.layers} == {128}
    assert KVGeometry(m, "bf16").slots_bytes(4096, 2) == 2 * 61 * (576 + 128) * 2 * 4096 == 703_594_496


def test_unknown_model_type_is_named_not_guessed():
    """A Gemma-2 config renamed gemma9: transformers has no class, no layer pattern: refused
    (it used to be counted all-sliding, 33% low)."""
    c = json.loads((DATA / "gemma-2-9b.json").read_text())
    c["model_type"] = "gemma9"
    with pytest.raises(ConfigError) as e:
        spec_from_config(c, name="g9", source="t")
    assert "gemma9" in e.value.message
    # with its layer pattern stated, the raw JSON is read, with a note
    c["layer_types"] = ["sliding_attention", "full_attention"] * 21
    m = spec_from_config(c, name="g9", source="t")
    assert m.kinds() == {"sliding": 21, "full": 21}
    assert any("'gemma9' is not in transformers" in n for n in m.notes)


def test_unknown_and_refused_layer_types():
    c = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
         "layer_types": ["full_attention", "hybrid_sliding"]}
    with pytest.raises(ConfigError) as e:
        spec_from_config(c, name="x", source="t")
    assert "'hybrid_sliding'" in e.value.message
    with pytest.raises(ConfigError) as e:
        load_model(DATA / "deepseek-v4-flash.json")
    assert "compressed_sparse_attention" in e.value.message


def test_lfm2_conv_only_layers():
    """LFM2 ``conv`` layers: conv state [B, hidden 2048, conv_L_cache 3] in bf16, nothing else
    (modeling_lfm2.py Lfm2ShortConv); 6 full-attention layers of 8 × 64."""
    m = load_model(DATA / "lfm2-1.2b-reconstructed.json")
    assert m.kinds() == {"linear": 10, "full": 6}
    conv = next(l for l in m.layers if l.kind == "linear")
    assert (conv.mixer, conv.conv_dim, conv.conv_kernel, conv.ssm_values) == ("conv", 2048, 3, 0)
    g = KVGeometry(m, "bf16")
    assert g.layer_bytes(0, 100) == 2048 * 3 * 2
    assert g.slot_bytes(100) == 10 * 2048 * 3 * 2 + 6 * 2 * 8 * 64 * 2 * 100


def test_kv_sharing_layers_cost_nothing():
    m = load_model(DATA / "gemma3n-kv-sharing-reconstructed.json")
    assert m.kinds()["shared"] == 10 and all(l.kind == "shared" for l in m.layers[20:])


def test_heterogeneous_gemma4_per_layer_shapes():
    """Gemma-4 26B-A4B (per_layer_config): sliding layers 8 KV heads × 256, global layers
    2 KV heads × 512 (transformers' per-layer view)."""
    m = load_model(DATA / "gemma-4-26b-a4b.json")
    sl = {(l.num_kv_heads, l.head_dim) for l in m.layers if l.kind == "sliding"}
    fu = {(l.num_kv_heads, l.head_dim) for l in m.layers if l.kind == "full"}
    assert sl == {(8, 256)} and fu == {(2, 512)}


def test_config_with_infinity_loads():
    """Mamba-2 configs publish ``time_step_limit: [0.0, Infinity]``; transformers reads it."""
    m = load_model(DATA / "mamba-codestral-7b.json")
    assert m.kinds() == {"linear": 64}


def test_falcon_h1_hybrid_layer_holds_kv_and_mamba2_state():
    """Falcon-H1 ``hybrid`` layers: K, V (2 KV heads × 64) and a Mamba-2 state in the same
    layer: conv [B, 1536 + 2·1·128 = 1792, 4] bf16 and recurrent [B, 24, 64, 128] fp32
    (modeling_falcon_h1.py FalconH1Mixer: conv_dim = intermediate + 2·groups·d_state)."""
    m = load_model(DATA / "falcon-h1-0.5b-reconstructed.json")
    l0 = m.layers[0]
    assert (l0.kind, l0.num_kv_heads, l0.head_dim, l0.conv_dim, l0.conv_kernel) == ("full", 2, 64, 1792, 4)
    g = KVGeometry(m, "bf16")
    assert g.layer_bytes(0, 1000) == 2 * 2 * 64 * 2 * 1000 + 1792 * 4 * 2 + 24 * 64 * 128 * 4
    with pytest.raises(ConfigError) as e:
        spec_from_config({"model_type": "zamba2", "num_hidden_layers": 2, "hidden_size": 64,
                          "num_attention_heads": 4, "layers_block_type": ["mamba", "hybrid"]}, name="z", source="t")
    assert "zamba2" in e.value.message


def test_kimi_linear_kda_and_mla():
    """Kimi-Linear: 7 MLA layers (512 + 64) and 20 KDA layers, each with one conv over q, k, v
    [B, 3 · 32 · 128, 4] bf16 and a recurrent state [B, 32, 128, 128] fp32
    (modeling_kimi_linear.py KimiDeltaAttention: conv_dim = 3 · qkv_dim)."""
    m = load_model(DATA / "kimi-linear-48b-a3b-reconstructed.json")
    assert [i for i, l in enumerate(m.layers) if l.kind == "mla"] == [3, 7, 11, 15, 19, 23, 26]
    g = KVGeometry(m, "bf16")
    assert g.slot_bytes(1000) == 7 * 576 * 2 * 1000 + 20 * (3 * 32 * 128 * 4 * 2 + 32 * 128 * 128 * 4)
