"""import-smi on real nvidia-smi logs recorded on an NVIDIA H200 (driver 580.159.04) while
`kvgate run` measured Qwen3-30B-A3B with a StaticCache of 8192 (benchmarks/device_run.sh).
Expected values are derived here from the CSV columns with the csv module, independently
of kvgate's parser."""

import csv

import pytest

from kvgate.measure.select import select_measurement
from kvgate.measure.smi_csv import load_smi_csv

MiB = 2**20


def _rows(path, header=None):
    with open(path, newline="") as fh:
        rows = [r for r in csv.reader(fh, skipinitialspace=True) if r]
    if header is None:
        header, rows = rows[0], rows[1:]
    col = {name.split(" [")[0]: i for i, name in enumerate(header)}
    num = lambda cell: int(cell.split()[0])  # "143771 MiB" or "143771"
    return [{k: num(r[i]) for k, i in col.items() if k.startswith("memory.")} for r in rows]


def _m(path, **kw):
    return select_measurement(load_smi_csv(str(path), **kw)).measurement


def test_units_log_uses_total_minus_free(data_dir):
    path = data_dir / "smi" / "h200_run_units.csv"
    rows = _rows(path)
    m = _m(path)
    assert len(rows) == m.samples == 1644
    assert m.total_bytes == rows[0]["memory.total"] * MiB == 143_771 * MiB == 150_754_820_096
    used = [r["memory.total"] - r["memory.free"] for r in rows]
    assert m.peak_used_bytes == max(used) * MiB == 67_143 * MiB
    assert m.idle_used_bytes == used[0] * MiB
    # nvidia-smi's memory.used excludes the 616 MiB the driver reserves; total − free does not
    assert max(r["memory.used"] for r in rows) == 66_529
    assert m.reserved_bytes == max(r["memory.reserved"] for r in rows) * MiB == 616 * MiB
    assert m.basis.device_name == "NVIDIA H200" and m.basis.driver_version == "580.159.04"


def test_nounits_reordered_adds_reserved(data_dir):
    path = data_dir / "smi" / "h200_run_nounits_reordered.csv"
    rows = _rows(path)
    m = _m(path)
    assert m.samples == len(rows) == 1316
    assert m.peak_used_bytes == max(r["memory.used"] + r["memory.reserved"] for r in rows) * MiB


def test_noheader_log_with_named_columns(data_dir):
    path = data_dir / "smi" / "h200_run_noheader_l1.csv"
    rows = _rows(path, header=["index", "memory.total [MiB]", "memory.used [MiB]"])
    m = _m(path, columns=["index", "memory.total", "memory.used"])
    assert m.samples == len(rows) == 330
    assert m.peak_used_bytes == max(r["memory.used"] for r in rows) * MiB
    assert m.reserved_bytes is None  # not in the log: not available, not 0
    assert m.basis.device_name is None


@pytest.mark.parametrize("name", ["h200_run_units.csv", "h200_run_nounits_reordered.csv",
                                  "h200_spikes_lms500_nounits.csv"])
def test_peaks_never_exceed_total(data_dir, name):
    m = _m(data_dir / "smi" / name)
    assert 0 <= m.idle_used_bytes <= m.peak_used_bytes <= m.total_bytes == 150_754_820_096
