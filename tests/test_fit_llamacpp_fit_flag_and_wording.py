"""Round 5 of ``kvgate fit``: llama.cpp's ``--fit`` (on by default at b11312), flip wording."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess

import pytest

PRESET = "tests/data/llamacpp/conformance/preset-llama-3.1-70b.gguf"
REPRO = [PRESET, "--weights-bytes", "40GB", "-c", "16384", "-np", "2", "--gpu", "RTX 4090", "--host-memory", "1TiB"]


def _kvgate(*argv: str) -> subprocess.CompletedProcess[str]:
    """``kvgate ARGV`` run in this process (as ``python -m kvgate`` runs it, without the
    interpreter's start): its exit status, stdout and stderr."""
    from kvgate.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse's usage errors
            rc = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(list(argv), rc, out.getvalue(), err.getvalue())


def _fit(*args: str) -> subprocess.CompletedProcess[str]:
    return _kvgate("fit", *args)


def test_fit_on_by_default_keeps_39_of_80_layers() -> None:
    """Hand-worked: 40 GB over 80 layers = 0.5 GB a layer (high end), KV 64 MiB a layer
    (2 × 8 KV heads × 128 × 2 B × 8192 cells × 2 seqs). llama.cpp's --fit (common/fit.cpp at
    0c1e57098bba) projects model + KV + compute, no CUDA context, against the free memory it
    reads: the RTX 4090's CUDA total at its low end, 24,564 MiB less the widest driver reserve
    (793.6 MiB: no CUDA total of this card is on record, kvgate.fit.gpus) = 23,770.4 MiB, less
    593 MiB of context = 23,177.4 MiB, less the 1024 MiB target = 22,153.4 MiB. -ngl counts the
    output layer (llama-model.cpp i_gpu_start = n_layer + 1 − ngl): -ngl 40 is 39 layers + the
    output (128 × 8,192 here, a few KB): 19.5e9 B (18,597.5 MiB) + 2,496 MiB + compute 659.7 MiB
    (partial offload's high end) = 21,753.2 MiB ≤ 22,153.4; -ngl 41 adds 0.5e9 B + 64 MiB =
    22,294.0 MiB > 22,153.4. So --fit keeps 39 layers and the output for sure."""
    r = _fit(*REPRO, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["fits"] == "yes"
    assert d["settings"]["n_gpu_layers"] == 40
    assert d["engine_error"] is None
    assert any("--fit" in n and "39 of 80 layers and the output on the GPU (-ngl 40)" in n for n in d["notes"])


def test_fit_off_and_old_builds_keep_the_oom() -> None:
    for extra in (["-fit", "off"], ["--release", "b7000"]):
        d = json.loads(_fit(*REPRO, *extra, "--json").stdout)
        assert d["fits"] == "no", extra
        assert "cudaMalloc failed" in d["engine_error"]
        assert d["settings"]["n_gpu_layers"] == 999


def test_given_ngl_is_left_alone() -> None:
    d = json.loads(_fit(*REPRO, "-ngl", "999", "--json").stdout)
    assert d["fits"] == "no"
    assert d["settings"]["n_gpu_layers"] == 999


def test_fit_flag_in_engine_flags_help() -> None:
    r = _kvgate("help", "engine-flags", "llama.cpp")
    assert "-fit, --fit on|off" in r.stdout


@pytest.mark.parametrize("bad", ["maybe"])
def test_fit_flag_rejects_other_values(bad: str) -> None:
    r = _fit(*REPRO, "-fit", bad)
    assert r.returncode == 2


QWEN = ["tests/data/llamacpp/conformance/qwen3-8b.gguf", "-np", "2", "--gpu", "RTX 4090", "--weights-bytes", "8.7GB"]


def test_vllm_flips_respect_max_position_embeddings() -> None:
    """llama-3.1-8b: max_position_embeddings 131,072; --max-model-len 200,000 is refused, so
    no flip point may say 200,000 fits or that sequences of it run."""
    d = json.loads(_fit("llama-3.1-8b", "--gpu", "H100", "--max-model-len", "200000", "--json").stdout)
    assert d["fits"] == "no"
    ml = d["flip_points"]["max_model_len"]
    assert ml["sure"] <= 131072 and ml["possible"] <= 131072
    assert d["flip_points"]["max_num_seqs_at_max_model_len"]["possible"] == 0
    text = _fit("llama-3.1-8b", "--gpu", "H100", "--max-model-len", "200000").stdout
    assert "fits up to 200,000" not in text
    assert "sequences of 200,000 tokens run at once" not in text


def test_llamacpp_c_flip_is_n_ctx_train_times_np_not_the_input() -> None:
    """qwen3-8b: n_ctx_train 40,960; -np 2 streams: the largest -c is 81,920 whatever -c was given
    (8.7 GB of weights leave room for it on a 4090)."""
    for c in ("65536", "16384"):
        d = json.loads(_fit(*QWEN, "-c", c, "--json").stdout)
        assert d["flip_points"]["ctx_size_all_layers_on_gpu"]["possible"] == 40960 * 2, c
        assert any("n_ctx_train 40,960 × 2" in n for n in d["notes"])


def test_llamacpp_c_above_n_ctx_train_gets_the_warning_note() -> None:
    # -c 100,000 / -np 2 = 50,000 cells a sequence, padded to 256: 50,176 > 40,960
    d = json.loads(_fit(*QWEN, "-c", "100000", "--json").stdout)
    assert any("n_ctx_seq (50176) > n_ctx_train (40960)" in n for n in d["notes"]), d["notes"]


def test_sglang_dsa_table_shows_the_stored_pool() -> None:
    """GLM-5 (DeepSeek sparse attention) at SGLang 0.5.9: the pool stores 61,464 B a token
    (fp8 row with its scales and bf16 rope part, plus the indexer) while SGLang budgets
    55,224 B; the table's stored row is (#tokens + one page of 64) × 61,464 B (the pool holds
    size + page_size slots), the log's "KV size"."""
    args = ["tests/data/configs/glm-5.json", "--gpu", "B200", "--tp-size", "8", "--context-length", "32768",
            "--weights-bytes", "750GB", "--release", "0.5.9"]
    d = json.loads(_fit(*args, "--json").stdout)
    lo, hi = d["tokens"]["low"], d["tokens"]["high"]
    assert d["kv_stored_bytes"]["low"] == (lo + 64) * 61464
    assert d["kv_stored_bytes"]["high"] == (hi + 64) * 61464
    text = _fit(*args).stdout
    row = next(ln for ln in text.splitlines() if ln.startswith("  KV cache pool as stored"))
    shown = (lo + 64) * 61464 / 2**30
    assert f"{shown:.2f} GiB" in row
    assert f"KV size: {shown:.2f} GB" in text


def test_wording_no_c_fits_and_singular_np() -> None:
    text = _fit(*REPRO).stdout
    assert "-c: no -c fits with every layer on the GPU" in text
    assert "up to none" not in text
    # -np 1 given: without it llama-server runs 4 slots (tools/server/server.cpp, n_parallel auto)
    one = _fit("qwen3-4b", "-c", "32768", "-np", "1", "--gpu", "RTX 4090").stdout
    assert "-np 1 sequences" not in one
    assert "(-np 1 sequence has it)" in one


def test_wording_max_num_seqs_none_for_sure() -> None:
    from types import SimpleNamespace

    from kvgate.fit.render import _vllm_flips

    a = SimpleNamespace(settings={"max_model_len": 8192, "max_num_seqs": None},
                        flip_points={"max_model_len": {"sure": 4096, "possible": 9000},
                                     "max_num_seqs_at_max_model_len": {"sure": 0, "possible": 2}})
    line = next(ln for ln in _vllm_flips(a) if "--max-num-seqs" in ln)  # type: ignore[arg-type]
    assert "none for sure, up to 2 sequences" in line
    assert "0 …" not in line


def test_flags_line_shows_dcp() -> None:
    text = _fit("llama-3.1-70b", "--gpu", "H200", "-tp", "16", "-dcp", "2").stdout
    flags = text.split("flags:", 1)[1].split("\nengine:", 1)[0]  # the flags, over as many lines as they take
    assert "--decode-context-parallel-size 2" in flags


def test_header_says_one_cuda_total_when_both_ends_print_the_same() -> None:
    from types import SimpleNamespace

    from kvgate.fit.interval import Interval
    from kvgate.fit.render import _header

    gib = 2**30
    a = SimpleNamespace(release=SimpleNamespace(text="0.11.0", how="given"), model="m",
                        gpu=SimpleNamespace(name="H100", cuda_total=Interval(int(79.19 * gib), int(79.19 * gib) + 4096),
                                            nvml_total_bytes=None, reserve=None))
    head = _header(a, "vLLM")  # type: ignore[arg-type]
    assert "(CUDA total 79.19 GiB)" in head


def test_sources_read_for_a_user_json_keeps_the_rule() -> None:
    from kvgate.fit.render import plain_source

    src = ("max(...); 0.8-0.11 _dummy_sampler_run, top-k/top-p: FlashInfer when installed (b+12) or PyTorch's sort "
           "(b+36; b+49 for 2-127 rows)")
    out = plain_source(src)
    assert "b+" not in out and "_dummy_sampler_run" not in out
    assert "sampler warm-up" in out
    assert plain_source("×[0.85, 1.00]: x, ESTIMATE ×[0.85, 1.15]") == "× 85–100%: x, an estimate × 85–115%"
    d = json.loads(_fit("llama-3.1-8b", "--gpu", "H100", "--release", "0.10.1", "--json").stdout)
    assert any("_dummy_sampler_run" in t["source"] for t in d["terms"])


def test_preset_without_gguf_says_bf16() -> None:
    # qwen3-4b: 4,022,468,096 parameters × 2 B (bfloat16) = 8,044,936,192 B
    d = json.loads(_fit("qwen3-4b", "-c", "32768", "--gpu", "RTX 4090", "--json").stdout)
    assert any("taken as bf16" in n and "--weights-bytes" in n for n in d["notes"])


@pytest.mark.parametrize("name,mib", [("V100-16GB", 16384), ("Tesla V100-PCIE-16GB", 16384), ("V100 32GB", 32768),
                                      ("T4", 15360), ("RTX 3060", 12288), ("RTX 4060", 8188)])
def test_gpu_table_has_the_logs_cards(name: str, mib: int) -> None:
    from kvgate.fit.gpus import RESERVED_HIGH, RESERVED_LOW, lookup_gpu

    g = lookup_gpu(name)
    assert g.nvml_total_bytes == mib * 2**20
    # none of these cards has a CUDA total on record: the band of every card
    assert (g.cuda_total.low, g.cuda_total.high) == (mib * 2**20 - RESERVED_HIGH, mib * 2**20 - RESERVED_LOW)
    assert "nvidia-smi" in g.source


def test_v100_alone_is_ambiguous() -> None:
    from kvgate.errors import KvgateError
    from kvgate.fit.gpus import lookup_gpu

    with pytest.raises(KvgateError, match="16 GB or 32 GB"):
        lookup_gpu("V100")


def test_fit_without_c_reduces_the_context_by_the_1024_mib_target() -> None:
    """llama-3.1-8b, 8.5 GB weights, RTX 4090, no -c: the whole n_ctx_train 131,072 does not
    leave 1024 MiB. llama.cpp's --fit (common/fit.cpp at 0c1e57098bba) projects model + KV +
    compute (no CUDA context) against the free memory it reads (the CUDA total less the context
    already made: 520–593 MiB on an H100) less the 1024 MiB target, and interpolates linearly
    between -fitc 4096 and 131,072: n_ctx = 4096 + (131072 − 4096) × (target − used(4096)) /
    (used(131072) − used(4096)), rounded down to 256. KV is 131,072 B a token (32 layers × 8
    heads × 128 × 2 B × K and V); the sure pick takes the high end of the projection."""
    from kvgate.engines.llamacpp.fit import LlamaCppFlags, compute_buffer
    from kvgate.fit import lookup_gpu, resolve_release
    from kvgate.model import load_model

    d = json.loads(_fit("llama-3.1-8b", "-np", "1", "--gpu", "RTX 4090", "--weights-bytes", "8.5GB", "--json").stdout)
    m = load_model("llama-3.1-8b")
    rel = resolve_release("llama.cpp", None)

    def used(c: int) -> int:
        return 8_500_000_000 + 131_072 * c + compute_buffer(m, LlamaCppFlags(), c, release=rel).high

    target = lookup_gpu("RTX 4090").cuda_total.low - 593 * 2**20 - 1024 * 2**20
    n_ctx = 4096 + (131072 - 4096) * (target - used(4096)) // (used(131072) - used(4096))
    assert d["fits"] == "yes"
    assert d["settings"]["ctx_size"] == n_ctx - n_ctx % 256
    assert d["settings"]["n_gpu_layers"] == 999
    assert not any("run slower" in n for n in d["notes"])


def test_fit_that_meets_no_target_goes_on_with_ngl_0_at_the_smallest_context() -> None:
    """common/fit.cpp (0c1e57098bba): with a target no placement meets (-fitt 99999999 MiB),
    the context step sets n_ctx to its minimum (-fitc 4096 × 1 stream, unified) and the
    back-to-front fill ends at 0 layers, written as -ngl 0 by set_ngl_tensor_split_tbo; nothing
    throws, so the server starts with every layer on the CPU. The GPU then holds the compute
    buffer and the CUDA context only: it fits (found by the new-user trial, which got DOES NOT
    FIT with a cudaMalloc error)."""
    d = json.loads(_fit(PRESET, "--weights-bytes", "40GB", "--gpu", "RTX 4090", "--host-memory", "1TiB",
                        "-fitt", "99999999", "--json").stdout)
    assert d["fits"] == "yes" and d["engine_error"] is None
    assert d["settings"]["n_gpu_layers"] == 0 and d["settings"]["ctx_size"] == 4096
    assert any("goes on with -c 4,096, 0 of 80 layers on the GPU (-ngl 0)" in n for n in d["notes"])


def test_fit_that_meets_no_target_with_ngl_given_keeps_it_at_the_smallest_context() -> None:
    """The same target with -ngl 10 given: the fit aborts ("n_gpu_layers already set by user")
    after the context step has set n_ctx to its minimum; -ngl 10 stays."""
    d = json.loads(_fit(PRESET, "--weights-bytes", "40GB", "--gpu", "RTX 4090", "--host-memory", "1TiB",
                        "-fitt", "99999999", "-ngl", "10", "--json").stdout)
    assert d["settings"]["n_gpu_layers"] == 10 and d["settings"]["ctx_size"] == 4096
    assert d["fits"] == "yes"
