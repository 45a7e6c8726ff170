"""Concurrent ``--force`` writers of one record (issue 28): the ``.json`` and the ``.md``
that stay are always from the same run (write_files_atomic renames under a directory
lock), and a reader never sees a half-written file."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import threading

import pytest

import kvgate.atomicio as atomicio
from kvgate.atomicio import write_files_atomic


def _race(tmp_path, trials: int, writers: int) -> list[tuple[str, str]]:
    mixed = []
    for t in range(trials):
        j, m = tmp_path / f"r{t}.json", tmp_path / f"r{t}.md"
        start = threading.Barrier(writers)

        def write(run: int, j=j, m=m, start=start) -> None:
            start.wait()
            write_files_atomic([(j, json.dumps({"run": run})), (m, f"run {run}\n")], force=True)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        got_j, got_m = str(json.loads(j.read_text())["run"]), m.read_text().split()[1]
        if got_j != got_m:
            mixed.append((got_j, got_m))
    return mixed


def test_concurrent_force_writers_leave_json_and_md_of_one_run(tmp_path):
    assert _race(tmp_path, trials=60, writers=4) == []


def test_the_race_is_real_without_the_lock(tmp_path, monkeypatch):
    """The same race with the lock taken away mixes runs: the test above can fail."""
    monkeypatch.setattr(atomicio, "_dir_locks", lambda paths: contextlib.nullcontext())
    slow_replace = atomicio.os.replace

    def replace(a, b):  # widen the window between the two renames, as a busy disk does
        slow_replace(a, b)
        if str(b).endswith(".json"):
            threading.Event().wait(0.002)
    monkeypatch.setattr(atomicio.os, "replace", replace)
    assert _race(tmp_path, trials=30, writers=4) != []


def _writer(path: str, run: int, n: int) -> None:
    for i in range(n):
        write_files_atomic([(path + ".json", json.dumps({"run": run, "i": i})), (path + ".md", f"run {run} {i}\n")],
                           force=True)


@pytest.mark.skipif(multiprocessing.get_start_method(allow_none=True) not in (None, "fork"), reason="fork only")
def test_concurrent_force_writer_processes(tmp_path):
    base = str(tmp_path / "rec")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(base, r, 40)) for r in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    doc = json.loads(open(base + ".json").read())
    assert open(base + ".md").read().split()[1:] == [str(doc["run"]), str(doc["i"])]
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".")]  # no temporary or backup left
