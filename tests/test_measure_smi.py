"""``kvgate import-smi``: nvidia-smi CSV logs in several formats → kvgate.measurement/1."""

from __future__ import annotations

import json

import pytest

from kvgate.cli import main
from kvgate.measure.measurement import Measurement
from kvgate.measure.select import select_measurement
from kvgate.measure.smi_csv import SmiCsvError, load_smi_csv, parse_smi_csv

MiB = 2**20
T = 143_771 * MiB


def _domains(doc):
    return {d["basis"]["domain"]: Measurement.from_dict(d) for d in doc["domains"]}


def test_units_with_free_and_reserved(data_dir):
    doc = load_smi_csv(data_dir / "smi" / "synthetic_h200_units.csv")
    assert doc["schema"] == "kvgate.measurement/1" and doc["command"] is None and doc["exit_code"] is None
    m = _domains(doc)["gpu:0"]
    assert m.total_bytes == T
    assert m.peak_used_bytes == 64_516 * MiB  # total − free = v2 used 63,900 + reserved 616
    assert m.idle_used_bytes == 616 * MiB
    assert m.reserved_bytes == 616 * MiB
    assert m.headroom_bytes == (143_771 - 64_516) * MiB
    assert m.peak_time_s == 3.5 and m.max_gap_s == 0.5 and m.samples == 12
    b = m.basis
    assert (b.device_name, b.driver_version, b.sampler, b.interval_s) == ("NVIDIA H200", "580.95.05", "nvidia-smi", 0.5)
    assert b.device_uuid == "GPU-5f1c2a9e-7b3d-4c8e-9a61-0d2e4f6b8a13"
    assert (b.cuda_version, b.nvml_version, b.cpu_arch, b.command, b.exit_code) == (None,) * 5
    assert b.start_time == "2026-11-29T11:02:03.017000" and b.source == "synthetic_h200_units.csv"
    assert m.extra["used_rule"] == "memory.total - memory.free"


def test_nounits_reordered_columns_add_reserved_back(data_dir):
    m = _domains(load_smi_csv(data_dir / "smi" / "synthetic_h200_nounits_reordered.csv"))["gpu:0"]
    assert (m.total_bytes, m.peak_used_bytes, m.idle_used_bytes, m.reserved_bytes) == (
        T, 64_516 * MiB, 616 * MiB, 616 * MiB)
    assert m.extra["used_rule"] == "memory.used + memory.reserved"
    assert m.basis.device_name is None  # not in this log: not available


def test_two_gpus_used_only(data_dir):
    ds = _domains(load_smi_csv(data_dir / "smi" / "synthetic_2gpu_used_only.csv"))
    assert sorted(ds) == ["gpu:0", "gpu:1"]
    assert ds["gpu:0"].peak_used_bytes == 63_900 * MiB
    assert ds["gpu:1"].peak_used_bytes == 32_870 * MiB
    assert ds["gpu:1"].reserved_bytes is None
    assert "excludes driver-reserved" in ds["gpu:0"].extra["used_rule"]


def test_two_gpus_without_index_and_na_cells(data_dir):
    doc = load_smi_csv(data_dir / "smi" / "synthetic_2gpu_noindex_na.csv")
    ds = _domains(doc)
    assert ds["gpu:0"].samples == 11  # the [N/A] row is skipped, not read as 0
    assert ds["gpu:0"].peak_used_bytes == 64_516 * MiB
    assert ds["gpu:1"].peak_used_bytes == 33_486 * MiB and ds["gpu:1"].peak_time_s == 3.5
    assert ds["gpu:0"].extra["ignored_columns"] == ["utilization.gpu"]


def test_noheader_needs_columns():
    text = "2026/11/29 11:00:00.000, 0, 1000, 143771\n2026/11/29 11:00:00.500, 0, 3000, 143771\n"
    with pytest.raises(SmiCsvError, match="no nvidia-smi CSV header"):
        parse_smi_csv(text)
    doc = parse_smi_csv(text, columns=["timestamp", "index", "memory.used [MiB]", "memory.total [MiB]"])
    assert doc["domains"][0]["peak_used_bytes"] == 3000 * MiB


def test_noheader_with_units_in_values_and_without():
    text = "0, 143771 MiB, 616 MiB\n0, 143771 MiB, 4712 MiB\n"
    doc = parse_smi_csv(text, columns=["index", "memory.total", "memory.used"])
    assert doc["domains"][0]["peak_used_bytes"] == 4712 * MiB
    assert doc["domains"][0]["timeline"] == {"sample": [0.0, 1.0], "used_bytes": [616 * MiB, 4712 * MiB]}
    with pytest.raises(SmiCsvError, match="has no unit"):  # nounits + noheader: bytes would be a guess
        parse_smi_csv("0, 143771, 616\n", columns=["index", "memory.total", "memory.used"])


def test_concatenated_logs_repeat_the_header():
    h = "timestamp, memory.used [MiB], memory.total [MiB]\n"
    text = h + "2026/11/29 11:00:00.000, 10 MiB, 100 MiB\n" + h + "2026/11/29 11:00:01.000, 20 MiB, 100 MiB\n"
    m = Measurement.from_dict(parse_smi_csv(text)["domains"][0])
    assert (m.samples, m.peak_used_bytes, m.max_gap_s) == (2, 20 * MiB, 1.0)


