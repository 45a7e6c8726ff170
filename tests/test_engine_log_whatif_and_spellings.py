"""Round 5: ``import-log`` / ``gate --engine-log`` faults a new user found (what-if settings,
records on refusal, llama.cpp -ngl, engine spellings, wording).

Hand-worked numbers (tests/data/logs/vllm_0.8.5_qwen3-30b-a3b_tp4.log): 198,784 tokens =
12,424 blocks of 16; Qwen3-30B-A3B under TP 4 holds 1 KV head of 128 per rank over 48
layers, so a bf16 block is 16 × 48 × 2 (K, V) × 128 × 2 B = 393,216 B and the pool is
12,424 × 393,216 = 4,885,315,584 B; vLLM floors its budget to whole blocks, so the budget
is 4,885,315,584 … 4,885,708,799 B. An fp8 block is 196,608 B: 4,885,315,584 / 196,608 =
24,848 blocks (397,568 tokens) and 4,885,708,799 // 196,608 = 24,849 (397,584 tokens).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvgate.cli import main

DATA = Path(__file__).parent / "data"
QWEN = str(DATA / "logs" / "vllm_0.8.5_qwen3-30b-a3b_tp4.log")
QWEN_GATE = ["gate", "--engine-log", QWEN, "--model", "qwen3-30b-a3b", "--kv-format", "bf16", "--tp", "4",
             "--max-num-seqs", "32", "--max-model-len", "8192"]


def test_dtype_only_whatif_holds_the_pool_from_blocks_without_a_gpu_total(capsys, tmp_path):
    out_dir = tmp_path / "rec"
    assert main([*QWEN_GATE, "--kv-cache-dtype", "fp8", "--out", str(out_dir), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    wi = d["what_if"]
    assert wi["changes"] == ["--kv-cache-dtype: bf16 (given with --kv-format) → fp8"]
    pool = [c for c in wi["carried_terms"] if c["name"] == "KV cache pool"][0]
    assert pool["how"] == "held" and "4,885,315,584 … 4,885,708,799 B" in pool["detail"]
    assert main([*QWEN_GATE, "--kv-cache-dtype", "fp8", "--no-record"]) == 0
    out = capsys.readouterr().out
    assert "GPU KV cache size: 397,568 tokens   …   397,584 tokens" in out


def test_gate_refused_by_its_whatif_writes_no_record(capsys, tmp_path):
    out_dir = tmp_path / "rec"
    rc = main([*QWEN_GATE, "--kv-cache-dtype", "fp8", "--vllm-version", "0.1.0", "--out", str(out_dir)])
    assert rc == 2 and "ERROR:" in capsys.readouterr().err
    assert not out_dir.exists() or not any(out_dir.iterdir())


GPT_OSS = str(DATA / "fit_logs" / "vllm_0.19.0_gpt-oss-20b_a100_1.log")


def test_whatif_sizes_with_the_kv_dtype_the_log_part_resolved(capsys):
    """gpt-oss-20b, fp8 (taken as the log's own: the log does not state it): one request of
    65,536 tokens is 12 full layers × 65,536 × 2 × 8 heads × 64 × 1 B = 805,306,368 B plus
    12 sliding layers × 8,336 tokens (vLLM's sliding-window page budget: cdiv(127 + 8,192, 16)
    + 1 = 521 blocks of 16) × 1,024 B = 102,432,768 B: 907,739,136 B (bf16 would be twice)."""
    assert main(["import-log", GPT_OSS, "--model", "gpt-oss-20b", "--kv-cache-dtype", "fp8", "-tp", "2",
                 "--max-model-len", "65536", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    w = d["what_if"]
    assert d["pool"]["kv_format"] == "fp8" and d["pool"]["tp"] == 2
    assert w["settings"]["kv_cache_dtype"] == "fp8" and w["settings"]["tensor_parallel_size"] == 2
    assert w["changes"] == ["--max-model-len: 131072 → 65536"]
    assert main(["import-log", GPT_OSS, "--model", "gpt-oss-20b", "--kv-cache-dtype", "fp8",
                 "--max-model-len", "65536", "--json"]) == 0
    w = json.loads(capsys.readouterr().out)["what_if"]
    assert w["request_bytes"] == 907_739_136


PYTHIA = str(DATA / "fit_logs" / "llamacpp_b4459_pythia-2.8b-q4_0_v100_ngl10_1.log")
PYTHIA_CFG = str(DATA / "fit_logs" / "configs" / "pythia-2.8b.json")


def _lcpp_whatif(capsys, *extra: str) -> dict:
    assert main(["import-log", PYTHIA, "--model", PYTHIA_CFG, "--total", "16GiB", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)["what_if"]


def test_llamacpp_whatif_keeps_the_logs_ngl(capsys):
    """'offloaded 10/33 layers': -ngl 10 stays. Pythia-2.8B (hidden 2,560) at -c 4,096 with
    K q8_0 (2,560 × 34/32 = 2,720 B) and V f16 (5,120 B) per layer and token: the 10
    offloaded layers hold 4,096 × 7,840 × 10 = 321,126,400 B (306.25 MiB) on the GPU."""
    w = _lcpp_whatif(capsys, "-c", "4096", "-ctk", "q8_0")
    assert w["settings"]["n_gpu_layers"] == 10
    assert not any(c.startswith("-ngl") for c in w["changes"])
    assert w["kv_pool_bytes"]["low"] == 321_126_400
    assert w["from_log"]["terms"]["offloaded_layers"] == {"on_gpu": 10, "of": 33}


def test_llamacpp_ngl_whatif_scales_the_buffer_per_layer(capsys):
    """CUDA0 model buffer 423.14 MiB for 10 layers: at most 423.145 MiB = 443,699,691 B, so
    44,369,969 B per layer; -ngl 20 carries 20 × 44,369,969 = 887,399,380 B at the high end."""
    w = _lcpp_whatif(capsys, "-c", "4096", "-ngl", "20")
    assert "-ngl: 10 → 20" in w["changes"]
    mb = next(t for t in w["terms"] if t["name"].startswith("model buffer"))
    assert mb["high"] == 887_399_380
    how = {c["name"]: c["how"] for c in w["carried_terms"]}
    assert how["model buffer (weights on the GPU)"] == "re-scaled"


def test_gate_skips_a_cache_type_llama_cpp_refuses(capsys, tmp_path):
    """Pythia-2.8B's head dim is 80 (2,560 / 32 heads): q8_0's and q4_0's blocks of 32 do not
    divide it, so neither is a candidate; the gate still answers. The logged pool is 2,048
    cells × 32 layers × 2 (K, V) × 2,560 × 2 B = 671,088,640 B, and 4 sequences of 2,048
    need 4 × 671,088,640 = 2,684,354,560 B."""
    rc = main(["gate", "--engine-log", PYTHIA, "--model", PYTHIA_CFG, "-np", "4", "-c", "8192", "-ctk", "f16",
               "-ctv", "f16", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "4 sequences of 2,048 tokens need 4 × 671,088,640 = 2,684,354,560 B" in out
    assert "-ctk q8_0 -ctv q8_0        not possible: llama.cpp refuses K cache type q8_0" in out
    assert len(list(tmp_path.glob("*.json"))) == 1


SGL = str(DATA / "fit_logs" / "sglang_2025-03_gemma-3-4b_h200_1.log")
GEMMA_CFG = str(DATA / "fit_logs" / "configs" / "gemma-3-4b-it.json")


def test_sglang_spellings_name_the_gate_target(capsys):
    """Gemma-3-4B: 34 layers × 4 KV heads × 256 × 2 B = 69,632 B of K per token, as much V:
    8,192 tokens are 8,192 × 139,264 = 1,140,850,688 B, 200 of them 228,170,137,600 B."""
    base = ["gate", "--engine-log", SGL, "--model", GEMMA_CFG, "--no-record"]
    assert main([*base, "--max-running-requests", "200", "--context-length", "8192"]) == 0
    ours = capsys.readouterr().out
    assert "200 sequences of 8,192 tokens need 200 × 1,140,850,688 = 228,170,137,600 B" in ours
    assert main([*base, "--max-num-seqs", "200", "--max-model-len", "8192"]) == 0
    assert capsys.readouterr().out == ours
    rc = main(["gate", "--engine-log", QWEN, "--model", "qwen3-30b-a3b", "--kv-format", "bf16", "--tp", "4",
               "--max-running-requests", "8", "--max-model-len", "8192", "--no-record"])
    assert rc == 2 and "an SGLang flag" in capsys.readouterr().err


L40S_LOG = str(DATA / "fit_logs" / "vllm_0.8.5-dev_llama-3.1-8b_l40s_1.log")


def test_same_settings_whatif_that_misses_the_logged_pool_says_so(capsys):
    """Llama-3.1-8B bf16: 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 B = 131,072 B per
    token, a block of 16 is 2,097,152 B; the log's 158,656 tokens are 9,916 blocks =
    20,795,359,232 B. The default utilization 0.9 on an L40S predicts more than that: the
    answer says it does not rebuild the log and names the unprinted utilization."""
    assert main(["import-log", L40S_LOG, "--model", "llama-3.1-8b", "--gpu", "L40S"]) == 0
    out = capsys.readouterr().out
    assert "pool (exact, from the model): 20,795,359,232 B per rank" in out
    warn = [ln for ln in out.splitlines() if ln.startswith("WARNING:")]
    assert warn[0].startswith("WARNING: the log's own settings, yet its pool (158,656 tokens) is outside")
    assert "a --gpu-memory-utilization the log does not print" in warn[1]
    # another utilization is a what-if: no such warning
    assert main(["import-log", L40S_LOG, "--model", "llama-3.1-8b", "--gpu", "L40S",
                 "--gpu-memory-utilization", "0.8"]) == 0
    assert "WARNING:" not in capsys.readouterr().out


def test_llamacpp_import_log_speaks_llama_cpp(capsys):
    """Pythia-2.8B f16 at 2,048 cells: 2,048 × 32 layers × 2,560 × 2 B = 335,544,320 B of K,
    as much V: 671,088,640 B, the logged 640.00 MiB."""
    assert main(["import-log", PYTHIA, "--model", PYTHIA_CFG]) == 0
    out = capsys.readouterr().out
    assert "KV cache (all layers) 671,088,640 B" in out and "pool (exact, from the model): 671,088,640 B (all layers)" in out
    for leak in ("per rank", "TP / PP", "None layers", "? layers"):
        assert leak not in out, leak
    assert "kv        2,048 cells, layers not logged, f16/f16: 640.00 MiB" in out
    assert main(["import-log", PYTHIA, "--model", PYTHIA_CFG, "--json"]) == 0
    pool = json.loads(capsys.readouterr().out)["pool"]
    assert "slots" not in pool and pool["n_seq_max"] == 1


def test_vllm_concurrency_is_printed_as_vllm_does(capsys):
    assert main(["import-log", QWEN, "--model", "qwen3-30b-a3b", "--tp", "4", "--kv-format", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "Maximum concurrency for 8,192 tokens per request: 24.27x" in out
    assert "max_concurrency=" not in out and "concurrency_len=" not in out


# --- the log's own settings cannot be contradicted by kvgate's spellings (breaker round 2) ---
def _run(argv, capsys):
    from kvgate.cli import main

    code = main(argv)
    cap = capsys.readouterr()
    return code, cap.out + cap.err


@pytest.mark.parametrize("argv,why", [
    # llama.cpp has no tensor parallel size: --tp would halve each sequence's bytes
    (["import-log", "llamacpp_b5489_qwen3-0.6b-q4_k_m_jetson-orin_1.log", "--model", "qwen3-0.6b", "--tp", "2"],
     "llama.cpp has no tensor parallel size"),
    # the log's cache lines say K (f16): --kv-format q8_0 would size q8_0 sequences against an f16 pool
    (["gate", "--engine-log", "llamacpp_b5489_qwen3-0.6b-q4_k_m_jetson-orin_1.log", "--model", "qwen3-0.6b",
      "--kv-format", "q8_0", "--slots", "1", "--max-seq", "4096", "--no-record"], "the log states its cache types"),
    (["import-log", "llamacpp_b5489_qwen3-0.6b-q4_k_m_jetson-orin_1.log", "--model", "qwen3-0.6b", "-pp", "2"],
     "the pipeline-parallel size is vLLM's"),
    # another engine's flag on import-log would go unused
    (["import-log", "sglang_2025-07_llama-3.1-8b_24gb-gpu_1.log", "--model", "llama-3.1-8b", "--gpu", "RTX-4090",
      "--max-model-len", "8192"], "a vLLM flag, and this is a SGLang log"),
    (["import-log", "sglang_2025-07_llama-3.1-8b_24gb-gpu_1.log", "--model", "llama-3.1-8b", "--gpu", "RTX-4090",
      "-np", "4"], "a llama.cpp flag, and this is a SGLang log"),
    # SGLang's log states kv_cache_dtype='auto' (the model's bf16): q4_0 is a what-if SGLang does not have
    (["import-log", "sglang_2025-01_llama-3.1-8b_h100_1.log", "--model", "llama-3.1-8b", "--kv-cache-dtype", "q4_0",
      "--gpu", "H100"], "not one of SGLang's"),
])
def test_a_log_setting_contradicted_or_a_foreign_flag_is_refused(argv, why, capsys, tmp_path):
    fit_logs = Path(__file__).parent / "data" / "fit_logs"
    argv = [str(fit_logs / a) if (fit_logs / a).is_file() else a for a in argv]
    code, text = _run(argv, capsys)
    assert code == 2, text
    assert why in text


def test_pp_below_the_stages_the_process_tags_show_is_refused(capsys):
    """The log's Worker_PP… tags show at least 4 stages; --pp 2 names fewer, which the log
    contradicts (--pp names the log's own only where the log is silent)."""
    log = Path(__file__).parent / "data" / "logs" / "vllm_pp4_worker-tags.log"
    cfg = Path(__file__).parent / "data" / "configs" / "qwen3-8b.json"
    code, text = _run(["gate", "--engine-log", str(log), "--model", str(cfg), "--pp", "2", "--slots", "16",
                       "--max-seq", "32768", "--no-record"], capsys)
    assert code == 2 and "the log states pipeline parallel size at least" in text
