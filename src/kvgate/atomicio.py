"""Atomic, non-clobbering file output for records, measurements and plots.

Every file kvgate writes goes through :func:`write_atomic`: the bytes go to a temporary
file in the same directory, are flushed and fsync'ed, then renamed over the target
(``os.replace`` is atomic on POSIX within one file system). A reader never sees half a
record, and a crash leaves either the old file or the new one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from kvgate.errors import KvgateError


class OutputExistsError(KvgateError):
    """The target exists and ``force`` was not given."""


def check_writable(path: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Fail early (before any work) if ``path`` exists and ``force`` is false.

    Raises:
        OutputExistsError: the file exists and would be overwritten.
    """
    p = Path(path)
    if p.exists() and not force:
        raise OutputExistsError(f"{p} exists; not overwriting it", hint="pass --force to replace it")
    return p


def write_atomic(path: str | os.PathLike[str], data: bytes | str, *, force: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename).

    Parent directories are created. Without ``force`` an existing file is an error and
    is left untouched.

    Raises:
        OutputExistsError: ``path`` exists and ``force`` is false.
        KvgateError: the directory is not writable.
    """
    p = check_writable(path, force=force)
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as exc:
        raise KvgateError(f"cannot write {p}: {exc.strerror}") from exc
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if not force and p.exists():  # lost a race with another writer
            raise OutputExistsError(f"{p} appeared while writing; not overwriting it", hint="pass --force")
        os.replace(tmp, p)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise KvgateError(f"cannot write {p}: {exc.strerror or exc}") from exc
        raise
    return p


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, force: bool = False) -> Path:
    """Serialize ``obj`` as indented JSON (trailing newline) and write it atomically."""
    return write_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n", force=force)


def read_json(path: str | os.PathLike[str], *, what: str = "file") -> Any:
    """Read a JSON file with errors that name the file.

    Raises:
        KvgateError: missing file, a directory, unreadable, or JSON that does not parse
            (with line and column).
    """
    p = Path(path)
    if not p.exists():
        raise KvgateError(f"{what} not found: {p}")
    if p.is_dir():
        raise KvgateError(f"{what} is a directory, not a JSON file: {p}")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KvgateError(f"cannot read {what} {p}: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise KvgateError(f"{what} {p} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
