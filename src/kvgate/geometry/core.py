"""KV-cache geometry: bytes per position, per slot and per block, for layer kind × KV
format × tensor parallelism under one layout (DESIGN.md §4).

- bytes per position b(ℓ) and fixed state: the layer's spec
  (:mod:`kvgate.geometry.specs`: one type per kind, each owning its formula), after the
  layout's conversion of it (:meth:`Layout.engine_spec`).
- positions per sequence of length L and the state an engine keeps: the **layout**'s
  rule for that spec type (``contiguous``: L for full and MLA, min(W, L) for sliding
  unless sliding layers are allocated at full length, 0 for recurrent and no-cache).
- state formats: the layout's engine default unless ``conv_format`` / ``ssm_format``
  override it (``state_format`` is the older single format).

slot bytes S(L) = Σ_ℓ positions(ℓ, L) · b(ℓ) + state(ℓ). The write-up's mirror:
48 × 8192 × (2·512 + 8·4) = 415,236,096 B.
"""

from __future__ import annotations

from typing import Any

from kvgate.geometry.base import GeometryError, Layout, check_len
from kvgate.geometry.contiguous import Contiguous
from kvgate.geometry.formats import KVFormat, get_format
from kvgate.geometry.specs import spec_of
from kvgate.model.spec import ModelSpec


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
        self.specs = [spec_of(layer) for layer in model.layers]
        for spec in self.specs:  # the TP split and formats, checked before the layout's own rules
            spec.position_bytes(self.fmt_k, self.fmt_v, tp)
        self.layout = (layout or Contiguous()).bind(self)
        self.engine_specs = self.layout.rank_specs([self.layout.engine_spec(spec) for spec in self.specs])
        self._pos_bytes = [spec.position_bytes(self.fmt_k, self.fmt_v, tp) for spec in self.engine_specs]
        self._state = [self.layout.state_bytes(self, spec) for spec in self.engine_specs]

    # -- per layer
    def position_bytes(self, i: int) -> int:
        """Bytes one position costs in layer ``i`` (K + V, or the MLA latent), per rank."""
        return self._pos_bytes[i]

    def layer_bytes(self, i: int, max_seq: int) -> int:
        """Bytes layer ``i`` reserves for one sequence at ``max_seq`` under the layout."""
        check_len(max_seq)
        return self.layout.positions(self.engine_specs[i], max_seq) * self._pos_bytes[i] + self._state[i]

    # -- per model
    def bytes_per_token(self) -> int:
        """Σ over layers of bytes per position: what one more cached token costs while
        every layer still grows (before any sliding window fills). Per rank."""
        return sum(self._pos_bytes)

    def state_bytes(self) -> int:
        """Fixed per-sequence bytes (linear-layer state), independent of context."""
        return sum(self._state)

    def slot_bytes(self, max_seq: int) -> int:
        """S(L): bytes one sequence slot reserves at ``max_seq`` = L positions. Per rank."""
        check_len(max_seq)
        return sum(self.layer_bytes(i, max_seq) for i in range(self.model.num_layers))

    def slots_bytes(self, max_seq: int, slots: int) -> int:
        """``slots × S(L)``."""
        if slots < 0:
            raise GeometryError(f"slots must not be negative, got {slots}")
        return slots * self.slot_bytes(max_seq)

    def block_bytes(self, block_size: int) -> int:
        """Bytes of one block of ``block_size`` positions across all growing layers
        (a vLLM-style page summed over layers). Per rank."""
        check_len(block_size, "block size")
        return block_size * self.bytes_per_token()

    def by_layer(self, max_seq: int) -> list[dict[str, Any]]:
        """Per-layer breakdown at ``max_seq``: kind, heads per rank, dims, window,
        positions, bytes per position, state bytes, layer bytes."""
        rows = []
        for i, (layer, spec) in enumerate(zip(self.model.layers, self.engine_specs)):
            rows.append(
                {
                    "layer": i,
                    "kind": layer.kind,
                    "kv_heads_per_rank": spec.kv_heads(self.tp),
                    "head_dim": layer.head_dim,
                    "v_head_dim": layer.v_head_dim,
                    "window": layer.window,
                    "latent_dim": layer.latent_dim or None,
                    "positions": self.layout.positions(spec, max_seq),
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


