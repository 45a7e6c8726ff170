"""Will it fit under SGLang? ``max_total_num_tokens`` as an interval, the lines SGLang would
log, the verdict and flip points.

Rule (``python/sglang/srt/model_executor/model_runner.py`` ``profile_max_num_token``,
0.4 series): with ``free`` the GPU memory available when the worker starts (the CUDA
total less the CUDA context and NCCL) and ``w`` the weights loaded,
``rest = (free − w) − free × (1 − mem_fraction_static) = mem_fraction_static × free − w``
and ``max_total_num_tokens = rest // cell_size``, rounded down to ``--page-size``, with
``cell_size`` the KV bytes of one token over all layers on one rank as SGLang's profile
counts them (MLA: the latent; DeepSeek sparse attention: the DSA row and the indexer's
keys): :func:`kvgate.geometry.sglang.cell_bytes`, and the "KV Cache is allocated" line
:func:`kvgate.geometry.sglang.pool_bytes` (both per release).
Nothing is profiled: activations and CUDA graphs live in the ``1 − mem_fraction_static``
left over. ``max_total_num_tokens <= 0`` stops the server: "Not enough memory. Please try
to increase --mem-fraction-static." A request longer than the pool is not refused at
start; SGLang caps requests at ``max_total_num_tokens − 1`` tokens.

Memory at start outside the model: 0.59 GiB on an H200 at TP 1 (139.80 GiB CUDA total,
139.21 GiB free before load, ``sglang_2025-03_gemma-3-4b_h200_1.log``); the band
0.45–1.0 GiB at TP 1, 0.45–2.0 GiB with TP (NCCL buffers: no log prints them alone).
"""

from __future__ import annotations

from fractions import Fraction

from kvgate.fit.answer import FitAnswer
from kvgate.fit.gpus import Gpu
from kvgate.fit.interval import Interval, Term
from kvgate.fit.release import Release
from kvgate.fit.sglang_flags import SglangFlags, resolve_sglang_flags
from kvgate.geometry import KVGeometry
from kvgate.geometry.sglang import SGLang, cell_bytes, is_dsa, pool_bytes
from kvgate.model import ModelSpec

GiB = 2**30
MiB = 2**20
INIT_TP1 = Interval(460 * MiB, 1024 * MiB)
INIT_TP = Interval(460 * MiB, 2048 * MiB)


def _kv_format(flag: str, model: ModelSpec) -> str:
    f = flag.lower()
    if f == "auto":
        return "fp16" if str(model.dtype or "").lower() in ("float16", "half") else "bf16"
    if f.startswith("fp8"):
        return "fp8"
    return f


