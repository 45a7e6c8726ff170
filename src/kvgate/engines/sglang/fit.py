"""Will it fit under SGLang? ``max_total_num_tokens`` as an interval, the lines SGLang would
log, the verdict and flip points.

Rule (``python/sglang/srt/model_executor/model_runner.py`` ``profile_max_num_token``,
0.4 series): with ``free`` the GPU memory available when the worker starts (the CUDA
total less the CUDA context and NCCL) and ``w`` the weights loaded,
``rest = (free − w) − free × (1 − mem_fraction_static) = mem_fraction_static × free − w``
and ``max_total_num_tokens = rest // cell_size``, rounded down to ``--page-size``, with
``cell_size`` the KV bytes of one token over all layers on one rank as SGLang's profile
counts them (MLA: the latent; DeepSeek sparse attention: the DSA row and the indexer's
keys): :func:`kvgate.engines.sglang.pool.cell_bytes`, and the "KV Cache is allocated" line
:func:`kvgate.engines.sglang.pool.pool_bytes` (both per release).
Nothing is profiled: activations and CUDA graphs live in the ``1 − mem_fraction_static``
left over. ``max_total_num_tokens <= 0`` stops the server: "Not enough memory. Please try
to increase --mem-fraction-static." A request longer than the pool is not refused at
start; SGLang caps requests at ``max_total_num_tokens − 1`` tokens.

Memory at start outside the model (CUDA total − ``Load weight begin. avail mem``), seen in
the SGLang logs of ``tests/data/fit_logs`` (``benchmarks/fit_logs_other.py`` prints each):
231–439 MiB (H100, docs notebook), 452–669 MiB (H100, FA3 test), 595–615 MiB (H200),
644–851 MiB (RTX 3090 under WSL2), 1005–1223 MiB (24 GB card, Docker Desktop), at TP 4
259–466 MiB (L4). The band spans them: 230–1230 MiB at TP 1; with TP up to 2 GiB (NCCL
buffers, which no CUDA log prints beyond 0.47 GiB at TP 4). ROCm is not modelled (MI355X at
TP 8 took 3.9–4.1 GiB).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from kvgate.engines.sglang.budget import default_mem_fraction
from kvgate.engines.sglang.dtype import kv_format
from kvgate.engines.sglang.dtype import run_dtype as sglang_run_dtype
from kvgate.engines.sglang.flags import SglangFlags, SglangSettings, resolve_sglang_flags
from kvgate.engines.sglang.pool import SGLang, cell_bytes, is_dsa, pool_bytes
from kvgate.engines.sglang.startup import check_sglang_encoder_decoder, check_sglang_tp
from kvgate.engines.sglang.swa import SwaSplit, swa_plan, swa_settings
from kvgate.fit.answer import FitAnswer
from kvgate.fit.gpus import Gpu
from kvgate.fit.interval import Interval, Term
from kvgate.fit.kv_heads import kv_head_split
from kvgate.fit.model_length import ModelLength, sglang_length, sglang_refusal
from kvgate.fit.release import Release
from kvgate.geometry import KVGeometry
from kvgate.model import ModelSpec
from kvgate.units import MiB, fmt_gib

INIT_TP1 = Interval(230 * MiB, 1230 * MiB)
INIT_TP = Interval(230 * MiB, 2048 * MiB)


def init_band(tp: int) -> Interval:
    """Memory taken at start before the weights (CUDA context, NCCL at TP > 1): the
    module's band, calibrated on tests/data/fit_logs (``benchmarks/fit_logs_other.py``)."""
    return INIT_TP1 if tp == 1 else INIT_TP


def budget_fraction(given: float | None, release: Release, gpu: Gpu, tp: int, multimodal: bool = False,
                    chunked_prefill_size: int | None = None) -> tuple[Fraction, Fraction]:
    """``(low, high)`` of ``--mem-fraction-static``: the given value, else the release's
    default (:func:`kvgate.engines.sglang.budget.default_mem_fraction`)."""
    if given is not None:
        f = Fraction(str(given))
        return f, f
    lo, hi, _ = default_mem_fraction(release, gpu, tp, multimodal=multimodal, chunked_prefill_size=chunked_prefill_size)
    return lo, hi


