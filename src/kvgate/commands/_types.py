"""argparse ``type=`` converters shared by the commands (counts, rates, fractions)."""

from __future__ import annotations

import argparse
import math
from fractions import Fraction

from kvgate.errors import KvgateError


def _int(text: str) -> int:
    try:
        return int(str(text).replace(",", "").replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def positive_int(text: str) -> int:
    """An integer ≥ 1 (``8192``, ``8,192``, ``8_192``)."""
    v = _int(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {v}")
    return v


def nonneg_int(text: str) -> int:
    """An integer ≥ 0."""
    v = _int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {v}")
    return v


def positive_float(text: str) -> float:
    """A finite number > 0 (rates, speeds)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return v


def parse_fraction(text: str) -> Fraction:
    """``10%``, ``0.1`` or ``1/10`` → Fraction(1, 10).

    Raises:
        KvgateError: not a number.
    """
    t = str(text).strip()
    try:
        return Fraction(t[:-1]) / 100 if t.endswith("%") else Fraction(t)
    except (ValueError, ZeroDivisionError) as exc:
        raise KvgateError(f"not a fraction or percentage: {text!r}", hint="e.g. 10% or 0.1") from exc


def vllm_int(text: str) -> int:
    """A positive integer as vLLM's own flags read it: ``32k`` = 32,000, ``32K`` = 32,768
    (:func:`kvgate.fit.humanint.human_readable_int`, vLLM's ``human_readable_int``)."""
    from kvgate.fit.humanint import human_readable_int

    try:
        v = human_readable_int(text)
    except KvgateError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    if v is None or v <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return v
