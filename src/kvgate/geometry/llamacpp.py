"""llama.cpp's KV layout: padded context, per-sequence streams or one unified cache,
the iSWA window rule, MLA without a V tensor, and f32 recurrent state.

Rules, each from the llama.cpp source named:

- **Context** (``src/llama-context.cpp``): ``n_ctx = pad256(n_ctx)``; with a unified
  cache ``n_ctx_seq = n_ctx`` in one stream; otherwise ``n_ctx_seq = pad256(n_ctx /
  n_seq_max)`` in ``n_seq_max`` streams and ``n_ctx = n_ctx_seq × n_seq_max``.
  Here ``max_seq`` L is the context each sequence should get, so the requested
  ``n_ctx`` is ``L × n_seq`` (``-c L·n_seq -np n_seq``).
- **Cells** (``src/llama-kv-cache.cpp``): each layer's K (and V) tensor is
  ``ggml_row_size(type, n_embd_k_gqa) × kv_size × n_stream`` bytes, kv_size = n_ctx_seq.
- **iSWA** (``src/llama-kv-cache-iswa.cpp``): sliding layers get
  ``size_swa = pad256(min(n_ctx_seq, W × (unified ? n_seq_max : 1) + n_ubatch))`` cells
  per stream, or ``n_ctx_seq`` with ``--swa-full``.
- **MLA** (DeepSeek-V2/V3, Kimi-K2): one K row of ``kv_lora_rank + n_rot`` values and no
  V tensor (V is a view of K), so bytes per token are kvgate's MLA latent in the K type.
- **Recurrent** (``src/llama-memory-recurrent.cpp``, ``llama_hparams::n_embd_r/n_embd_s``):
  ``max(1, n_seq_max)`` cells of R (conv, ``(d_conv − 1) × conv channels``) and S (SSM)
  state, both ``GGML_TYPE_F32``.
- **KV types** (``-ctk``/``-ctv``): ggml block types, ``ggml_row_size`` =
  values / block × block bytes (``kvgate.geometry.formats``).

Defaults: ``llama-server`` / ``llama-cli`` (``common_params``) use ``swa_full = false``,
``n_ubatch = 512`` and per-sequence streams unless ``--kv-unified`` (``llama-server``
turns unified on when it picks the slot count itself); the bare C API
(``llama_context_default_params``) sets ``swa_full = true``. Pass what your run used.

Per-slot figures are the whole cache divided by ``n_seq`` (rounded up when a unified
cache's padding does not split evenly); :meth:`LlamaCpp.cache_bytes` gives the exact whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvgate.geometry.base import GeometryError, Layout, state_values_per_rank
from kvgate.geometry.core import KVGeometry
from kvgate.geometry.formats import get_format
from kvgate.model.spec import LayerSpec

PAD = 256  # GGML_PAD(n_ctx, 256): llama-context.cpp


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
    """

    n_seq: int = 1
    unified: bool = False
    swa_full: bool = False
    n_ubatch: int = 512
    name = "llama.cpp"

    def __post_init__(self) -> None:
        for k in ("n_seq", "n_ubatch"):
            v = getattr(self, k)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise GeometryError(f"llama.cpp layout: {k} must be a positive integer, got {v!r}")

    # -- context arithmetic
    def contexts(self, max_seq: int) -> tuple[int, int, int]:
        """``(n_ctx, n_ctx_seq, n_stream)`` for sequences of ``max_seq`` tokens."""
        n_ctx = pad256(max_seq * self.n_seq)
        if self.unified:
            return n_ctx, n_ctx, 1
        n_ctx_seq = pad256(n_ctx // self.n_seq)
        return n_ctx_seq * self.n_seq, n_ctx_seq, self.n_seq

    def cells(self, layer: LayerSpec, max_seq: int) -> int:
        """KV cells of one layer in the whole cache (all streams)."""
        _, n_ctx_seq, n_stream = self.contexts(max_seq)
        if layer.kind in ("full", "mla"):
            return n_ctx_seq * n_stream
        if layer.kind == "sliding":
            if self.swa_full:
                return n_ctx_seq * n_stream
            w = layer.window or n_ctx_seq
            size_swa = pad256(min(n_ctx_seq, w * (self.n_seq if self.unified else 1) + self.n_ubatch))
            return size_swa * n_stream
        return 0

    def positions(self, layer: LayerSpec, max_seq: int) -> int:
        return -(-self.cells(layer, max_seq) // self.n_seq)

    def state_bytes(self, geometry: KVGeometry, layer: LayerSpec) -> int | None:
        # NOTE: R and S are GGML_TYPE_F32 whatever -ctk/-ctv say (llama-model.cpp create_memory).
        conv, ssm = state_values_per_rank(layer, geometry.tp)
        return get_format("fp32").vector_bytes(conv + ssm)

    def cache_bytes(self, geometry: KVGeometry, max_seq: int) -> int:
        """Bytes of the whole KV + recurrent memory for ``n_seq`` sequences of ``max_seq``:
        what llama.cpp logs as ``KV self size`` plus ``RS`` buffers."""
        total = 0
        for i, layer in enumerate(geometry.model.layers):
            total += self.cells(layer, max_seq) * geometry.position_bytes(i)
            if layer.kind == "linear":
                total += max(1, self.n_seq) * geometry.layer_bytes(i, max_seq)
        return total

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "n_seq": self.n_seq, "unified": self.unified,
                "swa_full": self.swa_full, "n_ubatch": self.n_ubatch}
