"""kvgate fit (vLLM): flag parsing, defaults, the KV side to the byte, verdicts, flip points, CLI."""

from __future__ import annotations

import json

import pytest

from kvgate.engines.vllm.budget import requested_memory, weights_term
from kvgate.engines.vllm.fit import fit_vllm
from kvgate.engines.vllm.flags import VllmFlags, resolve_vllm_flags
from kvgate.errors import KvgateError
from kvgate.fit import gpu_from_total, human_readable_int, lookup_gpu, resolve_release
from kvgate.fit.gpus import RESERVED_HIGH, RESERVED_LOW, printed_interval
from kvgate.fit.interval import Interval
from kvgate.fit.widths import model_widths
from kvgate.model import load_preset

GiB = 2**30
MiB = 2**20


@pytest.fixture
def run_cli_fail(capsys):
    from kvgate.cli import main

    def run(*argv):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code
        assert code == 2
        return capsys.readouterr().err
    return run
LLAMA_CKPT = 16_060_522_496  # Llama-3.1-8B safetensors total_size


@pytest.mark.parametrize("text,value", [
    ("32k", 32_000), ("32K", 32_768), ("128k", 128_000), ("128K", 131_072), ("1m", 1_000_000),
    ("1M", 1_048_576), ("25.6k", 25_600), ("8192", 8192), (" 4k ", 4000),
])
def test_human_readable_int_as_vllm(text, value):
    assert human_readable_int(text) == value


@pytest.mark.parametrize("text", ["1.5K", "abc", "0", "-3", "12q"])
def test_human_readable_int_refuses(text):
    with pytest.raises(KvgateError):
        human_readable_int(text)


def test_human_readable_int_auto():
    assert human_readable_int("auto", allow_auto=True) is None
    assert human_readable_int("-1", allow_auto=True) is None


def test_gpu_table_bytes():
    h100 = lookup_gpu("H100")
    assert h100.nvml_total_bytes == 81_559 * MiB == 85_520_809_984
    # the H100's band is its own: the CUDA totals vLLM printed on H100s (79.18 and 79.22 GiB)
    assert h100.cuda_total == Interval(printed_interval("79.18 GiB").low, printed_interval("79.22 GiB").high)
    h200 = lookup_gpu("nvidia h200")
    assert h200.nvml_total_bytes == 150_754_820_096
    assert h200.cuda_total == Interval.point(150_109_880_320)
    assert lookup_gpu("A100-80GB").nvml_total_bytes == 80 * GiB
    assert lookup_gpu("rtx 4090").nvml_total_bytes == 24_564 * MiB
    with pytest.raises(KvgateError, match="ambiguous"):
        lookup_gpu("A100")
    with pytest.raises(KvgateError, match="unknown GPU"):
        lookup_gpu("Voodoo2")


def test_requested_memory_is_total_times_utilization():
    assert requested_memory(Interval.point(150_109_880_320), 0.9) == Interval.point(135_098_892_288)


def _settings(release, gpu, **kw):
    return resolve_vllm_flags(VllmFlags(**kw), resolve_release("vllm", release), cuda_total_bytes=gpu.cuda_total.low,
                              gpu_name=gpu.name, max_position_embeddings=131072)


def test_vllm_defaults_by_release_and_gpu():
    s = _settings("0.11.0", lookup_gpu("H100"))
    assert (s.gpu_memory_utilization, s.max_model_len, s.max_num_seqs, s.max_num_batched_tokens) == (0.9, 131072, 1024, 8192)
    assert s.v1 and not s.cudagraph_pool_subtracted
    s = _settings("0.11.0", lookup_gpu("A100-80GB"))  # A100 keeps the small-GPU defaults
    assert (s.max_num_seqs, s.max_num_batched_tokens) == (256, 2048)
    s = _settings("0.6.4", lookup_gpu("RTX 3090"), max_model_len=20000)  # V0, chunked prefill off
    assert not s.v1 and s.max_num_batched_tokens == 20000 and s.max_num_seqs == 256
    s = _settings("0.6.4", lookup_gpu("RTX 3090"), max_model_len=40000)  # V0, chunked prefill on by itself
    assert s.max_num_batched_tokens == 2048
    assert _settings("0.21.0", lookup_gpu("H100")).cudagraph_pool_subtracted
    assert not _settings("0.21.0", lookup_gpu("H100"), enforce_eager=True).cudagraph_pool_subtracted
    with pytest.raises(KvgateError, match="no V0"):
        _settings("0.11.0", lookup_gpu("H100"), use_v1=False)


