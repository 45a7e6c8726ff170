"""The engine-log line kinds of issue 26 (item 5) and issue 28's log findings, on real logs.

- vLLM 0.9–0.10: one "GPU KV cache size" / "Maximum concurrency" pair per worker is one
  startup; the pool is the smallest pair (``unify_kv_cache_configs``), every pair reported.
- vLLM V0: ``Initializing a V0 LLM engine (vX)`` / ``Initializing an LLM engine (vX)`` give
  the release and config; 0.6.x ``Memory profiling results: … kv_cache_size=X GiB`` the budget.

Real logs are under tests/data/logs/ and tests/data/fit_logs/ (sources in their SOURCES.md).
Every expected number is worked by hand from the model's public config and the engine's
own formula, never copied from kvgate's output.
"""

from __future__ import annotations

import pytest

from kvgate.engines import read_engine_log
from kvgate.engines.logtext import logical_lines
from kvgate.engines.vllm.log import parse_vllm
from test_engine_logs import GIB, LOGS, interval  # the hand rules, written once

FIT_LOGS = LOGS.parent / "fit_logs"

# vllm-ascend issue 2473: Qwen3-30B-A3B-W8A8 at TP 8 on 910B4, vLLM 0.10.0, block size 128
ASCEND_TP8 = "vllm_0.10.0-ascend_qwen3-30b-a3b-w8a8_tp8_pairs.log"
ASCEND_BUDGETS = {0: 19443365990, 1: 20320957030, 2: 20467668582, 3: 20133888614,
                  4: 19637687910, 5: 20058244710, 6: 19795793510, 7: 20467316326}  # "Available memory: N"


def test_vllm_per_worker_pairs_are_one_startup():
    p = read_engine_log(LOGS / ASCEND_TP8)
    assert len(p.startup["startups"]) == 1 and not any("startups" in n for n in p.notes)
    assert [x["tokens"] for x in p.flags["kv_cache_reports"].values()] == [
        791_040, 826_752, 832_768, 819_200, 798_976, 816_128, 805_376, 832_768]


def test_vllm_pool_is_the_smallest_worker_pair():
    p = read_engine_log(LOGS / ASCEND_TP8)
    # Qwen3-30B-A3B: 48 layers, 4 KV heads of 128, bf16; TP 8 > 4 heads: one head per rank.
    # A block of 128 tokens: 128 × 48 × 1 × 128 × 2 (K, V) × 2 B = 3,145,728 B.
    block = 128 * 48 * 1 * 128 * 2 * 2
    nb = min(ASCEND_BUDGETS.values()) // block  # rank 0: 19,443,365,990 B → 6,180 blocks
    assert block == 3_145_728 and nb == 6_180
    assert p.pool_tokens == nb * 128 == 791_040  # the least, not the last (832,768)
    assert p.flags["max_concurrency"] == "193.12" and f"{nb * 128 / 4096:.2f}" == "193.12"
    # the budget: vllm-ascend prints it exactly, in bytes, per rank; the least sizes the pool
    assert p.pool_bytes.bytes == p.pool_bytes.low == p.pool_bytes.high == ASCEND_BUDGETS[0]
    assert {int(k) for k in p.parsed["available_kv_by_rank"]} == set(ASCEND_BUDGETS)
    assert "8 'GPU KV cache size' lines, one per worker: 791,040 … 832,768 tokens" in p.notes
    assert any(n.startswith("the pool is the smallest, 791,040 tokens") for n in p.notes)


def test_vllm_worker_pairs_keep_release_tp_and_budget_of_their_startup():
    # the same pairs after the engine's config line and the workers' budgets (vLLM 0.10 order)
    text = ("INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.10.1) with config: model='m', "
            "dtype=torch.bfloat16, max_seq_len=4096, tensor_parallel_size=2, kv_cache_dtype=fp8\n"
            "(VllmWorker rank=0 pid=1) INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: 10.04 GiB\n"
            "(VllmWorker rank=1 pid=2) INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: 9.98 GiB\n")
    pairs = (LOGS / ASCEND_TP8).read_text().splitlines()[15:19]  # two workers' pairs, as printed
    p = read_engine_log("tp2.log", text=text + "\n".join(pairs) + "\n")
    assert (p.version, p.tp, p.kv_format) == ("0.10.1", 2, "fp8") and len(p.startup["startups"]) == 1
    assert p.pool_bytes.text == "9.98 GiB" and p.pool_tokens == 791_040


