"""What-ifs from a startup log: ``kvgate import-log LOG`` and ``kvgate gate --engine-log LOG``
answer for another GPU, utilization, length, TP or KV dtype with the engine's own rule, the
log's non-KV terms carried over.

Hand-worked on tests/data/fit_logs/vllm_0.8-v0_qwen3-0.6b_h100_1.log (vLLM 0.8, V0 engine,
H100): "total_gpu_memory (79.19GiB) x gpu_memory_utilization (0.80) = 63.35GiB; model
weights take 1.12GiB; non_torch_memory takes 0.16GiB; PyTorch activation peak memory takes
0.23GiB; the rest of the memory reserved for KV Cache is 61.84GiB", graphs captured after
("took 0.13 GiB", not subtracted in V0). Each printed X.YZ GiB is [X.YZ − 0.005, X.YZ + 0.005]
× 2^30 B, rounded inward to whole bytes.

Qwen3-0.6B bf16 (the qwen3-0.6b preset): 28 layers × 8 KV heads × 128 × 2 (K, V) × 2 B =
114,688 B per token, 1,835,008 B per block of 16 tokens (fp8: half of each).
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from kvgate.cli import main

DATA = Path(__file__).parent / "data"
V0_LOG = str(DATA / "fit_logs" / "vllm_0.8-v0_qwen3-0.6b_h100_1.log")
GIB = 2**30
BLOCK = 28 * 8 * 128 * 2 * 2 * 16  # 1,835,008 B


def printed(text: str) -> tuple[int, int]:
    """A printed GiB figure as its byte interval (ceil of the low end, floor of the high)."""
    v = Fraction(text)
    lo, hi = (v - Fraction(5, 1000)) * GIB, (v + Fraction(5, 1000)) * GIB
    return -(-lo.numerator // lo.denominator), hi.numerator // hi.denominator


def _json(capsys, argv: list[str]) -> dict:
    assert main([*argv, "--json"]) in (0, 4)
    return json.loads(capsys.readouterr().out)


def _how(doc: dict) -> dict[str, str]:
    return {c["name"]: c["how"] for c in doc["carried_terms"]}


def test_another_gpu_carries_the_logged_terms(capsys):
    """--gpu H200: H200's CUDA total 150,109,880,320 B (measured, kvgate.fit.gpus) × 0.80 =
    120,087,904,256 B, less the three printed terms (weights, non-torch, activation)."""
    doc = _json(capsys, ["import-log", V0_LOG, "--model", "qwen3-0.6b", "--gpu", "H200"])
    w = doc["what_if"]
    budget = 150_109_880_320 * 4 // 5
    assert budget == 120_087_904_256
    terms = [printed("1.12"), printed("0.16"), printed("0.23")]
    low = budget - sum(t[1] for t in terms)
    high = budget - sum(t[0] for t in terms)
    assert w["kv_pool_bytes"] == {"low": low, "high": high} == {"low": 118_450_447_976, "high": 118_482_660_228}
    # V0 logs "# GPU blocks": whole blocks of the pool, 16 tokens each
    assert w["tokens"] == {"low": low // BLOCK * 16, "high": high // BLOCK * 16} == {"low": 1_032_800, "high": 1_033_072}
    assert w["fits"] == "yes" and w["engine"] == "vllm"
    how = _how(w)
    assert how["weights"] == how["activation peak (profile run)"] == how["non-torch memory"] == "carried"
    assert how["CUDA graph pool"] == "carried" and how["KV cache pool"] == "recomputed"
    graph = next(t for t in w["terms"] if t["name"] == "CUDA graph pool")
    assert (graph["low"], graph["high"]) == printed("0.13") and graph["subtracted_from_kv_pool"] is False
    assert w["changes"] == ["GPU: the log's GPU (not named; CUDA total 79.19 GiB printed) → H200"]


def test_the_logs_own_gpu_recomputed_gives_back_the_logged_pool(capsys):
    """The rule recomputed on the log's own GPU (its printed CUDA total, 79.19 GiB, as
    another GPU) with the log's settings: total × 0.80 less the carried terms meets the
    logged 61.84 GiB. A length equal to the log's own is no what-if at all."""
    from kvgate.engines import read_engine_log
    from kvgate.engines.logtext import logical_lines
    from kvgate.engines.startups import select_startup
    from kvgate.fit.gpus import Gpu
    from kvgate.fit.interval import Interval
    from kvgate.fit.whatif import WhatIf, whatif_from_log
    from kvgate.model import load_model

    doc = _json(capsys, ["import-log", V0_LOG, "--model", "qwen3-0.6b", "--max-model-len", "8192"])
    assert "what_if" not in doc
    pool = read_engine_log(V0_LOG)
    lines, _ = select_startup(logical_lines(Path(V0_LOG).read_text()), "vllm")
    same = Gpu("H100 as the log printed it", 81_559 * 2**20, Interval(*printed("79.19")), "the log")
    wa = whatif_from_log(pool, lines, load_model("qwen3-0.6b"), WhatIf(gpu=same))
    t_lo, t_hi = printed("79.19")
    terms = [printed("1.12"), printed("0.16"), printed("0.23")]
    lo = int(t_lo * Fraction(4, 5)) - sum(t[1] for t in terms)
    hi = int(t_hi * Fraction(4, 5)) - sum(t[0] for t in terms)
    assert wa.answer.kv_pool.to_dict() == {"low": lo, "high": hi}
    p_lo, p_hi = printed("61.84")
    assert lo <= p_lo and p_hi <= hi  # the logged pool is inside


