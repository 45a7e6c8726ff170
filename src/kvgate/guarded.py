"""One guarded reader for JSON and numbers from files, replies and command lines.

Python's own parsers fail on hostile input with exceptions that are not
:class:`~kvgate.errors.KvgateError`, so a caller that forgets one prints a traceback
(exit 1): ``json.loads`` recurses (``RecursionError`` on 100,000 nested ``[``), ``int()``
refuses more than 4,300 digits (``ValueError``, ``sys.get_int_max_str_digits``), JSON's
``1e999`` silently becomes ``inf``, and a float of ``1e19`` overflows numpy's int64 later.
Every JSON document and every number kvgate reads from outside goes through here:

- :func:`loads_json`: a JSON document (depth, digits, NaN/Infinity, UTF-8 checked);
- :func:`parse_int` / :func:`parse_float`: one number from text or from parsed JSON,
  with bounds, never ``inf``/``nan`` unless asked;
- :func:`check_regular` / :func:`open_regular` / :func:`read_regular`: files, only
  regular ones (a FIFO, ``/dev/zero`` or a device refused before reading), with a cap.

All raise :class:`KvgateError` naming ``what`` (the field) and ``where`` (file, line).
"""

from __future__ import annotations

import json
import math
import os
import stat
from typing import Any, BinaryIO

from kvgate.errors import KvgateError
from kvgate.units import fmt_human

#: Deepest nesting accepted in a JSON input. kvgate's own files nest 6 levels, HF configs
#: about 4; a config nested 100,000 deep is refused here instead of recursing later.
MAX_JSON_DEPTH = 64

#: Longest digit string read as a number: Python's ``int()`` limit is 4,300 digits; a
#: byte count or token count of more than 40 digits is not a measurement of anything.
MAX_NUMBER_CHARS = 400

#: Largest integer kvgate accepts where numpy arrays hold it (int64: 2**63 − 1).
INT64_MAX = 2**63 - 1


def _where(where: str) -> str:
    return f" {where}" if where else ""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"{text[:40]} is out of range for a number")
    return v


#: the hints of the file errors every reader shares (the house rule: every ERROR has a HINT)
NOT_FOUND_HINT = "check the path: a relative one starts at the current directory"
NOT_TEXT_HINT = "kvgate reads it as UTF-8 text: not a binary, compressed or UTF-16 file"
NOT_JSON_HINT = "the JSON ends early or is malformed at that place: fix it, or fetch the file again"