@pytest.mark.parametrize("text, msg", [
    ("timestamp, memory.used [MiB]\n2026/11/29 11:00:00.000, 1 MiB\n", "memory.total"),
    ("timestamp, memory.total [MiB]\n2026/11/29 11:00:00.000, 1 MiB\n", "neither memory.used nor memory.free"),
    ("memory.used [MiB], memory.total [MiB]\n12 MiB\n", "fields"),
    ("memory.used [MiB], memory.total [MiB]\nabc, 100\n", "cannot read memory value"),
    ("memory.used [MiB], memory.total [MiB]\n", "no memory samples"),
])
def test_bad_logs_name_the_problem(text, msg):
    with pytest.raises(SmiCsvError, match=msg):
        parse_smi_csv(text)


def test_every_fixture_parses(data_dir):
    """Every committed log (synthetic and recorded on the H200) gives a consistent document."""
    files = sorted((data_dir / "smi").glob("*.csv"))
    assert files
    for f in files:
        # the H200 run records its noheader log with --query-gpu=index,memory.total,memory.used
        doc = load_smi_csv(f, columns=["index", "memory.total", "memory.used"] if "noheader" in f.name else None)
        select_measurement(doc)
        for d in doc["domains"]:
            mm = Measurement.from_dict(d)
            assert isinstance(mm.peak_used_bytes, int) and mm.idle_used_bytes <= mm.peak_used_bytes <= mm.total_bytes
            assert mm.samples > 0 and len(mm.timeline["used_bytes"]) <= 2 * 2048
            assert max(mm.timeline["used_bytes"]) == mm.peak_used_bytes


def test_cli_json_and_out(data_dir, tmp_path, capsys):
    out = tmp_path / "m.json"
    rc = main(["import-smi", str(data_dir / "smi" / "synthetic_h200_units.csv"), "--out", str(out), "--json"])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["measurement_path"] == str(out)
    saved = json.loads(out.read_text())
    assert saved["domains"][0]["peak_used_bytes"] == 64_516 * MiB
    rc = main(["import-smi", str(data_dir / "smi" / "synthetic_h200_units.csv"), "--out", str(out)])
    assert rc == 2  # exists, no --force
    assert "exists" in capsys.readouterr().err


_H = "timestamp, index, memory.total [MiB], memory.free [MiB], memory.used [MiB]\n"


