"""The workload dies with kvgate, and what it leaves behind is reported (issue 11, fault 3).

At b278f86: SIGKILL of kvgate orphaned the workload and its children (they kept running),
and processes the workload left running after it exited were not mentioned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kvgate.cli import main

PY = sys.executable
REPO = Path(__file__).resolve().parents[1]


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _wait_file(p: Path, within_s: float = 20.0) -> str:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if p.exists():
            return p.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{p} never appeared")


def test_sigkill_of_kvgate_takes_the_workload_and_its_children(tmp_path):
    pids = tmp_path / "pids"
    child = (
        "import os, subprocess, sys, time\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pids) + '.tmp'!r}, 'w').write(f'{{os.getpid()}} {{g.pid}}')\n"
        f"os.replace({str(pids) + '.tmp'!r}, {str(pids)!r})\n"
        "time.sleep(120)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    p = subprocess.Popen([PY, "-m", "kvgate", "measure", "--domain", "host", "--settle", "0s",
                          "--out", str(tmp_path / "m.json"), "--", PY, "-c", child],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workload, grandchild = map(int, _wait_file(pids).split())
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    try:
        assert _gone(workload), "the workload outlived kvgate"  # parent-death signal
        assert _gone(grandchild), "the workload's child outlived kvgate"  # the watchdog's killpg
    finally:
        for pid in (workload, grandchild):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _leaving(tmp_path):
    pidfile = tmp_path / "left"
    code = ("import subprocess, sys\n"
            "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(pidfile)!r}, 'w').write(str(g.pid))\n")
    return pidfile, code


def test_leftover_processes_are_reported(tmp_path, capsys):
    pidfile, code = _leaving(tmp_path)
    out = tmp_path / "m.json"
    rc = main(["measure", "--domain", "host", "--settle", "0s", "--out", str(out), "--", PY, "-c", code])
    left = int(pidfile.read_text())
    try:
        assert rc == 0
        assert psutil.pid_exists(left) and not _gone(left, 0.2)  # reported, not stopped
        dom = json.loads(out.read_text())["domains"][0]
        assert [p["pid"] for p in dom["extra"]["leftover_processes"]] == [left]
        assert dom["extra"]["leftover_processes"][0]["how"] == "process group"
        text = capsys.readouterr().out
        assert f"the workload left 1 process(es): pid {left}" in text and "--kill-leftovers" in text
    finally:
        os.kill(left, signal.SIGKILL)


@pytest.mark.slow  # spawns processes or traces memory: scripts/test skips it, .ci/run runs it
def test_kill_leftovers_stops_them(tmp_path, capsys):
    pidfile, code = _leaving(tmp_path)
    out = tmp_path / "m.json"
    rc = main(["measure", "--domain", "host", "--settle", "0s", "--kill-leftovers", "--out", str(out),
               "--", PY, "-c", code])
    left = int(pidfile.read_text())
    assert rc == 0
    assert _gone(left, 2.0)
    dom = json.loads(out.read_text())["domains"][0]
    assert dom["extra"]["leftovers_stopped"] is True
    assert "stopped (--kill-leftovers" in capsys.readouterr().out


def test_no_leftovers_no_note(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["measure", "--domain", "host", "--settle", "0s", "--out", str(out), "--", PY, "-c", "pass"]) == 0
    assert "leftover_processes" not in json.loads(out.read_text())["domains"][0]["extra"]
    assert "the workload left" not in capsys.readouterr().out


def _drop_without_done(w) -> None:
    """What kvgate's death does to the watchdog: its pipe closes, no "done" said."""
    if w._wfd is not None:
        os.close(w._wfd)
        w._wfd = None
    else:
        w.proc.stdin.close()


def _group_sleeper():
    return subprocess.Popen([PY, "-c", "import time; time.sleep(60)"], process_group=0)


def test_watchdog_fork_and_subprocess_paths_stop_the_group():
    import threading

    from kvgate.measure.procs import Watchdog

    single = threading.active_count() == 1
    w = Watchdog(0.5)  # one thread here: the fork path
    assert (w._wfd is not None and w.proc is None) if single else w.proc is not None
    g = _group_sleeper()
    w.arm(g.pid)
    _drop_without_done(w)
    g.wait(timeout=10)
    if w._pid is not None:
        os.waitpid(w._pid, 0)

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        w2 = Watchdog(0.5)  # another thread runs: no fork, the python -c watchdog
        assert w2.proc is not None and w2._wfd is None
        g2 = _group_sleeper()
        w2.arm(g2.pid)
        _drop_without_done(w2)
        g2.wait(timeout=10)
        w2.proc.wait(timeout=10)
    finally:
        stop.set()
        t.join()


def test_watchdog_done_leaves_the_group_alone():
    from kvgate.measure.procs import Watchdog

    w = Watchdog(0.5)
    g = _group_sleeper()
    try:
        w.arm(g.pid)
        w.done()
        time.sleep(0.3)
        assert g.poll() is None
    finally:
        g.kill()
        g.wait()
