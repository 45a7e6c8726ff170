"""vLLM's human-readable integers (``--max-model-len 32k``).

Rule (``vllm/engine/arg_utils.py`` ``human_readable_int``, 0.8 … 0.2x; moved to
``vllm/utils/argparse_utils.py`` later with the same table): a number with one suffix
letter; lower-case is decimal (``k`` = 10^3, ``m`` = 10^6, ``g`` = 10^9, ``t`` = 10^12) and
may carry decimals (``25.6k`` = 25,600, via ``int(float(n) × mult)``); upper-case is
binary (``K`` = 2^10, ``M`` = 2^20, ``G`` = 2^30, ``T`` = 2^40) and must be a whole number.
So ``32k`` is 32,000 and ``32K`` is 32,768; ``1m`` is 1,000,000. A plain integer is
itself. ``--max-model-len`` also takes ``auto`` / ``-1`` in recent releases ("fit the
largest length the memory allows"), returned here as ``None``.
"""

from __future__ import annotations

import re
from decimal import Decimal

from kvgate.errors import KvgateError

#: kvgate's own cap on any such flag (2^50: a PiB of bytes, 10^15 tokens): past it no answer means anything
MAX_VALUE = 2**50
_RE = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DEC = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BIN = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_readable_int(text: str, *, flag: str = "value", allow_auto: bool = False) -> int | None:
    """Parse ``text`` as vLLM does (module docstring).

    Returns:
        the int, or ``None`` for ``auto``/``-1`` when ``allow_auto``.

    Raises:
        KvgateError: not a number, a decimal with a binary suffix, not positive, or above
            :data:`MAX_VALUE`.
    """
    value = str(text).strip()
    if allow_auto and value.lower() in ("auto", "-1"):
        return None
    if len(value) > 64:  # a 400-digit "length" overflows float() below: implausible, said as such
        raise KvgateError(f"{flag} {value!r:.40} is not plausible (above 2^50)",
                          hint="no context length, sequence count or KV budget comes near it")
    m = _RE.fullmatch(value)
    if m:
        number, suffix = m.groups()
        if Decimal(number) * (_DEC.get(suffix) or _BIN[suffix]) > MAX_VALUE:
            raise KvgateError(f"{flag} {value!r:.40} is not plausible (above 2^50)",
                              hint="no context length, sequence count or KV budget comes near it")
        if suffix in _DEC:
            n = int(float(number) * _DEC[suffix])
        else:
            if "." in number:
                raise KvgateError(f"{flag} {value!r}: decimals are not allowed with binary suffixes like {suffix}",
                                  hint=f"did you mean {number}{suffix.lower()}? (vLLM's own message)")
            n = int(number) * _BIN[suffix]
    else:
        try:
            n = int(value)
        except ValueError:
            raise KvgateError(f"{flag} {value!r} is not an integer",
                              hint="e.g. 32768, 32k (= 32,000), 32K (= 32,768), 1m") from None
    if n <= 0:
        raise KvgateError(f"{flag} must be positive, got {value!r}")
    if n > MAX_VALUE:
        raise KvgateError(f"{flag} {value!r:.40} is not plausible (above 2^50)",
                          hint="no context length, sequence count or KV budget comes near it")
    return n
