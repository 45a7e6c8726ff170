"""Engine logs as they come: several startups and services in one file, lines the readers
missed, vLLM's parallel layouts (decode context parallel, pipeline parallel, TP from the
process tags) and numbers no engine prints.

Real logs are under tests/data/logs/ (sources in SOURCES.md and SOURCES-more.md); logs
built here from them say how. Every expected number is worked by hand from the model's
public config and the engine's own formula, never copied from kvgate's output.
"""

from __future__ import annotations

import pytest

from kvgate.engines import EngineLogError, crosscheck, gate_from_engine_log, read_engine_log
from kvgate.engines.logtext import LogNumberError, logical_lines
from kvgate.engines.startups import StartupError
from kvgate.errors import KvgateError
from kvgate.model.config import spec_from_config
from test_engine_logs import GIB, LOGS, MIB, interval  # the hand rules, written once


def read(name: str) -> str:
    return (LOGS / name).read_text()


def compose(service: str, text: str) -> list[str]:
    """Lines as ``docker compose logs`` prints them: ``service  | line``."""
    return [f"{service}  | {line}" for line in text.splitlines()]


QWEN3_235B = dict(model_type="qwen3_moe", num_hidden_layers=94, num_attention_heads=64, num_key_value_heads=4,
                  head_dim=128, hidden_size=4096, torch_dtype="bfloat16", max_position_embeddings=262144,
                  vocab_size=151936, intermediate_size=12288, moe_intermediate_size=1536, num_experts=128,
                  num_experts_per_tok=8)
TINY_LLAMA = dict(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64, hidden_size=256,
                  torch_dtype="float16")  # benchmarks/llama_server_live.py CFG
QWEN3_06B = dict(model_type="qwen3", num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, hidden_size=1024, intermediate_size=3072, vocab_size=151936,
                 torch_dtype="bfloat16", max_position_embeddings=40960)
MISTRAL_7B = dict(model_type="mistral", num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                  head_dim=128, hidden_size=4096, intermediate_size=14336, vocab_size=32064, torch_dtype="float16",
                  max_position_embeddings=32768, sliding_window=None)  # v0.2: no window

# the tiny llama-server log: -c 2048 -np 4 → 512 cells × 4 streams × 4 layers × 2 heads × 64 × 2 B (f16)
TINY_K = 512 * 4 * 4 * 2 * 64 * 2  # = 2 MiB, K and V alike


# ------------------------------------------------------------------ several startups / services

def test_llama_server_restart_is_one_pool_not_two():
    text = read("llamacpp_tiny-llama_server.log")
    pool = read_engine_log("restart.log", text=text + text)  # the same server started twice in one file
    assert TINY_K == 2 * MIB
    assert pool.pool_bytes.bytes == 2 * TINY_K and pool.pool_tokens == 2048  # one startup's cache, not 8 MiB
    assert [s["index"] for s in pool.startup["startups"]] == [1, 2] and pool.startup["startup"] == 2
    assert any("2 startups" in n and "never their sum" in n for n in pool.notes)
    cc = crosscheck(pool, spec_from_config(TINY_LLAMA, name="tiny-llama", source="test"))
    assert cc["status"] == "agrees" and cc["pool_bytes"] == 2 * TINY_K


def test_two_llamacpp_logs_concatenated_read_one_chosen_startup():
    a, b = read("llamacpp_deepseek-v4_iswa.log"), read("llamacpp_tiny-llama_server.log")
    last = read_engine_log("two.log", text=a + b)
    assert last.pool_tokens == 2048 and last.startup["startup"] == 2  # default: the last complete one
    first = read_engine_log("two.log", text=a + b, startup=1)
    (c,) = first.parsed["caches"]  # 393,216 cells × 1 stream, nothing of the tiny log's cache
    assert first.pool_tokens == 393_216 and c["cells"] == 393_216
    with pytest.raises(StartupError, match="startup 3 is not in the log") as e:
        read_engine_log("two.log", text=a + b, startup=3)
    assert "startup 1 (lines" in e.value.hint and "startup 2 (lines" in e.value.hint


def test_two_vllm_logs_concatenated_are_not_merged():
    text = read("vllm_0.24.0_qwen3.6-35b-a3b_fp8kv.log") + read("vllm_qwen3-235b-a22b-fp8_tp4_lmcache.log")
    p = read_engine_log("two.log", text=text)
    # the second log alone: 178,880 tokens, TP 4, 8.11 GiB; no fp8 KV and no max length from the first
    assert p.pool_tokens == 178_880 and p.tp == 4 and p.model == "/path/to/Qwen3-235B-A22B-FP8"
    assert (p.pool_bytes.low, p.pool_bytes.high) == interval("8.11", GIB)
    assert p.kv_format is None and p.max_model_len is None and p.version is None
    first = read_engine_log("two.log", text=text, startup=1)
    assert first.pool_tokens == 567_978 and first.kv_format == "fp8" and first.tp == 1


