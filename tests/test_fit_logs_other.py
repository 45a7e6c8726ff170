"""``kvgate fit`` against the SGLang and llama.cpp startup logs of tests/data/fit_logs.

- llama.cpp: the KV buffer on the GPU to the printed 0.01 MiB; the compute buffer inside
  its band for every log and every tiny-GGUF reserve recorded in
  ``benchmarks/results/llamacpp_compute_buffer.json``; with ``-fa on`` (and ``auto`` where
  it resolves to on) no KQ matrix in the band; partial offload adds the output matrix.
- SGLang: ``--mem-fraction-static`` by release (0.4 TP table, 0.5.4 heuristic), the token
  pool inside the interval for the logs, in-sample and leave-one-out.
"""

from __future__ import annotations

import json
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from kvgate.engines.llamacpp.fit import LlamaCppFlags, compute_buffer, flash_attn_on, logits_rows
from kvgate.engines.sglang.budget import default_mem_fraction, heuristic, tp_table
from kvgate.fit.gpus import gpu_from_total, lookup_gpu
from kvgate.fit.release import resolve_release
from kvgate.model import load_model, load_preset

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "tests" / "data" / "fit_logs"
MEASURED = ROOT / "benchmarks" / "results" / "llamacpp_compute_buffer.json"
MiB, GiB = 2**20, 2**30
sys.path.insert(0, str(ROOT / "benchmarks"))

import fit_logs_other  # noqa: E402


@pytest.fixture(scope="module")
def llamacpp() -> list[fit_logs_other.Check]:
    return fit_logs_other.llamacpp_checks(FOLDER)


@pytest.fixture(scope="module")
def sglang() -> list[fit_logs_other.Check]:
    return fit_logs_other.sglang_checks(FOLDER)


def _share(checks: list[fit_logs_other.Check], loo: bool = False) -> Fraction:
    got = [c.inside_loo if loo else c.inside for c in checks]
    got = [g for g in got if g is not None]
    return Fraction(sum(got), len(got))


# ------------------------------------------------------------------ llama.cpp


def test_gpu_buffer_reader_takes_each_backend_name_and_no_host_buffer():
    """The first device buffer of a kind: CUDA0, ROCm0, Vulkan0, MTL0 and the pre-device
    ``Metal`` name (Apple M4 CI run of b4846); CPU and CUDA_Host lines are not the GPU's."""
    read = fit_logs_other._gpu_buffers
    assert read(["Metal KV buffer size =   384.00 MiB"], "KV").low // MiB == 383
    assert read(["CPU KV buffer size =   448.00 MiB", "Vulkan0 KV buffer size =   10.00 MiB"], "KV").high < 11 * MiB
    assert read(["CUDA_Host compute buffer size =    12.01 MiB"], "compute") is None
    assert read(["Metal_Mapped model buffer size =   871.83 MiB"], "KV") is None
    assert read(["MTL0 compute buffer size =   102.25 MiB"], "compute") is not None


def test_llamacpp_kv_buffer_exact_on_every_log(llamacpp):
    kv = [c for c in llamacpp if c.quantity == "KV buffer" and c.printed is not None]
    assert len(kv) >= 7
    for c in kv:
        assert c.predicted is not None and c.predicted.low == c.predicted.high
        assert c.inside, (c.file, c.printed, c.predicted)


def test_llamacpp_compute_buffer_inside_for_every_log(llamacpp):
    cb = [c for c in llamacpp if c.quantity == "compute buffer" and c.printed is not None]
    assert len(cb) >= 8
    assert all(c.inside for c in cb), [(c.file, c.printed, c.predicted) for c in cb if not c.inside]
    assert _share(cb, loo=True) >= Fraction(3, 4)


def test_compute_buffer_inside_for_every_tiny_gguf_reserve():
    """The 20 CPU reserves of llama-server at 0c1e57098bba, FA on and off."""
    rows = json.loads(MEASURED.read_text())["rows"]
    assert {r["flash_attn"] for r in rows} == {"on", "off"}
    for r in rows:
        m, f = fit_logs_other.tiny_llama_reserve(r)
        assert compute_buffer(m, f, r["ctx"]).contains(r["compute_buffer_mib"]["CPU"] * MiB), r


def test_flash_attention_on_leaves_the_kq_matrix_out():
    """Pythia-2.8B, -c 2048, -ub 512: the KQ scores alone are 512 × 2048 × 32 × 4 B = 128 MiB;
    with -fa on the log prints 103.25 MiB and the band stays below the KQ matrix."""
    model = load_model(FOLDER / "configs" / "pythia-2.8b.json")
    rel = resolve_release("llama.cpp", "b4459")
    kq = 512 * 2048 * 32 * 4
    on = compute_buffer(model, LlamaCppFlags(ctx_size=2048, flash_attn="on"), 2048, release=rel, ngl=99)
    off = compute_buffer(model, LlamaCppFlags(ctx_size=2048, flash_attn="off"), 2048, release=rel, ngl=99)
    assert on.high < kq <= off.low
    assert on.contains(103.25 * MiB) and off.contains(162.00 * MiB)
    # -fa auto: a switch (off) up to b6000, on where it resolves to on afterwards
    auto = LlamaCppFlags(ctx_size=2048, flash_attn="auto")
    assert not flash_attn_on(auto, rel) and flash_attn_on(auto, resolve_release("llama.cpp", "b7000"))
    assert compute_buffer(model, auto, 2048, release=rel, ngl=99) == off


