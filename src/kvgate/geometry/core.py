"""KV-cache geometry: bytes per position, per slot and per block, for layer kind × KV format.

Formula (DESIGN.md §4). For layer ℓ of kind k, KV formats f_K, f_V, tensor parallel tp:

- heads per rank  h = max(1, n_kv // tp); tp must divide n_kv or be divisible by it
  (vLLM replicates KV heads when tp > n_kv; ``get_num_kv_heads`` in vllm/config).
- bytes per position  b(ℓ):
    ``full``/``sliding``  f_K.row_bytes(h, head_dim) + f_V.row_bytes(h, v_head_dim)
    ``mla``               f_K.vector_bytes(kv_lora_rank + qk_rope_head_dim), once, no V,
                          the same on every rank (the latent is replicated); plus
                          f_K.vector_bytes(index_head_dim) of DeepSeek sparse-attention
                          indexer keys where the layer has them
    ``linear``/``shared`` 0
- positions per sequence of length L: the **layout**'s rule (``contiguous``: L for full
  and mla, min(W, L) for sliding unless the engine allocates sliding layers at full
  length, 0 for linear and shared).
- fixed state per sequence: ``linear`` layers only, conv values and SSM / recurrent values
  per rank, each in its own format: the layout's engine default unless ``conv_format`` /
  ``ssm_format`` override it (``state_format`` is the older single format, still the
  default of layouts that keep one).

slot bytes S(L) = Σ_ℓ positions(ℓ, L) · b(ℓ) + state(ℓ). The write-up's mirror:
48 × 8192 × (2·512 + 8·4) = 415,236,096 B.

Layouts other than ``contiguous`` (engine rules for vLLM, llama.cpp) register in
``LAYOUTS``; each names the engine source its rule comes from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvgate.geometry.base import GeometryError, Layout, _check_len, kv_heads_per_rank
from kvgate.geometry.contiguous import Contiguous
from kvgate.geometry.formats import KVFormat, get_format
from kvgate.model.spec import LayerSpec, ModelSpec


def _attention_bytes(g: KVGeometry, layer: LayerSpec) -> int:
    h = kv_heads_per_rank(layer.num_kv_heads, g.tp)
    return g.fmt_k.row_bytes(h, layer.head_dim) + g.fmt_v.row_bytes(h, layer.v_head_dim or layer.head_dim)


def _mla_bytes(g: KVGeometry, layer: LayerSpec) -> int:
    # NOTE: one latent per token, K format, no V; replicated on every TP rank. DeepSeek
    # sparse attention (deepseek_v32, glm_moe_dsa) adds its indexer keys of index_dim
    # values per token (transformers' StaticIndexedLayer: model dtype, as K here).
    return g.fmt_k.vector_bytes(layer.latent_dim) + (g.fmt_k.vector_bytes(layer.index_dim) if layer.index_dim else 0)


_POSITION_BYTES: dict[str, Callable[[KVGeometry, LayerSpec], int]] = {
    "full": _attention_bytes,
    "sliding": _attention_bytes,
    "mla": _mla_bytes,
    "linear": lambda g, layer: 0,
    "shared": lambda g, layer: 0,
}


def _state_bytes(g: KVGeometry, layer: LayerSpec) -> int:
    """Fixed state of a linear layer per sequence, per rank.

    The state is split over ``state_heads`` across TP ranks (vLLM shards Mamba heads);
    with ``state_heads == 1`` it is replicated on every rank.
    """
    if not layer.state_values:
        return 0
    values = layer.state_values
    if layer.state_heads > 1 and g.tp > 1:
        values = values // layer.state_heads * kv_heads_per_rank(layer.state_heads, g.tp)
    return g.fmt_state.vector_bytes(values)


def _layout_state_bytes(g: KVGeometry, layer: LayerSpec) -> int:
    # linear layers, and attention layers that also hold a recurrent state (Falcon-H1)
    if layer.kind != "linear" and not (layer.conv_dim or layer.ssm_values or layer.state_values):
        return 0
    b = g.layout.state_bytes(g, layer)
    return _state_bytes(g, layer) if b is None else b


class KVGeometry:
    """Bytes of a model's KV cache under one KV format, TP size and layout.

    Args:
        model: the :class:`ModelSpec`.
        kv_format: format of K rows (and of V rows unless ``kv_format_v`` is given).
        kv_format_v: format of V rows, when it differs from K.
        tp: tensor-parallel size; all figures are **per rank**.
        layout: a :class:`Layout` (default :class:`Contiguous`).
        state_format: format of linear-layer state for layouts that keep one format
            for both parts (default fp32, as llama.cpp).
        conv_format: format of the convolution state, overriding the layout's engine
            default (transformers and vLLM: the model dtype; llama.cpp: f32). ``None``:
            the layout's default.
        ssm_format: format of the SSM / recurrent state, overriding the layout's default
            (transformers: fp32; vLLM: ``mamba_ssm_dtype``; llama.cpp: f32).

    Raises:
        FormatError: unknown format; GeometryError: bad TP split.
    """

    def __init__(
        self,
        model: ModelSpec,
        kv_format: str | KVFormat = "bf16",
        *,
        kv_format_v: str | KVFormat | None = None,
        tp: int = 1,
        layout: Layout | None = None,
        state_format: str | KVFormat = "fp32",
        conv_format: str | KVFormat | None = None,
        ssm_format: str | KVFormat | None = None,
    ) -> None:
        self.model = model
        self.fmt_k = kv_format if isinstance(kv_format, KVFormat) else get_format(kv_format)
        fv = kv_format_v if kv_format_v is not None else self.fmt_k
        self.fmt_v = fv if isinstance(fv, KVFormat) else get_format(fv)
        self.fmt_state = state_format if isinstance(state_format, KVFormat) else get_format(state_format)
        self.fmt_conv = conv_format if conv_format is None or isinstance(conv_format, KVFormat) else get_format(conv_format)
        self.fmt_ssm = ssm_format if ssm_format is None or isinstance(ssm_format, KVFormat) else get_format(ssm_format)
        self.tp = tp
        self.layout = layout or Contiguous()
        # Validate the TP split and formats once, up front.
        self._pos_bytes = [_POSITION_BYTES[layer.kind](self, layer) for layer in model.layers]
        self.layout = self.layout.bind(self)
        self._state = [_layout_state_bytes(self, layer) for layer in model.layers]

    # -- per layer
    def position_bytes(self, i: int) -> int:
        """Bytes one position costs in layer ``i`` (K + V, or the MLA latent), per rank."""
        return self._pos_bytes[i]

    def layer_bytes(self, i: int, max_seq: int) -> int:
        """Bytes layer ``i`` reserves for one sequence at ``max_seq`` under the layout."""
        _check_len(max_seq)
        return self.layout.positions(self.model.layers[i], max_seq) * self._pos_bytes[i] + self._state[i]

    # -- per model
    def bytes_per_token(self) -> int:
        """Σ over layers of bytes per position: what one more cached token costs while
        every layer still grows (before any sliding window fills). Per rank."""
        # a "shared" layer has 0 bytes per position, except where a layout gives it some
        # (llama.cpp's -fa off V of a zero-width layer)
        return sum(b for layer, b in zip(self.model.layers, self._pos_bytes)
                   if layer.kind in ("full", "sliding", "mla", "shared"))

    def state_bytes(self) -> int:
        """Fixed per-sequence bytes (linear-layer state), independent of context."""
        return sum(self._state)

    def slot_bytes(self, max_seq: int) -> int:
        """S(L): bytes one sequence slot reserves at ``max_seq`` = L positions. Per rank."""
        _check_len(max_seq)
        return sum(self.layer_bytes(i, max_seq) for i in range(self.model.num_layers))

    def slots_bytes(self, max_seq: int, slots: int) -> int:
        """``slots × S(L)``."""
        if slots < 0:
            raise GeometryError(f"slots must not be negative, got {slots}")
        return slots * self.slot_bytes(max_seq)

    def block_bytes(self, block_size: int) -> int:
        """Bytes of one block of ``block_size`` positions across all growing layers
        (a vLLM-style page summed over layers). Per rank."""
        _check_len(block_size, "block size")
        return block_size * self.bytes_per_token()

    def by_layer(self, max_seq: int) -> list[dict[str, Any]]:
        """Per-layer breakdown at ``max_seq``: kind, heads per rank, dims, window,
        positions, bytes per position, state bytes, layer bytes."""
        rows = []
        for i, layer in enumerate(self.model.layers):
            rows.append(
                {
                    "layer": i,
                    "kind": layer.kind,
                    "kv_heads_per_rank": kv_heads_per_rank(layer.num_kv_heads, self.tp) if layer.num_kv_heads else 0,
                    "head_dim": layer.head_dim,
                    "v_head_dim": layer.v_head_dim,
                    "window": layer.window,
                    "latent_dim": layer.latent_dim or None,
                    "positions": self.layout.positions(layer, max_seq),
                    "position_bytes": self._pos_bytes[i],
                    "state_bytes": self._state[i],
                    "bytes": self.layer_bytes(i, max_seq),
                }
            )
        return rows

    def describe(self) -> dict[str, Any]:
        """Inputs of this geometry, for records (enough to rebuild it)."""
        return {
            "model": self.model.name,
            "model_source": self.model.source,
            "kv_format_k": self.fmt_k.name,
            "kv_format_v": self.fmt_v.name,
            "state_format": self.fmt_state.name,
            **({"conv_format": self.fmt_conv.name} if self.fmt_conv else {}),
            **({"ssm_format": self.fmt_ssm.name} if self.fmt_ssm else {}),
            "tp": self.tp,
            "layout": self.layout.to_dict(),
            "layers": self.model.num_layers,
            "layer_kinds": self.model.kinds(),
        }