def test_vllm_excerpt_pasted_twice_still_splits_at_its_budget():
    one = ("Available KV cache memory: 8.11 GiB\nGPU KV cache size: 178,880 tokens\n"
           "Maximum concurrency for 4,096 tokens per request: 43.67x\n")
    p = read_engine_log("twice.log", text=one + one.replace("178,880", "198,784"), engine="vllm")
    assert len(p.startup["startups"]) == 2 and p.pool_tokens == 198_784


def test_vllm_v0_engine_line_gives_release_and_config():
    r = parse_vllm(logical_lines((LOGS / "vllm_0.8.3-v0_mistral-small-3.1-24b-awq_config.log").read_text()))
    assert (r["version"], r["engine_generation"]) == ("0.8.3", "V0")
    assert r["model"] == "OPEA/Mistral-Small-3.1-24B-Instruct-2503-int4-AutoRound-awq-sym"
    assert (r["dtype"], r["kv_cache_dtype"], r["max_model_len"], r["tensor_parallel_size"], r["quantization"]) == (
        "float16", "auto", 8192, 1, "awq")


def test_vllm_pre_0_7_engine_line_gives_release():
    r = parse_vllm(logical_lines((LOGS / "vllm_0.5.0_mistral-7b_engine-line.log").read_text()))
    assert (r["version"], r["engine_generation"], r["model"]) == ("0.5.0.post1", "V0", "Mistral-7B-v0.1")
    assert (r["dtype"], r["max_model_len"]) == ("bfloat16", 32768)
    assert r["model_loading"].text == "13.4966 GB"  # V0's "GB" divides by 2^30 (model_runner.py)


def test_vllm_0_6_memory_profiling_kv_cache_size_is_the_budget():
    p = read_engine_log(FIT_LOGS / "vllm_0.6.4_llama-3.1-8b_rtx3090_1.log")
    # worker.py: "kv_cache_size=%.2fGiB" of available_kv_cache_memory / 1024**3
    assert (p.pool_bytes.low, p.pool_bytes.high) == interval("3.81", GIB)
    # "GPU blocks: 1952" (the paste dropped the "#"): 1,952 blocks of 16 tokens
    assert p.pool_tokens == 1952 * 16 and p.flags["max_concurrency"] == "1.56"
    # Llama-3.1-8B: 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 B = 131,072 B a token; 1,952 blocks
    # are 1952 × 16 × 131,072 B = 3.8125 GiB, inside the printed 3.81's interval [3.805, 3.815] GiB
    assert p.pool_bytes.low <= 1952 * 16 * 131_072 <= p.pool_bytes.high


# ------------------------------------------------------------------ issue 28: nothing dropped silently

def _run_json(argv, capsys):
    import json

    from kvgate.cli import main

    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _cut_before_cache(tmp_path):
    """The llama.cpp CPU log (its own cut ends at the per-layer lines) cut before them: the
    context lines and nothing of the cache."""
    text = (LOGS / "llamacpp_qwen3-ctx4096_cpu.log").read_text()
    cut = tmp_path / "cut.log"
    cut.write_text(text[:text.index("llama_kv_cache:")])
    return cut


def test_llamacpp_log_cut_before_its_cache_line_has_no_pool_from_n_ctx(tmp_path):
    p = read_engine_log(_cut_before_cache(tmp_path))
    assert p.flags["n_ctx"] == 4096  # the context asked for is read ...
    assert p.pool_tokens is None and p.pool_bytes is None  # ... and is no pool: not available
    assert "pool not available: the log ends before its 'llama_kv_cache: size' line" in p.notes
    assert "n_ctx 4,096 is the context asked for, not a pool built" in p.notes


def test_engine_gate_refuses_a_llamacpp_log_without_its_cache_line(tmp_path, capsys):
    code, doc = _run_json(["gate", "--engine-log", str(_cut_before_cache(tmp_path)), "--model", "qwen3-4b",
                           "-np", "1", "-c", "4096", "--kv-format", "f16", "--no-record"], capsys)
    assert code == 2 and "no KV cache pool to gate" in doc["error"]


def test_import_log_refuses_kv_cache_dtype_on_a_llamacpp_log(capsys):
    code, doc = _run_json(["import-log", str(LOGS / "llamacpp_qwen3-ctx4096_cpu.log"), "--kv-cache-dtype", "abc"],
                          capsys)
    assert code == 2 and doc["error"].startswith("--kv-cache-dtype abc: a vLLM / SGLang flag")
    assert "-ctk" in doc["hint"]


