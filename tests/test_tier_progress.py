"""``kvgate tier``'s progress bar (kvgate.tier.progress): drawn on a terminal once a run is
old enough, never under --json, never when stderr is not a terminal, never for a short run."""

from __future__ import annotations

import io
import json
import sys
import time

from kvgate.cli import main
from kvgate.tier import progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _trace(tmp_path, n=400):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"timestamp": i, "input_length": 1500, "output_length": 1,
                                     "hash_ids": [0, i % 7 + 1, i + 100]}) + "\n" for i in range(n)))
    return p


def test_bar_draws_the_stage_once_the_run_is_old_enough():
    out = _Tty()
    with progress.run_progress(stream=out, after_s=0.05):
        progress.stage("replaying something slow", 10, "replays")
        progress.advance(3)
        time.sleep(0.6)  # one compiled call holding the work: the watcher draws meanwhile
    text = out.getvalue()
    assert "replaying something slow" in text and "3/10" in text


def test_bar_stays_silent_when_quiet_not_a_terminal_or_short():
    for kw in ({"stream": _Tty(), "quiet": True}, {"stream": io.StringIO()}, {"stream": _Tty(), "after_s": 30}):
        with progress.run_progress(after_s=kw.pop("after_s", 0.0), **kw):
            progress.stage("reading", 100, "B")
            progress.advance(50)
            time.sleep(0.3)
        assert kw["stream"].getvalue() == ""


def test_stage_and_advance_do_nothing_without_a_run():
    progress.stage("nothing", 5)
    progress.advance(2)  # no bar: the library called from Python prints nothing
    assert progress._current is None


def test_tier_draws_on_a_terminal_and_not_under_json(tmp_path, monkeypatch, capsys):
    p = _trace(tmp_path)
    monkeypatch.setattr(progress, "PROGRESS_AFTER_S", 0.0)
    argv = ["tier", "--trace", str(p), "--model", "llama-3.1-8b", "--cache-model", "sglang",
            "--device-blocks", "4", "--hicache-ratio", "2"]
    for extra, drawn in (([], True), (["--json"], False)):
        err = _Tty()
        monkeypatch.setattr(sys, "stderr", err)
        assert main([*argv, *extra]) == 0
        assert ("reading t.jsonl" in err.getvalue() or "SGLang radix cache" in err.getvalue()) is drawn, extra
        capsys.readouterr()
    # stderr not a terminal (a pipe, a log file): nothing, even with the bar due at once
    err2 = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err2)
    assert main(argv) == 0
    assert err2.getvalue() == ""