def _two_services() -> str:
    a = compose("vllm-a-1", read("vllm_0.24.0_qwen3.6-35b-a3b_fp8kv.log"))
    b = compose("vllm-b-1", read("vllm_kimi-linear_tp2.log"))
    out = []
    for i in range(max(len(a), len(b))):  # compose interleaves the services' lines
        out += a[i:i + 1] + b[i:i + 1]
    return "\n".join(out) + "\n"


def test_compose_log_with_two_services_is_refused_without_a_choice():
    with pytest.raises(StartupError, match="2 services with a KV pool: vllm-a-1, vllm-b-1") as e:
        read_engine_log("compose.log", text=_two_services())
    assert "--service" in e.value.hint


def test_compose_log_service_choice_reads_that_service_alone():
    b = read_engine_log("compose.log", text=_two_services(), service="vllm-b-1")
    # Kimi-Linear's own figures: 75,840 tokens, 2.48x at 120,000, TP 2, 2.30 GiB; not fp8
    assert b.pool_tokens == 75_840 and b.max_model_len == 120_000 and b.tp == 2 and b.slots == 8
    assert (b.pool_bytes.low, b.pool_bytes.high) == interval("2.30", GIB) and b.kv_format is None
    a = read_engine_log("compose.log", text=_two_services(), service="vllm-a-1")
    assert a.pool_tokens == 567_978 and a.kv_format == "fp8" and a.tp == 1 and a.max_model_len == 131_072
    with pytest.raises(StartupError, match="service 'vllm-c-1' is not in the log"):
        read_engine_log("compose.log", text=_two_services(), service="vllm-c-1")


def test_a_compose_log_of_one_engine_and_a_proxy_reads_the_engine():
    text = "\n".join(compose("vllm-1", read("vllm_kimi-linear_tp2.log"))
                     + ["proxy-1  | GET /health 200"]) + "\n"
    p = read_engine_log("compose.log", text=text)
    assert p.pool_tokens == 75_840 and p.startup["service"] == "vllm-1"
    assert any("proxy-1" in n for n in p.notes)


def test_two_engines_in_one_file_are_refused():
    text = read("vllm_0.24.0_qwen3.6-35b-a3b_fp8kv.log") + read("sglang_gemma3-4b.log")
    with pytest.raises(EngineLogError, match="KV pool lines of 2 engines"):
        read_engine_log("mixed.log", text=text)
    s = read_engine_log("mixed.log", text=text, engine="sglang")
    assert s.pool_tokens == 834_615 and s.kv_format == "bf16"


# ------------------------------------------------------------------ lines not read before

SGLANG_FP8 = (
    # SGLang's own lines (model_executor/model_runner.py "Using KV cache dtype: {kv_cache_dtype}",
    # mem_cache/memory_pool.py "KV Cache is allocated. #tokens: …") for Qwen3-0.6B, fp8 KV
    "[2026-03-04 15:13:14] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=20.00 GB, "
    "mem usage=1.12 GB.\n"
    "[2026-03-04 15:13:14] Using KV cache dtype: torch.float8_e4m3fn\n"
    "[2026-03-04 15:13:14] KV Cache is allocated. #tokens: 100000, K size: 2.67 GB, V size: 2.67 GB\n")


def test_sglang_kv_dtype_line_sets_the_format():
    # K = (100,000 + page 1) × 28 layers × 8 heads × 128 × 1 B (fp8) = 2,867,228,672 B = 2.670… GiB
    k = 100_001 * 28 * 8 * 128
    assert k == 2_867_228_672 and interval("2.67", GIB)[0] <= k <= interval("2.67", GIB)[1]
    p = read_engine_log("sglang.log", text=SGLANG_FP8)
    assert p.kv_format == "fp8"  # not the weights' bf16
    cc = crosscheck(p, spec_from_config(QWEN3_06B, name="qwen3-0.6b", source="test"))
    assert cc["status"] == "agrees" and cc["pool_bytes"] == 2 * k


def test_sglang_kv_dtype_line_lets_the_engine_gate_run():
    text = "\n".join(SGLANG_FP8.splitlines()[1:]) + "\n"  # no weights line: the dtype line alone says fp8
    p = read_engine_log("sglang.log", text=text)
    model = spec_from_config(QWEN3_06B, name="qwen3-0.6b", source="test")
    g = gate_from_engine_log(p, model, slots=4, max_seq=8192, pool_bytes=2 * 2_867_228_672)
    # one sequence: 8,192 tokens × 28 × 8 × 128 × 2 (K, V) × 1 B = 469,762,048 B; 4 fit in 5.34 GiB
    assert g["kv_format"] == "fp8" and g["slot_bytes"] == 469_762_048 and g["verdict"] == "not-a-bottleneck"


