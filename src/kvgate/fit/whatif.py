"""What if, from a startup log: the engine's own answer (``kvgate fit``'s shape) for another
GPU, utilization, maximum length, tensor parallel size or KV dtype, with the non-KV terms
the log printed carried over as measured values.

The rule stays the engine's (never re-derived here): each engine's ``whatif`` module
(``kvgate/engines/<engine>/whatif.py``, asked through :meth:`Engine.whatif
<kvgate.engines.base.Engine.whatif>`) reruns its own ``kvgate fit`` rule and the KV
geometry of :mod:`kvgate.geometry`; this module holds what they share. What changes is where each non-KV term comes from:

- **carried**: the value the log printed (:mod:`kvgate.fit.logterms`), as the interval its
  decimals leave, when nothing it depends on changed;
- **re-split**: the log's weights per rank × old ranks / new ranks (vLLM and SGLang shard
  every weight over the TP ranks: ``ColumnParallelLinear`` / ``RowParallelLinear`` /
  ``VocabParallelEmbedding``; the replicated norms are below the printing precision);
- **re-estimated**: the calibrated band of :mod:`kvgate.engines.vllm.budget` when what the term
  depends on changed: the activation peak of the profile run when
  ``max_num_batched_tokens``, ``max_num_seqs``, TP or the engine (V0/V1) changed;
  non-torch memory (NCCL) and the CUDA graph pool when TP changed (the graph pool also with
  ``max_num_seqs``);
- **estimated**: the band, because the log did not print the term.

vLLM's KV cache pool is held at the logged "Available KV cache memory" when nothing on its
side of the budget changed (same GPU, utilization, TP/PP and profile run): then another KV
dtype or ``--max-model-len`` changes only the blocks, tokens and concurrency. Otherwise it
is ``total × utilization − terms`` (:mod:`kvgate.engines.vllm.budget`) with the carried terms.
The GPU total is the one the log printed (``total_gpu_memory``, ``Free memory on device
(x/Y GiB)``), the ``--gpu``/``--total`` given, or, when neither, implied by the log:
``(pool + non-KV terms) / utilization`` (said in the notes).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kvgate.engines.logtext import Line
from kvgate.engines.pool import EnginePool
from kvgate.errors import KvgateError
from kvgate.fit.answer import FitAnswer
from kvgate.fit.gpus import Gpu
from kvgate.fit.interval import Interval
from kvgate.fit.release import Release, parse_version, resolve_release
from kvgate.model import ModelSpec
from kvgate.units import GiB


@dataclass(frozen=True)
class WhatIf:
    """The settings asked for instead of the log's (``None`` = the log's).

    Attributes:
        gpu: another GPU (:func:`kvgate.fit.gpus.lookup_gpu` / ``gpu_from_total``).
        utilization: vLLM ``--gpu-memory-utilization`` / SGLang ``--mem-fraction-static``.
        max_model_len: vLLM ``--max-model-len`` / SGLang ``--context-length`` / llama.cpp ``-c``.
        tp: tensor parallel size (``-tp``, ``--tp-size``).
        kv_cache_dtype: vLLM / SGLang ``--kv-cache-dtype``; llama.cpp ``-ctk``.
        cache_type_v: llama.cpp ``-ctv`` (default: the log's V type; ``-ctk`` alone changes
            only K, as llama.cpp's ``-ctk`` does: ``common/arg.cpp`` sets ``cache_type_k`` only).
        parallel: llama.cpp ``-np``.
        max_num_seqs: vLLM ``--max-num-seqs`` / SGLang ``--max-running-requests`` (the
            sequences the answer judges).
        flash_attn: llama.cpp ``-fa`` on/off/auto.
        n_gpu_layers: llama.cpp ``-ngl``.
        release: the engine release when the log does not print it.
    """

    gpu: Gpu | None = None
    utilization: float | None = None
    max_model_len: int | None = None
    tp: int | None = None
    kv_cache_dtype: str | None = None
    cache_type_v: str | None = None
    parallel: int | None = None
    max_num_seqs: int | None = None
    flash_attn: str | None = None
    n_gpu_layers: int | None = None
    release: str | None = None

    def asked(self) -> bool:
        """True when any setting differs from the log's (a what-if to answer)."""
        return any(v is not None for k, v in vars(self).items() if k != "release")


@dataclass
class CarriedTerm:
    """Where one non-KV term of the what-if answer comes from."""

    name: str
    how: str  # carried / re-split / re-estimated / estimated / held
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "how": self.how, "detail": self.detail}


