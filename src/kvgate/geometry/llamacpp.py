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

from dataclasses import dataclass, replace
from typing import Any

from kvgate.geometry.base import GeometryError, Layout, kv_heads_per_rank, state_values_per_rank
from kvgate.geometry.core import KVGeometry
from kvgate.geometry.formats import get_format
from kvgate.model.spec import LayerSpec

PAD = 256  # GGML_PAD(n_ctx, 256): llama-context.cpp
LLAMA_MAX_SEQ = 256  # src/llama-cparams.h
# the cache types llama.cpp's -ctk / -ctv take (common/arg.cpp kv_cache_types), kvgate's names
CACHE_TYPES = ("fp32", "fp16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
PINNED_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
FLASH_ATTN = ("auto", "on", "off")


def zero_width(layer: LayerSpec) -> bool:
    """An attention layer with no KV heads (``head_count_kv`` 0 in a GGUF: Llama-Nemotron's
    no-op attention blocks) that llama.cpp still keeps in its cache: K and V of width 0,
    except that with ``-fa off`` its transposed V is made at the widest layer's width
    (``n_embd_v_gqa_max``, [TAG_V_CACHE_VARIABLE]). :mod:`kvgate.model.gguf` marks it as
    a ``shared`` layer with a head dim and no KV heads."""
    return layer.kind == "shared" and layer.num_kv_heads == 0 and layer.head_dim > 0


def pad256(n: int) -> int:
    """``GGML_PAD(n, 256)``: n rounded up to a multiple of 256."""
    return -(-n // PAD) * PAD


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

    Raises:
        GeometryError: a bad value (named).
    """

    n_seq: int = 1
    unified: bool = False
    swa_full: bool = False
    n_ubatch: int = 512
    flash_attn: str = "auto"
    n_rs_seq: int = 0
    n_batch: int = 2048
    name = "llama.cpp"

    def __post_init__(self) -> None:
        for k in ("n_seq", "n_ubatch", "n_batch"):
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
    def bind(self, geometry: KVGeometry) -> LlamaCpp:
        """With ``-fa off``, widen every attention layer's V row to the widest layer's
        (``n_embd_v_gqa_max``) in the geometry's per-position bytes.

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
        layers = geometry.model.layers
        for which, fmt in (("K (-ctk)", geometry.fmt_k), ("V (-ctv)", geometry.fmt_v)):
            if fmt.name not in CACHE_TYPES:
                raise GeometryError(f"llama.cpp has no {fmt.name} cache type for {which}",
                                    hint="f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1")
        if any(l.kind == "mla" for l in layers) and geometry.fmt_k.name != geometry.fmt_v.name:
            raise GeometryError(
                f"llama.cpp refuses different K ({geometry.fmt_k.name}) and V ({geometry.fmt_v.name}) cache types "
                "for an MLA model (\"model does not support different K and V cache types\")",
                hint="give -ctk and -ctv the same type")
        if not self.v_trans:
            for which, fmt in (("K", geometry.fmt_k), ("V", geometry.fmt_v)):
                if fmt.block_values <= 1:
                    continue
                for i, l in enumerate(layers):
                    if l.kind not in ("full", "sliding"):
                        continue
                    hd = l.head_dim if which == "K" else (l.v_head_dim or l.head_dim)
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
        pos = getattr(geometry, "_pos_bytes", None)
        if pos is not None:
            for i, layer in enumerate(geometry.model.layers):
                if layer.kind in ("full", "sliding") or zero_width(layer):
                    pos[i] = self.layer_position_bytes(geometry, i)
        return b

    def v_width_max(self, geometry: KVGeometry) -> int:
        """``n_embd_v_gqa_max()``: the widest V row (KV heads per rank × V head dim) of
        any attention layer."""
        widths = [kv_heads_per_rank(l.num_kv_heads, geometry.tp) * (l.v_head_dim or l.head_dim)
                  for l in geometry.model.layers if l.num_kv_heads and l.head_dim]
        return max(widths, default=0)

    def layer_position_bytes(self, geometry: KVGeometry, i: int) -> int:
        """Bytes one cell costs in layer ``i``: K row + V row, the V row at the widest
        layer's width with ``-fa off``; the MLA latent alone; 0 for others."""
        layer = geometry.model.layers[i]
        if zero_width(layer):
            # K and V of width 0, but a transposed V is made at the widest layer's width
            return geometry.fmt_v.vector_bytes(self.v_width_max(geometry)) if self.v_trans else 0
        if layer.kind not in ("full", "sliding"):
            return geometry.position_bytes(i) if layer.kind == "mla" else 0
        h = kv_heads_per_rank(layer.num_kv_heads, geometry.tp)
        k = geometry.fmt_k.row_bytes(h, layer.head_dim)
        if self.v_trans:
            return k + geometry.fmt_v.vector_bytes(self.v_width_max(geometry))
        return k + geometry.fmt_v.row_bytes(h, layer.v_head_dim or layer.head_dim)

    # -- context arithmetic
    def contexts(self, max_seq: int) -> tuple[int, int, int]:
        """``(n_ctx, n_ctx_seq, n_stream)`` for sequences of ``max_seq`` tokens."""
        n_ctx = pad256(max_seq * self.n_seq)
        if self.unified:
            return n_ctx, n_ctx, 1
        n_ctx_seq = pad256(n_ctx // self.n_seq)
        return n_ctx_seq * self.n_seq, n_ctx_seq, self.n_seq

    def kv_size(self, layer: LayerSpec, max_seq: int) -> int:
        """Cells per stream of this layer's cache (the ``cells`` of llama.cpp's log line)."""
        n_ctx, n_ctx_seq, _ = self.contexts(max_seq)
        if layer.kind == "sliding" and not self.swa_full:
            w = layer.window or n_ctx_seq
            ubatch = min(n_ctx, self.n_batch, self.n_ubatch)  # llama_context: the clamps of n_batch, n_ubatch
            return pad256(min(n_ctx_seq, w * (self.n_seq if self.unified else 1) + ubatch))
        return n_ctx_seq

    def cells(self, layer: LayerSpec, max_seq: int) -> int:
        """KV cells of one layer in the whole cache (all streams)."""
        if layer.kind not in ("full", "sliding", "mla") and not zero_width(layer):
            return 0
        _, _, n_stream = self.contexts(max_seq)
        return self.kv_size(layer, max_seq) * n_stream

    def positions(self, layer: LayerSpec, max_seq: int) -> int:
        return -(-self.cells(layer, max_seq) // self.n_seq)

    def state_bytes(self, geometry: KVGeometry, layer: LayerSpec) -> int | None:
        # NOTE: R and S are GGML_TYPE_F32 whatever -ctk/-ctv say (llama-model.cpp
        # create_memory); a geometry's conv_format / ssm_format override each.
        conv, ssm = state_values_per_rank(layer, geometry.tp)
        f32 = get_format("fp32")
        f_conv = getattr(geometry, "fmt_conv", None) or f32
        f_ssm = getattr(geometry, "fmt_ssm", None) or f32
        if not layer.conv_dim and not layer.ssm_values:
            return f_ssm.vector_bytes(ssm) * (1 + self.n_rs_seq)
        return (f_conv.vector_bytes(conv) + f_ssm.vector_bytes(ssm)) * (1 + self.n_rs_seq)

    def cache_bytes(self, geometry: KVGeometry, max_seq: int) -> int:
        """Bytes of the whole KV + recurrent memory for ``n_seq`` sequences of ``max_seq``:
        what llama.cpp logs as ``llama_kv_cache: size = …`` plus the recurrent ``RS`` buffers."""
        return sum(self.cache_parts(geometry, max_seq).values())

    def cache_parts(self, geometry: KVGeometry, max_seq: int) -> dict[str, int]:
        """The whole cache split as llama.cpp logs it: ``k``, ``v`` (non-SWA cache),
        ``k_swa``, ``v_swa`` (SWA cache) and ``rs`` (recurrent R + S), bytes each."""
        out = {"k": 0, "v": 0, "k_swa": 0, "v_swa": 0, "rs": 0}
        for i, layer in enumerate(geometry.model.layers):
            if layer.kind == "linear":
                out["rs"] += max(1, self.n_seq) * geometry.layer_bytes(i, max_seq)
                continue
            cells = self.cells(layer, max_seq)
            if not cells:
                continue
            suffix = "_swa" if layer.kind == "sliding" else ""
            if layer.kind == "mla":
                out["k" + suffix] += cells * geometry.position_bytes(i)
                continue
            if zero_width(layer):
                out["v"] += cells * self.layer_position_bytes(geometry, i)
                continue
            h = kv_heads_per_rank(layer.num_kv_heads, geometry.tp)
            k = geometry.fmt_k.row_bytes(h, layer.head_dim)
            out["k" + suffix] += cells * k
            out["v" + suffix] += cells * (self.layer_position_bytes(geometry, i) - k)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "n_seq": self.n_seq, "unified": self.unified, "swa_full": self.swa_full,
                "n_ubatch": self.n_ubatch, "flash_attn": self.flash_attn, "n_rs_seq": self.n_rs_seq,
                "n_batch": self.n_batch}
