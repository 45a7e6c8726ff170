"""What if, from a startup log: the engine's own answer (``kvgate fit``'s shape) for another
GPU, utilization, maximum length, tensor parallel size or KV dtype, with the non-KV terms
the log printed carried over as measured values.

The rule stays the engine's, reused from :mod:`kvgate.fit` (never re-derived here):
:func:`kvgate.engines.vllm.fit.fit_vllm`, :func:`kvgate.engines.sglang.fit.fit_sglang`,
:func:`kvgate.engines.llamacpp.fit.fit_llamacpp`, and the KV geometry of
:mod:`kvgate.geometry`. What changes is where each non-KV term comes from:

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
from fractions import Fraction
from typing import Any

from kvgate.engines.logtext import Line
from kvgate.engines.pool import EnginePool
from kvgate.errors import KvgateError
from kvgate.fit.answer import FitAnswer
from kvgate.fit.gpus import Gpu
from kvgate.fit.interval import Interval, Term, total
from kvgate.fit.logterms import LoggedTerms, llamacpp_logged_terms, vllm_logged_terms
from kvgate.fit.release import Release, parse_version, resolve_release
from kvgate.model import ModelSpec

GiB = 2**30


def _given(**flags: Any) -> dict[str, Any]:
    """The what-if flags that were given (``None``: keep the log's)."""
    return {k: v for k, v in flags.items() if v is not None}


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
    if pool.engine == "vllm":
        return _VllmFromLog(pool, lines, model, w, weights_ref, budget).answer()
    if pool.engine == "sglang":
        return _sglang(pool, model, w, weights_ref)
    return _llamacpp(pool, lines, model, w, weights_ref)


def _release(engine: str, pool: EnginePool, given: str | None, v1: bool | None) -> Release:
    if pool.version:
        return Release(engine, pool.version, parse_version(pool.version), "logged")
    if given:
        return resolve_release(engine, given)
    if engine == "vllm" and v1 is False:
        return Release("vllm", "0.10.0", (0, 10, 0), "the log's engine is V0 and its release is not logged: "
                       "0.10.0 modelled (V0's last rules)")
    r = resolve_release(engine, None)
    return replace(r, how=r.how + "; the log does not print its release")


def _scaled(v: Interval, num: int, den: int) -> Interval:
    return Interval(v.low * num // den, -(-v.high * num // den))


def _model_weights(ref: str | None, what: str) -> tuple[int, bool, str]:
    """Whole-checkpoint bytes from ``ref`` (exact from files, else estimated)."""
    from kvgate.model.weights import weight_bytes  # noqa: PLC0415

    if not ref:
        raise KvgateError(f"the log does not print the {what} and no model files are at hand to read them from",
                          hint="pass --model with the model directory or .gguf file")
    wb = weight_bytes(ref)
    return wb.bytes, wb.exact, (wb.source if wb.exact else f"ESTIMATE from {ref}'s config (parameters × dtype)")


class _VllmFromLog:
    """vLLM's what-if (module docstring)."""

    def __init__(self, pool: EnginePool, lines: list[Line], model: ModelSpec, w: WhatIf,
                 weights_ref: str | None, budget: Interval | None = None) -> None:
        from kvgate.engines.vllm.flags import VllmFlags  # noqa: PLC0415

        self.pool, self.model, self.w = pool, model, w
        self.t: LoggedTerms = vllm_logged_terms(lines, pool.weights)
        self.release = _release("vllm", pool, w.release, self.t.v1)
        fl = pool.flags
        self.notes: list[str] = []
        util = self.t.utilization or (float(fl["gpu_memory_utilization"]) if fl.get("gpu_memory_utilization") else None)
        if util is None:
            from kvgate.engines.vllm.flags import default_utilization  # noqa: PLC0415

            util = default_utilization(self.release)
            self.notes.append(f"the log does not print --gpu-memory-utilization: vLLM's default {util} presumed "
                              f"(vLLM {self.release.text}'s)")
        L = pool.max_model_len or pool.parsed.get("concurrency_len") or model.max_position_embeddings
        self.log_tp, self.log_pp = pool.tp or 1, pool.pp or 1
        if pool.tp is None and w.tp is not None:
            self.notes.append(f"the log does not print its tensor parallel size: TP 1 presumed (its weights per rank "
                              f"are re-split from there to -tp {w.tp})")
        seqs = fl.get("max_num_seqs")
        if seqs is None and w.max_num_seqs is not None and (w.gpu, w.utilization, w.tp) == (None, None, None):
            # the pool is the log's (held); the target's sequences, which the log does not state, are
            # taken as the log's own (RULE_HELP: a silent log takes the engine spelling)
            seqs = w.max_num_seqs
            self.notes.append(f"the log does not print --max-num-seqs: {seqs} (the target) taken as the log's own")
        self.base = VllmFlags(
            gpu_memory_utilization=util, max_model_len=L, max_num_seqs=seqs,
            max_num_batched_tokens=fl.get("max_num_batched_tokens"), tensor_parallel_size=self.log_tp,
            pipeline_parallel_size=self.log_pp, kv_cache_dtype=_log_kv_dtype(pool, model),
            block_size=fl.get("block_size"), use_v1=self.t.v1 if not self.release.at_least(0, 11) else None)
        self.flags = replace(self.base, **_given(
            gpu_memory_utilization=w.utilization, max_model_len=w.max_model_len, tensor_parallel_size=w.tp,
            kv_cache_dtype=w.kv_cache_dtype, max_num_seqs=w.max_num_seqs))
        self.logged_pool = (Interval(pool.pool_bytes.low, pool.pool_bytes.high)
                            if pool.pool_bytes is not None and pool.pool_is_budget else self.t.available_kv)
        self.pool_from_blocks = self.logged_pool is None and budget is not None
        if self.logged_pool is None:
            self.logged_pool = budget
        self.weights_log = self.t.weights
        self.weights_file: tuple[int, bool, str] | None = None
        if self.weights_log is None:
            self.weights_file = _model_weights(weights_ref, "weights (no 'Model loading took' line)")
        self.log_gpu = self._log_gpu()
        self.gpu = w.gpu or self.log_gpu
        self.log_s = self._settings(self.base, self.log_gpu)

    # -- GPU and settings ------------------------------------------------------------
    def _log_gpu(self) -> Gpu:
        if self.t.total is not None:
            return Gpu("the log's GPU", None, self.t.total,  # type: ignore[arg-type]  # NVML total: not printed
                       f"CUDA total printed by the log ({self.t.printed['total']})")
        if self.logged_pool is None or (self.pool_from_blocks and self.w.gpu is not None):
            if self.w.gpu is None:
                raise KvgateError("the log prints neither its GPU's total memory nor its KV pool in bytes",
                                  hint="name the card with --gpu NAME or --total BYTES")
            return self.w.gpu
        # implied by the log: (pool + non-KV terms at the log's settings) / utilization
        u = Fraction(str(self.base.gpu_memory_utilization))
        first = self.logged_pool + self._weights(self.log_tp * self.log_pp)[0]
        guess = Gpu("the log's GPU", None, Interval(int(first.low / u), -(-first.high * u.denominator  # type: ignore[arg-type]
                                                                           // u.numerator)), "")
        s = self._settings(self.base, guess)
        from kvgate.fit.widths import model_widths  # noqa: PLC0415

        terms, _ = self.terms(s, model_widths(self.model.config, s.tensor_parallel_size), log=s)
        budget = self.logged_pool + total(terms)
        cuda = Interval(int(budget.low / u), -(-budget.high * u.denominator // u.numerator))
        if self.w.gpu is None:
            self.notes.append(f"the log does not print its GPU's total memory: taken as (pool + non-KV terms) / "
                              f"{self.base.gpu_memory_utilization} = {cuda.low / GiB:.2f} … {cuda.high / GiB:.2f} GiB "
                              "(give --gpu NAME for the card's own)")
        return Gpu("the log's GPU (total implied by the log)", None, cuda,  # type: ignore[arg-type]
                   "(Available KV cache memory + non-KV terms) / gpu_memory_utilization")

    def _settings(self, flags: Any, gpu: Gpu) -> Any:
        from kvgate.engines.vllm.flags import resolve_vllm_flags  # noqa: PLC0415

        return resolve_vllm_flags(flags, self.release, cuda_total_bytes=gpu.cuda_total.low, gpu_name=gpu.name,
                                  max_position_embeddings=self.model.max_position_embeddings)

    # -- terms ---------------------------------------------------------------------------
    def _weights(self, ranks: int) -> tuple[Interval, CarriedTerm, str]:
        log_ranks = self.log_tp * self.log_pp
        if self.weights_log is not None:
            if ranks == log_ranks:
                return (self.weights_log, CarriedTerm("weights", "carried", f"the log's {self.t.printed['weights']}"),
                        f"carried from the log ({self.t.printed['weights']})")
            v = _scaled(self.weights_log, log_ranks, ranks)
            why = f"the log's {self.t.printed['weights']} on each of {log_ranks} rank(s), re-split over {ranks}"
            return v, CarriedTerm("weights", "re-split", why), why
        from kvgate.engines.vllm.budget import weights_term  # noqa: PLC0415

        assert self.weights_file is not None  # set in __init__ when the log has none
        b, exact, src = self.weights_file
        t = weights_term(b, ranks=ranks, exact=exact, source=src)
        return t.value, CarriedTerm("weights", "estimated", f"not printed by the log: {t.source}"), t.source

    def terms(self, s: Any, w: Any, log: Any = None) -> tuple[list[Term], list[CarriedTerm]]:
        """The non-KV terms at settings ``s`` (the log's settings: ``log``, default the
        resolved log settings) and where each comes from."""
        from kvgate.engines.vllm.budget import activation_term, cuda_graph_term, non_torch_term  # noqa: PLC0415

        ls = log or self.log_s
        out: list[Term] = []
        how: list[CarriedTerm] = []
        wv, wc, wsrc = self._weights(s.tensor_parallel_size * s.pipeline_parallel_size)
        out.append(Term("weights", wv, wsrc))
        how.append(wc)
        same_tp = (s.tensor_parallel_size, s.pipeline_parallel_size) == (ls.tensor_parallel_size,
                                                                         ls.pipeline_parallel_size)
        same_profile = same_tp and s.v1 == ls.v1 and (s.max_num_batched_tokens, s.max_num_seqs) == (
            ls.max_num_batched_tokens, ls.max_num_seqs)
        for name, logged, same, estimate, why in (
            ("activation peak (profile run)", self.t.activation, same_profile, activation_term(s, w),
             "max_num_batched_tokens, max_num_seqs, TP or the engine changed"),
            ("non-torch memory", self.t.non_torch, same_tp, non_torch_term(s, gpu_name=_gpu_name(self)),
             "TP changed (NCCL buffers)"),
        ):
            if logged is not None and same:
                key = "activation" if name.startswith("activation") else "non_torch"
                out.append(Term(name, logged, f"carried from the log ({self.t.printed[key]})"))
                how.append(CarriedTerm(name, "carried", f"the log's {self.t.printed[key]}"))
            else:
                out.append(estimate)
                tag = "re-estimated" if logged is not None else "estimated"
                how.append(CarriedTerm(name, tag, (f"{why}: " if logged is not None else "not printed by the log: ")
                                       + estimate.source))
        g = cuda_graph_term(s)
        if self.t.cuda_graph is not None and not s.enforce_eager and same_tp and s.max_num_seqs == ls.max_num_seqs:
            g = Term("CUDA graph pool", self.t.cuda_graph, f"carried from the log ({self.t.printed['cuda_graph']})",
                     counted=g.counted)
            how.append(CarriedTerm(g.name, "carried", f"the log's {self.t.printed['cuda_graph']}"))
        else:
            tag = "re-estimated" if self.t.cuda_graph is not None else "estimated"
            how.append(CarriedTerm(g.name, tag, ("TP or max_num_seqs changed: " if tag == "re-estimated"
                                                 else "not printed by the log: ") + g.source))
        out.append(g)
        return out, how

    def held(self, s: Any) -> bool:
        """The pool is the logged one: nothing on its side of the budget changed."""
        ls = self.log_s
        return (self.logged_pool is not None and self.w.gpu is None and s.kv_cache_memory_bytes is None
                and s.gpu_memory_utilization == ls.gpu_memory_utilization
                and (s.tensor_parallel_size, s.pipeline_parallel_size, s.v1, s.max_num_batched_tokens,
                     s.max_num_seqs, s.cudagraph_pool_subtracted)
                == (ls.tensor_parallel_size, ls.pipeline_parallel_size, ls.v1, ls.max_num_batched_tokens,
                    ls.max_num_seqs, ls.cudagraph_pool_subtracted))

    def pool_for(self, s: Any, w: Any) -> tuple[list[Term], Interval, Interval]:
        """``(terms, budget, pool)`` at settings ``s`` (:func:`kvgate.engines.vllm.fit.fit_vllm`'s hook)."""
        from kvgate.engines.vllm.budget import requested_memory  # noqa: PLC0415

        terms, _ = self.terms(s, w)
        budget = requested_memory(self.gpu.cuda_total, s.gpu_memory_utilization)
        if self.held(s):
            assert self.logged_pool is not None  # held() checks it
            return terms, budget, self.logged_pool
        return terms, budget, budget - total(terms)

    def answer(self) -> WhatIfAnswer:
        from kvgate.engines.vllm.fit import fit_vllm  # noqa: PLC0415
        from kvgate.fit.widths import model_widths  # noqa: PLC0415

        wv, _, wsrc = self._weights(self.flags.tensor_parallel_size * self.flags.pipeline_parallel_size)
        a = fit_vllm(self.model, Term("weights", wv, wsrc), self.gpu, self.flags, self.release, pool_for=self.pool_for)
        s = self._settings(self.flags, self.gpu)
        _, how = self.terms(s, model_widths(self.model.config, s.tensor_parallel_size))
        lp = self.logged_pool
        if lp is not None and self.held(s):
            what = (f"the log's pool, from its blocks ({lp.low:,} … {lp.high:,} B: its block count up to one block "
                    "more; no GPU total needed)" if self.pool_from_blocks else
                    f"the log's Available KV cache memory ({lp.low / GiB:.2f} … {lp.high / GiB:.2f} GiB)")
            how.append(CarriedTerm("KV cache pool", "held", what + ": same GPU, utilization, TP and profile run"))
        else:
            how.append(CarriedTerm("KV cache pool", "recomputed",
                                   f"{self.gpu.name}: CUDA total × {s.gpu_memory_utilization} − the terms above"))
        a.notes[:0] = self.notes
        changes = _changes_vllm(self.base, self.flags, self.w, self.log_gpu, log_kv=_log_kv_shown(self.pool))
        log = {"engine": "vllm", "release": self.release.text, "gpu": self.log_gpu.to_dict(),
               "terms": self.t.to_dict(),
               "settings": {"gpu_memory_utilization": self.base.gpu_memory_utilization,
                            "max_model_len": self.base.max_model_len, "tensor_parallel_size": self.log_tp,
                            "pipeline_parallel_size": self.log_pp, "kv_cache_dtype": self.base.kv_cache_dtype}}
        return WhatIfAnswer(a, changes, how, log, self.contradiction(a, s))

    def contradiction(self, a: FitAnswer, s: Any) -> list[str]:
        """When the what-if asks the log's own settings (no flag changed; at most the log's
        unnamed GPU named) and the logged pool falls outside the answer's interval: what the
        log says, what was predicted, and the likely cause (a ``--gpu-memory-utilization``
        the log does not print: the one its pool implies, from the terms above)."""
        tokens = self.pool.pool_tokens
        same_gpu = self.w.gpu is None or self.t.total is None
        t_lo, t_hi = (a.tokens or {}).get("low"), (a.tokens or {}).get("high")
        if self.flags != self.base or not same_gpu or tokens is None or t_lo is None or t_hi is None:
            return []
        lo, hi = int(t_lo), int(t_hi)
        if lo <= tokens <= hi:
            return []
        out = [f"the log's own settings, yet its pool ({tokens:,} tokens) is outside the answer's {lo:,} … {hi:,} "
               "tokens: the answer does not rebuild this log"]
        printed_util = self.t.utilization is not None or self.pool.flags.get("gpu_memory_utilization") is not None
        lp = self.logged_pool
        if not printed_util and lp is not None:
            from kvgate.fit.widths import model_widths  # noqa: PLC0415

            terms, _ = self.terms(s, model_widths(self.model.config, s.tensor_parallel_size))
            need = lp + total(terms)
            cuda = self.gpu.cuda_total
            u_lo, u_hi = need.low / cuda.high, need.high / cuda.low
            out.append(f"likely cause: a --gpu-memory-utilization the log does not print (its pool implies "
                       f"{u_lo:.2f} … {u_hi:.2f} on {self.gpu.name}, not the default "
                       f"{self.base.gpu_memory_utilization}); give it to size from the log's own share")
        elif not printed_util:
            out.append("likely cause: a --gpu-memory-utilization the log does not print")
        else:
            out.append("likely cause: another GPU than the one named, or a non-KV term outside kvgate's band")
        return out


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


def _log_kv_shown(pool: EnginePool) -> str | None:
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


def _log_kv_dtype(pool: EnginePool, model: ModelSpec) -> str:
    """The log's ``--kv-cache-dtype`` as the what-if's starting point: the logged flag, else
    the KV format the log part resolved (``--kv-format`` or an engine spelling taken as the
    log's own, :func:`kvgate.commands._engine_log.resolve_log_settings`) when it is not the
    model's dtype, else ``auto`` (vLLM's / SGLang's default)."""
    from kvgate.engines.vllm.fit import kv_format_for  # noqa: PLC0415

    if pool.flags.get("kv_cache_dtype"):
        return str(pool.flags["kv_cache_dtype"])
    if pool.kv_format is None:
        return "auto"
    try:
        fmt = kv_format_for(str(pool.kv_format), model)
    except KvgateError:  # a kvgate-only name: the engine's default
        return "auto"
    return "auto" if fmt == kv_format_for("auto", model) else fmt


def _changes_vllm(base: Any, new: Any, w: WhatIf, log_gpu: Gpu, *, log_kv: str | None = None) -> list[str]:
    out = []
    if w.gpu is not None:
        out.append(gpu_change(log_gpu, w.gpu))
    for flag, k in (("--gpu-memory-utilization", "gpu_memory_utilization"), ("--max-model-len", "max_model_len"),
                    ("--max-num-seqs", "max_num_seqs"), ("-tp", "tensor_parallel_size"),
                    ("--kv-cache-dtype", "kv_cache_dtype")):
        if getattr(base, k) != getattr(new, k):
            was = log_kv if k == "kv_cache_dtype" and log_kv else _shown(getattr(base, k))
            out.append(f"{flag}: {was} → {getattr(new, k)}")
    return out


def _shown(v: Any) -> str:
    """A log's setting for the changes list (``None``: not logged, the default applies)."""
    return "not logged (default)" if v is None else str(v)


def _need_gpu(w: WhatIf, engine: str) -> Gpu:
    if w.gpu is None:
        raise KvgateError(f"the {engine} log does not print its GPU's total memory, which its rule needs",
                          hint="name the card with --gpu NAME or --total BYTES (the card the answer is for)")
    return w.gpu


def _sglang(pool: EnginePool, model: ModelSpec, w: WhatIf, weights_ref: str | None) -> WhatIfAnswer:
    """SGLang: weights carried (re-split by TP), the rest by :func:`kvgate.engines.sglang.fit.fit_sglang`."""
    from kvgate.engines.sglang.fit import fit_sglang  # noqa: PLC0415
    from kvgate.engines.sglang.flags import SglangFlags  # noqa: PLC0415
    from kvgate.engines.vllm.budget import weights_term  # noqa: PLC0415

    gpu = _need_gpu(w, "SGLang")
    fl = pool.flags
    log_tp = pool.tp or 1
    mfs = float(fl["mem_fraction_static"]) if fl.get("mem_fraction_static") else None
    notes = []
    avail = pool.parsed.get("avail_after_weights")
    if mfs is None and pool.pool_bytes is not None and pool.weights is not None and avail is not None:
        # sglang_fit's rule read backwards: KV pool + weights = mem_fraction_static × free at start,
        # free at start = the "avail mem" after loading + the weights' "mem usage"
        free = avail.bytes + pool.weights.bytes
        mfs = round((pool.pool_bytes.bytes + pool.weights.bytes) / free, 3)
        notes.append(f"the log does not print --mem-fraction-static: (KV pool {pool.pool_bytes.bytes / GiB:.2f} GiB + "
                     f"weights {pool.weights.bytes / GiB:.2f} GiB) / free at start {free / GiB:.2f} GiB = {mfs}, "
                     "as the log implies")
    base = SglangFlags(mem_fraction_static=mfs, context_length=pool.max_model_len, tp_size=log_tp,
                       kv_cache_dtype=_log_kv_dtype(pool, model), page_size=int(fl.get("page_size") or 1))
    new = replace(base, **_given(mem_fraction_static=w.utilization, context_length=w.max_model_len, tp_size=w.tp,
                                 kv_cache_dtype=w.kv_cache_dtype, max_running_requests=w.max_num_seqs))
    how: list[CarriedTerm] = []
    if pool.weights is not None:
        v = Interval(pool.weights.low, pool.weights.high)
        if new.tp_size != log_tp:
            v = _scaled(v, log_tp, new.tp_size)
            how.append(CarriedTerm("weights", "re-split", f"the log's mem usage={pool.weights.text} on each of {log_tp} "
                                   f"rank(s), re-split over {new.tp_size}"))
        else:
            how.append(CarriedTerm("weights", "carried", f"the log's mem usage={pool.weights.text}"))
        weights = Term("weights", v, how[-1].detail)
    else:
        b, exact, src = _model_weights(weights_ref, "weights (no 'Load weight end' line)")
        weights = weights_term(b, ranks=new.tp_size, exact=exact, source=src)
        how.append(CarriedTerm("weights", "estimated", f"not printed by the log: {weights.source}"))
    how.append(CarriedTerm("CUDA context and NCCL at start", "estimated",
                           "kvgate.engines.sglang.fit's band (the log's free memory is on the log's GPU)"))
    rel = _release("sglang", pool, w.release, None)
    a = fit_sglang(model, weights, gpu, new, rel)
    if mfs is None and w.utilization is None:
        notes.append("the log does not print --mem-fraction-static: SGLang's default by TP presumed")
    a.notes[:0] = notes
    changes = [gpu_change(None, gpu)]
    for flag, k in (("--mem-fraction-static", "mem_fraction_static"), ("--context-length", "context_length"),
                    ("--max-running-requests", "max_running_requests"), ("--tp-size", "tp_size"),
                    ("--kv-cache-dtype", "kv_cache_dtype")):
        if getattr(base, k) != getattr(new, k):
            was = log_kv if k == "kv_cache_dtype" and (log_kv := _log_kv_shown(pool)) else _shown(getattr(base, k))
            changes.append(f"{flag}: {was} → {getattr(new, k)}")
    return WhatIfAnswer(a, changes, how, {"engine": "sglang", "release": rel.text, "tp": log_tp,
                                          "mem_fraction_static": mfs})


def _llamacpp(pool: EnginePool, lines: list[Line], model: ModelSpec, w: WhatIf, weights_ref: str | None) -> WhatIfAnswer:
    """llama.cpp: the flags the log printed, changed as asked, by
    :func:`kvgate.engines.llamacpp.fit.fit_llamacpp`; weights from the model file, or the log's
    ``CUDA0 model buffer`` when no file is at hand."""
    from kvgate.engines.llamacpp.fit import LlamaCppFlags, fit_llamacpp  # noqa: PLC0415

    if w.tp is not None or w.utilization is not None:
        raise KvgateError("llama.cpp has no tensor parallel size or memory share to change",
                          hint="-c, -np, -ctk/-ctv and --gpu/--total are its what-ifs")
    gpu = _need_gpu(w, "llama.cpp")
    fl = pool.flags
    t = llamacpp_logged_terms(lines)
    fa = fl.get("flash_attn")
    base = LlamaCppFlags(
        ctx_size=int(fl["n_ctx"]) if fl.get("n_ctx") else None, parallel=int(fl.get("n_seq_max") or 1),
        cache_type_k=str(fl.get("cache_type_k") or "f16"), cache_type_v=str(fl.get("cache_type_v") or "f16"),
        flash_attn=fa if fa in ("on", "off", "auto") else ("on" if fa in (1, "1", True, "true") else
                                                        "off" if fa in (0, "0", False, "false") else "auto"),
        ubatch_size=int(fl.get("n_ubatch") or 512), batch_size=int(fl.get("n_batch") or 2048),
        kv_unified=str(fl.get("kv_unified")).lower() in ("1", "true"),
        n_gpu_layers=_log_ngl(t, model) if t.model_buffer is not None else 999)
    new = replace(base, **_given(n_gpu_layers=w.n_gpu_layers, ctx_size=w.max_model_len, parallel=w.parallel,
                                 cache_type_k=w.kv_cache_dtype, cache_type_v=w.cache_type_v,
                                 flash_attn=w.flash_attn))
    how: list[CarriedTerm] = []
    file = _model_weights(weights_ref, "weights") if weights_ref else None
    printed = t.model_buffer if t.model_buffer is not None else t.model_buffers
    said = t.printed.get("model_buffer") or t.printed.get("model_buffers")
    if file is not None and (file[1] or printed is None):
        b, exact, src = file
        how.append(CarriedTerm("model buffer (weights on the GPU)", "estimated", f"llama.cpp's rule on {src}"))
    elif printed is not None:  # measured beats a config's estimate
        # without a CUDA0 line (a CPU / unified-memory log) the model buffers on every device
        # are the loaded weights (llama-model.cpp load_tensors prints one line per buffer type)
        b, exact, src = printed.high, True, f"the log's model buffer size {said}"
        log_layers, n = min(base.n_gpu_layers, model.num_layers), model.num_layers
        if t.model_buffer is not None and 0 < log_layers < n:
            # a partial offload: the CUDA0 buffer holds the log's offloaded layers; the what-if's
            # layers are sized per layer from it (fit_llamacpp's model_buffer spreads b over n layers)
            per = t.model_buffer.high // log_layers
            b, src = per * n, f"the log's model buffer size {said} ÷ {log_layers} offloaded layers = {per:,} B per layer"
            verb = "carried" if new.n_gpu_layers == base.n_gpu_layers else "re-scaled"
            how.append(CarriedTerm("model buffer (weights on the GPU)", verb,
                                   f"{said} for {log_layers} layers: {per:,} B per layer × the what-if's layers, "
                                   "under llama.cpp's band for the layers' share"))
        else:
            how.append(CarriedTerm("model buffer (weights on the GPU)", "carried",
                                   f"{said}, under llama.cpp's band for the GPU's share"))
    else:
        b, exact, src = _model_weights(None, "model buffer (no 'CUDA0 model buffer size' line)")
    how.append(CarriedTerm("compute buffer", "re-estimated" if t.compute_buffer is not None else "estimated",
                           "kvgate.engines.llamacpp.fit's band (it grows with -c and -ub)"
                           + (f"; the log printed {t.printed['compute_buffer']}" if t.compute_buffer else "")))
    rel = _release("llama.cpp", pool, w.release, None)
    a = fit_llamacpp(model, b, exact, src, gpu, new, rel)
    changes = [gpu_change(None, gpu)]
    for flag, k in (("-c", "ctx_size"), ("-np", "parallel"), ("-ctk", "cache_type_k"), ("-ctv", "cache_type_v"),
                    ("-fa", "flash_attn"), ("-ngl", "n_gpu_layers")):
        if getattr(base, k) != getattr(new, k):
            changes.append(f"{flag}: {_shown(getattr(base, k))} → {getattr(new, k)}")
    return WhatIfAnswer(a, changes, how, {"engine": "llama.cpp", "release": rel.text, "terms": t.to_dict()})


def _log_ngl(t: LoggedTerms, model: ModelSpec) -> int:
    """The log's ``-ngl``: ``offloaded N/M layers to GPU`` (``N = min(-ngl, n_layer + 1)``,
    llama.cpp ``src/llama-model.cpp`` ``load_tensors``) gives ``N`` when some layers stayed on
    the CPU; all of them (or no such line): 999, llama.cpp's "all". Used only with a ``CUDA0
    model buffer`` line: without one (a CPU / unified-memory log) the buffers on every device
    are what the what-if carries, as all layers."""
    if t.offloaded is None:
        return 999
    on, of = t.offloaded
    return on if on < of and on < model.num_layers + 1 else 999


def render_whatif(wa: WhatIfAnswer, *, sources: bool = False) -> str:
    """``kvgate fit``'s text for the what-if, headed by the changes and followed by where
    each non-KV term comes from (``sources``: also beneath each row of the table)."""
    from kvgate.fit.render import render_text  # noqa: PLC0415

    head = ["what if (from the log): " + ("; ".join(wa.changes) if wa.changes else "the log's own settings")]
    head += [f"WARNING: {ln}" for ln in wa.contradicts_log]
    if wa.answer.engine == "llama.cpp":  # its buffer table already lists every term with its source: once
        tail = ["", "non-KV terms, from the log or not: "
                + "; ".join(f"{c.name.split(' (')[0]} {c.how}" + (f" ({c.detail})" if c.how != "estimated" else "")
                            for c in wa.carried)]
    else:
        tail = ["", "non-KV terms, from the log or not:"]
        tail += [f"  {c.name:<32} {c.how:<13} {c.detail}" for c in wa.carried]
    return "\n".join(head + [render_text(wa.answer, sources=sources)] + tail)


def _gpu_name(obj: Any) -> str | None:
    """The GPU's name once the what-if has one (the NCCL band of the non-torch term is by
    card class: :mod:`kvgate.engines.vllm.comm`), else ``None`` (the widest band)."""
    gpu = getattr(obj, "gpu", None)
    return gpu.name if gpu is not None else None