def test_out_of_order_timestamps_are_sorted_with_a_warning(tmp_path, capsys):
    text = (_H + "2026/11/29 11:00:00.000, 0, 32607 MiB, 31671 MiB, 936 MiB\n"
            "2025/11/29 11:00:01.000, 0, 32607 MiB, 12982 MiB, 19625 MiB\n"  # a year earlier
            "2026/11/29 11:00:02.000, 0, 32607 MiB, 31000 MiB, 1607 MiB\n")
    m = Measurement.from_dict(parse_smi_csv(text)["domains"][0])
    year = 365 * 86400  # 2025-11-29 → 2026-11-29
    assert m.idle_used_bytes == m.peak_used_bytes == 19_625 * MiB  # the earliest sample
    assert m.peak_time_s == 0.0
    assert m.timeline["t_s"] == [0.0, year - 1.0, year + 1.0]
    assert m.timeline["used_bytes"] == [19_625 * MiB, 936 * MiB, 1_607 * MiB]
    assert m.max_gap_s == year - 1.0 and m.basis.interval_s == (year + 1) / 2  # median of gaps [year − 1, 2]
    assert m.basis.start_time == "2025-11-29T11:00:01" and m.basis.end_time == "2026-11-29T11:00:02"
    assert m.extra["warnings"] == [
        "timestamps of gpu:0 were not in order (1 step(s) back in time, first at line 3: 2025-11-29 11:00:01 "
        "after 2026-11-29 11:00:00); samples were sorted by time"]
    log = tmp_path / "ooo.csv"
    log.write_text(text)
    assert main(["import-smi", str(log)]) == 0
    out = capsys.readouterr().out
    assert "WARNING: timestamps of gpu:0 were not in order" in out and "-3" not in out
    assert main(["import-smi", str(log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == m.extra["warnings"]


def test_sorting_is_per_gpu_and_in_order_logs_have_no_warnings():
    text = (_H + "2026/11/29 11:00:01.000, 0, 100 MiB, 90 MiB, 10 MiB\n"
            "2026/11/29 11:00:01.000, 1, 100 MiB, 80 MiB, 20 MiB\n"
            "2026/11/29 11:00:00.000, 0, 100 MiB, 70 MiB, 30 MiB\n"
            "2026/11/29 11:00:02.000, 1, 100 MiB, 60 MiB, 40 MiB\n")
    ds = _domains(parse_smi_csv(text))
    assert ds["gpu:0"].timeline["used_bytes"] == [30 * MiB, 10 * MiB] and ds["gpu:0"].idle_used_bytes == 30 * MiB
    assert ds["gpu:0"].extra["warnings"][0].startswith("timestamps of gpu:0 were not in order (1 step(s) back "
                                                       "in time, first at line 4:")
    assert ds["gpu:1"].extra["warnings"] == [] and ds["gpu:1"].max_gap_s == 1.0


def test_changing_total_is_an_error_naming_the_lines(tmp_path, capsys):
    text = (_H + "2026/11/29 11:00:00.000, 0, 32607 MiB, 31671 MiB, 936 MiB\n"
            "2026/11/29 11:00:01.000, 0, 40000 MiB, 12982 MiB, 936 MiB\n")
    with pytest.raises(SmiCsvError) as e:
        parse_smi_csv(text, source="mixed.csv")
    assert e.value.message == ("mixed.csv: memory.total of gpu:0 changes from 32,607 MiB (line 2) to 40,000 MiB "
                               "(line 3); a log that mixes cards or configurations is not one measurement")
    log = tmp_path / "mixed.csv"
    log.write_text(text)
    assert main(["import-smi", str(log)]) == 2
    assert "ERROR: mixed.csv: memory.total of gpu:0 changes" in capsys.readouterr().err
    # another GPU with another total is fine
    two = (_H + "2026/11/29 11:00:00.000, 0, 32607 MiB, 31671 MiB, 936 MiB\n"
           "2026/11/29 11:00:00.000, 1, 40000 MiB, 39000 MiB, 1000 MiB\n")
    ds = _domains(parse_smi_csv(two))
    assert (ds["gpu:0"].total_bytes, ds["gpu:1"].total_bytes) == (32_607 * MiB, 40_000 * MiB)


def test_used_disagreeing_with_total_minus_free_is_warned():
    text = (_H + "2026/11/29 11:00:00.000, 0, 32607 MiB, 31671 MiB, 936 MiB\n"
            "2026/11/29 11:00:01.000, 0, 32607 MiB, 12982 MiB, 936 MiB\n")
    m = Measurement.from_dict(parse_smi_csv(text)["domains"][0])
    assert m.peak_used_bytes == 19_625 * MiB  # still total − free
    assert m.extra["warnings"] == [
        "1 row(s) of gpu:0 where memory.used differs from memory.total − memory.free, first at line 3 "
        "(936 MiB vs 19,625 MiB); used is taken from total − free"]
    # with memory.reserved logged the tolerance is 16 MiB; nvidia-smi's 1–2 MiB rounding is not warned
    h = "memory.total [MiB], memory.free [MiB], memory.used [MiB], memory.reserved [MiB]\n"
    ok = parse_smi_csv(h + "143771, 79255, 63898, 616\n")["domains"][0]
    assert ok["extra"]["warnings"] == [] and ok["peak_used_bytes"] == 64_516 * MiB
    bad = parse_smi_csv(h + "143771, 79255, 63880, 616\n")["domains"][0]  # 18 MiB off
    assert bad["extra"]["warnings"] == [
        "1 row(s) of gpu:0 where memory.used + memory.reserved differs from memory.total − memory.free, "
        "first at line 2 (64,496 MiB vs 64,516 MiB); used is taken from total − free"]
    # without memory.reserved, up to 16 MiB + 5 % of total is the unlogged reserve: no warning
    assert parse_smi_csv("memory.total [MiB], memory.free [MiB], memory.used [MiB]\n143771, 79255, 63900\n"
                         )["domains"][0]["extra"]["warnings"] == []


def test_cell_unit_other_than_header_unit_is_an_error(tmp_path, capsys):
    text = (_H + "2026/11/29 11:00:00.000, 0, 32607 MiB, 31671 MiB, 936 MiB\n"
            "2026/11/29 11:00:01.000, 0, 32 GiB, 12982 MiB, 936 MiB\n")
    with pytest.raises(SmiCsvError) as e:
        parse_smi_csv(text, source="u.csv")
    assert e.value.message == "u.csv line 3, column memory.total [MiB]: value '32 GiB' is in GiB, its header says MiB"
    log = tmp_path / "u.csv"
    log.write_text(text)
    assert main(["import-smi", str(log)]) == 2
    assert "ERROR: u.csv line 3, column memory.total [MiB]: value '32 GiB'" in capsys.readouterr().err
    # the header's own unit in the cell (csv) or none (nounits) is fine; no header unit accepts any unit
    doc = parse_smi_csv("memory.total [MiB], memory.used [MiB]\n100 MiB, 10\n")
    assert doc["domains"][0]["peak_used_bytes"] == 10 * MiB
    doc = parse_smi_csv("0, 1 GiB, 10 MiB\n", columns=["index", "memory.total", "memory.used"])
    assert doc["domains"][0]["total_bytes"] == 2**30


def test_free_above_total_is_an_error():
    with pytest.raises(SmiCsvError, match=r"^log line 2: memory.free \(101 MiB\) is above memory.total \(100 MiB\)$"):
        parse_smi_csv("memory.total [MiB], memory.free [MiB]\n100, 101\n")
