"""The non-torch term at TP ≥ 2 (NCCL and custom all-reduce buffers) and the GPU total as
CUDA sees it (``--cuda-total``, ``--wsl``), against real startup logs (issue 25, item 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvgate.engines.vllm.comm import CUSTOM_AR, NCCL_NVLINK, NCCL_PCIE, card_class, tp_comm_term
from kvgate.engines.vllm.logcheck import check_logs, printed_bytes
from kvgate.errors import KvgateError
from kvgate.fit.gpus import RESERVED_LOW, gpu_from_cuda_total, lookup_gpu, wsl_gpu

DATA = Path(__file__).parent / "data"
RECORDS = json.loads((DATA / "logs" / "nontorch_terms.json").read_text(encoding="utf-8"))["records"]
GiB, MiB = 2**30, 2**20


@pytest.mark.parametrize("rec", RECORDS, ids=lambda r: r["file"])
def test_term_record_values_are_printed_in_their_log(rec: dict) -> None:
    text = (DATA / "logs" / rec["file"]).read_text(encoding="utf-8")
    for key in ("total_gpu_memory", "weights", "activation", "non_torch_memory"):
        if rec.get(key):
            assert rec[key] in text, (rec["file"], key)
    assert rec["source_url"] in (DATA / "logs" / "SOURCES.md").read_text(encoding="utf-8")


def test_card_classes() -> None:
    assert card_class("H100 80GB") == card_class("H200") == card_class("A100 80GB") == "nvlink"
    assert card_class("RTX 3090") == card_class("L40S") == card_class("RTX 4090") == "pcie"
    assert card_class("given total") == card_class(None) == "unknown"


def test_tp_comm_term_by_tp_and_card() -> None:
    assert tp_comm_term(1, 1, "H100 80GB") is None
    h = tp_comm_term(2, 1, "H100 80GB")
    r = tp_comm_term(2, 1, "RTX 3090")
    u = tp_comm_term(8, 1, "given total")
    assert h is not None and r is not None and u is not None
    assert h.value.high == NCCL_NVLINK.high + CUSTOM_AR.high
    assert r.value.high == NCCL_PCIE.high + CUSTOM_AR.high
    assert u.value.high == h.value.high  # unknown card: the wider band
    # custom all-reduce: one cudaMalloc'd buffer of meta + 8 MiB (custom_all_reduce.py max_size)
    assert 8 * MiB < CUSTOM_AR.high <= 16 * MiB


def test_h100_tp2_log_non_torch_is_inside_and_tp1_band_alone_is_not() -> None:
    """vllm#10511: the same Llama-3-8B run on an H100 prints 1.79 GiB at TP 1 and 3.58 GiB at
    TP 2. The TP-1 band alone misses the TP-2 figure; with the NCCL term it holds it."""
    from kvgate.engines.vllm.budget import BANDS

    rec = next(r for r in RECORDS if r["file"].startswith("vllm_0.6.5-dev_llama-3-8b_h100_tp2"))
    printed = printed_bytes(rec["non_torch_memory"])
    base = BANDS.non_torch_v0
    assert printed.low > base.high
    comm = tp_comm_term(2, 1, rec["card"])
    assert comm is not None
    band = base + comm.value
    assert band.low <= printed.low and printed.high <= band.high


def test_pcie_multi_rank_records_inside_the_band() -> None:
    from kvgate.engines.vllm.budget import BANDS

    for rec in (r for r in RECORDS if r["card"] == "RTX 3090"):
        comm = tp_comm_term(rec["ranks"], 1, rec["card"])
        assert comm is not None
        band = BANDS.non_torch_v0 + comm.value
        p = printed_bytes(rec["non_torch_memory"])
        assert band.low <= p.low and p.high <= band.high, rec["file"]


def test_non_torch_term_adds_nccl_at_tp2_in_fit() -> None:
    """``kvgate fit`` at TP 2 on an H100: the non-torch term is wider than at TP 1 by the NCCL band."""
    from kvgate.engines.vllm.fit import fit_vllm
    from kvgate.engines.vllm.flags import VllmFlags
    from kvgate.fit.interval import Interval, Term
    from kvgate.fit.release import Release, parse_version
    from kvgate.model import load_model

    m = load_model("llama-3.1-8b")
    rel = Release("vllm", "0.19.0", parse_version("0.19.0"), "test")
    w = Term("weights", Interval.point(15 * GiB), "given")
    nt = {}
    for tp in (1, 2):
        a = fit_vllm(m, w, lookup_gpu("H100"), VllmFlags(max_model_len=8192, tensor_parallel_size=tp), rel)
        nt[tp] = next(t.value for t in a.terms if t.name == "non-torch memory")
    assert nt[2].high - nt[1].high == NCCL_NVLINK.high + CUSTOM_AR.high


def test_cuda_total_printed_is_not_reduced_again() -> None:
    """A total from vLLM's log (``total_gpu_memory (79.19GiB)``) is already CUDA's: kept with
    its printing precision, no driver reserve subtracted (``--total`` subtracts it)."""
    g = gpu_from_cuda_total("79.19GiB")
    assert g.cuda_total.low < int(79.19 * GiB) < g.cuda_total.high
    assert g.cuda_total.width <= 11 * MiB
    assert gpu_from_cuda_total("85031714816").cuda_total.width == 0
    with pytest.raises(KvgateError):
        gpu_from_cuda_total("512MiB")


def test_wsl_total_is_the_whole_card() -> None:
    """cognithor PR #318: WSL 2 on an RTX 5090 printed a 31.84 GiB CUDA total = 32,607 MiB."""
    g = wsl_gpu(lookup_gpu("RTX 5090"))
    assert round(g.cuda_total.low / GiB, 2) == 31.84
    assert lookup_gpu("RTX 5090").cuda_total.high <= g.cuda_total.low - RESERVED_LOW


