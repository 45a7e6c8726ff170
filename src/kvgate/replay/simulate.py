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

Speed: the two admission schedules are one pass each over the requests with a heap
(O(n log K) and O(n log n)); memory over time is computed from cumulative sums over the
admission/finish events, exactly (integer steps; block rounding through per-residue
counts of live sequences), with no per-token loop. Until the first request that has to
wait, "admit at arrival" is checked vectorized and the loops start only there. 10^6
requests replay through both allocators in about 1.5-2.5 s on two CPU cores
(``benchmarks/replay_scaling.py``, ``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from kvgate.errors import KvgateError
from kvgate.replay.trace import Trace

MAX_ARRIVAL_STEP = 2**53  # the largest arrival step replayed: float64 steps are exact up to here
DEFAULT_DECODE_RATE = 50.0  # tokens/s per sequence: a 20 ms decode step
DEFAULT_BLOCK_SIZE = 16  # positions per block (vLLM's default)

_CHUNK = 1 << 12  # events per chunk when counting residues (small: stays in cache)
_PREFIX = 1 << 12  # requests in the first, cheap look for where admission first waits


class ReplayError(KvgateError):
    """Replay parameters cannot be used (no slot fits the budget, bad rates, ...)."""


@dataclass
class Timeline:
    """Memory of one schedule over time, as epochs between admission/finish events.

    Epoch j covers steps ``start[j] .. end[j] - 1`` with ``live[j]`` sequences. Written
    positions and taken blocks are non-decreasing inside an epoch, so the ``*_first``
    values (at step ``start``) and ``*_last`` values (at step ``end - 1``) are its
    minimum and maximum. Arrays are int64.
    """

    start: np.ndarray
    end: np.ndarray
    live: np.ndarray
    positions_first: np.ndarray
    positions_last: np.ndarray
    blocks_first: np.ndarray
    blocks_last: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


@dataclass
class AllocatorResult:
    """One allocator's replay. Times in seconds of the replay clock, bytes as ``int``.

    Attributes:
        name: ``"contiguous"`` or ``"paged"``.
        admitted: requests served.
        rejected_too_long: requests with prompt + output > max_seq.
        rejected_over_budget: requests whose reservation alone exceeds the budget (paged).
        peak_reserved_bytes: the largest reserved memory at any step.
        peak_time_s: a step at which it holds (in the first epoch that reaches it).
        written_at_peak_bytes: written memory at that peak (the moment where it is largest,
            i.e. reserved − written smallest, among the moments the peak holds).
        reclaim_at_peak_bytes: reserved − written at the peak. For paged: its internal
            fragmentation at its peak.
        peak_written_bytes: the largest written memory at any step.
        max_concurrency: the most sequences live at one step.
        queue_delay_p50_s, queue_delay_p99_s, queue_delay_max_s, queue_delay_mean_s:
            waiting time from (step-aligned) arrival to admission; ``None`` if none admitted.
        mean_reserved_bytes, mean_written_bytes: time averages over the replay, from
            step 0 to the last finish (their difference is the time-averaged reclaim;
            for paged, the time-averaged internal fragmentation).
        end_time_s: when the last request finishes.
    """

    name: str
    admitted: int
    rejected_too_long: int
    rejected_over_budget: int
    peak_reserved_bytes: int
    peak_time_s: float | None
    written_at_peak_bytes: int
    reclaim_at_peak_bytes: int
    peak_written_bytes: int
    max_concurrency: int
    queue_delay_p50_s: float | None
    queue_delay_p99_s: float | None
    queue_delay_max_s: float | None
    queue_delay_mean_s: float | None
    mean_reserved_bytes: int
    mean_written_bytes: int
    end_time_s: float

    @property
    def rejected(self) -> int:
        return self.rejected_too_long + self.rejected_over_budget

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["rejected"] = self.rejected
        return d


@dataclass
class ReplayResult:
    """Both allocators' results, the summary and the timelines (see the module docstring)."""

    inputs: dict
    contiguous: AllocatorResult
    paged: AllocatorResult
    summary: dict
    warnings: list[str]
    attribution: str | None
    timelines: dict[str, Timeline] = field(repr=False)
    block_bytes: int = 0
    block_size: int = DEFAULT_BLOCK_SIZE
    slot_bytes: int = 0
    fixed_bytes: int = 0
    decode_rate: float = DEFAULT_DECODE_RATE

    def reserved_bytes(self, allocator: str, which: str = "last") -> np.ndarray:
        """Reserved bytes per epoch of ``allocator`` (``"contiguous"``, ``"paged"``, or
        ``"contiguous-as-paged"``: the contiguous schedule laid out in blocks), at the
        epoch's first or last step. int64 (object dtype if it would overflow)."""
        tl = self.timelines["contiguous" if allocator == "contiguous-as-paged" else allocator]
        if allocator == "contiguous":
            return _mul(tl.live, self.slot_bytes)
        blocks = tl.blocks_last if which == "last" else tl.blocks_first
        return _mul(tl.live, self.fixed_bytes) + _mul(blocks, self.block_bytes)

    def written_bytes(self, allocator: str, which: str = "last") -> np.ndarray:
        """Written bytes per epoch (``n·fixed + ⌊positions·block_bytes/B⌋``)."""
        tl = self.timelines["contiguous" if allocator == "contiguous-as-paged" else allocator]
        pos = tl.positions_last if which == "last" else tl.positions_first
        return _mul(tl.live, self.fixed_bytes) + _mul(pos, self.block_bytes) // self.block_size

    def to_dict(self) -> dict:
        return {
            "inputs": self.inputs,
            "contiguous": self.contiguous.to_dict(),
            "paged": self.paged.to_dict(),
            "summary": self.summary,
            "warnings": list(self.warnings),
            "attribution": self.attribution,
        }


def _mul(a: np.ndarray, k: int) -> np.ndarray:
    """``a * k`` exactly: int64 when it fits, Python ints (object array) otherwise."""
    a = np.asarray(a, dtype=np.int64)
    if len(a) and int(np.abs(a).max()) * abs(int(k)) >= 2**62:
        return a.astype(object) * int(k)
    return a * np.int64(k)


def _dot(a: np.ndarray, b: np.ndarray) -> int:
    """Σ a·b exactly (int64 when no overflow is possible, Python ints otherwise)."""
    if len(a) == 0:
        return 0
    bound = float(np.abs(a).max()) * float(np.abs(b).max()) * len(a)
    if bound < 2**62:
        return int(np.dot(a.astype(np.int64), b.astype(np.int64)))
    return int(sum(int(x) * int(y) for x, y in zip(a.tolist(), b.tolist())))


def _check_int(name: str, v, *, minimum: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ReplayError(f"{name} must be an integer, got {v!r}")
    v = int(v)
    if v < minimum:
        raise ReplayError(f"{name} must be at least {minimum}, got {v:,}")
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
        x = a / speed * decode_rate
    last = float(np.max(x)) if len(x) else 0.0
    if not (math.isfinite(last) and last <= MAX_ARRIVAL_STEP):
        span = float(np.max(a) - np.min(a)) if len(a) else 0.0
        raise ReplayError(
            f"the trace spans {span:.6g} s = {last:.6g} decode steps at {decode_rate:g} tokens/s "
            f"(speed {speed:g}); a replay handles at most 2^53 = {MAX_ARRIVAL_STEP:,} steps "
            f"({MAX_ARRIVAL_STEP / decode_rate * speed:.6g} s)",
            hint="check the trace's time column (seconds, or date-times); a bad timestamp makes a huge span",
        )
    return np.ceil(np.round(x, 6)).astype(np.int64)


def _first_blocked(arrive: np.ndarray, service: np.ndarray, cost: np.ndarray, capacity: int) -> int:
    """Index of the first request that would not fit at its arrival if every earlier one
    was admitted at its own arrival; ``len(arrive)`` if all fit (vectorized).

    Up to that index the FIFO schedule is simply "admit at arrival" (nothing waited), so
    the loops below only start there.
    """
    m = len(arrive)
    if m == 0:
        return 0
    # Requests after a prefix cannot change where the prefix blocks (their events sort
    # after its admissions), so try a short prefix first: overloaded traces block early.
    if m > 8 * _PREFIX:
        k = _first_blocked(arrive[:_PREFIX], service[:_PREFIX], cost[:_PREFIX], capacity)
        if k < _PREFIX:
            return k
    ticks = np.concatenate([arrive + service, arrive])
    # At one step: finishes of earlier admissions, then each admission in FIFO order, a
    # request with service 0 freeing right after its own admission.
    i = np.arange(m, dtype=np.int64)
    sub = np.concatenate([np.where(service > 0, -1, 2 * i + 1), 2 * i])
    order = np.lexsort((sub, ticks))
    c = cost[order % m]
    cum = np.cumsum(np.where(order < m, -c, c))
    over = np.flatnonzero(cum > capacity)
    if len(over) == 0:
        return m
    return int(order[over[0]] - m)  # only an admission can push the sum up


def schedule_contiguous(arrive: np.ndarray, service: np.ndarray, slots: int) -> np.ndarray:
    """Admission steps of a FIFO queue with ``slots`` identical servers.

    Request i is admitted at max(arrive[i], admission of i − 1, the earliest step a slot
    is free); it holds the slot for ``service[i]`` steps. Inputs are int64 steps, arrivals
    non-decreasing.
    """
    n = len(arrive)
    k = _first_blocked(arrive, service, np.ones(n, dtype=np.int64), slots)
    out = arrive.tolist()
    if k == n:
        return np.asarray(arrive, dtype=np.int64).copy()
    fin = arrive[:k] + service[:k]
    live = fin[fin > arrive[k]].tolist()
    free = live + [0] * (slots - len(live))  # heap of the steps at which each slot is free
    heapq.heapify(free)
    replace = heapq.heapreplace
    prev = out[k]
    s_list = service.tolist()
    for i in range(k, n):
        t = out[i]
        if t < prev:
            t = prev
        f = free[0]
        if f > t:
            t = f
        out[i] = t
        prev = t
        replace(free, t + s_list[i])
    return np.array(out, dtype=np.int64)


def schedule_budget(arrive: np.ndarray, service: np.ndarray, cost: np.ndarray, budget: int) -> np.ndarray:
    """Admission steps of a FIFO queue that admits while Σ cost of live requests ≤ budget.

    ``cost`` are bytes (int64, or Python ints in an object array), each ≤ ``budget``.
    Request i is admitted at the earliest step ≥ max(arrive[i], admission of i − 1) at
    which it fits once the requests finished by then are freed; it stays ``service[i]``
    steps.
    """
    n = len(arrive)
    k = _first_blocked(arrive, service, cost, budget) if cost.dtype != object else 0
    if k == n:
        return np.asarray(arrive, dtype=np.int64).copy()
    out = arrive.tolist()
    c_list, s_list = cost.tolist(), service.tolist()
    fin = arrive[:k] + service[:k]
    still = np.flatnonzero(fin > arrive[k])  # admitted before k and live at its arrival
    heap = list(zip(fin[still].tolist(), cost[still].tolist()))  # (finish step, cost)
    heapq.heapify(heap)
    used = sum(c for _, c in heap)
    pop, push = heapq.heappop, heapq.heappush
    prev = out[k]
    for i in range(k, n):
        t = out[i]
        if t < prev:
            t = prev
        c = c_list[i]
        while heap and heap[0][0] <= t:
            used -= pop(heap)[1]
        while used + c > budget:
            f, cc = pop(heap)
            used -= cc
            if f > t:
                t = f
        out[i] = t
        prev = t
        push(heap, (t + s_list[i], c))
        used += c
    return np.array(out, dtype=np.int64)


def build_timeline(admit: np.ndarray, prompt: np.ndarray, output: np.ndarray, block_size: int) -> Timeline:
    """Epochs of live sequences and their written positions / taken blocks (exact).

    A sequence admitted at step s holds ``p + t − s + 1`` positions at step t in
    [s, s + o) (service model, item 4). With c = p − s + 1, the live set's written
    positions at step t are Σc + n·t. Its blocks are Σ ceil((c + t) / B). Writing
    d = c + B − 1 = B·q + r (0 ≤ r < B) and t = B·Q + τ (0 ≤ τ < B), each term is
    q + Q + [r ≥ B − τ], so the blocks are Σq + n·Q + #{live: r ≥ B − τ}; that count is
    read from cumulative per-residue counts over the events (in chunks, no per-token
    loop). Sequences with o = 0 hold nothing and are left out.
    """
    keep = output > 0
    s = admit[keep]
    p = prompt[keep]
    f = s + output[keep]
    B = int(block_size)
    m = len(s)
    if m == 0:
        z = np.zeros(0, dtype=np.int64)
        return Timeline(z, z, z, z, z, z, z)
    c = p - s + 1
    q, r = np.divmod(c + (B - 1), B)
    # Events: finishes (−) then admissions (+); stable sort keeps finishes first at a step.
    ticks = np.concatenate([f, s])
    order = np.argsort(ticks, kind="stable")
    ticks = ticks[order]
    idx = order % m
    sign = np.where(order < m, -1, 1).astype(np.int64)
    n_cum = np.cumsum(sign)
    c_cum = np.cumsum(sign * c[idx])
    q_cum = np.cumsum(sign * q[idx])
    resid = r[idx]
    last = np.flatnonzero(ticks[1:] != ticks[:-1])  # last event of each step group but the final
    start = ticks[last]
    end = ticks[last + 1]
    live = n_cum[last]
    sum_c = c_cum[last]
    pos_first = sum_c + live * start
    pos_last = sum_c + live * (end - 1)
    # ge[k, h] = live sequences with residue ≥ h after event k: each event adds its sign
    # to columns 0..r (a row of a small table), then a running sum down the rows.
    t_first, t_last = start, end - 1
    h_first = (B - t_first % B) % B  # τ = 0 → h = B → count 0; column 0 is "all", so mask it
    h_last = (B - t_last % B) % B
    ge_first = np.zeros(len(last), dtype=np.int64)
    ge_last = np.zeros(len(last), dtype=np.int64)
    pattern = np.tril(np.ones((B, B), dtype=np.int32))  # pattern[r, h] = 1 if h <= r
    table = np.concatenate([pattern, -pattern])
    key = resid + np.where(sign < 0, B, 0)
    carry = np.zeros(B, dtype=np.int32)
    g = 0
    for a in range(0, len(ticks), _CHUNK):
        b = min(a + _CHUNK, len(ticks))
        buf = table[key[a:b]]
        buf[0] += carry
        np.cumsum(buf, axis=0, out=buf)
        carry = buf[-1].copy()
        g_end = int(np.searchsorted(last, b, side="left"))
        if g_end > g:
            rows = last[g:g_end] - a
            ge_first[g:g_end] = buf[rows, h_first[g:g_end]]
            ge_last[g:g_end] = buf[rows, h_last[g:g_end]]
        g = g_end
    ge_first[h_first == 0] = 0
    ge_last[h_last == 0] = 0
    sum_q = q_cum[last]
    blocks_first = sum_q + live * (t_first // B) + ge_first
    blocks_last = sum_q + live * (t_last // B) + ge_last
    return Timeline(start, end, live, pos_first, pos_last, blocks_first, blocks_last)


def _delays(admit: np.ndarray, arrive: np.ndarray, rate: float) -> tuple:
    if len(admit) == 0:
        return None, None, None, None
    w = (admit - arrive).astype(np.float64) / rate
    p50, p99 = np.percentile(w, [50, 99])
    return float(p50), float(p99), float(w.max()), float(w.mean())


def block_steps(prompt: np.ndarray, output: np.ndarray, block_size: int) -> int:
    """Σ over requests and their decode steps of the blocks they hold (block·steps).

    A request holds p + k positions in its k-th step, so it contributes
    Σ_{w=p+1}^{p+o} ceil(w / B) = F(p + o) − F(p), with F(n) = Σ_{w=1}^{n} ceil(w / B)
    = B·q(q + 1)/2 + r·(q + 1) for n = q·B + r. It does not depend on when requests run.
    """
    B = int(block_size)

    def F(n: np.ndarray) -> np.ndarray:
        q, r = np.divmod(n, B)
        return B * q * (q + 1) // 2 + r * (q + 1)

    return int((F(prompt + output) - F(prompt)).sum())


def _time_mean(
    tl: Timeline, res: "ReplayResult", t_end: int, *, contiguous: bool, prompt: np.ndarray, output: np.ndarray
) -> tuple[int, int]:
    """Time averages over steps 0 .. t_end − 1 of reserved and written bytes (floored).

    Written: n·fixed + positions·block_bytes/B, summed exactly per epoch (positions grow
    by n per step: Σ = (first + last)·length/2). Reserved: slots × S for contiguous; for
    paged n·fixed + blocks·block_bytes, with blocks summed by :func:`block_steps`.
    """
    if t_end <= 0 or len(tl) == 0:
        return 0, 0
    length = tl.end - tl.start
    pos_sum = _dot(tl.positions_first + tl.positions_last, length) // 2
    seq_steps = _dot(tl.live, length)
    fixed = seq_steps * res.fixed_bytes
    written = Fraction(fixed, t_end) + Fraction(pos_sum * res.block_bytes, res.block_size * t_end)
    if contiguous:
        reserved = Fraction(seq_steps * res.slot_bytes, t_end)
    else:
        reserved = Fraction(fixed + block_steps(prompt, output, res.block_size) * res.block_bytes, t_end)
    return int(reserved), int(written)


def _allocator_result(
    name: str,
    res: "ReplayResult",
    tl: Timeline,
    admit: np.ndarray,
    arrive: np.ndarray,
    prompt: np.ndarray,
    service: np.ndarray,
    too_long: int,
    over_budget: int,
) -> AllocatorResult:
    rate = res.decode_rate
    reserved = res.reserved_bytes(name)
    written = res.written_bytes(name)
    if len(tl):
        peak = int(reserved.max())
        at_peak = np.flatnonzero(reserved == peak)
        j = int(at_peak[np.argmax(written[at_peak])])
        first_peak = int(at_peak[0])
        if name == "contiguous":
            peak_time = float(tl.start[first_peak] / rate)
        else:
            peak_time = float((tl.end[first_peak] - 1) / rate)
        written_at_peak = int(written[j])
        peak_written = int(written.max())
        max_conc = int(tl.live.max())
    else:
        peak, peak_time, written_at_peak, peak_written, max_conc = 0, None, 0, 0, 0
    p50, p99, dmax, dmean = _delays(admit, arrive, rate)
    t_end = int((admit + service).max()) if len(admit) else 0
    mean_res, mean_wr = _time_mean(tl, res, t_end, contiguous=name == "contiguous", prompt=prompt, output=service)
    return AllocatorResult(
        name=name,
        admitted=int(len(admit)),
        rejected_too_long=too_long,
        rejected_over_budget=over_budget,
        peak_reserved_bytes=peak,
        peak_time_s=peak_time,
        written_at_peak_bytes=written_at_peak,
        reclaim_at_peak_bytes=peak - written_at_peak,
        peak_written_bytes=peak_written,
        max_concurrency=max_conc,
        queue_delay_p50_s=p50,
        queue_delay_p99_s=p99,
        queue_delay_max_s=dmax,
        queue_delay_mean_s=dmean,
        mean_reserved_bytes=mean_res,
        mean_written_bytes=mean_wr,
        end_time_s=t_end / rate,
    )


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
    S = _check_int("slot bytes", slot_bytes)
    bb = _check_int("block bytes", block_bytes)
    L = _check_int("max_seq", max_seq)
    B = _check_int("block size", block_size)
    speed = _check_rate("speed", speed)
    rate = _check_rate("decode rate", decode_rate)
    if budget_bytes is None and slots is None:
        raise ReplayError("give a memory budget or a slot count", hint="--budget BYTES, --total/--peak, or --slots N")
    if slots is not None:
        slots = _check_int("slots", slots)
    if budget_bytes is None:
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
        warns.append(f"the budget ({budget:,} B) holds only {fit} of the {slots} slots asked for; contiguous capped at {fit}")

    arrive_all = arrival_steps(trace.arrival_s, speed=speed, decode_rate=rate)
    p_all, o_all = trace.prompt_tokens, trace.output_tokens
    w_all = p_all + o_all
    ok = w_all <= L
    too_long = int(np.count_nonzero(~ok))
    if too_long:
        warns.append(f"{too_long} request(s) longer than max_seq {L:,} (prompt + output) rejected by both allocators")
    arrive, p, o = arrive_all[ok], p_all[ok], o_all[ok]

    # Contiguous: K identical slots, FIFO.
    admit_c = schedule_contiguous(arrive, o, K)
    # Paged: logical reservation of the whole request's blocks against the budget.
    need = (p + o + (B - 1)) // B
    cost_arr = _mul(need, bb) + fixed
    fits = np.asarray(cost_arr <= budget, dtype=bool)
    over = int(np.count_nonzero(~fits))
    if over:
        warns.append(f"{over} request(s) need more blocks than the whole budget holds; rejected by paged")
    arrive_p, p_p, o_p = arrive[fits], p[fits], o[fits]
    admit_p = schedule_budget(arrive_p, o_p, cost_arr[fits], budget)

    tl_c = build_timeline(admit_c, p, o, B)
    tl_p = build_timeline(admit_p, p_p, o_p, B)
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
        timelines={"contiguous": tl_c, "paged": tl_p},
        block_bytes=bb,
        block_size=B,
        slot_bytes=S,
        fixed_bytes=fixed,
        decode_rate=rate,
    )
    res.contiguous = _allocator_result("contiguous", res, tl_c, admit_c, arrive, p, o, too_long, 0)
    res.paged = _allocator_result("paged", res, tl_p, admit_p, arrive_p, p_p, o_p, too_long, over)
    res.summary = _summary(res, K, S)
    return res


def _summary(res: ReplayResult, K: int, S: int) -> dict:
    c = res.contiguous
    bound = K * S
    as_paged = res.reserved_bytes("contiguous-as-paged")
    paged_footprint_peak = int(as_paged.max()) if len(as_paged) else 0
    measured = c.peak_reserved_bytes - paged_footprint_peak
    return {
        "bound_bytes": bound,
        "contiguous_peak_reserved_bytes": c.peak_reserved_bytes,
        "contiguous_peak_slots": c.peak_reserved_bytes // S,
        "paged_footprint_peak_bytes": paged_footprint_peak,
        "measured_reclaim_bytes": measured,
        "unwritten_at_peak_bytes": c.reclaim_at_peak_bytes,
        "ratio": float(Fraction(measured, bound)) if bound else None,
        "unwritten_ratio": float(Fraction(c.reclaim_at_peak_bytes, bound)) if bound else None,
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
    Raises as :func:`replay`.
    """
    r = replay(trace, **replay_args)
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


def series(res: ReplayResult, allocator: str, *, max_points: int = 2000) -> dict:
    """Memory over time for display: ``t_s``, ``reserved_bytes``, ``written_bytes``,
    ``live`` (lists).

    Exact (``binned`` false) when there are fewer than ``max_points // 2`` epochs: each
    epoch gives two points, (its start time, the value at its first step) and (its end
    time, the value at its last step), and a final point at the last finish holds 0, so
    joining the points with straight lines draws the replay (values step once per decode
    step inside an epoch). Otherwise time is cut into ``max_points // 2`` equal bins
    (``binned`` true, ``t_s`` the bin centres) and each bin shows the largest value of any
    epoch in it, so peaks stay visible."""
    tl = res.timelines[allocator]
    rate = res.decode_rate
    if len(tl) == 0:
        return {"t_s": [], "reserved_bytes": [], "written_bytes": [], "live": [], "binned": False}
    r_first, r_last = res.reserved_bytes(allocator, "first"), res.reserved_bytes(allocator, "last")
    w_first, w_last = res.written_bytes(allocator, "first"), res.written_bytes(allocator, "last")
    if 2 * len(tl) < max_points:
        t = np.empty(2 * len(tl) + 1)
        t[0:-1:2], t[1:-1:2], t[-1] = tl.start, tl.end, tl.end[-1]
        inter = lambda a, b: [int(x) for x in np.ravel(np.column_stack([a, b]))] + [0]  # noqa: E731
        return {
            "t_s": (t / rate).tolist(),
            "reserved_bytes": inter(r_first, r_last),
            "written_bytes": inter(w_first, w_last),
            "live": [int(x) for x in np.repeat(tl.live, 2)] + [0],
            "binned": False,
        }
    nb = max(1, max_points // 2)
    t0, t1 = int(tl.start[0]), int(tl.end[-1])
    width = max(1, -(-(t1 - t0) // nb))
    nb = -(-(t1 - t0) // width)
    out_r = np.full(nb, -1, dtype=np.float64)
    out_w = np.full(nb, -1, dtype=np.float64)
    out_n = np.full(nb, -1, dtype=np.int64)
    # An epoch spans bins (start_bin .. end_bin); put its last (largest) values on every
    # bin it touches by marking its end bin and the first value on its start bin, then
    # fill bins nothing ended in from the epoch that covers them.
    b_first = np.minimum((tl.start - t0) // width, nb - 1)
    b_last = np.minimum((tl.end - 1 - t0) // width, nb - 1)
    np.maximum.at(out_r, b_last, np.asarray(r_last, dtype=np.float64))
    np.maximum.at(out_w, b_last, np.asarray(w_last, dtype=np.float64))
    np.maximum.at(out_n, b_last, tl.live)
    np.maximum.at(out_r, b_first, np.asarray(r_first, dtype=np.float64))
    np.maximum.at(out_w, b_first, np.asarray(w_first, dtype=np.float64))
    np.maximum.at(out_n, b_first, tl.live)
    empty = out_n < 0
    if np.any(empty):
        # A bin no epoch starts or ends in lies inside one epoch: the one that started last before it.
        idx = np.searchsorted(b_first, np.flatnonzero(empty), side="right") - 1
        out_r[empty] = np.asarray(r_last, dtype=np.float64)[idx]
        out_w[empty] = np.asarray(w_last, dtype=np.float64)[idx]
        out_n[empty] = tl.live[idx]
    centers = (t0 + (np.arange(nb) + 0.5) * width) / rate
    return {
        "t_s": centers.tolist(),
        "reserved_bytes": [int(x) for x in out_r],
        "written_bytes": [int(x) for x in out_w],
        "live": [int(x) for x in out_n],
        "binned": True,
    }
