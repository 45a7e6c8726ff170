"""Layer specs (kvgate.geometry.specs): each kind's bytes, worked by hand from config fields."""

from dataclasses import dataclass

import pytest

from kvgate.geometry import VLLM, Contiguous, GeometryError, KVGeometry, LlamaCpp, get_format
from kvgate.geometry.specs import (
    ChunkedLocal,
    FullAttention,
    LayerKind,
    MLAAttention,
    NoCache,
    RecurrentState,
    SlidingWindow,
    spec_of,
)
from kvgate.model import LayerSpec, ModelSpec, load_model

BF16, FP16, FP32, FP8 = (get_format(n) for n in ("bf16", "fp16", "fp32", "fp8"))
INT8 = get_format("int8-f32scale")

# Qwen3-30B-A3B: num_key_value_heads 4, head_dim 128
QWEN3_30B = FullAttention(num_kv_heads=4, head_dim=128, v_head_dim=128)
# Qwen3-Next-80B-A3B linear attention: 16 key heads × 128, 32 value heads × 128, kernel 4
QWEN3_NEXT = RecurrentState(conv_dim=2 * 16 * 128 + 32 * 128, conv_kernel=4, ssm_values=32 * 128 * 128,
                            state_values=8192 * 3 + 32 * 128 * 128, state_heads=32, mixer="gated_delta_net")


def test_full_attention_int8_f32scale_is_the_write_ups_mirror():
    # int8 K and V rows of 4 × 128 values, one f32 scale per head for each
    assert QWEN3_30B.position_bytes(INT8, INT8, 1) == 2 * 512 + 8 * 4 == 1056
    g = KVGeometry(load_model("qwen3-30b-a3b"), "int8-f32scale")
    assert g.specs[0] == QWEN3_30B
    assert g.slot_bytes(8192) == 48 * 8192 * (2 * 512 + 8 * 4) == 415_236_096


def test_tp_splits_kv_heads_and_replicates_below_one_head():
    spec = FullAttention(num_kv_heads=8, head_dim=128, v_head_dim=128)
    assert spec.position_bytes(BF16, BF16, 1) == 2 * 8 * 128 * 2 == 4096
    assert spec.position_bytes(BF16, BF16, 4) == 2 * 2 * 128 * 2 == 1024
    assert spec.position_bytes(BF16, BF16, 16) == 2 * 1 * 128 * 2 == 512  # one head per rank, replicated
    with pytest.raises(GeometryError, match="does not divide the 8 KV heads"):
        spec.position_bytes(BF16, BF16, 3)


def test_k_and_v_formats_may_differ():
    spec = FullAttention(num_kv_heads=8, head_dim=128, v_head_dim=128)
    assert spec.k_bytes(FP8, 1) + spec.v_bytes(BF16, 1) == spec.position_bytes(FP8, BF16, 1) == 1024 + 2048
    # q8_0 K: 1,024 values / 32 × 34 B; f16 V
    assert spec.position_bytes(get_format("q8_0"), FP16, 1) == 1024 // 32 * 34 + 2048 == 3136
    # a V head dim of its own (DeepSeek without MLA keys: K 192, V 128 per head)
    assert FullAttention(num_kv_heads=16, head_dim=192, v_head_dim=128).position_bytes(BF16, BF16, 1) == \
        16 * 192 * 2 + 16 * 128 * 2


def test_mla_latent_and_indexer_keys_in_k_format_not_split():
    # DeepSeek-V3: kv_lora_rank 512 + qk_rope_head_dim 64; V3.2 indexer: index_head_dim 128
    mla = MLAAttention(latent_dim=512 + 64)
    assert mla.position_bytes(BF16, FP32, 1) == 576 * 2 == 1152  # no V: the V format is unused
    assert mla.position_bytes(BF16, BF16, 8) == 1152  # replicated on every rank
    dsa = MLAAttention(latent_dim=576, index_dim=128)
    assert dsa.position_bytes(BF16, BF16, 1) == 1152 + 256
    assert dsa.latent_bytes(BF16) == 1152


