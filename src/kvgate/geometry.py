"""KV-cache geometry: bytes per position, per slot and per block, for layer kind × KV format.

Formula (DESIGN.md §4). For layer ℓ of kind k, KV formats f_K, f_V, tensor parallel tp:

- heads per rank  h = max(1, n_kv // tp); tp must divide n_kv or be divisible by it
  (vLLM replicates KV heads when tp > n_kv; ``get_num_kv_heads`` in vllm/config).
- bytes per position  b(ℓ):
    ``full``/``sliding``  f_K.row_bytes(h, head_dim) + f_V.row_bytes(h, v_head_dim)
    ``mla``               f_K.vector_bytes(kv_lora_rank + qk_rope_head_dim), once, no V,
                          the same on every rank (the latent is replicated)
    ``linear``/``shared`` 0
- positions per sequence of length L: the **layout**'s rule (``contiguous``: L for full
  and mla, min(W, L) for sliding unless the engine allocates sliding layers at full
  length, 0 for linear and shared).
- fixed state per sequence: ``linear`` layers only, state_values/tp × state format bytes.

slot bytes S(L) = Σ_ℓ positions(ℓ, L) · b(ℓ) + state(ℓ). The write-up's mirror:
48 × 8192 × (2·512 + 8·4) = 415,236,096 B.

Layouts other than ``contiguous`` (engine rules for vLLM, llama.cpp) register in
``LAYOUTS``; each names the engine source its rule comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kvgate.errors import KvgateError
from kvgate.formats import KVFormat, get_format
from kvgate.model import LayerSpec, ModelSpec


class GeometryError(KvgateError):
    """A geometry that cannot be laid out (TP that divides nothing, bad sizes)."""


def kv_heads_per_rank(n_kv: int, tp: int) -> int:
    """KV heads held by one tensor-parallel rank: ``max(1, n_kv // tp)``.

    >>> kv_heads_per_rank(8, 4), kv_heads_per_rank(4, 8)
    (2, 1)

    Raises:
        GeometryError: tp ≤ 0, or neither of tp and n_kv divides the other (vLLM refuses
            such a split too).
    """
    if not isinstance(tp, int) or tp <= 0:
        raise GeometryError(f"tensor parallel size must be a positive integer, got {tp!r}")
    if n_kv >= tp:
        if n_kv % tp:
            raise GeometryError(f"tensor parallel {tp} does not divide the {n_kv} KV heads")
    elif tp % n_kv:
        raise GeometryError(f"tensor parallel {tp} is not a multiple of the {n_kv} KV heads")
    return max(1, n_kv // tp)


# --------------------------------------------------------------------------- layouts

class Layout:
    """How an engine reserves positions for one sequence (one slot).

    Subclasses override :meth:`positions`. ``name`` is the ``--layout`` value.
    """

    name = "base"
    description = ""

    def positions(self, layer: LayerSpec, max_seq: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def bind(self, geometry: "KVGeometry") -> "Layout":
        """Called once by :class:`KVGeometry`; a layout whose rule depends on the whole
        model (vLLM's hybrid block size) returns a copy fitted to it. Default: itself."""
        return self

    def state_bytes(self, geometry: "KVGeometry", layer: LayerSpec) -> int | None:
        """Per-sequence bytes of a ``linear`` layer's fixed state under this engine, per
        rank, or ``None`` for the default (``state_values`` in the geometry's state format)."""
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name}


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

# name -> factory(**options) -> Layout
LAYOUTS: dict[str, Callable[..., Layout]] = {"contiguous": Contiguous}


def get_layout(name: str = "contiguous", **options: Any) -> Layout:
    """The layout called ``name`` built with ``options`` (e.g. ``block_size=16``).

    Raises:
        GeometryError: unknown layout name.
    """
    import kvgate.layouts  # noqa: F401  (registers the engine layouts into LAYOUTS)

    if name not in LAYOUTS:
        raise GeometryError(f"unknown layout {name!r}", hint=f"one of: {', '.join(LAYOUTS)}")
    try:
        return LAYOUTS[name](**options)
    except TypeError as exc:
        raise GeometryError(f"bad option for layout {name!r}: {exc}") from exc


# --------------------------------------------------------------------------- geometry

def _attention_bytes(g: "KVGeometry", layer: LayerSpec) -> int:
    h = kv_heads_per_rank(layer.num_kv_heads, g.tp)
    return g.fmt_k.row_bytes(h, layer.head_dim) + g.fmt_v.row_bytes(h, layer.v_head_dim or layer.head_dim)


def _mla_bytes(g: "KVGeometry", layer: LayerSpec) -> int:
    # NOTE: one latent per token, K format, no V; replicated on every TP rank.
    return g.fmt_k.vector_bytes(layer.latent_dim)


_POSITION_BYTES: dict[str, Callable[["KVGeometry", LayerSpec], int]] = {
    "full": _attention_bytes,
    "sliding": _attention_bytes,
    "mla": _mla_bytes,
    "linear": lambda g, layer: 0,
    "shared": lambda g, layer: 0,
}


def _state_bytes(g: "KVGeometry", layer: LayerSpec) -> int:
    """Fixed state of a linear layer per sequence, per rank.

    The state is split over ``state_heads`` across TP ranks (vLLM shards Mamba heads);
    with ``state_heads == 1`` it is replicated on every rank.
    """
    if layer.kind != "linear" or not layer.state_values:
        return 0
    values = layer.state_values
    if layer.state_heads > 1 and g.tp > 1:
        values = values // layer.state_heads * kv_heads_per_rank(layer.state_heads, g.tp)
    return g.fmt_state.vector_bytes(values)


def _layout_state_bytes(g: "KVGeometry", layer: LayerSpec) -> int:
    if layer.kind != "linear":
        return 0
    b = g.layout.state_bytes(g, layer)
    return _state_bytes(g, layer) if b is None else b


def state_values_per_rank(layer: LayerSpec, tp: int, *, conv_columns: int | None = None) -> tuple[int, int]:
    """``(conv values, ssm values)`` of a linear layer on one tensor-parallel rank.

    ``conv_columns`` is how many convolution columns the engine keeps (vLLM and
    llama.cpp: ``conv_kernel − 1``; transformers: ``conv_kernel``). Both parts are split
    over ``state_heads`` the way vLLM shards Mamba heads (``MambaStateShapeCalculator``
    divides conv channels and heads by tp).

    Raises:
        GeometryError: tp does not divide the state heads (or vice versa).
    """
    cols = layer.conv_kernel - 1 if conv_columns is None else conv_columns
    conv = layer.conv_dim * cols
    ssm = layer.ssm_values
    if not layer.conv_dim and not ssm:  # a spec built from state_values alone
        ssm = layer.state_values
    if layer.state_heads > 1 and tp > 1:
        per = kv_heads_per_rank(layer.state_heads, tp)
        conv = conv * per // layer.state_heads
        ssm = ssm * per // layer.state_heads
    return conv, ssm


class KVGeometry:
    """Bytes of a model's KV cache under one KV format, TP size and layout.

    Args:
        model: the :class:`ModelSpec`.
        kv_format: format of K rows (and of V rows unless ``kv_format_v`` is given).
        kv_format_v: format of V rows, when it differs from K.
        tp: tensor-parallel size; all figures are **per rank**.
        layout: a :class:`Layout` (default :class:`Contiguous`).
        state_format: format of linear-layer state (default fp32, as llama.cpp and
            vLLM's Mamba state default).

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
    ) -> None:
        self.model = model
        self.fmt_k = kv_format if isinstance(kv_format, KVFormat) else get_format(kv_format)
        fv = kv_format_v if kv_format_v is not None else self.fmt_k
        self.fmt_v = fv if isinstance(fv, KVFormat) else get_format(fv)
        self.fmt_state = state_format if isinstance(state_format, KVFormat) else get_format(state_format)
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
        return sum(b for layer, b in zip(self.model.layers, self._pos_bytes) if layer.kind in ("full", "sliding", "mla"))

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
            "tp": self.tp,
            "layout": self.layout.to_dict(),
            "layers": self.model.num_layers,
            "layer_kinds": self.model.kinds(),
        }


def _check_len(value: int, what: str = "max_seq") -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise GeometryError(f"{what} must be a positive integer, got {value!r}")


# Engine layouts (vllm, llama.cpp) register themselves into LAYOUTS on import; importing
# them here keeps ``LAYOUTS`` complete wherever geometry is used.
import kvgate.layouts  # noqa: E402,F401
