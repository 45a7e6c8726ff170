"""The replay's loops compiled with numba: the two admission schedules and one streaming
walk over a schedule's events that reads every figure off it without storing the epochs.

Used for traces of 50,000 requests or more (:mod:`kvgate.replay.fastpath`). The same
numbers as the numpy path (:mod:`kvgate.replay.allocators`,
:mod:`kvgate.replay.timeline`, :mod:`kvgate.replay.results`), kept for a machine where
numba does not import (:data:`HAVE_NUMBA`) and for figures that would not fit int64; the
two are tested equal (``tests/test_replay_compiled.py``).

- :func:`schedule_contiguous_loop`, :func:`schedule_budget_loop`: the FIFO admission
  loops of :mod:`kvgate.replay.allocators` over arrays (a binary heap of slot free times;
  a heap of (finish step, cost) pairs ordered as Python orders the tuples). Started at
  request 0 they give the vectorized prefix's answer too (nobody waits there), so the
  O(n log n) sort of :func:`kvgate.replay.allocators.first_blocked` is skipped.
- :func:`walk`: the events of a schedule (admissions in order; finishes from a heap of
  the live sequences) cut time into the epochs of :func:`kvgate.replay.timeline.build_timeline`.
  Per epoch it forms the same values (live, written positions, taken blocks at its first
  and last step: the per-residue counts of that function come from a Fenwick tree over
  the B residues) and reduces them as it goes: the peak reserved, the first epoch that
  reaches it, the most written while it holds, the most written, the most live, the
  peak of the schedule laid out in blocks; and, when asked, the binned series of
  :func:`kvgate.replay.series.series`. Memory: the live sequences and the bins, not the
  epochs (a timeline of 10^7 requests held about 1.6 GiB of RSS).

Every value is int64 here: :func:`int64_safe` says beforehand whether the byte figures
stay below 2^62 (else the numpy path, which turns to Python ints, runs). No compiler runs
at ``kvgate`` run time beyond numba's own LLVM JIT (cached on disk with ``cache=True``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:  # numba is a declared dependency; the numpy path stays for a platform without its wheels
    import numba

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised by forcing HAVE_NUMBA off in the tests
    numba = None  # type: ignore[assignment]
    HAVE_NUMBA = False

LIMIT = 2**62  # largest byte figure the compiled walk forms in int64

#: Indices into the int64 statistics array :func:`walk` fills.
(N_EPOCHS, PEAK, PEAK_START, PEAK_END, WRITTEN_AT_PEAK, PEAK_WRITTEN, MAX_LIVE, AS_PAGED_PEAK,
 FINAL_END, N_STATS) = range(10)  # fmt: skip


def _njit(f: Any) -> Any:
    return numba.njit(cache=True, nogil=True, error_model="numpy")(f) if HAVE_NUMBA else f


def int64_safe(max_live: int, max_seq: int, block_size: int, slot_bytes: int, block_bytes: int, fixed: int) -> bool:
    """Whether every byte figure of a schedule with at most ``max_live`` sequences of at
    most ``max_seq`` positions stays below :data:`LIMIT` (then :func:`walk` is exact)."""
    blocks = -(-max_seq // block_size) + 1
    return max(max_live * slot_bytes, max_live * (fixed + blocks * block_bytes), max_live * max_seq * block_bytes,
               max_live * (max_seq + block_size)) < LIMIT  # fmt: skip


@_njit
def _less(f: Any, c: Any, i: int, j: int) -> bool:  # pragma: no cover - compiled
    return f[i] < f[j] or (f[i] == f[j] and c[i] < c[j])


@_njit
def _swap(f: Any, c: Any, i: int, j: int) -> None:  # pragma: no cover - compiled
    f[i], f[j] = f[j], f[i]
    c[i], c[j] = c[j], c[i]


@_njit
def _sift_down(f: Any, c: Any, size: int, i: int) -> None:  # pragma: no cover - compiled
    while True:
        lo = 2 * i + 1
        if lo >= size:
            return
        if lo + 1 < size and _less(f, c, lo + 1, lo):
            lo += 1
        if not _less(f, c, lo, i):
            return
        _swap(f, c, i, lo)
        i = lo


@_njit
def _sift_up(f: Any, c: Any, i: int) -> None:  # pragma: no cover - compiled
    while i > 0:
        up = (i - 1) // 2
        if not _less(f, c, i, up):
            return
        _swap(f, c, i, up)
        i = up


@_njit
def _pop(f: Any, c: Any, size: int) -> int:  # pragma: no cover - compiled
    size -= 1
    f[0], c[0] = f[size], c[size]
    _sift_down(f, c, size, 0)
    return size


@_njit
def _grow(a: Any) -> Any:  # pragma: no cover - compiled
    b = np.empty(2 * len(a), dtype=a.dtype)
    b[: len(a)] = a
    return b


@_njit
def schedule_contiguous_loop(arrive: Any, service: Any, slots: int, out: Any) -> None:  # pragma: no cover
    """``out[i]`` = max(arrive[i], out[i − 1], the earliest free slot); the slot is then
    busy until ``out[i] + service[i]`` (:func:`kvgate.replay.allocators.schedule_contiguous`)."""
    free = np.zeros(slots, dtype=np.int64)
    tie = np.zeros(slots, dtype=np.int64)
    prev = arrive[0] if len(arrive) else 0
    for i in range(len(arrive)):
        t = arrive[i]
        if t < prev:
            t = prev
        if free[0] > t:
            t = free[0]
        out[i] = t
        prev = t
        free[0] = t + service[i]
        _sift_down(free, tie, slots, 0)


@_njit
def schedule_budget_loop(arrive: Any, service: Any, cost: Any, budget: int, out: Any) -> None:  # pragma: no cover
    """The earliest step ≥ max(arrive[i], out[i − 1]) at which ``cost[i]`` fits beside the
    live requests' costs (:func:`kvgate.replay.allocators.schedule_budget`)."""
    hf = np.empty(1024, dtype=np.int64)
    hc = np.empty(1024, dtype=np.int64)
    size = 0
    used = 0
    prev = arrive[0] if len(arrive) else 0
    for i in range(len(arrive)):
        t = arrive[i]
        if t < prev:
            t = prev
        c = cost[i]
        while size > 0 and hf[0] <= t:
            used -= hc[0]
            size = _pop(hf, hc, size)
        while used + c > budget:
            if hf[0] > t:
                t = hf[0]
            used -= hc[0]
            size = _pop(hf, hc, size)
        out[i] = t
        prev = t
        if size == len(hf):
            hf = _grow(hf)
            hc = _grow(hc)
        hf[size] = t + service[i]
        hc[size] = c
        _sift_up(hf, hc, size)
        size += 1
        used += c


