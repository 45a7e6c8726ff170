"""The :class:`Layout` interface every engine layout implements, and :class:`Geometry`,
what a layout may read of the geometry it is bound to (never write).

A layout says, per layer spec (:mod:`kvgate.geometry.specs`), how many positions one
sequence reserves (:meth:`Layout.positions`), what fixed state it keeps
(:meth:`Layout.state_bytes`), and what the engine makes of the spec
(:meth:`Layout.engine_spec`: llama.cpp's ``-fa off`` V padding, vLLM's hybrid manager
off). Each layout keeps one rule per spec type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from kvgate.geometry.formats import KVFormat
from kvgate.geometry.specs import GeometryError, LayerKind, kv_heads_per_rank
from kvgate.model.spec import LayerSpec, ModelSpec

__all__ = ["Geometry", "GeometryError", "Layout", "check_len", "kv_heads_per_rank", "rule_for"]


class Geometry(Protocol):
    """What a layout reads of a :class:`kvgate.geometry.KVGeometry`."""

    model: ModelSpec
    specs: list[LayerKind]
    engine_specs: list[LayerKind]
    fmt_k: KVFormat
    fmt_v: KVFormat
    fmt_state: KVFormat
    fmt_conv: KVFormat | None
    fmt_ssm: KVFormat | None
    tp: int

    def layer_bytes(self, i: int, max_seq: int) -> int: ...


class Layout:
    """How an engine reserves positions for one sequence (one slot).

    Subclasses override :meth:`positions` (and :meth:`state_bytes` for recurrent state).
    ``name`` is the ``--layout`` value.
    """

    name = "base"

    def positions(self, layer: LayerSpec | LayerKind, max_seq: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def bind(self, geometry: Geometry) -> Layout:
        """Called once by :class:`KVGeometry`; a layout whose rule depends on the whole
        model (vLLM's hybrid block size, llama.cpp's widest V) returns a copy fitted to
        it. It reads ``geometry.specs`` and formats and changes nothing. Default: itself."""
        return self

    def engine_spec(self, spec: LayerKind) -> LayerKind:
        """What this engine allocates for ``spec`` (default: the spec itself)."""
        return spec

    def rank_specs(self, specs: list[LayerKind]) -> list[LayerKind]:
        """The engine specs of the layers one rank holds, in layer order (vLLM's
        pipeline stages hold only their own layers). Default: every layer."""
        return specs

    def state_bytes(self, geometry: Geometry, spec: LayerKind) -> int:
        """Fixed per-sequence bytes of ``spec`` on one rank. Default: its recurrent state
        in the geometry's ``state_format``, ``conv_kernel − 1`` conv columns."""
        st = spec.recurrent
        return st.state_bytes(geometry.fmt_state, geometry.fmt_state, geometry.tp) if st else 0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name}


R = TypeVar("R")


def rule_for(rules: Mapping[type, R], spec: LayerKind, layout: str) -> R:
    """The rule of ``rules`` for the spec's type.

    Raises:
        GeometryError: the layout has no rule for this kind of layer.
    """
    try:
        return rules[type(spec)]
    except KeyError:
        raise GeometryError(f"layout {layout!r} has no rule for {type(spec).__name__} layers") from None


def check_len(value: int, what: str = "max_seq") -> None:
    """Raises GeometryError unless ``value`` is a positive int."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise GeometryError(f"{what} must be a positive integer, got {value!r}")


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative ints (vLLM ``cdiv``)."""
    return -(-a // b)
