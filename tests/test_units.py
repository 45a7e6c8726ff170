import doctest
from fractions import Fraction

import pytest

import kvgate.units as units
from kvgate.units import UnitError, fmt_gib, fmt_mib, fmt_pct, parse_bytes


def test_doctests():
    assert doctest.testmod(units).failed == 0


@pytest.mark.parametrize(
    "text,expected",
    [
        ("32607MiB", 32607 * 2**20),
        ("32607 MiB", 32607 * 2**20),
        ("24GiB", 24 * 2**30),
        ("32.6GB", 32_600_000_000),
        ("1.5KiB", 1536),
        ("4096", 4096),
        ("4,096B", 4096),
        ("32,607 MiB", 32607 * 2**20),
        ("32_607MiB", 32607 * 2**20),
        ("1TB", 10**12),
        ("1TiB", 2**40),
        ("2kB", 2000),
        ("2KB", 2000),
    ],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected
    assert isinstance(parse_bytes(text), int)


@pytest.mark.parametrize("text", ["", "abc", "12 parsecs", "-5MiB", "5 M", "5G", "MiB", "1.2.3GB", "80Gb", "8mib", "5b", "1,5GB", "1,,,0GiB", "12,34MiB"])
def test_parse_bytes_rejects(text):
    with pytest.raises(UnitError):
        parse_bytes(text)


def test_zero_needs_permission():
    with pytest.raises(UnitError):
        parse_bytes("0MiB")
    assert parse_bytes("0MiB", allow_zero=True) == 0


def test_iec_and_si_are_not_mixed():
    assert parse_bytes("1GB") != parse_bytes("1GiB")
    assert fmt_gib(32_600_000_000) == "30.36 GiB"


def test_formatting():
    assert fmt_mib(415_236_096) == "396 MiB"
    assert fmt_mib(Fraction(30771825868.8)) == "29,346.3 MiB"
    assert fmt_pct(3168, 32607) == "9.7%"
    assert fmt_pct(1, 0) == "n/a"


def test_huge_values_format():
    # Formatting stays exact for values of any size (derived values such as boundaries
    # can exceed any input); a fixed 80-digit decimal precision raised InvalidOperation.
    n = 99999999999999999999999999999 * 2**30
    assert fmt_mib(n).endswith(" MiB") and fmt_gib(n).startswith("99,999,999,999,999,999,999,999,999,999.00")
    big = 10**88 * 2**30  # issue 11 #10: 80+ digits
    assert fmt_gib(big) == f"{10**88:,}.00 GiB"
    assert fmt_mib(10**90 * 2**20) == f"{10**90:,} MiB"
    assert fmt_pct(10**90, 4) == f"{25 * 10**90:,}.0%"  # 10**90 / 4 · 100


def test_parsing_is_exact_up_to_2_64_and_refuses_beyond():
    assert parse_bytes("15EiB".replace("EiB", "") + "TiB") == 15 * 2**40
    assert parse_bytes(str(2**64 - 1)) == 2**64 - 1
    assert parse_bytes("16777215.5MiB") == 16777215 * 2**20 + 2**19
    with pytest.raises(UnitError, match="2\\*\\*64"):
        parse_bytes(str(2**64))
    with pytest.raises(UnitError, match="characters"):  # an 80-digit byte count: named, cut, refused
        parse_bytes("9" * 80)
    with pytest.raises(UnitError):
        parse_bytes("9" * 80 + "TiB")


@pytest.mark.parametrize("text", ["-1", "-5GiB", " -3 MiB", "-0.5GB"])
def test_a_negative_byte_quantity_is_said_negative(text):
    """``--weights-bytes -1`` said "cannot parse byte quantity"; it parses, and is negative."""
    with pytest.raises(UnitError, match="must not be negative") as e:
        parse_bytes(text)
    assert e.value.hint and "more than 0 bytes" in e.value.hint


@pytest.mark.parametrize("text", ["-x", "--5", "-"])
def test_a_dash_that_is_no_number_still_cannot_be_parsed(text):
    with pytest.raises(UnitError, match="cannot parse byte quantity"):
        parse_bytes(text)
