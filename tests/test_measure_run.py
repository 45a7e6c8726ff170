"""``kvgate run``: measure → gate → record; no-verdict whenever the workload did not finish."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kvgate.cli import main

PY = sys.executable
REPO = Path(__file__).resolve().parents[1]
GATE = ["--model", "qwen3-0.6b", "--max-seq", "8192", "--slots", "8", "--domain", "host", "--settle", "0.05s"]
ALLOC = ("import sys, time; n = int(sys.argv[1]); b = bytearray(n * 8 * 2**20); "
         "b[::4096] = b'\\x01' * (len(b) // 4096); time.sleep(0.2)")


def test_failed_workload_gives_no_verdict_and_keeps_exit_code(tmp_path, capsys):
    rec, meas = tmp_path / "rec.json", tmp_path / "m.json"
    rc = main(["run", *GATE, "--slots-measured", "4", "--out", str(rec), "--measurement-out", str(meas), "--json",
               "--", PY, "-c", "import sys; sys.exit(5)"])
    assert rc == 3
    r = json.loads(rec.read_text())
    assert r["status"] == "no-verdict"
    assert set(r["verdicts"].values()) == {"no-verdict"}
    assert "exit code 5" in r["no_verdict_reason"]
    assert "projection" not in r and "boundaries" not in r  # nothing from partial data
    m = json.loads(meas.read_text())
    assert (m["status"], m["exit_code"]) == ("failed", 5)
    assert json.loads(capsys.readouterr().out)["status"] == "no-verdict"


def test_concurrency_stops_at_the_first_failed_level(tmp_path):
    marker = tmp_path / "ran"
    code = f"import sys; open({str(marker)!r} + sys.argv[1], 'w'); sys.exit(1 if sys.argv[1] == '2' else 0)"
    rc = main(["run", *GATE, "--concurrency", "2,4", "--out", str(tmp_path / "rec.json"),
               "--measurement-out", str(tmp_path / "m.json"), "--", PY, "-c", code, "{n}"])
    assert rc == 3
    assert (tmp_path / "ran2").exists() and not (tmp_path / "ran4").exists()
    assert json.loads((tmp_path / "m-n2.json").read_text())["status"] == "failed"
    assert not (tmp_path / "m-n4.json").exists()


def test_concurrency_needs_placeholder(capsys):
    assert main(["run", *GATE, "--concurrency", "2,4", "--", PY, "-c", "pass"]) == 2
    assert "{n}" in capsys.readouterr().err


def test_concurrency_fit_recorded(tmp_path):
    rec = tmp_path / "rec.json"
    rc = main(["run", *GATE, "--slots-measured", "4", "--concurrency", "2,4", "--out", str(rec),
               "--measurement-out", str(tmp_path / "m.json"), "--plot", str(tmp_path / "run.png"),
               "--", PY, "-c", ALLOC, "{n}"])
    assert rc == 0
    r = json.loads(rec.read_text())
    assert r["status"] == "ok"
    pts = r["projection"]["fit"]["points"]
    assert [p[0] for p in pts] == [2, 4]
    peaks = [json.loads((tmp_path / f"m-n{n}.json").read_text())["domains"][0]["peak_used_bytes"] for n in (2, 4)]
    assert [p[1] for p in pts] == peaks
    assert (tmp_path / "run.png").read_bytes()[:4] == b"\x89PNG"


def test_sigterm_during_run_records_no_verdict(tmp_path):
    rec, meas, started = tmp_path / "rec.json", tmp_path / "m.json", tmp_path / "started"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    p = subprocess.Popen([PY, "-m", "kvgate", "run", *GATE, "--slots-measured", "4", "--out", str(rec),
                          "--measurement-out", str(meas), "--", PY, "-c",
                          f"import time; open({str(started)!r}, 'w'); time.sleep(60)"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=20)
    assert p.returncode == 143, err
    assert json.loads(meas.read_text())["status"] == "interrupted"
    assert json.loads(rec.read_text())["status"] == "no-verdict"


def test_existing_record_refused_before_the_workload(tmp_path, capsys):
    rec, marker = tmp_path / "rec.json", tmp_path / "ran"
    rec.write_text("{}")
    rc = main(["run", *GATE, "--out", str(rec), "--measurement-out", str(tmp_path / "m.json"),
               "--", PY, "-c", f"open({str(marker)!r}, 'w')"])
    assert rc == 2 and not marker.exists() and not (tmp_path / "m.json").exists()
    assert "exists" in capsys.readouterr().err
