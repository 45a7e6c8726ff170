"""argparse ``type=`` converters shared by the commands (counts, rates, fractions).

Each is a thin wrapper over :mod:`kvgate.units`' one parser of flag values
(:func:`~kvgate.units.parse_count`, :func:`~kvgate.units.parse_real`,
:func:`~kvgate.units.parse_share`): overflow, NaN, infinity and out-of-range values are
refused there; here the refusal becomes argparse's error, which names the flag
(``argument --slots: must be positive, got '0'``), prints ``ERROR:``/``HINT:`` and exits 2
(one JSON document under ``--json``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from fractions import Fraction
from typing import TypeVar

from kvgate.errors import KvgateError
from kvgate.units import MAX_COUNT, parse_count, parse_real, parse_share

T = TypeVar("T")


#: the last value a converter refused, ``{message: hint}``: argparse hands the parser's
#: ``error`` only the message, so the hint (``unit 'Gib' is bits`` → "write bytes with an
#: upper-case B") is kept here for it (:func:`refusal_hint`)
_REFUSED: dict[str, str | None] = {}


def refusal_hint(message: str) -> str | None:
    """The hint of the converter's refusal that argparse's ``message`` reports, if any."""
    return next((hint for text, hint in _REFUSED.items() if message.endswith(text)), None)


def _arg(parse: Callable[[str], T]) -> Callable[[str], T]:
    """``parse`` with its :class:`KvgateError` as argparse's ``ArgumentTypeError`` (its hint
    kept for :func:`refusal_hint`)."""
    def convert(text: str) -> T:
        try:
            return parse(text)
        except KvgateError as exc:
            _REFUSED.clear()
            _REFUSED[exc.message] = exc.hint
            raise argparse.ArgumentTypeError(exc.message) from None
    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def count(minimum: int = 0, maximum: int = MAX_COUNT) -> Callable[[str], int]:
    """A converter for a whole number in ``[minimum, maximum]``."""
    def parse(text: str) -> int:
        return parse_count(text, what="", minimum=minimum, maximum=maximum)
    parse.__name__ = "int"
    return _arg(parse)


def real(minimum: float = 0.0, maximum: float = 1e15, *, open_min: bool = False) -> Callable[[str], float]:
    """A converter for a finite real number in ``[minimum, maximum]`` (``(minimum, …]``
    when ``open_min``)."""
    def parse(text: str) -> float:
        return parse_real(text, what="", minimum=minimum, maximum=maximum, open_min=open_min)
    parse.__name__ = "float"
    return _arg(parse)


def share(minimum: Fraction | int = 0, maximum: Fraction | int | None = 1, *,
          open_min: bool = False, open_max: bool = False) -> Callable[[str], Fraction]:
    """A converter for a share (``10%``, ``0.1``, ``1/10``) in ``[minimum, maximum]``."""
    def parse(text: str) -> Fraction:
        return parse_share(text, what="", minimum=minimum, maximum=maximum, open_min=open_min,
                           open_max=open_max)
    parse.__name__ = "fraction"
    return _arg(parse)


#: An integer ≥ 1 (``8192``, ``8,192``, ``8_192``), at most 2**50.
positive_int = count(1)
#: An integer ≥ 0, at most 2**50.
nonneg_int = count(0)
#: A finite number > 0 (rates, speeds), at most 10**15.
positive_float = real(0.0, open_min=True)


def count_list(text: str, flag: str, *, minimum: int = 0, maximum: int = MAX_COUNT, example: str = "256,1024") -> list[int]:
    """A comma list of whole numbers (``--at-capacity-blocks 256,1024``, ``--concurrency 1,2,4``),
    each item by :func:`kvgate.units.parse_count`. An empty item (``1,,2``) or one with a
    leading zero (``1,000``: a thousands comma, not the items 1 and 0) is refused, never
    skipped or split silently.

    >>> count_list("256, 1_024", "--at-capacity-blocks")
    [256, 1024]

    Raises:
        KvgateError: an empty item, a leading zero, not a whole number, outside the range.
    """
    hint = f"a comma separates the items: {flag} {example} (write 1000 or 1_000, not 1,000)"
    out = []
    for item in text.split(","):
        s = item.strip()
        if not s or len(s) > 1 and s.startswith("0"):
            what = "an empty item" if not s else f"{s!r:.40} has a leading zero"
            raise KvgateError(f"{flag}: {what} in {text!r:.80}", hint=hint)
        try:
            out.append(parse_count(s, what=flag, minimum=minimum, maximum=maximum))
        except KvgateError as exc:
            raise KvgateError(exc.message, hint=hint) from None
    return out


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


def nonempty(convert: Callable[[str], T] | None = None, what: str = "the value") -> Callable[[str], T | str]:
    """``convert`` (``str`` when None) that first refuses an empty or blank value: ``--release ""``
    names no release, ``--gpu ""`` no card, ``--kv-format ""`` no format. An empty string is
    never "not given" (a default or this machine's GPU chosen in its place would be a silent
    wrong answer). The refusal is kvgate's own error (``--gpu is empty``), which
    :func:`kvgate.cli.main` prints as ``ERROR:``/``HINT:``, exit 2, one JSON document under
    ``--json``.

    >>> nonempty()("0.11.0")
    '0.11.0'
    >>> nonempty(int, "--slots")(" ")
    Traceback (most recent call last):
    ...
    kvgate.errors.KvgateError: --slots is empty
    """
    def parse(text: str) -> T | str:
        if isinstance(text, str) and not text.strip():
            raise KvgateError(f"{what} is empty", hint=f"give a value, or leave {what} out for its default"
                              if what.startswith("-") else f"give {what}")
        return text if convert is None else convert(text)
    parse.__name__ = getattr(convert, "__name__", "str") if convert is not None else "str"
    setattr(parse, "_kvgate_nonempty", True)  # noqa: B010 - marks a converter already wrapped
    return parse


def refuse_empty_values(parser: argparse.ArgumentParser) -> None:
    """Every option and positional of ``parser`` (and of its subcommands) that takes a value
    refuses an empty one (:func:`nonempty` around its own converter): one rule for every
    string flag of every command, applied where the parser is built (:mod:`kvgate.cli`).

    Left alone: flags that take no value, ``argparse.REMAINDER`` (the command ``kvgate run``
    runs, whose ``""`` arguments are that command's business), and an option marked
    ``empty_refused_later`` (a comma list whose reader refuses an empty list in its own words)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                refuse_empty_values(sub)
            continue
        if action.nargs == 0 or action.nargs == argparse.REMAINDER or getattr(action.type, "_kvgate_nonempty", False) \
                or getattr(action, "empty_refused_later", False):
            continue
        longs = [o for o in action.option_strings if o.startswith("--")]
        what = (longs or action.option_strings or [str(action.metavar or action.dest).upper()])[0]
        convert = action.type
        action.type = nonempty(convert if callable(convert) else None, what)
