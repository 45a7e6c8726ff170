"""transformers' contiguous layout (``StaticCache``) and the write-up's KV mirror."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvgate.geometry.base import Geometry, Layout, rule_for
from kvgate.geometry.formats import MODEL_DTYPES, KVFormat, get_format
from kvgate.geometry.specs import (
    ChunkedLocal,
    CrossAttention,
    FullAttention,
    IndexedAttention,
    LayerKind,
    MLAAttention,
    NoCache,
    RecurrentState,
    SlidingWindow,
    spec_of,
)
from kvgate.model.spec import LayerSpec


@dataclass
class Contiguous(Layout):
    """One contiguous slot of max_seq positions per sequence, reserved up front.

    The write-up's KV mirror and transformers' ``StaticCache`` (``max_cache_len``
    positions per full layer; sliding layers hold ``min(sliding_window, max_cache_len)``,
    as ``StaticSlidingWindowLayer`` does). ``sliding_full=True`` is the engine profile
    that allocates sliding layers at full length (several engines do).

    Compared with transformers (``benchmarks/hf_cache_bytes.py`` sums the cache tensors
    a ``StaticCache`` allocates; ``tests/test_layouts.py`` checks the recorded numbers):

    - full / sliding layers: equal, byte for byte (K and V ``[batch, kv_heads,
      positions, head_dim]`` in the model dtype).
    - MLA: transformers 5.x caches the compressed latent as a one-head K of
      ``kv_lora_rank`` and a one-head V of ``qk_rope_head_dim`` (measured: equal to
      kvgate's latent). transformers 4.x cached the decompressed K (192 per head) and V
      (128 per head) for all heads, 25× more; kvgate reports what MLA engines store.
    - DeepSeek sparse attention (deepseek_v32, glm_moe_dsa): ``StaticIndexedLayer`` adds
      ``indexer_keys [B, L, index_head_dim]`` in the model dtype: counted per position, on
      the layers that run their own indexer only (GLM-5.2 ``indexer_types`` "shared"
      layers reuse another layer's selection and never allocate theirs).
    - MiniMax-M3 ``minimax_m3_sparse`` layers (:class:`IndexedAttention`): K, V and
      ``idx_keys [B, 1, L, index_head_dim]``, all L positions.
    - mllama cross-attention layers (:class:`CrossAttention`): no text positions; a fixed
      ``images × image_positions`` K and V per sequence (``state_bytes``), nothing for a
      text-only sequence.
    - linear layers (Qwen3-Next, Qwen3.5, Jamba, Mamba, LFM2 conv): transformers'
      ``LinearAttentionLayer`` keeps ``conv_kernel`` convolution columns in the model
      dtype and the recurrent state in float32; this layout does the same (conv in the
      model dtype, recurrent in ``ssm_format="fp32"``; ``KVGeometry(conv_format=…,
      ssm_format=…)`` overrides either). vLLM and llama.cpp keep ``conv_kernel - 1``.
    - ``to_dict`` / records: ``sliding_full`` and ``ssm_format``.
    """

    sliding_full: bool = False
    ssm_format: str = "fp32"
    name = "contiguous"

    def positions(self, layer: LayerSpec | LayerKind, max_seq: int) -> int:
        spec = spec_of(layer)
        return rule_for(_POSITIONS, spec, self.name)(spec, max_seq, self.sliding_full)

    def state_formats(self, geometry: Geometry) -> tuple[KVFormat, KVFormat]:
        """``(conv format, ssm format)``: the geometry's overrides, else transformers'
        defaults: conv in the model dtype (the cache's own float format, else the
        config's ``dtype``), recurrent state in ``ssm_format`` (fp32)."""
        conv = geometry.fmt_conv or _model_dtype_format(geometry)
        ssm = geometry.fmt_ssm or get_format(self.ssm_format)
        return conv, ssm

    def state_bytes(self, geometry: Geometry, spec: LayerKind) -> int:
        # NOTE: transformers' ``LinearAttentionLayer.lazy_initialization`` (cache_utils.py,
        # 5.24) allocates conv ``[B, conv_dim, conv_kernel]`` in the dtype of the hidden
        # states (the model dtype) and the recurrent state ``zeros_like`` the state the
        # mixer computes (float32 for the gated delta net and Mamba-2 scans). All
        # ``conv_kernel`` columns (vLLM and llama.cpp keep ``conv_kernel - 1``).
        if isinstance(spec, CrossAttention):
            return spec.fixed_bytes(geometry.fmt_k, geometry.fmt_v, geometry.tp)
        st = spec.recurrent
        if st is None or not (st.conv_dim or st.ssm_values):  # none, or a record of state_values alone
            return super().state_bytes(geometry, spec)
        return st.state_bytes(*self.state_formats(geometry), geometry.tp, conv_columns=st.conv_kernel)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sliding_full": self.sliding_full, "ssm_format": self.ssm_format}


def _model_dtype_format(geometry: Geometry) -> KVFormat:
    """The model dtype as a format: the cache format when it is a plain float (in
    transformers the cache dtype is the model dtype), else the config's ``dtype``, else
    the geometry's ``state_format``."""
    if geometry.fmt_k.name in MODEL_DTYPES.values():
        return geometry.fmt_k
    name = MODEL_DTYPES.get(str(geometry.model.dtype or ""))
    return get_format(name) if name else geometry.fmt_state


def _window(spec: LayerKind, L: int, sliding_full: bool) -> int:
    return L if sliding_full else min(spec.window or L, L)


# positions one sequence of L reserves, per spec type (sliding_full: sliding at full length)
_POSITIONS: dict[type[LayerKind], Callable[[Any, int, bool], int]] = {
    FullAttention: lambda spec, L, sf: L,
    IndexedAttention: lambda spec, L, sf: L,
    CrossAttention: lambda spec, L, sf: 0,  # vision positions: fixed bytes (state_bytes)
    MLAAttention: lambda spec, L, sf: L,
    SlidingWindow: _window,
    ChunkedLocal: _window,
    RecurrentState: lambda spec, L, sf: 0,
    NoCache: lambda spec, L, sf: 0,
}