def loads_json(text: str | bytes, *, what: str = "JSON", where: str = "", allow_nan: bool = False) -> Any:
    """Parse one JSON document with errors that are :class:`KvgateError`, never a traceback.

    Refuses (naming ``what`` and ``where``): malformed JSON (line and column), nesting
    deeper than :data:`MAX_JSON_DEPTH` (Python's parser recurses), an integer of more
    than 4,300 digits (Python's int-string limit), NaN/Infinity and numbers that overflow
    to infinity (``1e999``) unless ``allow_nan``, and bytes that are not UTF-8.

    Raises:
        KvgateError: any of the above.
    """
    src = _where(where)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise KvgateError(f"{what}{src} is not UTF-8 text (byte {exc.start:,})", hint=NOT_TEXT_HINT) from exc
    _check_depth_text(text, what, src)
    try:
        if allow_nan:
            obj = json.loads(text)
        else:
            obj = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise KvgateError(f"{what}{src} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                          hint=NOT_JSON_HINT) from exc
    except RecursionError as exc:
        raise KvgateError(f"{what}{src} is nested too deeply (more than {MAX_JSON_DEPTH} levels)") from exc
    except (ValueError, OverflowError) as exc:  # int-string conversion limit, NaN / inf refusal
        msg = str(exc)
        if "digits" in msg:
            msg = "a number has more than 4,300 digits"
        raise KvgateError(f"{what}{src} is not usable JSON: {msg}") from exc
    if json_depth(obj, MAX_JSON_DEPTH + 1) > MAX_JSON_DEPTH:
        raise KvgateError(f"{what}{src} is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    return obj


def _check_depth_text(text: str, what: str, src: str) -> None:
    """Refuse nesting deeper than :data:`MAX_JSON_DEPTH` before parsing (the C parser
    recurses once per level; a deep enough input can exhaust the C stack). Brackets inside
    strings are counted too, so this is an upper bound: only when it trips is the text
    scanned exactly (:func:`_depth_exact`)."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return
    if _depth_exact(text) > MAX_JSON_DEPTH:
        raise KvgateError(f"{what}{src} is nested too deeply (more than {MAX_JSON_DEPTH} levels)")


def _depth_exact(text: str) -> int:
    """Deepest bracket nesting of JSON text outside strings (no recursion)."""
    depth = deepest = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_JSON_DEPTH:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


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


def parse_int(value: Any, *, what: str, where: str = "", minimum: int | None = None,
              maximum: int | None = INT64_MAX) -> int:
    """One integer from text (``"8192"``, ``"8e3"`` when whole) or parsed JSON
    (an ``int``, or a whole finite ``float``); ``bool`` is refused.

    Raises:
        KvgateError: not a number, more than :data:`MAX_NUMBER_CHARS` characters, not a
            whole number, not finite, or outside ``[minimum, maximum]`` (naming ``what``).
    """
    src = _where(where)
    if isinstance(value, bool) or value is None:
        raise KvgateError(f"{what}{src} must be an integer, got {value!r}")
    if isinstance(value, int):
        v = value
    else:
        f = parse_float(value, what=what, where=where)
        if not f.is_integer():
            raise KvgateError(f"{what}{src} must be a whole number, got {_show(value)}")
        v = int(f)
        if isinstance(value, str) and "e" not in value.lower() and "." not in value:
            v = int(value.strip().replace("_", ""))  # exact for long digit strings
    if minimum is not None and v < minimum:
        raise KvgateError(f"{what}{src} must be at least {minimum:,}, got {_show(value)}")
    if maximum is not None and v > maximum:
        raise KvgateError(f"{what}{src} must be at most {maximum:,}, got {_show(value)}")
    return v


def parse_float(value: Any, *, what: str, where: str = "", minimum: float | None = None,
                maximum: float | None = None, allow_nonfinite: bool = False) -> float:
    """One real number from text or parsed JSON; ``inf``/``nan`` refused unless
    ``allow_nonfinite``; ``bool`` refused.

    Raises:
        KvgateError: not a number, too long, not finite, or outside ``[minimum, maximum]``.
    """
    src = _where(where)
    if isinstance(value, bool) or value is None:
        raise KvgateError(f"{what}{src} must be a number, got {value!r}")
    if isinstance(value, int):
        if value.bit_length() > 1024:
            raise KvgateError(f"{what}{src} is out of range for a number")
        v = float(value)
    elif isinstance(value, float):
        v = value
    elif isinstance(value, (str, bytes)):
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        text = text.strip()
        if len(text) > MAX_NUMBER_CHARS:
            raise KvgateError(f"{what}{src} has {len(text):,} characters: not a number kvgate reads")
        try:
            v = float(text)
        except ValueError:
            raise KvgateError(f"{what}{src} is not a number: {_show(text)}") from None
    else:
        raise KvgateError(f"{what}{src} must be a number, got {type(value).__name__}")
    if not allow_nonfinite and not math.isfinite(v):
        raise KvgateError(f"{what}{src} must be a finite number, got {_show(value)}")
    if minimum is not None and not v >= minimum:
        raise KvgateError(f"{what}{src} must be at least {minimum:g}, got {_show(value)}")
    if maximum is not None and not v <= maximum:
        raise KvgateError(f"{what}{src} must be at most {maximum:g}, got {_show(value)}")
    return v


def _show(value: Any) -> str:
    s = value if isinstance(value, str) else repr(value)
    return repr(s[:40] + "…") if len(s) > 40 else (repr(s) if isinstance(value, str) else s)


# -- files: regular ones only, read with a cap ----------------------------------------------

#: Largest config-like JSON file read (config.json, model.safetensors.index.json): published
#: configs are kilobytes, the largest index files (a trillion-parameter checkpoint's
#: ~100,000 tensor names) under 16 MB; a 3 GB "config.json" is refused before it is read
#: instead of taking half a minute and 6 GB of memory to fail.
MAX_CONFIG_BYTES = 64 * 2**20

#: Largest JSON document of kvgate's own (records, measurements) read.
MAX_JSON_FILE_BYTES = 512 * 2**20

#: Largest engine log read (logs are read whole; 100 MB logs read in about 0.5 GiB).
MAX_LOG_BYTES = 1024 * 2**20

_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


def _refuse_kind(mode: int, what: str, path: str | os.PathLike[str]) -> None:
    kind = _KINDS.get(stat.S_IFMT(mode))
    if kind is not None:
        raise KvgateError(f"{what} {os.fsdecode(path)} is {kind}, not a regular file: not read",
                          hint="give the file itself (a FIFO or device would be read forever or block)")


def check_regular(path: str | os.PathLike[str], *, what: str = "file") -> int:
    """The size of ``path`` when it is a regular file (symbolic links followed); refuses a
    FIFO, a device, a socket or a directory before anything opens it (opening a FIFO
    blocks; ``/dev/zero`` never ends).

    Raises:
        KvgateError: missing, unreadable, or not a regular file (naming ``what``).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise KvgateError(f"{what} not found: {os.fsdecode(path)}", hint=NOT_FOUND_HINT) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise KvgateError(f"cannot read {what} {os.fsdecode(path)}: {getattr(exc, 'strerror', None) or exc}") from None
    _refuse_kind(st.st_mode, what, path)
    return st.st_size


def open_regular(path: str | os.PathLike[str], *, what: str = "file") -> BinaryIO:
    """``path`` opened for reading in binary, only when it is a regular file: opened without
    blocking (``O_NONBLOCK``: a FIFO swapped in after a check cannot hang the open), then
    its ``fstat`` checked, so no race between the check and the read.

    Raises:
        KvgateError: missing, unreadable, or not a regular file.
    """
    check_regular(path, what=what)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as exc:
        raise KvgateError(f"cannot read {what} {os.fsdecode(path)}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        _refuse_kind(os.fstat(fd).st_mode, what, path)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_regular(path: str | os.PathLike[str], *, what: str = "file", max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (:func:`open_regular`); a
    larger one is refused before it is read, saying the cap.

    Raises:
        KvgateError: missing, unreadable, not a regular file, or larger than ``max_bytes``.
    """
    with open_regular(path, what=what) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            raise KvgateError(f"{what} {os.fsdecode(path)} is {size:,} bytes, more than the {max_bytes:,} bytes "
                              f"({fmt_human(max_bytes)}) kvgate reads for it: not read",
                              hint="check that this is the right file")
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise KvgateError(f"cannot read {what} {os.fsdecode(path)}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:  # grew while read (a file still being written)
        raise KvgateError(f"{what} {os.fsdecode(path)} is more than {max_bytes:,} bytes: not read")
    return data
