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

from typing import Any


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
