"""Engine layouts: vLLM pages and log figures, llama.cpp contexts, and the recorded
transformers cache bytes (benchmarks/hf_cache_bytes.py) against ``contiguous``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvgate.engines.llamacpp.pool import pad256
from kvgate.geometry import (
    VLLM,
    Contiguous,
    GeometryError,
    KVGeometry,
    LlamaCpp,
    get_layout,
    layout_from_options,
    vllm_kv_cache_report,
)
from kvgate.model import load_model, spec_from_config

MiB, GiB = 2**20, 2**30
DATA = Path(__file__).parent / "data"


def model(name: str):
    p = DATA / "configs" / f"{name}.json"
    return load_model(p if p.exists() else name)


# ----------------------------------------------------------------------------- vLLM

def test_vllm_case2_llama31_8b_blocks():
    g = KVGeometry(model("llama-3.1-8b"), "bf16", layout=get_layout("vllm"))
    assert g.bytes_per_token() == 131_072 and g.block_bytes(16) == 2 * MiB
    r = vllm_kv_cache_report(g, 1952 * 2 * MiB, 8192)
    assert r["num_blocks"] == 1952 and r["num_blocks"] * r["pool_bytes_per_block"] == int(3.8125 * GiB)
    r = vllm_kv_cache_report(g, 1478 * 2 * MiB, 8192)
    assert r["gpu_kv_cache_tokens"] == r["gpu_kv_cache_tokens_v0_10"] == 23_648
    assert r["log_lines"][1] == "Maximum concurrency for 8,192 tokens per request: 2.89x"
    # one less byte than 1,478 blocks gives 1,477 blocks
    assert vllm_kv_cache_report(g, 1478 * 2 * MiB - 1, 8192)["num_blocks"] == 1477


def test_vllm_case4_tp_divides_pages():
    g = KVGeometry(model("qwen3-32b"), "bf16", tp=4, layout=get_layout("vllm"))
    assert g.bytes_per_token() == 65_536
    whole = KVGeometry(model("qwen3-32b"), "bf16", layout=get_layout("vllm"))
    avail = 3258 * 16 * 65_536
    assert vllm_kv_cache_report(g, avail, 4096)["num_blocks"] == 3258
    assert vllm_kv_cache_report(whole, avail, 4096)["num_blocks"] == 814


def test_vllm_blocks_round_up_per_layer():
    g = KVGeometry(model("llama-3.1-8b"), "bf16", layout=VLLM(block_size=16))
    assert g.slot_bytes(17) == 32 * 2 * 16 * 4096  # 2 blocks of 16 positions
    assert g.slot_bytes(16) == 32 * 16 * 4096


def test_vllm_sliding_window_blocks():
    lay = VLLM(block_size=16, max_num_batched_tokens=2048)
    g = KVGeometry(model("gpt-oss-20b"), "bf16", layout=lay)
    sw = next(l for l in g.model.layers if l.kind == "sliding")
    assert g.layout.blocks(sw, 131_072) == -(-(128 - 1 + 2048) // 16) + 1 == 137
    assert g.layout.blocks(sw, 100) == -(-100 // 16) + 1 == 8
    r = vllm_kv_cache_report(g, 10 * GiB, 131_072)
    assert [(x["kind"], x["layers"], x["blocks_per_request"]) for x in r["groups"]] == [
        ("sliding", 12, 137), ("full", 12, 8192)]
    page = 16 * 2 * 8 * 64 * 2
    assert r["num_blocks"] == 10 * GiB // page // 12
    assert r["max_concurrency"] == r["num_blocks"] / (137 + 8192)
    assert r["gpu_kv_cache_tokens"] == int(r["num_blocks"] / 8329 * 131_072)
    assert r["gpu_kv_cache_tokens_v0_10"] == r["num_blocks"] // 2 * 16
    full = KVGeometry(model("gpt-oss-20b"), "bf16", layout=VLLM(disable_hybrid_kv_cache_manager=True))
    assert vllm_kv_cache_report(full, 10 * GiB, 131_072)["groups"][0]["layers"] == 24


def test_vllm_mla_page():
    g = KVGeometry(model("deepseek-v3"), "bf16", layout=VLLM())
    r = vllm_kv_cache_report(g, 100 * GiB, 163_840)
    assert r["groups"][0]["page_bytes"] == 16 * (512 + 64) * 2 == 18_432
    assert r["num_blocks"] == 100 * GiB // 18_432 // 61


def test_vllm_gemma3_group_padding():
    g = KVGeometry(model("gemma-3-1b"), "bf16", layout=VLLM(max_num_batched_tokens=8192))
    r = vllm_kv_cache_report(g, 4 * GiB, 32_768)
    # 22 sliding + 4 full: group size 4 -> 6 sliding groups (2 padding layers) + 1 full group
    kinds = [(x["kind"], x["layers"], x["padding_layers"]) for x in r["groups"]]
    assert kinds.count(("sliding", 4, 0)) == 4 and kinds.count(("sliding", 3, 1)) == 2
    assert ("full", 4, 0) in kinds and len(kinds) == 7
    assert r["num_blocks"] == 4 * GiB // (16 * 1024) // 4


def test_vllm_hybrid_mamba_page_padding():
    """Qwen3-Next: vLLM logs 'Setting attention block size to 544 tokens' and pads the
    Mamba page by 1.49% (bf16, TP 1); 272 tokens at TP 4."""
    m = model("qwen3-next-80b-a3b")
    g = KVGeometry(m, "bf16", layout=VLLM())
    full = next(l for l in m.layers if l.kind == "full")
    lin = m.layers[0]
    assert g.layout.block_of(full) == 544
    raw = (8192 * 3 + 32 * 128 * 128) * 2
    padded = 544 * 2 * 2 * 256 * 2
    assert raw == 1_097_728 and padded == 1_114_112
    assert round(100 * (padded - raw) / raw, 2) == 1.49
    assert g.layer_bytes(0, 8192) == padded and g.layer_bytes(0, 8192) == g.layer_bytes(0, 1)
    r = vllm_kv_cache_report(g, 20 * GiB, 8192)
    assert [(x["kind"], x["layers"]) for x in r["groups"]] == [("linear", 12)] * 3 + [("full", 12)]
    assert r["num_blocks"] == 20 * GiB // padded // 12
    assert r["blocks_per_request"] == 3 + -(-8192 // 544)
    g4 = KVGeometry(m, "bf16", tp=4, layout=VLLM())
    assert g4.layout.block_of(full) == 272
    assert lin.kind == "linear"


def test_vllm_fp8_per_token_head_scales():
    g = KVGeometry(model("llama-3.1-8b"), "fp8-f32scale", layout=VLLM())
    # AttentionSpec.page_size_bytes: 2·B·h·d·1 + 2·B·h·4
    assert g.block_bytes(16) == 32 * (2 * 16 * 8 * 128 + 2 * 16 * 8 * 4)


# ----------------------------------------------------------------------------- llama.cpp

def test_llamacpp_context_padding_and_streams():
    lay = LlamaCpp(n_seq=4)
    assert lay.contexts(1000) == (4096, 1024, 4)
    assert LlamaCpp(n_seq=4, unified=True).contexts(1000) == (4096, 4096, 1)
    assert LlamaCpp().contexts(13000) == (13056, 13056, 1)
    g = KVGeometry(model("llama-3.1-8b"), "fp16", layout=lay)
    assert g.slot_bytes(1000) == 1024 * 131_072
    assert lay.cache_bytes(g, 1000) == 4096 * 131_072


def test_llamacpp_iswa_rule():
    m = model("gpt-oss-20b")
    sw = next(l for l in m.layers if l.kind == "sliding")
    assert LlamaCpp(n_seq=4).cells(sw, 1000) == pad256(min(1024, 128 + 512)) * 4 == 3072
    assert LlamaCpp(n_seq=4, unified=True).cells(sw, 1000) == pad256(min(4096, 128 * 4 + 512)) == 1024
    assert LlamaCpp(n_seq=4, swa_full=True).cells(sw, 1000) == 4096
    assert LlamaCpp(n_ubatch=2048).cells(sw, 65_536) == pad256(128 + 2048) == 2304


def test_llamacpp_mla_q8_0_case6():
    g = KVGeometry(model("deepseek-v3"), "q8_0", layout=LlamaCpp())
    assert g.slot_bytes(32_768) / MiB == 1166.625


def test_llamacpp_recurrent_state_f32():
    m = model("qwen3-next-80b-a3b")
    g = KVGeometry(m, "q8_0", layout=LlamaCpp(n_seq=2))
    assert g.layer_bytes(0, 4096) == 548_864 * 4  # (n_embd_r + n_embd_s) × f32
    assert g.layout.cache_bytes(g, 4096) == 36 * 2 * 548_864 * 4 + 12 * 8192 * g.position_bytes(3)


# ----------------------------------------------------------------------------- options

def test_layout_from_options():
    assert isinstance(layout_from_options("vllm", block_size=32), VLLM)
    assert layout_from_options("vllm", block_size=32).block_size == 32
    lc = layout_from_options("llama.cpp", n_seq=8, unified=True, swa_full=True, n_ubatch=256)
    assert (lc.n_seq, lc.unified, lc.swa_full, lc.n_ubatch) == (8, True, True, 256)
    assert layout_from_options(None, sliding_full=True) == Contiguous(sliding_full=True)
    with pytest.raises(GeometryError, match="--block-size"):
        layout_from_options("llama.cpp", block_size=16)
    with pytest.raises(GeometryError, match="unknown layout"):
        layout_from_options("tgi")
    with pytest.raises(GeometryError):
        layout_from_options("vllm", block_size=0)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["vllm", "llama.cpp", "contiguous"]),
       st.sampled_from(["gpt-oss-20b", "deepseek-v3", "llama-3.1-8b", "qwen3-next-80b-a3b", "gemma-3-1b"]),
       st.integers(1, 100_000), st.integers(0, 5000))
def test_layouts_monotone_and_at_least_contiguous(layout, name, L, d):
    m = model(name)
    g = KVGeometry(m, "bf16", layout=get_layout(layout))
    assert g.slot_bytes(L) <= g.slot_bytes(L + d)
    c = KVGeometry(m, "bf16")
    for i, l in enumerate(m.layers):
        if l.kind in ("full", "mla"):  # engines round full layers up, never down
            assert g.layer_bytes(i, L) >= c.layer_bytes(i, L)


# ----------------------------------------------------------------------------- transformers

def _fixture() -> Path:
    dev = DATA / "hf_cache_bytes.json"  # recorded on an H200 (the lead commits it)
    return dev


def _records():
    doc = json.loads(_fixture().read_text())
    return [(doc, r) for r in doc["models"]]


def _mla_decompressed(cfg: dict, L: int, batch: int, dtype_bytes: int) -> int:
    """transformers 4.x DeepSeek attention cached decompressed K (nope + rope per head) and
    V (v_head_dim per head) for every head: the documented alternative (geometry.Contiguous)."""
    heads = cfg["num_attention_heads"]
    return batch * L * heads * (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"] + cfg["v_head_dim"]) * dtype_bytes


@pytest.mark.parametrize("doc,rec", _records(), ids=lambda x: x.get("name", "doc") if isinstance(x, dict) else str(x))
def test_contiguous_equals_transformers_cache_bytes(doc, rec):
    """Every recorded layer equals kvgate's contiguous bytes, or one of the differences
    documented in ``kvgate.geometry.Contiguous`` (MLA decompressed in transformers 4.x;
    recurrent state in the model dtype instead of float32)."""
    if not rec.get("ok"):
        pytest.skip(f"{rec['name']}: transformers could not build it: {rec.get('error')}")
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from hf_cache_bytes import MODELS, _reduce

    path, overrides, min_layers = MODELS[rec["name"]]
    assert rec["overrides"] == overrides
    cfg = _reduce(json.loads(path.read_text()), overrides, doc["max_layers"], min_layers)
    assert cfg["num_hidden_layers"] == rec["layers"]
    fmt = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[doc["dtype"]]
    spec = spec_from_config(cfg, name=rec["name"], source="t")
    g = KVGeometry(spec, fmt, state_format=fmt)
    g_same = KVGeometry(spec, fmt, state_format=fmt, layout=Contiguous(ssm_format=fmt))
    if "model default" in rec.get("cache_class", ""):
        pytest.skip(f"{rec['name']}: StaticCache not usable in transformers {doc['transformers']}; attention not comparable")
    L, B = doc["max_cache_len"], doc["batch"]
    dtype_bytes = {"bf16": 2, "fp16": 2, "fp32": 4}[fmt]
    for row in rec["per_layer"]:
        i, hf = row["layer"], row["hf_bytes"]
        allowed = {B * g.layer_bytes(i, L)}
        if row["kind"] == "mla":
            allowed.add(_mla_decompressed(cfg, L, B, dtype_bytes))
        if row["kind"] == "linear":
            allowed.add(B * g_same.layer_bytes(i, L))
        assert hf in allowed, (rec["name"], row)


def test_case9_qwen3_30b_a3b_static_cache_when_recorded():
    """cases/README.md #9: StaticCache bf16, max_cache_len 8192, batch 1 → 805,306,368 B."""
    doc = json.loads(_fixture().read_text())
    rec = next((r for r in doc["models"] if r["name"] == "qwen3-30b-a3b" and r.get("ok")), None)
    if rec is None or doc["max_cache_len"] != 8192 or rec["layers"] != 48 or doc["dtype"] != "bfloat16":
        pytest.skip("fixture is not the full-size 8192-token record (CPU stand-in)")
    assert rec["hf_total"] == doc["batch"] * 805_306_368
    g = KVGeometry(load_model("qwen3-30b-a3b"), "bf16")
    assert g.slots_bytes(8192, 4) == 3_221_225_472


