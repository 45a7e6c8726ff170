"""Under --json an error is one JSON document on stdout; `measure` exits as the README's
exit-code table says (5 for a failed or killed workload, 128+N only for kvgate itself)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from kvgate.cli import main
from kvgate.errors import EXIT_CODES, EXIT_INPUT, EXIT_NO_VERDICT

PY = sys.executable
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("argv", [
    ["geometry", "no-such-model-xyz", "--max-seq", "8192"],           # KvgateError
    ["geometry", "qwen3-30b-a3b", "--max-seq", "banana"],             # argparse usage error
    ["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--no-such-flag"],
    ["import-smi", "/no/such/log.csv"],
    ["load", "--url", "http://10.0.0.1:8000", "--trace", "x.csv"],
    ["load", "--url", "http://127.0.0.1:9", "--trace", "x.csv", "--max-seconds", "inf"],
    ["replay", "--trace", "/no/such/trace.csv"],
])
def test_json_errors_are_one_json_document_on_stdout(argv, capsys):
    try:
        code = main([*argv, "--json"])
    except SystemExit as exc:  # argparse
        code = exc.code
    out, err = capsys.readouterr()
    doc = json.loads(out)  # exactly one document
    assert set(doc) == {"error", "hint", "exit_code"}
    assert doc["exit_code"] == code == EXIT_INPUT and doc["error"]
    assert "ERROR:" in err


def test_a_workload_argument_named_json_does_not_switch_kvgate_to_json(capsys):
    code = main(["measure", "--domain", "host", "--settle", "banana", "--", PY, "--json"])
    out, _ = capsys.readouterr()
    assert code == EXIT_INPUT and out == ""


@pytest.mark.parametrize("code,expected_exit", [("import sys; sys.exit(3)", 3),
                                                 ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 137)])
def test_measure_of_a_failed_or_killed_workload_exits_5(tmp_path, capsys, code, expected_exit):
    out = tmp_path / "m.json"
    rc = main(["measure", "--domain", "host", "--settle", "0s", "--out", str(out), "--json", "--", PY, "-c", code])
    doc = json.loads(capsys.readouterr().out)
    assert rc == EXIT_NO_VERDICT  # not the workload's own 3 / 137: 137 would read as "kvgate was killed"
    assert doc["status"] == "failed" and doc["exit_code"] == expected_exit
    assert json.loads(out.read_text())["exit_code"] == expected_exit


@pytest.mark.parametrize("doc", ["README.md", "docs/CONVENTIONS.md"])
def test_exit_code_tables_are_the_one_in_kvgate_errors(doc):
    text = (ROOT / doc).read_text()
    section = text[text.index("## Exit codes"):]
    section = section[: section.index("\n## ", 5)] if "\n## " in section[5:] else section
    rows = re.findall(r"^\| (\S+) \| `([^`]+)` \| (.+) \|$", section, flags=re.M)
    assert rows == [(c, n, m) for c, n, m in EXIT_CODES]
