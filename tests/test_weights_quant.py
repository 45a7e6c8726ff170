"""Weights priced tensor by tensor from config.json and its quantization_config
(kvgate.model.quant), checked against published checkpoints' index ``total_size``
(sources in tests/data/configs/SOURCES.md and in each preset's ``kvgate_checkpoint``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvgate.model import ConfigError, load_model, preset_config
from kvgate.model.quant import linear_bytes, priced, scheme_from_config, should_convert
from kvgate.model.weights import estimate_weight_bytes, weight_bytes

CONFIGS = Path(__file__).parent / "data" / "configs"


def _cfg(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def test_gpt_oss_20b_mxfp4_matches_the_published_index_total():
    # openai/gpt-oss-20b model.safetensors.index.json metadata.total_size 13,761,264,768
    # (experts in MXFP4 blocks + e8m0 scales; attention, router, embeddings, lm_head in bf16)
    wb = estimate_weight_bytes(load_model("gpt-oss-20b").config, raw=preset_config("gpt-oss-20b")[1])
    assert not wb.exact and wb.bytes == 13_761_264_768
    assert "MXFP4" in wb.notes[0]


def test_gpt_oss_120b_mxfp4_matches_the_published_index_total():
    # openai/gpt-oss-120b: 65,248,815,744 B of tensors (SOURCES.md)
    assert weight_bytes(CONFIGS / "gpt-oss-120b.json").bytes == 65_248_815_744


def test_deepseek_r1_awq_matches_the_published_index_total():
    # a DeepSeek-R1 AWQ checkpoint's index (74 shards): 364,589,799,936 B. AWQ 4-bit: qweight,
    # qzeros, fp16 scales per group of 64; routers, norms, embeddings, lm_head in float16
    assert weight_bytes(CONFIGS / "deepseek-r1-awq-reconstructed.json").bytes == 364_589_799_936


def test_awq_group_size_changes_the_answer():
    cfg = _cfg("deepseek-r1-awq-reconstructed")
    g64 = priced(cfg, 2).total
    cfg["quantization_config"]["group_size"] = 128
    assert priced(cfg, 2).total < g64  # fewer scales and zeros


@pytest.mark.parametrize("name,total", [
    ("qwen3-8b", 16_381_470_720),          # Qwen/Qwen3-8B index total_size
    ("qwen3-235b-a22b", 470_187_269_120),  # Qwen/Qwen3-235B-A22B index total_size
])
def test_unquantized_inventory_matches_published_index_totals(name, total):
    q = priced(_cfg(name), 2)
    assert q.scheme.method == "none" and q.total == total and q.quantized == 0


def test_fp8_block_235b_per_rank_at_tp8():
    # Qwen3-235B-A22B-FP8's quantization_config: fp8, weight_block_size [128, 128], dynamic
    cfg = _cfg("qwen3-235b-a22b")
    bf16 = priced(cfg, 2)
    cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                  "weight_block_size": [128, 128]}
    fp8 = priced(cfg, 2)
    # every quantized linear: 1 B a weight + a float32 scale per 128×128 block (4/16,384 B a weight)
    assert fp8.quantized + fp8.unquantized == fp8.total
    assert abs((bf16.total - fp8.unquantized) / 2 - fp8.quantized * 16384 / 16388) < 2**20
    # issue 25: vLLM logged 27.7 GiB of weights per rank at TP 8 (replicated norms and routers on top)
    assert abs(fp8.total / 8 / 2**30 - 27.7) < 0.3


def test_unquantized_modules_follow_transformers_patterns():
    skip = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]
    assert not should_convert("model.layers.3.self_attn.q_proj", skip)
    assert not should_convert("lm_head", skip)
    assert should_convert("model.layers.3.mlp.experts.gate_up_proj", skip)
    assert should_convert("model.layers.1.mlp.gate_proj", ["mlp.gate"])  # boundary: not mlp.gate_proj
    assert not should_convert("model.layers.1.mlp.gate", ["mlp.gate"])
    assert not should_convert("model.layers.0.mlp.down_proj", ["re:.*layers\\.0\\..*"])


def test_awq_skips_modules_by_substring_as_vllm_does():
    # vLLM awq.py is_layer_skipped_awq: any(name in prefix); a published AWQ recipe lists
    # "self_attn", "mlp.gate", "layers.0." (search index file id 60380205571)
    cfg = _cfg("qwen3-8b")
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                                  "modules_to_not_convert": ["self_attn", "layers.0."]}
    s = scheme_from_config(cfg)
    from kvgate.model.quant import Part
    assert not linear_bytes(s, Part("model.layers.5.self_attn.q_proj", "linear", 4096, 4096), 2)[1]
    assert not linear_bytes(s, Part("model.layers.0.mlp.up_proj", "linear", 4096, 12288), 2)[1]
    assert linear_bytes(s, Part("model.layers.10.mlp.up_proj", "linear", 4096, 12288), 2)[1]


def test_compressed_tensors_ignore_keeps_lm_head_and_w4a16_is_a_quarter():
    base = _cfg("qwen3-8b")
    bf16 = priced(base, 2).total
    base["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}}}}
    q = priced(base, 2)
    assert q.scheme.method == "compressed-tensors"
    embed_and_head = 2 * 151936 * 4096 * 2
    assert q.unquantized > embed_and_head  # lm_head ignored, embeddings never quantized
    assert 0.25 < q.total / bf16 < 0.40


def test_gptq_stores_g_idx_and_bitsandbytes_keeps_lm_head():
    cfg = _cfg("qwen3-8b")
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True}
    s = scheme_from_config(cfg)
    from kvgate.model.quant import Part
    nb, q = linear_bytes(s, Part("model.layers.0.mlp.down_proj", "linear", 12288, 4096), 2)
    assert q and nb == 12288 * 4096 // 2 + 12288 * 4 + 96 * 4096 // 2 + 96 * 4096 * 2
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    s = scheme_from_config(cfg)
    assert linear_bytes(s, Part("lm_head", "linear", 4096, 151936), 2) == (4096 * 151936 * 2, False)


def test_unknown_quant_method_is_named():
    cfg = _cfg("qwen3-8b")
    cfg["quantization_config"] = {"quant_method": "hqq"}
    with pytest.raises(ConfigError) as e:
        priced(cfg, 2)
    assert "'hqq'" in e.value.message and "--weights-bytes" in (e.value.hint or "")


def test_nvfp4_wrapper_reads_the_top_level_quantization_config():
    # gemma-4-31b-it-nvfp4: quantization_config at the wrapper's top level, text config nested
    wb = weight_bytes(CONFIGS / "gemma-4-31b-it-nvfp4.json")
    assert "ModelOpt NVFP4" in wb.notes[0] and not wb.exact