VLLM_0102_BYTES = (
    # vLLM 0.10.2's lines (v1/worker/gpu_worker.py, v1/core/kv_cache_utils.py) for a
    # Mistral-7B text model in fp16, one GPU, max_model_len 4,096
    "(EngineCore_DP0 pid=3021) INFO 09-23 18:12:33 [gpu_worker.py:298] Available KV cache memory: 55.15 GiB\n"
    "(EngineCore_DP0 pid=3021) INFO 09-23 18:12:34 [kv_cache_utils.py:864] GPU KV cache size: 451,744 tokens\n"
    "(EngineCore_DP0 pid=3021) INFO 09-23 18:12:34 [kv_cache_utils.py:868] Maximum concurrency for 4,096 tokens per "
    "request: 110.29x\n"
    "(EngineCore_DP0 pid=3021) INFO 09-23 18:12:39 [gpu_worker.py:391] Free memory on device (78.66/79.19 GiB) on "
    "startup. Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 14.08 GiB for weight, 1.97 GiB for "
    "peak activation, 0.07 GiB for non-torch memory, and 0.67 GiB for CUDAGraph memory. Replace "
    "gpu_memory_utilization config with `--kv-cache-memory=58333988249` to fit into requested memory, or "
    "`--kv-cache-memory=66273897472` to fully utilize gpu memory. Current kv cache memory in use is "
    "59212694937 bytes.\n")


def test_vllm_exact_kv_cache_memory_bytes_line():
    p = read_engine_log("vllm.log", text=VLLM_0102_BYTES)
    assert (p.pool_bytes.bytes, p.pool_bytes.low, p.pool_bytes.high) == (59_212_694_937,) * 3
    assert interval("55.15", GIB)[0] <= 59_212_694_937 <= interval("55.15", GIB)[1]
    # 32 layers × 2 × 8 heads × 128 × 2 B × block 16 = 2,097,152 B a block; the budget holds
    # 59,212,694,937 // 2,097,152 = 28,234 blocks = 451,744 tokens; 28,234 / 256 = 110.29x
    per_block = 32 * 2 * 8 * 128 * 2 * 16
    assert 59_212_694_937 // per_block == 28_234 and 28_234 * 16 == 451_744
    cc = crosscheck(p, spec_from_config(MISTRAL_7B, name="mistral-7b", source="test"))
    assert cc["status"] == "agrees" and cc["block_counts"] == [28_234]
    assert cc["pool_bytes"] == 28_234 * per_block


def test_vllm_bytes_line_alone_is_the_budget():
    text = "\n".join(VLLM_0102_BYTES.splitlines()[1:]) + "\n"  # an excerpt without "Available KV cache memory"
    p = read_engine_log("vllm.log", text=text)
    assert p.pool_bytes.low == p.pool_bytes.high == 59_212_694_937
    cc = crosscheck(p, spec_from_config(MISTRAL_7B, name="mistral-7b", source="test"))
    assert cc["status"] == "agrees"  # checked against the bytes, not only "consistent"


def test_vllm_bytes_line_in_gib_is_read_too():
    text = VLLM_0102_BYTES.replace("59212694937 bytes.", "55.15 GiB.").replace(
        "Available KV cache memory: 55.15 GiB", "Loading done")
    p = read_engine_log("vllm.log", text=text)
    assert (p.pool_bytes.low, p.pool_bytes.high) == interval("55.15", GIB)


def _wasi(text: str) -> str:
    """The llama-server log as a host program prints llama.cpp's log through its own
    callback: the timestamp replaced by the host's prefix."""
    import re

    return "\n".join(re.sub(r"^\d+\.\d\d\.\d{3}\.\d{3} [IWEDT] (?:\w+ +)?", "[WASI-NN] llama.cpp: ", ln)
                     for ln in text.splitlines()) + "\n"


def test_llamacpp_lines_behind_a_host_prefix():
    text = _wasi(read("llamacpp_tiny-llama_server.log"))
    assert "[WASI-NN] llama.cpp: llama_kv_cache: size =    4.00 MiB" in text
    pool = read_engine_log("wasi.log", text=text)
    (c,) = pool.parsed["caches"]
    assert (c["cells"], c["n_stream"], c["layers"]) == (512, 4, 4) and pool.slots == 4
    assert c["k_size"].contains(TINY_K) and pool.pool_bytes.contains(2 * TINY_K) and pool.kv_format == "fp16"
    assert pool.flags["n_ctx"] == 2048


