"""Byte quantities: parsing and display, IEC (MiB, GiB) vs SI (MB, GB).

Inside kvgate every memory quantity is an ``int`` of bytes. This module is the only
place where bytes become text or text becomes bytes.

- IEC units are powers of two: KiB = 2**10, MiB = 2**20, GiB = 2**30, TiB = 2**40.
- SI units are powers of ten: kB = 10**3, MB = 10**6, GB = 10**9, TB = 10**12.

The two are never mixed: a bare ``M``/``G`` suffix is rejected because it is ambiguous
(``nvidia-smi`` prints ``MiB``; GPU vendors' datasheets print ``GB``).

>>> parse_bytes("32607MiB")
34190917632
>>> parse_bytes("32.6GB")
32600000000
>>> parse_bytes("24 GiB")
25769803776
>>> fmt_mib(415_236_096)
'396 MiB'
>>> fmt_gib(3 * 2**30 + 2**29)
'3.50 GiB'
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation, localcontext
from fractions import Fraction

from kvgate.errors import KvgateError

#: How an unknown value prints, everywhere (JSON: null); never 0.
NA = "not available"

KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40
KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12

#: The largest byte count kvgate accepts as input: 2**64 − 1 (16 EiB), the range of the
#: unsigned 64-bit counters that NVML, /proc and cgroups report. A longer number (an
#: 80-digit "byte count") is a typo or an attack, never a memory size.
MAX_BYTES = 2**64 - 1

# Suffix -> multiplier. Lower-cased for lookup; "kb" is SI (10^3), "kib" IEC.
_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": TiB,
    "kb": KB,
    "mb": MB,
    "gb": GB,
    "tb": TB,
}

# Digits with optional thousands separators in groups of three ("32,607"), or "_" between
# digits ("32_607"); a "," anywhere else ("1,5GB") is an error, not a decimal point.
_NUMBER_UNIT = re.compile(
    r"^\s*((?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+(?:_[0-9]+)*)(?:\.[0-9]+)?|\.[0-9]+)\s*([A-Za-z]*)\s*$"
)


class UnitError(KvgateError):
    """A byte quantity could not be parsed."""


def parse_bytes(text: str | int, *, allow_zero: bool = False) -> int:
    """Parse a byte quantity such as ``"32607MiB"``, ``"24GiB"``, ``"32.6GB"`` or ``"4096"``.

    A bare number is bytes. The result is an ``int`` of bytes, rounded half-even to the
    nearest byte when a fractional value of a unit is not a whole number of bytes.

    Raises:
        UnitError: on an empty string, an unknown or ambiguous unit (``M``, ``G``), a
            negative value, or zero unless ``allow_zero``.
    """
    if isinstance(text, bool):
        raise UnitError(f"not a byte quantity: {_short(text)}")
    if isinstance(text, int):
        value = text
    else:
        m = _NUMBER_UNIT.match(str(text))
        if not m and str(text).strip().startswith("-") and _NUMBER_UNIT.match(str(text).strip()[1:]):
            raise UnitError(f"byte quantity must not be negative: {_short(text)}", hint=_POSITIVE_HINT)
        if not m:
            raise UnitError(
                f"cannot parse byte quantity {_short(text)}",
                hint="write a number with a unit, e.g. 32607MiB, 24GiB, 32.6GB, or plain bytes",
            )
        number, raw_unit = m.group(1).replace("_", "").replace(",", ""), m.group(2)
        if raw_unit.endswith("b") and raw_unit != "b" or raw_unit.lower() == "b" and raw_unit == "b":
            raise UnitError(
                f"unit {raw_unit!r} in {_short(text)} is bits (lower-case b)",
                hint="write bytes with an upper-case B: KiB/MiB/GiB (powers of 2) or kB/MB/GB (powers of 10)",
            )
        unit = raw_unit.lower()
        if unit not in _UNITS:
            hint = "use KiB/MiB/GiB/TiB (powers of 2) or kB/MB/GB/TB (powers of 10)"
            if unit in {"k", "m", "g", "t"}:
                raise UnitError(f"ambiguous unit {m.group(2)!r} in {_short(text)}", hint=hint)
            raise UnitError(f"unknown unit {m.group(2)!r} in {_short(text)}", hint=hint)
        with localcontext() as ctx:  # exact for any number the regex admits
            ctx.prec = max(80, len(number) + 20)
            try:
                exact = Decimal(number) * _UNITS[unit]
            except InvalidOperation as exc:  # pragma: no cover - regex already validated
                raise UnitError(f"cannot parse byte quantity {_short(text)}") from exc
            value = int(exact.to_integral_value(rounding=ROUND_HALF_EVEN))
    if value < 0:
        raise UnitError(f"byte quantity must not be negative: {_short(text)}", hint=_POSITIVE_HINT)
    if value > MAX_BYTES:
        raise UnitError(f"byte quantity {_short(text)} is more than 2**64 − 1 bytes (16 EiB): not a memory size",
                        hint="check the number and its unit")
    if value == 0 and not allow_zero:
        raise UnitError(f"byte quantity must be positive: {_short(text)}", hint=_POSITIVE_HINT)
    return value


_POSITIVE_HINT = "a memory size is more than 0 bytes, e.g. 24GiB, 32.6GB or 4096"


def _short(text: object, limit: int = 40) -> str:
    """``repr`` of user input, cut to ``limit`` characters (an 80-digit number stays readable)."""
    r = repr(text) if not isinstance(text, int) else str(text)
    return r if len(r) <= limit else f"{r[:limit]}… ({len(r):,} characters)"


def _group(value: Fraction | int, decimals: int) -> str:
    """Format with thousands separators and a fixed number of decimals (half-even).

    Exact for any size: the decimal precision grows with the number of integer digits
    (a fixed precision raised ``InvalidOperation`` on a 90-digit value).
    """
    value = Fraction(value)
    whole_digits = len(str(abs(value.numerator) // value.denominator))
    with localcontext() as ctx:
        ctx.prec = whole_digits + decimals + 30
        d = Decimal(value.numerator) / Decimal(value.denominator)
        q = Decimal(1).scaleb(-decimals)
        return f"{d.quantize(q, rounding=ROUND_HALF_EVEN):,.{decimals}f}"


def fmt_bytes(n: int) -> str:
    """``415,236,096 B``: the exact byte count with thousands separators.

    >>> fmt_bytes(415236096)
    '415,236,096 B'
    """
    return f"{int(n):,} B"


def fmt_mib(n: int | Fraction, decimals: int | None = None) -> str:
    """Bytes as MiB (2**20). Whole MiB print without decimals unless ``decimals`` is given.

    >>> fmt_mib(13_612_613_632)
    '12,982 MiB'
    >>> fmt_mib(Fraction(24710357401, 1), 1)
    '23,565.6 MiB'
    """
    value = Fraction(n) / MiB
    if decimals is None:
        decimals = 0 if value.denominator == 1 else 1
    return f"{_group(value, decimals)} MiB"


def fmt_mib_range(low: int | Fraction, high: int | Fraction) -> str:
    """A byte interval as whole MiB (2**20), or one value to 0.01 MiB when both ends are equal.

    >>> fmt_mib_range(453_613_978, 507_301_069)
    '433–484 MiB'
    >>> fmt_mib_range(644_939_776, 644_939_776)
    '615.06 MiB'
    """
    if low == high:
        return fmt_mib(low, 2)
    return f"{_group(Fraction(low) / MiB, 0)}–{fmt_mib(high, 0)}"


def fmt_gib(n: int | Fraction, decimals: int = 2) -> str:
    """Bytes as GiB (2**30) with ``decimals`` places.

    >>> fmt_gib(3_321_888_768)
    '3.09 GiB'
    """
    return f"{_group(Fraction(n) / GiB, decimals)} GiB"


def fmt_gb(n: int | Fraction, decimals: int = 2) -> str:
    """Bytes as GB (10**9) with ``decimals`` places.

    >>> fmt_gb(34_190_917_632)
    '34.19 GB'
    """
    return f"{_group(Fraction(n) / GB, decimals)} GB"


def fmt_human(n: int | Fraction) -> str:
    """Bytes in the largest IEC unit that keeps the value >= 1, two decimals above MiB.

    >>> fmt_human(512)
    '512 B'
    >>> fmt_human(524288)
    '512.00 KiB'
    >>> fmt_human(2 * GiB)
    '2.00 GiB'
    """
    n = Fraction(n)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            return f"{_group(n / size, 2)} {unit}"
    return f"{_group(n, 0)} B"


def fmt_pct(part: int | Fraction, whole: int | Fraction, decimals: int = 1) -> str:
    """``part / whole`` as a percentage string; ``n/a`` when ``whole`` is 0.

    >>> fmt_pct(415236096, 34190917632)
    '1.2%'
    """
    if not whole:
        return "n/a"
    return f"{_group(Fraction(part) / Fraction(whole) * 100, decimals)}%"


def parse_duration_s(text: str) -> float:
    """Parse a duration such as ``"1ms"``, ``"500ms"``, ``"2s"``, ``"0.5"`` (seconds).

    Returns seconds as a float (durations are not memory quantities).

    >>> parse_duration_s("500ms")
    0.5
    >>> parse_duration_s("2s")
    2.0

    Raises:
        UnitError: on an unknown unit or a negative value.
    """
    m = re.match(r"^\s*([0-9]*\.?[0-9]+)\s*(us|µs|ms|s|min)?\s*$", str(text))
    if not m:
        raise UnitError(f"cannot parse duration {_short(text)}", hint="e.g. 1ms, 500ms, 2s")
    value = float(m.group(1))
    if not math.isfinite(value):
        raise UnitError(f"duration {_short(text)} is not a finite number of seconds")
    scale = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, None: 1.0, "min": 60.0}[m.group(2)]
    return value * scale


# -- flag values: counts, reals, shares -------------------------------------------------
# Every number a flag takes goes through one of these (the argparse converters of
# kvgate.commands wrap them): overflow, NaN, infinity, a negative or out-of-range value is
# refused naming the flag, before any arithmetic can overflow or hang on it.

#: The largest count a flag takes (2**50: 10**15 tokens, sequences or blocks); past it no
#: answer means anything and later float arithmetic overflows.
MAX_COUNT = 2**50

#: Longest number text read from a flag (a 400-digit "count" is a typo or an attack).
MAX_VALUE_CHARS = 64

# digits grouped by "," in threes ("32,607") or "_" between digits; optional decimals and
# exponent; a "," elsewhere ("0,1,2") is not a number.
_REAL = re.compile(
    r"^([+-]?)((?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+(?:_[0-9]+)*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?$"
)


def _w(what: str) -> str:
    """``what`` as a message prefix (an argparse converter passes "": argparse names the flag)."""
    return f"{what}: " if what else ""


def _value_decimal(text: object, what: str) -> Decimal:
    """``text`` as an exact Decimal: digits with optional grouping, decimals and exponent.
    Refuses NaN, infinity, ``0,1,2``, and numbers past ±10**60 before they are built (a
    ``1e999999999`` would otherwise take minutes as a Fraction)."""
    s = str(text).strip()
    if len(s) > MAX_VALUE_CHARS:
        raise UnitError(f"{_w(what)}{_short(s)} is not a number kvgate takes (more than {MAX_VALUE_CHARS} characters)",
                        hint="check the value")
    m = _REAL.match(s)
    if not m:
        low = s.lower().lstrip("+-")
        if low in ("nan", "inf", "infinity"):
            raise UnitError(f"{_w(what)}must be a finite number, got {_short(s)}")
        raise UnitError(f"{_w(what)}not a number: {_short(s)}",
                        hint="digits, thousands grouped by commas in threes (8,192) or underscores (8_192)")
    sign, digits, exp = m.group(1), m.group(2).replace(",", "").replace("_", ""), m.group(3)
    if exp is not None and abs(int(exp)) > 60:
        raise UnitError(f"{_w(what)}{_short(s)} is out of range", hint="check the exponent")
    with localcontext() as ctx:
        ctx.prec = 200
        d = Decimal(sign + digits + (f"e{exp}" if exp is not None else ""))
    if d.is_zero():
        return Decimal(0)
    return d


def parse_count(text: str | int, *, what: str = "value", minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    """A whole number from a flag (``8192``, ``8,192``, ``8_192``; ``8e3`` when whole) in
    ``[minimum, maximum]``.

    >>> parse_count("8,192", what="--slots")
    8192
    >>> parse_count("0,1,2", what="--device-blocks")
    Traceback (most recent call last):
    ...
    kvgate.units.UnitError: --device-blocks: not a number: '0,1,2'

    Raises:
        UnitError: not a whole number, NaN/infinity, or outside the range (naming ``what``).
    """
    if isinstance(text, bool):
        raise UnitError(f"{_w(what)}not a number: {text!r}")
    d = Decimal(text) if isinstance(text, int) else _value_decimal(text, what)
    if d != d.to_integral_value():
        raise UnitError(f"{_w(what)}must be a whole number, got {_short(str(text))}")
    return _in_range(int(d), what, text, minimum, maximum)


def _in_range(v: int, what: str, text: object, minimum: int, maximum: int) -> int:
    shown = _short(str(text))
    if v < minimum:
        rule = {1: "must be positive", 0: "must not be negative"}.get(minimum, f"must be at least {minimum:,}")
        raise UnitError(f"{_w(what)}{rule}, got {shown}")
    if v > maximum:
        raise UnitError(f"{_w(what)}{_short(str(text))} is above {maximum:,}: not a value that means anything here",
                        hint="check the number")
    return v


def parse_real(text: str | float, *, what: str = "value", minimum: float = 0.0, maximum: float = 1e15,
               open_min: bool = False) -> float:
    """A finite real number from a flag in ``[minimum, maximum]`` (``(minimum, maximum]``
    when ``open_min``); NaN, infinity and ``1e999`` refused, as are values past the range
    before any arithmetic overflows on them.

    >>> parse_real("9500", what="--prefill-tokens-per-s", open_min=True)
    9500.0

    Raises:
        UnitError: not a number, not finite, or outside the range (naming ``what``).
    """
    if isinstance(text, bool):
        raise UnitError(f"{_w(what)}not a number: {text!r}")
    if isinstance(text, float):
        if not math.isfinite(text):
            raise UnitError(f"{_w(what)}must be a finite number, got {text}")
        d = Decimal(repr(text))
    elif isinstance(text, int):
        d = Decimal(text)
    else:
        d = _value_decimal(text, what)
    shown = _short(str(text))
    if d < Decimal(repr(minimum)) or open_min and d == Decimal(repr(minimum)):
        raise UnitError(f"{_w(what)}must be {'above' if open_min else 'at least'} {minimum:g}, got {shown}")
    if d > Decimal(repr(maximum)):
        raise UnitError(f"{_w(what)}{shown} is above {maximum:g}: not a value that means anything here",
                        hint="check the number")
    return float(d)


def parse_share(text: str | Fraction, *, what: str = "value", minimum: Fraction | int = 0,
                maximum: Fraction | int | None = 1, open_min: bool = False, open_max: bool = False) -> Fraction:
    """A share, exactly: ``10%``, ``0.1`` or ``1/10`` → Fraction(1, 10), in
    ``[minimum, maximum]`` (no upper bound when ``maximum`` is None; ``open_min``/``open_max``
    leave out that end).

    >>> parse_share("10%", what="--min-gain")
    Fraction(1, 10)
    >>> parse_share("200%", what="--min-gain")
    Traceback (most recent call last):
    ...
    kvgate.units.UnitError: --min-gain: must be at most 100%, got '200%'

    Raises:
        UnitError: not a number, a percentage or a ratio, or outside the range.
    """
    if isinstance(text, Fraction):
        v = text
    else:
        s = str(text).strip()
        pct = s.endswith("%")
        body = s[:-1].strip() if pct else s
        if "/" in body and not pct:
            num, _, den = body.partition("/")
            d_num, d_den = _value_decimal(num, what), _value_decimal(den, what)
            if d_den.is_zero():
                raise UnitError(f"{_w(what)}division by zero in {_short(s)}", hint="e.g. 10%, 0.1 or 1/10")
            v = Fraction(d_num) / Fraction(d_den)
        else:
            v = Fraction(_value_decimal(body, what))
            if pct:
                v /= 100
    shown = _short(str(text))
    lo, hi = Fraction(minimum), None if maximum is None else Fraction(maximum)
    if v < lo or open_min and v == lo:
        raise UnitError(f"{_w(what)}must be {'above' if open_min else 'at least'} {_share_text(lo)}, got {shown}")
    if hi is not None and (v > hi or open_max and v == hi):
        raise UnitError(f"{_w(what)}must be {'below' if open_max else 'at most'} {_share_text(hi)}, got {shown}")
    return v


def _share_text(v: Fraction) -> str:
    return f"{float(v * 100):g}%"