def test_import_log_refuses_an_unknown_kv_cache_dtype(capsys):
    code, doc = _run_json(["import-log", str(LOGS / "vllm_0.8.5_qwen3-30b-a3b_tp4.log"), "--kv-cache-dtype", "abc"],
                          capsys)
    assert code == 2 and doc["error"] == "--kv-cache-dtype abc: not a KV cache type kvgate knows"


def test_engine_gate_refuses_sglang_context_length_on_a_vllm_log(capsys):
    code, doc = _run_json(["gate", "--engine-log", str(LOGS / "vllm_0.8.5_qwen3-30b-a3b_tp4.log"), "--model",
                           "qwen3-30b-a3b", "--max-num-seqs", "4", "--context-length", "4096", "--no-record"], capsys)
    assert code == 2 and doc["error"] == "--context-length 4096: an SGLang flag, and this is a vLLM log"


# ------------------------------------------------------------------ SGLang: SWAKVPool's two pools

SWA_LOG = "sglang_mimo-v2-flash_tp4_swa-pools.log"  # sglang PR 15464, MiMo-V2-Flash at TP 4


def test_sglang_swa_pool_pair_is_read_as_two_pools():
    p = read_engine_log(LOGS / SWA_LOG)
    swa = p.parsed["swa_pool"]
    # swa_memory_pool.py builds swa_kv_pool first, then full_kv_pool: each rank's first line is its SWA pool
    assert (swa["tokens"], swa["k_size"].text.split()[0], swa["v_size"].text.split()[0]) == (1_496_958, "41.76",
                                                                                            "27.84")
    assert p.pool_tokens == 1_496_958 and p.parsed["k_size"].text.startswith("4.82 GB")
    # the pool is both: 41.76 + 27.84 + 4.82 + 3.21 = 77.63 GB, SGLang's own "SWAKVPool mem usage: 77.63 GB"
    lo = sum(interval(x, GIB)[0] for x in ("41.76", "27.84", "4.82", "3.21"))
    hi = sum(interval(x, GIB)[1] for x in ("41.76", "27.84", "4.82", "3.21"))
    assert (p.pool_bytes.low, p.pool_bytes.high) == (lo, hi) and p.parsed["swa_mem_usage"].contains(p.pool_bytes.bytes)
    assert p.parsed["extra_pools"] == []  # no pool of the pair is taken for a draft model's
    assert p.parsed["swa_ranks_cut"] == [0, 3]  # the excerpt starts after TP0's and TP3's SWA lines


def test_sglang_swa_pools_are_each_sized_with_their_own_layers():
    from kvgate.engines import crosscheck
    from kvgate.model import load_model

    p = read_engine_log(LOGS / SWA_LOG)
    model = load_model(str(LOGS.parent / "configs" / "mimo-v2-flash.json"))
    cc = crosscheck(p, model, tp=4)  # --tp-size 4 in the PR's command
    # MiMo-V2-Flash: 39 sliding layers of 8 KV heads, 9 full of 4; K head 192, V head 128, bf16.
    # TP 4: 2 heads a sliding layer, 1 a full one. Rows: #tokens + page 1 = 1,496,959.
    rows = 1_496_959
    swa_k, swa_v = rows * 39 * 2 * 192 * 2, rows * 39 * 2 * 128 * 2
    full_k, full_v = rows * 9 * 1 * 192 * 2, rows * 9 * 1 * 128 * 2
    assert (swa_k, full_k) == (44_836_915_968, 5_173_490_304)
    assert cc["status"] == "agrees" and cc["pool_bytes"] == swa_k + swa_v + full_k + full_v
    assert cc["lines"][0].startswith("agrees to the token: SWA pool, (1,496,958 + page 1) × 39 layers")
    assert cc["lines"][1].startswith("agrees to the token: full pool, (1,496,958 + page 1) × 9 layers")
    # the SWA pool sized with every layer's bytes (the old reading) is not what SGLang built
    every = rows * (39 * 2 + 9 * 1) * 192 * 2
    assert not p.parsed["swa_pool"]["k_size"].contains(every)
    assert crosscheck(p, model, tp=2)["status"] == "differs"


# ------------------------------------------------------------------ llama.cpp: the cache line of every build

