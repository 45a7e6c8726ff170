"""Sweep projection and the host figure (issue 11, faults 4 and 11).

The sweep uses the issue's own H200 observation: marginal 3.07 GB per sequence from 2→4,
2.63 GB from 4→8 (peaks built from those, P2 = 40 GB). Expected values are calculated by
hand below. At b278f86 ``kvgate.measure.projection`` did not exist (no residuals, no
interval, no refusal: "S + -42.1 MiB" was printed), and the host peak was the system
figure MemTotal − MemAvailable whatever the process tree said."""

from __future__ import annotations

import json
import sys
from fractions import Fraction

import pytest

from kvgate.cli import main
from kvgate.gate.fit import (
    NegativeOverheadError,
    check_overhead,
    conservative_fit,
    least_squares,
    project_sweep,
)
from kvgate.measure.host import best_host_peak

GB, MiB, GiB = 10**9, 2**20, 2**30
P2 = 40 * GB
P4 = P2 + 2 * 3_070_000_000  # 46.14 GB
P8 = P4 + 4 * 2_630_000_000  # 56.66 GB
PTS = [(2, P2), (4, P4), (8, P8)]
T_H200 = 143_771 * MiB


def test_least_squares_residuals_and_interval_by_hand():
    # x̄ = 14/3, ȳ = 47.6 GB, Sxx = 56/3, Sxy = 51.44e9 → slope = 154.32e9/56, intercept 34.74 GB
    slope, icpt = least_squares(PTS)
    assert slope == Fraction(154_320_000_000, 56) and icpt == 34_740_000_000
    limit = T_H200 * 9 // 10  # 135,679,338,086 (0.9 × 150,754,820,096 = …086.4)
    pr = project_sweep(PTS, from_level=8, from_peak=P8, target=16, total_bytes=T_H200, limit_bytes=limit,
                       kv_only_bytes=None)
    # fitted 40.251428571, 45.762857143, 56.785714286 GB
    assert pr.residuals == (-251_428_571, 377_142_857, -125_714_286)
    assert pr.secants == (3_070_000_000, 2_630_000_000)
    assert pr.low_bytes == P8 + 8 * 2_630_000_000 == 77_700_000_000
    assert pr.high_bytes == P8 + 8 * 3_070_000_000 == 81_220_000_000
    assert pr.fit_bytes == 78_705_714_286  # 56.66e9 + 154.32e9/7, rounded up
    assert pr.conservative_bytes == pr.high_bytes
    text = "\n".join(pr.lines())
    assert "residuals (measured − fit): 2: -251,428,571 B, 4: +377,142,857 B, 8: -125,714,286 B" in text
    assert "conservative end 77,457.4 MiB fits under" in text  # 81.22e9 / 2^20 = 77,457.43
    assert pr.advice().endswith("--concurrency 2,4,8,16")


def test_conservative_end_includes_kv_only_and_no_advice_when_measured():
    pr = project_sweep(PTS, from_level=8, from_peak=P8, target=8, total_bytes=T_H200, limit_bytes=T_H200,
                       kv_only_bytes=P8 + 1)
    assert pr.conservative_bytes == P8 + 1 and pr.advice() is None


def test_two_levels_ask_for_a_third_and_over_the_card_gives_no_advice():
    pr = project_sweep(PTS[:2], from_level=4, from_peak=P4, target=64, total_bytes=T_H200, limit_bytes=T_H200)
    assert not pr.has_interval and pr.low_bytes == pr.high_bytes == P4 + 60 * 3_070_000_000
    assert "add a third level (e.g. --concurrency 2,4,64)" in "\n".join(pr.lines())
    assert pr.advice() is None  # 230.3 GB > T: the target cannot be run on this card


def test_conservative_fit_uses_the_highest_marginal():
    assert conservative_fit(PTS).slope == 3_070_000_000
    assert conservative_fit(PTS[:2]).slope == 3_070_000_000  # two levels: the fit itself


