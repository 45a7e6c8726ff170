"""vLLM's what-if from its startup log (:mod:`kvgate.fit.whatif`, whose docstring says
where each non-KV term comes from): :func:`kvgate.engines.vllm.fit.fit_vllm` rerun with the
terms the log printed carried over."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from kvgate.engines.logtext import Line
from kvgate.engines.pool import EnginePool
from kvgate.errors import KvgateError
from kvgate.fit.answer import FitAnswer
from kvgate.fit.gpus import Gpu
from kvgate.fit.interval import Interval, Term, total
from kvgate.fit.logterms import LoggedTerms, vllm_logged_terms
from kvgate.fit.release import Release
from kvgate.fit.whatif import (
    CarriedTerm,
    WhatIf,
    WhatIfAnswer,
    gpu_change,
    log_kv_dtype,
    log_kv_shown,
    log_release,
    model_weights,
    scaled,
    shown,
)
from kvgate.model import ModelSpec
from kvgate.units import GiB

#: the release modelled for a V0 log that does not print its release
_V0 = Release("vllm", "0.10.0", (0, 10, 0), "the log's engine is V0 and its release is not logged: "
              "0.10.0 modelled (V0's last rules)")


def whatif(pool: EnginePool, lines: list[Line], model: ModelSpec, w: WhatIf, *, weights_ref: str | None = None,
           budget: Interval | None = None) -> WhatIfAnswer:
    """vLLM's answer for the settings of ``w`` (:func:`kvgate.fit.whatif.whatif_from_log`)."""
    return VllmFromLog(pool, lines, model, w, weights_ref, budget).answer()


class VllmFromLog:
    """vLLM's what-if (module docstring)."""

    def __init__(self, pool: EnginePool, lines: list[Line], model: ModelSpec, w: WhatIf,
                 weights_ref: str | None, budget: Interval | None = None) -> None:
        from kvgate.engines.vllm.flags import build_flags  # noqa: PLC0415

        self.pool, self.model, self.w = pool, model, w
        self.t: LoggedTerms = vllm_logged_terms(lines, pool.weights)
        self.release = log_release("vllm", pool, w.release, _V0 if self.t.v1 is False else None)
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
        self.base = build_flags(
            gpu_memory_utilization=util, max_model_len=L, max_num_seqs=seqs,
            max_num_batched_tokens=fl.get("max_num_batched_tokens"), tensor_parallel_size=self.log_tp,
            pipeline_parallel_size=self.log_pp, kv_cache_dtype=log_kv_dtype(pool, model),
            block_size=fl.get("block_size"), use_v1=self.t.v1 if not self.release.at_least(0, 11) else None)
        self.flags = build_flags(
            self.base, gpu_memory_utilization=w.utilization, max_model_len=w.max_model_len, tensor_parallel_size=w.tp,
            kv_cache_dtype=w.kv_cache_dtype, max_num_seqs=w.max_num_seqs)
        self.logged_pool = (Interval(pool.pool_bytes.low, pool.pool_bytes.high)
                            if pool.pool_bytes is not None and pool.pool_is_budget else self.t.available_kv)
        self.pool_from_blocks = self.logged_pool is None and budget is not None
        if self.logged_pool is None:
            self.logged_pool = budget
        self.weights_log = self.t.weights
        self.weights_file: tuple[int, bool, str] | None = None
        if self.weights_log is None:
            self.weights_file = model_weights(weights_ref, "weights (no 'Model loading took' line)")
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
            v = scaled(self.weights_log, log_ranks, ranks)
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
            ("activation peak (profile run)", self.t.activation, same_profile,
             activation_term(s, w, self.release, self.model.config, self.model.dtype),
             "max_num_batched_tokens, max_num_seqs, TP or the engine changed"),
            ("non-torch memory", self.t.non_torch, same_tp, non_torch_term(s, self.release, gpu_name=_gpu_name(self)),
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
        g = cuda_graph_term(s, recurrent="linear" in self.model.kinds())
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
        changes = _changes_vllm(self.base, self.flags, self.w, self.log_gpu, log_kv=log_kv_shown(self.pool))
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



def _changes_vllm(base: Any, new: Any, w: WhatIf, log_gpu: Gpu, *, log_kv: str | None = None) -> list[str]:
    out = []
    if w.gpu is not None:
        out.append(gpu_change(log_gpu, w.gpu))
    for flag, k in (("--gpu-memory-utilization", "gpu_memory_utilization"), ("--max-model-len", "max_model_len"),
                    ("--max-num-seqs", "max_num_seqs"), ("-tp", "tensor_parallel_size"),
                    ("--kv-cache-dtype", "kv_cache_dtype")):
        if getattr(base, k) != getattr(new, k):
            was = log_kv if k == "kv_cache_dtype" and log_kv else shown(getattr(base, k))
            out.append(f"{flag}: {was} → {getattr(new, k)}")
    return out


def _gpu_name(obj: Any) -> str | None:
    """The GPU's name once the what-if has one (the NCCL band of the non-torch term is by
    card class: :mod:`kvgate.engines.vllm.comm`), else ``None`` (the widest band)."""
    gpu = getattr(obj, "gpu", None)
    return gpu.name if gpu is not None else None
