"""Replay a request trace through a contiguous and a paged KV allocator under one budget.

The source write-up bounds paging's reclaim from above: "≤ the unwritten part of the
mirror; 0 at a full window" — the whole mirror, N·S(L), for N slots. How much of the
mirror is really unwritten at the moment memory peaks depends on the traffic. This
module measures it by replaying a trace (:mod:`kvgate.replay.trace`) through two allocators.

Allocators (same budget ``budget_bytes``, same context limit L = ``max_seq``):

- **contiguous** — the source's mirror (transformers' StaticCache). An admitted sequence
  reserves a whole slot of ``slot_bytes`` = S(L) until it finishes. At most
  K = min(``slots``, budget // S) slots are live. A request with prompt + output > L is
  rejected; one that finds no free slot waits.
- **paged** — a block table of ``block_size`` = B positions per block, ``block_bytes``
  bytes per block (summed over the layers whose KV grows with context). Blocks are
  taken as positions are written and all freed at finish. No slot cap: only the budget
  limits it. A request with prompt + output > L is rejected here too.

Service model (assumptions; every one of them is a choice, not a measurement):

1. Time advances in **decode steps** of 1/``decode_rate`` seconds, a global clock
   like an engine's iteration loop. Every live sequence generates exactly one token per
   step, whatever the batch size (decode rate independent of concurrency).
2. Arrival times are the trace's, divided by ``speed`` (2.0 = twice as fast), then
   aligned up to the next step boundary (rounded to 1e-6 of a step first, so that
   0.3 s × 10 tokens/s is step 3, not 4). The alignment (< one step) is *not* counted as
   queueing delay: ``queue delay = (admission step − aligned arrival step) / decode_rate``.
3. Admission is FIFO with head-of-line blocking: a request is admitted no earlier than
   the one before it. At a step, finished sequences free their memory before admission.
4. Prefill takes no time. A sequence admitted at step s with p prompt and o output
   tokens holds p + k positions during step s + k − 1 (k = 1..o): the prompt and the
   first token are written at admission, one more position per step after that. It
   finishes, freeing everything, at step s + o, having written p + o positions. A
   request with o = 0 is admitted and finished at the same step and never holds memory.
5. Paged admission reserves **logically** the blocks of the whole request,
   ceil((p + o) / B) (as if the engine knew the output length — an optimistic oracle;
   vLLM instead admits on the prompt and preempts when blocks run out). A request is
   admitted when the logical reservations of all live sequences plus its own fit in the
   budget, so no sequence ever runs out of blocks mid-generation and nothing is
   preempted. The *reserved* memory reported for paged is the blocks actually taken,
   ceil(positions / B) per live sequence, so at every step
   ``written ≤ reserved < written + one block per live sequence``. A request whose whole
   reservation exceeds the budget is rejected.

Bytes. Per-position bytes are ``block_bytes / B``. The part of a slot that does not
grow with positions (``fixed_bytes = S(L) − L·block_bytes/B``: a linear-attention state,
layers capped at a sliding window) is charged once per live sequence in both layouts and
counts as written. Written bytes of W live positions over n sequences are
``n·fixed_bytes + ⌊W·block_bytes/B⌋``. All byte counts are ``int``.

What the summary compares (the gate's paging candidate, DESIGN.md §3):

- ``bound_bytes`` = K·S: the write-up's bound, the whole mirror of K slots;
- ``measured_reclaim_bytes``: how much lower the peak is when the *same* admissions are
  laid out in blocks: contiguous peak reserved − the largest block-rounded footprint of
  the contiguous schedule at any step (peak to peak, conservative);
- ``unwritten_at_peak_bytes``: reserved − written at the contiguous peak (the smallest
  value over the steps where the peak holds), the write-up's quantity measured;
- ``ratio`` = measured / bound.

Code: :mod:`kvgate.replay.allocators` (the admission schedules: one pass each over the
requests with a heap, O(n log K) and O(n log n)), :mod:`kvgate.replay.compiled` (those
loops compiled with numba for traces of 50,000 requests or more, :mod:`kvgate.replay.fastpath`, and one streaming walk over each schedule's admission/finish
events that reads every figure off it without storing its epochs), :mod:`kvgate.replay.timeline`
(memory over time as epoch arrays, built only when read: ``ReplayResult.timelines`` is a
:class:`~kvgate.replay.timeline.LazyTimelines`; exactly: integer steps, block rounding
through per-residue counts of live sequences, no per-token loop), :mod:`kvgate.replay.results`
(the figures; the numpy path reads them off a timeline chunk by chunk),
:mod:`kvgate.replay.series` (points to plot, binned by the compiled walk when no timeline
is built). Without numba, or when a byte figure could pass int64, the numpy path runs;
the two are tested equal. This module checks the parameters and ties them together; it
re-exports the names it always had (``Timeline``, ``build_timeline``,
``schedule_contiguous``, ``series``...).

Speed and memory (``benchmarks/replay_scaling.py --peer``, ``benchmarks/RESULTS.md``
"Trace replay at 10^7"): memory is the request arrays, the two schedules and a heap of the
live sequences, about 100 bytes per request; a timeline (~40 bytes per epoch, two epochs
per request at most) only when one is read.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from kvgate.errors import KvgateError
from kvgate.replay import fastpath
from kvgate.replay.allocators import schedule_budget, schedule_contiguous
from kvgate.replay.results import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_DECODE_RATE,
    AllocatorResult,
    ReplayResult,
    allocator_result,
)
from kvgate.replay.series import series
from kvgate.replay.timeline import LazyTimelines, Timeline, block_steps, build_timeline
from kvgate.replay.timeline import mul_exact as _mul
from kvgate.replay.trace import Trace

__all__ = [
    "DEFAULT_BLOCK_SIZE", "DEFAULT_DECODE_RATE", "MAX_ARRIVAL_STEP", "MAX_BLOCK_SIZE", "AllocatorResult", "ReplayError",
    "ReplayResult", "Timeline", "arrival_steps", "block_steps", "build_timeline", "measured_paging_reclaim",
    "replay", "schedule_budget", "schedule_contiguous", "series",
]  # fmt: skip

MAX_ARRIVAL_STEP = 2**53  # the largest arrival step replayed: float64 steps are exact up to here


class ReplayError(KvgateError):
    """Replay parameters cannot be used (no slot fits the budget, bad rates, ...)."""


#: Largest page (block) replayed, in positions: the timeline keeps one counter per
#: position residue of a block (:mod:`kvgate.replay.timeline`), so the page size bounds
#: its memory (2^20 counters: 8 MiB). vLLM's largest blocks (hybrid models) are a few
#: thousand positions.
MAX_BLOCK_SIZE = 2**20
#: Largest byte or position count a replay takes: the timelines add them in int64.
MAX_REPLAY_INT = 2**62


def _check_int(name: str, v, *, minimum: int = 1, maximum: int = MAX_REPLAY_INT) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ReplayError(f"{name} must be an integer, got {v!r}")
    v = int(v)
    if v < minimum:
        raise ReplayError(f"{name} must be at least {minimum}, got {v:,}")
    if v > maximum:
        raise ReplayError(f"{name} must be at most {maximum:,}, got {v:,}",
                          hint="--page-size / --block-size is a number of positions, e.g. 16")
    return v


def _check_rate(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ReplayError(f"{name} must be a positive number, got {v!r}")
    return float(v)


def arrival_steps(arrival_s: np.ndarray, *, speed: float, decode_rate: float) -> np.ndarray:
    """Arrival times (s) → decode steps: ceil(arrival / speed · rate), after rounding the
    product to 1e-6 of a step (so exact multiples are not pushed up by float error).

    Raises:
        ReplayError: the last arrival is beyond :data:`MAX_ARRIVAL_STEP` steps (float64
            steps are no longer exact there, and int64 step arithmetic could overflow).
    """
    a = np.asarray(arrival_s, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        x = a / speed
        x *= decode_rate  # (in place: one temporary array, not three)
    last = float(np.max(x)) if len(x) else 0.0
    if not (math.isfinite(last) and last <= MAX_ARRIVAL_STEP):
        span = float(np.max(a) - np.min(a)) if len(a) else 0.0
        raise ReplayError(
            f"the trace spans {span:.6g} s = {last:.6g} decode steps at {decode_rate:g} tokens/s "
            f"(speed {speed:g}); a replay handles at most 2^53 = {MAX_ARRIVAL_STEP:,} steps "
            f"({MAX_ARRIVAL_STEP / decode_rate * speed:.6g} s)",
            hint="check the trace's time column (seconds, or date-times); a bad timestamp makes a huge span",
        )
    np.round(x, 6, out=x)
    return np.ceil(x, out=x).astype(np.int64)


def replay(
    trace: Trace,
    *,
    slot_bytes: int,
    block_bytes: int,
    max_seq: int,
    budget_bytes: int | None = None,
    slots: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    speed: float = 1.0,
    decode_rate: float = DEFAULT_DECODE_RATE,
) -> ReplayResult:
    """Replay ``trace`` through the contiguous and the paged allocator.

    Args:
        trace: requests (:class:`kvgate.trace.Trace`).
        slot_bytes: S(L), bytes of one contiguous slot at ``max_seq`` (int).
        block_bytes: bytes of one block of ``block_size`` positions (int).
        max_seq: L, the context limit; longer requests are rejected by both.
        budget_bytes: memory both allocators may use. Default: ``slots`` × S.
        slots: the contiguous slot cap N. Default: budget // S. Capped at budget // S.
        block_size: B, positions per block.
        speed: arrival-time divisor (2.0 replays twice as fast).
        decode_rate: tokens/s each live sequence generates (one decode step = 1/rate s).

    Returns:
        A :class:`ReplayResult`; see the module docstring for every quantity.

    Raises:
        ReplayError: non-positive sizes or rates, neither budget nor slots given, a
            budget below one slot, or geometry in which L positions in blocks cost more
            than the slot (``L·block_bytes/B > S``).
    """
    B = _check_int("block size", block_size, maximum=MAX_BLOCK_SIZE)
    S = _check_int("slot bytes", slot_bytes)
    bb = _check_int("block bytes", block_bytes)
    L = _check_int("max_seq", max_seq)
    speed = _check_rate("speed", speed)
    rate = _check_rate("decode rate", decode_rate)
    if budget_bytes is None and slots is None:
        raise ReplayError("give a memory budget or a slot count", hint="--budget BYTES, --total/--peak, or --slots N")
    if slots is not None:
        slots = _check_int("slots", slots)
    if budget_bytes is None:
        assert slots is not None
        budget = slots * S
    else:
        budget = _check_int("budget", budget_bytes)
    if L * bb > S * B:
        raise ReplayError(
            f"geometry is inconsistent: {L:,} positions in blocks of {B} cost {L * bb // B:,} B, "
            f"more than one contiguous slot S(L) = {S:,} B",
            hint="block bytes must count only the layers whose KV grows with context",
        )
    fixed = S - (L * bb) // B
    warns = list(trace.warnings)
    fit = budget // S
    if fit < 1:
        raise ReplayError(
            f"the budget ({budget:,} B) holds no contiguous slot of S(L) = {S:,} B",
            hint="raise the budget or lower --max-seq",
        )
    K = fit if slots is None else min(slots, fit)
    if slots is not None and slots > fit:
        warns.append(
            f"the budget ({budget:,} B) holds only {fit} of the {slots} slots asked for; contiguous capped at {fit}"
        )

    arrive = arrival_steps(trace.arrival_s, speed=speed, decode_rate=rate)
    p, o = trace.prompt_tokens, trace.output_tokens
    ok = (p + o) <= L
    too_long = int(np.count_nonzero(~ok))
    if too_long:  # (arrays are copied only when something is left out: memory)
        warns.append(f"{too_long} request(s) longer than max_seq {L:,} (prompt + output) rejected by both allocators")
        arrive, p, o = arrive[ok], p[ok], o[ok]
    del ok

    # Contiguous: K identical slots, FIFO.
    admit_c = schedule_contiguous(arrive, o, K)
    # Paged: logical reservation of the whole request's blocks against the budget.
    cost_arr = _mul((p + o + (B - 1)) // B, bb) + fixed
    fits = np.asarray(cost_arr <= budget, dtype=bool)
    over = int(np.count_nonzero(~fits))
    arrive_p, p_p, o_p = arrive, p, o
    if over:
        warns.append(f"{over} request(s) need more blocks than the whole budget holds; rejected by paged")
        arrive_p, p_p, o_p, cost_arr = arrive[fits], p[fits], o[fits], cost_arr[fits]
    del fits
    admit_p = schedule_budget(arrive_p, o_p, cost_arr, budget)
    del cost_arr
    timelines = LazyTimelines({"contiguous": (admit_c, p, o, B), "paged": (admit_p, p_p, o_p, B)})
    walks = _walks(timelines, K=K, budget=budget, L=L, S=S, bb=bb, fixed=fixed)
    res = ReplayResult(
        inputs={
            "trace": trace.source,
            "requests": len(trace),
            "arrivals": trace.arrivals,
            "slot_bytes": S,
            "block_bytes": bb,
            "block_size": B,
            "fixed_bytes_per_sequence": fixed,
            "max_seq": L,
            "budget_bytes": budget,
            "slots": K,
            "slots_asked": slots,
            "speed": speed,
            "decode_rate_tokens_per_s": rate,
        },
        contiguous=None,  # type: ignore[arg-type]
        paged=None,  # type: ignore[arg-type]
        summary={},
        warnings=warns,
        attribution=trace.attribution,
        timelines=timelines,
        walks=walks,
        block_bytes=bb,
        block_size=B,
        slot_bytes=S,
        fixed_bytes=fixed,
        decode_rate=rate,
    )
    if walks:
        res.contiguous = allocator_result("contiguous", res, None, admit_c, arrive, p, o, too_long, 0,
                                          stats=walks["contiguous"])  # fmt: skip
        res.paged = allocator_result("paged", res, None, admit_p, arrive_p, p_p, o_p, too_long, over, stats=walks["paged"])
    else:
        res.contiguous = allocator_result("contiguous", res, timelines["contiguous"], admit_c, arrive, p, o, too_long, 0)
        res.paged = allocator_result("paged", res, timelines["paged"], admit_p, arrive_p, p_p, o_p, too_long, over)
    res.summary = _summary(res, K, S)
    return res


def _walks(timelines: LazyTimelines, *, K: int, budget: int, L: int, S: int, bb: int, fixed: int) -> dict:
    """Both schedules walked compiled (:func:`kvgate.replay.compiled.walk`): the figures
    without the timelines. Empty when numba is not used or a byte figure could pass int64
    (then the timelines are built and read, in Python ints where needed)."""
    if not fastpath.use(len(timelines.source("contiguous")[0])):
        return {}
    from kvgate.replay import compiled

    B = timelines.source("contiguous")[3]
    m_paged = len(timelines.source("paged")[0])
    live_paged = min(m_paged, budget // (fixed + bb))  # each live request reserves ≥ fixed + one block
    if not (compiled.int64_safe(K, L, B, S, bb, fixed) and compiled.int64_safe(live_paged, L, B, S, bb, fixed)):
        return {}
    return {name: compiled.walk_stats(*timelines.source(name), S, fixed, bb, name == "contiguous")
            for name in ("contiguous", "paged")}  # fmt: skip


def _summary(res: ReplayResult, K: int, S: int) -> dict:
    c = res.contiguous
    bound = K * S
    if res.walks:
        from kvgate.replay.compiled import AS_PAGED_PEAK

        paged_footprint_peak = int(res.walks["contiguous"][AS_PAGED_PEAK])
    else:
        tl = res.timelines["contiguous"]
        paged_footprint_peak = max((int(res.reserved_bytes("contiguous-as-paged", lo=lo, hi=hi).max())
                                    for lo, hi in tl.chunks()), default=0)  # fmt: skip
    measured: int | None = c.peak_reserved_bytes - paged_footprint_peak
    unwritten: int | None = c.reclaim_at_peak_bytes
    reason = None
    if c.peak_reserved_bytes == 0:
        # No sequence ever held memory (none admitted, or every one of zero length): there
        # is no peak to compare, so the reclaim is not available, never 0.
        measured = unwritten = None
        reason = (f"no request of the trace held KV memory ({c.admitted:,} admitted, {c.rejected:,} rejected as "
                  f"longer than max_seq {res.inputs['max_seq']:,}, the rest of length 0): the measured reclaim is "
                  "not available")
        res.warnings.append(reason)
    return {
        "bound_bytes": bound,
        "contiguous_peak_reserved_bytes": c.peak_reserved_bytes,
        "contiguous_peak_slots": c.peak_reserved_bytes // S,
        "paged_footprint_peak_bytes": paged_footprint_peak,
        "measured_reclaim_bytes": measured,
        "unwritten_at_peak_bytes": unwritten,
        "ratio": float(Fraction(measured, bound)) if bound and measured is not None else None,
        "unwritten_ratio": float(Fraction(unwritten, bound)) if bound and unwritten is not None else None,
        # the same two ratios exactly, "numerator/denominator" (as the records keep ratios)
        "ratio_exact": str(Fraction(measured, bound)) if bound and measured is not None else None,
        "unwritten_ratio_exact": str(Fraction(unwritten, bound)) if bound and unwritten is not None else None,
        "reclaim_not_available": reason,
        "paged_max_concurrency": res.paged.max_concurrency,
        "contiguous_max_concurrency": c.max_concurrency,
    }


def measured_paging_reclaim(trace: Trace, **replay_args: Any) -> dict:
    """The paging candidate's reclaim measured on ``trace``, for the gate.

    Runs :func:`replay` with the same keyword arguments (``slot_bytes``, ``block_bytes``,
    ``max_seq``, ``budget_bytes``, ``slots``, ``block_size``, ``speed``, ``decode_rate``)
    and returns a dict with ``measured_reclaim_bytes`` (how much lower the contiguous
    peak is with the same admissions laid out in blocks), ``bound_bytes`` (the write-up's
    K·S), ``ratio``, ``unwritten_at_peak_bytes``, ``contiguous_peak_reserved_bytes``,
    ``slots`` (K), the service-model parameters, ``warnings`` and ``attribution``.

    Raises:
        ReplayError: as :func:`replay`, and when no request of the trace ever held
            memory (none admitted, or all of length 0): the reclaim is not available
            then, and a gate must not take 0 for it.
    """
    r = replay(trace, **replay_args)
    if r.summary["measured_reclaim_bytes"] is None:
        raise ReplayError(
            f"{trace.source or 'the trace'}: {r.summary['reclaim_not_available']}; no verdict can come from it",
            hint="check --max-seq against the trace's prompt + output lengths; without --trace paging is judged "
                 "on the write-up's bound N·S")
    max_seq = replay_args["max_seq"]
    out = dict(r.summary)
    out.update(
        slots=r.inputs["slots"],
        block_size=r.block_size,
        max_seq=max_seq,
        speed=r.inputs["speed"],
        decode_rate_tokens_per_s=r.decode_rate,
        requests=len(trace),
        rejected=r.contiguous.rejected,
        trace=trace.source,
        warnings=list(r.warnings),
        attribution=r.attribution,
    )
    return out
