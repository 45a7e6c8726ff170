"""vLLM's default --gpu-memory-utilization per release (0.9, then 0.92 from 0.20.0), --dtype
for vLLM and SGLang (KV auto and the loaded weights follow it), and --gpu list."""

from __future__ import annotations

import json

import pytest

from kvgate.cli import main
from kvgate.engines.registry import resolve_dtype
from kvgate.engines.vllm.flags import default_utilization
from kvgate.errors import KvgateError
from kvgate.fit import resolve_release
from kvgate.fit.dtype import weight_ratio
from kvgate.fit.gpus import GPU_TABLE


def fit_json(capsys, *argv):
    try:
        code = main(["fit", *argv, "--json"])
    except SystemExit as exc:
        code = exc.code
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("release, want", [("0.11.0", 0.9), ("0.19.0", 0.9), ("0.20.0", 0.92), ("0.24.0", 0.92)])
def test_vllm_default_utilization_per_release(release, want):
    """vllm/config/cache.py: Field(default=0.9) in the 0.19.0 wheel, Field(default=0.92) in
    0.20.0, 0.21.0, 0.22.0 and 0.24.0."""
    assert default_utilization(resolve_release("vllm", release)) == want


def test_fit_uses_the_releases_default_utilization(capsys):
    _, old = fit_json(capsys, "qwen3-4b", "--gpu", "H100", "--max-model-len", "32768", "--release", "0.19.0")
    _, new = fit_json(capsys, "qwen3-4b", "--gpu", "H100", "--max-model-len", "32768", "--release", "0.20.0")
    assert old["settings"]["gpu_memory_utilization"] == 0.9 and new["settings"]["gpu_memory_utilization"] == 0.92
    # the budget is total × utilization: 2% of the CUDA total more at 0.20.0
    cuda = new["gpu"]["cuda_total_bytes"]["low"]
    assert new["budget_bytes"]["low"] - old["budget_bytes"]["low"] == pytest.approx(0.02 * cuda, rel=1e-6)


@pytest.mark.parametrize("engine, given, cfg, want", [
    ("vllm", "auto", "bfloat16", "bfloat16"),
    ("vllm", "auto", "float32", "bfloat16"),     # downcast to the first supported dtype (sm ≥ 8.0)
    ("vllm", "half", "bfloat16", "float16"),
    ("vllm", "float", "bfloat16", "float32"),
    ("sglang", "auto", "float32", "float16"),    # SGLang: float32 models run in float16
    ("sglang", "auto", "bfloat16", "bfloat16"),
])
def test_resolve_dtype(engine, given, cfg, want):
    assert resolve_dtype(given, {"model_type": "llama", "torch_dtype": cfg}, engine, "H100")[0] == want


def test_vllm_auto_on_a_t4_falls_back_to_float16():
    assert resolve_dtype("auto", {"model_type": "llama", "torch_dtype": "bfloat16"}, "vllm", "T4")[0] == "float16"


def test_vllm_refuses_float16_for_gemma3_with_its_message():
    with pytest.raises(KvgateError, match="The model type 'gemma3_text' does not support float16"):
        resolve_dtype("float16", {"model_type": "gemma3_text", "torch_dtype": "bfloat16"}, "vllm", "L4")
    # auto skips float16 for it on a GPU without bfloat16: float32
    assert resolve_dtype("auto", {"model_type": "gemma3_text", "torch_dtype": "bfloat16"}, "vllm", "T4")[0] == "float32"


def test_weight_ratio_only_for_unquantized_checkpoints():
    assert weight_ratio({"torch_dtype": "bfloat16"}, "float32") == (4, 2)
    assert weight_ratio({"torch_dtype": "bfloat16"}, "float16") is None
    assert weight_ratio({"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "awq"}}, "float32") is None


@pytest.mark.parametrize("engine_flags", [[], ["--engine", "sglang"]])
def test_dtype_float32_doubles_kv_and_weights(capsys, engine_flags):
    """qwen3-4b (bfloat16, 36 layers × 8 KV heads × 128 × 2 (K, V)): 147,456 B a token in
    bf16, 294,912 B in float32; the given weights double too."""
    base = ["qwen3-4b", "--gpu", "H200", "--weights-bytes", "8GB", *engine_flags,
            "--max-model-len" if not engine_flags else "--context-length", "32768"]
    _, bf = fit_json(capsys, *base)
    _, f32 = fit_json(capsys, *base, "--dtype", "float32")
    assert bf["request_bytes"] == 32768 * 147456 and f32["request_bytes"] == 2 * bf["request_bytes"]
    w = {d["name"]: d for d in bf["terms"]}["weights"]["high"]
    w32 = {d["name"]: d for d in f32["terms"]}["weights"]["high"]
    assert w32 == 2 * w and f32["settings"]["dtype"] == "float32"


def test_dtype_is_refused_for_llamacpp(capsys):
    code, doc = fit_json(capsys, "qwen3-4b", "--gpu", "L4", "-c", "4096", "--dtype", "half")
    assert code == 2 and "--dtype" in doc["error"]


def test_gpu_list_and_empty_gpu(capsys):
    code, doc = fit_json(capsys, "any", "--gpu", "list")
    assert code == 0 and len(doc["gpus"]) == len(GPU_TABLE) and all(g["source"] for g in doc["gpus"])
    assert main(["fit", "any", "--gpu"]) == 0
    out = capsys.readouterr().out
    assert "MI300X" in out and max(len(ln) for ln in out.splitlines()) <= 100
    code, doc = fit_json(capsys, "llama-3.1-8b", "--gpu", "")
    assert code == 2 and "empty" in doc["error"]
    code, doc = fit_json(capsys, "any", "--gpu", "list", "--total", "24GiB")  # a GPU named twice: refused
    assert code == 2 and "--gpu list" in doc["error"] and doc["hint"]


def test_mi300x_total_is_rocm_smis_bytes():
    """ROCm/legacy-rocm-build issue #4750: rocm-smi 'VRAM Total Memory (B): 206141652992'."""
    assert GPU_TABLE["MI300X"][1] * 2**20 == 206141652992
