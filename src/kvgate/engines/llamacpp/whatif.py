"""llama.cpp's what-if from its startup log (:mod:`kvgate.fit.whatif`): the flags the
log printed, changed as asked, by :func:`kvgate.engines.llamacpp.fit.fit_llamacpp`."""

from __future__ import annotations

from kvgate.engines.llamacpp.dtype import DEFAULT_CACHE_TYPE
from kvgate.engines.llamacpp.pool import N_BATCH, N_UBATCH
from kvgate.engines.logtext import Line
from kvgate.engines.pool import EnginePool
from kvgate.errors import KvgateError
from kvgate.fit.interval import Interval
from kvgate.fit.logterms import LoggedTerms, llamacpp_logged_terms
from kvgate.fit.whatif import (
    CarriedTerm,
    WhatIf,
    WhatIfAnswer,
    gpu_change,
    log_release,
    model_weights,
    need_gpu,
    shown,
)
from kvgate.model import ModelSpec


def whatif(pool: EnginePool, lines: list[Line], model: ModelSpec, w: WhatIf, *, weights_ref: str | None = None,
           budget: Interval | None = None) -> WhatIfAnswer:
    """llama.cpp: the flags the log printed, changed as asked, by
    :func:`kvgate.engines.llamacpp.fit.fit_llamacpp`; weights from the model file, or the log's
    ``CUDA0 model buffer`` when no file is at hand."""
    from kvgate.engines.llamacpp.fit import build_flags, fit_llamacpp  # noqa: PLC0415

    if w.tp is not None or w.utilization is not None:
        raise KvgateError("llama.cpp has no tensor parallel size or memory share to change",
                          hint="-c, -np, -ctk/-ctv and --gpu/--total are its what-ifs")
    gpu = need_gpu(w, "llama.cpp")
    fl = pool.flags
    t = llamacpp_logged_terms(lines)
    fa = fl.get("flash_attn")
    base = build_flags(
        ctx_size=int(fl["n_ctx"]) if fl.get("n_ctx") else None, parallel=int(fl.get("n_seq_max") or 1),
        cache_type_k=str(fl.get("cache_type_k") or DEFAULT_CACHE_TYPE),
        cache_type_v=str(fl.get("cache_type_v") or DEFAULT_CACHE_TYPE),
        flash_attn=fa if fa in ("on", "off", "auto") else ("on" if fa in (1, "1", True, "true") else
                                                        "off" if fa in (0, "0", False, "false") else "auto"),
        ubatch_size=int(fl.get("n_ubatch") or N_UBATCH), batch_size=int(fl.get("n_batch") or N_BATCH),
        kv_unified=str(fl.get("kv_unified")).lower() in ("1", "true"),
        n_gpu_layers=_log_ngl(t, model) if t.model_buffer is not None else 999)
    new = build_flags(base, n_gpu_layers=w.n_gpu_layers, ctx_size=w.max_model_len, parallel=w.parallel,
                      cache_type_k=w.kv_cache_dtype, cache_type_v=w.cache_type_v, flash_attn=w.flash_attn)
    how: list[CarriedTerm] = []
    file = model_weights(weights_ref, "weights") if weights_ref else None
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
        b, exact, src = model_weights(None, "model buffer (no 'CUDA0 model buffer size' line)")
    how.append(CarriedTerm("compute buffer", "re-estimated" if t.compute_buffer is not None else "estimated",
                           "kvgate.engines.llamacpp.fit's band (it grows with -c and -ub)"
                           + (f"; the log printed {t.printed['compute_buffer']}" if t.compute_buffer else "")))
    rel = log_release("llama.cpp", pool, w.release)
    a = fit_llamacpp(model, b, exact, src, gpu, new, rel)
    changes = [gpu_change(None, gpu)]
    for flag, k in (("-c", "ctx_size"), ("-np", "parallel"), ("-ctk", "cache_type_k"), ("-ctv", "cache_type_v"),
                    ("-fa", "flash_attn"), ("-ngl", "n_gpu_layers")):
        if getattr(base, k) != getattr(new, k):
            changes.append(f"{flag}: {shown(getattr(base, k))} → {getattr(new, k)}")
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


