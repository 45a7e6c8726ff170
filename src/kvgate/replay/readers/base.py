"""What every trace reader shares: :class:`TraceError`, column-name matching, and the
columns a reader hands back (:class:`RawColumns`).

Column names are compared after :func:`norm_column`: lower case, without ``_``, ``-``,
``.`` or white space, so ``Request tokens``, ``request_tokens`` and ``RequestTokens`` are
one name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvgate.errors import KvgateError
from kvgate.guarded import NOT_FOUND_HINT


class TraceError(KvgateError):
    """A trace file or trace parameters cannot be used (missing columns, bad values...)."""


@contextmanager
def trace_file_errors(path: Path) -> Iterator[None]:
    """Turn the errors of reading ``path`` (missing, a directory, unreadable, not UTF-8)
    into one :class:`TraceError` naming the file."""
    try:
        yield
    except FileNotFoundError:
        raise TraceError(f"trace file not found: {path}", hint=NOT_FOUND_HINT) from None
    except IsADirectoryError:
        raise TraceError(f"trace path is a directory, not a file: {path}", hint="give the trace file itself") from None
    except UnicodeDecodeError as exc:  # said as every reader says it, not Python's codec sentence
        raise TraceError(f"trace {path} is not UTF-8 text (byte {exc.start:,})", hint=_TEXT_HINT) from None
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from None


_TEXT_HINT = "a trace is CSV or JSONL text (UTF-8): not a binary or compressed file (gunzip a .gz first)"


def norm_column(name: object) -> str:
    """``"Request tokens"`` → ``"requesttokens"`` (see the module docstring)."""
    return re.sub(r"[\s_\-\.]", "", str(name)).lower()


def pick_column(columns: list[str], candidates: tuple[str, ...]) -> str | None:
    """The first of ``columns`` (as spelled in the file) whose normalized name is the
    earliest in ``candidates``; ``None`` if none matches."""
    normed: dict[str, str] = {}
    for c in columns:
        normed.setdefault(norm_column(c), c)
    for cand in candidates:
        if cand in normed:
            return normed[cand]
    return None


@dataclass
class RawColumns:
    """The three columns of a trace as read, before time units and sorting.

    Attributes:
        prompt: int64 token counts, ≥ 0, one per request in file order.
        output: int64 token counts, ≥ 0.
        time: ``None`` (no time column read), float64 or int64 numbers in the file's own
            unit (not yet converted), or int64 nanoseconds since the epoch (UTC) for
            date-times.
        time_kind: ``"number"``, ``"datetime"`` or ``None``.
        line_of: file line (1-based) of request ``i`` in file order, for messages.
        reader: ``"columnar"`` (pyarrow) or ``"rows"`` (the Python reader).
    """

    prompt: np.ndarray
    output: np.ndarray
    time: np.ndarray | None
    time_kind: str | None
    line_of: Callable[[int], int]
    reader: str