def test_output_layer_on_the_cpu_copies_the_output_matrix_in():
    """-ngl 10 of 33: the logits matmul runs on the GPU with the output matrix copied in
    (q6_K, 50304 × 2560 × 210/256 B = 100.7 MiB) beside 98.25 MiB of logits: 203.99 MiB."""
    model = load_model(FOLDER / "configs" / "pythia-2.8b.json")
    rel = resolve_release("llama.cpp", "b4459")
    f = LlamaCppFlags(ctx_size=2048, flash_attn="on")
    part = compute_buffer(model, f, 2048, release=rel, ngl=10, weights_bytes=int(1.49 * GiB))
    full = compute_buffer(model, f, 2048, release=rel, ngl=33, weights_bytes=int(1.49 * GiB))
    assert part.contains(203.99 * MiB) and not full.contains(203.99 * MiB)


def test_logits_rows_by_build():
    f = LlamaCppFlags(parallel=4, ubatch_size=512)
    assert logits_rows(f, resolve_release("llama.cpp", "b4459")) == (512, 512)
    assert logits_rows(f, resolve_release("llama.cpp", "b9000")) == (4, 512)
    assert logits_rows(LlamaCppFlags(parallel=4, n_outputs_max=2), None) == (2, 2)
    small = compute_buffer(load_preset("qwen3-0.6b"), LlamaCppFlags(ctx_size=4096, flash_attn="on", n_outputs_max=1), 4096)
    large = compute_buffer(load_preset("qwen3-0.6b"), LlamaCppFlags(ctx_size=4096, flash_attn="on", n_outputs_max=512), 4096)
    assert large.low - small.low > 250 * MiB  # 511 rows × 151936 × 4 B ≈ 296 MiB of logits, less the 0.9 factor


# ------------------------------------------------------------------ SGLang


def test_mem_fraction_table_up_to_0_4_6():
    assert [tp_table(tp, False) for tp in (1, 2, 4, 8, 16)] == [Fraction(x, 100) for x in (88, 87, 85, 81, 79)]
    lo, hi, _ = default_mem_fraction(resolve_release("sglang", "0.4.4"), lookup_gpu("H200"), 1, multimodal=True)
    assert lo == hi == Fraction(836, 1000)


def test_mem_fraction_heuristic_from_0_5_4():
    """``_handle_gpu_memory_settings``: H100 (81,559 MiB): chunk 8192, graphs to 256, reserved
    max(512 + 12288 + 512 + 128, 10240) MiB → round(68119 / 81559, 3) = 0.835."""
    assert heuristic(81_559, 1) == Fraction(835, 1000)
    # the Kimi-K2.5 log (MI355X, 288 GiB, TP 8, multimodal) printed 0.8260405859375
    lo, hi, _ = default_mem_fraction(resolve_release("sglang", "0.5.8"), gpu_from_total(288 * GiB), 8, multimodal=True)
    assert hi == heuristic(288 * 1024, 8) == Fraction(908, 1000)
    assert lo <= Fraction("0.8260405859375") <= hi


def test_sglang_pool_inside_for_the_logs(sglang):
    checked = [c for c in sglang if c.skip is None]
    assert len(checked) >= 9
    # 7 of 9: the MI355X ROCm log, and the B200 log of 2026-04 (its pool implies a fraction of
    # 0.854 against the 0.5.4 rule's 0.857; its release is not printed; benchmarks/RESULTS.md)
    assert _share(checked) >= Fraction(7, 9)
    assert _share(checked, loo=True) >= Fraction(4, 6)
    cuda = [c for c in checked if "MI355X" not in c.gpu]
    missed = {c.file for c in cuda if not c.inside}
    assert missed == {"sglang_2026-04_qwen3-8b_b200_1.log"}, [(c.file, c.printed, c.predicted) for c in cuda if not c.inside]


def test_sglang_observed_start_memory_within_the_band(sglang):
    """The init band of kvgate.engines.sglang.fit spans every CUDA log's start memory."""
    from kvgate.engines.sglang.fit import init_band

    for c in sglang:
        if c.skip is None and "MI355X" not in c.gpu:
            lo, hi = c.extra["init_observed_mib"]
            band = init_band(1)
            assert band.low <= hi * MiB and lo * MiB <= band.high, c.file
