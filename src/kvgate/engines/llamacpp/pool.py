"""llama.cpp's KV layout: padded context, per-sequence streams or one unified cache,
the iSWA window rule, MLA without a V tensor, flash attention's V layout, and f32
recurrent state.

Rules read at llama.cpp commit ``0c1e57098bba43ac29e6e3b677cdceebdd22334f``
(2026-10-01, "webgpu: fix SSM_SCAN binding aliasing"), each from the file named:

- **Context** (``src/llama-context.cpp``): ``n_ctx = GGML_PAD(n_ctx, 256)`` (still 256 at
  this commit); with a unified cache ``n_ctx_seq = n_ctx`` in one stream; otherwise
  ``n_ctx_seq = pad256(n_ctx / n_seq_max)`` in ``n_seq_max`` streams and
  ``n_ctx = n_ctx_seq × n_seq_max``. Here ``max_seq`` L is the context each sequence
  should get, so the requested ``n_ctx`` is ``L × n_seq`` (``-c L·n_seq -np n_seq``).
- **Cells** (``src/llama-kv-cache.cpp``, ``llama_kv_cache::llama_kv_cache``): each layer's
  K tensor is ``ggml_new_tensor_3d(type_k, n_embd_k_gqa(il), kv_size, n_stream)`` and V
  ``(type_v, n_embd_v_gqa, kv_size, n_stream)``, kv_size = n_ctx_seq: bytes
  ``ggml_row_size(type, width) × kv_size × n_stream``.
- **Flash attention** (``-fa on|off|auto``; [TAG_V_CACHE_VARIABLE]): the cache is made with
  ``v_trans = !cparams.flash_attn``. With FA off, V is stored transposed and every
  layer's V width is ``n_embd_v_gqa_max()``, the widest layer's (over all
  ``n_layer_all`` layers), so layers with narrower V are padded. ``auto``: the context
  sets ``cparams.flash_attn = (type != DISABLED)`` *before* ``create_memory``, so ``auto``
  allocates as ``on`` on every build (CPU and CUDA alike); the later FA probe
  (``resolve_fused_ops``) may switch the kernels off but does not re-create the cache.
  A quantized V cache needs FA (``llama_init_from_model`` refuses ``-fa off`` with it).
- **iSWA** (``src/llama-kv-cache-iswa.cpp``): sliding layers get
  ``size_swa = pad256(min(n_ctx_seq, W × (unified ? n_seq_max : 1) + n_ubatch))`` cells
  per stream, or ``n_ctx_seq`` with ``--swa-full``.
- **MLA** (DeepSeek-V2/V3, Kimi-K2; ``llama_hparams::is_mla``): one K row, no V tensor.
  GGUFs without the ``*_mla`` keys are plain per-head attention
  (:mod:`kvgate.model.gguf`).
- **Recurrent** (``src/llama-memory-recurrent.cpp``): ``max(1, n_seq_max) × (1 + n_rs_seq)``
  rows of R (conv, ``(d_conv − 1) × conv channels``) and S (SSM) state, both
  ``GGML_TYPE_F32`` whatever ``-ctk``/``-ctv`` say (``llama_model::create_memory``).
- **Zero-width layers** (``head_count_kv`` 0, not recurrent: Llama-Nemotron's no-op
  attention): in the cache at width 0, but with ``-fa off`` each still gets a V of the
  widest layer's width.
- **Per-architecture sliding windows** (:mod:`kvgate.engines.llamacpp.arch`): a GGUF is
  read with them applied; a config.json's sliding layers are mapped here, in
  :meth:`LlamaCpp.bind`, to what llama.cpp makes of the architecture the converter writes
  (Phi-3, Mistral, Qwen2/3 with a ``sliding_window``: full attention, ``n_swa = 0``).
- **Attention and state in one layer** (Falcon-H1, ``llama_memory_hybrid`` with both
  filters "every layer"): the layer's K/V cells in the KV cache and its Mamba-2 state
  (``n_embd_r`` + ``n_embd_s``, f32) in the recurrent memory, one row per sequence.
- **MTP / nextn layers**: filtered out of the main context's cache (``il < n_layer()``);
  :mod:`kvgate.model.gguf` gives them 0 bytes.
- **KV types** (``-ctk``/``-ctv``): ggml block types, ``ggml_row_size`` =
  values / block × block bytes (``kvgate.geometry.formats``).

Defaults: ``llama-server`` / ``llama-cli`` (``common_params``) use ``swa_full = false``,
``n_ubatch = 512``, ``-fa auto`` and per-sequence streams unless ``--kv-unified``
(``llama-server`` turns unified on when it picks the slot count itself); the bare C API
(``llama_context_default_params``) sets ``swa_full = true``. Pass what your run used.

Per-slot figures are the whole cache divided by ``n_seq`` (rounded up when a unified
cache's padding does not split evenly); :meth:`LlamaCpp.cache_bytes` gives the exact whole.
Verified against llama.cpp's own allocation by ``benchmarks/llamacpp_conformance.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kvgate.engines.llamacpp.arch import PINNED_COMMIT as PINNED_COMMIT  # the commit the rules were read at
from kvgate.engines.llamacpp.arch import ConfigSwa, arch_for_config, config_swa
from kvgate.geometry.base import Geometry, GeometryError, Layout, rule_for
from kvgate.geometry.formats import get_format
from kvgate.geometry.specs import (
    AttentionKV,
    ChunkedLocal,
    FullAttention,
    LayerKind,
    MLAAttention,
    NoCache,
    RecurrentState,
    SlidingWindow,
    spec_of,
)
from kvgate.model.spec import LayerSpec
from kvgate.options import LLAMACPP_MAX_SEQ, LLAMACPP_PAD
from kvgate.options import pad256 as pad256  # GGML_PAD(n, 256): the one helper

PAD = LLAMACPP_PAD  # GGML_PAD(n_ctx, 256): llama-context.cpp
LLAMA_MAX_SEQ = LLAMACPP_MAX_SEQ  # src/llama-cparams.h
# the cache types llama.cpp's -ctk / -ctv take (common/arg.cpp kv_cache_types), kvgate's names
CACHE_TYPES = ("fp32", "fp16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
FLASH_ATTN = ("auto", "on", "off")
#: llama.cpp's defaults (common/common.h common_params): -ub, -b, -fa; held once for the layout,
#: ``kvgate fit``'s flags and a log's what-if
N_UBATCH, N_BATCH, FLASH_ATTN_DEFAULT = 512, 2048, "auto"


def _pad_to(n: int, pad: int) -> int:
    """``GGML_PAD(n, pad)``: ``n`` rounded up to a multiple of ``pad``."""
    return -(-n // pad) * pad


@dataclass
class LlamaCpp(Layout):
    """llama.cpp's layout.

    Args:
        n_seq: parallel sequences (``-np`` / ``n_seq_max``), default 1.
        unified: one cache shared by all sequences (``--kv-unified``), default False.
        swa_full: sliding layers at full context (``--swa-full``).
        n_ubatch: physical batch (``-ub``, default 512); enters the iSWA size.
        flash_attn: ``-fa``: ``auto`` (default; allocates as ``on``), ``on`` or ``off``
            (V transposed, padded to the widest layer's V).
        n_rs_seq: recurrent-state snapshots per sequence (``llama_context_params.n_rs_seq``,
            default 0).
        n_batch: logical batch (``-b``, default 2048). llama.cpp clamps
            ``n_batch = min(n_ctx, n_batch)`` and ``n_ubatch = min(n_batch, n_ubatch)``
            (``llama_context`` constructor) before the iSWA size uses ``n_ubatch``.
        pad: cells the context is rounded up to (default 256, the newest builds); 32 in
            the builds that padded by ``llama_kv_cache_get_padding`` without flash attention
            (:func:`kvgate.engines.llamacpp.fit.kv_pad`).

    Raises:
        GeometryError: a bad value (named).
    """

    n_seq: int = 1
    unified: bool = False
    swa_full: bool = False
    n_ubatch: int = N_UBATCH
    flash_attn: str = FLASH_ATTN_DEFAULT
    n_rs_seq: int = 0
    n_batch: int = N_BATCH
    pad: int = PAD
    name = "llama.cpp"
    # fitted by bind() on a copy: n_embd_v_gqa_max, the V width of -fa off
    _v_pad: int | None = field(default=None, init=False, repr=False, compare=False)
    # fitted by bind() for a config.json: llama.cpp's sliding-window rule for its architecture
    _swa: ConfigSwa = field(default_factory=ConfigSwa, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for k in ("n_seq", "n_ubatch", "n_batch", "pad"):
            v = getattr(self, k)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise GeometryError(f"llama.cpp layout: {k} must be a positive integer, got {v!r}")
        if not isinstance(self.n_rs_seq, int) or isinstance(self.n_rs_seq, bool) or self.n_rs_seq < 0:
            raise GeometryError(f"llama.cpp layout: n_rs_seq must be a non-negative integer, got {self.n_rs_seq!r}")
        if self.n_seq > LLAMA_MAX_SEQ:
            raise GeometryError(f"llama.cpp layout: n_seq (-np) {self.n_seq} is more than llama.cpp's "
                                f"LLAMA_MAX_SEQ {LLAMA_MAX_SEQ}", hint="-np 1..256")
        fa = {True: "on", False: "off"}.get(self.flash_attn, self.flash_attn)  # type: ignore[call-overload]
        if fa not in FLASH_ATTN:
            raise GeometryError(f"llama.cpp layout: flash_attn {self.flash_attn!r} is not one of llama.cpp's -fa values",
                                hint="auto, on, off")
        self.flash_attn = fa

    @property
    def v_trans(self) -> bool:
        """V stored transposed (``!cparams.flash_attn`` at cache creation): only ``-fa off``."""
        return self.flash_attn == "off"

    # -- binding: the V padding of -fa off
    def bind(self, geometry: Geometry) -> LlamaCpp:
        """A copy that, with ``-fa off``, stores every attention layer's V row at the
        widest layer's width (``n_embd_v_gqa_max()``, per rank, over all layers):
        :meth:`engine_spec` pads each spec.

        Also refuses what ``llama_init_from_model`` (``src/llama-context.cpp``) refuses:
        different K and V types on an MLA model; with flash attention on or ``auto``, a
        ggml block type (32 values per block) whose block does not divide every
        attention layer's K (``-ctk``) or V (``-ctv``) head dim.

        Raises:
            GeometryError: ``-fa off`` with a quantized V format; an MLA model with
                ``-ctk`` ≠ ``-ctv``; a block type that does not divide a head dim (each
                message names what llama.cpp says).
        """
        b = replace(self)
        b._swa = _config_swa(geometry)
        specs = [b._swa_rule(s) for s in geometry.specs]
        for which, fmt in (("K (-ctk)", geometry.fmt_k), ("V (-ctv)", geometry.fmt_v)):
            if fmt.name not in CACHE_TYPES:
                raise GeometryError(f"llama.cpp has no {fmt.name} cache type for {which}",
                                    hint="f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1")
        if any(isinstance(s, MLAAttention) for s in specs) and geometry.fmt_k.name != geometry.fmt_v.name:
            raise GeometryError(
                f"llama.cpp refuses different K ({geometry.fmt_k.name}) and V ({geometry.fmt_v.name}) cache types "
                "for an MLA model (\"model does not support different K and V cache types\")",
                hint="give -ctk and -ctv the same type")
        if not self.v_trans:
            for which, fmt in (("K", geometry.fmt_k), ("V", geometry.fmt_v)):
                if fmt.block_values <= 1:
                    continue
                for i, s in enumerate(specs):
                    if not isinstance(s, AttentionKV):
                        continue
                    hd = s.head_dim if which == "K" else s.v_head_dim
                    if hd % fmt.block_values:
                        raise GeometryError(
                            f"llama.cpp refuses {which} cache type {fmt.name} here: its block of "
                            f"{fmt.block_values} values does not divide layer {i}'s head dim {hd} "
                            f"(\"{which} cache type … does not divide n_embd_head_{which.lower()}\")",
                            hint="use f16, bf16 or f32 for this cache")
            return b
        if geometry.fmt_v.name not in ("fp16", "bf16", "fp32"):
            raise GeometryError(f"llama.cpp refuses a quantized V cache ({geometry.fmt_v.name}) with flash attention off",
                                hint="use -fa on (or auto), or an f16/bf16/f32 V cache")
        b._v_pad = max((s.v_width(geometry.tp) for s in specs), default=0)
        return b

    @property
    def notes(self) -> list[str]:
        """What the bound layout changed in the model's layers (llama.cpp's per-architecture
        sliding-window rule for a config.json), as text."""
        return list(self._swa.notes)

    def _swa_rule(self, spec: LayerKind) -> LayerKind:
        if isinstance(spec, SlidingWindow):
            if self._swa.full:
                return spec.at_full_length()
            if self._swa.window is not None:
                return replace(spec, window=self._swa.window)
        return spec

    def engine_spec(self, spec: LayerKind) -> LayerKind:
        """llama.cpp's sliding-window rule for the architecture (a config.json's sliding
        layers at full attention or at a forced window, once bound), then with ``-fa off``
        V rows at the widest layer's width."""
        spec = self._swa_rule(spec)
        return spec.with_v_padding(self._v_pad) if self._v_pad is not None else spec

    # -- context arithmetic
    def contexts(self, max_seq: int) -> tuple[int, int, int]:
        """``(n_ctx, n_ctx_seq, n_stream)`` for sequences of ``max_seq`` tokens."""
        n_ctx = _pad_to(max_seq * self.n_seq, self.pad)
        if self.unified:
            return n_ctx, n_ctx, 1
        n_ctx_seq = _pad_to(n_ctx // self.n_seq, self.pad)
        return n_ctx_seq * self.n_seq, n_ctx_seq, self.n_seq

    def kv_size(self, layer: LayerSpec | LayerKind, max_seq: int) -> int:
        """Cells per stream of this layer's cache (the ``cells`` of llama.cpp's log line)."""
        n_ctx, n_ctx_seq, _ = self.contexts(max_seq)
        spec = spec_of(layer)
        if isinstance(spec, SlidingWindow) and not self.swa_full:
            ubatch = min(n_ctx, self.n_batch, self.n_ubatch)  # llama_context: the clamps of n_batch, n_ubatch
            return pad256(min(n_ctx_seq, spec.window * (self.n_seq if self.unified else 1) + ubatch))
        return n_ctx_seq

    def cells(self, layer: LayerSpec | LayerKind, max_seq: int) -> int:
        """KV cells of one layer in the whole cache (all streams)."""
        spec = spec_of(layer)
        if not rule_for(_IN_KV_CACHE, spec, self.name)(spec):
            return 0
        _, _, n_stream = self.contexts(max_seq)
        return self.kv_size(spec, max_seq) * n_stream

    def positions(self, layer: LayerSpec | LayerKind, max_seq: int) -> int:
        return -(-self.cells(layer, max_seq) // self.n_seq)

    def state_bytes(self, geometry: Geometry, spec: LayerKind) -> int:
        # NOTE: R and S are GGML_TYPE_F32 whatever -ctk/-ctv say (llama-model.cpp
        # create_memory); a geometry's conv_format / ssm_format override each.
        st = spec.recurrent
        if st is None:
            return 0
        f32 = get_format("fp32")
        return st.state_bytes(geometry.fmt_conv or f32, geometry.fmt_ssm or f32, geometry.tp) * (1 + self.n_rs_seq)

    def cache_bytes(self, geometry: Geometry, max_seq: int) -> int:
        """Bytes of the whole KV + recurrent memory for ``n_seq`` sequences of ``max_seq``:
        what llama.cpp logs as ``llama_kv_cache: size = …`` plus the recurrent ``RS`` buffers."""
        return sum(self.cache_parts(geometry, max_seq).values())

    def cache_parts(self, geometry: Geometry, max_seq: int) -> dict[str, int]:
        """The whole cache split as llama.cpp logs it: ``k``, ``v`` (non-SWA cache),
        ``k_swa``, ``v_swa`` (SWA cache) and ``rs`` (recurrent R + S), bytes each."""
        out = {"k": 0, "v": 0, "k_swa": 0, "v_swa": 0, "rs": 0}
        for part, b in self.layer_parts(geometry, max_seq):
            out[part] += b
        return out

    def layer_parts(self, geometry: Geometry, max_seq: int) -> list[tuple[str, int]]:
        """Per layer, in order, the parts of the whole cache it holds: ``(part, bytes)``
        pairs with ``part`` one of :meth:`cache_parts`' keys (a recurrent layer gives one
        ``rs`` pair, an attention layer its ``k``/``v`` or ``k_swa``/``v_swa`` pair)."""
        return [p for i in range(geometry.model.num_layers) for p in self._parts_of(geometry, i, max_seq)]

    def layer_cache_bytes(self, geometry: Geometry, i: int, max_seq: int) -> int:
        """Bytes layer ``i`` holds in the whole cache (all ``n_seq`` sequences of ``max_seq``):
        its K + V cells, or its recurrent state per sequence. Σ over layers = :meth:`cache_bytes`."""
        return sum(b for _, b in self._parts_of(geometry, i, max_seq))

    def _parts_of(self, geometry: Geometry, i: int, max_seq: int) -> list[tuple[str, int]]:
        spec = geometry.engine_specs[i]
        if isinstance(spec, RecurrentState):
            return [("rs", max(1, self.n_seq) * geometry.layer_bytes(i, max_seq))]
        cells = self.cells(spec, max_seq)
        suffix = "_swa" if isinstance(spec, SlidingWindow) else ""
        parts = [("k" + suffix, cells * spec.k_bytes(geometry.fmt_k, geometry.tp)),
                 ("v" + suffix, cells * spec.v_bytes(geometry.fmt_v, geometry.tp))]
        if spec.recurrent is not None:  # Falcon-H1: the same layer's Mamba-2 state, one row per sequence
            parts.append(("rs", max(1, self.n_seq) * self.state_bytes(geometry, spec)))
        return parts

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "n_seq": self.n_seq, "unified": self.unified, "swa_full": self.swa_full,
                "n_ubatch": self.n_ubatch, "flash_attn": self.flash_attn, "n_rs_seq": self.n_rs_seq,
                "n_batch": self.n_batch}


def _config_swa(geometry: Geometry) -> ConfigSwa:
    """llama.cpp's sliding-window rule for a config.json model (:func:`config_swa`); a GGUF
    (``gguf_architecture`` in its config) was read with the rules already applied."""
    model = geometry.model
    if "gguf_architecture" in (model.config or {}):
        return ConfigSwa()
    windows = {s.window for s in geometry.specs if isinstance(s, SlidingWindow)}
    return config_swa(arch_for_config(model.config or {}, model.model_type), model.num_layers, windows)


# which layers llama.cpp keeps in its KV cache (``llama_kv_cache``: the attention layers,
# zero-width ones included; recurrent layers live in ``llama_memory_recurrent``)
_IN_KV_CACHE: dict[type[LayerKind], Callable[[Any], bool]] = {
    FullAttention: lambda spec: True,
    SlidingWindow: lambda spec: True,
    ChunkedLocal: lambda spec: True,
    MLAAttention: lambda spec: True,
    RecurrentState: lambda spec: False,
    NoCache: lambda spec: spec.zero_width,
}
