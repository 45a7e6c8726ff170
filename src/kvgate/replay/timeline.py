"""Memory over time of one admission schedule, exactly and without a per-token loop
(:mod:`kvgate.replay.simulate`, item 4 of its service model).

A schedule's admission and finish events cut time into **epochs**; inside one the live set
is fixed, written positions grow by the live count each step and taken blocks are
non-decreasing, so an epoch's first and last steps hold its minimum and maximum. The
events are merged from the (already sorted) admissions and the sorted finishes, then
walked in chunks of :data:`EVENT_CHUNK`: running sums carry from chunk to chunk, and only
the epoch arrays (the result) grow with the trace.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

EVENT_CHUNK = 1 << 18  # events per chunk of the running sums
EPOCH_CHUNK = 1 << 20  # epochs per chunk when results are reduced over a timeline
SUM_CHUNK = 1 << 20  # requests per chunk of the schedule-free sums (block·steps; position·steps in results)
_CHUNK = 1 << 12  # events per sub-chunk when counting residues (small: stays in cache)


@dataclass
class Timeline:
    """Memory of one schedule over time, as epochs between admission/finish events.

    Epoch j covers steps ``start[j] .. end[j] - 1`` with ``live[j]`` sequences. Written
    positions and taken blocks are non-decreasing inside an epoch, so the ``*_first``
    values (at step ``start``) and ``*_last`` values (at step ``end - 1``) are its
    minimum and maximum. Arrays are int64. Stored: ``start``, ``live``,
    ``positions_first``, ``blocks_first``, ``blocks_last`` and the last epoch's end;
    ``end`` (the next epoch's start) and ``positions_last``
    (``positions_first + live·(end − 1 − start)``) are computed when read, so a timeline
    costs 40 bytes per epoch, not 56.
    """

    start: np.ndarray
    live: np.ndarray
    positions_first: np.ndarray
    blocks_first: np.ndarray
    blocks_last: np.ndarray
    final_end: int = 0

    def __len__(self) -> int:
        return len(self.start)

    @property
    def end(self) -> np.ndarray:
        """int64 step after each epoch's last (the next epoch's start)."""
        return self.end_of(0, len(self))

    def end_of(self, lo: int, hi: int | None = None) -> np.ndarray:
        """``end[lo:hi]`` without building the whole array."""
        hi = len(self) if hi is None else min(hi, len(self))
        out = np.empty(max(hi - lo, 0), dtype=np.int64)
        if len(out):
            out[:-1] = self.start[lo + 1 : hi]
            out[-1] = self.start[hi] if hi < len(self) else self.final_end
        return out

    @property
    def positions_last(self) -> np.ndarray:
        """int64 written positions at each epoch's last step."""
        return self.positions_first + self.live * (self.end - 1 - self.start)

    def chunks(self, size: int | None = None):
        """``(lo, hi)`` epoch ranges of at most ``size`` (default :data:`EPOCH_CHUNK`)
        epochs, to reduce over in pieces."""
        size = size or EPOCH_CHUNK
        for lo in range(0, len(self), size):
            yield lo, min(lo + size, len(self))


class LazyTimelines(Mapping):
    """Timelines by allocator name, built (:func:`build_timeline`) the first time one is
    read: a replay reads its figures off a streaming walk (:mod:`kvgate.replay.compiled`)
    and keeps only what a timeline is built from (the schedule and the request arrays),
    so a timeline's ~40 bytes per epoch are spent only when one is asked for."""

    def __init__(self, sources: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]]) -> None:
        self._sources = sources
        self._built: dict[str, Timeline] = {}

    def source(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(admission steps, prompt, output, block size) of ``name``'s schedule."""
        return self._sources[name]

    def is_built(self, name: str) -> bool:
        return name in self._built

    def __getitem__(self, name: str) -> Timeline:
        if name not in self._built:
            self._built[name] = build_timeline(*self._sources[name])
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sources)

    def __len__(self) -> int:
        return len(self._sources)


def mul_exact(a: np.ndarray, k: int) -> np.ndarray:
    """``a * k`` exactly: int64 when it fits, Python ints (object array) otherwise."""
    a = np.asarray(a, dtype=np.int64)
    if len(a) and int(np.abs(a).max()) * abs(int(k)) >= 2**62:
        return a.astype(object) * int(k)
    return a * np.int64(k)


