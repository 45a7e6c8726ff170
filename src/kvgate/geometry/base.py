"""The pieces every engine layout shares: the :class:`Layout` interface, the TP split
of KV heads and of recurrent state, and :class:`GeometryError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvgate.errors import KvgateError
from kvgate.model.spec import LayerSpec

if TYPE_CHECKING:
    from kvgate.geometry.core import KVGeometry


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


class Layout:
    """How an engine reserves positions for one sequence (one slot).

    Subclasses override :meth:`positions`. ``name`` is the ``--layout`` value.
    """

    name = "base"
    description = ""

    def positions(self, layer: LayerSpec, max_seq: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def bind(self, geometry: KVGeometry) -> Layout:
        """Called once by :class:`KVGeometry`; a layout whose rule depends on the whole
        model (vLLM's hybrid block size) returns a copy fitted to it. Default: itself."""
        return self

    def state_bytes(self, geometry: KVGeometry, layer: LayerSpec) -> int | None:
        """Per-sequence bytes of a ``linear`` layer's fixed state under this engine, per
        rank, or ``None`` for the default (``state_values`` in the geometry's state format)."""
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name}


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


def _check_len(value: int, what: str = "max_seq") -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise GeometryError(f"{what} must be a positive integer, got {value!r}")