def test_bad_flags_refused():
    with pytest.raises(KvgateError, match="gpu-memory-utilization"):
        VllmFlags(gpu_memory_utilization=1.5)
    with pytest.raises(KvgateError, match="max-num-seqs"):
        VllmFlags(max_num_seqs=0)


def test_widths_llama_by_hand():
    # 2 B × (4096 + 32·128 + 2·8·128 + 3·14336) = 2 × 53,248
    w = model_widths(load_preset("llama-3.1-8b").config)
    assert (w.token_bytes, w.vocab, w.moe) == (106_496, 128_256, False)
    # TP 2: q, kv and the MLP split, the residual does not: 2 × (4096 + 2048 + 2·4·128 + 3·7168)
    assert model_widths(load_preset("llama-3.1-8b").config, tp=2).token_bytes == 2 * (4096 + 2048 + 1024 + 21504)


def _llama(pool_bytes, L, *, release="0.11.0", seqs=None):
    m = load_preset("llama-3.1-8b")
    return fit_vllm(m, weights_term(LLAMA_CKPT, ranks=1, exact=True, source="test"), lookup_gpu("H100"),
                    VllmFlags(max_model_len=L, max_num_seqs=seqs, kv_cache_memory_bytes=pool_bytes),
                    resolve_release("vllm", release))


def test_kv_side_llama_exact_bytes():
    # 32 layers × 2 (K, V) × 8 heads × 128 × 2 B = 128 KiB per token; 4 GiB per 32,768-token sequence;
    # a 64 GiB pool of 2 MiB blocks (16 tokens × 128 KiB) = 32,768 blocks = 524,288 tokens = 16 sequences
    a = _llama(64 * GiB, 32768, seqs=16)
    assert a.request_bytes == 4 * GiB
    assert a.kv_pool == Interval.point(64 * GiB)
    assert a.tokens == {"low": 524_288, "high": 524_288}
    assert a.max_concurrency == {"low": 16.0, "high": 16.0}
    assert a.fits == "yes"
    assert "GPU KV cache size: 524,288 tokens" in a.log_lines["low"]
    assert "Maximum concurrency for 32,768 tokens per request: 16.00x" in a.log_lines["low"]


def test_flip_points_exact_on_a_fixed_pool():
    # 2 GiB = 1,024 blocks of 16 tokens: one request of at most 16,384 tokens
    a = _llama(2 * GiB, 8192)
    assert a.flip_points["max_model_len"] == {"sure": 16_384, "possible": 16_384}
    assert a.flip_points["max_num_seqs_at_max_model_len"] == {"sure": 2, "possible": 2}
    b = _llama(2 * GiB, 16_385)
    assert b.fits == "no" and "larger than the available KV cache memory" in b.engine_error


def test_v0_error_wording():
    a = _llama(2 * GiB, 16_385, release="0.6.4")
    assert a.fits == "no"
    assert a.engine_error.startswith("ValueError: The model's max seq len (16385) is larger than the maximum number "
                                     "of tokens that can be stored in KV cache (16384).")
    assert "# GPU blocks: 1024" in a.log_lines["low"]  # 2 GiB / (16 tokens × 128 KiB)
    # 1,024 blocks / ceil(16,385 / 16) = 1,025 blocks per request = 0.999: vLLM prints %.2f
    assert "Maximum concurrency for 16385 tokens per request: 1.00x" in a.log_lines["low"]


def test_no_available_memory():
    m = load_preset("llama-3.1-8b")
    # 20.5 GiB of weights load on the L4 (22 GiB) but leave nothing of its 0.9 share for the KV cache;
    # weights above the card itself stop at the load (test_bad_input_new_commands.py)
    a = fit_vllm(m, weights_term(int(20.5 * GiB), ranks=1, exact=True, source="test"), lookup_gpu("L4"),
                 VllmFlags(max_model_len=4096), resolve_release("vllm", "0.11.0"))
    assert a.fits == "no" and "No available memory for the cache blocks" in a.engine_error
    assert a.kv_pool.high <= 0


def test_pool_is_budget_minus_terms_and_verdict_yes_on_h100():
    a = _llama(None, 32768, seqs=16)
    lo = a.budget.low - sum(t.value.high for t in a.terms if t.counted)
    hi = a.budget.high - sum(t.value.low for t in a.terms if t.counted)
    assert a.kv_pool == Interval(lo, hi)
    assert a.fits == "yes"
    # 16 sequences of 4 GiB do not all fit in ~53-55 GiB: requests queue
    assert 13 <= a.max_concurrency["low"] < 16
    assert a.flip_points["max_num_seqs_at_max_model_len"]["sure"] == int(a.max_concurrency["low"])
    assert any("wait in the queue" in n for n in a.notes)


