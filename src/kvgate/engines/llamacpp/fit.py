"""Will it fit under llama.cpp? The KV buffer to the byte, model and compute buffers as
intervals, the verdict, the largest ``-c`` with every layer on the GPU, and how many
layers must stay on the CPU otherwise.

llama.cpp has no utilization share: it allocates what it is asked and fails if the GPU
cannot hold it (``ggml_backend_cuda_buffer_type_alloc_buffer: allocating … MiB on device
0: cudaMalloc failed: out of memory``; then ``llama_init_from_model: failed to initialize
the context: failed to allocate buffer for kv cache`` or ``… compute buffers``). On the GPU:

- **model buffer** (:func:`model_buffer`): exact from the GGUF's tensor infos when the file
  has them (the last ``-ngl`` layers' ``blk.N`` tensors, the output above the layer count;
  ``src/llama-model.cpp`` ``load_tensors``); else, with ``-ngl`` above the layer count, every
  layer and the output tensor: [0.85, 1.00] × the file's bytes (token embeddings stay on the
  CPU: Pythia-2.8B f16 puts 5049.71 MiB on the GPU); else the offloaded layers' share
  ``weights × ngl / n_layer`` × [0.70, 1.00] (embeddings and output are up to 30% of a small
  model). Widths (:func:`graph_widths`) from a config.json or the GGUF's own keys;
- **KV buffer**: exact, :class:`kvgate.geometry.LlamaCpp` (``-c``, ``-np``, ``-ctk/-ctv``,
  ``-fa``, ``-ub``, ``-kvu``), for the offloaded layers (KV follows its layer);
- **compute buffer** (``CUDA0 compute buffer size``): :func:`compute_buffer`, the peak of
  the graph reserve's phases (``src/llama-context.cpp`` ``sched_reserve`` /
  ``graph_reserve``, llama.cpp 0c1e57098bba as vendored by llama-cpp-python 0.3.36), each
  with ``n`` = ``min(-c, -ub)`` tokens, ``n_kv`` the cells one stream reserves, ``E``
  = ``n × n_embd × 4``: attention with ``-fa off`` keeps the f32 KQ scores
  ``A = n × n_kv × n_head × 4`` and their f32 mask (``+ 5.5..7 E``); with ``-fa on`` (and
  ``auto``, which resolves to on where the backend has the kernel) no KQ matrix exists,
  only the f16 mask; the FFN ``2..3 × n × n_ff × 4 + mask + 2..4 E``; the logits
  ``rows × n_vocab × 4 + E``, ``rows`` = ``-ub`` up to b7000 and ``-np`` in llama-server
  at 0c1e57098bba (b11312) (``tools/server/server-context.cpp`` ``server_output_limits``; builds
  in between: both ends); with the output layer on the CPU (``-ngl`` ≤ layers) the
  offloaded matmul copies the output matrix in (+ its bytes). The band is
  ``[0.9 × max(lows), 1.15 × max(highs)]``, calibrated on 20 CPU reserves of tiny GGUFs
  (``benchmarks/results/llamacpp_compute_buffer.json``, FA on/off) and the logs of
  ``tests/data/fit_logs`` (``benchmarks/fit_logs_other.py`` prints each inside or not).
- **CUDA context and cuBLAS**: 300–700 MiB (not printed by llama.cpp; the CUDA context
  alone is 0.49–0.59 GiB in the vLLM and SGLang logs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from kvgate.engines.base import make_flags
from kvgate.engines.llamacpp.dtype import DEFAULT_CACHE_TYPE
from kvgate.engines.llamacpp.pool import FLASH_ATTN, FLASH_ATTN_DEFAULT, N_BATCH, N_UBATCH, PAD, LlamaCpp
from kvgate.errors import KvgateError
from kvgate.fit.answer import FitAnswer
from kvgate.fit.gpus import Gpu
from kvgate.fit.interval import Interval, Term, total
from kvgate.fit.release import Release
from kvgate.geometry import KVGeometry, get_format
from kvgate.model import ModelSpec, text_config
from kvgate.units import MiB

CONTEXT = Interval(300 * MiB, 700 * MiB)


@dataclass(frozen=True)
class LlamaCppFlags:
    """``llama-server`` / ``llama-cli`` memory flags: ``-c`` (whole context, 0 = the
    model's), ``-np``, ``-ctk``/``-ctv``, ``-ngl`` (default 999 = all, as recent builds),
    ``-fa`` (auto/on/off), ``-ub``, ``-b``, ``-kvu``; ``n_outputs_max`` the logits rows the
    graph reserve keeps (``None``: by release, :func:`logits_rows`); ``ngl_given`` whether
    ``-ngl`` was on the command line (``--fit`` leaves a given ``-ngl`` alone); ``fit`` the
    ``-fit on|off`` switch (``None``: the build's default, :func:`fit_on`); ``op_offload``
    false for ``--no-op-offload`` (CPU layers' ops stay on the CPU, :func:`_cpu_layer_phase`)."""

    ctx_size: int | None = None
    parallel: int = 1
    cache_type_k: str = DEFAULT_CACHE_TYPE
    cache_type_v: str = DEFAULT_CACHE_TYPE
    n_gpu_layers: int = 999
    flash_attn: str = FLASH_ATTN_DEFAULT
    ubatch_size: int = N_UBATCH
    batch_size: int = N_BATCH
    kv_unified: bool = False
    n_outputs_max: int | None = None
    ngl_given: bool = True
    fit: str | None = None
    fit_target: int | None = None
    host_memory: int | None = None
    op_offload: bool = True

    def __post_init__(self) -> None:
        if self.flash_attn not in FLASH_ATTN:
            raise KvgateError(f"-fa {self.flash_attn!r}: one of on, off, auto")
        for k in ("parallel", "ubatch_size", "batch_size"):
            if getattr(self, k) <= 0:
                raise KvgateError(f"{k} must be positive")
        if self.n_outputs_max is not None and self.n_outputs_max <= 0:
            raise KvgateError("n_outputs_max must be positive")
        if self.fit not in (None, "on", "off"):
            raise KvgateError(f"-fit {self.fit!r}: one of on, off")
        if self.fit_target is not None and self.fit_target < 0:
            raise KvgateError("-fitt must not be negative")
        if self.host_memory is not None and self.host_memory <= 0:
            raise KvgateError("--host-memory must be positive")
        if self.n_gpu_layers < 0 or (self.ctx_size is not None and self.ctx_size < 0):
            raise KvgateError("-ngl and -c must not be negative")


def build_flags(base: Any = None, /, **given: Any) -> LlamaCppFlags:
    """llama.cpp's flags, built once for every path (``kvgate fit``'s inputs, a log's flags
    for a what-if): :func:`kvgate.engines.base.make_flags`."""
    return make_flags(LlamaCppFlags, base, **given)


def kv_geometry(model: ModelSpec, f: LlamaCppFlags, release: Release | None = None) -> KVGeometry:
    """The llama.cpp KV geometry of ``model`` under ``f`` (``-np``, ``-kvu``, ``-ub``, ``-fa``,
    ``-b``, ``-ctk``/``-ctv``) in ``release`` (the context's padding, :func:`kv_pad`)."""
    lay = LlamaCpp(n_seq=f.parallel, unified=f.kv_unified, n_ubatch=f.ubatch_size, flash_attn=f.flash_attn,
                   n_batch=f.batch_size, pad=kv_pad(f, release))
    return KVGeometry(model, f.cache_type_k, kv_format_v=f.cache_type_v, layout=lay)


def _per_seq(ctx: int, n_seq: int) -> int:
    return max(1, -(-ctx // n_seq))


def _kv_on_gpu(g: KVGeometry, ctx: int, n_seq: int, ngl: int, release: Release | None = None) -> tuple[int, int]:
    """(KV bytes on the GPU, whole KV bytes) for ``-c ctx`` with the first ``ngl`` layers offloaded."""
    lay: LlamaCpp = g.layout  # type: ignore[assignment]
    L = _per_seq(ctx, n_seq)
    whole = lay.cache_bytes(g, L)
    n = g.model.num_layers
    if gpu_placement(n, ngl, release)[0] >= n:
        return whole, whole
    # per layer: what the layout says it holds (its K + V cells, or its recurrent state);
    # the offloaded layers are the last -ngl - 1, the output layer counting as one (:data:`PLACEMENT`)
    k, _ = gpu_placement(n, ngl, release)
    on = sum(lay.layer_cache_bytes(g, i, L) for i in range(n - k, n))
    return on, whole


#: last build whose graph reserve keeps logits for every token of the ubatch (``n_outputs
#: = n_tokens`` in ``graph_reserve``); later builds up to b11312 (0c1e57098bba, the newest
#: read, :data:`kvgate.fit.release.NEWEST`) keep ``-np`` rows in llama-server: both ends
ALL_ROWS_UP_TO = (7000,)
#: last build whose ``-fa`` was a switch, off unless given (no ``auto``)
FA_SWITCH_UP_TO = (6000,)
LOW, HIGH = Fraction(9, 10), Fraction(115, 100)
#: first build taken to have ``-fit``/``--fit``, on by default (``common/common.h``
#: ``fit_params = true``; ``common/arg.cpp`` ``-fit, --fit [on|off]``; ``common/fit.cpp``
#: ``common_params_fit_impl`` at 0c1e57098bba). The feature was merged in mid-December 2025,
#: near build b7400; the exact first build is approximate.
FIT_FROM = (7400,)
#: ``-fitt`` default: free memory --fit leaves per device (``common/common.h``
#: ``fit_params_target`` = 1024 MiB); ``-fitc`` default: the smallest context per stream it
#: reduces ``-c`` to (``fit_params_min_ctx`` = 4096).
FIT_TARGET = 1024 * MiB
FIT_MIN_CTX = 4096


#: first build taken to run 4 slots with one unified KV cache when ``-np`` is not given
#: (``tools/server/server.cpp`` at 0c1e57098bba: ``if (params.n_parallel < 0) { … n_parallel = 4;
#: kv_unified = true; }``, ``common/common.h`` ``n_parallel`` default -1 there). The build that
#: brought it is not known exactly (late 2025): taken as b7000; earlier builds ran 1 slot.
AUTO_SLOTS_FROM = (7000,)
AUTO_SLOTS = 4


def default_slots(release: Release | None = None) -> tuple[int, bool]:
    """``(slots, kv_unified)`` llama-server runs with when ``-np`` is not given (:data:`AUTO_SLOTS_FROM`)."""
    if release is None or release.version >= AUTO_SLOTS_FROM:
        return AUTO_SLOTS, True
    return 1, False


def fit_on(f: LlamaCppFlags, release: Release | None = None) -> bool:
    """Whether llama.cpp's ``--fit`` runs: ``-fit on|off`` as given, else on from
    :data:`FIT_FROM` (unknown release: on, as the newest modelled)."""
    if f.fit is not None:
        return f.fit == "on"
    return release is None or release.version >= FIT_FROM


def flash_attn_on(f: LlamaCppFlags, release: Release | None = None) -> bool:
    """Whether the graph has flash attention: ``on``; ``auto`` where the backend has the
    kernel (CUDA, Metal; ``llama-context.cpp`` ``resolve_fused_ops`` probes it) except in
    builds up to b6000, where ``-fa`` was a switch, off by default; ``off``."""
    if f.flash_attn == "auto":
        return not (release is not None and release.version <= FA_SWITCH_UP_TO)
    return f.flash_attn == "on"


#: builds that padded the context to 32 cells without flash attention, approximate ends:
#: from PR #7257 "llama : less KV padding when FA is off" (merged 2024-05-13, near b2860)
#: up to PR #16812 "memory : remove KV cache size padding" (merged 2025-10-28, near b6870)
PAD32_FROM, PAD32_BEFORE = (2860,), (6870,)


def kv_pad(f: LlamaCppFlags, release: Release | None = None) -> int:
    """Cells the context is rounded up to. From PR #7257 the padding was
    ``llama_kv_cache_get_padding`` (``llama.cpp``, later ``llama_kv_cache_unified::get_padding``
    in ``src/llama-kv-cache-unified.cpp``): ``return cparams.flash_attn ? 256u : 32u;``
    ("the FA kernels require padding to avoid extra runtime boundary checks"), applied as
    ``cparams.n_ctx = GGML_PAD(cparams.n_ctx, padding)``. PR #16812 removed the padding and
    PR #17046 (2025-11-06, "kv-cache : pad the cache size to 256") restored 256 whatever
    ``-fa`` says, as at 0c1e57098bba (:mod:`kvgate.engines.llamacpp.pool`). Seen in
    ``tests/data/fit_logs/llamacpp_b4846_pythia-1.4b-q4_k_apple-m4_ppl-c128_1.log``:
    ``-c 128`` without flash attention gives ``kv_size = 128``. 256 for an unknown build and
    for the weeks between #16812 and #17046 (no padding; not modelled)."""
    if release is None or flash_attn_on(f, release):
        return PAD
    return 32 if PAD32_FROM <= release.version < PAD32_BEFORE else PAD


def logits_rows(f: LlamaCppFlags, release: Release | None = None) -> tuple[int, int]:
    """``(low, high)`` rows of f32 logits the graph reserve keeps: ``n_outputs_max`` when
    given; every ubatch token up to b7000; at 0c1e57098bba llama-server keeps ``-np``
    (``server_output_limits``), llama-cli the ubatch; unknown builds: both ends."""
    ub = min(f.ubatch_size, f.batch_size)
    if f.n_outputs_max is not None:
        r = min(ub, f.n_outputs_max)
        return r, r
    if release is not None and release.version <= ALL_ROWS_UP_TO:
        return ub, ub
    return min(ub, f.parallel), ub


def _width(cfg: dict[str, Any], *keys: str) -> int:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, list):  # a per-layer GGUF array: the widest layer
            v = max((x for x in v if isinstance(x, int) and not isinstance(x, bool)), default=None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return 0


#: the largest vocabulary of the common models (Gemma 3: 262,144 tokens), the high end of
#: the logits when a GGUF states no vocabulary at all
VOCAB_HIGH = 262_144


@dataclass(frozen=True)
class GraphWidths:
    """The widths the graph reserve's phases depend on: ``n_embd``, ``n_head``, ``n_ff``
    (top-k × expert width for MoE), ``vocab`` (``None``: not available) and where the
    vocabulary came from; ``hf`` a config.json-shaped view for the parameter estimate."""

    n_embd: int
    n_head: int
    n_ff: int
    vocab: int | None
    vocab_source: str
    hf: dict[str, Any]


def graph_widths(model: ModelSpec) -> GraphWidths:
    """:class:`GraphWidths` of ``model``: a config.json's fields (``hidden_size``,
    ``intermediate_size``, ``vocab_size`` …), or a GGUF's own keys as llama.cpp reads them
    (``src/llama-model.cpp`` ``load_hparams``: ``{arch}.embedding_length``,
    ``{arch}.attention.head_count``, ``{arch}.feed_forward_length``,
    ``{arch}.expert_used_count`` × ``{arch}.expert_feed_forward_length``; the vocabulary
    from ``{arch}.vocab_size``, else the ``tokenizer.ggml.tokens`` count (llama.cpp's
    ``n_vocab``), else the ``output``/``token_embd`` tensor's ``ne[1]``).

    A GGUF without ``feed_forward_length`` (Mamba: no FFN) gives ``n_ff`` 0: the FFN phase
    drops out, and the term's source says so.

    Raises:
        KvgateError: a GGUF without ``embedding_length`` (every architecture states it).
    """
    cfg = model.config or {}
    arch = cfg.get("gguf_architecture")
    if not arch:
        tc = text_config(cfg)
        top_k = _width(tc, "num_experts_per_tok", "experts_per_token", "moe_topk")
        n_ff = (top_k * _width(tc, "moe_intermediate_size", "intermediate_size") if top_k
                else _width(tc, "intermediate_size", "ffn_dim", "n_inner"))
        vocab = _width(tc, "vocab_size") or None
        return GraphWidths(_width(tc, "hidden_size", "n_embd", "d_model"),
                           _width(tc, "num_attention_heads", "n_head") or max((l.num_kv_heads for l in model.layers), default=0),
                           n_ff, vocab, "config.json vocab_size" if vocab else "not available", cfg)
    k = f"{arch}."
    n_embd = _width(cfg, k + "embedding_length")
    top_k = _width(cfg, k + "expert_used_count")
    n_ff = (top_k * _width(cfg, k + "expert_feed_forward_length", k + "feed_forward_length") if top_k
            else _width(cfg, k + "feed_forward_length"))
    if not n_embd:
        raise KvgateError(f"GGUF key {k + 'embedding_length'!r} missing: llama.cpp's compute buffer cannot be sized",
                          hint="a GGUF written by convert_hf_to_gguf.py states it")
    tensors = cfg.get("gguf_tensors") or {}
    vocab, src = _width(cfg, k + "vocab_size"), f"GGUF {k}vocab_size"
    if not vocab:
        vocab, src = _width(cfg, "tokenizer_tokens"), "GGUF tokenizer.ggml.tokens count"
    for t in ("output", "token_embd"):
        if not vocab and t in tensors and len(tensors[t]["shape"]) == 2:
            vocab, src = int(tensors[t]["shape"][1]), f"GGUF {t}.weight shape"
    n_head = _width(cfg, k + "attention.head_count") or max((l.num_kv_heads for l in model.layers), default=0)
    hf = {"model_type": str(arch), "hidden_size": n_embd, "vocab_size": vocab or None,
          "num_hidden_layers": model.num_layers, "num_attention_heads": n_head,
          "num_key_value_heads": _width(cfg, k + "attention.head_count_kv") or n_head,
          "head_dim": _width(cfg, k + "attention.key_length") or None,
          "intermediate_size": _width(cfg, k + "feed_forward_length") or None,
          "max_position_embeddings": model.max_position_embeddings}
    if top_k:
        hf.update(num_experts_per_tok=top_k, num_local_experts=_width(cfg, k + "expert_count") or None,
                  moe_intermediate_size=_width(cfg, k + "expert_feed_forward_length") or None)
    return GraphWidths(n_embd, n_head, n_ff, vocab or None, src if vocab else "not available",
                       {kk: v for kk, v in hf.items() if v is not None})


def _output_matrix_bytes(model: ModelSpec, w: GraphWidths, weights_bytes: int | None) -> tuple[Fraction, Fraction, str]:
    """``(low, high, how)`` bytes of the output matrix: the GGUF's ``output.weight`` (or the
    tied ``token_embd.weight``) tensor info, exact; else its share ``vocab × n_embd /
    params`` of ``weights_bytes``, bytes per weight between the file's average and q6_K's
    0.8203 (or the average × 1.5 when higher); else 0.5 … 2 bytes per weight."""
    tensors = (model.config or {}).get("gguf_tensors") or {}
    for t in ("output", "token_embd"):
        if t in tensors:
            b = Fraction(tensors[t]["bytes"])
            return b, b, f"{t}.weight tensor info"
    out = (w.vocab or VOCAB_HIGH) * w.n_embd
    if weights_bytes:
        from kvgate.model.weights import estimate_params  # noqa: PLC0415

        try:
            params = estimate_params(w.hf)
        except KvgateError:
            params = 0
        if params > 0:
            per = Fraction(weights_bytes, params)
            q6 = Fraction(8203, 10000)
            return out * min(per, q6), out * max(per * 3 / 2, q6), "share of the weights"
    return Fraction(out, 2), Fraction(out * 2), "0.5 … 2 B per weight"


def compute_buffer(model: ModelSpec, f: LlamaCppFlags, ctx: int, *, release: Release | None = None,
                   ngl: int | None = None, weights_bytes: int | None = None) -> Interval:
    """The ``CUDA0 compute buffer size`` band at ``-c ctx`` with ``ngl`` layers offloaded
    (default ``f.n_gpu_layers``), bytes: :func:`compute_phases` × [0.9, 1.15] (module
    docstring: phases and calibration)."""
    lo, hi = compute_phases(model, f, ctx, release=release, ngl=ngl, weights_bytes=weights_bytes)
    return Interval(int(lo * LOW), int(-(-hi * HIGH // 1)))


def compute_phases(model: ModelSpec, f: LlamaCppFlags, ctx: int, *, release: Release | None = None,
                   ngl: int | None = None, weights_bytes: int | None = None) -> tuple[int, int]:
    """``(low, high)`` bytes of the largest phase of the graph reserve (module docstring),
    before the band's factors.

    ``weights_bytes`` (the file's) sizes the output matrix copied in when the output layer
    stays on the CPU: its share ``vocab × n_embd / params`` of the file, bytes per weight
    between the file's average and q6_K's 0.8203 (or the average × 1.5 when higher).
    """
    w = graph_widths(model)
    n_embd, n_head, n_ff = w.n_embd, w.n_head, w.n_ff
    v_lo, v_hi = (w.vocab, w.vocab) if w.vocab else (0, VOCAB_HIGH)  # not available: 0 … the largest
    n_seq = _per_seq(ctx, f.parallel) if not f.kv_unified else ctx
    n = min(f.ubatch_size, f.batch_size, ctx)
    pad = kv_pad(f, release)
    n_kv = -(-n_seq // pad) * pad  # the cache's cells, padded (:func:`kv_pad`)
    fa = flash_attn_on(f, release)
    e = n * n_embd * 4
    mask = n * n_kv * (2 if fa else 4)
    r_lo, r_hi = logits_rows(f, release)
    lo = [2 * n * n_ff * 4 + mask + 2 * e, r_lo * v_lo * 4 + e]
    hi = [3 * n * n_ff * 4 + mask + 4 * e, r_hi * v_hi * 4 + e]
    ngl = f.n_gpu_layers if ngl is None else ngl
    conv = _fa_f16_copies(model, f, n_kv, fa, n)
    if conv:  # the FA op's own allocation holds f16 copies of a quantized K and V
        lo.append(conv + mask + 2 * e)
        hi.append(conv + mask + 4 * e)
    k_gpu, out_on = gpu_placement(model.num_layers, ngl, release)
    # a CPU layer's ops run on the GPU when the reserve's ubatch reaches the offload batch
    offload = f.op_offload and n >= OP_OFFLOAD_MIN_BATCH and k_gpu < model.num_layers
    if k_gpu == 0 and not out_on and not offload:
        return 0, 0  # nothing of the graph runs on the GPU: no CUDA0 compute buffer is printed
    cpu = _cpu_layer_phase(model, f, ctx, k_gpu, n, mask, e, fa, w, weights_bytes) if offload else None
    if not fa and (ngl > 0 or offload):
        a = n * n_kv * n_head * 4
        kv_cp = cpu[2] if cpu else 0  # a CPU layer's K and V copied in for the KQ matmul
        lo.append(a + mask + e * 11 // 2 + kv_cp)
        hi.append(a + mask + 7 * e + kv_cp)
    if cpu:
        lo.append(cpu[0])
        hi.append(cpu[1])
    if not out_on and f.op_offload:  # output layer on the CPU (:data:`PLACEMENT`): its matmul is offloaded,
        w_lo, w_hi, _ = _output_matrix_bytes(model, w, weights_bytes)  # the matrix copied in, from 32 rows
        if r_lo >= OP_OFFLOAD_MIN_BATCH:
            lo.append(int(w_lo) + r_lo * v_lo * 4 + e)
        if r_hi >= OP_OFFLOAD_MIN_BATCH:
            hi.append(int(w_hi) + r_hi * v_hi * 4 + e)
    return max(lo), max(hi)


#: the batch from which the CUDA backend takes an op whose weight sits in host memory
#: (``ggml-cuda.cu`` at 0c1e57098bba: ``ggml_backend_cuda_device_offload_op`` returns
#: ``get_op_batch_size(op) >= op_offload_min_batch_size``, ``GGML_OP_OFFLOAD_MIN_BATCH`` else
#: 32; the batch of a ``MUL_MAT`` is ``ne[1]``, its rows; ``GET_ROWS`` never)
OP_OFFLOAD_MIN_BATCH = 32


def _cpu_layer_phase(model: ModelSpec, f: LlamaCppFlags, ctx: int, k_gpu: int, n: int, mask: int, e: int,
                     fa: bool, w: GraphWidths, weights_bytes: int | None) -> tuple[int, int, int]:
    """``(low, high, K + V copy)`` bytes of the CUDA compute buffer while a layer left on the
    CPU is computed in the worst-case (``-ub``-token) graph reserve.

    The engine (0c1e57098bba): ``ggml-backend.cpp`` ``ggml_backend_sched_backend_id_from_cur``
    gives an op whose weight is in a host buffer ("check if a backend with higher prio wants
    to offload the op") to the GPU when ``ggml_backend_offload_op`` says so (batch ≥ 32,
    :data:`OP_OFFLOAD_MIN_BATCH`; ``--no-op-offload`` turns it off). The CPU layers' weights
    sit in host memory (``llama-model.cpp`` ``make_cpu_buft_list``: the GPU's host buffer type
    ``CUDA_Host`` comes first), so at ``-ub 512`` every matmul and norm of a CPU layer runs on
    the GPU, and the weight-less ops around them follow ("expand gpu backends up and down"),
    flash attention included (its probe, 1 token a sequence, found it on the layer's device,
    so ``-fa auto`` stays on). Pass 5 then copies every input from the CPU into the GPU's
    compute buffer: each weight in a split of its own ("by starting a new split, the memory
    of the previously offloaded weights can be reused"), the layer's K and V views of the
    whole cache (the cache stays with its layer on the CPU), the mask once. So the buffer
    must hold
    - the attention split: K + V copies (the layer's cells × row bytes, of the cache type),
      the f16 copies CUDA's flash attention adds for a quantized cache
      (:func:`_fa_f16_copies`), the mask, Q, the output and the residual (3 E);
    - an FFN split: the largest weight of the layer (CUDA-sized: the GGUF's tensor infos, or
      ¼ … ½ of a layer's share of the weights), gate and up outputs (2 × ``n × n_ff × 4``)
      and 2 E;
    and ``ggml-alloc.c``'s best-fit allocator leaves the mask where the first attention split
    put it, above the K and V copies, so a weight copy that does not fit the hole below lands
    on top: the high end stacks both splits (with the largest attention weight before them).

    Checked on the pinned build's scheduler and allocator, the CUDA offload rule grafted onto
    an RPC device (zero-weight Llama-3.1-8B shape, 4 layers; benchmarks/RESULTS.md): F16
    ``-c 32768 -np 4 -kvu`` 320.00 MiB (the H100's logged 320 MiB at ``-ngl`` 0, 1 and 20),
    ``-c 8192`` 216.00, ``-ub 2048`` 688.01, ``-ub 256`` 180.00, Q8_0 257.00, Q4_0 185.00.
    """
    g = kv_geometry(model, f)
    lay: LlamaCpp = g.layout  # type: ignore[assignment]
    L = _per_seq(ctx, f.parallel)
    n_layer = model.num_layers
    cpu_ids = range(0, n_layer - k_gpu)
    f16 = get_format("f16")
    kv_cp = conv = 0
    for i in cpu_ids:
        spec = g.engine_specs[i]
        cells = lay.cells(spec, L)
        if not cells:
            continue
        k_b, v_b = cells * spec.k_bytes(g.fmt_k, 1), cells * spec.v_bytes(g.fmt_v, 1)
        c = 0
        if fa and g.fmt_k.name != f16.name:
            c += -(-cells * spec.k_bytes(f16, 1) // 128) * 128
        if fa and g.fmt_v.name != f16.name:
            c += -(-cells * spec.v_bytes(f16, 1) // 128) * 128
        if k_b + v_b + c > kv_cp + conv:
            kv_cp, conv = k_b + v_b, c
    t = (model.config or {}).get("gguf_tensors") or {}
    big = t.get("layer_max_cuda_bytes") or {}
    if big:
        w_lo = w_hi = max(big.get(i, 0) for i in cpu_ids)
        w_attn = max((t.get("layer_attn_max_cuda_bytes") or {}).get(i, 0) for i in cpu_ids)
    else:
        per = (weights_bytes or 2 * n_layer * 12 * w.n_embd * w.n_embd) // max(1, n_layer)
        w_lo, w_hi, w_attn = per // 4, per // 2, per // 4
    ff = 2 * n * w.n_ff * 4
    attn = kv_cp + conv + mask + 3 * e
    lo = max(attn, w_lo + ff + 2 * e)
    hi = 2 * e + w_attn + kv_cp + conv + mask + w_hi + ff
    return lo, hi, kv_cp


def _fa_f16_copies(model: ModelSpec, f: LlamaCppFlags, n_kv: int, fa: bool, n: int = 512) -> int:
    """Bytes of the f16 copies the CUDA flash-attention op allocates for a K or V cache that is
    not f16 (``ggml-cuda/fattn.cu`` ``ggml_cuda_flash_attn_ext_get_alloc_size`` at 0c1e57098bba:
    the MMA/tile kernels a 512-token ubatch uses need f16 K and V; ``fattn-common.cuh``
    ``ggml_cuda_flash_attn_ext_get_f16_extra_data`` adds ``ggml_nelements(K) × 2`` and the same
    for V, each 128-aligned): ``n_kv`` cells × streams × the widest layer's K (V) width × 2 B.
    An H100 run at ``-c 65536 -np 2 -ctk q8_0 -ctv q8_0`` (Llama-3.1-8B): 2 × 32,768 × 1,024 ×
    2 B × (K, V) = 256 MiB of its 320.09 MiB compute buffer (issue 26).

    ``fattn.cu`` ``ggml_cuda_get_best_fattn_kernel``: on tensor-core GPUs a quantized cache
    takes the vector kernel (no f16 copies: ``ggml_cuda_get_fattn_vec_case`` has q8_0/q4_0)
    only while a stream has at most 2 tokens (``Q->ne[1] <= 2``, Ada and Hopper); the
    ``n``-token reserve gives each of the streams ``n / streams``."""
    if not fa:
        return 0
    streams = 1 if f.kv_unified else f.parallel
    if n // streams <= 2:
        return 0
    att = [ly for ly in model.layers if ly.num_kv_heads > 0]
    if not att:
        return 0
    k_w = max(ly.num_kv_heads * ly.head_dim for ly in att)
    v_w = max(ly.num_kv_heads * (ly.v_head_dim or ly.head_dim) for ly in att)
    b = 0
    f16 = get_format("f16").name  # the cache types as kvgate names them: -ctk f16 and fp16 are one type
    if get_format(f.cache_type_k).name != f16:
        b += -(-n_kv * streams * k_w * 2 // 128) * 128
    if get_format(f.cache_type_v).name != f16:
        b += -(-n_kv * streams * v_w * 2 // 128) * 128
    return b


def fit_llamacpp(model: ModelSpec, weights_bytes: int, weights_exact: bool, weights_source: str, gpu: Gpu,
                 flags: LlamaCppFlags, release: Release) -> FitAnswer:
    """Will ``model`` load into the GPU under llama.cpp with ``flags``?

    Returns:
        a :class:`FitAnswer`: ``kv_pool`` is the KV buffer on the GPU (exact, a point),
        ``tokens`` the cells of all sequences (``n_ctx``), ``tokens_per_sequence`` each one's
        (``n_ctx_seq``), ``budget`` the CUDA total.

    Raises:
        KvgateError: no ``-c`` and no context length in the model, bad flags.
    """
    ctx = flags.ctx_size or model.max_position_embeddings
    if not ctx:
        raise KvgateError("-c 0 (the model's context) but the model states no context length", hint="give -c N")
    g = kv_geometry(model, flags, release)
    fitted = None
    if fit_on(flags, release):
        fitted = auto_fit(model, g, flags, ctx, weights_bytes, weights_exact, weights_source, gpu, release)
        ctx, ngl = fitted["sure"] or fitted["possible"] or fitted["fallback"]
        flags = replace(flags, n_gpu_layers=ngl)
    terms, kv_gpu, kv_whole = _terms(model, g, flags, ctx, weights_bytes, weights_exact, weights_source,
                                     release=release)
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
    if flags.kv_unified and flags.parallel > 1:  # one stream: any sequence may grow to all of it
        notes = [f"-c {ctx:,} is one KV cache shared by the -np {flags.parallel} sequences (unified): together "
                 f"they hold {n_ctx:,} cells, one alone up to n_ctx_seq = {n_ctx_seq:,}"]
    else:
        notes = [f"-c {ctx:,} is the whole context: each of -np {flags.parallel} "
                 f"sequence{'s' if flags.parallel != 1 else ''} gets n_ctx_seq = {n_ctx_seq:,}"]
    if fitted is not None and fitted["changed"]:
        fits, reason, err, fit_note = _fit_verdict(fitted, model.num_layers, ctx, fits, reason, err)
        notes.insert(0, fit_note)
    elif fitted is None and not flags.ngl_given and fits == "no":
        notes.append("this build has no --fit (llama.cpp adds it, on by default, near b7400): give -ngl to keep "
                     "layers on the CPU")
    host = host_need(model, flags, weights_bytes, kv_whole - kv_gpu, release)
    if host["verdict"] == "no" and fits != "no":
        fits, reason = "no", host["said"]
        err = "std::bad_alloc / the kernel's out-of-memory killer (host RAM)"
    elif host["verdict"] == "unknown" and fits == "yes":
        fits, reason = "unknown", host["said"]
    if host["cpu_layers"] or host["kv_bytes"]:
        notes.append(host["said"])
    # while --fit moves layers, the -ngl flip point is its pick (1024 MiB left free): one -ngl figure;
    # where --fit finds nothing, the flip point is the edge a given -ngl may still reach
    acts = fitted is not None and fitted["changed"] and (fitted["sure"] or fitted["possible"]) is not None
    margin = FIT_TARGET if acts and not flags.ngl_given else 0
    flips = _flips(model, g, flags, ctx, weights_bytes, weights_exact, weights_source, gpu, release, margin)
    nct = model.max_position_embeddings
    if nct:
        cap = flips["ctx_size_cap"]
        if flips["ctx_size_all_layers_on_gpu"]["possible"] == cap:
            notes.append(f"-c flip points stop at n_ctx_train {nct:,} × {cap // nct} stream(s) = {cap:,}: "
                         "beyond it a sequence passes the model's trained context")
        if n_ctx_seq > nct:
            notes.append(f"n_ctx_seq {n_ctx_seq:,} is above n_ctx_train {nct:,}: llama.cpp warns \"n_ctx_seq "
                         f"({n_ctx_seq}) > n_ctx_train ({nct}) -- possible training context overflow\"")
    kv_mib = kv_whole / MiB
    # the KV buffers as llama_kv_cache prints them: the CPU layers' first, then the GPU's, each only when
    # it holds a layer (the H100 runs of benchmarks/llamacpp_gpu_buffers.py: -ngl 0 prints the CPU line alone)
    kv_lines = ([f"CPU KV buffer size = {(kv_whole - kv_gpu) / MiB:.2f} MiB"] if kv_whole > kv_gpu else []) + \
        ([f"{ggml_device(gpu)} KV buffer size = {kv_gpu / MiB:.2f} MiB"] if kv_gpu else [])
    lines = [f"llama_context: n_ctx = {n_ctx}, n_ctx_seq = {n_ctx_seq}, n_seq_max = {flags.parallel}",
             *kv_lines,
             f"llama_kv_cache: size = {kv_mib:.2f} MiB ({n_ctx_seq} cells, {model.num_layers} layers, "
             f"{flags.parallel}/{n_stream} seqs)"]
    return FitAnswer(
        engine="llama.cpp", release=release, gpu=gpu, model=model.name,
        settings={"ctx_size": ctx, "parallel": flags.parallel, "cache_type_k": flags.cache_type_k,
                  "cache_type_v": flags.cache_type_v, "n_gpu_layers": flags.n_gpu_layers, "flash_attn": flags.flash_attn,
                  "ubatch_size": flags.ubatch_size, "batch_size": flags.batch_size, "kv_unified": flags.kv_unified,
                  "n_ctx_seq": n_ctx_seq, "fit": "on" if fitted is not None else "off",
                  "host_memory": {k: v for k, v in host.items() if k != "said"}, "defaults": {} if flags.ctx_size else {"ctx_size": "-c 0: the model's"}},
        terms=terms, budget=budget, kv_pool=Interval.point(kv_gpu), tokens={"low": n_ctx, "high": n_ctx},
        tokens_per_sequence={"low": n_ctx_seq, "high": n_ctx_seq},
        max_concurrency={"low": float(flags.parallel), "high": float(flags.parallel)},
        max_concurrency_printed={"low": f"n_seq_max = {flags.parallel}", "high": f"n_seq_max = {flags.parallel}"},
        request_bytes=None,
        fits=fits, reason=reason, engine_error=err, log_lines={"low": lines, "high": lines}, flip_points=flips,
        notes=notes,
        how_to_measure=("measure it: `kvgate run -- llama-server -m MODEL ...`, or `kvgate import-log` its log"
                        if fits == "unknown" else None),
    )


#: CUDA memory already taken when ``--fit`` reads the device's free memory
#: (``common/fit.cpp`` ``common_get_device_memory_data_impl``: ``ggml_backend_dev_memory`` →
#: ``cudaMemGetInfo`` after the CUDA context exists): llama-server on an H100 at 0c1e57098bba
#: used 520–593 MiB beyond its CUDA0 buffers (issue 26's 40 runs), the band taken here.
FIT_CONTEXT = Interval(520 * MiB, 593 * MiB)


def fit_free(gpu: Gpu) -> Interval:
    """The free device memory ``--fit`` sees: the CUDA total less :data:`FIT_CONTEXT`."""
    free: Interval = gpu.cuda_total - FIT_CONTEXT
    return free


def auto_fit(model: ModelSpec, g: KVGeometry, f: LlamaCppFlags, ctx: int, wb: int, exact: bool, src: str,
             gpu: Gpu, release: Release | None = None) -> dict[str, Any]:
    """What llama.cpp's ``--fit`` sets on one GPU, as ``common/fit.cpp``
    ``common_params_fit_impl`` (0c1e57098bba) decides it. Its projection is the device's
    model + context (KV) + compute buffers (``llama_get_memory_breakdown`` of a no-alloc
    load; no CUDA context, no cuBLAS), against the free memory (:func:`fit_free`) less the
    margin ``fit_params_target`` (``-fitt``, default 1024 MiB):

    1. ``projected_free >= margin``: no change;
    2. ``-c`` not given (``n_ctx_auto``): the context is set between ``n_ctx_min_total`` (``-fitc``
       4096 × streams) and ``n_ctx_max`` (n_ctx_train × streams) by linear interpolation,
       ``n_ctx_min + (n_ctx_max - n_ctx_min) × (target - used_min) / (used_max - used_min)``,
       rounded down to 256 × streams; if ``target > used_min`` that is the answer (one device),
       else ``n_ctx`` stays at the minimum and layers move;
    3. ``-ngl`` given: ``"n_gpu_layers already set by user … abort"`` (nothing changes);
    4. else whole layers from the back (the output layer first, it counts as one), the most
       whose projection stays under the target (false position ends on the largest that
       fits); kvgate moves whole layers also for MoE models, where llama.cpp may move only
       the expert tensors.

    Nothing here looks at host memory: layers and KV moved off the GPU go to host RAM however
    large (:func:`host_need`).

    Returns:
        ``{"sure", "possible", "changed", "ctx_in", "ctx_auto", "n_gpu_layers_in", "margin"}``:
        ``sure`` / ``possible`` the ``(ctx, n_gpu_layers)`` chosen at the high / low end of the
        projection and the low / high end of the free memory (``None``: no layer count meets
        the target); ``fallback`` the ``(ctx, n_gpu_layers)`` llama.cpp goes on with then
        (``-ngl 0``, or the ``-ngl`` given, at the smallest auto context); ``changed`` whether
        either pick differs from the input.
    """
    n = model.num_layers
    streams = 1 if f.kv_unified else f.parallel
    ctx_auto = not f.ctx_size
    align = 256 * streams
    c_max = ctx if not ctx_auto else (model.max_position_embeddings or ctx) * streams
    c_min = min(FIT_MIN_CTX * streams, c_max)
    margin = FIT_TARGET if f.fit_target is None else f.fit_target
    free = fit_free(gpu)

    def used(c: int, ngl: int, end: str) -> int:
        terms, _, _ = _terms(model, g, f, c, wb, exact, src, ngl, release)
        p = total(terms[:3])  # model, KV, compute: the breakdown --fit measures
        return p.high if end == "low" else p.low

    def pick(end: str) -> tuple[int, int] | None:
        target = (free.low if end == "low" else free.high) - margin
        ngl0 = f.n_gpu_layers
        u_max = used(c_max, ngl0, end)
        if u_max <= target:
            return c_max, ngl0
        c = c_max
        if ctx_auto and c_max > c_min:
            u_min = used(c_min, ngl0, end)
            c = c_min
            if target > u_min:
                n_ctx = c_min + (c_max - c_min) * (target - u_min) // max(1, u_max - u_min)
                return max(n_ctx - n_ctx % align, c_min), ngl0
        if f.ngl_given:
            return None
        for ngl in range(min(ngl0, n + 1), -1, -1):
            if used(c, ngl, end) <= target:
                return c, ngl
        return None

    sure, possible = pick("low"), pick("high")
    same = (c_max, f.n_gpu_layers)
    # no pick meets the target: --fit does not stop the server. The context step has left n_ctx at
    # its minimum (-c not given); then with -ngl given it aborts the fit ("n_gpu_layers already set by
    # user", a common_params_fit_exception: the settings stay), else its back-to-front fill ends at
    # 0 layers and set_ngl_tensor_split_tbo writes -ngl 0 (common/fit.cpp 0c1e57098bba)
    fallback = (c_min if ctx_auto else c_max, f.n_gpu_layers if f.ngl_given else 0)
    return {"sure": sure, "possible": possible, "fallback": fallback,
            "changed": sure != same or possible != same,
            "ctx_in": c_max, "ctx_auto": ctx_auto, "n_gpu_layers_in": f.n_gpu_layers, "margin": margin}


def host_need(model: ModelSpec, f: LlamaCppFlags, weights_bytes: int, kv_host: int,
              release: Release | None = None) -> dict[str, Any]:
    """Host RAM for what llama.cpp keeps off the GPU under ``f`` (after ``--fit``): the weights of
    :func:`host_weights` (mapped from the file: page cache, needed resident to run at speed) and
    ``kv_host``, the KV of the CPU layers (allocated, ``CPU KV buffer``), against
    :func:`host_memory_total`. ``verdict``: ``no`` when even the low end exceeds the host's
    memory, ``unknown`` when the interval straddles it, ``yes`` otherwise (and when unknown)."""
    w = host_weights(model, weights_bytes, f.n_gpu_layers, release)
    need = Interval(w.low + kv_host, w.high + kv_host)
    have, src = host_memory_total(f.host_memory)
    layers, _ = gpu_placement(model.num_layers, f.n_gpu_layers, release)
    cpu = model.num_layers - layers
    what = (f"host RAM: {_gib(need.low)}" + (f" … {_gib(need.high)}" if need.high != need.low else "")
            + f" (weights of {cpu} CPU layer(s) and the token embeddings, {_gib(kv_host)} KV)")
    if have is None:
        verdict, said = "yes", what + "; the host's memory is not available (give --host-memory)"
    elif need.low > have:
        verdict, said = "no", what + f" is more than the host's {_gib(have)} ({src})"
    elif need.high > have:
        verdict, said = "unknown", what + f" may be more than the host's {_gib(have)} ({src})"
    else:
        verdict, said = "yes", what + f" of the host's {_gib(have)} ({src})"
    return {"weights_low": w.low, "weights_high": w.high, "kv_bytes": kv_host, "need_low": need.low,
            "need_high": need.high, "host_bytes": have, "host_source": src, "verdict": verdict, "said": said, "cpu_layers": cpu}


def host_memory_total(given: int | None = None) -> tuple[int | None, str]:
    """``(bytes, source)`` of the host's memory: ``--host-memory`` when given, else psutil's
    ``virtual_memory().total`` of this machine, else ``os.sysconf`` pages × page size."""
    if given is not None:
        return given, "--host-memory"
    try:
        import psutil  # noqa: PLC0415

        return int(psutil.virtual_memory().total), "this machine's memory (psutil)"
    except (ImportError, OSError):
        import os  # noqa: PLC0415

        try:
            return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "this machine's memory (sysconf)"
        except (ValueError, OSError, AttributeError):
            return None, "not available"


def host_weights(model: ModelSpec, weights_bytes: int, ngl: int, release: Release | None = None) -> Interval:
    """Weights llama.cpp keeps in host memory under ``-ngl ngl`` (:data:`PLACEMENT`): the token
    embeddings always, the CPU layers' ``blk.N``, and the output layer when it stays on the CPU;
    exact from the GGUF's tensor infos, else the file's bytes less :func:`model_buffer`."""
    n = model.num_layers
    layers, out_on = gpu_placement(n, ngl, release)
    t = (model.config or {}).get("gguf_tensors") or {}
    if t.get("layer_bytes"):
        per = t["layer_bytes"]
        b = sum(per.get(i, 0) for i in range(0, n - layers)) + t.get("token_embd", {}).get("bytes", 0)
        if not out_on:
            b += t.get("output", {}).get("bytes", 0) + t.get("other_bytes", 0)
        return Interval.point(b)
    w, _ = model_buffer(model, weights_bytes, ngl, release)
    return Interval(max(0, weights_bytes - w.high), max(0, weights_bytes - w.low))


def ggml_device(gpu: Gpu) -> str:
    """ggml's name of the first GPU device, as the buffer lines print it: ``ROCm0`` for an AMD card
    (a HIP build: ``ggml/include/ggml-cuda.h`` defines ``GGML_CUDA_NAME "ROCm"`` under
    ``GGML_USE_HIP``), else ``CUDA0``. An AMD card is one whose total is quoted from rocm-smi
    (:data:`kvgate.fit.gpus.GPU_TABLE`)."""
    return "ROCm0" if gpu.source.lstrip().startswith("rocm-smi") else "CUDA0"


def _fit_verdict(fitted: dict[str, Any], n: int, ctx: int, fits: str, reason: str,
                 err: str | None) -> tuple[str, str, str | None, str]:
    """The verdict and a note for what ``--fit`` chose (:func:`auto_fit`)."""
    sure, possible = fitted["sure"], fitted["possible"]

    def said(p: tuple[int, int] | None) -> str:
        if p is None:
            return "nothing fits"
        c, ngl = p
        parts = []
        if c != fitted["ctx_in"]:
            parts.append(f"-c {c:,}")
        if ngl != fitted["n_gpu_layers_in"]:
            parts.append(ngl_words(ngl, n))
        return ", ".join(parts) or "no change"

    what = said(sure) if sure == possible else f"{said(sure)} for sure, {said(possible)} at best"
    moved = any(p is not None and p[1] != fitted["n_gpu_layers_in"] for p in (sure, possible))
    note = (f"llama.cpp's --fit (on by default; -fit off to stop it) leaves {fitted['margin'] // MiB} MiB free: {what}"
            + ("; layers on the CPU run slower" if moved else ""))
    if sure is not None:
        return "yes", f"--fit sets {said(sure)}", None, note
    if possible is not None:
        return "unknown", f"--fit may set {said(possible)}; the buffers' interval straddles the GPU's memory", None, note
    # the fit failed and llama.cpp goes on with its fallback: the verdict is the buffers' at that placement
    note += f"; llama.cpp goes on with {said(fitted['fallback'])}"
    return fits, reason, err, note


def _terms(model: ModelSpec, g: KVGeometry, f: LlamaCppFlags, ctx: int, wb: int, exact: bool, src: str,
           ngl: int | None = None, release: Release | None = None) -> tuple[list[Term], int, int]:
    n = model.num_layers
    ngl = f.n_gpu_layers if ngl is None else ngl
    layers, out_on = gpu_placement(n, ngl, release)
    w, how = model_buffer(model, wb, ngl, release)
    if not exact:
        w = Interval(w.low * 85 // 100, -(-w.high * 115 // 100))
        how += ", ESTIMATE ×[0.85, 1.15]"
    kv_gpu, kv_whole = _kv_on_gpu(g, ctx, f.parallel, ngl, release)
    terms = [
        Term("model buffer (weights on the GPU)", w, f"{src}: {layers}/{n} layers"
             f"{' and the output layer' if out_on and layers < n else ''} offloaded (-ngl {ngl}); {how}"),
        Term("KV buffer", Interval.point(kv_gpu), "kvgate.geometry LlamaCpp (exact)"),
        Term("compute buffer", compute_buffer(model, f, ctx, release=release, ngl=ngl, weights_bytes=wb),
             "graph reserve phases (FA " + ("on" if flash_attn_on(f, release) else "off") + ") × [0.9, 1.15]; "
             "tiny-GGUF reserves and tests/data/fit_logs" + _vocab_said(model)),
        Term("CUDA context and cuBLAS", CONTEXT, "band: not printed by llama.cpp"),
    ]
    return terms, kv_gpu, kv_whole


#: ``src/llama-model.cpp`` ``load_tensors`` (llama.cpp 0c1e57098bba): the input layer (token
#: embeddings) always gets the CPU's buffer type; with ``i_gpu_start = std::max(n_layer_all + 1 -
#: n_gpu_layers, 0)`` and ``act_gpu_layers = std::min(n_gpu_layers, n_layer_all + 1)``, layer
#: ``il`` (the output layer is ``il = n_layer``) is on the GPU when ``il >= i_gpu_start``: the
#: output layer counts as a layer, so ``-ngl k`` puts the last ``k - 1`` repeating layers and the
#: output layer on the GPU (``-ngl 20`` of 32: 19 + output; ``-ngl 1``: the output alone).
#: A model without ``output.weight`` (tied head: Gemma 3) loads ``token_embd`` again as the output
#: (``src/models/gemma3.cpp``: ``output = create_tensor(tn(LLM_TENSOR_TOKEN_EMBD, "weight"), …,
#: TENSOR_DUPLICATED)``) into the output layer's buffer: a second copy on the GPU.
PLACEMENT = "llama.cpp src/llama-model.cpp load_tensors"


#: last build whose ``load_tensors`` had ``i_gpu_start = std::max((int) hparams.n_layer -
#: n_gpu_layers, (int) 0)`` and the output on the GPU only for ``-ngl`` > layers: a b4459 log
#: (tests/data/fit_logs, Pythia-2.8B -ngl 10) holds 10 layers' KV. At b11312 (0c1e57098bba)
#: the output layer counts (:data:`PLACEMENT`); the build in between where it changed is not
#: known: kvgate switches after b4459.
OUTPUT_NOT_COUNTED_UP_TO = (4459,)


def counts_output(release: Release | None = None) -> bool:
    """Whether ``-ngl`` counts the output layer as one (:data:`OUTPUT_NOT_COUNTED_UP_TO`)."""
    return not (release is not None and release.version <= OUTPUT_NOT_COUNTED_UP_TO)


def gpu_placement(n_layer: int, ngl: int, release: Release | None = None) -> tuple[int, bool]:
    """``(repeating layers on the GPU, output layer on the GPU)`` for ``-ngl ngl`` (:data:`PLACEMENT`):
    layers ``max(n_layer + 1 - ngl, 0) … n_layer - 1`` and the output layer when ``ngl ≥ 1``; up
    to b4459 the last ``ngl`` layers and the output when ``ngl > n_layer``."""
    if not counts_output(release):
        return max(0, min(ngl, n_layer)), ngl > n_layer
    act = max(0, min(ngl, n_layer + 1))
    return max(0, act - 1), act >= 1


def model_buffer(model: ModelSpec, weights_bytes: int, ngl: int,
                 release: Release | None = None) -> tuple[Interval, str]:
    """``(bytes on the GPU, how)`` of the ``CUDA0 model buffer`` with ``-ngl ngl`` (:data:`PLACEMENT`).

    From the GGUF's tensor infos when the file has them (exact): the CUDA sizes
    (:func:`kvgate.model.gguf.cuda_alloc_bytes`: quantized rows padded to 512, each tensor to
    128 B) of ``blk.N`` of the offloaded layers, plus, with the output layer on the GPU,
    ``output`` (or the tied ``token_embd``'s copy) and ``output_norm``. Else ``weights_bytes``
    spread over the layers: every layer and the output × [0.85, 1.00] (the token embeddings,
    up to 15% of the file, stay on the CPU: Pythia-2.8B f16 puts 5049.71 MiB of its file on
    the GPU); or the offloaded layers' share ``weights × layers / n_layer`` × [0.70, 1.00], plus
    the output matrix (:func:`_output_matrix_bytes`) when the output layer is on the GPU.
    """
    n = model.num_layers
    layers, out_on = gpu_placement(n, ngl, release)
    t = (model.config or {}).get("gguf_tensors") or {}
    if t.get("layer_bytes"):
        per = t.get("layer_cuda_bytes") or t["layer_bytes"]
        b = sum(per.get(i, 0) for i in range(n - layers, n))
        how = f"exact from the GGUF's tensor infos, token embeddings on the CPU ({PLACEMENT})"
        if out_on:
            head = t.get("output") or t.get("token_embd") or {}
            b += head.get("cuda_bytes", head.get("bytes", 0)) + t.get("other_cuda_bytes", t.get("other_bytes", 0))
            if "output" not in t and "token_embd" in t:
                how += "; tied output: token_embd copied to the GPU as output"
        return Interval.point(b), how
    if layers >= n and out_on:
        return (Interval.scaled(weights_bytes, Fraction(85, 100), Fraction(1)),
                f"×[0.85, 1.00]: the token embeddings stay on the CPU ({PLACEMENT})")
    share = Interval.scaled(weights_bytes * layers // n, Fraction(70, 100), Fraction(1))
    if not out_on:
        return share, f"the layers' share ×[0.70, 1.00]: embeddings and output are not in the layers ({PLACEMENT})"
    w_lo, w_hi, how = _output_matrix_bytes(model, graph_widths(model), weights_bytes)
    return (Interval(share.low + int(w_lo), share.high + int(w_hi)),
            f"the layers' share ×[0.70, 1.00] + the output matrix ({how}) ({PLACEMENT})")


def _vocab_said(model: ModelSpec) -> str:
    """Where the logits' vocabulary came from, said for a GGUF (its keys are not config.json's)."""
    if "gguf_architecture" not in (model.config or {}):
        return ""
    w = graph_widths(model)
    ffn = "" if w.n_ff else "; no feed_forward_length in the GGUF: no FFN phase"
    if w.vocab is None:
        return f"; vocabulary not available in the GGUF: logits 0 … {VOCAB_HIGH:,} tokens" + ffn
    return f"; vocabulary {w.vocab:,} tokens ({w.vocab_source})" + ffn


def _flips(model: ModelSpec, g: KVGeometry, f: LlamaCppFlags, ctx: int, wb: int, exact: bool, src: str,
           gpu: Gpu, release: Release | None = None, margin: int = 0) -> dict[str, Any]:
    """Largest ``-c`` (multiple of 256 × -np) with every layer on the GPU; the largest ``-ngl``
    at ``-c`` that leaves ``margin`` bytes free (``--fit``'s :data:`FIT_TARGET` while it moves
    layers, so the flip point is the ``-ngl`` the verdict names; else 0) and the layers it
    keeps on the CPU (:func:`gpu_layers`)."""
    def left(c: int, ngl: int) -> Interval:
        terms, _, _ = _terms(model, g, f, c, wb, exact, src, ngl, release)
        return gpu.cuda_total - total(terms)

    step = 256 * f.parallel
    # the largest -c: n_ctx_train × streams (-c 0 and --fit's n_ctx_max, common/fit.cpp); above it
    # each sequence passes n_ctx_train (llama-context.cpp warns "n_ctx_seq > n_ctx_train")
    streams = 1 if f.kv_unified else f.parallel
    limit = (model.max_position_embeddings or 0) * streams or ctx
    n = model.num_layers
    all_on = n + 1

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

    def ngl_at(end: str) -> int | None:  # the -ngl to pass: the most that leaves the margin
        for ngl in range(all_on, -1, -1):
            li = left(ctx, ngl)
            if (li.low if end == "low" else li.high) >= margin:
                return ngl
        return None

    ngl = {"sure": ngl_at("low"), "possible": ngl_at("high")}
    return {"ctx_size_all_layers_on_gpu": {"sure": largest("low"), "possible": largest("high")},
            "layers_on_cpu_at_ctx_size": {k: None if v is None else n - gpu_layers(v, n, release)[0] for k, v in ngl.items()},
            "n_gpu_layers_at_ctx_size": ngl,
            "output_on_gpu_at_ctx_size": {k: None if v is None else gpu_layers(v, n, release)[1] for k, v in ngl.items()},
            "n_gpu_layers_margin_bytes": margin, "ngl_counts_output": counts_output(release),
            "n_layers": n, "ctx_size_cap": limit}


def gpu_layers(ngl: int, n_layer: int, release: Release | None = None) -> tuple[int, bool]:
    """``(repeating layers on the GPU, output layer on the GPU)`` at ``-ngl ngl``
    (:func:`gpu_placement`, :data:`PLACEMENT`): the words of the verdict and of the flip
    points come from here, so they say one ``-ngl`` the same way.

    >>> gpu_layers(24, 32), gpu_layers(33, 32), gpu_layers(999, 32)
    ((23, True), (32, True), (32, True))
    """
    return gpu_placement(n_layer, ngl, release)


def ngl_words(ngl: int, n_layer: int, release: Release | None = None) -> str:
    """``-ngl N`` with what it puts on the GPU (:func:`gpu_layers`): ``24 of 32 layers on the
    GPU (-ngl 24)``, ``every layer and the output on the GPU (-ngl 33)``."""
    on, out = gpu_layers(ngl, n_layer, release)
    if on == n_layer:
        return f"every layer {'and the output ' if out else ''}on the GPU{'' if out else ', the output on the CPU'} " \
               f"(-ngl {ngl})"
    return f"{on} of {n_layer} layers{' and the output' if out else ''} on the GPU (-ngl {ngl})"


def _gib(b: int) -> str:
    return f"{b / 2**30:.2f} GiB"