def _events(s: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Events in time order: ``order`` (j < m: finish of request j; m + j: its admission)
    and their steps. At one step finishes come first; each kind keeps request order (the
    stable sort of ``concatenate([f, s])``, done as a merge when ``s`` is sorted)."""
    m = len(s)
    if m > 1 and bool(np.any(s[1:] < s[:-1])):
        ticks = np.concatenate([f, s])
        order = np.argsort(ticks, kind="stable")
        return order, ticks[order]
    fo = np.argsort(f, kind="stable")
    fs = f[fo]
    ar = np.arange(m, dtype=np.int64)
    pos_f = ar + np.searchsorted(s, fs, side="left")  # admissions strictly before it
    pos_s = ar + np.searchsorted(fs, s, side="right")  # finishes at or before it
    order = np.empty(2 * m, dtype=np.int64)
    ticks = np.empty(2 * m, dtype=np.int64)
    order[pos_f], ticks[pos_f] = fo, fs
    order[pos_s], ticks[pos_s] = ar + m, s
    return order, ticks


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
    if bool(keep.all()):
        s, p, o = np.asarray(admit, dtype=np.int64), prompt, output
    else:
        s, p, o = np.asarray(admit, dtype=np.int64)[keep], prompt[keep], output[keep]
    B = int(block_size)
    m = len(s)
    if m == 0:
        z = np.zeros(0, dtype=np.int64)
        return Timeline(z, z, z, z, z, 0)
    order, ticks = _events(s, s + o)
    last = np.flatnonzero(ticks[1:] != ticks[:-1])  # last event of each step group but the final
    n_ep = len(last)
    final_end = int(ticks[-1])
    start = np.empty(n_ep, dtype=np.int64)
    live = np.empty(n_ep, dtype=np.int64)
    pos_first = np.empty(n_ep, dtype=np.int64)
    blocks_first = np.empty(n_ep, dtype=np.int64)
    blocks_last = np.empty(n_ep, dtype=np.int64)
    # ge[k, h] = live sequences with residue ≥ h after event k: each event adds its sign
    # to columns 0..r (a row of a small table), then a running sum down the rows.
    pattern = np.tril(np.ones((B, B), dtype=np.int32))  # pattern[r, h] = 1 if h <= r
    table = np.concatenate([pattern, -pattern])
    carry_tab = np.zeros(B, dtype=np.int32)
    carry_n = carry_c = carry_q = 0
    g = 0
    for a in range(0, 2 * m, EVENT_CHUNK):
        b = min(a + EVENT_CHUNK, 2 * m)
        oc = order[a:b]
        fin = oc < m
        j = np.where(fin, oc, oc - m)
        sign = np.where(fin, -1, 1).astype(np.int64)
        c = p[j] - s[j] + 1
        q, r = np.divmod(c + (B - 1), B)
        n_run = np.cumsum(sign) + carry_n
        c_run = np.cumsum(sign * c) + carry_c
        q_run = np.cumsum(sign * q) + carry_q
        carry_n, carry_c, carry_q = int(n_run[-1]), int(c_run[-1]), int(q_run[-1])
        g_end = int(np.searchsorted(last, b, side="left"))
        rows = last[g:g_end] - a
        st = ticks[last[g:g_end]]  # the epoch's first step
        t_last = ticks[last[g:g_end] + 1] - 1  # its last step
        lv = n_run[rows]
        h_first = (B - st % B) % B  # τ = 0 → h = B → count 0; column 0 is "all": masked below
        h_last = (B - t_last % B) % B
        ge_first = np.zeros(g_end - g, dtype=np.int64)
        ge_last = np.zeros(g_end - g, dtype=np.int64)
        key = r + np.where(fin, B, 0)
        lo = 0
        for a2 in range(0, b - a, _CHUNK):
            b2 = min(a2 + _CHUNK, b - a)
            buf = table[key[a2:b2]]
            buf[0] += carry_tab
            np.cumsum(buf, axis=0, out=buf)
            carry_tab = buf[-1].copy()
            hi = int(np.searchsorted(rows, b2, side="left"))
            if hi > lo:
                rr = rows[lo:hi] - a2
                ge_first[lo:hi] = buf[rr, h_first[lo:hi]]
                ge_last[lo:hi] = buf[rr, h_last[lo:hi]]
            lo = hi
        ge_first[h_first == 0] = 0
        ge_last[h_last == 0] = 0
        start[g:g_end] = st
        live[g:g_end] = lv
        pos_first[g:g_end] = c_run[rows] + lv * st
        blocks_first[g:g_end] = q_run[rows] + lv * (st // B) + ge_first
        blocks_last[g:g_end] = q_run[rows] + lv * (t_last // B) + ge_last
        g = g_end
    return Timeline(start, live, pos_first, blocks_first, blocks_last, final_end)


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

    total = 0
    for a in range(0, len(prompt), SUM_CHUNK):  # in chunks: a chunk's temporaries, not the trace's
        pc, oc = prompt[a : a + SUM_CHUNK], output[a : a + SUM_CHUNK]
        total += int((F(pc + oc) - F(pc)).sum())
    return total