def test_llamacpp_cache_line_without_its_prefix():
    text = ("llama_context: n_seq_max     = 4\n"
            "llama_context: n_ctx         = 2048\n"
            "size =    4.00 MiB (   512 cells,   4 layers,  4/4 seqs), K (f16):    2.00 MiB, V (f16):    2.00 MiB\n")
    pool = read_engine_log("excerpt.log", text=text, engine="llama.cpp")
    (c,) = pool.parsed["caches"]
    assert c["source"] is None and (c["cells"], c["n_stream"]) == (512, 4) and pool.flags["n_ctx"] == 2048
    cc = crosscheck(pool, spec_from_config(TINY_LLAMA, name="tiny-llama", source="test"))
    assert cc["status"] == "agrees" and cc["pool_bytes"] == 2 * TINY_K


def test_no_pool_line_names_the_kv_lines_it_could_not_read():
    text = "\n".join(ln for ln in read("llamacpp_tiny-llama_server.log").splitlines()
                     if "llama_kv_cache: size" not in ln) + "\n"
    with pytest.raises(EngineLogError, match="no KV pool line") as e:
        read_engine_log("tiny.log", text=text.replace("llama_context: n_ctx ", "llama_context: n_ctx_x "))
    assert "line 122: 'llama_kv_cache:        CPU KV buffer size =     4.00 MiB'" in e.value.message


# ------------------------------------------------------------------ vLLM parallel layouts

def test_vllm_dcp_tokens_are_one_ranks():
    p = read_engine_log(LOGS / "vllm_0.18_qwen3.5-35b-a3b_tp8_dcp4.log")
    # "Multiplying the GPU KV cache size by the cp_world_size 4": 4,638,720 / 4 per rank
    assert p.pool_tokens == 4_638_720 // 4 == 1_159_680 and p.dcp == 4 and p.tp == 8
    assert p.parallel["dcp"]["source"].startswith("the 'Multiplying") and p.parallel["tp"]["source"] == "the launch command"
    assert (p.pool_bytes.low, p.pool_bytes.high) == interval("44.77", GIB)


def test_vllm_dcp2_qwen3_235b_cross_check_per_rank():
    p = read_engine_log(LOGS / "vllm_qwen3-235b-a22b_tp8_dcp2.log")
    assert p.pool_tokens == 1_723_584 // 2 == 861_792 and p.dcp == 2 and p.tp == 8 and p.max_model_len == 262_144
    cc = crosscheck(p, spec_from_config(QWEN3_235B, name="qwen3-235b-a22b", source="test"), kv_format="bf16")
    # per rank: 94 layers × 2 × 1 KV head (4 heads over TP 8) × 128 × 2 B × 16 = 770,048 B a block;
    # 861,792 tokens = 53,862 blocks; a request holds cdiv(262,144, 2) = 131,072 tokens of a rank:
    # 8,192 blocks, and 53,862 / 8,192 = 6.57x as logged
    per_block = 94 * 2 * 1 * 128 * 2 * 16
    assert per_block == 770_048 and f"{53_862 / 8_192:.2f}" == "6.57"
    assert cc["status"] == "consistent" and cc["expected"]["num_blocks"] == 53_862
    assert cc["pool_bytes"] == 53_862 * 770_048 == 41_476_325_376


def test_vllm_tp_from_the_process_tags():
    # the Kimi-Linear TP 2 log without its launch command: only the tags (Worker_TP0, Worker_TP1) say TP
    lines = read("vllm_kimi-linear_tp2.log").splitlines()
    p = read_engine_log("kimi.log", text="\n".join(lines[4:]) + "\n")
    assert p.tp == 2 and "process tags" in p.parallel["tp"]["source"]
    assert any(n.startswith("tp 2 from the process tags") for n in p.notes)


def test_vllm_tags_give_tp_and_pp_and_pp_is_not_cross_checked():
    text = ("(Worker_PP0_TP0 pid=11) INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: 20.00 GiB\n"
            "(Worker_PP0_TP1 pid=12) INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: 20.00 GiB\n"
            "(Worker_PP1_TP0 pid=13) INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: 19.00 GiB\n"
            "(Worker_PP1_TP1 pid=14) INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: 19.50 GiB\n"
            "(EngineCore_DP0 pid=10) INFO 01-01 00:00:02 [kv_cache_utils.py:1] GPU KV cache size: 100,000 tokens\n"
            "(EngineCore_DP0 pid=10) INFO 01-01 00:00:02 [kv_cache_utils.py:1] Maximum concurrency for 8,192 tokens "
            "per request: 12.21x\n")
    p = read_engine_log("pp.log", text=text)
    assert (p.tp, p.pp) == (2, 2)
    assert p.pool_bytes.text == "19.00 GiB"  # four ranks, the smallest (two share TP rank 0)
    cc = crosscheck(p, spec_from_config(QWEN3_06B, name="qwen3-0.6b", source="test"), kv_format="bf16")
    # checked per stage now (tests/test_vllm_parallel.py): these made-up lines are not a real PP pool
    assert cc["status"] == "differs" and "get_pp_indices" in cc["lines"][0] and cc["pool_bytes"] is None


