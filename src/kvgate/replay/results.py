"""What a replay returns: each allocator's figures (:class:`AllocatorResult`), the pair with
its timelines (:class:`ReplayResult`), and how the figures are read off a timeline.

All byte counts are ``int``; times are seconds of the replay clock (decode steps divided
by the decode rate). See :mod:`kvgate.replay.simulate` for the service model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from kvgate.options import DEFAULT_PAGE_SIZE as DEFAULT_BLOCK_SIZE  # positions per block (vLLM's default)
from kvgate.replay.timeline import SUM_CHUNK, Timeline, block_steps
from kvgate.replay.timeline import mul_exact as _mul

DEFAULT_DECODE_RATE = 50.0  # tokens/s per sequence: a 20 ms decode step


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
    timelines: Mapping[str, Timeline] = field(repr=False)
    block_bytes: int = 0
    block_size: int = DEFAULT_BLOCK_SIZE
    slot_bytes: int = 0
    fixed_bytes: int = 0
    decode_rate: float = DEFAULT_DECODE_RATE
    #: per allocator, the statistics of :func:`kvgate.replay.compiled.walk` (when it ran)
    walks: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def reserved_bytes(self, allocator: str, which: str = "last", lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Reserved bytes per epoch of ``allocator`` (``"contiguous"``, ``"paged"``, or
        ``"contiguous-as-paged"``: the contiguous schedule laid out in blocks), at the
        epoch's first or last step, for epochs ``lo .. hi - 1`` (default all). int64
        (object dtype if it would overflow)."""
        tl = self.timelines["contiguous" if allocator == "contiguous-as-paged" else allocator]
        if allocator == "contiguous":
            return _mul(tl.live[lo:hi], self.slot_bytes)
        blocks = (tl.blocks_last if which == "last" else tl.blocks_first)[lo:hi]
        return _mul(tl.live[lo:hi], self.fixed_bytes) + _mul(blocks, self.block_bytes)

    def written_bytes(self, allocator: str, which: str = "last", lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Written bytes per epoch (``n·fixed + ⌊positions·block_bytes/B⌋``), epochs
        ``lo .. hi - 1`` (default all)."""
        tl = self.timelines["contiguous" if allocator == "contiguous-as-paged" else allocator]
        live = tl.live[lo:hi]
        pos = tl.positions_first[lo:hi]
        if which == "last":
            pos = pos + live * (tl.end_of(lo, hi) - 1 - tl.start[lo:hi])
        return _mul(live, self.fixed_bytes) + _mul(pos, self.block_bytes) // self.block_size

    def to_dict(self) -> dict:
        return {
            "inputs": self.inputs,
            "contiguous": self.contiguous.to_dict(),
            "paged": self.paged.to_dict(),
            "summary": self.summary,
            "warnings": list(self.warnings),
            "attribution": self.attribution,
        }


def _delays(admit: np.ndarray, arrive: np.ndarray, rate: float) -> tuple:
    if len(admit) == 0:
        return None, None, None, None
    w = (admit - arrive).astype(np.float64)
    w /= rate
    p50, p99 = np.percentile(w, [50, 99])
    return float(p50), float(p99), float(w.max()), float(w.mean())


def position_steps(prompt: np.ndarray, output: np.ndarray) -> tuple[int, int]:
    """Σ over requests and their decode steps of the positions held, and of the sequences
    live (sequence·steps), exactly. A request holds p + k positions in its k-th step
    (k = 1..o), so it adds o·p + o(o + 1)/2 and o, whenever it runs: the same sums as
    over a timeline's epochs (``Σ (first + last)·length / 2`` and ``Σ live·length``)."""
    if len(output) == 0:
        return 0, 0
    p, o = np.asarray(prompt, dtype=np.int64), np.asarray(output, dtype=np.int64)
    if float(o.max()) * (float(p.max()) + float(o.max()) + 1) * min(len(o), SUM_CHUNK) >= 2**62:
        po = o.astype(object)
        return int((po * p.astype(object) + po * (po + 1) // 2).sum()), int(po.sum())
    pos = steps = 0
    for a in range(0, len(o), SUM_CHUNK):  # in chunks: temporaries of a chunk, not of the trace
        oc, pc = o[a : a + SUM_CHUNK], p[a : a + SUM_CHUNK]
        pos += int((oc * pc + oc * (oc + 1) // 2).sum())
        steps += int(oc.sum())
    return pos, steps


def _time_mean(res: ReplayResult, t_end: int, *, contiguous: bool, prompt: np.ndarray,
               output: np.ndarray) -> tuple[int, int]:  # fmt: skip
    """Time averages over steps 0 .. t_end − 1 of reserved and written bytes (floored).

    Written: n·fixed + positions·block_bytes/B, summed exactly over the steps
    (:func:`position_steps`). Reserved: slots × S for contiguous; for paged n·fixed +
    blocks·block_bytes, with blocks summed by :func:`block_steps`. Neither depends on the
    schedule but through ``t_end``.
    """
    if t_end <= 0:
        return 0, 0
    pos_sum, seq_steps = position_steps(prompt, output)
    fixed = seq_steps * res.fixed_bytes
    written = Fraction(fixed, t_end) + Fraction(pos_sum * res.block_bytes, res.block_size * t_end)
    if contiguous:
        reserved = Fraction(seq_steps * res.slot_bytes, t_end)
    else:
        reserved = Fraction(fixed + block_steps(prompt, output, res.block_size) * res.block_bytes, t_end)
    return int(reserved), int(written)


def allocator_result(
    name: str,
    res: ReplayResult,
    tl: Timeline | None,
    admit: np.ndarray,
    arrive: np.ndarray,
    prompt: np.ndarray,
    service: np.ndarray,
    too_long: int,
    over_budget: int,
    stats: np.ndarray | None = None,
) -> AllocatorResult:
    """One allocator's figures, read off ``tl`` chunk by chunk, or off ``stats`` (the
    statistics of :func:`kvgate.replay.compiled.walk` over the same schedule) when given."""
    rate = res.decode_rate
    if stats is not None:
        from kvgate.replay import compiled as k

        peak, written_at_peak = int(stats[k.PEAK]), int(stats[k.WRITTEN_AT_PEAK])
        peak_written = int(stats[k.PEAK_WRITTEN])
        max_conc = int(stats[k.MAX_LIVE])
        if stats[k.N_EPOCHS] == 0:
            peak, peak_time, written_at_peak, peak_written, max_conc = 0, None, 0, 0, 0
        elif name == "contiguous":
            peak_time = float(stats[k.PEAK_START] / rate)
        else:
            peak_time = float((stats[k.PEAK_END] - 1) / rate)
    elif len(tl):
        # Chunk by chunk over the epochs (bounded memory): the peak, the first epoch that
        # reaches it, the most written while it holds, the most written at all.
        peak = written_at_peak = peak_written = None
        first_peak = 0
        for lo, hi in tl.chunks():
            reserved = res.reserved_bytes(name, lo=lo, hi=hi)
            written = res.written_bytes(name, lo=lo, hi=hi)
            top = reserved.max()
            w_top = written.max()
            peak_written = w_top if peak_written is None or w_top > peak_written else peak_written
            if peak is not None and top < peak:
                continue
            at = np.flatnonzero(reserved == top)
            w_at = written[at].max()
            if peak is None or top > peak:
                peak, first_peak, written_at_peak = top, lo + int(at[0]), w_at
            elif w_at > written_at_peak:
                written_at_peak = w_at
        assert peak is not None and written_at_peak is not None and peak_written is not None
        peak, written_at_peak, peak_written = int(peak), int(written_at_peak), int(peak_written)
        if name == "contiguous":
            peak_time = float(tl.start[first_peak] / rate)
        else:
            peak_time = float((tl.end_of(first_peak, first_peak + 1)[0] - 1) / rate)
        max_conc = int(tl.live.max())
    else:
        peak, peak_time, written_at_peak, peak_written, max_conc = 0, None, 0, 0, 0
    p50, p99, dmax, dmean = _delays(admit, arrive, rate)
    t_end = int((admit + service).max()) if len(admit) else 0
    mean_res, mean_wr = _time_mean(res, t_end, contiguous=name == "contiguous", prompt=prompt, output=service)
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