@_njit
def _fdiv(x: Any, b: int, shift: int) -> Any:  # pragma: no cover - compiled
    """x // b (floor), a shift when b = 2^shift (shift ≥ 0)."""
    return x >> shift if shift >= 0 else x // b


@_njit
def _fmod(x: Any, b: int, shift: int) -> Any:  # pragma: no cover - compiled
    """x % b (floor: 0 ≤ result < b), a mask when b = 2^shift."""
    return x & (b - 1) if shift >= 0 else x % b


@_njit
def _fen_add(tree: Any, r: int, v: int) -> None:  # pragma: no cover - compiled
    i = r + 1
    while i < len(tree):
        tree[i] += v
        i += i & -i


@_njit
def _fen_prefix(tree: Any, h: int) -> int:  # pragma: no cover - compiled
    """Live sequences with residue < h."""
    s = 0
    i = h
    while i > 0:
        s += tree[i]
        i -= i & -i
    return s


@_njit
def walk(admit: Any, prompt: Any, output: Any, block_size: int, slot_bytes: int, fixed: int, block_bytes: int,
         contiguous: bool, stats: Any, t0: int, width: int, bins_r: Any, bins_w: Any, bins_n: Any,
         fill_r: Any, fill_w: Any, fill_n: Any) -> None:  # fmt: skip  # pragma: no cover - compiled
    """Walk the epochs of the schedule ``admit`` (non-decreasing) of requests
    (``prompt``, ``output``); requests with output 0 hold nothing and are skipped.

    Fills ``stats`` (indices :data:`N_EPOCHS` ...). Reserved bytes are ``live ×
    slot_bytes`` when ``contiguous``, else ``live × fixed + blocks × block_bytes``;
    written bytes ``live × fixed + ⌊positions × block_bytes / B⌋``; the values at an
    epoch's last step are the ones compared (as :func:`kvgate.replay.results.allocator_result`
    does). When ``bins_r`` has any bins, it also fills the binned series of
    :func:`kvgate.replay.series.series` (bins of ``width`` steps from ``t0``): per bin the
    largest first/last value of any epoch starting or ending in it (``bins_*``, −1 where
    none), and the last values of the last epoch starting at or before it (``fill_*``).
    """
    B = block_size
    sh = -1  # log2(B) when B is a power of two: divisions become shifts
    if B & (B - 1) == 0:
        sh = 0
        while (1 << sh) < B:
            sh += 1
    m = len(admit)
    nb = len(bins_r)
    hf = np.empty(1024, dtype=np.int64)  # live sequences: finish step, request index
    hj = np.empty(1024, dtype=np.int64)
    size = 0
    tree = np.zeros(B + 1, dtype=np.int64)
    n = 0
    C = 0
    Q = 0
    n_ep = 0
    peak = -1
    peak_start = 0
    peak_end = 0
    w_at_peak = 0
    peak_w = -1
    max_live = 0
    as_paged = 0
    fill_ptr = 0
    prev_rl = 0
    prev_wl = 0
    prev_n = 0
    i = 0
    while i < m and output[i] == 0:
        i += 1
    if i == m:
        for k in range(N_STATS):
            stats[k] = 0
        return
    t = admit[i]
    while True:
        while size > 0 and hf[0] == t:  # finishes first
            j = hj[0]
            size = _pop(hf, hj, size)
            c = prompt[j] - admit[j] + 1
            d = c + (B - 1)
            n -= 1
            C -= c
            Q -= _fdiv(d, B, sh)
            _fen_add(tree, _fmod(d, B, sh), -1)
        while i < m and admit[i] == t:  # then admissions, in request order
            if output[i] > 0:
                c = prompt[i] - t + 1
                d = c + (B - 1)
                n += 1
                C += c
                Q += _fdiv(d, B, sh)
                _fen_add(tree, _fmod(d, B, sh), 1)
                if size == len(hf):
                    hf = _grow(hf)
                    hj = _grow(hj)
                hf[size] = t + output[i]
                hj[size] = i
                _sift_up(hf, hj, size)
                size += 1
            i += 1
            while i < m and output[i] == 0:
                i += 1
        has_next = False
        nxt = 0
        if size > 0:
            nxt = hf[0]
            has_next = True
        if i < m and (not has_next or admit[i] < nxt):
            nxt = admit[i]
            has_next = True
        if not has_next:
            break
        st = t
        t_last = nxt - 1
        h_first = _fmod(B - _fmod(st, B, sh), B, sh)
        h_last = _fmod(B - _fmod(t_last, B, sh), B, sh)
        ge_first = 0 if h_first == 0 else n - _fen_prefix(tree, h_first)
        ge_last = 0 if h_last == 0 else n - _fen_prefix(tree, h_last)
        pos_first = C + n * st
        pos_last = pos_first + n * (t_last - st)
        blocks_first = Q + n * _fdiv(st, B, sh) + ge_first
        blocks_last = Q + n * _fdiv(t_last, B, sh) + ge_last
        w_first = n * fixed + _fdiv(pos_first * block_bytes, B, sh)
        w_last = n * fixed + _fdiv(pos_last * block_bytes, B, sh)
        as_paged_last = n * fixed + blocks_last * block_bytes
        if contiguous:
            r_first = n * slot_bytes
            r_last = r_first
        else:
            r_first = n * fixed + blocks_first * block_bytes
            r_last = as_paged_last
        if r_last > peak:
            peak = r_last
            peak_start = st
            peak_end = nxt
            w_at_peak = w_last
        elif r_last == peak and w_last > w_at_peak:
            w_at_peak = w_last
        if w_last > peak_w:
            peak_w = w_last
        if n > max_live:
            max_live = n
        if as_paged_last > as_paged:
            as_paged = as_paged_last
        if nb > 0:
            bf = min((st - t0) // width, nb - 1)
            bl = min((t_last - t0) // width, nb - 1)
            while fill_ptr < bf:
                fill_r[fill_ptr] = prev_rl
                fill_w[fill_ptr] = prev_wl
                fill_n[fill_ptr] = prev_n
                fill_ptr += 1
            bins_r[bl] = max(bins_r[bl], r_last)
            bins_w[bl] = max(bins_w[bl], w_last)
            bins_n[bl] = max(bins_n[bl], n)
            bins_r[bf] = max(bins_r[bf], r_first)
            bins_w[bf] = max(bins_w[bf], w_first)
            bins_n[bf] = max(bins_n[bf], n)
            prev_rl = r_last
            prev_wl = w_last
            prev_n = n
        n_ep += 1
        t = nxt
    while fill_ptr < nb:
        fill_r[fill_ptr] = prev_rl
        fill_w[fill_ptr] = prev_wl
        fill_n[fill_ptr] = prev_n
        fill_ptr += 1
    stats[N_EPOCHS] = n_ep
    stats[PEAK] = peak
    stats[PEAK_START] = peak_start
    stats[PEAK_END] = peak_end
    stats[WRITTEN_AT_PEAK] = w_at_peak
    stats[PEAK_WRITTEN] = peak_w
    stats[MAX_LIVE] = max_live
    stats[AS_PAGED_PEAK] = as_paged
    stats[FINAL_END] = t


_NO_BINS = np.zeros(0, dtype=np.int64)


def walk_stats(admit: np.ndarray, prompt: np.ndarray, output: np.ndarray, block_size: int, slot_bytes: int,
               fixed: int, block_bytes: int, contiguous: bool) -> np.ndarray:  # fmt: skip
    """:func:`walk` without the series: the statistics array."""
    stats = np.zeros(N_STATS, dtype=np.int64)
    walk(i64(admit), i64(prompt), i64(output), int(block_size), int(slot_bytes), int(fixed), int(block_bytes),
         bool(contiguous), stats, 0, 1, _NO_BINS, _NO_BINS, _NO_BINS, _NO_BINS, _NO_BINS, _NO_BINS)  # fmt: skip
    return stats


def i64(a: np.ndarray) -> np.ndarray:
    """``a`` as a contiguous int64 array (no copy when it is one)."""
    return np.ascontiguousarray(a, dtype=np.int64)


def walk_bins(admit: np.ndarray, prompt: np.ndarray, output: np.ndarray, block_size: int, slot_bytes: int,
              fixed: int, block_bytes: int, contiguous: bool, t0: int, width: int,
              nb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """The binned series of :func:`kvgate.replay.series.series` from :func:`walk`: per bin
    the largest reserved bytes, written bytes and live sequences (int64 each: the walk
    runs only where every byte figure fits), bins no epoch starts or ends in taken from
    the epoch that covers them."""
    stats = np.zeros(N_STATS, dtype=np.int64)
    out_r = np.full(nb, -1, dtype=np.int64)
    out_w = np.full(nb, -1, dtype=np.int64)
    out_n = np.full(nb, -1, dtype=np.int64)
    fill_r = np.zeros(nb, dtype=np.int64)
    fill_w = np.zeros(nb, dtype=np.int64)
    fill_n = np.zeros(nb, dtype=np.int64)
    walk(i64(admit), i64(prompt), i64(output), int(block_size), int(slot_bytes), int(fixed), int(block_bytes),
         bool(contiguous), stats, int(t0), int(width), out_r, out_w, out_n, fill_r, fill_w, fill_n)  # fmt: skip
    empty = out_n < 0
    out_r[empty], out_w[empty], out_n[empty] = fill_r[empty], fill_w[empty], fill_n[empty]
    return out_r, out_w, out_n
