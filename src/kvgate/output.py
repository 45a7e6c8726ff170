"""Rendering helpers shared by the commands: JSON vs text, aligned tables, and text that
fits :data:`WIDTH` columns."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from kvgate.errors import KvgateError

#: the columns every command's text output fits (``--json`` is not wrapped)
WIDTH = 100


def emit(as_json: bool, payload: Any, text: str) -> None:
    """Print ``payload`` as JSON when ``as_json`` (the command's ``--json``), else ``text``
    (wrapped to :data:`WIDTH` columns by :func:`fit_width`, made :func:`printable`): all or
    nothing (:func:`write_stdout`)."""
    if as_json:
        write_stdout(json.dumps(payload, indent=2) + "\n")  # ensure_ascii: any str, surrogates included
    else:
        text = fit_width(text)
        write_stdout(printable(text if text.endswith("\n") else text + "\n"))


_LABEL = re.compile(r"(\s*)(?:(?:-{0,2}[A-Za-z][\w.-]{0,15}|[A-Z][A-Z' ]{1,14}): |[-*•] )")
_GAP = re.compile(r"\S( {2,})(?=\S)")


def hanging_indent(line: str) -> int:
    """Where the continuation lines of ``line`` start when it is wrapped: after a short
    label (``note: ``, ``verdict: ``, ``  --max-num-seqs: ``) or a bullet (``  - ``); else at the last column of a
    ``label   value`` line (two or more spaces before it, within the first 60 columns);
    else the line's own indent + 4."""
    m = _LABEL.match(line)
    if m:
        return m.end()
    lead = len(line) - len(line.lstrip(" "))
    gaps = [g.end(1) for g in _GAP.finditer(line) if g.end(1) <= 60]
    return gaps[-1] if gaps else lead + 4


def wrap_line(line: str, width: int = WIDTH, indent: int | None = None) -> list[str]:
    """``line`` in lines of at most ``width`` columns, broken at spaces (runs of spaces inside
    a line, aligned columns, are kept), continued at ``indent`` (default
    :func:`hanging_indent`). A word longer than the room (a long path) stays whole."""
    if len(line) <= width:
        return [line]
    ind = min(hanging_indent(line) if indent is None else indent, width // 2)
    glued = _FLAG.sub("\\1\x00", _UNIT.sub("\\1\x00", line))  # a number and its unit or flag stay together
    out = textwrap.wrap(glued, width=width, subsequent_indent=" " * ind, break_long_words=False,
                        break_on_hyphens=False)
    return [ln.replace("\x00", " ") for ln in out] or [line]


_FLAG = re.compile(r"((?<!\S)-{1,2}[a-z][\w-]*) (?=\d)")
_UNIT = re.compile(r"(\d) (?=(?:[kKMGTP]i?B|B|tokens|blocks|layers)\b)")


def fit_width(text: str, width: int = WIDTH) -> str:
    """``text`` with every line longer than ``width`` columns wrapped (:func:`wrap_line`)."""
    if all(len(ln) <= width for ln in text.split("\n")):
        return text
    return "\n".join(part for ln in text.split("\n") for part in wrap_line(ln, width))


def pack(prefix: str, items: Sequence[str], width: int = WIDTH, indent: int | None = None) -> str:
    """``prefix`` then ``items`` joined by spaces, over as many lines as ``width`` needs,
    never breaking inside an item (``--max-model-len 32,768``); continuation lines start at
    ``indent`` (default: under the first item).

    >>> print(pack("flags: ", ["-c 4096", "-np 4", "-fa on"], width=16))
    flags: -c 4096
           -np 4
           -fa on
    """
    ind = " " * (len(prefix) if indent is None else indent)
    lines: list[str] = []
    cur, first = prefix, True
    for it in items:
        if not first and len(cur) + 1 + len(it) > width:
            lines.append(cur)
            cur = ind + it
        else:
            cur = cur + ("" if first else " ") + it
        first = False
    lines.append(cur)
    return "\n".join(lines)


class StdoutError(KvgateError):
    """Standard output could not take the document (a full disk, a closed file)."""


def write_stdout(text: str) -> None:
    """Write ``text`` to standard output whole, or leave none of it there.

    On a real file descriptor the bytes go out with ``os.write`` (not through a buffer a
    failed write would leave for the exit to retry); when a write fails part-way (a full
    disk under ``kvgate tier --json > file``) a regular file is cut back to where it stood,
    so no half JSON document stays, and the error names standard output.

    Raises:
        StdoutError: the write failed (``ENOSPC``, ``EBADF``, ...); ``BrokenPipeError``
            is passed on (``kvgate ... | head`` ends quietly).
    """
    out = sys.stdout
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):  # captured or replaced stdout: plain write
        out.write(text)
        return
    enc = getattr(out, "encoding", None) or "utf-8"
    data = text.encode(enc, errors="backslashreplace")
    start = None
    try:
        out.flush()
        if stat.S_ISREG(os.fstat(fd).st_mode):
            start = os.lseek(fd, 0, os.SEEK_CUR)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except BrokenPipeError:
        raise
    except OSError as exc:
        if start is not None:
            try:
                os.ftruncate(fd, start)
                os.lseek(fd, start, os.SEEK_SET)
            except OSError:
                pass
        raise StdoutError(f"standard output: {exc.strerror or exc}; nothing was written there",
                          hint="free space on the file system standard output goes to, or write elsewhere") from None


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
