"""Rendering helpers shared by the commands: JSON vs text, aligned tables."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Sequence
from typing import Any

from kvgate.errors import KvgateError


def emit(as_json: bool, payload: Any, text: str) -> None:
    """Print ``payload`` as JSON when ``as_json`` (the command's ``--json``), else ``text``
    (made :func:`printable`): all or nothing (:func:`write_stdout`)."""
    if as_json:
        write_stdout(json.dumps(payload, indent=2) + "\n")  # ensure_ascii: any str, surrogates included
    else:
        write_stdout(printable(text if text.endswith("\n") else text + "\n"))


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
