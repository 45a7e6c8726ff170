"""The README's quick-start blocks are real output: each ``$ kvgate ...`` command shown there
is run and its output compared line for line (file names as the README shows them)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from kvgate.cli import main

ROOT = Path(__file__).resolve().parents[1]
FILES = {"vllm_0.8.5_qwen3-30b-a3b_tp4.log": ROOT / "tests" / "data" / "logs" / "vllm_0.8.5_qwen3-30b-a3b_tp4.log"}


def quick_start_blocks() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text()
    qs = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    out = []
    for block in re.findall(r"```\n(\$ kvgate .*?)```", qs, flags=re.S):
        lines = block.splitlines()
        cmd = lines.pop(0)[2:]
        while cmd.endswith("\\"):
            cmd = cmd[:-1] + lines.pop(0).strip()
        out.append((cmd, "\n".join(lines) + "\n"))
    return out


def test_the_quick_start_runs_fit_import_log_and_tier():
    cmds = [c.split()[1] for c, _ in quick_start_blocks()]
    assert cmds == ["fit", "import-log", "fit", "tier"]


@pytest.mark.parametrize("cmd,want", quick_start_blocks(), ids=lambda v: v.split()[1] if v.startswith("kvgate") else "")
def test_quick_start_block_is_real_output(cmd, want, capsys, shared_dir):
    files = dict(FILES, **{"mooncake_conversation_trace.jsonl": shared_dir / "traces" / "mooncake_conversation_trace.jsonl"})
    argv = [str(files.get(a, a)) for a in shlex.split(cmd)[1:]]
    assert main(argv) == 0
    got = capsys.readouterr().out
    for name, path in files.items():
        got = got.replace(str(path), name)
    assert got == want


# Every other ``$ kvgate ...`` block of the README (outside the quick start, which is compared
# whole above) shows real output: each line it shows appears in the command's output, in
# order; a line in parentheses or one containing "(...)" marks what the README left out.
ELSEWHERE_FILES = {
    "vllm.log": FILES["vllm_0.8.5_qwen3-30b-a3b_tp4.log"],
    "vllm_0.8-v0_qwen3-0.6b_h100_1.log": ROOT / "tests" / "data" / "fit_logs" / "vllm_0.8-v0_qwen3-0.6b_h100_1.log",
}
SKIP_ELSEWHERE = {"demo", "recheck"}  # the demo has its own test; recheck's block needs an edited record


def elsewhere_blocks() -> list[tuple[str, list[str]]]:
    text = (ROOT / "README.md").read_text()
    before, rest = text.split("## Quick start", 1)
    rest = rest.split("\n## ", 1)[1]
    out = []
    for block in re.findall(r"```\n(\$ kvgate .*?)```", before + rest, flags=re.S):
        lines = block.splitlines()
        cmd = lines.pop(0)[2:]
        while cmd.endswith("\\"):
            cmd = cmd[:-1] + lines.pop(0).strip()
        if cmd.split()[1] not in SKIP_ELSEWHERE:
            out.append((cmd, lines))
    return out


def test_the_readme_shows_other_real_runs():
    assert len(elsewhere_blocks()) >= 3


@pytest.mark.parametrize("cmd,shown", elsewhere_blocks(), ids=lambda v: v.split()[1] if isinstance(v, str) else "")
def test_other_readme_block_is_real_output(cmd, shown, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    argv = [str(ELSEWHERE_FILES.get(a, a)) for a in shlex.split(cmd)[1:]]
    assert main(argv) == 0
    got = capsys.readouterr().out.splitlines()
    pos = 0
    for line in shown:
        if (line.startswith("(") and line.endswith(")")) or "(...)" in line:
            continue
        while pos < len(got) and got[pos] != line:
            pos += 1
        assert pos < len(got), f"README line not in the output (in order): {line!r}"
        pos += 1
