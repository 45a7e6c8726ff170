"""CAN'T TELL says what decides it: the widest term of the budget, and the flag that
narrows that term (issue 29: ``fit llama-3.1-70b -tp 2`` said CAN'T TELL because the
weights carried an estimate's ±15% band, and its hint did not mention ``--weights-bytes``
or a model folder)."""

from __future__ import annotations

import textwrap
from typing import Any

from kvgate.units import fmt_gib

_WEIGHTS_FLAG = ("pass --weights-bytes with the checkpoint's size (its model.safetensors.index.json "
                 "metadata.total_size), or the model folder (its safetensors headers give the exact bytes)")


def deciding_term(answer: Any) -> str | None:
    """For a CAN'T TELL ``answer``, one line naming the widest counted term and how to
    narrow it; ``None`` for any other verdict, when no term has a width, or when even the
    pool's low end holds a full-length request (then no budget term decides it: the CAN'T TELL
    has another reason, e.g. a multimodal model's encoder peak)."""
    if getattr(answer, "fits", None) != "unknown":
        return None
    conc = getattr(answer, "max_concurrency", None) or {}
    if isinstance(conc.get("low"), (int, float)) and conc["low"] >= 1:
        return None  # even the pool's low end holds a request: no budget term decides it (another reason does)
    terms = [t for t in getattr(answer, "terms", []) or [] if getattr(t, "counted", True)]
    if not terms:
        return None
    widest = max(terms, key=lambda t: t.value.high - t.value.low)
    width = widest.value.high - widest.value.low
    if width <= 0:
        return None
    what = (f"the term that decides it is {widest.name} ({fmt_gib(widest.value.low)} … "
            f"{fmt_gib(widest.value.high)}, {fmt_gib(width)} wide)")
    if widest.name == "weights" and "ESTIMATE" in widest.source:
        return f"{what}: it is an estimate from the config; {_WEIGHTS_FLAG}"
    if widest.name == "weights":
        return f"{what}: the checkpoint's bytes are known; what the engine adds while loading is the band"
    return f"{what}: only a measurement narrows it"


def add_deciding_term(answer: Any) -> None:
    """Put :func:`deciding_term`'s line before ``answer.how_to_measure``."""
    line = deciding_term(answer)
    if line is None:
        return
    line = textwrap.fill(line, 98, subsequent_indent="  ")
    answer.how_to_measure = f"{line}\n  {answer.how_to_measure}" if answer.how_to_measure else line