def test_straddle_is_unknown():
    # L4: 0.9 × ~22.1 GiB − ~15-16 GiB of weights leaves ~3-4 GiB; a request of 3.5 GiB straddles
    m = load_preset("llama-3.1-8b")
    a = fit_vllm(m, weights_term(LLAMA_CKPT, ranks=1, exact=True, source="test"), lookup_gpu("L4"),
                 VllmFlags(max_model_len=28_672, enforce_eager=True), resolve_release("vllm", "0.11.0"))
    assert a.kv_pool.low < a.request_bytes < a.kv_pool.high
    assert a.fits == "unknown" and "kvgate run" in a.how_to_measure


def test_weights_split_over_ranks():
    t = weights_term(LLAMA_CKPT, ranks=4, exact=True, source="x")
    assert t.value.low == LLAMA_CKPT // 4
    e = weights_term(LLAMA_CKPT, ranks=1, exact=False, source="x")
    assert e.value.width > t.value.width * 4 and "ESTIMATE" in e.source


def test_given_total():
    g = gpu_from_total(24 * GiB)
    assert g.cuda_total == Interval(24 * GiB - RESERVED_HIGH, 24 * GiB - RESERVED_LOW)


def test_cli_json(run_cli):
    out = run_cli("fit", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "32k", "--release", "0.11.0",
                  "--weights-bytes", str(LLAMA_CKPT), "--json")
    d = json.loads(out)
    for k in ("engine", "release", "kv_pool_bytes", "tokens", "max_concurrency", "fits", "terms", "flip_points"):
        assert k in d
    assert d["engine"] == "vllm" and d["release"] == "0.11.0"
    assert d["settings"]["max_model_len"] == 32_000
    assert {t["name"] for t in d["terms"]} >= {"weights", "non-torch memory", "CUDA graph pool"}
    assert all({"name", "low", "high", "source"} <= set(t) for t in d["terms"])
    assert d["fits"] in ("yes", "no", "unknown")


def test_cli_text_speaks_vllm(run_cli):
    out = run_cli("fit", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "32768", "--max-num-seqs", "16",
                  "--release", "0.11.0", "--weights-bytes", str(LLAMA_CKPT))
    assert "GPU KV cache size:" in out and "Maximum concurrency for 32,768 tokens per request" in out
    assert "KV cache pool" in out and "verdict: FITS" in out
    for word in ("mirror", "slot", "paging"):
        assert word not in out.lower()


@pytest.mark.parametrize("argv,msg", [
    (["-c", "4k"], "llama.cpp takes plain numbers"),
    (["--context-length", "32k"], "(SGLang takes plain numbers)"),  # was "(llama.cpp takes ...)"
    (["--page-size", "1.5"], "(SGLang takes plain numbers)"),
    # llama.cpp reads -c with std::stoi (common/arg.cpp): it refuses a -c above INT_MAX, so kvgate does
    (["-c", "99999999999"], "-c/--ctx-size: '99999999999' is above 2,147,483,647"),
    (["-ngl", "2147483648"], "is above 2,147,483,647"),
    (["--gpu", "H100", "--total", "80GiB"], "twice"),
    (["--gpu", "A100"], "ambiguous"),
])
def test_cli_errors(run_cli_fail, argv, msg):
    err = run_cli_fail("fit", "llama-3.1-8b", "--weights-bytes", "1GiB", *argv)
    assert msg in err


# ---------------------------------------------------------------- SGLang
def test_sglang_default_mem_fraction_static():
    from kvgate.engines.sglang.flags import default_mem_fraction_static

    assert [default_mem_fraction_static(tp, False) for tp in (1, 2, 4, 8, 16)] == [0.88, 0.87, 0.85, 0.81, 0.79]
    assert default_mem_fraction_static(1, True) == 0.836


