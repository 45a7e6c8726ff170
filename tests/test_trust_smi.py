"""nvidia-smi logs: timing figures that cannot be trusted are flagged (equal timestamps,
a corrupt timestamp), and a log is read line by line in bounded memory."""

from __future__ import annotations

import tracemalloc

import pytest

from kvgate.cli import main
from kvgate.measure.measurement import Measurement
from kvgate.measure.smi_csv import load_smi_csv, parse_smi_csv

MiB = 2**20
HEAD = "timestamp, index, memory.total [MiB], memory.used [MiB], memory.free [MiB]\n"


def _row(ts: str, used: int) -> str:
    return f"{ts}, 0, 32607 MiB, {used} MiB, {32607 - used} MiB\n"


def _one(doc) -> Measurement:
    return Measurement.from_dict(doc["domains"][0])


def test_equal_timestamps_give_no_gap_figure():
    log = HEAD + "".join(_row("2026/11/29 10:00:00.000", u) for u in (900, 5000, 19000, 900))
    m = _one(parse_smi_csv(log))
    assert m.max_gap_s is None and m.basis.interval_s is None and m.peak_time_s is None  # not "0.00 ms"
    assert m.peak_used_bytes == 19000 * MiB
    assert any("timing figures cannot be trusted" in w and "same timestamp" in w for w in m.extra["warnings"])


def test_some_equal_timestamps_are_counted():
    rows = [_row(f"2026/11/29 10:00:0{i // 2}.000", 900 + i) for i in range(8)]  # pairs share a second
    m = _one(parse_smi_csv(HEAD + "".join(rows)))
    assert any("4 of the 7 intervals of gpu:0 are 0" in w for w in m.extra["warnings"])


def test_a_corrupt_timestamp_is_flagged(tmp_path, capsys):
    rows = [_row(f"2026/11/29 10:00:{i:02d}.500", 900 + 10 * i) for i in range(20)]
    rows[10] = _row("4999/11/29 10:00:10.500", 1000)  # one corrupt year
    p = tmp_path / "smi.csv"
    p.write_text(HEAD + "".join(rows))
    m = _one(load_smi_csv(str(p)))
    flagged = [w for w in m.extra["warnings"] if "timing figures cannot be trusted" in w]
    assert flagged and "years" in flagged[0] and "corrupt timestamp" in flagged[0]
    assert main(["import-smi", str(p)]) == 0
    out = capsys.readouterr().out
    assert "WARNING: timing figures cannot be trusted" in out


def test_a_regular_log_has_no_timing_warning():
    rows = [_row(f"2026/11/29 10:00:{i // 2:02d}.{(i % 2) * 500:03d}", 900 + i) for i in range(20)]
    m = _one(parse_smi_csv(HEAD + "".join(rows)))
    assert m.max_gap_s == 0.5 and m.basis.interval_s == 0.5
    assert not any("timing" in w for w in m.extra["warnings"])


@pytest.mark.slow  # spawns processes or traces memory: scripts/test skips it, .ci/run runs it
def test_a_log_is_read_in_bounded_memory(tmp_path):
    """The old reader held the text, its lines and per-row objects: about 11× the log's
    size. Line by line, the samples cost 16 B each (an smi line is ~59 B here)."""
    p = tmp_path / "big.csv"
    with open(p, "w") as fh:
        fh.write(HEAD)
        for i in range(60_000):
            fh.write(_row(f"2026/11/29 {10 + i // 36000:02d}:{(i // 600) % 60:02d}:{(i // 10) % 60:02d}."
                          f"{(i % 10) * 100:03d}", 900 + i % 5000))
    size = p.stat().st_size
    load_smi_csv(str(p))  # imports (numpy, encodings) done before the count
    tracemalloc.start()
    try:
        doc = load_smi_csv(str(p))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert _one(doc).samples == 60_000
    # 16 B a sample kept (times, used) + 8 B of intervals while they are measured, and
    # slack for array growth: under 48 B a sample, well under the log's ~59 B a line
    # (the old reader: about 11 × 59 B)
    assert peak < 48 * 60_000 < size, (peak, size)