def _kvgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvgate", *args], capture_output=True, text=True, timeout=120)


def test_cli_cuda_total_and_wsl() -> None:
    p = _kvgate("fit", "llama-3.1-8b", "--cuda-total", "79.19GiB", "--max-model-len", "8192", "--release", "0.19.0", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    total = doc["gpu"]["cuda_total_bytes"]
    assert total["low"] <= int(79.19 * GiB) <= total["high"]
    assert doc["budget_bytes"]["high"] <= int(total["high"] * 0.9) + 1  # × 0.9, nothing taken off first
    bad = _kvgate("fit", "llama-3.1-8b", "--cuda-total", "79.19GiB", "--gpu", "H100", "--release", "0.19.0")
    assert bad.returncode == 2 and "ERROR:" in bad.stderr and "HINT:" in bad.stderr
    w = _kvgate("fit", "llama-3.1-8b", "--gpu", "RTX-5090", "--wsl", "--max-model-len", "8192", "--release", "0.19.0")
    assert w.returncode == 0 and "(WSL)" in w.stdout


def test_estimate_mode_uses_kvgate_weights() -> None:
    folder = DATA / "fit_logs"
    given = {c.file: c for c in check_logs(folder) if c.predicted is not None}
    est = {c.file: c for c in check_logs(folder, weights="estimate") if c.predicted is not None}
    assert set(given) == set(est)
    assert all(c.weights_from == "estimate" for c in est.values())
    assert any(est[f].predicted != given[f].predicted for f in given)


def test_leave_one_tp_size_out_keeps_the_reported_share_inside() -> None:
    """benchmarks/fit_logs_oos.py: with the log's weights, bands calibrated without a whole TP
    size hold 63 of 64 checkable vLLM pools (the share RESULTS.md reports). The five misses of
    before (three Qwen3-VL H100 logs, two RTX 3090 TP-4 eager logs) are inside since the encoder
    cache (kvgate.engines.vllm.encoder) and the printing interval (logcheck.meets); the H200 0.15
    log, missed in sample, falls inside the wider bands calibrated without TP 1. The one miss,
    the 0.6.5 H100 log (0.13 GiB below), needs its own rule's 1.79 GiB non-torch figure, which
    only TP-1 logs print; it was inside while the H100's CUDA total had the every-card reserve
    band (424–621 MiB) instead of the H100's own (432.6–483.8 MiB, kvgate.fit.gpus)."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
    try:
        import fit_logs_oos as oos
    finally:
        sys.path.pop(0)
    folder = DATA / "fit_logs"
    res = oos.leave_group_out(folder, oos._groupers(folder)["TP size"], "given")
    assert len(res) == 64
    missed = {f for f, (c, _) in res.items() if not c.inside}
    assert missed == {"vllm_0.6.5-dev_llama-3-8b_h100_1.log"}
    assert {g for _, g in res.values()} == {"TP 1", "TP 2", "TP 4", "TP 8"}
