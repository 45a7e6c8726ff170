"""Engine startup logs (vLLM, SGLang, llama.cpp) → pools, cross-checks and the gate.

Every fixture under tests/data/logs/ is a real log from a public report (SOURCES.md),
personal details replaced. Expected numbers are derived by hand here from the models'
public configs and the engines' own formulas, never copied from kvgate's output.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest

from kvgate.engines import EngineLogError, crosscheck, detect_engine, gate_from_engine_log, read_engine_log
from kvgate.engines.logtext import logged, logical_lines
from kvgate.engines.vllm.log import parse_vllm
from kvgate.model import load_model
from kvgate.model.config import spec_from_config

LOGS = Path(__file__).parent / "data" / "logs"
GIB = 1 << 30
MIB = 1 << 20


def interval(text: str, unit: int) -> tuple[int, int]:
    """Hand rule: a value printed with d decimals is within half a last digit."""
    v = Fraction(text)
    d = len(text.split(".")[1]) if "." in text else 0
    half = Fraction(1, 2 * 10 ** d)
    return math.ceil((v - half) * unit), math.floor((v + half) * unit)


def log(name: str):
    return read_engine_log(LOGS / name)


QWEN3_235B = dict(model_type="qwen3_moe", num_hidden_layers=94, num_attention_heads=64, num_key_value_heads=4,
                  head_dim=128, hidden_size=4096, torch_dtype="bfloat16", max_position_embeddings=40960,
                  vocab_size=151936, intermediate_size=12288, moe_intermediate_size=1536, num_experts=128,
                  num_experts_per_tok=8)
LLAMA_70B = dict(model_type="llama", num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                 hidden_size=8192, intermediate_size=28672, vocab_size=128256, torch_dtype="bfloat16",
                 max_position_embeddings=131072)
GEMMA3_4B = dict(model_type="gemma3_text", num_hidden_layers=34, num_attention_heads=8, num_key_value_heads=4,
                 head_dim=256, hidden_size=2560, sliding_window=1024, torch_dtype="bfloat16", intermediate_size=10240,
                 vocab_size=262208, max_position_embeddings=131072)


# ------------------------------------------------------------------ reading pasted lines

def test_lines_lose_tags_and_join_terminal_wraps():
    text = ("qwen3-1  | (VllmWorker rank=2 pid=107) INFO 04-29 01:07:41 [gpu_model_runner.py:1347] Model loading took "
            "14.2474 GiB and 559.04 seconds\n"
            "(EngineCore pid=107) INFO 07-06 22:50:46 [core.py:114] Initializing a V1 LLM engine (v0.24.0) with config: mo\n"
            "del='/m', dtype=torch.bfloat16\n"
            "[2025-03-27 21:33:31 TP3] KV Cache is allocated. #tokens: 5, K size: 0.01 GB, V size: 0.01 GB\n"
            "Sep 11 01:16:15 HOST ollama[1884]: llm_load_print_meta: causal attn      = 1\n")
    lines = logical_lines(text)
    assert [ln.rank for ln in lines] == [2, None, 3, None]
    assert lines[0].text.startswith("INFO 04-29 01:07:41")
    assert "with config: model='/m', dtype=torch.bfloat16" in lines[1].text
    assert lines[3].text == "llm_load_print_meta: causal attn      = 1"


def test_logged_interval_is_half_a_last_digit():
    got = logged("2.30", GIB, "GiB")
    assert (got.low, got.high) == interval("2.30", GIB)
    assert got.bytes == round(Fraction("2.30") * GIB)
    assert got.contains(round(Fraction("2.2951") * GIB)) and not got.contains(round(Fraction("2.3051") * GIB))


def test_not_an_engine_log_is_an_error():
    with pytest.raises(EngineLogError, match="no vLLM, SGLang or llama.cpp"):
        detect_engine("hello\nworld\n")
    with pytest.raises(EngineLogError, match="no KV pool line") as e:
        log("llamacpp_ollama_llama-70b_q4_0_2024.log")
    assert "llama_kv_cache: size" in e.value.hint


# ------------------------------------------------------------------ vLLM

def test_vllm_085_qwen3_30b_tp4_agrees_to_the_block():
    p = log("vllm_0.8.5_qwen3-30b-a3b_tp4.log")
    assert p.engine == "vllm" and p.pool_tokens == 198_784 and p.max_model_len == 8192
    assert p.flags["max_concurrency"] == "24.27"
    assert (p.weights.low, p.weights.high) == interval("14.2474", GIB)  # same on all 4 ranks
    model = load_model(Path("/work/shared/cases/configs/qwen3-30b-a3b.json")) if Path(
        "/work/shared/cases/configs/qwen3-30b-a3b.json").exists() else None
    if model is None:
        pytest.skip("shared configs not present")
    cc = crosscheck(p, model, kv_format="bf16", tp=4)
    # 48 layers × (K+V) × 1 KV head per rank (4 / TP 4) × 128 × 2 B = 24,576 B/token; block 16
    per_block = 48 * 2 * 1 * 128 * 2 * 16
    blocks = 198_784 // 16
    assert f"{blocks / (8192 // 16):.2f}" == "24.27"
    # no "Available KV cache memory" line: the lines fit 12,424 whole blocks, which any
    # model would; kvgate says "consistent", not "agrees"
    assert cc["status"] == "consistent" and cc["expected"]["num_blocks"] == blocks == 12_424
    assert cc["pool_bytes"] == blocks * per_block == 4_885_315_584
    wrong = crosscheck(p, spec_from_config(LLAMA_70B, name="llama-3.1-70b", source="test"), kv_format="bf16", tp=4)
    assert wrong["status"] == "consistent" and "are not" in wrong["lines"][-1]


def test_vllm_v1_early_gpu_blocks_line_llama70b():
    p = log("vllm_v1-0.7_llama-3.1-70b-w8a8.log")
    assert p.parsed["gpu_blocks"] == 1381 and p.pool_tokens == 1381 * 16
    assert p.model == "neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8"
    assert p.flags["gpu_memory_utilization"] == "0.98" and p.max_model_len == 2048
    assert (p.weights.low, p.weights.high) == interval("67.7229", GIB)  # early V1 "GB" = 2^30 (gpu_model_runner)
    cc = crosscheck(p, spec_from_config(LLAMA_70B, name="llama-3.1-70b", source="test"), kv_format="bf16")
    assert cc["status"] == "consistent"  # no "Available KV cache memory" line to check bytes against
    assert cc["expected"]["pool_bytes_per_block"] == 80 * 2 * 8 * 128 * 2 * 16 == 5_242_880
    assert f"{1381 / (2048 // 16):.2f}" == "10.79"


def test_vllm_kimi_linear_tp2_flags_from_the_launch_command():
    p = log("vllm_kimi-linear_tp2.log")
    assert p.tp == 2 and p.max_model_len == 120_000 and p.slots == 8
    assert p.flags["enable_prefix_caching"] is True and p.flags["max_num_batched_tokens"] == 64_000
    assert p.pool_tokens == 75_840 and p.flags["max_concurrency"] == "2.48" and p.flags["padding_layers"] == 1
    assert (p.pool_bytes.low, p.pool_bytes.high) == interval("2.30", GIB)
    assert list(p.parsed["available_kv_by_rank"]) == [0]  # the (Worker_TP0 …) tag


def test_vllm_024_fp8_wrapped_config_line():
    p = log("vllm_0.24.0_qwen3.6-35b-a3b_fp8kv.log")
    assert p.version == "0.24.0" and p.kv_format == "fp8" and p.tp == 1
    assert p.model == "~/.cache/huggingface/qwen3.6-35b-a3b-nvfp4"  # from the line wrapped after "mo"
    assert p.max_model_len == 131_072 and p.slots == 1 and p.flags["enable_prefix_caching"] is True
    assert p.pool_tokens == 567_978 and (p.pool_bytes.low, p.pool_bytes.high) == interval("5.98", GIB)
    # ≥ 0.20.1 prints int(concurrency × max_model_len): the two lines agree to 2 decimals
    assert f"{567_978 / 131_072:.2f}" == p.flags["max_concurrency"] == "4.33"


def test_vllm_override_and_cuda_graph_lines():
    p = log("vllm_0.18-dev_gguf-qwen3.5_override.log")
    assert p.flags["num_gpu_blocks_override"] == 512
    assert (p.flags["cuda_graph"]["low"], p.flags["cuda_graph"]["high"]) == interval("1.62", GIB)
    assert (p.pool_bytes.low, p.pool_bytes.high) == interval("6.9", GIB)  # one decimal: ±0.05 GiB
    assert p.pool_tokens == 89_760 and p.max_model_len == 262_144 and p.flags["max_concurrency"] == "1.36"


def test_vllm_several_ranks_take_the_minimum():
    # the rule (vLLM get_kv_cache_configs: min over workers), on two rank-tagged lines
    text = ("(Worker_TP0 pid=1) INFO 11-06 10:51:48 [gpu_worker.py:349] Available KV cache memory: 2.30 GiB\n"
            "(Worker_TP1 pid=2) INFO 11-06 10:51:48 [gpu_worker.py:349] Available KV cache memory: 2.25 GiB\n")
    r = parse_vllm(logical_lines(text))
    assert set(r["available_kv_by_rank"]) == {0, 1}
    assert r["available_kv"].text == "2.25 GiB"


def test_vllm_qwen3_235b_differs_and_names_the_smaller_rank():
    p = log("vllm_qwen3-235b-a22b-fp8_tp4_lmcache.log")
    assert p.tp == 4 and p.model == "/path/to/Qwen3-235B-A22B-FP8"
    cc = crosscheck(p, spec_from_config(QWEN3_235B, name="qwen3-235b-a22b", source="test"), kv_format="bf16")
    # 94 × 2 × 1 × 128 × 2 B × 16 = 770,048 B per block; 178,880 tokens = 11,180 blocks
    blocks, per_block = 178_880 // 16, 94 * 2 * 1 * 128 * 2 * 16
    lo, hi = interval("8.11", GIB)
    assert (blocks + 1) * per_block - 1 < lo  # the blocks need less than this rank's budget
    assert cc["status"] == "differs" and cc["expected"]["num_blocks"] == blocks
    assert "another rank had less" in cc["causes"][0]


# ------------------------------------------------------------------ SGLang

def test_sglang_gemma3_4b_gb_is_gib_and_agrees_to_the_token():
    p = log("sglang_gemma3-4b.log")
    assert p.engine == "sglang" and p.pool_tokens == 834_615 and p.kv_format == "bf16"
    assert (p.weights.low, p.weights.high) == interval("8.13", GIB)
    # memory_pool.py: GB = 1024**3; K = (tokens + page 1) × 34 layers × 4 heads × 256 × 2 B
    k = (834_615 + 1) * 34 * 4 * 256 * 2
    assert k == 58_115_981_312 and interval("54.12", GIB)[0] <= k <= interval("54.12", GIB)[1]
    cc = crosscheck(p, spec_from_config(GEMMA3_4B, name="gemma3-4b", source="test"))
    assert cc["status"] == "agrees" and cc["pool_bytes"] == 2 * k


def test_sglang_qwen3_235b_tp4_from_issue_21348():
    p = log("sglang_qwen3-235b-a22b-fp8_tp4.log")
    assert p.tp == 4 and p.flags["mem_fraction_static"] == "0.93"
    k = (367_404 + 1) * 94 * (4 // 4) * 128 * 2
    cc = crosscheck(p, spec_from_config(QWEN3_235B, name="qwen3-235b-a22b", source="test"))
    assert cc["status"] == "agrees" and cc["expected"]["k_bytes"] == k == 8_841_233_920
    # had kvgate not divided the KV heads by TP, the check would fail
    assert crosscheck(p, spec_from_config(QWEN3_235B, name="q", source="t"), tp=1)["status"] == "differs"


def test_sglang_mla_kv_size_line():
    p = log("sglang_deepseek-v3.2_dp8.log")
    assert p.pool_tokens == 975_424 and (p.pool_bytes.low, p.pool_bytes.high) == interval("43.67", GIB)
    assert p.parsed["ranks"] == {0: 975_424}


# ------------------------------------------------------------------ llama.cpp

def test_llamacpp_context_lines():
    from kvgate.engines.llamacpp.log import parse_llamacpp

    r = parse_llamacpp(logical_lines((LOGS / "llamacpp_qwen3-ctx4096_cpu.log").read_text()))
    assert r["context"] == {"n_seq_max": 1, "n_ctx": 4096, "n_ctx_seq": 4096, "n_batch": 2048, "n_ubatch": 512,
                            "causal_attn": 1, "flash_attn": "auto", "kv_unified": False, "freq_base": "5000000.0",
                            "freq_scale": 1}


def test_llamacpp_iswa_line_with_seqs():
    p = log("llamacpp_deepseek-v4_iswa.log")
    (c,) = p.parsed["caches"]
    # "%2u/%u seqs" is n_seq_max / n_stream (llama-kv-cache.cpp): 4 sequences in one unified stream
    assert (c["cells"], c["layers"], c["n_seq_max"], c["n_stream"], c["swa"]) == (393_216, 0, 4, 1, "non-swa")
    assert c["k_type"] == "f16" and (c["size"].low, c["size"].high) == (0, MIB // 200)


# ------------------------------------------------------------------ the gate for a fixed pool

def _qwen3_30b():
    p = Path("/work/shared/cases/configs/qwen3-30b-a3b.json")
    if not p.exists():
        pytest.skip("shared configs not present")
    return load_model(p)


def test_engine_gate_qwen3_30b_tp4_by_hand():
    pool, model = log("vllm_0.8.5_qwen3-30b-a3b_tp4.log"), _qwen3_30b()
    C = 12_424 * 393_216  # the cross-checked pool per rank
    g = gate_from_engine_log(pool, model, slots=32, max_seq=8192, kv_format="bf16", tp=4, pool_bytes=C)
    S = 512 * 393_216  # cdiv(8192, 16) blocks of 393,216 B
    assert g["slot_bytes"] == S and g["demand_bytes"] == 32 * S and g["verdict"] == "does-not-fit"
    by = {c["name"]: c for c in g["candidates"]}
    assert by["kv-quant:fp8"]["verdict"] == "pays" and by["kv-quant:fp8"]["demand_bytes"] == 32 * S // 2
    assert by["fewer slots"]["slots_fit"] == C // S == 24
    # 32 slots × cdiv(L, 16) blocks ≤ 12,424 → cdiv(L, 16) ≤ 388 → L ≤ 6,208
    assert by["max-model-len cut"]["max_seq_fits"] == 388 * 16 == 6208
    assert by["host offload"]["verdict"] == "pays-if" and by["host offload"]["reclaim_bytes"] == 32 * S - C
    # the gate's own record: T = pool, P = 0, margin 0, same verdict for kv-quant
    rec = g["record"]
    assert rec["verdicts"]["kv-quant"] == "pays" and rec["projection"]["used_bytes"] == 32 * S
    assert rec["projection"]["limit_bytes"] == C


def test_engine_gate_fits_says_not_a_bottleneck():
    pool, model = log("vllm_0.8.5_qwen3-30b-a3b_tp4.log"), _qwen3_30b()
    g = gate_from_engine_log(pool, model, slots=24, max_seq=8192, kv_format="bf16", tp=4,
                             pool_bytes=12_424 * 393_216)
    assert g["verdict"] == "not-a-bottleneck"
    assert {c["verdict"] for c in g["candidates"] if c["name"] != "more TP (4→8)"} == {"not-a-bottleneck"}


def test_requested_q4_0_not_applied_is_a_difference():
    p = LOGS / "llamacpp_tiny-llama_server.log"
    if not p.exists():
        pytest.skip("llama-server log not captured yet")
    pool = read_engine_log(p)
    model = _tiny_llama(tmp=p.parent)
    cc = crosscheck(pool, model, requested_kv_format="q4_0")
    assert cc["status"] == "differs" and "q4_0 was requested" in cc["causes"][0]


def _tiny_llama(tmp: Path):
    from kvgate.model.config import spec_from_config as sfc

    # benchmarks/llama_server_live.py CFG: 4 layers, 2 KV heads of 64
    return sfc(dict(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64, hidden_size=256,
                    torch_dtype="float16"), name="tiny-llama", source="test")


def test_llama_server_log_agrees_to_the_cell():
    p = LOGS / "llamacpp_tiny-llama_server.log"
    if not p.exists():
        pytest.skip("llama-server log not captured yet")
    pool = read_engine_log(p)
    assert pool.engine == "llama.cpp" and pool.kv_format == "fp16" and pool.slots == 4
    (c,) = pool.parsed["caches"]
    # -c 2048 -np 4: 512 cells per stream × 4 streams × 4 layers × 2 heads × 64 × 2 B, K and V alike
    k = 512 * 4 * 4 * 2 * 64 * 2
    assert (c["cells"], c["n_stream"], c["layers"]) == (512, 4, 4)
    assert c["k_size"].contains(k) and c["v_size"].contains(k) and pool.pool_tokens == 2048
    cc = crosscheck(pool, _tiny_llama(p.parent))
    assert cc["status"] == "agrees" and cc["pool_bytes"] == 2 * k


# ------------------------------------------------------------------ CLI

def test_cli_import_log_writes_a_measurement(tmp_path, capsys):
    from kvgate.cli import main
    from kvgate.measure.select import select_measurement

    out = tmp_path / "pool.json"
    code = main(["import-log", str(LOGS / "sglang_gemma3-4b.log"), "--out", str(out), "--json"])
    assert code == 0
    doc = json.loads(out.read_text())
    m = select_measurement(doc).measurement
    lo, hi = interval("54.12", GIB)
    assert m.basis.domain == "kv-pool" and m.peak_used_bytes == 0
    assert m.total_bytes == 2 * round(Fraction("54.12") * GIB) and m.extra["pool_tokens"] == 834_615
    assert m.extra["pool_bytes_interval"]["low"] == 2 * lo
    payload = json.loads(capsys.readouterr().out)
    assert payload["pool"]["engine"] == "sglang" and payload["crosscheck"] is None


def test_cli_import_log_bad_file_is_one_error(tmp_path, capsys):
    from kvgate.cli import main

    bad = tmp_path / "x.log"
    bad.write_text("nothing here\n")
    assert main(["import-log", str(bad)]) == 2
    assert "no vLLM, SGLang or llama.cpp" in capsys.readouterr().err


def test_llamacpp_recurrent_state_qwen35_9b_agrees():
    cfg = Path("/work/shared/cases/turn2/qwen3.5-9b.json")
    if not cfg.exists():
        pytest.skip("shared configs not present")
    pool = log("llamacpp_qwen3.5-9b_recurrent.log")
    (c,) = pool.parsed["caches"]
    assert (c["kind"], c["cells"], c["layers"], c["k_type"], c["v_type"]) == ("recurrent", 1, 32, "f32", "f32")
    # 24 gated-delta-net layers (every 4th of 32 is full attention):
    # R = 24 × (conv kernel 4 − 1) × conv channels (2·16·128 + 32·128 = 8,192) × 4 B
    # S = 24 × 32 value heads × 128 × 128 × 4 B
    r, s = 24 * 3 * 8192 * 4, 24 * 32 * 128 * 128 * 4
    assert (r, s) == (2_359_296, 50_331_648)
    assert c["k_size"].contains(r) and c["v_size"].contains(s) and c["size"].contains(r + s)
    cc = crosscheck(pool, load_model(cfg))
    assert cc["status"] == "agrees" and cc["pool_bytes"] == r + s


def test_readme_import_log_block_is_real_output(capsys):
    from kvgate.cli import main

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    cmd = "$ kvgate import-log examples/logs/vllm_0.8.5_qwen3-30b-a3b_tp4.log --model qwen3-30b-a3b --kv-format bf16 --tp 4\n"
    assert cmd in readme, "the README's quick start shows this import-log run"
    block = readme.split(cmd, 1)[1]
    block = block.split("```", 1)[0]
    assert main(["import-log", str(LOGS / "vllm_0.8.5_qwen3-30b-a3b_tp4.log"), "--model", "qwen3-30b-a3b",
                 "--kv-format", "bf16", "--tp", "4"]) == 0
    assert capsys.readouterr().out == block


def test_vllm_0171_qwen35_2b_hybrid_agrees_within_the_budget_rounding():
    """The four figures of the published vLLM 0.17.1 Qwen3.5-2B startup log recorded in
    ../shared/cases/turn2/README.md (case V1), as vLLM prints them."""
    cfg = Path("/work/shared/cases/turn2/qwen3.5-2b.json")
    if not cfg.exists():
        pytest.skip("shared configs not present")
    text = ("INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.17.1) with config: "
            "model='Qwen/Qwen3.5-2B', dtype=torch.bfloat16, max_seq_len=262144, tensor_parallel_size=1, "
            "kv_cache_dtype=auto\n"
            "INFO 01-01 00:00:00 [gpu_worker.py:1] Available KV cache memory: 5.95 GiB\n"
            "INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: 129,472 tokens\n"
            "INFO 01-01 00:00:00 [kv_cache_utils.py:1] Maximum concurrency for 262,144 tokens per request: 1.97x\n")
    pool = read_engine_log("case-V1.log", text=text)
    cc = crosscheck(pool, load_model(cfg))
    # the case: attention block 544, 4 groups, ≤ 0.20.0 token line num_blocks // 4 × 544;
    # 954 and 955 blocks both print 129,472 (238 × 544) and fit in 5.95 GiB ± 0.005
    assert cc["status"] == "agrees" and cc["expected"]["block_size"] == 544 and cc["expected"]["groups"] == 4
    assert 955 in cc["block_counts"] and all(n // 4 * 544 == 129_472 for n in cc["block_counts"])
    page = cc["expected"]["pool_bytes_per_block"]
    lo, hi = interval("5.95", GIB)
    assert all(n * page <= hi and (n + 1) * page > lo for n in cc["block_counts"])
