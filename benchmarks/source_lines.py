"""Lines of kvgate's source (``src/**/*.py``, the bundled presets aside, as issue 24 counts
them), split into code, docstrings + comments, and blank lines.

    python benchmarks/source_lines.py [SRC]

A line is a docstring line when it belongs to a string statement (a module, class or
function docstring, or a bare string), a comment line when it holds only a comment; every
other non-blank line is code (so a code line with a trailing comment counts as code).
"""

from __future__ import annotations

import io
import sys
import tokenize
from pathlib import Path

_STATEMENT_START = (tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE, tokenize.NL, tokenize.ENCODING, None)


def kinds(text: str) -> list[str]:
    """``code`` / ``doc`` / ``blank`` for each line of ``text``."""
    lines = text.splitlines()
    kind = ["blank" if not line.strip() else "code" for line in lines]
    prev = None
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT and lines[tok.start[0] - 1].strip().startswith("#"):
            kind[tok.start[0] - 1] = "doc"
        if tok.type == tokenize.STRING and prev in _STATEMENT_START:
            for row in range(tok.start[0], tok.end[0] + 1):
                if kind[row - 1] == "code":
                    kind[row - 1] = "doc"
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            prev = tok.type
    return kind


def main(root: Path) -> None:
    counts = {"code": 0, "doc": 0, "blank": 0}
    for path in sorted(root.rglob("*.py")):
        if "presets" not in path.parts:
            for k in kinds(path.read_text(encoding="utf-8")):
                counts[k] += 1
    total = sum(counts.values())
    print(f"total {total:,}  code {counts['code']:,}  docstrings+comments {counts['doc']:,}  blank {counts['blank']:,}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "src"))
