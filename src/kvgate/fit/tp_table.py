"""Which tensor parallel sizes fit, and how many full-length requests each holds: the
answer of ``kvgate fit`` at TP 1, 2, 4 and 8 (``--tensor-parallel-size auto`` /
``--tp-size auto``), and the smallest TP that fits named under DOES NOT FIT.

Each row is a whole ``fit`` at that TP (weights split over the ranks, the engine's own
refusals of the split, its defaults for that TP), so the table says nothing the single
answer at that TP would not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kvgate.errors import KvgateError
from kvgate.fit.answer import FitAnswer
from kvgate.output import table

TP_SIZES = (1, 2, 4, 8)
_WORD = {"yes": "FITS", "no": "DOES NOT FIT", "unknown": "CAN'T TELL"}


@dataclass(frozen=True)
class TpRow:
    """One TP size: ``fits`` (``yes``/``no``/``unknown``; ``refused``: the engine refuses
    the split itself), the full-length requests the pool holds ``{low, high}``, the pool's
    tokens, and why."""

    tp: int
    fits: str
    requests: dict[str, float | None]
    tokens: dict[str, int | None]
    length: int | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "fits": self.fits, "max_concurrency": self.requests, "tokens": self.tokens,
                "tokens_per_sequence": self.length, "reason": self.reason}


def tp_rows(answer_at: Callable[[int], FitAnswer], sizes: Sequence[int] = TP_SIZES) -> list[TpRow]:
    """``answer_at(tp)`` for each size; an engine refusal of the split (a
    :class:`KvgateError`) is a ``refused`` row with its message."""
    rows = []
    for tp in sizes:
        try:
            a = answer_at(tp)
        except KvgateError as exc:
            rows.append(TpRow(tp, "refused", {"low": None, "high": None}, {"low": None, "high": None}, None,
                              exc.message))
            continue
        rows.append(TpRow(tp, a.fits, dict(a.max_concurrency), dict(a.tokens),
                          a.tokens_per_sequence.get("low"), a.reason))
    return rows


def smallest_fitting(rows: Sequence[TpRow]) -> int | None:
    """The smallest TP whose answer is FITS, else ``None``."""
    return next((r.tp for r in rows if r.fits == "yes"), None)


def _n(v: float | int | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def render_rows(rows: Sequence[TpRow], flag: str) -> str:
    """The table as text (under 100 columns): TP, verdict, requests and tokens per GPU; then
    each size's reason on its own lines, wrapped."""
    import textwrap  # noqa: PLC0415

    head = ["TP", "verdict", "requests at once", "KV tokens per GPU"]
    body = [[f"{flag} {r.tp}", _WORD.get(r.fits, "refused"),
             f"{_n(r.requests['low'], '.2f')} … {_n(r.requests['high'], '.2f')}",
             f"{_n(r.tokens['low'], ',')} … {_n(r.tokens['high'], ',')}"] for r in rows]
    why = [textwrap.fill(r.reason, 100, initial_indent=f"  {flag} {r.tp}: ", subsequent_indent="      ")
           for r in rows if r.reason]
    return table(body, header=head, align="llll") + ("\n" + "\n".join(why) if why else "")


def tp_note(rows: Sequence[TpRow], flag: str, given: int) -> str | None:
    """The line under DOES NOT FIT: the smallest larger TP that fits, or that none of the
    table's does."""
    best = smallest_fitting([r for r in rows if r.tp > given])
    if best is not None:
        return f"the smallest tensor parallel size that fits: {flag} {best} (table below)"
    if any(r.tp > given for r in rows):
        return f"no tensor parallel size up to {max(r.tp for r in rows)} fits (table below)"
    return None


def fit_over_tp(engine: Any, inputs: Any, model: Any, gpu: Any) -> tuple[FitAnswer, list[TpRow] | None]:
    """``kvgate fit``'s answer, and the TP table when it is asked for or helps.

    ``engine`` (:class:`kvgate.engines.base.Engine`) names its TP option
    (``tp_option``: the :class:`~kvgate.commands._fit_args.FitInputs` field and key; ``None``
    for an engine without tensor parallelism) and its flag (``tp_flag``). A TP of ``-1``
    (``auto``) answers at the smallest size of :data:`TP_SIZES` that fits, with the table;
    a DOES NOT FIT at a given TP gets the larger sizes' rows and the line naming the
    smallest that fits.
    """
    if engine.tp_option is None:
        return engine.fit(inputs, model, gpu), None
    field, key = engine.tp_option
    opts = dict(getattr(inputs, field))

    def answer_at(tp: int) -> FitAnswer:
        answer: FitAnswer = engine.fit(replace(inputs, **{field: {**opts, key: tp}}), model, gpu)
        return answer

    flag = engine.tp_flag
    if opts.get(key) == -1:  # --tensor-parallel-size auto / --tp-size auto
        rows = tp_rows(answer_at)
        best = smallest_fitting(rows)
        answer = answer_at(best or next((r.tp for r in rows if r.fits != "refused"), 1))
        answer.notes.insert(0, f"{flag} auto: " + (f"the smallest tensor parallel size that fits is {best}; shown "
                                                   f"at {best} (table below)" if best else
                                                   "no size of the table fits (table below)"))
        return answer, rows
    answer = engine.fit(inputs, model, gpu)
    given = opts.get(key) or 1
    if answer.fits != "no" or given >= TP_SIZES[-1]:
        return answer, None
    rows = tp_rows(answer_at, [t for t in TP_SIZES if t > given])
    note = tp_note(rows, flag, given)
    if note:
        answer.notes.insert(0, note)
    return answer, rows
