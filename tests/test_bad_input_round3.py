"""Bad and hostile input, round 3 (a break-it pass over the vLLM parallel flags, the
what-ifs from a log, ``kvgate help``, and fit's flags): each is a clear ERROR (exit 2)
naming the flag, never a traceback or a silently accepted impossible setting."""

from __future__ import annotations

import json

import pytest

from kvgate.cli import main


def run_json(argv, capsys):
    try:
        code = main([*argv, "--json"])
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


@pytest.mark.parametrize("topic", ["nosuch", "cli", "Fit", "../x"])
def test_help_unknown_command_is_an_error_not_a_traceback(topic, capsys):
    code, doc = run_json(["help", topic], capsys)
    assert code == 2 and topic in doc["error"]