@pytest.mark.parametrize("line", [
    "INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.11.0) with config: model='m', "
    "dtype=torch.bfloat16, max_seq_len=8192, tensor_parallel_size=2, pipeline_parallel_size=2, kv_cache_dtype=auto",
    "$ vllm serve m -tp 2 -pp 2 --max-model-len 8192",
    "$ vllm serve m --tensor-parallel-size 2 --pipeline-parallel-size 2 --max-model-len 8192",
])
def test_vllm_pp_from_the_config_line_or_command_is_not_cross_checked(line):
    text = line + "\nINFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: 20.00 GiB\n" \
                  "INFO 01-01 00:00:02 [kv_cache_utils.py:1] GPU KV cache size: 100,000 tokens\n"
    p = read_engine_log("pp.log", text=text)
    assert (p.tp, p.pp, p.max_model_len) == (2, 2, 8192)
    cc = crosscheck(p, spec_from_config(QWEN3_06B, name="qwen3-0.6b", source="test"), kv_format="bf16")
    # checked per stage now (tests/test_vllm_parallel.py): these made-up lines are not a real PP pool
    assert cc["status"] == "differs" and "pipeline parallel size 2" in cc["lines"][0]


# ------------------------------------------------------------------ numbers no engine prints

HUGE = "9" * 5000


@pytest.mark.parametrize("engine,text", [
    ("vllm", f"INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: {HUGE} tokens\n"),
    ("vllm", f"INFO 01-01 00:00:00 [utils.py:1] non-default args: {{'max_model_len': {HUGE}}}\n"
             "INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: 100 tokens\n"),
    ("sglang", f"[2025-01-01 00:00:00 TP0] KV Cache is allocated. #tokens: {HUGE}, K size: 1.00 GB, V size: 1.00 GB\n"),
    ("llama.cpp", f"llama_kv_cache: size = {HUGE}.00 MiB (   512 cells,   4 layers,  4/4 seqs), K (f16): 2.00 MiB, "
                  "V (f16): 2.00 MiB\n"),
    ("llama.cpp", f"llama_context: n_ctx = {HUGE}\n"),
])
def test_huge_numbers_are_an_error_not_a_traceback(engine, text):
    with pytest.raises(LogNumberError, match="5,000 digits") as e:
        read_engine_log("huge.log", text=text)
    assert isinstance(e.value, KvgateError) and "line 1" in e.value.message


@pytest.mark.parametrize("text", [
    "INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: " + "1" * 40 + " tokens\n",
    "[2025-01-01 00:00:00 TP0] KV Cache is allocated. #tokens: 5, K size: " + "1" * 38 + ".00 GB, V size: 1.00 GB\n",
    "llama_context: n_ctx = " + "7" * 40 + "\nllama_kv_cache: size = 4.00 MiB (512 cells, 4 layers, 4/4 seqs), "
    "K (f16): 2.00 MiB, V (f16): 2.00 MiB\n",
])
def test_figures_longer_than_any_engine_prints_are_refused(text):
    with pytest.raises(LogNumberError, match="40 digits"):
        read_engine_log("long.log", text=text)


