"""SGLang's what-if from its startup log (:mod:`kvgate.fit.whatif`): weights carried
(re-split by TP), the rest by :func:`kvgate.engines.sglang.fit.fit_sglang`."""

from __future__ import annotations

from kvgate.engines.logtext import Line
from kvgate.engines.pool import EnginePool
from kvgate.fit.interval import Interval, Term
from kvgate.fit.whatif import (
    CarriedTerm,
    WhatIf,
    WhatIfAnswer,
    gpu_change,
    log_kv_dtype,
    log_kv_shown,
    log_release,
    model_weights,
    need_gpu,
    scaled,
    shown,
)
from kvgate.model import ModelSpec
from kvgate.units import GiB


def whatif(pool: EnginePool, lines: list[Line], model: ModelSpec, w: WhatIf, *, weights_ref: str | None = None,
           budget: Interval | None = None) -> WhatIfAnswer:
    """SGLang: weights carried (re-split by TP), the rest by :func:`kvgate.engines.sglang.fit.fit_sglang`."""
    from kvgate.engines.sglang.fit import fit_sglang  # noqa: PLC0415
    from kvgate.engines.sglang.flags import build_flags  # noqa: PLC0415
    from kvgate.engines.vllm.budget import weights_term  # noqa: PLC0415

    gpu = need_gpu(w, "SGLang")
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
    base = build_flags(mem_fraction_static=mfs, context_length=pool.max_model_len, tp_size=log_tp,
                       kv_cache_dtype=log_kv_dtype(pool, model), page_size=int(fl.get("page_size") or 1))
    new = build_flags(base, mem_fraction_static=w.utilization, context_length=w.max_model_len, tp_size=w.tp,
                      kv_cache_dtype=w.kv_cache_dtype, max_running_requests=w.max_num_seqs)
    how: list[CarriedTerm] = []
    if pool.weights is not None:
        v = Interval(pool.weights.low, pool.weights.high)
        if new.tp_size != log_tp:
            v = scaled(v, log_tp, new.tp_size)
            how.append(CarriedTerm("weights", "re-split", f"the log's mem usage={pool.weights.text} on each of {log_tp} "
                                   f"rank(s), re-split over {new.tp_size}"))
        else:
            how.append(CarriedTerm("weights", "carried", f"the log's mem usage={pool.weights.text}"))
        weights = Term("weights", v, how[-1].detail)
    else:
        b, exact, src = model_weights(weights_ref, "weights (no 'Load weight end' line)")
        weights = weights_term(b, ranks=new.tp_size, exact=exact, source=src)
        how.append(CarriedTerm("weights", "estimated", f"not printed by the log: {weights.source}"))
    how.append(CarriedTerm("CUDA context and NCCL at start", "estimated",
                           "kvgate.engines.sglang.fit's band (the log's free memory is on the log's GPU)"))
    rel = log_release("sglang", pool, w.release)
    a = fit_sglang(model, weights, gpu, new, rel)
    if mfs is None and w.utilization is None:
        notes.append("the log does not print --mem-fraction-static: SGLang's default by TP presumed")
    a.notes[:0] = notes
    changes = [gpu_change(None, gpu)]
    for flag, k in (("--mem-fraction-static", "mem_fraction_static"), ("--context-length", "context_length"),
                    ("--max-running-requests", "max_running_requests"), ("--tp-size", "tp_size"),
                    ("--kv-cache-dtype", "kv_cache_dtype")):
        if getattr(base, k) != getattr(new, k):
            was = log_kv if k == "kv_cache_dtype" and (log_kv := log_kv_shown(pool)) else shown(getattr(base, k))
            changes.append(f"{flag}: {was} → {getattr(new, k)}")
    return WhatIfAnswer(a, changes, how, {"engine": "sglang", "release": rel.text, "tp": log_tp,
                                          "mem_fraction_static": mfs})


