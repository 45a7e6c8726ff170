"""KV-cache geometry: bytes per position, per slot and per block, for layer kind × KV
format × tensor parallelism, under each engine's layout.

Modules: ``formats`` (KV formats), ``specs`` (one spec type per layer kind, each owning
its bytes; the TP split), ``base`` (the Layout interface), ``core`` (:class:`KVGeometry`),
one module per engine layout, and ``vllm_pool`` (vLLM's pool report):

=============  ==========================================  ==================================
``--layout``   rule                                        engine source it comes from
=============  ==========================================  ==================================
contiguous     max_seq positions per slot, sliding          transformers ``cache_utils.py``
               min(W, L)                                    (``StaticLayer``,
                                                            ``StaticSlidingWindowLayer``)
vllm           paged blocks of B tokens; sliding            ``vllm/v1/kv_cache_interface.py``,
               ceil(min(W−1+max_num_batched_tokens, L)/B)+1 ``vllm/v1/core/kv_cache_utils.py``,
               blocks; Mamba page padded to attention page  ``vllm/platforms/interface.py``
llama.cpp      n_ctx padded to 256, per-sequence streams    ``src/llama-context.cpp``,
               or one unified cache, iSWA window rule,      ``src/llama-kv-cache-iswa.cpp``,
               recurrent R/S state in f32                   ``src/llama-memory-recurrent.cpp``
sglang         every token in every layer, whole pages;     ``python/sglang/srt/mem_cache/``
               DSA rows + indexer keys (engines/sglang/pool.py) ``memory_pool.py`` (v0.5.9)
=============  ==========================================  ==================================
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kvgate.geometry.base import Layout
from kvgate.geometry.contiguous import Contiguous
from kvgate.geometry.core import KVGeometry
from kvgate.geometry.formats import FORMATS, FormatError, KVFormat, get_format
from kvgate.geometry.specs import GeometryError, LayerKind, kv_heads_per_rank, spec_of

__all__ = [
    "FORMATS", "LAYOUTS", "VLLM", "Contiguous", "FormatError", "GeometryError", "KVFormat", "KVGeometry", "LayerKind",
    "Layout", "LlamaCpp", "get_format", "get_layout", "kv_heads_per_rank", "layout_from_options", "layout_options", "spec_of",
    "vllm_kv_cache_report",
]

def __getattr__(name: str) -> Any:
    """The engines' layouts (``VLLM``, ``LlamaCpp``, ``SGLang``) and vLLM's pool report,
    kept importable from here; they live in their engine packages and load on first use
    (:mod:`kvgate.engines.registry`)."""
    from kvgate.engines.registry import engines  # noqa: PLC0415

    for engine in engines():
        factory = engine.layout_factory()
        if getattr(factory, "__name__", None) == name:
            return factory
        pool_report = getattr(engine, "pool_report", None)
        if name == "vllm_kv_cache_report" and pool_report is not None:
            return pool_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Layouts(Mapping[str, Callable[..., Layout]]):
    """name -> factory(**options) -> Layout: contiguous (transformers') and each engine's
    (:mod:`kvgate.engines.registry`, loaded on first use)."""

    def _names(self) -> list[str]:
        from kvgate.engines.registry import ENGINES  # noqa: PLC0415

        return ["contiguous", *ENGINES]

    def __getitem__(self, name: str) -> Callable[..., Layout]:
        from kvgate.engines.registry import get_engine  # noqa: PLC0415

        if name == "contiguous":
            return Contiguous
        if name not in self._names():
            raise KeyError(name)
        return get_engine(name).layout_factory()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


# name -> factory(**options) -> Layout
LAYOUTS: Mapping[str, Callable[..., Layout]] = _Layouts()


def layout_options(name: str) -> set[str]:
    """The option names the layout ``name`` takes: its factory's keyword parameters
    (the dataclass fields set at construction).

    Raises:
        GeometryError: unknown layout name.
    """
    if name not in LAYOUTS:
        raise GeometryError(f"unknown layout {name!r}", hint=f"one of: {', '.join(LAYOUTS)}")
    params = inspect.signature(LAYOUTS[name]).parameters.values()
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def get_layout(name: str = "contiguous", **options: Any) -> Layout:
    """The layout called ``name`` built with ``options`` (e.g. ``block_size=16``).

    Raises:
        GeometryError: unknown layout name, or an option it does not take.
    """
    if name not in LAYOUTS:
        raise GeometryError(f"unknown layout {name!r}", hint=f"one of: {', '.join(LAYOUTS)}")
    takes = layout_options(name)
    bad = sorted(set(options) - takes)
    if bad:
        raise GeometryError(f"layout {name!r} does not take the option{'s' if len(bad) > 1 else ''} "
                            f"{', '.join(map(str, bad))}",
                            hint=f"it takes: {', '.join(sorted(takes)) or 'no options'}")
    try:
        return LAYOUTS[name](**options)
    except TypeError as exc:
        raise GeometryError(f"bad option for layout {name!r}: {exc}") from exc


def layout_from_options(name: str | None = "contiguous", **options: Any) -> Layout:
    """Build a layout from CLI-style options; ``None`` means "the engine's default".

    Options that do not apply to the chosen layout are an error (never silently dropped):
    ``block_size``/``max_num_batched_tokens``/``disable_hybrid_kv_cache_manager`` are
    vLLM's, ``n_seq``/``unified``/``swa_full``/``n_ubatch`` llama.cpp's, ``sliding_full``
    contiguous's (vLLM's ``disable_hybrid_kv_cache_manager`` and llama.cpp's
    ``swa_full`` are the engines' own spellings of it).

    Raises:
        GeometryError: unknown layout, or an option the layout does not take.
    """
    name = name or "contiguous"
    given = {k: v for k, v in options.items() if v is not None}
    if name == "contiguous":
        accepted: frozenset[str] | None = frozenset({"sliding_full"})
    elif name in LAYOUTS:
        from kvgate.engines.registry import get_engine  # noqa: PLC0415

        accepted = get_engine(name).layout_flags  # None: the layout's own keyword options decide
    else:
        accepted = None
    if accepted is not None:
        bad = sorted(set(given) - accepted)
        if bad:
            raise GeometryError(
                f"layout {name!r} does not take {', '.join('--' + b.replace('_', '-') for b in bad)}",
                hint=f"it takes: {', '.join(sorted(accepted)) or 'no options'}",
            )
    return get_layout(name, **given)