def test_llamacpp_init_kv_size_line_gives_the_cells_of_kv_self_size():
    # llama.cpp's own CI, build 4904: "init: kv_size = …" (llama_kv_cache_unified::init), then
    # "llama_context: KV self size = …" with no cell count of its own
    p = read_engine_log(LOGS / "llamacpp_b4904_pythia-1.4b-f16_ci.log")
    (c,) = p.parsed["caches"]
    # the "KV self size" line prints no layer count (the crosscheck takes the model's)
    assert (p.version, p.flags["commit"], c["cells"], c["layers"]) == ("4904", "01e8f213", 2048, None)
    # Pythia-1.4B: 24 layers × 16 KV heads × 128 × 2 B = 98,304 B a cell for K (and V): × 2,048 = 192 MiB
    assert 2048 * 24 * 16 * 128 * 2 == 192 * 2**20 and c["k_size"].contains(192 * 2**20)
    assert p.pool_tokens == 2048 and p.flags["n_ctx"] == 2048


def test_llamacpp_unified_kv_size_line_before_kv_self_size_is_read():
    # build 5398: "llama_kv_cache_unified: kv_size = 4096, …, padding = 32" then "… KV self size"
    from kvgate.engines import crosscheck
    from kvgate.model.config import spec_from_config
    from test_engine_logs_more import QWEN3_06B

    p = read_engine_log(LOGS / "llamacpp_b5398_qwen3-0.6b-q8_0_rocm.log")
    (c,) = p.parsed["caches"]
    assert (p.version, c["cells"], c["layers"], c["source"]) == ("5398", 4096, None, "llama_kv_cache_unified")
    cc = crosscheck(p, spec_from_config(QWEN3_06B, name="qwen3-0.6b", source="test"))
    # Qwen3-0.6B: 4,096 cells × 28 layers × 8 KV heads × 128 × 2 B = 224 MiB for K, V alike
    assert cc["status"] == "agrees" and cc["pool_bytes"] == 2 * 4096 * 28 * 8 * 128 * 2 == 448 * 2**20


def test_llamacpp_one_line_summary_of_build_5489_is_read():
    p = read_engine_log(FIT_LOGS / "llamacpp_b5489_qwen3-0.6b-q4_k_m_jetson-orin_1.log")
    (c,) = p.parsed["caches"]  # "(  4096 cells,  28 layers,  1 seqs)": one stream
    assert (c["cells"], c["layers"], c["n_seq_max"], c["n_stream"]) == (4096, 28, 1, 1)


@pytest.mark.parametrize("line, cells, layers, seqs, streams", [
    # "%s: size = %7.2f MiB (%6u cells, %3d layers), …" (llama-kv-cache-unified.cpp, before seqs were printed)
    ("llama_kv_cache_unified: size = 1024.00 MiB (  8192 cells,  32 layers), K (f16):  512.00 MiB, "
     "V (f16):  512.00 MiB", 8192, 32, None, 1),
    # "… %2u seqs)" then "%2u/%2u seqs" (n_seq_max / n_stream) and "%2u/%u seqs"
    ("llama_kv_cache_unified: size = 2016.00 MiB (  4096 cells, 126 layers,  1/ 1 seqs), K (f16): 1008.00 MiB, "
     "V (f16): 1008.00 MiB", 4096, 126, 1, 1),
    ("llama_kv_cache: size =   24.00 MiB (  2048 cells,  24 layers,  1/1 seqs), K (f16):   12.00 MiB, "
     "V (f16):   12.00 MiB", 2048, 24, 1, 1),
])
def test_llamacpp_cache_line_shapes_of_each_build(line, cells, layers, seqs, streams):
    from kvgate.engines.llamacpp.log import parse_llamacpp

    (c,) = parse_llamacpp(logical_lines(line + "\n"))["caches"]
    assert (c["cells"], c["layers"], c["n_seq_max"], c["n_stream"]) == (cells, layers, seqs, streams)


def test_vllm_smallest_worker_pair_agrees_to_the_block_with_the_least_budget():
    from kvgate.engines import crosscheck
    from kvgate.model import load_model

    p = read_engine_log(LOGS / ASCEND_TP8)
    cc = crosscheck(p, load_model("qwen3-30b-a3b"), tp=8, block_size=128, kv_format="bf16")
    # 6,180 blocks of 3,145,728 B need 19,440,599,040 … 19,443,744,767 B: rank 0's exact 19,443,365,990 B
    assert cc["status"] == "agrees" and cc["expected"]["num_blocks"] == 6_180
    assert 6_180 * 3_145_728 <= ASCEND_BUDGETS[0] < 6_181 * 3_145_728
    # the largest pair (832,768 tokens = 6,506 blocks: rank 2's budget) does not fit rank 0's, which
    # every worker is cut to (unify_kv_cache_configs)
    assert 832_768 // 128 * 3_145_728 > ASCEND_BUDGETS[0]
