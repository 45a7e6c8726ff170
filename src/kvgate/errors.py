"""kvgate's error type: every user-facing failure is a ``KvgateError``.

The CLI prints ``ERROR: <message>`` (and ``HINT: <hint>`` when there is one) and exits
with status 2; library callers catch ``KvgateError``. Nothing is written when one is
raised before an output file is complete (see :mod:`kvgate.atomicio`).
"""

from __future__ import annotations


class KvgateError(Exception):
    """A clear, one-line failure with an optional hint for the user.

    Attributes:
        message: what is wrong, naming the field, file or value.
        hint: what the user can do about it, or ``None``.
        exit_code: the CLI's exit status for this error (2 by default).
    """

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
