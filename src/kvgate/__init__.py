"""kvgate: measure before you build a KV-cache memory optimization.

Library API (no torch anywhere in the core):

- :mod:`kvgate.units`     byte parsing/formatting, IEC vs SI
- :mod:`kvgate.model`     ``ModelSpec`` from config.json / preset
- :mod:`kvgate.geometry`  KV formats x layer kinds -> bytes per token / slot
- :mod:`kvgate.gate.verdict`      verdicts, candidates, flip boundaries (pure functions)
- :mod:`kvgate.gate.record`    decision records (JSON + Markdown), atomic, recheck
- :mod:`kvgate.options`   typed options (engine, gate, measure, replay), built once
- :mod:`kvgate.session`   ``decide_from_options`` / ``GatePlan``: the API ``kvgate gate`` uses
"""

import os as _os
import signal as _signal
import sys as _sys
from typing import Any


def _interrupted_at_start(signum: int, frame: Any) -> None:
    """Ctrl-C while the ``kvgate`` command starts (imports, parser): exit 130, no traceback
    (nothing is written yet). :func:`kvgate.cli.main` puts Python's own handler back before
    the command runs, so a command sees ``KeyboardInterrupt`` as usual."""
    _os.write(2, b"ERROR: interrupted\n")
    _os._exit(130)


# Only when this process is the kvgate command (the console script, or `python -m kvgate`
# while runpy locates it: argv[0] is then "-m"), never for a program importing the library.
if (_sys.argv and (_sys.argv[0] == "-m" or _os.path.basename(_sys.argv[0]) == "kvgate")
        and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler):
    _signal.signal(_signal.SIGINT, _interrupted_at_start)


def __getattr__(name: str) -> Any:
    """``kvgate.__version__`` from the installed package's metadata, read on first use
    (``import kvgate`` stays free of ``importlib.metadata``)."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("kvgate")
        except PackageNotFoundError:  # a source tree that was never installed
            v = "0+unknown"
        globals()["__version__"] = v
        return v
    raise AttributeError(f"module 'kvgate' has no attribute {name!r}")