def test_llamacpp_flash_attn_off_pads_v_L2():
    """L2: Gemma-4-12B, ``-c 4096 -np 1``, f16. Sliding layers: 8 KV heads × 256; full
    layers: 1 KV head × 512 (K = V width 512). FA on: 40 × 2·8·256·2 + 8 × 2·512·2 =
    344,064 B/token. FA off: V padded to n_embd_v_gqa_max = 8 × 256 = 2,048 values, so a
    full layer costs 512·2 + 2048·2 = 5,120 B: 368,640 B/token; the non-SWA cache
    4,096 cells × 8 layers × 5,120 = 160 MiB (llama.cpp's "160.00 MiB (4096 cells, 8
    layers, 1 seqs)"); SWA cache pad256(min(4096, 1024 + 512)) = 1,536 cells × 40 × 8,192.
    Whole: 167,772,160 + 503,316,480 = 671,088,640 B."""
    from kvgate.geometry import LlamaCpp
    from kvgate.model import load_model

    m = load_model("/work/shared/cases/turn2/gemma-4-12b-it.json")
    off = KVGeometry(m, "fp16", layout=LlamaCpp(flash_attn="off"))
    assert off.bytes_per_token() == 368_640
    parts = off.layout.cache_parts(off, 4096)
    assert parts["k"] + parts["v"] == 160 * 2**20
    assert off.layout.cache_bytes(off, 4096) == 671_088_640
    for fa in ("on", "auto"):  # auto allocates as on (cparams.flash_attn set before create_memory)
        assert KVGeometry(m, "fp16", layout=LlamaCpp(flash_attn=fa)).bytes_per_token() == 344_064


