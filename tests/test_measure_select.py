"""Multi-GPU: the domain with the least headroom gates by default, named, every GPU shown
(issue 11, fault 1). The 4-GPU log is built from the real H200 log
(tests/data/smi/h200_run_units.csv, recorded with --query-gpu=...,index,...): its rows
become GPU 1; GPUs 0, 2, 3 repeat its first (idle) row with their own uuid, as
nvidia-smi prints every GPU each tick. At b278f86 ``load_measurement_file`` took the first
domain (gpu:0, idle) and ``gate --smi`` gated on it."""

from __future__ import annotations

import csv
import json

import pytest

from kvgate.cli import main
from kvgate.measure.measurement import Measurement, MeasurementError
from kvgate.measure.select import select_domain, select_measurement
from kvgate.measure.smi_csv import load_smi_csv

MiB = 2**20


def _four_gpu_log(data_dir, tmp_path):
    src = data_dir / "smi" / "h200_run_units.csv"
    lines = src.read_text().splitlines()
    header, rows = lines[0], lines[1:]
    idle = next(csv.reader([rows[0]], skipinitialspace=True))
    out = [header]
    for line in rows:
        real = next(csv.reader([line], skipinitialspace=True))
        for gpu in range(4):
            r = list(real) if gpu == 1 else [real[0]] + idle[1:]
            r[1] = str(gpu)
            if gpu != 1:
                r[3] = f"GPU-00000000-0000-0000-0000-00000000000{gpu}"
            out.append(", ".join(r))
    p = tmp_path / "smi4.csv"
    p.write_text("\n".join(out) + "\n")
    used = [int(c[6].split()[0]) for c in (next(csv.reader([x], skipinitialspace=True)) for x in rows)]
    free = [int(c[7].split()[0]) for c in (next(csv.reader([x], skipinitialspace=True)) for x in rows)]
    peak_mib = max(143_771 - f for f in free)
    return p, peak_mib, 143_771 - free[0], len(used)


def test_four_gpu_log_gates_on_the_loaded_gpu(data_dir, tmp_path):
    p, peak_mib, idle_mib, n = _four_gpu_log(data_dir, tmp_path)
    assert peak_mib == 67_143 and idle_mib == 615  # 143,771 − 143,156 free in the first row
    doc = load_smi_csv(str(p))
    m = select_measurement(doc).measurement
    assert m.domain == "gpu:1"
    assert m.peak_used_bytes == peak_mib * MiB and m.samples == n == 1644
    sel = select_measurement(doc)
    assert sel.rule == "least headroom" and [x.domain for x in sel.measurements] == ["gpu:0", "gpu:1", "gpu:2", "gpu:3"]
    notes = sel.notes()
    assert notes[0].startswith("gated on gpu:1, the domain with the least headroom")
    assert len(notes) == 5 and "← gates" in notes[2] and "gpu:1" in notes[2]
    assert "H 76,628" in notes[2]  # 143,771 − 67,143 MiB
    assert "P 615" in notes[1]  # the idle GPU 0 is shown with its own figures


def test_domain_option_still_chooses_and_warns_when_it_is_not_the_worst(data_dir, tmp_path):
    p, *_ = _four_gpu_log(data_dir, tmp_path)
    sel = select_measurement(load_smi_csv(str(p)), domain="gpu:0")
    assert sel.domain == "gpu:0" and sel.rule == "--domain"
    assert any("gpu:1 has less headroom" in w for w in sel.warnings)
    with pytest.raises(MeasurementError, match="gpu:7"):
        select_measurement(load_smi_csv(str(p)), domain="gpu:7")


def test_tp_ranks_all_shown_worst_gates():
    def m(dom, peak):
        from kvgate.measure.measurement import Basis
        return Measurement(total_bytes=1000 * MiB, peak_used_bytes=peak * MiB, basis=Basis(domain=dom))
    sel = select_domain([m("gpu:0", 700), m("gpu:1", 710)], tp=2)
    assert sel.domain == "gpu:1" and "--tp 2: the worst rank gates" in sel.notes()[0]
    sel = select_domain([m("gpu:0", 700)], tp=4)
    assert "--tp 4 but the measurement has 1 GPU domain(s)" in sel.warnings[0]
    # equal headroom: the first in file order
    assert select_domain([m("gpu:0", 5), m("gpu:1", 5)]).domain == "gpu:0"


def test_gate_smi_cli_gates_on_gpu1(data_dir, tmp_path, capsys):
    p, peak_mib, *_ = _four_gpu_log(data_dir, tmp_path)
    rc = main(["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots-measured", "4", "--slots", "8",
               "--smi", str(p), "--no-record", "--json"])
    assert rc == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["measurement"]["basis"]["domain"] == "gpu:1"
    assert rec["measurement"]["peak_used_bytes"] == peak_mib * MiB
    # the output names the GPU that gates and why, and lists the others
    assert any(n.startswith("gated on gpu:1, the domain with the least headroom") for n in rec["notes"]), rec["notes"]
    assert any("gpu:0" in n for n in rec["notes"])


def test_only_gpus_the_command_used_gate_when_nvml_lists_processes():
    from kvgate.measure.measurement import Basis

    def m(dom, peak, procs):
        return Measurement(total_bytes=1000 * MiB, peak_used_bytes=peak * MiB, basis=Basis(domain=dom),
                           processes=procs)
    mine = [{"domain": "gpu:1", "pid": 42, "name": "python", "peak_used_bytes": 500 * MiB}]
    # gpu:0 is fuller (another user's job) but the command ran on gpu:1 only
    sel = select_domain([m("gpu:0", 900, None), m("gpu:1", 600, mine)])
    assert sel.domain == "gpu:1"
    assert any("gpu:0: no process of the command seen there" in w for w in sel.warnings)
    # no per-process information anywhere (an nvidia-smi log): all GPUs compete
    assert select_domain([m("gpu:0", 900, None), m("gpu:1", 600, None)]).domain == "gpu:0"


def test_measure_defaults_to_every_gpu():
    import argparse

    from kvgate.commands._measure import add_measure_arguments

    p = argparse.ArgumentParser()
    add_measure_arguments(p)
    assert p.parse_args([]).gpu == "all"


def test_import_smi_names_the_gpu_a_gate_would_use(data_dir, tmp_path, capsys):
    p, *_ = _four_gpu_log(data_dir, tmp_path)
    assert main(["import-smi", str(p)]) == 0
    out = capsys.readouterr().out
    assert "a gate on this log uses gpu:1, the domain with the least headroom" in out
    assert main(["import-smi", str(p), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["least_headroom_domain"] == "gpu:1"


def test_selection_notes_carry_the_logs_warnings(data_dir, tmp_path):
    p, *_ = _four_gpu_log(data_dir, tmp_path)
    text = p.read_text()
    p.write_text(text + "2026/11/29 11:24:30.0")  # a last line still being written
    sel = select_measurement(load_smi_csv(str(p)))
    assert sel.notes()[-1].startswith("measurement: 1 line(s) skipped: line 6578: no line end")
    assert not any(n.startswith("measurement:") for n in sel.notes(measurement_warnings=False))