def fit_sglang(model: ModelSpec, weights: Term, gpu: Gpu, flags: SglangFlags, release: Release, *,
               multimodal: bool = False) -> FitAnswer:
    """Will ``model`` start under SGLang on ``gpu`` with ``flags``, and what pool would it log?
    ``multimodal`` (:func:`kvgate.fit.widths.is_multimodal`) lowers the default
    ``--mem-fraction-static`` as SGLang does.

    Returns:
        a :class:`FitAnswer` per GPU; ``tokens`` are ``max_total_num_tokens``.

    Raises:
        KvgateError: bad flags or config, a bad TP split.
    """
    s = resolve_sglang_flags(flags, multimodal=multimodal, max_position_embeddings=model.max_position_embeddings,
                             dsa=is_dsa(model), gpu_name=gpu.name)
    f = Fraction(str(s.mem_fraction_static))
    init = INIT_TP1 if s.tp_size == 1 else INIT_TP
    free = gpu.cuda_total - init
    budget = Interval(int(free.low * f), int(free.high * f))
    terms = [weights, Term("CUDA context and NCCL at start (free = total − this)", init,
                           "H200 TP 1: 0.59 GiB (tests/data/fit_logs); band", counted=False)]
    pool = budget - weights.value
    geo = KVGeometry(model, _kv_format(s.kv_cache_dtype, model), tp=s.tp_size,
                     layout=SGLang(page_size=s.page_size, version=release.text))
    cell = cell_bytes(geo)
    L = s.context_length

    def tokens(p: int) -> int:
        n = max(0, p) // cell if cell else 0
        return n // s.page_size * s.page_size

    t_lo, t_hi = tokens(pool.low), tokens(pool.high)
    conc: dict[str, float | None] = {"low": t_lo / L, "high": t_hi / L}
    need = L * cell
    err = None
    if t_hi <= 0:
        fits, reason = "no", "the weights take all the memory --mem-fraction-static gives SGLang"
        err = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    elif t_lo <= 0:
        fits, reason = "unknown", "the pool's interval straddles zero"
    elif t_hi < L:
        fits, reason = "no", (f"SGLang starts, but one request of --context-length {L:,} tokens does not fit: "
                              f"requests are capped at {t_hi - 1:,} tokens")
    elif t_lo < L:
        fits, reason = "unknown", f"the pool's interval straddles one request of {L:,} tokens"
    else:
        fits, reason = "yes", f"the KV cache pool holds {t_lo / L:.2f} requests of {L:,} tokens at least"

    def frac_for(p_need: int, w: int, fr: int) -> float | None:
        x = Fraction(p_need + w, fr)
        cents = -(-x * 1000 // 1)
        return float(cents) / 1000 if cents < 1000 else None

    flips = {
        "context_length": {"sure": min(t_lo, model.max_position_embeddings or t_lo) or None,
                           "possible": min(t_hi, model.max_position_embeddings or t_hi) or None},
        "max_running_requests_at_context_length": {"sure": t_lo // L, "possible": t_hi // L},
        "mem_fraction_static": {"sure": frac_for(need, weights.value.high, free.low),
                                "possible": frac_for(need, weights.value.low, free.high)},
    }
    notes = []
    if s.max_running_requests and s.max_running_requests > t_lo // L and t_lo >= L:
        notes.append(f"--max-running-requests {s.max_running_requests}: only {t_lo // L} requests of {L:,} tokens fit "
                     f"at once for sure; the others wait in the queue")
    arch = (model.config.get("architectures") or [None])[0]
    if arch == "GlmMoeDsaForCausalLM" and not release.at_least(0, 5, 9):
        notes.append(f"SGLang {release.text} does not list GlmMoeDsaForCausalLM among its DeepSeek sparse attention "
                     "models (configs/model_config.py is_deepseek_nsa, from 0.5.9): the pool shown is 0.5.9's")
    stored = geo.bytes_per_token()
    if stored > cell and t_hi > 0:
        notes.append(f"SGLang {release.text} counts {cell:,} B per token but its DeepSeek sparse attention pool stores "
                     f"{stored:,} B (the fp8 row's scales and bf16 rope part, memory_pool.py NSATokenToKVPool): the pool "
                     f"takes up to {(stored - cell) * t_hi / GiB:.2f} GiB more than --mem-fraction-static leaves it "
                     "(counted from 0.5.17)")
    lines = {k: [pool_bytes(geo, max(t, 0)).log_line(), f"max_total_num_tokens={t}, context_len={L}"]
             for k, t in (("low", t_lo), ("high", t_hi))}
    return FitAnswer(engine="sglang", release=release, gpu=gpu, model=model.name, settings=s.to_dict(), terms=terms,
                     budget=budget, kv_pool=pool, tokens={"low": t_lo, "high": t_hi}, max_concurrency=conc,
                     request_bytes=need, fits=fits, reason=reason, engine_error=err, log_lines=lines, flip_points=flips,
                     notes=notes, how_to_measure=("measure it: `kvgate run -- python -m sglang.launch_server ...`, or "
                                                  "`kvgate import-log` its log") if fits == "unknown" else None)
