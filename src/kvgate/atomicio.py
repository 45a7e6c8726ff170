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
    is left untouched. A ``str`` is written as UTF-8; characters UTF-8 cannot hold (the
    lone surrogates Python uses for the bytes of a non-UTF-8 file name) are written as
    ``\\udcff`` escapes, never a traceback.

    Raises:
        OutputExistsError: ``path`` exists and ``force`` is false.
        KvgateError: the directory is not writable.
    """
    return write_files_atomic([(path, data)], force=force)[0]


def encode_text(data: bytes | str) -> bytes:
    """UTF-8 bytes of ``data``; lone surrogates (undecodable file-name bytes) become
    backslash escapes so the result is always valid UTF-8."""
    return data if isinstance(data, bytes) else data.encode("utf-8", errors="backslashreplace")


def write_files_atomic(items: list[tuple[str | os.PathLike[str], bytes | str]], *,
                       force: bool = False) -> list[Path]:
    """Write several files as one: all of them or none (a record's ``.json`` and ``.md``).

    Every file is encoded, written to a temporary file beside its target and fsync'ed
    before the first rename; a failure before then leaves no target touched. If a later
    rename fails, the targets already renamed in this call are removed again (without
    ``force`` they did not exist before).

    Raises:
        OutputExistsError: a target exists and ``force`` is false (nothing written).
        KvgateError: a directory is not writable (nothing left behind).
    """
    paths = [check_writable(p, force=force) for p, _ in items]
    blobs = [encode_text(d) for _, d in items]
    temps: list[tuple[str, Path]] = []
    done: list[Path] = []
    try:
        for p, blob in zip(paths, blobs):
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
            except (OSError, ValueError) as exc:
                raise KvgateError(f"cannot write {p}: {getattr(exc, 'strerror', None) or exc}") from exc
            temps.append((tmp, p))
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
                fh.flush()
                os.fsync(fh.fileno())
        for tmp, p in temps:
            if not force and p.exists():  # lost a race with another writer
                raise OutputExistsError(f"{p} appeared while writing; not overwriting it", hint="pass --force")
            os.replace(tmp, p)
            done.append(p)
    except BaseException as exc:
        for tmp, _ in temps:
            try:
                os.unlink(tmp)
            except (FileNotFoundError, OSError):
                pass
        if not force:
            for p in done:  # both or neither
                try:
                    p.unlink()
                except OSError:
                    pass
        if isinstance(exc, OSError):
            raise KvgateError(f"cannot write {temps[-1][1] if temps else paths[0]}: {exc.strerror or exc}") from exc
        raise
    return paths


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_text(obj: Any) -> str:
    """``obj`` as kvgate writes JSON: indented, keys in their order, ASCII (any file-name
    character survives as an escape), trailing newline."""
    return json.dumps(obj, indent=2, sort_keys=False) + "\n"


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, force: bool = False) -> Path:
    """Serialize ``obj`` as indented JSON (trailing newline) and write it atomically."""
    return write_atomic(path, write_json_text(obj), force=force)


#: Deepest nesting accepted in a JSON input. kvgate's own files nest 6 levels, HF configs
#: about 4; a config nested 100,000 deep is refused here instead of recursing later.
MAX_JSON_DEPTH = 64


def loads_json(text: str | bytes, *, what: str = "JSON", where: str = "", allow_nan: bool = False) -> Any:
    """Parse JSON with errors that are :class:`KvgateError`, never a traceback.

    Refuses (naming ``what`` and ``where``): malformed JSON (line and column), nesting
    deeper than :data:`MAX_JSON_DEPTH` (Python's parser recurses: 100,000 levels raised
    ``RecursionError``), an integer of more than 4,300 digits (Python's int-string limit
    raised ``ValueError``), NaN/Infinity (not JSON), and bytes that are not UTF-8.

    Raises:
        KvgateError: any of the above.
    """
    src = f" {where}" if where else ""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise KvgateError(f"{what}{src} is not UTF-8 text (byte {exc.start:,})") from exc
    try:
        obj = json.loads(text) if allow_nan else json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise KvgateError(f"{what}{src} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except RecursionError as exc:
        raise KvgateError(f"{what}{src} is nested too deeply (more than {MAX_JSON_DEPTH} levels)") from exc
    except ValueError as exc:  # int-string conversion limit, or our NaN refusal
        msg = str(exc)
        if "digits" in msg:
            msg = "a number has more than 4,300 digits"
        raise KvgateError(f"{what}{src} is not usable JSON: {msg}") from exc
    depth = json_depth(obj, MAX_JSON_DEPTH + 1)
    if depth > MAX_JSON_DEPTH:
        raise KvgateError(f"{what}{src} is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def json_depth(obj: Any, stop: int) -> int:
    """Nesting depth of parsed JSON (a scalar is 0), counted without recursion and
    stopping as soon as it reaches ``stop``."""
    deepest, stack = 0, [(obj, 0)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, (dict, list)):
            d += 1
            if d > deepest:
                deepest = d
                if deepest >= stop:
                    return deepest
            stack.extend((v, d) for v in (o.values() if isinstance(o, dict) else o) if isinstance(v, (dict, list)))
    return deepest


def read_json(path: str | os.PathLike[str], *, what: str = "file", allow_nan: bool = False) -> Any:
    """Read a JSON file with errors that name the file (see :func:`loads_json`).

    Raises:
        KvgateError: missing file, a directory, unreadable, not UTF-8, or JSON that does
            not parse (with line and column), nests too deep or holds a too-long number.
    """
    p = Path(path)
    try:
        if not p.exists():
            raise KvgateError(f"{what} not found: {p}")
        if p.is_dir():
            raise KvgateError(f"{what} is a directory, not a JSON file: {p}")
        raw = p.read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise KvgateError(f"cannot read {what} {p}: {getattr(exc, 'strerror', None) or exc}") from exc
    return loads_json(raw, what=what, where=str(p), allow_nan=allow_nan)
