"""``kvgate run``: measure → gate → record; no-verdict whenever the workload did not finish."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvgate.cli import main
from kvgate.errors import EXIT_NO_VERDICT

PY = sys.executable
REPO = Path(__file__).resolve().parents[1]
# max_seq 256: 4 measured slots of qwen3-0.6b are 112 MiB, below any host's used memory
# (the gate refuses a peak that cannot have held the measured slots).
GATE = ["--model", "qwen3-0.6b", "--max-seq", "256", "--slots", "8", "--domain", "host", "--settle", "0.05s"]
# 40 MiB per "sequence": at least the 28 MiB KV slot of qwen3-0.6b at max_seq 256 (a fit
# below the slot bytes is refused as a negative per-sequence overhead).
ALLOC = ("import sys, time; n = int(sys.argv[1]); b = bytearray(n * 40 * 2**20); "
         "b[::4096] = b'\\x01' * (len(b) // 4096); time.sleep(0.2)")


@pytest.mark.slow  # spawns processes or traces memory: scripts/test skips it, .ci/run runs it
def test_failed_workload_gives_no_verdict_and_keeps_exit_code(tmp_path, capsys):
    rec, meas = tmp_path / "rec.json", tmp_path / "m.json"
    rc = main(["run", *GATE, "--slots-measured", "4", "--out", str(rec), "--measurement-out", str(meas), "--json",
               "--", PY, "-c", "import sys; sys.exit(5)"])
    assert rc == EXIT_NO_VERDICT
    r = json.loads(rec.read_text())
    assert r["status"] == "no-verdict"
    assert set(r["verdicts"].values()) == {"no-verdict"}
    assert "exit code 5" in r["no_verdict_reason"]
    assert not r.get("projection") and not r.get("boundaries")  # nothing from partial data
    m = json.loads(meas.read_text())
    assert (m["status"], m["exit_code"]) == ("failed", 5)
    assert json.loads(capsys.readouterr().out)["status"] == "no-verdict"


def test_concurrency_stops_at_the_first_failed_level(tmp_path):
    marker = tmp_path / "ran"
    code = f"import sys; open({str(marker)!r} + sys.argv[1], 'w'); sys.exit(1 if sys.argv[1] == '2' else 0)"
    rc = main(["run", *GATE, "--concurrency", "2,4", "--out", str(tmp_path / "rec.json"),
               "--measurement-out", str(tmp_path / "m.json"), "--", PY, "-c", code, "{n}"])
    assert rc == EXIT_NO_VERDICT
    assert (tmp_path / "ran2").exists() and not (tmp_path / "ran4").exists()
    assert json.loads((tmp_path / "m-n2.json").read_text())["status"] == "failed"
    assert not (tmp_path / "m-n4.json").exists()


def test_concurrency_needs_placeholder(capsys):
    assert main(["run", *GATE, "--concurrency", "2,4", "--", PY, "-c", "pass"]) == 2
    assert "{n}" in capsys.readouterr().err


@pytest.mark.slow  # spawns processes or traces memory: scripts/test skips it, .ci/run runs it
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
    doms = {n: json.loads((tmp_path / f"m-n{n}.json").read_text())["domains"][0] for n in (2, 4)}
    # host: each level's own bytes (process-tree peak) over the gated run's (n = 4) idle
    idle4 = doms[4]["idle_used_bytes"]
    assert [p[1] for p in pts] == [idle4 + doms[n]["extra"]["tree_peak_bytes"] for n in (2, 4)]
    assert pts[1][1] == doms[4]["peak_used_bytes"]
    # the workload touched 80 and 160 MiB: the tree grew by at least 80 MiB between them
    assert doms[4]["extra"]["tree_peak_bytes"] - doms[2]["extra"]["tree_peak_bytes"] >= 80 * 2**20 - 2**20
    assert (tmp_path / "run.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # spawns processes or traces memory: scripts/test skips it, .ci/run runs it
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


def _refused(capsys, tmp_path, argv, fragment):
    """``kvgate run argv -- CMD``: exit 2 with ``fragment``, CMD never ran, nothing written."""
    marker = tmp_path / "ran"
    before = {p.name for p in tmp_path.iterdir()}
    rc = main(["run", *argv, "--", PY, "-c", f"open({str(marker)!r}, 'w')"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert fragment in err
    assert "Traceback" not in err
    assert not marker.exists()
    assert {p.name for p in tmp_path.iterdir()} == before  # nothing written


@pytest.mark.parametrize("extra, fragment", [
    (["--model", "no-such-model"], "ERROR: no model file or preset named 'no-such-model'"),
    (["--model", "qwen3-0.6b", "--kv-format", "zz"], "ERROR: unknown KV format 'zz'"),
    (["--model", "qwen3-0.6b", "--layout", "zz"], "ERROR: unknown layout 'zz'"),
    (["--model", "qwen3-0.6b", "--candidates", "paging,zz"], "ERROR: unknown candidate(s): zz"),
    (["--model", "qwen3-0.6b", "--margin", "150%"], "ERROR: --margin must be at least 0% and below 100%, got 150%"),
    (["--model", "qwen3-0.6b", "--trace", "missing.csv"], "ERROR: trace file not found: missing.csv"),
])  # fmt: skip
def test_gate_options_checked_before_the_workload(tmp_path, capsys, monkeypatch, extra, fragment):
    monkeypatch.chdir(tmp_path)  # the default measurement and record paths are relative
    argv = [*extra, "--max-seq", "256", "--slots", "8", "--domain", "host", "--settle", "0.05s"]
    _refused(capsys, tmp_path, argv, fragment)


def test_bad_trace_checked_before_the_workload(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t = tmp_path / "t.csv"
    t.write_text("timestamp,prompt_tokens,output_tokens\n0,10,5\n1e20,10,5\n")
    _refused(capsys, tmp_path, [*GATE, "--trace", str(t)],
             "ERROR: the trace spans 1e+20 s = 5e+21 decode steps at 50 tokens/s (speed 1)")


@pytest.mark.parametrize("outs, fragment", [
    (["--measurement-out", "x.json", "--out", "x.json"], "ERROR: --measurement-out and --out are the same file: x.json"),
    (["--measurement-out", "x.json", "--plot", "x.json"], "ERROR: --measurement-out and --plot are the same file: x.json"),
    (["--out", "r.json", "--plot", "r.md"], "ERROR: --plot and --out (its Markdown) are the same file: r.md"),
    (["--plot", "p.png", "--out", "p.png"], "ERROR: --plot p.png is also the --out record directory"),
    (["--plot", "."], "ERROR: --plot . is a directory, not a file"),
])  # fmt: skip
def test_output_collisions_refused_before_the_workload(tmp_path, capsys, monkeypatch, outs, fragment):
    monkeypatch.chdir(tmp_path)
    _refused(capsys, tmp_path, [*GATE, *outs], fragment)


def test_collision_found_through_different_spellings(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(capsys, tmp_path, [*GATE, "--measurement-out", "./m.json", "--out", str(tmp_path / "m.json")],
             "ERROR: --measurement-out and --out are the same file")


def _measure_refused(capsys, tmp_path, argv, fragment):
    marker = tmp_path / "ran"
    before = {p.name for p in tmp_path.iterdir()}
    rc = main(["measure", "--domain", "host", "--settle", "0", *argv, "--", PY, "-c", f"open({str(marker)!r}, 'w')"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert fragment in err and "Traceback" not in err
    assert not marker.exists()
    assert {p.name for p in tmp_path.iterdir()} == before


def test_measure_out_and_plot_collide(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _measure_refused(capsys, tmp_path, ["--out", "a.json", "--plot", "a.json"],
                     "ERROR: --out and --plot are the same file: a.json")


@pytest.mark.parametrize("opt", ["--out", "--plot"])
def test_measure_output_that_is_a_directory(tmp_path, capsys, monkeypatch, opt):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    _measure_refused(capsys, tmp_path, [opt, "d", "--force"], f"ERROR: {opt} d is a directory, not a file")


@pytest.mark.parametrize("cmd", [["sleep", "0.3"], ["true"]])
def test_unsampled_tree_rss_is_not_available(tmp_path, capsys, cmd):
    """CMD's RSS never read (a 100 s interval: one sample before CMD, one after it exited):
    unknown, "not available", never 0 B."""
    argv = ["--interval", "100s", "--", *cmd]
    out = tmp_path / "m.json"
    rc = main(["measure", "--domain", "host", "--settle", "0", "--out", str(out), *argv])
    text = capsys.readouterr().out
    assert rc == 0
    assert "process-tree RSS peak  not available" in text
    assert "0 B" not in text.split("process-tree RSS peak", 1)[1].splitlines()[0]
    extra = json.loads(out.read_text())["domains"][0]["extra"]
    assert extra["tree_rss_peak_bytes"] is None
    assert extra["tree_rss_peak_time_s"] is None and extra["tree_rss_timeline"] is None


def test_failed_run_is_no_verdict_even_when_its_peak_is_small(tmp_path, capsys):
    """A workload that dies early has a small peak; that is no-verdict, not a bad-input error."""
    from kvgate.cli import main as kv

    # 4 bf16 slots at 40,960 = 4 × 4,026,531,840 B: far more than this machine's used RAM
    rc = kv(["run", "--model", "qwen3-30b-a3b", "--max-seq", "40960", "--slots-measured", "4", "--slots", "8",
             "--domain", "host", "--settle", "0s", "--out", str(tmp_path / "r.json"),
             "--measurement-out", str(tmp_path / "m.json"), "--", sys.executable, "-c", "raise SystemExit(3)"])
    out = capsys.readouterr()
    assert rc == EXIT_NO_VERDICT, out.err
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["status"] == "no-verdict" and set(rec["verdicts"].values()) == {"no-verdict"}


def test_run_plot_shows_projections_and_the_gate_limit(tmp_path, monkeypatch):
    """The run plot gets the KV-only projection and the gate limit ⌊(1 − m)·T⌋ from the record."""
    import kvgate.measure.plot
    from kvgate.cli import main as kv

    seen = {}

    def fake_plot(m, path, *, force=False, **kw):
        seen.update(kw, total=m.total_bytes)
        return str(path)

    monkeypatch.setattr(kvgate.measure.plot, "plot_measurement", fake_plot)
    rc = kv(["run", "--model", "qwen3-0.6b", "--max-seq", "64", "--slots-measured", "1", "--slots", "2",
             "--domain", "host", "--settle", "0s", "--out", str(tmp_path / "r.json"), "--plot", str(tmp_path / "p.png"),
             "--measurement-out", str(tmp_path / "m.json"), "--", sys.executable, "-c",
                 # the workload must add more than the slot it claims (7,340,032 B): P - U0 is checked
                 "import time; b = bytearray(64 << 20); time.sleep(0.3)"])
    assert rc == 0
    labels = [label for _, label in seen["projections"]]
    assert any("KV only" in l for l in labels) and any("gate limit" in l for l in labels)
    limit = next(v for v, l in seen["projections"] if "gate limit" in l)
    assert limit == seen["total"] * 9 // 10
