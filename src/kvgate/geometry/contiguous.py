"""transformers' contiguous layout (``StaticCache``) and the write-up's KV mirror."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from kvgate.geometry.base import Layout, state_values_per_rank
from kvgate.geometry.formats import get_format
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
    - linear layers (Qwen3-Next, Jamba, Mamba): transformers' ``LinearAttentionLayer``
      keeps ``conv_kernel`` convolution columns in the model dtype and the recurrent
      state in float32; this layout does the same (``ssm_format="fp32"``, conv in the
      geometry's ``state_format``). vLLM and llama.cpp keep ``conv_kernel - 1`` columns.
    - ``to_dict`` / records: ``sliding_full`` and ``ssm_format``.
    """

    sliding_full: bool = False
    ssm_format: str = "fp32"
    name = "contiguous"

    def positions(self, layer: LayerSpec, max_seq: int) -> int:
        return _CONTIGUOUS_POSITIONS[layer.kind](layer, max_seq, self.sliding_full)

    def state_bytes(self, geometry: "KVGeometry", layer: LayerSpec) -> int | None:
        # NOTE: transformers' ``LinearAttentionLayer`` keeps all ``conv_kernel``
        # convolution columns (vLLM and llama.cpp keep ``conv_kernel - 1``) in the model
        # dtype (the geometry's state format), and the recurrent / SSM state in
        # ``ssm_format`` (float32 in transformers 5.x: measured).
        if not layer.conv_dim:
            return None
        conv, ssm = state_values_per_rank(layer, geometry.tp, conv_columns=layer.conv_kernel)
        return geometry.fmt_state.vector_bytes(conv) + get_format(self.ssm_format).vector_bytes(ssm)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sliding_full": self.sliding_full, "ssm_format": self.ssm_format}


_CONTIGUOUS_POSITIONS: dict[str, Callable[[LayerSpec, int, bool], int]] = {
    "full": lambda layer, L, sf: L,
    "mla": lambda layer, L, sf: L,
    "sliding": lambda layer, L, sf: L if sf else min(layer.window or L, L),
    "linear": lambda layer, L, sf: 0,
    "shared": lambda layer, L, sf: 0,
}
