"""The engines kvgate answers for, by name: the one place that lists them.

A new engine (TensorRT-LLM, Ollama, MLX) is one package ``kvgate/engines/<name>/`` with an
``engine.py`` whose ``ENGINE`` implements :class:`kvgate.engines.base.Engine`, and one line
in :data:`_HOMES`. Engines load on first use (as transformers' ``CONFIG_MAPPING_NAMES``
maps names to modules), so ``kvgate --help`` imports none of their rules.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvgate.errors import KvgateError

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.engines.base import Engine
    from kvgate.engines.flag_help import FlagTable

#: engine name -> the module holding its ``ENGINE``; the order is the order of every list
_HOMES: dict[str, str] = {
    "vllm": "kvgate.engines.vllm.engine",
    "sglang": "kvgate.engines.sglang.engine",
    "llama.cpp": "kvgate.engines.llamacpp.engine",
}

#: the engine whose rules apply when nothing names one (``kvgate fit`` without engine flags)
DEFAULT_ENGINE = "vllm"

ENGINES: tuple[str, ...] = tuple(_HOMES)


def get_engine(name: str) -> Engine:
    """The engine called ``name`` (or one of its aliases, e.g. ``llamacpp``).

    Raises:
        KvgateError: no such engine (the hint lists them).
    """
    key = canonical_name(name)
    if key is None:
        raise KvgateError(f"unknown engine {name!r}", hint=f"one of: {', '.join(ENGINES)}")
    engine: Engine = importlib.import_module(_HOMES[key]).ENGINE
    return engine


def resolve_dtype(given: str, config: Any, engine: str, gpu_name: str | None) -> tuple[str, str]:
    """``(dtype, how)``: the dtype ``engine`` runs the model in under ``--dtype given``, by the
    engine's own rule (:meth:`kvgate.engines.base.Engine.run_dtype`; ``kvgate.fit.dtype`` has
    what the engines share).

    Raises:
        KvgateError: an unknown engine, a value the engine does not take, or float16 for a model
            vLLM refuses it for (its message quoted).
    """
    return get_engine(engine).run_dtype(given, config, gpu_name)


def canonical_name(name: str) -> str | None:
    """kvgate's name of the engine spelled ``name`` (an alias allowed), else ``None``."""
    if name in _HOMES:
        return name
    for key in _HOMES:
        if name in get_engine(key).aliases:
            return key
    return None


def engines() -> list[Engine]:
    """Every engine, in :data:`ENGINES` order."""
    return [get_engine(n) for n in ENGINES]


def detect_from_log(text: str) -> str | None:
    """The engine with most marker lines in a startup log's ``text``; ``None`` when none has any."""
    counts = {e.name: sum(text.count(m) for m in e.log_markers) for e in engines()}
    best = max(counts, key=lambda e: counts[e])
    return best if counts[best] else None


def detect_from_flags(given: dict[str, list[str]]) -> list[str]:
    """The engines whose own flags were given (``given``: engine name -> its flags set)."""
    return [name for name in ENGINES if given.get(name)]


def detect_from_file(path: str | Path) -> str | None:
    """The engine that alone loads a model file like ``path`` (a GGUF: llama.cpp), else ``None``."""
    suffix = Path(str(path)).suffix.lower()
    return next((e.name for e in engines() if suffix in e.file_suffixes), None)


def engine_of_flag_group(title: str, names: Iterable[str] = ENGINES) -> str | None:
    """The engine whose flag group in ``--help`` is titled ``title``, else ``None``."""
    return next((n for n in names if title.startswith(get_engine(n).flags_title)), None)


def load_model_for(ref: str | Path, layout: str | None) -> Any:
    """The model at ``ref`` (:func:`kvgate.model.load_model`) as the engine named ``layout``
    reads it (:meth:`kvgate.engines.base.EngineBase.load_model`: llama.cpp maps a config the
    way its converter does); another layout (``transformers``, ``None``) reads it plainly."""
    name = canonical_name(layout) if layout else None
    if name is None:
        from kvgate.model import load_model  # noqa: PLC0415

        return load_model(ref)
    return get_engine(name).load_model(ref)


def flag_table(name: str) -> FlagTable:
    """The flags the engine called ``name`` declares (its package's ``flag_table.TABLE``),
    loaded without its rules (``kvgate --help`` and the usage errors stay light)."""
    key = canonical_name(name) if name not in _HOMES else name
    if key is None:
        raise KvgateError(f"unknown engine {name!r}", hint=f"one of: {', '.join(ENGINES)}")
    table: FlagTable = importlib.import_module(_HOMES[key].rpartition(".")[0] + ".flag_table").TABLE
    return table
