"""A GPU gates only if the workload used it; the slots claimed at the peak must fit in
what the workload added (P − U0), or there is no verdict."""

from __future__ import annotations

import json

from kvgate.cli import main
from kvgate.errors import EXIT_INPUT
from kvgate.measure.measurement import Basis, Measurement
from kvgate.measure.select import select_domain
from kvgate.measure.smi_csv import parse_smi_csv

MiB = 2**20
HEAD = "timestamp, index, name, memory.total [MiB], memory.used [MiB], memory.free [MiB]\n"
GATE = ["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--kv-format", "int8-f32scale",
        "--slots-measured", "4", "--slots", "8", "--no-record", "--json"]


def _log(busy, idle_flat):
    rows = []
    for i, (b, f) in enumerate(zip(busy, idle_flat)):
        t = f"2026/11/29 10:00:{i:02d}.000"
        rows.append(f"{t}, 0, NVIDIA GeForce RTX 5090, 32607 MiB, {b} MiB, {32607 - b} MiB\n")
        rows.append(f"{t}, 1, NVIDIA GeForce RTX 5090, 32607 MiB, {f} MiB, {32607 - f} MiB\n")
    return HEAD + "".join(rows)


BUSY = [936, 936, 8000, 19625, 12000, 936]
FLAT = [30000] * 6  # another user's job: less headroom, but the workload never touched it


def test_an_idle_flat_gpu_does_not_gate_an_smi_log():
    doc = parse_smi_csv(_log(BUSY, FLAT))
    sel = select_domain([Measurement.from_dict(d) for d in doc["domains"]])
    assert sel.domain == "gpu:0"
    assert any("gpu:1" in w and "P − U0 = 0" in w for w in sel.warnings)


def test_gate_on_a_two_gpu_log_judges_the_gpu_the_workload_used(tmp_path, capsys):
    log = tmp_path / "smi.csv"
    log.write_text(_log(BUSY, FLAT))
    code = main([*GATE, "--smi", str(log)])
    rec = json.loads(capsys.readouterr().out)
    assert code == 0
    assert rec["measurement"]["basis"]["domain"] == "gpu:0"
    assert rec["measurement"]["peak_used_bytes"] == 19625 * MiB


def test_nvml_listing_still_decides_where_available():
    def m(dom, peak, procs):
        return Measurement(total_bytes=1000, peak_used_bytes=peak, idle_used_bytes=100,
                           basis=Basis(domain=dom), processes=procs)
    sel = select_domain([m("gpu:0", 500, [{"pid": 1, "used_bytes": 400}]), m("gpu:1", 900, [])])
    assert sel.domain == "gpu:0"


def test_peak_equal_to_idle_with_slots_claimed_gives_no_verdict(capsys):
    code = main([*GATE, "--total", "32607MiB", "--idle", "19625MiB", "--peak", "19625MiB"])
    out, err = capsys.readouterr()
    assert code == EXIT_INPUT
    assert "P − U0 = 0 B" in err and "cannot have held them" in err and "no verdict" in err
    assert set(json.loads(out)) == {"error", "hint", "exit_code"}


def test_slots_that_fit_in_what_the_workload_added_still_decide(capsys):
    code = main([*GATE, "--total", "32607MiB", "--idle", "936MiB", "--peak", "19625MiB"])
    assert code == 0 and json.loads(capsys.readouterr().out)["status"] == "ok"