@dataclass
class WhatIfAnswer:
    """A :class:`FitAnswer` for the what-if settings, with what changed from the log and
    where every non-KV term comes from."""

    answer: FitAnswer
    changes: list[str]
    carried: list[CarriedTerm]
    log: dict[str, Any] = field(default_factory=dict)
    contradicts_log: list[str] = field(default_factory=list)  # the log's own settings, and its pool outside

    def to_dict(self) -> dict[str, Any]:
        """``kvgate fit``'s payload (schema ``kvgate.fit/1``) plus ``changes`` (from the log's
        settings), ``carried_terms`` (each ``{name, how, detail}``, ``how`` one of carried /
        re-split / re-estimated / estimated / held / recomputed) and ``from_log`` (what the
        log said)."""
        d = self.answer.to_dict()
        d.update(changes=list(self.changes), carried_terms=[c.to_dict() for c in self.carried], from_log=self.log)
        if self.contradicts_log:
            d["contradicts_log"] = list(self.contradicts_log)
        return d


def whatif_from_log(pool: EnginePool, lines: list[Line], model: ModelSpec, w: WhatIf, *,
                    weights_ref: str | None = None, budget: Interval | None = None) -> WhatIfAnswer:
    """The engine's answer for the settings of ``w`` from the startup of ``pool`` / ``lines``.

    Args:
        pool: the log's pool (:func:`kvgate.engines.read_engine_log`).
        lines: that startup's logical lines (for the non-KV terms).
        model: the served model.
        w: the settings asked for.
        weights_ref: the model reference, for weights the log did not print.
        budget: vLLM: the KV budget the log's pool implies when it prints no bytes
            (:func:`kvgate.engines.crosscheck.crosscheck`'s ``expected`` ``budget_low`` …
            ``budget_high``: ``num_blocks`` × bytes per block up to one block more, as
            vLLM's ``kv_cache_utils`` floors the budget to whole blocks).

    Raises:
        KvgateError: a change the log cannot answer (e.g. SGLang or llama.cpp without a GPU
            total), bad flags, or the engine's own refusals (a TP that does not divide).
    """
    from kvgate.engines.registry import get_engine  # noqa: PLC0415

    answer: WhatIfAnswer = get_engine(pool.engine).whatif(pool, lines, model, w, weights_ref=weights_ref,
                                                          budget=budget)
    return answer


def log_release(engine: str, pool: EnginePool, given: str | None, default: Release | None = None) -> Release:
    """The engine release of the what-if: the logged one, else the one given, else
    ``default`` (an engine's own rule, e.g. vLLM's V0), else the newest modelled."""
    if pool.version:
        return Release(engine, pool.version, parse_version(pool.version), "logged")
    if given:
        return resolve_release(engine, given)
    if default is not None:
        return default
    r = resolve_release(engine, None)
    return replace(r, how=r.how + "; the log does not print its release")