def test_negative_overhead_is_refused():
    S = 415_236_096  # the write-up's slot: 396 MiB
    with pytest.raises(NegativeOverheadError, match=r"per-sequence overhead of -42\.1 MiB"):
        check_overhead(Fraction(S - round(42.1 * MiB)), S)
    check_overhead(Fraction(S - 5 * MiB), S)  # within 2% of S (7.92 MiB): MiB rounding of the peaks
    check_overhead(Fraction(S + 100 * MiB), S)


def test_host_peak_prefers_the_process_tree_and_warns():
    idle, tree = 3 * GiB, round(2.01 * GiB)
    system = idle + round(1.28 * GiB)  # the VM: a steady 2 GiB allocation seen as 1.28 GiB
    peak, rule, warns = best_host_peak(system_peak=system, idle=idle, tree_peak=tree, cgroup_peak=None,
                                       cgroup_kind=None, limited=False, total=16 * GiB)
    assert peak == idle + tree and rule.startswith("idle U0 + process-tree peak")
    assert len(warns) == 1 and "system figure shows the workload as 1.28 GiB" in warns[0] and "2.01 GiB" in warns[0]
    # agreeing figures: no warning; no tree figure: the system one, named
    assert best_host_peak(system_peak=idle + tree, idle=idle, tree_peak=tree, cgroup_peak=None, cgroup_kind=None,
                          limited=False, total=16 * GiB)[2] == []
    assert best_host_peak(system_peak=system, idle=idle, tree_peak=None, cgroup_peak=None, cgroup_kind=None,
                          limited=False, total=16 * GiB)[:2] == (system, "system MemTotal − MemAvailable")
    # under a binding cgroup v2 limit: the limit's own memory.peak
    assert best_host_peak(system_peak=system, idle=idle, tree_peak=tree, cgroup_peak=6 * GiB, cgroup_kind="v2",
                          limited=True, total=8 * GiB)[:2] == (6 * GiB, "cgroup v2 memory.peak (the limit's own peak)")


PY = sys.executable
GATE = ["--model", "qwen3-0.6b", "--max-seq", "256", "--slots", "8", "--domain", "host", "--settle", "0.05s"]


def _alloc(mib_per_seq: int) -> str:
    return (f"import sys, time; n = int(sys.argv[1]); b = bytearray(n * {mib_per_seq} * 2**20); "
            "b[::4096] = b'\\x01' * (len(b) // 4096); time.sleep(0.2)")


def test_run_refuses_a_sweep_below_the_kv_slot(tmp_path, capsys):
    # 8 MiB per "sequence" < the 28 MiB KV slot of qwen3-0.6b at max_seq 256 (28 layers × 256 × 2·8·128·2 B)
    rc = main(["run", *GATE, "--slots-measured", "4", "--concurrency", "2,4", "--out", str(tmp_path / "r.json"),
               "--measurement-out", str(tmp_path / "m.json"), "--", PY, "-c", _alloc(8), "{n}"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "less than the KV slot S 28 MiB" in err and "No verdict" in err
    assert (tmp_path / "m-n2.json").exists() and (tmp_path / "m-n4.json").exists()  # measurements kept
    assert not (tmp_path / "r.json").exists()


def test_run_with_three_levels_records_residuals_and_interval(tmp_path):
    rec = tmp_path / "r.json"
    rc = main(["run", *GATE, "--slots-measured", "4", "--concurrency", "2,4,6", "--out", str(rec),
               "--measurement-out", str(tmp_path / "m.json"), "--", PY, "-c", _alloc(40), "{n}"])
    assert rc == 0
    notes = json.loads(rec.read_text())["notes"]
    assert any(n.startswith("residuals (measured − fit): 2: ") for n in notes)
    assert any(n.startswith("projected peak at 8: ") and "interval from the lowest and highest" in n for n in notes)
    assert any("measure it instead of projecting: --concurrency 2,4,6,8" in n for n in notes)
