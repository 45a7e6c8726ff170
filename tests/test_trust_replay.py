"""A replay that admits no request (or only requests of length 0) has no measured reclaim:
"not available", never 0, and a gate takes no verdict from it."""

from __future__ import annotations

import json

import pytest

from kvgate.cli import main
from kvgate.errors import EXIT_INPUT
from kvgate.replay.simulate import ReplayError, measured_paging_reclaim, replay
from kvgate.replay.trace import synthetic_fixed

GATE = ["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--kv-format", "int8-f32scale",
        "--slots-measured", "4", "--slots", "8", "--total", "32607MiB", "--idle", "936MiB", "--peak", "19625MiB",
        "--no-record"]


@pytest.mark.parametrize("prompt,output", [(9000, 10), (0, 0), (100, 0)])
def test_nothing_held_means_not_available(prompt, output):
    r = replay(synthetic_fixed(5, prompt, output), slot_bytes=8192 * 16, block_bytes=16 * 16, max_seq=8192, slots=2)
    s = r.summary
    assert s["measured_reclaim_bytes"] is None and s["ratio"] is None and s["unwritten_at_peak_bytes"] is None
    assert "not available" in s["reclaim_not_available"]
    with pytest.raises(ReplayError, match="not available"):
        measured_paging_reclaim(synthetic_fixed(5, prompt, output), slot_bytes=8192 * 16, block_bytes=16 * 16,
                                max_seq=8192, slots=2)


@pytest.mark.parametrize("rows", ["0,9000,10\n1,9500,20\n", "0,0,0\n1,0,0\n"])
def test_gate_with_a_trace_that_admits_nothing_gives_no_verdict(tmp_path, capsys, rows):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + rows)
    code = main([*GATE, "--trace", str(trace), "--json"])
    out, err = capsys.readouterr()
    assert code == EXIT_INPUT and "not available" in err
    assert "verdicts" not in json.loads(out)  # the error document, no verdict


def test_replay_command_says_not_available(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,9000,10\n")
    code = main(["replay", "--trace", str(trace), "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots", "2"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("measured reclaim at the peak"))
    assert code == 0 and row.split()[-2:] == ["not", "available"]
