"""Will it fit under vLLM? The KV pool as an interval, the lines vLLM would log, the
verdict with vLLM's own error, and the flags' flip points.

Pool: :mod:`kvgate.engines.vllm.budget` (``total × utilization − non-KV terms``). Blocks,
tokens and concurrency: :func:`kvgate.geometry.vllm_kv_cache_report` on the pool's two
ends (``vllm/v1/core/kv_cache_utils.py``, the release's rules).

Errors quoted (strings of the engine at the releases modelled):

- ``num_blocks <= 0`` / available ≤ 0 — "No available memory for the cache blocks. Try
  increasing `gpu_memory_utilization` when initializing the engine."
  (V0 ``raise_if_cache_size_invalid``; V1 ``check_enough_kv_cache_memory``);
- one full-length request does not fit — V0: "The model's max seq len (L) is larger than
  the maximum number of tokens that can be stored in KV cache (N). ..."; V1: "To serve at
  least one request with the models's max seq len (L), (X GiB KV cache is needed, which is
  larger than the available KV cache memory (Y GiB). ..." with vLLM's estimated maximum
  model length;
- free memory at start below the requested share (V1 ``Worker.init_device``): "Free memory
  on device ... on startup is less than desired GPU memory utilization ...".
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from fractions import Fraction
from typing import Any

from kvgate.engines.vllm import dtype as vllm_dtype
from kvgate.engines.vllm.budget import requested_memory, vllm_terms
from kvgate.engines.vllm.flags import VllmFlags, VllmSettings, resolve_vllm_flags
from kvgate.engines.vllm.pool import VLLM
from kvgate.engines.vllm.pool_report import vllm_kv_cache_report
from kvgate.errors import KvgateError
from kvgate.fit.answer import FitAnswer
from kvgate.fit.dtype import model_config
from kvgate.fit.gpus import Gpu
from kvgate.fit.interval import Interval, Term, total
from kvgate.fit.kv_heads import kv_head_split
from kvgate.fit.model_length import vllm_length, vllm_refusal
from kvgate.fit.release import Release
from kvgate.fit.widths import model_widths
from kvgate.geometry import KVGeometry
from kvgate.model import ModelSpec
from kvgate.model.weights import raw_config
from kvgate.units import GiB, MiB

#: CUDA context of the engine process before its first snapshot: L40S "Free memory on device
#: (43.91/44.4 GiB)" (0.49 GiB, tests/data/fit_logs/vllm_2025-12_gpt-oss-20b_44gib-gpu_1.log),
#: H200 526.8 MiB (torch idle, measured); ± printing.
CONTEXT = Interval(490 * MiB, 560 * MiB)
MEASURE = ("measure it: `kvgate run -- vllm serve MODEL ...` (peak and pool from the real start), "
           "or start vLLM once and `kvgate import-log` its log")


def kv_format_for(flag: str, model: ModelSpec) -> str:
    """vLLM's ``--kv-cache-dtype`` as a kvgate KV format for ``model``, whose ``dtype`` is the
    one vLLM runs it in (:func:`kvgate.engines.vllm.dtype.kv_format`; a dtype not known:
    vLLM's ``--dtype auto`` for it).

    Raises:
        KvgateError: a value vLLM does not take.
    """
    run = model.dtype or vllm_dtype.run_dtype("auto", model_config(model), None)[0]
    return str(vllm_dtype.kv_format(flag, run))


class _Predictor:
    """Pool, report and verdict inputs for one model/GPU/release; re-evaluated at other flag values."""

    def __init__(self, model: ModelSpec, weights: Term, gpu: Gpu, release: Release, pool_for: Any = None,
                 ref: str | None = None) -> None:
        self.model, self.weights, self.gpu, self.release = model, weights, gpu, release
        self.pool_for = pool_for  # (settings, widths) -> (terms, budget, pool): kvgate.fit.whatif's log-carried terms
        # the default --max-model-len as vLLM derives it (rope_scaling, longrope: kvgate.fit.model_length)
        self.length = vllm_length(model.config or {}, release) if model.max_position_embeddings else None
        # the whole config.json, vision tower included (kvgate.engines.vllm.encoder), of the model as the user named
        # it (a Hub id in the local cache too); a preset has none
        self.full = None if model.source.startswith("preset:") else raw_config(ref or model.source)

    def settings(self, flags: VllmFlags) -> VllmSettings:
        return resolve_vllm_flags(flags, self.release, cuda_total_bytes=self.gpu.cuda_total.low, gpu_name=self.gpu.name,
                                  max_position_embeddings=self.length.default if self.length else
                                  self.model.max_position_embeddings)

    def geometry(self, s: VllmSettings) -> KVGeometry:
        # each pipeline stage holds its own layers (get_pp_indices); the report takes the
        # least num_blocks over stages, and its per-rank bytes are the stage that sets it
        lay = VLLM(block_size=s.block_size, max_num_batched_tokens=s.max_num_batched_tokens, version=self.release.text,
                   pipeline_parallel_size=s.pipeline_parallel_size,
                   decode_context_parallel_size=s.decode_context_parallel_size)
        return KVGeometry(self.model, kv_format_for(s.kv_cache_dtype, self.model), tp=s.tensor_parallel_size, layout=lay)

    def pool(self, s: VllmSettings) -> tuple[list[Term], Interval, Interval]:
        w = model_widths(self.model.config, s.tensor_parallel_size)
        if self.pool_for is not None:
            return self.pool_for(s, w)  # type: ignore[no-any-return]
        terms = vllm_terms(s, w, self.weights, self.release, self.model.config, self.gpu.name, self.model.dtype,
                           self.full, recurrent="linear" in self.model.kinds())
        budget = requested_memory(self.gpu.cuda_total, s.gpu_memory_utilization)
        if s.kv_cache_memory_bytes is not None:
            return terms, budget, Interval.point(s.kv_cache_memory_bytes)
        return terms, budget, budget - total(terms)

    def request_bytes(self, s: VllmSettings, L: int) -> int:
        """The KV bytes vLLM's startup check asks for one request of ``L`` tokens, per rank.

        vLLM 0.14.0 … 0.16.x check the whole model's global groups against the least
        budget, pipeline stages or not (``get_kv_cache_configs``:
        ``_check_enough_kv_cache_memory(min(available_memory), …global groups)``; the
        general case counts ``group_size × page × cdiv(first group's max usage, page)``);
        0.17.0 on check each worker's own layers (``_project_kv_cache_groups_to_worker``),
        as 0.13 and before did: the stage's request.
        """
        rep = vllm_kv_cache_report(self.geometry(s), 0, L)
        if s.pipeline_parallel_size > 1 and self.release.at_least(0, 14) and not self.release.at_least(0, 17):
            whole = vllm_kv_cache_report(self.geometry(replace(s, pipeline_parallel_size=1)), 0, L)
            return int(whole["pool_bytes_per_block"]) * int(whole["groups"][0]["blocks_per_request"])
        return int(rep["request_bytes"])


def fit_vllm(model: ModelSpec, weights: Term, gpu: Gpu, flags: VllmFlags, release: Release, *,
             multimodal: bool = False, pool_for: Any = None, dtype: str = "auto", ref: str | None = None) -> FitAnswer:
    """Will ``model`` start under vLLM ``release`` on ``gpu`` with ``flags``, and what pool
    would it log?

    Args:
        model: the :class:`ModelSpec` (its ``config`` gives the activation widths).
        weights: the weights :class:`Term` per GPU (:func:`kvgate.engines.vllm.budget.weights_term`).
        gpu: the :class:`Gpu` (its CUDA total is what utilization multiplies).
        flags: the ``vllm serve`` flags given (:class:`VllmFlags`).
        release: the :class:`Release` modelled.
        multimodal: the model has a vision/audio encoder (:func:`kvgate.fit.widths.is_multimodal`):
            vLLM profiles it too, which is not modelled, so "fits" becomes "can't tell".
        pool_for: ``(settings, widths) -> (terms, budget, pool)`` replacing the calibrated
            terms (:func:`kvgate.fit.whatif.whatif_vllm`: the terms a startup log printed).
        dtype: ``--dtype`` (:func:`kvgate.engines.vllm.dtype.run_dtype`): the model's dtype, which
            ``--kv-cache-dtype auto`` follows.
        ref: the model as the user named it (a folder, a config.json, a Hub id), whose whole
            config.json sizes a vision encoder's cache (:func:`kvgate.model.weights.raw_config`);
            not given: ``model.source``.

    Returns:
        a :class:`FitAnswer` (per GPU; tokens and concurrency as vLLM logs them).

    Raises:
        KvgateError: bad flags, a config without the needed fields, a bad TP split.
    """
    check_parallel(model, flags.tensor_parallel_size, flags.pipeline_parallel_size, flags.decode_context_parallel_size)
    run_dtype, dtype_how = vllm_dtype.run_dtype(dtype, model.config or {}, gpu.name)
    model = replace(model, dtype=run_dtype)
    length = vllm_length(model.config or {}, release) if model.max_position_embeddings else None
    if length is not None:  # the limit as vLLM derives it (rope_scaling), kvgate.fit.model_length
        model = replace(model, max_position_embeddings=length.limit)
    if flags.max_model_len == -1:
        return _fit_auto(model, weights, gpu, flags, release, multimodal, pool_for, run_dtype, ref)
    pr = _Predictor(model, weights, gpu, release, pool_for, ref)
    s = pr.settings(flags)
    if (flags.max_num_batched_tokens is not None or flags.max_num_seqs is not None) \
            and s.max_num_batched_tokens < s.max_num_seqs:  # vllm/config/scheduler.py SchedulerConfig._verify_args
        raise KvgateError(f"--max-num-batched-tokens {s.max_num_batched_tokens:,}: vLLM refuses it: "
                          f"max_num_batched_tokens ({s.max_num_batched_tokens}) must be greater than or equal to "
                          f"max_num_seqs ({s.max_num_seqs}).", hint="raise --max-num-batched-tokens or lower --max-num-seqs")
    terms, budget, pool = pr.pool(s)
    L = s.max_model_len
    g = pr.geometry(s)
    lo = vllm_kv_cache_report(g, max(0, pool.low), L)
    hi = vllm_kv_cache_report(g, max(0, pool.high), L)
    need = pr.request_bytes(s, L)  # what vLLM's startup check asks for (the release's rule)
    notes: list[str] = []
    too_long = vllm_refusal(length, model.config or {}, L) if length is not None else None
    if length is not None and L > length.limit:
        notes.append(f"--max-model-len {L:,} is above the model's length as vLLM derives it, {length.limit:,} "
                     f"({length.how}): " + ("VLLM_ALLOW_LONG_MAX_MODEL_LEN is set, so vLLM accepts it" if too_long is None
                                            else "vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"))
    elif length is not None and flags.max_model_len is None and length.how != f"{length.key}={length.limit}":
        notes.append(f"--max-model-len {L:,}: the model's length as vLLM derives it ({length.how})")
    fits, reason, err = _verdict(s, gpu, terms, budget, pool, need, L, lo, hi, release)
    if s.kv_cache_memory_bytes is not None and s.kv_cache_memory_bytes + weights.value.low > gpu.cuda_total.high:
        # --kv-cache-memory-bytes skips the profile's budget: the pool is allocated as given
        fits, reason, err = ("no", f"--kv-cache-memory-bytes {s.kv_cache_memory_bytes:,} and the weights are more "
                             "than the GPU holds",
                             "torch.OutOfMemoryError: CUDA out of memory (allocating the KV cache)")
    elif weights.value.low > gpu.cuda_total.high:
        # the load itself runs out of memory, before any KV budget is computed
        fits, reason, err = ("no", "the weights alone are larger than the GPU: more tensor parallel ranks "
                             "(-tp) or smaller (quantized) weights",
                             "torch.OutOfMemoryError: CUDA out of memory (while loading the model weights)")
    if too_long is not None and length is not None:
        # vllm/config/model.py _get_and_verify_max_len (kvgate.fit.model_length): the config is
        # checked before the engine starts, so this is the error vLLM stops with first
        fits, reason, err = ("no", f"--max-model-len {L:,} is above the model's length as vLLM derives it, "
                             f"{length.limit:,} ({length.how})", too_long)
    tokens = {"low": lo["gpu_kv_cache_tokens"] if pool.low > 0 else 0, "high": hi["gpu_kv_cache_tokens"] if pool.high > 0 else 0}
    conc = {"low": lo["max_concurrency"] if pool.low > 0 else 0.0, "high": hi["max_concurrency"] if pool.high > 0 else 0.0}
    lines = {"low": [ln for ln in lo["log_lines"] if ln], "high": [ln for ln in hi["log_lines"] if ln]}
    for end, p in (("low", pool.low), ("high", pool.high)):
        if p > 0:
            lines[end].insert(0, f"Available KV cache memory: {p / GiB:.2f} GiB")
        else:  # no pool at this end: vLLM stops before any KV line (gpu_worker.py / kv_cache_utils.py)
            lines[end] = ["Available KV cache memory: none (the non-KV terms take it all; vLLM stops with "
                          "\"No available memory for the cache blocks\")"]
    if not s.v1:  # V0 (vllm/executor, worker.py): "# GPU blocks: N", numbers without separators
        lines = {k: [f"# GPU blocks: {r['num_blocks']}" if ln.startswith("GPU KV cache size")
                     else ln.replace(f"for {L:,} tokens", f"for {L} tokens") for ln in v]
                 for (k, v), r in zip(lines.items(), (lo, hi))}
    enc = any("encoder cache held" in t.source for t in terms)
    if multimodal and fits == "yes":
        fits, reason = "unknown", (("a multimodal model: kvgate counts the encoder cache vLLM's profile run holds "
                                    "(kvgate.engines.vllm.encoder), not the encoder's own forward peak, which can be "
                                    "larger") if enc else
                                   ("a multimodal model: vLLM's profile run also runs its vision/audio encoder "
                                    "(36.63 GiB on Llama-3.2-11B-Vision, tests/data/fit_logs), which kvgate does not "
                                    "model; the pool can be much smaller than shown"))
    flips = flip_points_vllm(pr, flags, s)
    c_lo = conc["low"] or 0.0
    if fits == "yes" and flags.max_num_seqs is not None and flags.max_num_seqs > c_lo:
        notes.insert(0, f"--max-num-seqs {flags.max_num_seqs}: only {int(c_lo)} requests of {L:,} tokens fit in the "
                        f"pool at once for sure; the others wait in the queue (or are preempted) until blocks free up")
    if flips["max_model_len"].get("possible") == model.max_position_embeddings:
        notes.append(f"--max-model-len flip points stop at the model's max_position_embeddings "
                     f"{model.max_position_embeddings:,}")
    if dtype != "auto":
        notes.append(f"--dtype {dtype}: the model runs in {run_dtype}" + (" (so does --kv-cache-dtype auto)"
                                                                          if s.kv_cache_dtype == "auto" else ""))
    return FitAnswer(
        engine="vllm", release=release, gpu=gpu, model=model.name, settings={**s.to_dict(), "dtype": run_dtype,
                                                                              "dtype_how": dtype_how}, terms=terms,
        budget=budget, kv_pool=pool, tokens=tokens, max_concurrency=conc, request_bytes=need, fits=fits,
        tokens_per_sequence={"low": L, "high": L},
        max_concurrency_printed={k: (f"{v:.2f}x" if v else None) for k, v in conc.items()},
        reason=reason, engine_error=err, log_lines=lines, flip_points=flips, notes=notes + list(model.notes)[:3],
        how_to_measure=MEASURE if fits == "unknown" else None, kv_heads=kv_head_split(g),
    )


def check_parallel(model: ModelSpec, tp: int, pp: int, dcp: int = 1) -> None:
    """vLLM's own checks of the parallel sizes, with its messages: the attention heads must
    divide by ``-tp`` (``vllm/config/model.py`` ``verify_with_parallel_config``), ``-pp``
    must not exceed the layers (``vllm/distributed/utils.py`` ``get_pp_indices`` gives each
    stage at least one); ``-dcp`` must divide ``-tp`` (``vllm/engine/arg_utils.py``) and,
    for a model that is not MLA, ``-tp`` must exceed the KV heads with ``-dcp`` at most
    ``tp // kv_heads`` (``ModelConfig.verify_with_parallel_config``, 0.12.0).

    Raises:
        KvgateError: a split vLLM refuses.
    """
    heads = (model.config or {}).get("num_attention_heads")
    if isinstance(heads, int) and heads > 0 and tp > 0 and heads % tp:
        raise KvgateError(f"-tp {tp}: vLLM refuses it: Total number of attention heads ({heads}) must be divisible "
                          f"by tensor parallel size ({tp}).", hint="a -tp that divides the attention heads")
    if dcp > 1 and tp % dcp:
        raise KvgateError(f"-dcp {dcp}: vLLM refuses it: tp_size={tp} must be divisible by "
                          f"decode_context_parallel_size {dcp}.", hint="a -dcp that divides -tp")
    kv = (model.config or {}).get("num_key_value_heads") or heads
    mla = any(l.kind == "mla" for l in model.layers)
    if dcp > 1 and not mla and isinstance(kv, int) and kv > 0 and (tp <= kv or dcp > tp // kv):
        raise KvgateError(f"-dcp {dcp}: vLLM refuses it for a GQA/MQA model with {kv} KV heads at -tp {tp}: "
                          "the tensor parallel size must exceed the KV heads and -dcp be at most "
                          f"tp // kv heads = {tp // kv}", hint="a larger -tp, or a smaller -dcp")
    if pp > model.num_layers:
        raise KvgateError(f"-pp {pp}: more pipeline stages than the model's {model.num_layers} layers",
                          hint="at most one stage per layer")


def _fit_auto(model: ModelSpec, weights: Term, gpu: Gpu, flags: VllmFlags, release: Release,
              multimodal: bool, pool_for: Any = None, dtype: str = "auto", ref: str | None = None) -> FitAnswer:
    """``--max-model-len auto``: vLLM takes the largest length its measured pool holds one
    request of (at most the model's); kvgate answers at the length that fits for sure and
    gives the range."""
    probe = fit_vllm(model, weights, gpu, replace(flags, max_model_len=None), release, multimodal=multimodal,
                     pool_for=pool_for, dtype=dtype, ref=ref)
    ml = probe.flip_points["max_model_len"]
    L = ml.get("sure") or ml.get("possible")
    if L is None:
        return probe
    a = fit_vllm(model, weights, gpu, replace(flags, max_model_len=L), release, multimodal=multimodal, pool_for=pool_for,
                 dtype=dtype, ref=ref)
    a.settings["defaults"]["max_model_len"] = "--max-model-len auto"
    a.notes.insert(0, f"--max-model-len auto: vLLM would pick between {_n(ml.get('sure'))} (sure) and "
                      f"{_n(ml.get('possible'))} (at best) from its measured pool; shown at {L:,}")
    return a


def _n(v: int | None) -> str:
    return "none" if v is None else f"{v:,}"


def _verdict(s: VllmSettings, gpu: Gpu, terms: list[Term], budget: Interval, pool: Interval, need: int, L: int,
             lo: dict[str, Any], hi: dict[str, Any], release: Release) -> tuple[str, str, str | None]:
    free_at_start = gpu.cuda_total - CONTEXT
    if s.v1 and budget.low > free_at_start.high:
        return ("no", "the requested share of the GPU is more than is free once the CUDA context exists",
                f"ValueError: Free memory on device ({free_at_start.high / GiB:.2f}/{gpu.cuda_total.high / GiB:.2f} GiB) "
                f"on startup is less than desired GPU memory utilization ({s.gpu_memory_utilization}, "
                f"{budget.low / GiB:.2f} GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")
    if pool.high <= 0:
        return ("no", "the non-KV terms take all the memory --gpu-memory-utilization gives vLLM",
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine.")
    if pool.high < need:
        return ("no", f"one request of --max-model-len {L:,} tokens needs more KV cache than the pool can hold",
                _too_long_error(s, L, need, pool.high, hi))
    # graphs captured after the KV cache (before 0.20): room = what utilization leaves + the freed activations
    graph = next(t for t in terms if t.name == "CUDA graph pool")
    act = next(t for t in terms if t.name.startswith("activation"))
    if not graph.counted and graph.value.high > 0:
        room = gpu.cuda_total - budget - CONTEXT + act.value
        if room.high < graph.value.low:
            return ("no", "the CUDA graphs are captured after the KV cache and no memory is left for them",
                    "torch.OutOfMemoryError: CUDA out of memory (during CUDA graph capture)")
        if room.low < graph.value.high:
            return ("unknown", "the pool holds a full-length request, but CUDA graph capture may run out of "
                    "memory (lower --gpu-memory-utilization or use --enforce-eager)", None)
    if pool.low <= 0 or pool.low < need:
        return ("unknown", "the pool's interval straddles one full-length request", None)
    return ("yes", f"the KV cache pool holds at least {lo['max_concurrency']:.2f} requests of {L:,} tokens", None)


def _too_long_error(s: VllmSettings, L: int, need: int, avail: int, hi: dict[str, Any]) -> str:
    tail = "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    if not s.v1:
        return (f"ValueError: The model's max seq len ({L}) is larger than the maximum number of tokens that can "
                f"be stored in KV cache ({hi['gpu_kv_cache_tokens_blocks']}). {tail}")
    return (f"ValueError: To serve at least one request with the models's max seq len ({L}), "
            f"({need / GiB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({avail / GiB:.2f} GiB). {tail}")


def _largest(ok: Any, lo: int, hi: int) -> int | None:
    """Largest x in [lo, hi] with ok(x) (ok monotone: true then false), or None."""
    first_bad = bisect.bisect_left(range(lo, hi + 1), True, key=lambda x: not ok(x))
    return lo + first_bad - 1 if first_bad else None


def flip_points_vllm(pr: _Predictor, flags: VllmFlags, s: VllmSettings) -> dict[str, Any]:
    """The flags' values where the answer changes, others held (each ``{sure, possible}``:
    at the pool's low end and at its high end):

    - ``max_model_len``: the largest ``--max-model-len`` one request of which fits;
    - ``max_num_seqs_at_max_model_len``: full-length requests that run at once, more queue
      (vLLM's "Maximum concurrency", floored);
    - ``gpu_memory_utilization``: the smallest ``--gpu-memory-utilization`` (2 decimals)
      at which one ``--max-model-len`` request fits;
    - ``gpu_memory_utilization_for_any_pool``: the smallest at which the non-KV terms leave
      any KV cache pool (``None``: not even at 1.0).
    """
    # the verdict's own limit: vLLM refuses --max-model-len above max_position_embeddings
    # (vllm/config/model.py _get_and_verify_max_len), so no flip point goes above it
    mpe = pr.model.max_position_embeddings
    limit = mpe or s.max_model_len

    def ok_at(L: int, end: str) -> bool:
        st = pr.settings(replace(flags, max_model_len=L))
        _, _, pool = pr.pool(st)
        p = pool.low if end == "low" else pool.high
        return p > 0 and pr.request_bytes(st, L) <= p

    out: dict[str, Any] = {
        "max_model_len": {"sure": _largest(lambda L: ok_at(L, "low"), 1, limit),
                          "possible": _largest(lambda L: ok_at(L, "high"), 1, limit)},
    }
    terms, _, pool = pr.pool(s)
    g = pr.geometry(s)
    conc = []
    for p in (pool.low, pool.high):
        c = vllm_kv_cache_report(g, p, s.max_model_len)["max_concurrency"] if p > 0 else 0.0
        conc.append(int(c) if c is not None else None)
    out["max_num_seqs_at_max_model_len"] = {"sure": conc[0], "possible": conc[1]}
    if mpe and s.max_model_len > mpe and not (pr.length and pr.length.allow_longer):  # refused at start: nothing runs, no share makes it run
        out["max_num_seqs_at_max_model_len"] = {"sure": 0, "possible": 0, "refused_above": mpe}
    elif s.kv_cache_memory_bytes is None:
        need = pr.request_bytes(s, s.max_model_len)
        nonkv = total(terms)
        cuda = pr.gpu.cuda_total

        def util_for(nk: int, tot: int, kv: int = need) -> float | None:
            u = Fraction(kv + nk, tot)
            cents = -(-u * 100 // 1)
            return float(cents) / 100 if cents <= 100 else None

        out["gpu_memory_utilization"] = {"sure": util_for(nonkv.high, cuda.low), "possible": util_for(nonkv.low, cuda.high)}
        # the share below which the non-KV terms leave no pool at all (one byte of KV cache)
        out["gpu_memory_utilization_for_any_pool"] = {"sure": util_for(nonkv.high, cuda.low, 1),
                                                      "possible": util_for(nonkv.low, cuda.high, 1)}
    return out
