"""Rendering helpers shared by the commands: JSON vs text, aligned tables."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any


def emit(as_json: bool, payload: Any, text: str) -> None:
    """Print ``payload`` as JSON when ``as_json`` (the command's ``--json``), else ``text``
    (made :func:`printable`)."""
    if as_json:
        json.dump(payload, sys.stdout, indent=2)  # ensure_ascii: any str, surrogates included
        sys.stdout.write("\n")
    else:
        sys.stdout.write(printable(text if text.endswith("\n") else text + "\n"))


def printable(text: str, encoding: str | None = None) -> str:
    """``text`` with every character the output encoding cannot hold as a backslash
    escape: a non-UTF-8 file name (lone surrogates) prints as ``\\udcff``, no traceback."""
    enc = encoding or getattr(sys.stdout, "encoding", None) or "utf-8"
    return text.encode(enc, errors="backslashreplace").decode(enc)


def table(rows: Sequence[Sequence[str]], header: Sequence[str] | None = None, align: str | None = None) -> str:
    """A plain-text table. ``align`` is one char per column, ``l`` or ``r`` (default: l then r)."""
    allrows = [list(map(str, header))] if header else []
    allrows += [list(map(str, r)) for r in rows]
    if not allrows:
        return ""
    ncol = max(len(r) for r in allrows)
    for r in allrows:
        r += [""] * (ncol - len(r))
    widths = [max(len(r[i]) for r in allrows) for i in range(ncol)]
    align = align or ("l" + "r" * (ncol - 1))
    out = []
    for k, r in enumerate(allrows):
        cells = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align)]
        out.append("  ".join(cells).rstrip())
        if header and k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
