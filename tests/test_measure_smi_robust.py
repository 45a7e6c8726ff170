"""nvidia-smi logs as users have them (issue 11, fault 9): a log still being written, an
error line mid-log, a UTF-8 BOM, UTF-16 from a PowerShell redirect, a uuid change. The
rows are the real H200 log's (tests/data/smi/h200_run_units.csv); expected figures are
computed here from its columns. At b278f86 each case below failed: the truncated line and
the error line raised ("N fields, the header has 9"), the BOM made the first header cell
"\\ufefftimestamp" (timestamps dropped: peak_time_s None), UTF-16 gave "no nvidia-smi CSV
header found", and the uuid change was accepted."""

from __future__ import annotations

import csv

import pytest

from kvgate.cli import main
from kvgate.measure.select import select_measurement
from kvgate.measure.smi_csv import SmiCsvError, load_smi_csv

MiB = 2**20
ERROR_LINE = "Unable to determine the device handle for GPU0000:19:00.0: Unknown Error"


@pytest.fixture()
def real(data_dir):
    text = (data_dir / "smi" / "h200_run_units.csv").read_text()
    lines = text.splitlines()
    rows = [next(csv.reader([x], skipinitialspace=True)) for x in lines[1:]]
    used = [143_771 - int(r[7].split()[0]) for r in rows]  # total − free, MiB
    peak_i = max(range(len(used)), key=used.__getitem__)
    return lines, used, peak_i


def _m(path):
    return select_measurement(load_smi_csv(str(path))).measurement


def test_truncated_last_line_is_skipped_and_counted(real, tmp_path):
    lines, used, _ = real
    cut = lines[-1][: lines[-1].index("143156") + 4]  # "... 143771 MiB, 0 MiB, 1431": would parse as 1431 MiB
    p = tmp_path / "live.csv"
    p.write_text("\n".join(lines[:-1]) + "\n" + cut)
    m = _m(p)
    assert m.samples == len(used) - 1 == 1643
    assert m.peak_used_bytes == max(used[:-1]) * MiB == 67_143 * MiB
    w = m.extra["warnings"][0]
    assert w.startswith("1 line(s) skipped: line 1645: no line end")


def test_error_line_mid_log_is_skipped(real, tmp_path, capsys):
    lines, used, _ = real
    p = tmp_path / "err.csv"
    p.write_text("\n".join(lines[:101] + [ERROR_LINE] + lines[101:]) + "\n")
    m = _m(p)
    assert m.samples == len(used) == 1644 and m.peak_used_bytes == 67_143 * MiB
    assert m.extra["skipped_lines"] == [102]
    assert "line 102: 1 fields, the header has 9" in m.extra["warnings"][0]  # the message has no comma
    assert main(["import-smi", str(p)]) == 0
    assert "WARNING: 1 line(s) skipped" in capsys.readouterr().out


def test_only_bad_lines_is_still_an_error_naming_them(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("timestamp, memory.total [MiB], memory.used [MiB]\n" + ERROR_LINE + "\n")
    with pytest.raises(SmiCsvError, match=r"no memory samples in the log \(1 line\(s\) skipped: line 2"):
        load_smi_csv(str(p))


@pytest.mark.parametrize("encoding, bom", [("utf-8", b"\xef\xbb\xbf"), ("utf-16-le", b"\xff\xfe"),
                                           ("utf-16-be", b"\xfe\xff"), ("utf-16-le", b"")])
def test_bom_and_utf16(real, tmp_path, encoding, bom):
    lines, used, peak_i = real
    p = tmp_path / "enc.csv"
    p.write_bytes(bom + ("\r\n".join(lines) + "\r\n").encode(encoding))  # PowerShell writes CRLF
    m = _m(p)
    assert m.samples == 1644 and m.peak_used_bytes == 67_143 * MiB and m.idle_used_bytes == used[0] * MiB
    # timestamps kept: the peak's time is its row's offset from the first row
    t0 = lines[1].split(",")[0]
    assert t0 == "2026/11/29 11:19:00.858" and m.basis.start_time == "2026-11-29T11:19:00.858000"
    assert m.peak_time_s is not None and m.extra["warnings"] == []


def test_uuid_change_mid_log_is_refused(real, tmp_path):
    lines, _, _ = real
    swapped = [x.replace("GPU-d123c540-3d02-b0d8-c638-e90011910307", "GPU-ffffffff-3d02-b0d8-c638-e90011910307")
               for x in lines[800:]]
    p = tmp_path / "swap.csv"
    p.write_text("\n".join(lines[:800] + swapped) + "\n")
    with pytest.raises(SmiCsvError, match=r"uuid of gpu:0 changes from GPU-d123c540.* \(line 2\) to GPU-ffffffff.* "
                                          r"\(line 801\)"):
        load_smi_csv(str(p))
