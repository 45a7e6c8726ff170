"""The interface every engine package offers (DESIGN.md §8): what kvgate asks an engine
instead of testing its name. Light on purpose: importing it loads none of an engine's rules.

An engine is a package ``kvgate/engines/<name>/`` with the same module names in each
(``flags``, ``pool``, ``budget``, ``log``, ``cache``, ``fit`` ...) and one ``engine.py``
whose ``ENGINE`` object implements :class:`Engine`; :mod:`kvgate.engines.registry` lists it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.geometry.base import Layout


F = TypeVar("F")


def make_flags(cls: type[F], base: Any = None, /, **given: Any) -> F:
    """An engine's flags (its frozen ``…Flags`` dataclass), the one way each engine builds
    them (its ``build_flags``): the fields of ``base`` (a mapping: ``kvgate fit``'s inputs, a
    log's flags, a recorded case; or flags of ``cls`` to change for a what-if), then ``given``
    over them. ``None`` is "not given": the engine's default, or ``base``'s value. Keys of a
    mapping that are no field of ``cls`` are not flags (a log's other keys) and are left out.

    Raises:
        TypeError: a ``given`` name that is no field of ``cls``.
        KvgateError: a value the flags refuse (their ``__post_init__``).
    """
    names = [f.name for f in fields(cls) if f.init]  # type: ignore[arg-type]
    if base is not None and is_dataclass(base) and not isinstance(base, type):
        base = {k: getattr(base, k) for k in names}
    bad = set(given) - set(names)
    if bad:
        raise TypeError(f"{cls.__name__} has no flag {', '.join(sorted(bad))}")
    kw = {k: v for k, v in (base or {}).items() if k in names and v is not None}
    kw.update({k: v for k, v in given.items() if v is not None})
    return cls(**kw)


class Engine(Protocol):
    """One inference engine's rules, as kvgate asks for them.

    Attributes:
        name: kvgate's name of the engine (``--engine``, ``--layout``, records' ``engine``).
        display: the engine's own spelling in sentences (``vLLM``).
        aliases: other spellings accepted on the command line (``llamacpp``).
        flags_title: the start of the title of its flag group in ``--help``.
        log_markers: startup-log substrings that say a log is this engine's.
        pool_line_hint: where its startup log states the KV pool (for "no pool line").
        file_suffixes: model files only this engine loads (``.gguf``).
        layout_flags: the options its layout takes from the command line
            (:func:`kvgate.geometry.layout_from_options`); ``None``: its layout's own
            keyword parameters decide.
        launcher: the engine and the command that starts it (``help engine-flags``).
        pipeline_stages: kvgate models its pipeline-parallel stages (``--pp``).
        pool_per_rank: its logged pool is one rank's (else the whole cache, all layers).
        tier_on_lru_curve: ``kvgate tier`` replays its prefix cache over the LRU curve's
            device pool (:meth:`tier_hits`); else it replays its own server whole
            (:meth:`tier_server`).
        words: its flags in kvgate's sentences (the gate's table and candidates): ``seqs``
            (sequences at once), ``len`` / ``record_len`` (length per sequence), ``quant``
            (``{q}``: a KV dtype), ``kv_dtype_flag``, ``offload``, ``tp`` (``{t}``), and
            ``fp8`` where its spelling of kvgate's fp8 differs.
        releases, oldest_release: the releases whose rules kvgate models and the oldest one,
            each with where (:mod:`kvgate.fit.release`); dist: the installed Python package
            its version is read from; release_is_build: its releases are build numbers.
        fit_lists_term_sources: its ``kvgate fit`` table already gives every non-KV term's
            source (llama.cpp's buffer table), so a what-if lists where each comes from once.
    """

    name: str
    display: str
    aliases: tuple[str, ...]
    flags_title: str
    log_markers: tuple[str, ...]
    pool_line_hint: str
    file_suffixes: tuple[str, ...]
    layout_flags: frozenset[str] | None
    launcher: str
    pipeline_stages: bool
    pool_per_rank: bool
    tier_on_lru_curve: bool
    words: Mapping[str, str]
    fit_lists_term_sources: bool
    releases: tuple[tuple[str, str], ...]
    oldest_release: tuple[str, str]
    dist: str
    release_is_build: bool

    def layout_factory(self) -> Callable[..., Layout]:
        """The geometry layout (``kvgate.geometry.base.Layout``) of its KV pool."""
        ...

    def read_pool(self, lines: Sequence[Any]) -> Any:
        """Its startup log's logical lines (one startup) read into the pool it built
        (:class:`kvgate.engines.pool.EnginePool`)."""
        ...

    def load_model(self, ref: Any) -> Any:
        """The model at ``ref`` as this engine reads it (:class:`kvgate.model.ModelSpec`)."""

    def fit(self, inputs: Any, model: Any, gpu: Any) -> Any:
        """``kvgate fit``'s answer (:class:`kvgate.fit.answer.FitAnswer`) for ``inputs``
        (:class:`kvgate.commands._fit_args.FitInputs`), the loaded model and the GPU."""
        ...

    def whatif(self, pool: Any, lines: Sequence[Any], model: Any, w: Any, *, weights_ref: str | None = None,
               budget: Any = None) -> Any:
        """Its answer (:class:`kvgate.fit.whatif.WhatIfAnswer`) for the settings ``w`` from
        the startup of ``pool`` / ``lines`` (its ``whatif`` module)."""
        ...

    def render_fit(self, answer: Any, *, sources: bool = False) -> str:
        """``kvgate fit``'s text for its answer (:mod:`kvgate.fit.render`); ``sources``: each
        term's source beneath its row (``-v``)."""
        ...

    def slot_words(self, max_seq: int, slots: int) -> tuple[str, str]:
        """One sequence of ``max_seq`` and ``slots`` sequences, in its flags' words."""
        ...

    def run_dtype(self, given: str, config: Mapping[str, Any], gpu_name: str | None) -> tuple[str, str]:
        """``(dtype, how)``: the dtype it runs the model in under ``--dtype given``
        (``dtype.run_dtype`` of its package)."""
        ...

    def kv_format(self, kv_dtype: str | None, model_dtype: str | None) -> str | None:
        """kvgate's KV format of its cache under its KV dtype flag ``kv_dtype`` (``None``: the
        flag's default), the model run in ``model_dtype`` (:meth:`run_dtype`'s answer, or the
        dtype a log states); ``None`` when the default follows a model dtype not known."""
        ...

    def auto_kv_format(self, model: Any, gpu_name: str | None = None) -> str:
        """kvgate's KV format of its default KV cache for ``model`` run under ``--dtype auto``
        on ``gpu_name`` (:meth:`run_dtype` then :meth:`kv_format`): vLLM and SGLang cache in
        the dtype they run the model in, float32 models downcast each its own way."""
        ...

    def flag_help(self) -> Sequence[Any]:
        """Its flags as ``kvgate help engine-flags`` states them
        (:class:`kvgate.engines.flag_help.FlagHelp`, its ``flag_help.py``)."""
        ...

    def check_parallel(self, model: Any, tp: int, pp: int, dcp: int) -> None:
        """Refuse a parallel split the engine refuses at startup (as ``kvgate fit`` does)."""
        ...

    def cache_geometry(self, geo: Any) -> Any:
        """``geo`` (:class:`kvgate.geometry.KVGeometry`) laid out as its prefix cache's pool
        holds tokens, for ``kvgate tier --cache-model`` (``geo`` itself unless it differs)."""
        ...

    def tier_device(self, trace: Any, **pool: Any) -> dict[str, Any]:
        """``kvgate tier`` with no host tier: the device pool's hits under the engine's own
        cache model (the answer's ``device`` keys, ``basis`` included)."""

    def tier_hits(self, trace: Any, device: dict[str, Any], **pool: Any) -> tuple[int, int, int, str]:
        """Its prefix cache replayed without and with its host tier (its ``cache.tier_hits``)."""
        ...

    def tier_server(self, trace: Any, out: dict[str, Any], settings: Any,
                    **pool: Any) -> tuple[int, int, int, int | None, str]:
        """Its server replayed without and with its host cache (its ``cache.tier_server``)."""
        ...


@dataclass(frozen=True)
class EngineBase:
    """The data half of :class:`Engine` and a loader of the engine's own modules."""

    name: str
    display: str
    package: str
    aliases: tuple[str, ...] = ()
    flags_title: str = ""
    log_markers: tuple[str, ...] = ()
    pool_line_hint: str = ""
    file_suffixes: tuple[str, ...] = ()
    layout_flags: frozenset[str] | None = None
    launcher: str = ""
    pipeline_stages: bool = False
    pool_per_rank: bool = True
    tier_on_lru_curve: bool = True
    fit_lists_term_sources: bool = False
    #: the releases whose rules kvgate models, with where (:data:`kvgate.fit.release.MODELLED`)
    releases: tuple[tuple[str, str], ...] = ()
    #: the oldest release modelled, with where (:data:`kvgate.fit.release.OLDEST`)
    oldest_release: tuple[str, str] = ("", "")
    #: the installed Python package its version is read from
    dist: str = ""
    #: its releases are build numbers (``bNNNN``), not versions
    release_is_build: bool = False
    words: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    #: the FitInputs field and key of the engine's tensor parallel size (``None``: no TP)
    tp_option: tuple[str, str] | None = None
    tp_flag: str = ""

    def load_model(self, ref: Any) -> Any:
        """The model at ``ref`` as this engine reads it (:func:`kvgate.model.load_model`); a
        ``.gguf``'s metadata also under transformers' names, as vLLM and SGLang read a GGUF
        through transformers (:func:`kvgate.model.hf.with_transformers_gguf_names`)."""
        import dataclasses  # noqa: PLC0415

        from kvgate.model import load_model  # noqa: PLC0415
        from kvgate.model.hf import with_transformers_gguf_names  # noqa: PLC0415

        model = load_model(ref)
        named = with_transformers_gguf_names(model.config)
        return model if named is model.config else dataclasses.replace(model, config=named)

    def module(self, role: str) -> ModuleType:
        """The engine's module ``role`` (``pool``, ``log``, ``fit`` ...), imported on first use."""
        return importlib.import_module(f"{self.package}.{role}")

    def check_parallel(self, model: Any, tp: int, pp: int, dcp: int) -> None:
        return None

    def run_dtype(self, given: str, config: Mapping[str, Any], gpu_name: str | None) -> tuple[str, str]:
        dtype: tuple[str, str] = self.module("dtype").run_dtype(given, config, gpu_name)
        return dtype

    def flag_help(self) -> Sequence[Any]:
        flags: Sequence[Any] = self.module("flag_help").FLAGS
        return flags

    def kv_format(self, kv_dtype: str | None, model_dtype: str | None) -> str | None:
        fmt: str | None = self.module("dtype").kv_format(kv_dtype, model_dtype)
        return fmt

    def auto_kv_format(self, model: Any, gpu_name: str | None = None) -> str:
        from kvgate.fit.dtype import model_config  # noqa: PLC0415

        return str(self.kv_format(None, self.run_dtype("auto", model_config(model), gpu_name)[0]))

    def whatif(self, pool: Any, lines: Sequence[Any], model: Any, w: Any, *, weights_ref: str | None = None,
               budget: Any = None) -> Any:
        return self.module("whatif").whatif(pool, lines, model, w, weights_ref=weights_ref, budget=budget)

    def cache_geometry(self, geo: Any) -> Any:
        return geo

    def tier_device(self, trace: Any, **pool: Any) -> dict[str, Any]:
        device: dict[str, Any] = self.module("cache").tier_device(trace, **pool)
        return device

    def tier_hits(self, trace: Any, device: dict[str, Any], **pool: Any) -> tuple[int, int, int, str]:
        hits: tuple[int, int, int, str] = self.module("cache").tier_hits(trace, device, **pool)
        return hits

    def tier_server(self, trace: Any, out: dict[str, Any], settings: Any,
                    **pool: Any) -> tuple[int, int, int, int | None, str]:
        hits: tuple[int, int, int, int | None, str] = self.module("cache").tier_server(trace, out, settings, **pool)
        return hits