def test_huge_number_cli_is_exit_2(tmp_path, capsys):
    from kvgate.cli import main

    bad = tmp_path / "huge.log"
    bad.write_text(f"INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: {HUGE} tokens\n")
    assert main(["import-log", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR:") and "Traceback" not in err


def test_wrapped_pieces_join_within_their_service():
    text = ("svc-a-1  | INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.11.0) with config: mo\n"
            "svc-b-1  | INFO 01-01 00:00:00 [x.py:1] something else\n"
            "svc-a-1  | del='m', dtype=torch.bfloat16\n")
    lines = logical_lines(text)
    assert [ln.service for ln in lines] == ["svc-a-1", "svc-b-1"]
    assert lines[0].text.endswith("with config: model='m', dtype=torch.bfloat16")
    assert lines[1].text.endswith("[x.py:1] something else")


def test_engine_gate_under_dcp_sizes_one_ranks_share_of_a_sequence():
    p = read_engine_log(LOGS / "vllm_qwen3-235b-a22b_tp8_dcp2.log")
    model = spec_from_config(QWEN3_235B, name="qwen3-235b-a22b", source="test")
    C = 53_862 * 770_048  # the cross-checked pool per rank (test above)
    g = gate_from_engine_log(p, model, slots=6, max_seq=262_144, kv_format="bf16", pool_bytes=C)
    # a rank holds cdiv(262,144, 2) = 131,072 tokens of a sequence: 8,192 blocks of 770,048 B
    S = 8_192 * 770_048
    assert g["slot_bytes"] == S == 6_308_233_216 and g["verdict"] == "not-a-bottleneck"  # 6 × S ≤ C
    g7 = gate_from_engine_log(p, model, slots=7, max_seq=262_144, kv_format="bf16", pool_bytes=C)
    assert g7["verdict"] == "does-not-fit" and 7 * S > C  # 6.57x: the seventh does not fit


def test_engine_gate_sizes_one_pipeline_stage():
    text = ("$ vllm serve m -tp 2 -pp 2 --max-model-len 8192\n"
            "INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: 20.00 GiB\n"
            "INFO 01-01 00:00:02 [kv_cache_utils.py:1] GPU KV cache size: 100,000 tokens\n")
    p = read_engine_log("pp.log", text=text)
    g = gate_from_engine_log(p, spec_from_config(QWEN3_06B, name="q", source="t"), slots=4, max_seq=8192,
                             kv_format="bf16")
    # a rank of a stage holds 14 of the 28 layers (get_pp_indices): 14 × 8,192 × 2,048 B (TP 2: 4 KV heads)
    assert g["slot_bytes"] == 14 * 8192 * 4 * 128 * 2 * 2 == 234_881_024


def test_vllm_v0_budget_and_cuda_blocks_lines():
    # vLLM V0's lines (worker/worker.py determine_num_available_blocks, executor "# cuda blocks")
    text = ("INFO 02-11 07:40:45 worker.py:267] Memory profiling takes 5.02 seconds\n"
            "INFO 02-11 07:40:45 worker.py:267] model weights take 13.95GiB; non_torch_memory takes 0.25GiB; "
            "PyTorch activation peak memory takes 0.19GiB; the rest of the memory reserved for KV Cache is 8.69GiB.\n"
            "INFO 02-11 07:40:46 executor_base.py:110] # cuda blocks: 5096, # CPU blocks: 0\n")
    p = read_engine_log("v0.log", text=text, engine="vllm")
    assert (p.pool_bytes.low, p.pool_bytes.high) == interval("8.69", GIB) and p.pool_tokens == 5096 * 16


def test_vllm_pp4_log_from_its_worker_tags():
    p = read_engine_log(LOGS / "vllm_pp4_worker-tags.log", engine="vllm")
    # Worker_PP0 … Worker_PP3: PP ≥ 4; no TP part in a worker's name: TP 1 (vLLM names a
    # dimension only when its size exceeds 1)
    assert (p.pp, p.tp) == (4, 1) and "process tags" in p.parallel["pp"]["source"]
    assert p.pool_bytes.text == "18.02 GiB"  # the least of the stages' budgets (Worker_PP0)
    assert set(p.parsed["available_kv_by_rank"]) == {"Worker_PP0", "Worker_PP1", "Worker_PP2"}
    cc = crosscheck(p, spec_from_config(QWEN3_06B, name="q", source="t"), kv_format="bf16")
    assert cc["status"] == "cannot-check" and "pipeline parallel size 4" in cc["lines"][0]


def test_ollama_reload_of_the_same_model_is_a_second_startup():
    p = read_engine_log(LOGS / "llamacpp_ollama_qwen2_reload.log")
    # the first load's cache only: 2048.00 MiB (K 1024.00 + V 1024.00); the reload has no pool line yet
    assert (p.pool_bytes.low, p.pool_bytes.high) == interval("2048.00", MIB) and len(p.parsed["caches"]) == 1
    assert [s["complete"] for s in p.startup["startups"]] == [True, False] and p.startup["startup"] == 1
    assert any("startup 2 (lines 11–13, no pool line)" in n for n in p.notes)


def test_sglang_second_pool_of_a_rank_is_not_read_as_its_pool():
    p = read_engine_log(LOGS / "sglang_2x5090_fp8kv_draft.log")
    # each rank: the target's pool (K 3.46 + V 3.46 GB, SGLang's GB = 2^30 B), then the draft's
    # (1.08 + 1.08): the first is the pool, the second is listed, not added
    lo, hi = interval("3.46", GIB)
    assert p.pool_tokens == 454_112 and p.kv_format == "fp8"
    assert (p.pool_bytes.low, p.pool_bytes.high) == (2 * lo, 2 * hi)
    assert [e["rank"] for e in p.parsed["extra_pools"]] == [0, 1]
    assert any("second 'KV Cache is allocated' line" in n for n in p.notes)


def test_ray_worker_tags_are_ranks_not_restarts():
    # vLLM V1 on Ray: every worker prints its budget under a "(RayWorkerWrapper pid=…, ip=…)" tag
    text = ("(RayWorkerWrapper pid=4041, ip=172.17.0.2) INFO 01-01 00:00:01 [gpu_worker.py:1] "
            "Available KV cache memory: 20.00 GiB\n"
            "(RayWorkerWrapper pid=4042, ip=172.17.0.3) INFO 01-01 00:00:01 [gpu_worker.py:1] "
            "Available KV cache memory: 19.50 GiB\n"
            "INFO 01-01 00:00:02 [kv_cache_utils.py:1] GPU KV cache size: 100,000 tokens\n")
    p = read_engine_log("ray.log", text=text)
    assert len(p.startup["startups"]) == 1 and p.pool_bytes.text == "19.50 GiB" and p.pool_tokens == 100_000
    assert len(p.parsed["available_kv_by_rank"]) == 2


def test_an_excerpt_pasted_twice_is_two_startups():
    text = ("Available KV cache memory: 8.11 GiB\nGPU KV cache size: 178,880 tokens\n"
            "Available KV cache memory: 9.00 GiB\nGPU KV cache size: 198,784 tokens\n")
    p = read_engine_log("twice.log", text=text, engine="vllm")
    assert p.pool_tokens == 198_784 and p.pool_bytes.text == "9.00 GiB" and p.startup["startup"] == 2


def test_engine_gate_on_a_restarted_llama_server_uses_one_pool():
    text = read("llamacpp_tiny-llama_server.log")
    pool = read_engine_log("restart.log", text=text + text)
    model = spec_from_config(TINY_LLAMA, name="tiny-llama", source="test")
    g = gate_from_engine_log(pool, model, slots=5, max_seq=512)
    # one sequence: 512 cells × 4 layers × (K + V: 2 × 2 heads × 64 × 2 B) = 1 MiB; five need 5 MiB
    # of a 4 MiB pool (8 MiB had the two startups been summed: "fits")
    assert g["pool_bytes"] == 4 * MIB and g["slot_bytes"] == 512 * 4 * 2 * 2 * 64 * 2 == MIB
    assert g["verdict"] == "does-not-fit"
    q8 = next(c for c in g["candidates"] if c["name"] == "kv-quant:q8_0")
    # q8_0: 128 values = 4 blocks of 34 B per K row: 512 × 4 × 2 × 136 = 557,056 B a slot
    assert q8["demand_bytes"] == 5 * 557_056 and q8["verdict"] == "pays"


def test_llamacpp_cache_lines_pasted_twice_are_two_startups_but_iswa_pairs_are_one():
    line = "llama_kv_cache: size =    4.00 MiB (   512 cells,   4 layers,  4/4 seqs), K (f16):    2.00 MiB, V (f16):    2.00 MiB\n"
    twice = read_engine_log("x.log", text=line + line, engine="llama.cpp")
    assert twice.pool_bytes.text == "4.00 MiB" and len(twice.startup["startups"]) == 2
    iswa = ("llama_kv_cache_iswa: creating non-SWA KV cache, size = 512 cells\n" + line
            + "llama_kv_cache_iswa: creating     SWA KV cache, size = 512 cells\n" + line)
    pair = read_engine_log("x.log", text=iswa, engine="llama.cpp")
    assert len(pair.startup["startups"]) == 1 and [c["swa"] for c in pair.parsed["caches"]] == ["non-swa", "swa"]
    assert pair.pool_bytes.text == "4.00 MiB + 4.00 MiB"  # one context's two caches: both are its pool


def test_vllm_dcp_without_max_model_len_uses_the_configs_then_shards_it():
    lines = read("vllm_qwen3-235b-a22b_tp8_dcp2.log").splitlines()
    p = read_engine_log("dcp.log", text="\n".join(lines[:3]) + "\n")  # no concurrency line: no max length logged
    assert p.max_model_len is None and p.pool_tokens == 861_792
    cc = crosscheck(p, spec_from_config(QWEN3_235B, name="qwen3-235b-a22b", source="test"), kv_format="bf16")
    # the config's 262,144, then cdiv(262,144, 2) per rank: the same 53,862 blocks as above
    assert cc["status"] == "consistent" and cc["expected"]["num_blocks"] == 53_862
    assert "max_model_len not logged" in cc["lines"][0] and "context parallel 2" in cc["lines"][0]


def test_ollama_kv_self_size_takes_its_cells_from_kv_size_and_cross_checks():
    p = read_engine_log(LOGS / "llamacpp_ollama_qwen2_reload.log")
    (c,) = p.parsed["caches"]
    assert c["cells"] == 8192 and c["layers"] is None  # "kv_size = 8192 … n_layer = 64"
    # a qwen2 of 64 layers with 8 KV heads of 128 (Qwen2.5-32B's shape): 8,192 cells × 64 × 8 × 128 × 2 B
    # = 1,073,741,824 B = 1024.00 MiB for K, V alike, as logged
    qwen2 = spec_from_config(dict(model_type="qwen2", num_hidden_layers=64, num_attention_heads=40,
                                  num_key_value_heads=8, hidden_size=5120, intermediate_size=27648,
                                  vocab_size=152064, torch_dtype="bfloat16"), name="qwen2-64l", source="test")
    assert 8192 * 64 * 8 * 128 * 2 == 1024 * MIB
    cc = crosscheck(p, qwen2)
    assert cc["status"] == "agrees" and cc["pool_bytes"] == 2 * 1024 * MIB
    wrong = spec_from_config(dict(model_type="qwen2", num_hidden_layers=48, num_attention_heads=40,
                                  num_key_value_heads=8, hidden_size=5120, intermediate_size=13824,
                                  vocab_size=152064, torch_dtype="bfloat16"), name="qwen2-48l", source="test")
    assert crosscheck(p, wrong)["status"] == "differs"  # 48 layers give 768 MiB, not 1024


def test_cli_service_and_startup_flags_choose_what_is_read(tmp_path, capsys):
    """``import-log --service`` reads one compose service; without it the two pools are refused (exit 2)."""
    import json

    from kvgate.cli import main

    log = tmp_path / "compose.log"
    log.write_text(_two_services())
    assert main(["import-log", str(log), "--json"]) == 2
    capsys.readouterr()
    assert main(["import-log", str(log), "--service", "vllm-b-1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pool"]["pool_tokens"] == 75_840
    two = tmp_path / "two.log"
    two.write_text(read("vllm_0.24.0_qwen3.6-35b-a3b_fp8kv.log") + read("vllm_qwen3-235b-a22b-fp8_tp4_lmcache.log"))
    assert main(["import-log", str(two), "--startup", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pool"]["pool_tokens"] == 567_978


def test_a_tp_or_kv_format_neither_logged_nor_given_is_said_to_be_assumed():
    """A vLLM log without its config line, read without --tp / --kv-format: the cross-check
    says TP 1 and the model's dtype were assumed, instead of agreeing silently."""
    from kvgate.engines import crosscheck
    from kvgate.model import load_model

    pool = read_engine_log(LOGS / "vllm_0.8.5_qwen3-30b-a3b_tp4.log")
    model = load_model("qwen3-30b-a3b")
    lines = crosscheck(pool, model)["lines"]
    assert any("TP 1 assumed" in line for line in lines) and any("bf16, the model's dtype, assumed" in line
                                                                  for line in lines)
    given = crosscheck(pool, model, tp=4, kv_format="bf16")["lines"]
    assert not any("assumed" in line for line in given)


def test_a_tp_the_log_does_not_state_is_taken_from_its_weights_when_one_size_matches(capsys):
    """The same TP-4 log read through `import-log --model qwen3-30b-a3b`: the preset's exact
    61,064,245,248 B over the 14.2474 GiB one rank logged is 3.99, within 3% of 4 and of no other
    TP of 1/2/4/8/16, so TP 4 is taken (noted), not TP 1 (which made `gate` advise "-tp 2
    fits": the new-user trial). A checkpoint no TP matches (qwen3-32b's 65.5 GB: 4.28 ranks)
    keeps TP 1, said to be assumed; --tp given wins."""
    import json

    from kvgate.cli import main

    log = str(LOGS / "vllm_0.8.5_qwen3-30b-a3b_tp4.log")
    assert main(["import-log", log, "--model", "qwen3-30b-a3b", "--kv-format", "bf16", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pool"]["tp"] == 4
    assert any(n.startswith("TP 4 from the weights") for n in doc["pool"]["notes"])
    assert main(["import-log", log, "--model", "qwen3-32b", "--kv-format", "bf16", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pool"]["tp"] in (None, 1) and not any("from the weights" in n for n in doc["pool"]["notes"])
    assert main(["import-log", log, "--model", "qwen3-30b-a3b", "--kv-format", "bf16", "--tp", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pool"]["tp"] == 2 and not any("from the weights" in n for n in doc["pool"]["notes"])