def test_vllm_qwen35_ssm_dtype_and_old_token_line_V1():
    """V1: Qwen3.5-2B, vLLM 0.17.1, bf16, L = 262,144, available 5.95 GiB. Mamba page =
    conv 6,144 × 3 × 2 B (bf16) + SSM 16 × 128 × 128 × 4 B (mamba_ssm_dtype float32) =
    36,864 + 1,048,576 = 1,085,440 B; attention 2 × 256 × 2 × 2 = 2,048 B/token, so the
    block is 16 × cdiv(1,085,440, 16 × 2,048) = 544 and the page 1,114,112 B. 18 linear +
    6 full layers → 4 groups of 6: num_blocks = int(5.95 GiB) // 1,114,112 // 6 = 955.
    0.17.1 prints 955 // 4 × 544 = 129,472 tokens; concurrency 955 / (482 + 3) = 1.97x."""
    from kvgate.geometry import VLLM, vllm_kv_cache_report
    from kvgate.model import load_model

    m = load_model("/work/shared/cases/turn2/qwen3.5-2b.json")
    g = KVGeometry(m, "bf16", layout=VLLM(version="0.17.1"))
    r = vllm_kv_cache_report(g, int(5.95 * 2**30), 262_144)
    assert r["num_blocks"] == 955 and r["groups"][-1]["block_size"] == 544
    assert r["gpu_kv_cache_tokens"] == 129_472 and f"{r['max_concurrency']:.2f}" == "1.97"


def test_vllm_eagle_draft_joins_pool_V2():
    """V2 (vllm-project/vllm #19996): Llama-3.1-8B + a one-layer EAGLE draft, bf16,
    L = 131,072, available 51.63 GiB. 33 layers × 16 × 8 × 128 × 2 × 2 = 65,536 B pages:
    num_blocks = int(51.63 GiB) // 65,536 // 33 = 25,633; 25,633 / 8,192 = 3.13x;
    int(3.129 × 131,072) = 410,128 tokens."""
    from kvgate.geometry import VLLM, vllm_kv_cache_report
    from kvgate.model import load_model

    d = "/work/shared/cases/turn2/"
    spec = {"method": "eagle", "model": d + "eagle-llama3.1-8b-draft.json", "num_speculative_tokens": 3}
    g = KVGeometry(load_model(d + "llama-3.1-8b.json"), "bf16", layout=VLLM(speculative_config=spec))
    r = vllm_kv_cache_report(g, int(51.63 * 2**30), 131_072)
    assert r["draft_layers"] == 1 and r["num_blocks"] == 25_633
    assert r["gpu_kv_cache_tokens"] == 410_128 and f"{r['max_concurrency']:.2f}" == "3.13"