def test_sglang_pool_by_hand():
    # H200 CUDA total 150,109,880,320 B; free = total − [230, 1230] MiB (start memory seen in the SGLang logs of
    # tests/data/fit_logs, benchmarks/fit_logs_other.py); pool = 0.85 × free − weights;
    # tokens = pool // 131,072 B (Llama-3.1-8B bf16 cell), page 1
    from kvgate.engines.sglang.fit import fit_sglang
    from kvgate.engines.sglang.flags import SglangFlags

    w = weights_term(LLAMA_CKPT, ranks=1, exact=True, source="t")
    a = fit_sglang(load_preset("llama-3.1-8b"), w, lookup_gpu("H200"), SglangFlags(mem_fraction_static=0.85,
                   context_length=32768), resolve_release("sglang", "0.4.4"))
    lo = (150_109_880_320 - 1230 * MiB) * 85 // 100 - w.value.high
    hi = (150_109_880_320 - 230 * MiB) * 85 // 100 - LLAMA_CKPT
    assert a.kv_pool == Interval(lo, hi)
    assert a.tokens == {"low": lo // 131_072, "high": hi // 131_072}
    assert a.fits == "yes"
    assert a.log_lines["low"][1] == f"max_total_num_tokens={lo // 131_072}, context_len=32768"
    assert a.flip_points["max_running_requests_at_context_length"]["sure"] == lo // 131_072 // 32768


def test_sglang_not_enough_memory():
    from kvgate.engines.sglang.fit import fit_sglang
    from kvgate.engines.sglang.flags import SglangFlags

    a = fit_sglang(load_preset("llama-3.1-8b"), weights_term(20 * GiB, ranks=1, exact=True, source="t"), lookup_gpu("L4"),
                   SglangFlags(context_length=4096), resolve_release("sglang", "0.4.4"))
    assert a.fits == "no" and a.engine_error == ("RuntimeError: Not enough memory. Please try to increase "
                                                 "--mem-fraction-static.")


def test_cli_engine_from_its_flags(run_cli):
    d = json.loads(run_cli("fit", "llama-3.1-8b", "--gpu", "H200", "--context-length", "32000", "--weights-bytes",
                           str(LLAMA_CKPT), "--json"))
    assert d["engine"] == "sglang" and d["settings"]["context_length"] == 32_000
    assert "SGLang would log" in run_cli("fit", "llama-3.1-8b", "--gpu", "H200", "--mem-fraction-static", "0.8",
                                         "--weights-bytes", str(LLAMA_CKPT))


def test_cli_two_engines_refused(run_cli_fail):
    assert "flags of two engines" in run_cli_fail("fit", "llama-3.1-8b", "--gpu", "H200", "--max-model-len", "4096",
                                                  "--context-length", "4096")
    assert "under --engine vllm" in run_cli_fail("fit", "llama-3.1-8b", "--gpu", "H200", "--engine", "vllm",
                                                 "--mem-fraction-static", "0.8")


# ---------------------------------------------------------------- llama.cpp
def _lcpp(model, wb, gpu, **kw):
    from kvgate.engines.llamacpp.fit import LlamaCppFlags, fit_llamacpp

    return fit_llamacpp(model, wb, True, "test", lookup_gpu(gpu), LlamaCppFlags(**kw), resolve_release("llama.cpp", "b5489"))


def test_llamacpp_kv_buffer_exact():
    # Qwen3-0.6B, -c 4096, f16: 28 layers × 4096 cells × (8 × 128 × 2 B) × 2 (K, V) = 448 MiB
    a = _lcpp(load_preset("qwen3-0.6b"), 1_500_000_000, "RTX 4090", ctx_size=4096)
    assert a.kv_pool == Interval.point(469_762_048)
    assert "CUDA0 KV buffer size = 448.00 MiB" in a.log_lines["low"]
    # -c is the whole context: -np 4 gives each sequence 1,024 cells, the same 448 MiB in total
    b = _lcpp(load_preset("qwen3-0.6b"), 1_500_000_000, "RTX 4090", ctx_size=4096, parallel=4)
    assert b.tokens_per_sequence == {"low": 1024, "high": 1024} and b.kv_pool == a.kv_pool
    # q8_0 K and V: 34 B per 32 values
    c = _lcpp(load_preset("qwen3-0.6b"), 1_500_000_000, "RTX 4090", ctx_size=4096, cache_type_k="q8_0", cache_type_v="q8_0")
    assert c.kv_pool == Interval.point(28 * 4096 * 2 * (1024 // 32 * 34))


def test_llamacpp_offload_flip_points():
    # Llama-3.1-70B at 40 GiB of weights does not fit a 24 GiB card: some layers stay on the CPU
    a = _lcpp(load_preset("llama-3.1-70b"), 40 * GiB, "RTX 4090", ctx_size=8192, flash_attn="on")
    assert a.fits == "no" and "cudaMalloc failed" in a.engine_error
    cpu = a.flip_points["layers_on_cpu_at_ctx_size"]
    assert 0 < cpu["possible"] <= cpu["sure"] < 80
    assert a.flip_points["ctx_size_all_layers_on_gpu"] == {"sure": None, "possible": None}
    # with its CPU layers, it fits: the same answer at the -ngl flip (80 − sure + 1: -ngl counts
    # the output layer, llama-model.cpp i_gpu_start = n_layer + 1 − ngl), host RAM given
    ngl = a.flip_points["n_gpu_layers_at_ctx_size"]["sure"]
    assert ngl == 80 - cpu["sure"] + 1
    b = _lcpp(load_preset("llama-3.1-70b"), 40 * GiB, "RTX 4090", ctx_size=8192, flash_attn="on",
              n_gpu_layers=ngl, host_memory=2**40)
    assert b.fits == "yes"
    # an 8B model fits whole; the largest -c with every layer on the GPU is a multiple of 256
    c = _lcpp(load_preset("llama-3.1-8b"), LLAMA_CKPT, "RTX 4090", ctx_size=8192, flash_attn="on")
    assert c.fits == "yes"
    top = c.flip_points["ctx_size_all_layers_on_gpu"]["sure"]
    assert top % 256 == 0 and 8192 < top < 131072


def test_cli_llamacpp(run_cli):
    d = json.loads(run_cli("fit", "qwen3-0.6b", "--gpu", "RTX-4090", "-c", "4096", "-np", "2", "-fa", "off", "--json"))
    assert d["engine"] == "llama.cpp" and d["settings"]["n_ctx_seq"] == 2048
    assert d["kv_pool_bytes"] == {"low": 469_762_048, "high": 469_762_048}


def test_local_gpu_through_nvml(monkeypatch):
    """No --gpu / --total: this machine's GPU 0; CUDA total = NVML v2 total − reserved
    (as measured on an H200), the reserve band when only v1 answers."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    import _fake_pynvml as fake
    from kvgate.fit import local_gpu
    from kvgate.measure import nvml

    monkeypatch.setattr(nvml, "_DEFAULT", nvml.Nvml(module=fake.make()))
    g = local_gpu(0)
    assert g.nvml_total_bytes == fake.H200_TOTAL
    assert g.cuda_total == Interval.point(fake.H200_TOTAL - fake.H200_RESERVED)
    monkeypatch.setattr(nvml, "_DEFAULT", nvml.Nvml(module=fake.make(v2=False)))
    assert local_gpu(0).cuda_total == Interval(fake.H200_TOTAL - RESERVED_HIGH, fake.H200_TOTAL - RESERVED_LOW)


def test_cudagraph_pool_subtracted_from_020():
    """vLLM 0.20 subtracts its CUDA graph estimate from the KV budget (vllm/envs.py
    VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default "1" at 0.20.0); 0.19 does not ("0")."""
    m = load_preset("llama-3.1-8b")
    w = weights_term(LLAMA_CKPT, ranks=1, exact=True, source="t")
    old = fit_vllm(m, w, lookup_gpu("H200"), VllmFlags(max_model_len=32768, gpu_memory_utilization=0.9),
                   resolve_release("vllm", "0.19.1"))
    new = fit_vllm(m, w, lookup_gpu("H200"), VllmFlags(max_model_len=32768, gpu_memory_utilization=0.9),
                   resolve_release("vllm", "0.20.0"))  # 0.92 is 0.20's default
    graph = next(t for t in new.terms if t.name == "CUDA graph pool")
    assert graph.counted and not next(t for t in old.terms if t.name == "CUDA graph pool").counted
    assert new.kv_pool == Interval(old.kv_pool.low - graph.value.high, old.kv_pool.high - graph.value.low)


def test_multimodal_is_cant_tell(tmp_path, run_cli):
    from importlib import resources

    cfg = json.loads(resources.files("kvgate.model.presets").joinpath("llama-3.1-8b.json").read_text())
    cfg["vision_config"] = {"hidden_size": 1280}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    d = json.loads(run_cli("fit", str(tmp_path), "--gpu", "H200", "--max-model-len", "8192", "--weights-bytes",
                           str(LLAMA_CKPT), "--release", "0.11.0", "--json"))
    assert d["fits"] == "unknown" and "multimodal" in d["reason"]


@pytest.mark.parametrize("argv", [
    ["--gpu", "H200", "--context-length", "32768"],
    ["--gpu", "RTX-4090", "-c", "32768", "-np", "4"],
])
def test_cli_text_engine_words_sglang_llamacpp(run_cli, argv):
    out = run_cli("fit", "llama-3.1-8b", "--weights-bytes", str(LLAMA_CKPT), *argv).lower()
    for word in ("mirror", "slot", "paging"):
        assert word not in out


def test_model_directory_gives_exact_weights(tmp_path, run_cli):
    """MODEL as a directory: weights exact from its safetensors header, split over -tp."""
    import sys
    from importlib import resources
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_weights import write_st

    cfg = resources.files("kvgate.model.presets").joinpath("llama-3.1-8b.json").read_text()
    (tmp_path / "config.json").write_text(cfg)
    write_st(tmp_path / "model.safetensors", {"a": ("BF16", [1024, 1024], 2 * 1024 * 1024),
                                              "b": ("BF16", [4096, 1024], 8 * 1024 * 1024)})
    d = json.loads(run_cli("fit", str(tmp_path), "--gpu", "H200", "-tp", "2", "--max-model-len", "8192",
                           "--release", "0.11.0", "--json"))
    w = next(t for t in d["terms"] if t["name"] == "weights")
    assert w["low"] == 10 * 1024 * 1024 // 2 and "(file)" in w["source"]


def test_max_model_len_auto(run_cli):
    # a 2 GiB pool holds one request of at most 16,384 tokens: auto picks that
    d = json.loads(run_cli("fit", "llama-3.1-8b", "--gpu", "H200", "--max-model-len", "auto", "--kv-cache-memory-bytes",
                           str(2 * GiB), "--weights-bytes", str(LLAMA_CKPT), "--release", "0.11.0", "--json"))
    assert d["settings"]["max_model_len"] == 16_384 and d["fits"] == "yes"
    assert d["settings"]["defaults"]["max_model_len"] == "--max-model-len auto"


def test_no_gpu_and_no_nvml_says_what_to_give(monkeypatch, run_cli_fail):
    import sys

    from kvgate.measure import nvml

    monkeypatch.setattr(nvml, "_DEFAULT", None)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    err = run_cli_fail("fit", "llama-3.1-8b", "--max-model-len", "4096")
    assert "--gpu NAME" in err


def test_gpu_name_with_a_count_points_to_tensor_parallel_and_typos_get_did_you_mean():
    with pytest.raises(KvgateError) as e:
        lookup_gpu("2xH100")
    assert "one card" in e.value.message and "-tp 2" in e.value.hint
    with pytest.raises(KvgateError, match=r"unknown GPU 'RTX4900' \(did you mean RTX 4090"):
        lookup_gpu("RTX4900")


def test_llamacpp_int_max_itself_is_still_answered(run_cli):
    """The limit is llama.cpp's INT_MAX, not lower: -c 2,147,483,647 is sized (it does not fit)."""
    out = run_cli("fit", "llama-3.1-8b", "--weights-bytes", "1GiB", "--gpu", "H100", "-c", "2147483647")
    flags = next(ln for ln in out.splitlines() if ln.startswith("flags: "))
    assert "-c 2147483647 " in flags and "DOES NOT FIT" in out


def test_sglang_flip_points_say_one_number_when_sure_and_best_agree(capsys):
    """'25 … 25 requests' and 'up to 131,072 tokens for sure, 131,072 at best' read as two
    answers where there is one; an interval that stays open keeps both ends."""
    from kvgate.cli import main

    assert main(["fit", "llama-3.1-8b", "--gpu", "H200", "--context-length", "32768", "--mem-fraction-static",
                 "0.85", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    mr, cl = (doc["flip_points"][k] for k in ("max_running_requests_at_context_length", "context_length"))
    assert main(["fit", "llama-3.1-8b", "--gpu", "H200", "--context-length", "32768", "--mem-fraction-static",
                 "0.85"]) == 0
    out = capsys.readouterr().out
    for key, words, f in (("max_running_requests", f"{mr['sure']:,} requests of 32,768", mr),
                          ("context_length", f"up to {cl['sure']:,} tokens\n", cl)):
        line = next(ln for ln in out.splitlines() if ln.startswith(f"  --{key.replace('_', '-')}:"))
        if f["sure"] == f["possible"]:
            assert words.strip() in line and "…" not in line and "at best" not in line, line
        else:
            assert "…" in line or "at best" in line, line
    assert mr["sure"] == mr["possible"] or cl["sure"] == cl["possible"]  # the case this test is about
