"""Will it fit under llama.cpp? The KV buffer to the byte, model and compute buffers as
intervals, the verdict, the largest ``-c`` with every layer on the GPU, and how many
layers must stay on the CPU otherwise.

llama.cpp has no utilization share: it allocates what it is asked and fails if the GPU
cannot hold it (``ggml_backend_cuda_buffer_type_alloc_buffer: allocating … MiB on device
0: cudaMalloc failed: out of memory``; then ``llama_init_from_model: failed to initialize
the context: failed to allocate buffer for kv cache`` or ``… compute buffers``). On the GPU:

- **model buffer**: with ``-ngl`` above the layer count, every layer and the output tensor:
  [0.85, 1.00] × the file's bytes (token embeddings stay on the CPU: Pythia-2.8B f16 puts
  5049.71 MiB on the GPU); else the offloaded layers' share ``weights × ngl / n_layer`` ×
  [0.70, 1.00] (embeddings and output are up to 30% of a small model);
- **KV buffer**: exact, :class:`kvgate.geometry.LlamaCpp` (``-c``, ``-np``, ``-ctk/-ctv``,
  ``-fa``, ``-ub``, ``-kvu``), for the offloaded layers (KV follows its layer);
- **compute buffer** (``CUDA0 compute buffer size``): ``[max(Lg, A), 1.05 × (Lg + A)]`` with
  ``Lg = n_ubatch × vocab × 4`` (f32 logits) and ``A = n_ubatch × n_ctx_seq × n_head × 4``
  (the KQ scores, flash attention off; with ``-fa`` on the band is ``[Lg, 1.05 × (Lg + A)]``:
  no log with flash attention prints its compute buffer). Calibrated on two logs of
  ``tests/data/fit_logs``: Pythia-2.8B, ``-c 2048``, ub 512, FA off: 162.00 MiB in [128.0, 237.6];
  Qwen3-0.6B, ``-c 4096``, ub 512, FA off: 422.92 MiB in [296.8, 446.0].
- **CUDA context and cuBLAS**: 300–700 MiB (not printed by llama.cpp; the CUDA context
  alone is 0.49–0.59 GiB in the vLLM and SGLang logs).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kvgate.errors import KvgateError
from kvgate.fit.answer import FitAnswer
from kvgate.fit.gpus import Gpu
from kvgate.fit.interval import Interval, Term, total
from kvgate.fit.release import Release
from kvgate.geometry import KVGeometry, LlamaCpp
from kvgate.model import ModelSpec

MiB = 2**20
CONTEXT = Interval(300 * MiB, 700 * MiB)
HI = Fraction(105, 100)


@dataclass(frozen=True)
class LlamaCppFlags:
    """``llama-server`` / ``llama-cli`` memory flags: ``-c`` (whole context, 0 = the
    model's), ``-np``, ``-ctk``/``-ctv``, ``-ngl`` (default 999 = all, as recent builds),
    ``-fa`` (auto/on/off), ``-ub``, ``-b``, ``-kvu``."""

    ctx_size: int | None = None
    parallel: int = 1
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    n_gpu_layers: int = 999
    flash_attn: str = "auto"
    ubatch_size: int = 512
    batch_size: int = 2048
    kv_unified: bool = False

    def __post_init__(self) -> None:
        if self.flash_attn not in ("auto", "on", "off"):
            raise KvgateError(f"-fa {self.flash_attn!r}: one of on, off, auto")
        for k in ("parallel", "ubatch_size", "batch_size"):
            if getattr(self, k) <= 0:
                raise KvgateError(f"{k} must be positive")
        if self.n_gpu_layers < 0 or (self.ctx_size is not None and self.ctx_size < 0):
            raise KvgateError("-ngl and -c must not be negative")


def kv_geometry(model: ModelSpec, f: LlamaCppFlags) -> KVGeometry:
    """The llama.cpp KV geometry of ``model`` under ``f`` (``-np``, ``-kvu``, ``-ub``, ``-fa``,
    ``-b``, ``-ctk``/``-ctv``)."""
    lay = LlamaCpp(n_seq=f.parallel, unified=f.kv_unified, n_ubatch=f.ubatch_size, flash_attn=f.flash_attn,
                   n_batch=f.batch_size)
    return KVGeometry(model, f.cache_type_k, kv_format_v=f.cache_type_v, layout=lay)


def _per_seq(ctx: int, n_seq: int) -> int:
    return max(1, -(-ctx // n_seq))


def _kv_on_gpu(g: KVGeometry, ctx: int, n_seq: int, ngl: int) -> tuple[int, int]:
    """(KV bytes on the GPU, whole KV bytes) for ``-c ctx`` with the first ``ngl`` layers offloaded."""
    lay: LlamaCpp = g.layout  # type: ignore[assignment]
    L = _per_seq(ctx, n_seq)
    whole = lay.cache_bytes(g, L)
    n = g.model.num_layers
    if ngl >= n:
        return whole, whole
    # per layer: what the layout says it holds (its K + V cells, or its recurrent state)
    on = sum(lay.layer_cache_bytes(g, i, L) for i in range(ngl))
    return on, whole


def compute_buffer(model: ModelSpec, f: LlamaCppFlags, ctx: int) -> Interval:
    """The ``CUDA0 compute buffer size`` band at ``-c ctx`` (module docstring), bytes."""
    cfg = model.config or {}
    vocab = int(cfg.get("vocab_size") or 0)
    heads = max((l.num_kv_heads for l in model.layers), default=0)
    n_head = int(cfg.get("num_attention_heads") or heads or 0)
    ub = min(f.ubatch_size, f.batch_size)
    lg = ub * vocab * 4
    n_ctx_seq = _per_seq(ctx, f.parallel) if not f.kv_unified else ctx
    a = ub * n_ctx_seq * n_head * 4
    low = lg if f.flash_attn != "off" else max(lg, a)
    return Interval(low, int(-(-(lg + a) * HI // 1)))


def fit_llamacpp(model: ModelSpec, weights_bytes: int, weights_exact: bool, weights_source: str, gpu: Gpu,
                 flags: LlamaCppFlags, release: Release) -> FitAnswer:
    """Will ``model`` load into the GPU under llama.cpp with ``flags``?

    Returns:
        a :class:`FitAnswer`: ``kv_pool`` is the KV buffer on the GPU (exact, a point),
        ``tokens`` the cells per sequence (``n_ctx_seq``), ``budget`` the CUDA total.

    Raises:
        KvgateError: no ``-c`` and no context length in the model, bad flags.
    """
    ctx = flags.ctx_size or model.max_position_embeddings
    if not ctx:
        raise KvgateError("-c 0 (the model's context) but the model states no context length", hint="give -c N")
    g = kv_geometry(model, flags)
    terms, kv_gpu, kv_whole = _terms(model, g, flags, ctx, weights_bytes, weights_exact, weights_source)
    budget = gpu.cuda_total
    used = total(terms)
    left = budget - used
    n_ctx, n_ctx_seq, n_stream = g.layout.contexts(_per_seq(ctx, flags.parallel))  # type: ignore[attr-defined]
    if left.high < 0:
        fits, reason = "no", "model, KV and compute buffers are more than the GPU holds"
        err = ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating … MiB on device 0: cudaMalloc failed: out of "
               "memory; llama_init_from_model: failed to initialize the context")
    elif left.low < 0:
        fits, reason, err = "unknown", "the buffers' interval straddles the GPU's memory", None
    else:
        fits, reason, err = "yes", f"{_gib(left.low)} of the GPU stays free at least", None
    flips = _flips(model, g, flags, ctx, weights_bytes, weights_exact, weights_source, gpu)
    kv_mib = kv_whole / MiB
    lines = [f"llama_context: n_ctx = {n_ctx}, n_ctx_seq = {n_ctx_seq}, n_seq_max = {flags.parallel}",
             f"CUDA0 KV buffer size = {kv_gpu / MiB:.2f} MiB",
             f"llama_kv_cache: size = {kv_mib:.2f} MiB ({n_ctx_seq} cells, {model.num_layers} layers, "
             f"{flags.parallel}/{n_stream} seqs)"]
    return FitAnswer(
        engine="llama.cpp", release=release, gpu=gpu, model=model.name,
        settings={"ctx_size": ctx, "parallel": flags.parallel, "cache_type_k": flags.cache_type_k,
                  "cache_type_v": flags.cache_type_v, "n_gpu_layers": flags.n_gpu_layers, "flash_attn": flags.flash_attn,
                  "ubatch_size": flags.ubatch_size, "batch_size": flags.batch_size, "kv_unified": flags.kv_unified,
                  "n_ctx_seq": n_ctx_seq, "defaults": {} if flags.ctx_size else {"ctx_size": "-c 0: the model's"}},
        terms=terms, budget=budget, kv_pool=Interval.point(kv_gpu), tokens={"low": n_ctx_seq, "high": n_ctx_seq},
        max_concurrency={"low": float(flags.parallel), "high": float(flags.parallel)}, request_bytes=None,
        fits=fits, reason=reason, engine_error=err, log_lines={"low": lines, "high": lines}, flip_points=flips,
        notes=[f"-c {ctx:,} is the whole context: each of -np {flags.parallel} sequences gets n_ctx_seq = {n_ctx_seq:,}"],
        how_to_measure=("measure it: `kvgate run -- llama-server -m MODEL ...`, or `kvgate import-log` its log"
                        if fits == "unknown" else None),
    )


def _terms(model: ModelSpec, g: KVGeometry, f: LlamaCppFlags, ctx: int, wb: int, exact: bool, src: str,
           ngl: int | None = None) -> tuple[list[Term], int, int]:
    n = model.num_layers
    ngl = f.n_gpu_layers if ngl is None else ngl
    layers = min(ngl, n)
    if ngl > n:  # every layer and the output tensor; token embeddings stay on the CPU
        w = Interval.scaled(wb, Fraction(85, 100), Fraction(1))
    else:  # the repeating layers' share, less embeddings/output (up to 30% of a small model)
        w = Interval.scaled(wb * layers // n, Fraction(70, 100), Fraction(1))
    if not exact:
        w = Interval(w.low * 85 // 100, -(-w.high * 115 // 100))
    kv_gpu, kv_whole = _kv_on_gpu(g, ctx, f.parallel, ngl)
    terms = [
        Term("model buffer (weights on the GPU)", w,
             f"{src}: {layers}/{n} layers offloaded (-ngl {ngl})" + ("" if exact else ", ESTIMATE ×[0.85, 1.15]")),
        Term("KV buffer", Interval.point(kv_gpu), "kvgate.geometry LlamaCpp (exact)"),
        Term("compute buffer", compute_buffer(model, f, ctx), "[max(logits, KQ), 1.05 × (logits + KQ)]; two logs"),
        Term("CUDA context and cuBLAS", CONTEXT, "band: not printed by llama.cpp"),
    ]
    return terms, kv_gpu, kv_whole


def _flips(model: ModelSpec, g: KVGeometry, f: LlamaCppFlags, ctx: int, wb: int, exact: bool, src: str,
           gpu: Gpu) -> dict[str, Any]:
    """Largest ``-c`` (multiple of 256 × -np) with every layer on the GPU; CPU layers needed at ``-c``."""
    def left(c: int, ngl: int) -> Interval:
        terms, _, _ = _terms(model, g, f, c, wb, exact, src, ngl)
        return gpu.cuda_total - total(terms)

    step = 256 * f.parallel
    limit = max(ctx, (model.max_position_embeddings or 0))
    all_on = model.num_layers + 1

    def largest(end: str) -> int | None:
        lo, hi = 1, max(1, limit // step)
        def ok(k: int) -> bool:
            li = left(k * step, all_on)
            return (li.low if end == "low" else li.high) >= 0

        if not ok(lo):
            return None
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
        return lo * step

    def cpu_layers(end: str) -> int | None:
        for ngl in range(all_on, -1, -1):
            li = left(ctx, ngl)
            if (li.low if end == "low" else li.high) >= 0:
                return max(0, model.num_layers - min(ngl, model.num_layers))
        return None

    return {"ctx_size_all_layers_on_gpu": {"sure": largest("low"), "possible": largest("high")},
            "layers_on_cpu_at_ctx_size": {"sure": cpu_layers("low"), "possible": cpu_layers("high")}}


def _gib(b: int) -> str:
    return f"{b / 2**30:.2f} GiB"
