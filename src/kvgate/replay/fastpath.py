"""Whether a replay runs its loops compiled (:mod:`kvgate.replay.compiled`), decided without
importing numba: only for traces of :data:`MIN_REQUESTS` requests or more, where the
compiled loops repay numba's import and the load of its cached machine code (about 0.3 s
of CPU; 4–5 s the very first time, when it compiles). Smaller traces take the numpy path,
whose figures are the same (``tests/test_replay_compiled.py``)."""

from __future__ import annotations

MIN_REQUESTS = 50_000
#: Off: always the numpy path (the tests compare the two).
ENABLED = True


def use(n: int) -> bool:
    """Run compiled for ``n`` requests: enabled, large enough, and numba imports."""
    if not ENABLED or n < MIN_REQUESTS:
        return False
    from kvgate.replay import compiled

    return compiled.HAVE_NUMBA
