"""kvgate's error type and its one table of exit codes.

Every user-facing failure is a :class:`KvgateError`: the CLI prints ``ERROR: <message>``
(and ``HINT: <hint>`` when there is one) and exits with the error's ``exit_code``
(:data:`EXIT_INPUT`, 2, unless a subclass says otherwise); library callers catch
``KvgateError``. Nothing is written when one is raised before an output file is
complete (see :mod:`kvgate.atomicio`).

Exit codes (the README and ``docs/CONVENTIONS.md`` show this same table; every command
returns one of these constants, never a bare number):

====  ====================  ==========================================================
code  name                  meaning
====  ====================  ==========================================================
0     EXIT_OK               done; a verdict was reached (whatever it says), a recheck
                            reproduced every record unchanged
1     EXIT_INTERNAL         an unexpected error: a bug in kvgate (please report it)
2     EXIT_INPUT            usage or input error (bad option, unreadable file, a record
                            or config that does not validate); nothing was decided
3     EXIT_DIFFERENT_BASIS  recheck: the new measurement is on a different basis
                            (device, memory, driver, CUDA, CPU): re-measure
4     EXIT_CHANGED          recheck: a verdict or a recomputed figure (sensitivity,
                            boundaries, geometry) differs, or the record's inputs no
                            longer match its digest
5     EXIT_NO_VERDICT       the measured workload failed (non-zero exit) or was killed
                            (its own code, 128+N, is in the measurement), or the file
                            says it failed: no verdict from partial data; the
                            measurement is still saved
127   EXIT_NOT_FOUND        the workload command was not found (as a shell says it)
128+N exit_signal(N)        kvgate itself was stopped by signal N (130 Ctrl-C, 129
                            SIGHUP, 143 SIGTERM; 137: kvgate killed); what was
                            measured is saved
====  ====================  ==========================================================

``recheck`` over several records returns the most urgent code of all files, in the
order 2 (a file could not be read) > 3 > 4 > 0: see :func:`worst_exit`.
"""

from __future__ import annotations

import signal as _signal

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INPUT = 2
EXIT_DIFFERENT_BASIS = 3
EXIT_CHANGED = 4
EXIT_NO_VERDICT = 5
EXIT_NOT_FOUND = 127
EXIT_SIGNAL_BASE = 128

#: (code, name, meaning) rows, the source of the README / CONVENTIONS table.
EXIT_CODES: tuple[tuple[str, str, str], ...] = (
    ("0", "EXIT_OK", "done; a verdict was reached (whatever it says); recheck: every record reproduced unchanged"),
    ("1", "EXIT_INTERNAL", "an unexpected error: a bug in kvgate (please report it with the traceback)"),
    ("2", "EXIT_INPUT", "usage or input error (bad option, unreadable file, invalid record/config); nothing decided"),
    ("3", "EXIT_DIFFERENT_BASIS", "recheck: new measurement on a different basis (device, memory, driver, CUDA, CPU): re-measure"),
    ("4", "EXIT_CHANGED", "recheck: a verdict or recomputed figure changed, or the inputs no longer match the digest; import-log: the cross-check differs"),
    ("5", "EXIT_NO_VERDICT", "the measured workload failed or was killed (its own exit code, 128+N for signal N, is in the measurement and the output, never kvgate's), or the measurement file says it failed: no verdict from partial data (measurement still saved)"),
    ("127", "EXIT_NOT_FOUND", "the workload command was not found"),
    ("128+N", "exit_signal(N)", "kvgate itself was stopped by signal N: 129 SIGHUP, 130 Ctrl-C, 143 SIGTERM (what was measured is saved); 137 is kvgate killed (SIGKILL), a killed workload is 5"),
)

# Most urgent first: what a directory recheck returns when files disagree.
_URGENCY = (EXIT_INPUT, EXIT_DIFFERENT_BASIS, EXIT_CHANGED, EXIT_OK)


def exit_signal(signum: int | _signal.Signals) -> int:
    """Exit code for "stopped by signal ``signum``": 128 + N, as a shell reports it.

    >>> exit_signal(_signal.SIGINT)
    130
    """
    return EXIT_SIGNAL_BASE + int(signum)


def worst_exit(codes: list[int]) -> int:
    """The most urgent of several exit codes (2 > 3 > 4 > 0; others rank first, in order).

    >>> worst_exit([0, 4, 3])
    3
    >>> worst_exit([])
    0
    """
    for code in codes:
        if code not in _URGENCY:
            return code
    for code in _URGENCY:
        if code in codes:
            return code
    return EXIT_OK


class KvgateError(Exception):
    """A clear, one-line failure with an optional hint for the user.

    Attributes:
        message: what is wrong, naming the field, file or value.
        hint: what the user can do about it, or ``None``.
        exit_code: the CLI's exit status for this error (:data:`EXIT_INPUT` by default).
    """

    exit_code = EXIT_INPUT

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class GateError(KvgateError):
    """Inconsistent gate inputs (negative slots, margin outside [0, 1), a concurrency fit
    without two different levels, ...): raised by :mod:`kvgate.gate.verdict` and
    :mod:`kvgate.gate.fit`."""