def test_recurrent_state_parts_tp_and_conv_columns():
    st = QWEN3_NEXT
    assert st.position_bytes(BF16, BF16, 1) == 0
    # vLLM / llama.cpp keep conv_kernel − 1 = 3 columns: (8192 × 3 + 32 × 128 × 128) values
    assert st.state_bytes(BF16, BF16, 1) == (8192 * 3 + 32 * 128 * 128) * 2 == 1_097_728
    assert st.conv_bytes(FP32, 1) == 8192 * 3 * 4 and st.ssm_bytes(FP32, 1) == 524_288 * 4
    # transformers keeps all conv_kernel columns, the recurrent state in fp32
    assert st.state_bytes(BF16, FP32, 1, conv_columns=4) == 8192 * 4 * 2 + 524_288 * 4
    # TP 4: 8 of the 32 heads per rank, conv channels alike
    assert st.values_per_rank(4) == (8192 * 3 // 4, 524_288 // 4)
    with pytest.raises(GeometryError):
        st.values_per_rank(3)
    # a record of state_values alone is all recurrent state
    assert RecurrentState(state_values=1000).state_bytes(BF16, FP32, 1) == 4000
    # LFM2 short conv (hidden 2048, conv_L_cache 3): no recurrent part
    assert RecurrentState(conv_dim=2048, conv_kernel=3, state_values=4096).state_bytes(BF16, FP32, 1) == 4096 * 2


def test_no_cache_and_zero_width_attention():
    assert NoCache().position_bytes(BF16, BF16, 1) == 0
    assert NoCache().with_v_padding(2048) == NoCache()
    nop = NoCache(head_dim=128, v_head_dim=128)  # a GGUF's head_count_kv 0 attention layer
    assert nop.zero_width and nop.position_bytes(FP16, FP16, 1) == 0
    assert nop.with_v_padding(2048).position_bytes(FP16, FP16, 1) == 2048 * 2


def test_fa_off_v_padding_is_a_conversion_of_the_spec():
    # Gemma-4 style: sliding 8 × 256, full 1 × 512; -fa off stores V at n_embd_v_gqa_max = 2,048
    wide = FullAttention(num_kv_heads=1, head_dim=512, v_head_dim=512)
    assert wide.position_bytes(FP16, FP16, 1) == 2048
    assert wide.with_v_padding(2048).position_bytes(FP16, FP16, 1) == 512 * 2 + 2048 * 2 == 5120
    m = ModelSpec("m", "test", [LayerSpec(kind="full", num_kv_heads=8, head_dim=256, v_head_dim=256),
                                LayerSpec(kind="full", num_kv_heads=1, head_dim=512, v_head_dim=512)])
    on = KVGeometry(m, "fp16", layout=LlamaCpp(flash_attn="on"))
    off = KVGeometry(m, "fp16", layout=LlamaCpp(flash_attn="off"))
    assert on.bytes_per_token() == 8192 + 2048
    assert off.bytes_per_token() == (4096 + 4096) + (1024 + 4096) == 13_312
    assert off.specs == on.specs and off.specs[1].v_padded_width is None  # the model's specs stay
    assert [s.v_padded_width for s in off.engine_specs] == [2048, 2048]


def test_hybrid_manager_off_turns_sliding_into_full():
    kv = {"num_kv_heads": 8, "head_dim": 64, "v_head_dim": 64}
    sw, ch, full = SlidingWindow(window=128, **kv), ChunkedLocal(window=8192, **kv), FullAttention(**kv)
    assert sw.at_full_length() == full and ch.at_full_length() == full and full.at_full_length() is full
    assert sw.position_bytes(BF16, BF16, 1) == full.position_bytes(BF16, BF16, 1)
    assert VLLM(disable_hybrid_kv_cache_manager=True).engine_spec(sw) == full
    assert VLLM().engine_spec(sw) is sw
    # vLLM blocks at L = 131,072, B = 16: the window's cdiv(128 − 1 + 2048, 16) + 1 against cdiv(L, 16)
    assert VLLM().blocks(sw, 131_072) == 137
    assert VLLM(disable_hybrid_kv_cache_manager=True).blocks(sw, 131_072) == 8192
    assert VLLM().blocks(ch, 131_072) == -(-(8192 + 2048) // 16)


def test_equal_specs_group_and_kinds_are_types():
    a = LayerSpec(kind="sliding", num_kv_heads=8, head_dim=64, window=128)
    b = LayerSpec(kind="sliding", num_kv_heads=8, head_dim=64, v_head_dim=64, window=128)
    assert spec_of(a) == spec_of(b) and hash(spec_of(a)) == hash(spec_of(b))
    assert spec_of(a) != FullAttention(num_kv_heads=8, head_dim=64, v_head_dim=64)
    g = KVGeometry(load_model("gpt-oss-20b"), "bf16")
    groups = {}
    for i, s in enumerate(g.specs):
        groups.setdefault(s, []).append(i)
    assert sorted((type(s).__name__, len(v)) for s, v in groups.items()) == [("FullAttention", 12),
                                                                          ("SlidingWindow", 12)]
    assert type(spec_of(LayerSpec(kind="sliding", num_kv_heads=8, head_dim=64, window=8192, chunked=True))) \
        is ChunkedLocal
    assert type(spec_of(LayerSpec(kind="linear", conv_dim=8, conv_kernel=4))) is RecurrentState
    hybrid = spec_of(LayerSpec(kind="full", num_kv_heads=2, head_dim=64, conv_dim=8, conv_kernel=4, ssm_values=16))
    assert isinstance(hybrid, FullAttention) and hybrid.recurrent == RecurrentState(conv_dim=8, conv_kernel=4,
                                                                                     ssm_values=16)


def test_a_layout_without_a_rule_refuses_the_kind():
    @dataclass(frozen=True, kw_only=True)
    class Compressed(LayerKind):
        kind = "compressed"

    with pytest.raises(GeometryError, match="no rule for Compressed"):
        Contiguous().positions(Compressed(), 100)


def test_bind_returns_a_fitted_copy_and_leaves_the_layout_alone():
    lay = VLLM()
    g = KVGeometry(load_model("tests/data/configs/qwen3-next-80b-a3b.json"), "bf16", layout=lay)
    assert g.layout is not lay and g.layout.block_of(g.specs[3]) == 544
    assert lay.block_of(g.specs[3]) == 16 and lay._hybrid_block is None