def sglang_budget(gpu: Gpu, init: Interval, f_lo: Fraction, f_hi: Fraction) -> Interval:
    """``mem_fraction_static × (CUDA total − init)``: what SGLang gives the weights and the
    KV pool (``model_runner.py`` ``profile_max_num_token``), bytes."""
    free = gpu.cuda_total - init
    # a default fraction can be ≤ 0 at a huge TP (0.5.4's reserve grows with tp × pp): the
    # ends then swap; SGLang's pool is negative either way ("Not enough memory")
    ends = sorted((int(free.low * f_lo), int(free.high * f_hi), int(free.low * f_hi), int(free.high * f_lo)))
    return Interval(ends[0], ends[-1]) if f_lo <= 0 else Interval(int(free.low * f_lo), int(free.high * f_hi))


def fit_sglang(model: ModelSpec, weights: Term, gpu: Gpu, flags: SglangFlags, release: Release, *,
               multimodal: bool = False, dtype: str = "auto") -> FitAnswer:
    """Will ``model`` start under SGLang on ``gpu`` with ``flags``, and what pool would it log?
    ``multimodal`` (:func:`kvgate.fit.widths.is_multimodal`) lowers the default
    ``--mem-fraction-static`` as SGLang does.

    Returns:
        a :class:`FitAnswer` per GPU; ``tokens`` are ``max_total_num_tokens``.

    Raises:
        KvgateError: bad flags or config, a bad TP split.
    """
    check_sglang_tp(model, flags.tp_size)
    check_sglang_encoder_decoder(model)
    run_dtype, dtype_how = sglang_run_dtype(dtype, model.config or {}, gpu.name)
    model = replace(model, dtype=run_dtype)  # --kv-cache-dtype auto follows it
    # the context length as SGLang derives it (get_context_length: kvgate.fit.model_length)
    length = sglang_length(model.config or {}) if model.max_position_embeddings else None
    s = resolve_sglang_flags(flags, multimodal=multimodal, max_position_embeddings=length.default if length else
                             model.max_position_embeddings, dsa=is_dsa(model), gpu_name=gpu.name)
    f_lo, f_hi = budget_fraction(s.mem_fraction_static if flags.mem_fraction_static is not None else None,
                                 release, gpu, s.tp_size, multimodal, flags.chunked_prefill_size)
    if flags.mem_fraction_static is None:
        _, _, why = default_mem_fraction(release, gpu, s.tp_size, multimodal=multimodal,
                                         chunked_prefill_size=flags.chunked_prefill_size)
        s = replace(s, mem_fraction_static=float(f_hi), defaults={**s.defaults, "mem_fraction_static": why})
    init = init_band(s.tp_size)
    free = gpu.cuda_total - init
    budget = sglang_budget(gpu, init, f_lo, f_hi)
    terms = [weights, Term("CUDA context and NCCL at start (free = total − this)", init,
                           "band over the SGLang logs of tests/data/fit_logs", counted=False)]
    pool = budget - weights.value
    geo = KVGeometry(model, str(kv_format(s.kv_cache_dtype, run_dtype)), tp=s.tp_size,
                     layout=SGLang(page_size=s.page_size, version=release.text))
    cell = cell_bytes(geo)
    L = s.context_length
    split, swa_note = swa_plan(geo, model, release, gpu.name, flags.swa_full_tokens_ratio)
    s = swa_settings(s, split, flags.swa_full_tokens_ratio)

    def tokens(p: int) -> int:
        if split is not None:  # the full pool's size is max_total_num_tokens
            return split.tokens(p, s.page_size)[0]
        n = max(0, p) // cell if cell else 0
        return n // s.page_size * s.page_size

    t_lo, t_hi = tokens(pool.low), tokens(pool.high)
    conc: dict[str, float | None] = {"low": t_lo / L, "high": t_hi / L}
    need = L * cell if split is None else int(L * split.bytes_per_full_token())
    fits, reason, err = _verdict((t_lo, t_hi), L, _swa_refusal(split, pool.high, s.page_size), length)
    def frac_for(p_need: int, w: int, fr: int) -> float | None:
        x = Fraction(p_need + w, fr)
        cents = -(-x * 1000 // 1)
        return float(cents) / 1000 if cents < 1000 else None

    flips = {
        "context_length": {"sure": min(t_lo, _cap(length, model) or t_lo) or None,
                           "possible": min(t_hi, _cap(length, model) or t_hi) or None},
        "max_running_requests_at_context_length": {"sure": t_lo // L, "possible": t_hi // L},
        "mem_fraction_static": {"sure": frac_for(need, weights.value.high, free.low),
                                "possible": frac_for(need, weights.value.low, free.high)},
    }
    stored = geo.bytes_per_token()
    notes = ([swa_note] if swa_note else []) + _notes(s, model, release, (t_lo, t_hi), L, (cell, stored))
    lines = {k: _log_lines(geo, split, p, t, s.page_size, L)
             for k, t, p in (("low", t_lo, pool.low), ("high", t_hi, pool.high))}
    stored_iv, stored_label = _stored(geo, split, pool, (t_lo, t_hi), s.page_size, stored, cell)
    if dtype != "auto":
        notes.append(f"--dtype {dtype}: the model runs in {run_dtype}" + (" (so does --kv-cache-dtype auto)"
                                                                          if s.kv_cache_dtype == "auto" else ""))
    return FitAnswer(engine="sglang", release=release, gpu=gpu, model=model.name,
                     settings={**s.to_dict(), "dtype": run_dtype, "dtype_how": dtype_how}, terms=terms,
                     budget=budget, kv_pool=pool, tokens={"low": t_lo, "high": t_hi}, max_concurrency=conc,
                     tokens_per_sequence={"low": L, "high": L}, max_concurrency_printed={"low": None, "high": None},
                     request_bytes=need, fits=fits, reason=reason, engine_error=err, log_lines=lines, flip_points=flips,
                     kv_stored=stored_iv, kv_stored_label=stored_label,
                     notes=notes, kv_heads=kv_head_split(geo),
                     how_to_measure=("measure it: `kvgate run -- python -m sglang.launch_server ...`, or "
                                                  "`kvgate import-log` its log") if fits == "unknown" else None)


def _verdict(t: tuple[int, int], L: int, swa_err: str | None,
             length: ModelLength | None) -> tuple[str, str, str | None]:
    """``(fits, reason, engine_error)`` for a pool of ``t`` (low, high) tokens and requests of
    ``L``: SGLang's refusals (no pool, the SWA pool, a length past the model's) first."""
    t_lo, t_hi = t
    too_long = sglang_refusal(length, L) if length is not None else None
    if too_long is not None:  # model_config.py _derive_context_length: before any memory is profiled
        return "no", (f"--context-length {L:,} is above the model's context length as SGLang derives "
                      f"it, {length.limit:,} ({length.how})"), too_long  # type: ignore[union-attr]
    if swa_err is not None and t_hi > 0:
        return "no", "the SWA pool cannot hold one request's sliding window and a page", swa_err
    if t_hi <= 0:
        return ("no", "the weights take all the memory --mem-fraction-static gives SGLang",
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
    if t_lo <= 0:
        return "unknown", "the pool's interval straddles zero", None
    if t_hi < L:
        return "no", (f"SGLang starts, but one request of --context-length {L:,} tokens does not fit: "
                      f"requests are capped at {t_hi - 1:,} tokens"), None
    if t_lo < L:
        return "unknown", f"the pool's interval straddles one request of {L:,} tokens", None
    return "yes", f"the KV cache pool holds {t_lo / L:.2f} requests of {L:,} tokens at least", None


def _notes(s: SglangSettings, model: ModelSpec, release: Release, t: tuple[int, int], L: int,
           cell_stored: tuple[int, int]) -> list[str]:
    """The answer's notes on the queue, the release's DSA list and the DSA row's bytes."""
    (t_lo, t_hi), (cell, stored) = t, cell_stored
    notes = []
    if s.max_running_requests and s.max_running_requests > t_lo // L and t_lo >= L:
        notes.append(f"--max-running-requests {s.max_running_requests}: only {t_lo // L} requests of {L:,} tokens fit "
                     f"at once for sure; the others wait in the queue")
    arch = (model.config.get("architectures") or [None])[0]
    if arch == "GlmMoeDsaForCausalLM" and not release.at_least(0, 5, 9):
        notes.append(f"SGLang {release.text} does not list GlmMoeDsaForCausalLM among its DeepSeek sparse attention "
                     "models (configs/model_config.py is_deepseek_nsa, from 0.5.9): the pool shown is 0.5.9's")
    if stored > cell and t_hi > 0:
        notes.append(f"SGLang {release.text} counts {cell:,} B per token but its DeepSeek sparse attention pool stores "
                     f"{stored:,} B (the fp8 row's scales and bf16 rope part, memory_pool.py NSATokenToKVPool): the pool "
                     f"takes up to {fmt_gib((stored - cell) * t_hi)} more than --mem-fraction-static leaves it "
                     "(counted from 0.5.17)")
    return notes


def _log_lines(geo: KVGeometry, split: SwaSplit | None, p: int, t: int, page: int, L: int) -> list[str]:
    """The lines SGLang logs for a pool of ``p`` bytes, ``t`` tokens; none at an end without a
    pool: SGLang stops (model_runner.py "Not enough memory") before its KV lines."""
    if t <= 0:
        return ["no KV cache pool: SGLang stops with \"Not enough memory\" before it allocates one",
                "max_total_num_tokens: none"]
    return _pool_lines(geo, split, p, t, page) + [f"max_total_num_tokens={t}, context_len={L}"]


def _pool_lines(geo: KVGeometry, split: SwaSplit | None, p: int, t: int, page: int) -> list[str]:
    """The "KV Cache is allocated" line(s) SGLang prints for a pool of ``t`` tokens (two
    pools and their summary for a hybrid sliding-window model)."""
    if split is None:
        return [pool_bytes(geo, t).log_line()]
    from kvgate.engines.sglang.swa import swa_log_lines  # noqa: PLC0415

    full, swa = split.tokens(p, page)
    return swa_log_lines(split, full, swa, page)


def _stored(geo: KVGeometry, split: SwaSplit | None, pool: Interval, t: tuple[int, int], page: int, stored: int,
            cell: int) -> tuple[Interval | None, str | None]:
    """The bytes the pool stores where they differ from the budget's count: DeepSeek sparse
    attention's row, or the two pools of a hybrid sliding-window model."""
    if split is not None:
        ends = []
        for p, n in ((pool.low, t[0]), (pool.high, t[1])):
            full, swa = split.tokens(p, page)
            ends.append(sum(split.pool_bytes(full, swa, page)) if n > 0 else 0)
        return (Interval(ends[0], ends[1]), f"(#full + page) × {split.full_row * split.full_layers:,} B + "
                f"(#swa + page) × {split.swa_row * split.swa_layers:,} B")
    if stored <= cell:
        return None, None
    return (Interval(pool_bytes(geo, t[0]).total if t[0] > 0 else 0, pool_bytes(geo, t[1]).total if t[1] > 0 else 0),
            f"(#tokens + a page) × {stored:,} B a token")


def _swa_refusal(split: SwaSplit | None, high: int, page: int) -> str | None:
    """SGLang's refusal (from 0.5.17) when even the high end's SWA pool is too small."""
    if split is None:
        return None
    return split.one_request_error(split.tokens(high, page)[1], page)


def _cap(length: ModelLength | None, model: ModelSpec) -> int | None:
    """The largest ``--context-length`` SGLang accepts (none above it unless its env override is set)."""
    if length is None:
        return model.max_position_embeddings
    return None if length.allow_longer else length.limit
