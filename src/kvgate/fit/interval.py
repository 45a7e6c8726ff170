"""Byte intervals and named budget terms: the unit every ``kvgate fit`` figure is made of.

An :class:`Interval` is a closed range ``[low, high]`` of ``int`` bytes (``low <= high``);
a point value is ``Interval(v, v)``. A :class:`Term` is one named part of an engine's
memory budget (weights, activation peak, ...) with the interval it may take and where
that interval comes from (a file read, an engine rule at a pinned release, a calibration
on real startup logs).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kvgate.errors import KvgateError


@dataclass(frozen=True)
class Interval:
    """``[low, high]`` in bytes (ints; may be negative for a budget that ran out).

    Raises:
        KvgateError: ``low > high`` or a non-int bound.
    """

    low: int
    high: int

    def __post_init__(self) -> None:
        for v in (self.low, self.high):
            if not isinstance(v, int) or isinstance(v, bool):
                raise KvgateError(f"interval bounds must be int bytes, got {v!r}")
        if self.low > self.high:
            raise KvgateError(f"interval low {self.low} is above high {self.high}")

    @classmethod
    def point(cls, v: int) -> Interval:
        """The one-value interval ``[v, v]``."""
        return cls(v, v)

    @classmethod
    def scaled(cls, base: int, lo: Fraction, hi: Fraction) -> Interval:
        """``[floor(base·lo), ceil(base·hi)]``: a ratio band around ``base`` bytes."""
        return cls(_floor(base * lo), _ceil(base * hi))

    @property
    def width(self) -> int:
        """``high − low`` in bytes."""
        return self.high - self.low

    def __add__(self, other: Interval) -> Interval:
        return Interval(self.low + other.low, self.high + other.high)

    def __sub__(self, other: Interval) -> Interval:
        # the smallest result takes the largest subtrahend
        return Interval(self.low - other.high, self.high - other.low)

    def contains(self, v: int | float) -> bool:
        """``low <= v <= high``."""
        return self.low <= v <= self.high

    def to_dict(self) -> dict[str, int]:
        return {"low": self.low, "high": self.high}


def _floor(x: Fraction | int) -> int:
    return int(Fraction(x).__floor__())


def _ceil(x: Fraction | int) -> int:
    return int(Fraction(x).__ceil__())


@dataclass(frozen=True)
class Term:
    """One named term of a memory budget.

    Attributes:
        name: the engine's name for it where it has one ("weights", "activation peak",
            "non-torch memory", "CUDA graph pool", ...).
        value: its :class:`Interval` in bytes, per GPU (per TP/PP rank).
        source: where the interval comes from (file, engine rule, calibration data).
        counted: False for a term shown for the verdict but not subtracted from the KV
            pool by this release (e.g. vLLM's CUDA graph pool before 0.20).
    """

    name: str
    value: Interval
    source: str
    counted: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "low": self.value.low, "high": self.value.high,
                "source": self.source, "subtracted_from_kv_pool": self.counted}


def total(terms: list[Term]) -> Interval:
    """Sum of the counted terms' intervals."""
    out = Interval.point(0)
    for t in terms:
        if t.counted:
            out = out + t.value
    return out
