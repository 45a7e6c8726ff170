"""transformers' contiguous layout (``StaticCache``) and the write-up's KV mirror."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvgate.geometry.base import Layout, state_values_per_rank
from kvgate.geometry.formats import KVFormat, get_format
from kvgate.model.spec import LayerSpec

if TYPE_CHECKING:
    from kvgate.geometry.core import KVGeometry


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
      ``indexer_keys [B, L, index_head_dim]`` in the model dtype: counted per position.
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

    def positions(self, layer: LayerSpec, max_seq: int) -> int:
        return _CONTIGUOUS_POSITIONS[layer.kind](layer, max_seq, self.sliding_full)

    def state_formats(self, geometry: KVGeometry) -> tuple[KVFormat, KVFormat]:
        """``(conv format, ssm format)``: the geometry's overrides, else transformers'
        defaults: conv in the model dtype (the cache's own float format, else the
        config's ``dtype``), recurrent state in ``ssm_format`` (fp32)."""
        conv = geometry.fmt_conv or _model_dtype_format(geometry)
        ssm = geometry.fmt_ssm or get_format(self.ssm_format)
        return conv, ssm

    def state_bytes(self, geometry: KVGeometry, layer: LayerSpec) -> int | None:
        # NOTE: transformers' ``LinearAttentionLayer.lazy_initialization`` (cache_utils.py,
        # 5.24) allocates conv ``[B, conv_dim, conv_kernel]`` in the dtype of the hidden
        # states (the model dtype) and the recurrent state ``zeros_like`` the state the
        # mixer computes (float32 for the gated delta net and Mamba-2 scans). All
        # ``conv_kernel`` columns (vLLM and llama.cpp keep ``conv_kernel - 1``).
        if not layer.conv_dim and not layer.ssm_values:
            return None
        conv, ssm = state_values_per_rank(layer, geometry.tp, conv_columns=layer.conv_kernel)
        f_conv, f_ssm = self.state_formats(geometry)
        return (f_conv.vector_bytes(conv) if conv else 0) + (f_ssm.vector_bytes(ssm) if ssm else 0)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sliding_full": self.sliding_full, "ssm_format": self.ssm_format}


_DTYPE_FORMATS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def _model_dtype_format(geometry: KVGeometry) -> KVFormat:
    """The model dtype as a format: the cache format when it is a plain float (in
    transformers the cache dtype is the model dtype), else the config's ``dtype``, else
    the geometry's ``state_format``."""
    if geometry.fmt_k.name in _DTYPE_FORMATS.values():
        return geometry.fmt_k
    name = _DTYPE_FORMATS.get(str(geometry.model.dtype or ""))
    return get_format(name) if name else geometry.fmt_state


_CONTIGUOUS_POSITIONS: dict[str, Callable[[LayerSpec, int, bool], int]] = {
    "full": lambda layer, L, sf: L,
    "mla": lambda layer, L, sf: L,
    "sliding": lambda layer, L, sf: L if sf else min(layer.window or L, L),
    "linear": lambda layer, L, sf: 0,
    "shared": lambda layer, L, sf: 0,
}
