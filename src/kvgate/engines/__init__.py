"""Engines that preallocate their KV cache (vLLM, SGLang, llama.cpp): their startup logs
read into a pool with its basis, cross-checked against the model, gated, and watched live.

Modules: ``logtext`` (pasted-log lines, rounding intervals), ``startups`` (one startup of
one ``docker compose`` service out of a log that holds several), ``vllm_log``,
``sglang_log``, ``llamacpp_log`` (one parser per engine), ``pool`` (the logged pool as a
measurement), ``crosscheck`` (the pool recomputed from the model), ``candidates`` (the
gate for a fixed pool), ``metrics`` (Prometheus / ``/slots`` readers), ``loadgen`` (a
bounded loopback load generator sampling those metrics).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.engines.candidates import QUANT_FORMATS, engine_layout, gate_from_engine_log
    from kvgate.engines.crosscheck import crosscheck
    from kvgate.engines.logtext import Logged, LogNumberError, logical_lines
    from kvgate.engines.pool import EngineLogError, EnginePool, detect_engine, read_engine_log
    from kvgate.engines.registry import ENGINES
    from kvgate.engines.startups import StartupError, select_startup

# Each name loads its module on first use: the registry (kvgate.engines.registry) and the
# engine packages are imported without the gate, the schema or pydantic.
_LAZY = {"QUANT_FORMATS": "candidates", "engine_layout": "candidates", "gate_from_engine_log": "candidates",
         "crosscheck": "crosscheck", "Logged": "logtext", "LogNumberError": "logtext", "logical_lines": "logtext",
         "ENGINES": "registry", "EngineLogError": "pool", "EnginePool": "pool", "detect_engine": "pool",
         "read_engine_log": "pool", "StartupError": "startups", "select_startup": "startups"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"kvgate.engines.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Package(types.ModuleType):
    """Importing the module ``kvgate.engines.crosscheck`` sets the package's attribute
    ``crosscheck``; the name stays the function (``from kvgate.engines import crosscheck``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if _LAZY.get(name) == name and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = ["ENGINES", "QUANT_FORMATS", "EngineLogError", "EnginePool", "LogNumberError", "Logged", "StartupError",
           "crosscheck", "detect_engine", "engine_layout", "gate_from_engine_log", "logical_lines", "read_engine_log",
           "select_startup"]
