"""Outputs of measure/run (issue 11, faults 2, 5, 12): every output place is written to
before the workload starts; a measurement that cannot be written where asked is saved to
a fallback place and the run says where; default names never collide; ``--json`` is one
parseable document whatever the workload prints.

Each test fails at b278f86: the unwritable places were found only after the workload ran
(it ran: the marker file exists) and the measurement was lost (exit 2); two runs in the
same second got the same default name (the second refused: "exists"); the workload's
stdout was mixed into ``--json``'s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from kvgate.cli import main
from kvgate.measure.fallback import probe_writable, save_json

PY = sys.executable
REPO = Path(__file__).resolve().parents[1]
HOST = ["--domain", "host", "--settle", "0s"]
GATE = ["--model", "qwen3-0.6b", "--max-seq", "256", "--slots", "8", "--slots-measured", "4"]


def _marker_cmd(marker: Path) -> list[str]:
    return ["--", PY, "-c", f"open({str(marker)!r}, 'w')"]


def test_measure_refuses_an_unwritable_out_before_the_workload(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("a regular file, not a directory")
    marker = tmp_path / "ran"
    rc = main(["measure", *HOST, "--out", str(blocker / "m.json"), *_marker_cmd(marker)])
    assert rc == 2
    assert "--out" in capsys.readouterr().err and not marker.exists()


def test_measure_refuses_an_unwritable_plot_before_the_workload(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    marker = tmp_path / "ran"
    rc = main(["measure", *HOST, "--out", str(tmp_path / "m.json"), "--plot", str(blocker / "p.png"),
               *_marker_cmd(marker)])
    assert rc == 2
    assert "--plot" in capsys.readouterr().err and not marker.exists()


def test_run_refuses_an_unwritable_record_directory_before_the_workload(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    marker = tmp_path / "ran"
    rc = main(["run", *GATE, *HOST, "--out", str(blocker / "records"), "--measurement-out", str(tmp_path / "m.json"),
               *_marker_cmd(marker)])
    assert rc == 2
    assert "--out record" in capsys.readouterr().err and not marker.exists()


def test_probe_leaves_nothing_behind(tmp_path):
    probe_writable(tmp_path / "a" / "b" / "m.json", option="--out")
    assert list(tmp_path.iterdir()) == []  # the directories made for the probe are removed again


def test_measurement_saved_to_fallback_when_its_directory_goes_away(tmp_path, monkeypatch, capsys):
    """The workload replaces the output directory by a file: the write at the end fails
    and the measurement goes to $XDG_STATE_HOME/kvgate/ under its own name."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    code = f"import os; os.rmdir({str(out_dir)!r}); open({str(out_dir)!r}, 'w')"
    rc = main(["measure", *HOST, "--out", str(out_dir / "m.json"), "--", PY, "-c", code])
    assert rc == 0
    saved = tmp_path / "state" / "kvgate" / "m.json"
    doc = json.loads(saved.read_text())
    assert doc["schema"] == "kvgate.measurement/1" and doc["status"] == "ok"
    out, err = capsys.readouterr()
    out = " ".join(out.split())  # unwrapped from 100 columns (a long path goes to a line of its own)
    assert f"saved to {saved}" in err and f"measurement written to {saved}" in out


def test_save_json_fallback_order(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "file"))
    (tmp_path / "file").write_text("x")  # the XDG place is unusable too
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    s = save_json(tmp_path / "file" / "m.json", {"a": 1})
    assert Path(s.path) == tmp_path / "tmp" / f"kvgate-{os.getuid()}" / "m.json"
    assert "instead" in s.warning
    # a name taken meanwhile: same directory, a unique name, the other file untouched
    (tmp_path / "taken.json").write_text("{}")
    s = save_json(tmp_path / "taken.json", {"b": 2})
    assert Path(s.path).parent == tmp_path and Path(s.path).name.startswith("taken-")
    assert (tmp_path / "taken.json").read_text() == "{}" and json.loads(Path(s.path).read_text()) == {"b": 2}


def test_two_runs_in_the_same_instant_both_save(tmp_path, monkeypatch):
    frozen = datetime(2026, 12, 1, 0, 15, 2, 123456, tzinfo=timezone.utc)

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return frozen

    monkeypatch.setattr("kvgate.commands._measure.datetime", Frozen)
    monkeypatch.chdir(tmp_path)
    assert main(["measure", *HOST, "--", PY, "-c", "pass"]) == 0
    assert main(["measure", *HOST, "--", PY, "-c", "pass"]) == 0
    names = sorted(p.name for p in (tmp_path / "kvgate-records").glob("kvgate-measure-*.json"))
    assert len(names) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["kvgate-records"]  # nothing else in the cwd
    assert names[0].startswith(f"kvgate-measure-20261201-001502.123456-p{os.getpid()}")


def test_json_is_one_document_whatever_the_workload_prints(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    p = subprocess.run([PY, "-m", "kvgate", "measure", *HOST, "--out", str(tmp_path / "m.json"), "--json", "--",
                        PY, "-c", "print('hello from the workload'); print('{not json')"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["schema"] == "kvgate.measurement/1" and doc["measurement_path"] == str(tmp_path / "m.json")
    assert "hello from the workload\n" in p.stderr  # the workload's stdout went to stderr


def test_save_record_falls_back_and_writes_both_files(tmp_path, monkeypatch, capsys):
    from kvgate.gate.record import save_record

    assert main(["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots-measured", "4", "--slots", "8",
                 "--total", "32607MiB", "--idle", "936MiB", "--peak", "19625MiB", "--no-record", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    rec.pop("record_path", None)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    s = save_record(rec, str(blocker / "records"))
    p = Path(s.path)
    assert p.parent == tmp_path / "state" / "kvgate" and p.suffix == ".json"
    assert json.loads(p.read_text())["verdicts"] == rec["verdicts"] and p.with_suffix(".md").exists()
    assert "decision record was saved to" in s.warning