def test_another_kv_dtype_holds_the_pool_and_doubles_the_tokens(capsys):
    """--kv-cache-dtype fp8 changes no term of the budget: the pool is the logged 61.84 GiB,
    held; its blocks are half as large (917,504 B), so twice as many tokens."""
    doc = _json(capsys, ["import-log", V0_LOG, "--model", "qwen3-0.6b", "--kv-format", "bf16",
                         "--kv-cache-dtype", "fp8"])  # the log's (it does not say) and the what-if
    w = doc["what_if"]
    lo, hi = printed("61.84")
    assert w["kv_pool_bytes"] == {"low": lo, "high": hi}
    half = BLOCK // 2
    assert w["tokens"] == {"low": lo // half * 16, "high": hi // half * 16}
    assert w["tokens"]["low"] <= 2 * 578_944 <= w["tokens"]["high"]  # the log's 578,944 bf16 tokens, doubled
    assert _how(w)["KV cache pool"] == "held"
    assert w["changes"] == ["--kv-cache-dtype: bf16 (given with --kv-format) → fp8"]  # the log's, as given


def test_another_tp_re_splits_the_weights_and_re_estimates_the_rest(capsys):
    """-tp 2 (the log's TP not printed: --tp 1 names it): the log's 1.12 GiB of weights
    on one rank is half on each of two; the activation peak and non-torch memory (NCCL)
    depend on TP, so they are re-estimated from kvgate.engines.vllm.budget's bands."""
    doc = _json(capsys, ["import-log", V0_LOG, "--model", "qwen3-0.6b", "--tp", "1", "-tp", "2"])
    w = doc["what_if"]
    wl, wh = printed("1.12")
    weights = next(t for t in w["terms"] if t["name"] == "weights")
    assert (weights["low"], weights["high"]) == (wl // 2, -(-wh // 2))
    how = _how(w)
    assert how["weights"] == "re-split"
    assert how["activation peak (profile run)"] == how["non-torch memory"] == "re-estimated"
    assert w["changes"] == ["-tp: 1 → 2"]


def test_what_if_text_names_every_term_and_its_origin(capsys):
    assert main(["import-log", V0_LOG, "--model", "qwen3-0.6b", "--gpu-memory-utilization", "0.9"]) == 0
    out = capsys.readouterr().out
    assert "what if (from the log): --gpu-memory-utilization: 0.8 → 0.9" in out
    assert "non-KV terms, from the log or not:" in out
    for name in ("weights", "activation peak (profile run)", "non-torch memory", "CUDA graph pool"):
        assert any(ln.strip().startswith(name) and " carried " in ln for ln in out.splitlines()), name
    assert "verdict: FITS" in out


def test_gate_engine_log_total_is_the_what_if_gpu(capsys):
    """In ``gate --engine-log``, --total names another GPU (NVML total): the answer is fit's."""
    doc = _json(capsys, ["gate", "--engine-log", V0_LOG, "--model", "qwen3-0.6b", "--slots", "64", "--max-seq", "8192",
                         "--kv-format", "bf16", "--total", "81559MiB", "--no-record"])
    w = doc["what_if"]
    assert w["gpu"]["nvml_total_bytes"] == 81_559 * 2**20 and w["fits"] == "yes"
    assert _how(w)["weights"] == "carried"


def test_v1_log_without_a_total_holds_its_pool_for_a_kv_dtype(capsys):
    """vLLM 0.19 log (gpt-oss-20b on an A100, --gpu-memory-utilization 0.65): it prints its
    weights and pool but not the GPU's total nor the activation peak. fp8 KV holds the
    logged pool (36.56 GiB); the unprinted terms are the calibrated bands, said so."""
    log = str(DATA / "fit_logs" / "vllm_0.19.0_gpt-oss-20b_a100_1.log")
    doc = _json(capsys, ["import-log", log, "--model", "gpt-oss-20b", "--kv-format", "bf16", "--kv-cache-dtype", "fp8"])
    w = doc["what_if"]
    lo, hi = printed("36.56")
    assert w["kv_pool_bytes"] == {"low": lo, "high": hi}
    how = _how(w)
    assert how["weights"] == "carried" and how["activation peak (profile run)"] == "estimated"
    assert any("does not print its GPU's total" in n for n in w["notes"])


def test_sglang_what_if_carries_weights_and_the_implied_fraction(capsys):
    """SGLang (Gemma-3-4B, H200): the log prints no --mem-fraction-static; (pool 108.24 GiB +
    weights 8.13 GiB) / free at start (131.08 + 8.13 GiB) = 0.836 (= 0.88 × 0.95, SGLang's
    multimodal default), the weights are carried."""
    log = str(DATA / "fit_logs" / "sglang_2025-03_gemma-3-4b_h200_1.log")
    doc = _json(capsys, ["import-log", log, "--model", str(DATA / "fit_logs" / "configs" / "gemma-3-4b-it.json"),
                         "--gpu", "H200", "--context-length", "32768"])
    w = doc["what_if"]
    assert w["settings"]["mem_fraction_static"] == 0.836
    assert _how(w)["weights"] == "carried"
    assert "--context-length: not logged (default) → 32768" in w["changes"] and w["fits"] == "yes"


def test_sglang_what_if_needs_a_gpu(capsys):
    log = str(DATA / "fit_logs" / "sglang_2025-03_gemma-3-4b_h200_1.log")
    assert main(["import-log", log, "--model", str(DATA / "fit_logs" / "configs" / "gemma-3-4b-it.json"),
                 "--context-length", "32768"]) == 2
    assert "--gpu" in capsys.readouterr().err


def test_llamacpp_what_if_carries_the_logged_model_buffer(capsys):
    """llama.cpp b4343, Pythia-2.8B f16 on a V100: the log's CUDA0 model buffer 5049.71 MiB
    stands in for a config's estimate; -c 8192 is exact KV: 32 layers × 2560 × 2 × 2 B ×
    8192 = 2,684,354,560 B."""
    log = str(DATA / "fit_logs" / "llamacpp_b4343_pythia-2.8b-f16_v100_1.log")
    doc = _json(capsys, ["import-log", log, "--model", str(DATA / "fit_logs" / "configs" / "pythia-2.8b.json"),
                         "--total", "16GiB", "-c", "8192"])
    w = doc["what_if"]
    assert w["kv_pool_bytes"] == {"low": 32 * 2560 * 2 * 2 * 8192, "high": 2_684_354_560}
    assert _how(w)["model buffer (weights on the GPU)"] == "carried"
    mb = next(t for t in w["terms"] if t["name"].startswith("model buffer"))
    assert mb["high"] == printed_mib("5049.71")[1]


def printed_mib(text: str) -> tuple[int, int]:
    v = Fraction(text)
    lo, hi = (v - Fraction(5, 1000)) * 2**20, (v + Fraction(5, 1000)) * 2**20
    return -(-lo.numerator // lo.denominator), hi.numerator // hi.denominator


@pytest.mark.parametrize("argv", [["--gpu", "H100", "--total", "80GiB"], ["--mem-fraction-static", "0.8"]])
def test_bad_what_ifs_are_input_errors(capsys, argv):
    assert main(["import-log", V0_LOG, "--model", "qwen3-0.6b", *argv]) == 2
    assert "ERROR:" in capsys.readouterr().err


def test_gate_target_alone_is_no_what_if(capsys):
    """In ``gate --engine-log`` the length and sequences are the target: without another
    GPU, share, TP or KV dtype there is no what-if (and no GPU is needed)."""
    doc = _json(capsys, ["gate", "--engine-log", V0_LOG, "--model", "qwen3-0.6b", "--max-num-seqs", "8",
                         "--max-model-len", "16384", "--kv-format", "bf16", "--no-record"])
    assert "what_if" not in doc and doc["demand_bytes"] == 8 * 16384 * 114_688


def test_llamacpp_gate_target_alone_is_no_what_if():
    from argparse import Namespace

    from kvgate.commands._engine_log import LogSettings, whatif_from_args
    from kvgate.engines import read_engine_log

    pool = read_engine_log(DATA / "fit_logs" / "llamacpp_b4343_pythia-2.8b-f16_v100_1.log")
    args = Namespace(lcpp_parallel=4, lcpp_ctx_size=8192, whatif_gpu=None, total=None)
    assert not whatif_from_args(args, pool, LogSettings(), target=(4, 2048)).asked()
    args.total = "16GiB"
    w = whatif_from_args(args, pool, LogSettings(), target=(4, 2048))
    assert w.asked() and (w.max_model_len, w.parallel) == (8192, 4)


def test_import_log_reestimates_terms_under_the_logged_release(tmp_path):
    """The what-if's re-estimated activation and non-torch terms take the log's release (0.26.1rc1:
    the sampler's Triton path, b+12 … b+16, and V1's growth rule), not the release-unknown hull."""
    import subprocess
    import sys

    log = Path(__file__).parent / "data" / "fit_logs" / "vllm_0.26.1rc1_qwen3-coder-30b-a3b_a100-80gb_1.log"
    r = subprocess.run([sys.executable, "-m", "kvgate", "import-log", str(log), "--model", "qwen3-30b-a3b",
                        "--gpu", "A100-80GB", "-v"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert "release not known" not in out
    assert "0.17+ _dummy_sampler_run" in out and "growth since the first snapshot" in out
