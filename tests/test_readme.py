"""Every kvgate example in README.md runs as printed, from the checkout's root.

The examples are collected from the README itself (:func:`readme_examples`):

- in fenced blocks, each line ``$ kvgate ...`` (a command followed by the output it
  shows, up to the next ``$`` line or the block's end; ``\\`` continues a command) and
  each line ``kvgate ...`` or ``.venv/bin/kvgate ...`` (a command shown without output;
  also after ``&&``, as the set-up line runs ``.venv/bin/kvgate demo``);
- in running text, each code span ``kvgate SUBCOMMAND ARG...`` with at least one argument
  and no placeholder (``MODEL``, ``LOG``, ``N``, ``...``, ``[`` ``|``: those spans are
  syntax, not commands).

Each is run in-process through :func:`kvgate.cli.main` with the repository root as the
working directory and the arguments exactly as printed (so every file it names must exist
there, and nothing outside the repository is read). The exit status must be 0 unless
:data:`EXIT` says otherwise; the output a block shows must be the command's output: the
whole of it, or, when the block marks an elision (a line in parentheses, ``(...)``), each
shown line in order. Commands that need a GPU and torch, or a running server, are in
:data:`SKIP` with the reason and are checked to be still in the README.

``python tests/test_readme.py --update`` rewrites the output of every block compared
whole with the real output (after a deliberate change of kvgate's printed text).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# Commands that cannot run here, by their first words, with the reason.
SKIP = {
    "kvgate run --model qwen3-30b-a3b --max-seq 8192": "needs a CUDA GPU and torch (pip install -e '.[gpu]')",
    "kvgate load --url http://127.0.0.1:8080": "needs an engine server listening on 127.0.0.1:8080",
}
# Commands whose exit status is not 0, with the status (kvgate.errors) and why.
EXIT = {
    "kvgate recheck examples/records/demo.json --max-seq 40960": 4,  # EXIT_CHANGED: the what-if changes a verdict
    "kvgate recheck examples/records/demo-edited.json": 4,  # EXIT_CHANGED: two recomputed figures differ
}
# What varies between runs in a command's output: a record's time stamp in its file name.
_VARIES = [(re.compile(r"-\d{8}T\d{6}\d*Z(?=\.json)"), "-<UTC time>")]

_PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*(\.[A-Za-z]+)?$|\.\.\.|…|\[|\||\(|PORT")


@dataclass(frozen=True)
class Example:
    """One README example: the command as printed (continuations joined), the output
    lines the README shows (``None``: none shown) and where it is (README line)."""

    cmd: str
    shown: tuple[str, ...] | None
    line: int

    @property
    def argv(self) -> list[str]:
        words = shlex.split(self.cmd)
        assert words[0] in ("kvgate", ".venv/bin/kvgate"), self.cmd
        return words[1:]

    @property
    def elided(self) -> bool:
        return any(_is_elision(s) for s in self.shown or ())

    def __str__(self) -> str:
        return f"README.md:{self.line}: {self.cmd}"


def _is_elision(line: str) -> bool:
    return (line.startswith("(") and line.endswith(")")) or "(...)" in line


def _is_command(text: str) -> bool:
    return text.startswith(("kvgate ", ".venv/bin/kvgate "))


def readme_examples(text: str | None = None) -> list[Example]:
    """Every kvgate example of the README, in order (see the module docstring)."""
    text = README.read_text() if text is None else text
    out: list[Example] = []
    fences = list(re.finditer(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M))
    for m in fences:
        first = text.count("\n", 0, m.start(1)) + 1
        lines = m.group(1).splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            start = first + i
            dollar = line.startswith("$ ")
            cmd = line[2:] if dollar else line.rsplit(" && ", 1)[-1]  # the set-up line ends in kvgate demo
            if not _is_command(cmd):
                i += 1
                continue
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1].rstrip() + " " + lines[i].strip()
            i += 1
            shown: list[str] = []
            if dollar:
                while i < len(lines) and not lines[i].startswith("$ "):
                    shown.append(lines[i])
                    i += 1
            out.append(Example(cmd, tuple(shown) if dollar else None, start))
    prose = text
    for m in reversed(fences):  # blank the fenced blocks, keeping line numbers
        prose = prose[:m.start()] + re.sub(r"[^\n]", " ", m.group(0)) + prose[m.end():]
    for m in re.finditer(r"`(kvgate [^`]+)`", prose):
        cmd = " ".join(m.group(1).split())
        words = cmd.split()
        if len(words) >= 3 and not any(_PLACEHOLDER.search(w) for w in words[1:]):
            out.append(Example(cmd, None, text.count("\n", 0, m.start()) + 1))
    return sorted(out, key=lambda e: e.line)


def _skip_reason(ex: Example) -> str | None:
    norm = ex.cmd.removeprefix(".venv/bin/")
    return next((why for head, why in SKIP.items() if norm.startswith(head)), None)


def checkout_view(where: Path) -> Path:
    """``where`` made to look like the checkout's root: a link to each of its entries, so
    an example reads the repository's files by the paths it prints while what it writes
    (records) lands in ``where``, not in the checkout."""
    where.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if not (where / entry.name).exists():
            (where / entry.name).symlink_to(entry)
    return where


def run_example(ex: Example, root: Path) -> tuple[int, str]:
    """Run ``ex`` as printed in ``root`` (:func:`checkout_view`); its exit status and
    standard output, with what varies between runs (:data:`_VARIES`) written as the README
    writes it."""
    from kvgate.cli import main

    buf = io.StringIO()
    cwd = os.getcwd()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            rc = main(ex.argv)
    finally:
        os.chdir(cwd)
    out = buf.getvalue()
    for pattern, shown in _VARIES:
        out = pattern.sub(shown, out)
    return rc, out


EXAMPLES = readme_examples()


def test_the_readme_shows_the_examples_a_newcomer_needs():
    cmds = [e.cmd for e in EXAMPLES]
    subcommands = {e.argv[0] for e in EXAMPLES}
    assert {"demo", "fit", "import-log", "gate", "tier", "recheck", "geometry", "run", "load"} <= subcommands
    assert sum(e.shown is not None for e in EXAMPLES) >= 10, cmds


def test_every_skipped_command_is_still_in_the_readme():
    for head in SKIP:
        assert any(e.cmd.removeprefix(".venv/bin/").startswith(head) for e in EXAMPLES), head
    for cmd in EXIT:
        assert cmd in [e.cmd for e in EXAMPLES], cmd


@pytest.mark.parametrize("doc", ["README.md", "docs/*.md", "docs/schema/*.json", "examples/**/*.md"])
def test_the_docs_name_no_file_outside_the_repository(doc):
    for path in ROOT.glob(doc):
        text = path.read_text()
        for outside in ("../shared", "/work/", "DESIGN.md"):  # the design notes are not in the repository
            assert outside not in text, f"{path.relative_to(ROOT)} names {outside}"


def test_every_file_an_example_names_exists_from_the_root():
    for ex in EXAMPLES:
        for word in ex.argv:
            if word.startswith(("examples/", "tests/", "benchmarks/")) or re.search(r"\.(jsonl?|csv|log|gguf)$", word):
                assert (ROOT / word).exists(), f"{ex}: {word} is not in the repository"


@pytest.mark.parametrize("ex", EXAMPLES, ids=lambda e: f"L{e.line}-{e.argv[0]}")
def test_readme_example_runs_as_printed(ex, tmp_path):
    why = _skip_reason(ex)
    if why:
        pytest.skip(why)
    root = checkout_view(tmp_path / "checkout")
    before = sorted(p.name for p in root.iterdir())
    rc, got = run_example(ex, root)
    assert rc == EXIT.get(ex.cmd.removeprefix(".venv/bin/"), 0), f"{ex}: exit {rc}\n{got}"
    new = sorted(set(p.name for p in root.iterdir()) - set(before))
    assert new in ([], ["kvgate-records"]), f"{ex} wrote {new}: records go under kvgate-records/ only"
    if not ex.shown:
        return
    if not ex.elided:
        assert got.splitlines() == list(ex.shown), f"{ex}: the README block is not the output"
        return
    lines = got.splitlines()
    pos = 0
    for line in ex.shown:
        if _is_elision(line):
            continue
        while pos < len(lines) and lines[pos] != line:
            pos += 1
        assert pos < len(lines), f"{ex}: README line not in the output (in order): {line!r}"
        pos += 1


def update_readme() -> int:
    """Rewrite the output of every whole-compared ``$ kvgate`` block with the real output;
    returns how many blocks changed."""
    import tempfile

    lines = README.read_text().splitlines(keepends=True)
    changed = 0
    tmp = tempfile.TemporaryDirectory()
    for n, ex in enumerate(reversed(readme_examples())):  # from the end: earlier line numbers stay valid
        if ex.shown is None or ex.elided or _skip_reason(ex):
            continue
        _, got = run_example(ex, checkout_view(Path(tmp.name) / str(n)))
        start = ex.line  # the command's first line (1-based) → its output follows it
        while lines[start - 1].rstrip("\n").endswith("\\"):
            start += 1
        new = [f"{x}\n" for x in got.splitlines()]
        if lines[start:start + len(ex.shown)] != new:
            lines[start:start + len(ex.shown)] = new
            changed += 1
    README.write_text("".join(lines))
    tmp.cleanup()
    return changed


if __name__ == "__main__":  # python tests/test_readme.py --update
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/test_readme.py --update")
    print(f"{update_readme()} README block(s) rewritten")