def scaled(v: Interval, num: int, den: int) -> Interval:
    return Interval(v.low * num // den, -(-v.high * num // den))


def model_weights(ref: str | None, what: str) -> tuple[int, bool, str]:
    """Whole-checkpoint bytes from ``ref`` (exact from files, else estimated)."""
    from kvgate.model.weights import weight_bytes  # noqa: PLC0415

    if not ref:
        raise KvgateError(f"the log does not print the {what} and no model files are at hand to read them from",
                          hint="pass --model with the model directory or .gguf file")
    wb = weight_bytes(ref)
    return wb.bytes, wb.exact, (wb.source if wb.exact else f"ESTIMATE from {ref}'s config (parameters × dtype)")


def gpu_change(log_gpu: Gpu | None, new: Gpu) -> str:
    """The what-if's GPU change, worded alike for every engine: the log's GPU is never named
    by a startup log, so it is said how its total is known (printed, inferred, or not at
    all); the new one by name, or ``--total`` with its bytes."""
    def gib(v: Interval) -> str:
        lo, hi = f"{v.low / GiB:.2f}", f"{v.high / GiB:.2f}"
        return f"{lo} GiB" if lo == hi else f"{lo} … {hi} GiB"

    if log_gpu is None or log_gpu is new:
        was = "the log's GPU (not named; total not printed)"
    elif "implied" in log_gpu.name:
        was = f"the log's GPU (not named; total inferred as {gib(log_gpu.cuda_total)})"
    else:
        was = f"the log's GPU (not named; CUDA total {gib(log_gpu.cuda_total)} printed)"
    now = (f"--total {new.nvml_total_bytes:,} B (CUDA total {gib(new.cuda_total)})" if new.name == "given total"
           else new.name)
    return f"GPU: {was} → {now}"


def log_kv_shown(pool: EnginePool) -> str | None:
    """The log's KV cache dtype as resolved, for the "from" side of a ``--kv-cache-dtype`` change.

    ``None`` when the log states its cache dtype (or its model dtype, which ``auto`` follows:
    :func:`kvgate.engines.pool.kv_format_name`): the flag's own value is shown then. When the log
    states neither, the format the command line gave for the log (``--kv-format``, filled in by
    :func:`kvgate.engines.report.apply_overrides`) is the log's value, not ``auto``.
    """
    if pool.kv_format is None or pool.flags.get("kv_cache_dtype") is not None or pool.flags.get("dtype") is not None:
        return None
    given = f"kv_format {pool.kv_format} from --kv-format (not in the log)" in pool.notes
    how = "given with --kv-format" if given else "as given for the log"
    return f"{pool.kv_format} ({how})"


def log_kv_dtype(pool: EnginePool, model: ModelSpec) -> str:
    """The log's KV dtype flag as a what-if's starting point: the logged flag, else the KV
    format the log part resolved (``--kv-format`` or an engine spelling taken as the log's
    own, :func:`kvgate.commands._engine_log.resolve_log_settings`) in the engine's spelling
    when it is not what the engine caches in by default, else ``auto``. The default is
    the engine's own (:meth:`kvgate.engines.base.Engine.kv_format`): the dtype the log says
    the model ran in, else the engine's ``--dtype auto`` for the model (a float32 model:
    vLLM's bf16, SGLang's fp16)."""
    from kvgate.engines.registry import get_engine  # noqa: PLC0415

    if pool.flags.get("kv_cache_dtype"):
        return str(pool.flags["kv_cache_dtype"])
    if pool.kv_format is None:
        return "auto"
    engine = get_engine(pool.engine)
    try:
        fmt = engine.kv_format(str(pool.kv_format), None)
    except KvgateError:  # a kvgate-only name, or one the engine does not take: its default
        return "auto"
    try:
        default = engine.kv_format(None, pool.flags.get("dtype")) or engine.auto_kv_format(model)
    except KvgateError:  # a logged dtype kvgate has no format for
        default = engine.auto_kv_format(model)
    return "auto" if fmt == default else str(fmt)


def shown(v: Any) -> str:
    """A log's setting for the changes list (``None``: not logged, the default applies)."""
    return "not logged (default)" if v is None else str(v)


def need_gpu(w: WhatIf, engine: str) -> Gpu:
    if w.gpu is None:
        raise KvgateError(f"the {engine} log does not print its GPU's total memory, which its rule needs",
                          hint="name the card with --gpu NAME or --total BYTES (the card the answer is for)")
    return w.gpu


def render_whatif(wa: WhatIfAnswer, *, sources: bool = False) -> str:
    """``kvgate fit``'s text for the what-if, headed by the changes and followed by where
    each non-KV term comes from (``sources``: also beneath each row of the table)."""
    from kvgate.fit.render import render_text  # noqa: PLC0415

    head = ["what if (from the log): " + ("; ".join(wa.changes) if wa.changes else "the log's own settings")]
    head += [f"WARNING: {ln}" for ln in wa.contradicts_log]
    from kvgate.engines.registry import get_engine  # noqa: PLC0415

    if get_engine(wa.answer.engine).fit_lists_term_sources:  # its table lists every term's source already: once
        tail = ["", "non-KV terms, from the log or not: "
                + "; ".join(f"{c.name.split(' (')[0]} {c.how}" + (f" ({c.detail})" if c.how != "estimated" else "")
                            for c in wa.carried)]
    else:
        tail = ["", "non-KV terms, from the log or not:"]
        tail += [f"  {c.name:<32} {c.how:<13} {c.detail}" for c in wa.carried]
    return "\n".join(head + [render_text(wa.answer, sources=sources)] + tail)
