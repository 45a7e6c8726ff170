"""The compiled exact stack-distance pass (numba), fed a trace batch by batch.

The same curve as :class:`kvgate.tier.stack.LruCurveBuilder` (the pure-numpy path, kept
for a machine where numba does not import: :data:`HAVE_NUMBA`), computed the textbook way
(Mattson et al. 1970; Bennett & Kruskal 1975): a Fenwick tree over access times marks each
block's last touch, and the stack distance of an access to a block last touched at ``p``
is 1 + the marks after ``p`` (the distinct blocks touched since). The prefix rule of
:mod:`kvgate.tier.stack` then takes, per request, the running maximum ``m_j`` of its
blocks' distances: block ``j`` hits at every capacity ≥ ``m_j``, its tokens are added to
``hist[m_j]``.

Memory follows the distinct blocks, not the accesses: ids are used as they are while
they are small (Mooncake's are 0, 1, 2, ...: ``last`` is indexed by the id), else they are
interned into dense codes through an open-addressing table (:func:`_intern`). The marks
are a bitmap over access times (one bit a time) with a Fenwick tree over its 64-bit words
(one int32 a word): 0.19 B per time instead of the 4 B of a Fenwick tree over the times
themselves, and a query walks log2(times / 64) nodes then counts the bits of one word. The
times are renumbered (compacted, in order) when the bitmap fills, to the ranks of the live
marks read off the same bitmap: no time-to-block array. The state is then one int32 per
distinct block (``last``, grown in place by ``realloc``), about 0.75 B per live block
for the marks (room for 4 × the live blocks' times), and, for interned ids, the table
(12 B a slot, at most half full). Under SHARDS sampling (``sample_rate`` R < 1) only the
blocks whose spatial hash falls below R are interned and followed; distances are scaled
by 1/R and tokens weighted 1/R at the end, exactly as the numpy path does (the two are
tested equal, sampled and exact). ``kvgate tier --sample-rate`` itself runs SHARDS in
numpy (:mod:`kvgate.tier.shards`), without numba's own memory.

No compiler runs at ``kvgate`` run time beyond numba's own LLVM JIT (cached on disk
with ``cache=True``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

try:  # numba is a declared dependency; the numpy path stays for a platform without its wheels
    import numba

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised by forcing HAVE_NUMBA off in the tests
    numba = None  # type: ignore[assignment]
    HAVE_NUMBA = False

_NEVER = (1 << 41) - 1  # as kvgate.tier.stack: "never touched", stack distance ∞
_EMPTY = np.int64(-1)
_DIRECT_LIMIT = 1 << 27  # ids below this index ``last`` directly (exact runs only)
_MIN_TIMES = 1 << 12  # the fewest access times the marks' bitmap covers (a multiple of 64)


def _njit(f: Any) -> Any:
    return numba.njit(cache=True, nogil=True)(f) if HAVE_NUMBA else f


@_njit
def _mix(x: Any) -> Any:  # pragma: no cover - compiled
    """splitmix64's finalizer on uint64 (the SHARDS spatial hash of :mod:`kvgate.tier.stack`)."""
    z = np.uint64(x) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@_njit
def _intern(key: Any, keys: Any, vals: Any, n: Any) -> Any:  # pragma: no cover - compiled
    """Code of ``key`` in the table (inserted as ``n[0]`` when new)."""
    mask = len(keys) - 1
    h = np.int64(_mix(key) & np.uint64(mask))
    while True:
        k = keys[h]
        if k == key:
            return vals[h]
        if k == -1:
            keys[h] = key
            c = n[0]
            vals[h] = c
            n[0] = c + 1
            return c
        h = (h + 1) & mask


@_njit
def _rehash(keys: Any, vals: Any, new_cap: Any) -> Any:  # pragma: no cover - compiled
    nk = np.full(new_cap, -1, dtype=np.int64)
    nv = np.zeros(new_cap, dtype=np.int32)
    mask = new_cap - 1
    for i in range(len(keys)):
        k = keys[i]
        if k != -1:
            h = np.int64(_mix(k) & np.uint64(mask))
            while nk[h] != -1:
                h = (h + 1) & mask
            nk[h] = k
            nv[h] = vals[i]
    return nk, nv


@_njit
def _popcount(x: Any) -> Any:  # pragma: no cover - compiled
    """Set bits of a uint64 (the SWAR count; LLVM emits one ``popcnt`` for it)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@_njit
def _marks_build(bits: Any, fen: Any, ones: Any) -> None:  # pragma: no cover - compiled
    """Marks at times 0 .. ones-1: the bitmap ``bits`` (64 times a word) and the Fenwick
    tree over its words' counts (1-based in ``fen[1:]``, ``len(fen) == len(bits) + 1``), in
    O(len)."""
    full = ones >> 6
    for w in range(len(bits)):
        if w < full:
            bits[w] = ~np.uint64(0)
        elif w == full and ones & 63:
            bits[w] = (np.uint64(1) << np.uint64(ones & 63)) - np.uint64(1)
        else:
            bits[w] = 0
    for i in range(len(fen)):
        fen[i] = 0
    for i in range(1, len(fen)):
        fen[i] += _popcount(bits[i - 1])
        j = i + (i & -i)
        if j < len(fen):
            fen[j] += fen[i]


@_njit
def _pass(ids: Any, off: Any, length: Any, B: Any, thr: Any, rate: Any, direct: Any,
          keys: Any, vals: Any, n: Any, last: Any, bits: Any, fen: Any, t0: Any, hist: Any, stats: Any,
          ovf_m: Any, ovf_w: Any) -> Any:
    # pragma: no cover - compiled
    """One batch (module docstring). ``stats``: [live marks, all tokens, sampled tokens,
    accesses followed, overflow entries]. A prefix distance beyond ``hist`` goes to
    ``ovf_m``/``ovf_w`` (one slot per access of the batch; the caller grows ``hist`` and
    adds them), so ``hist`` is as long as the largest distance seen, not the blocks.
    Returns the next time, or -1 - i when request ``i``'s ids need a direct index beyond
    ``last`` (the caller switches to interning and goes on from ``i``)."""
    t = t0
    size = len(fen)
    nh = len(hist)
    live = stats[0]
    tok_all = stats[1]
    tok_sampled = stats[2]
    followed = stats[3]
    no = stats[4]
    sampling = thr < (np.uint64(1) << np.uint64(24))
    for r in range(len(length)):
        L = length[r]
        a, b = off[r], off[r + 1]
        if direct:
            bad = False
            for q in range(a, b):
                if ids[q] >= len(last):
                    bad = True
            if bad:
                stats[0], stats[1], stats[2], stats[3], stats[4] = live, tok_all, tok_sampled, followed, no
                return -1 - r
        m = 0
        for q in range(a, b):
            j = q - a
            lo = j * B
            hi = lo + B
            delta = (hi if hi < L else L) - (lo if lo < L else L)
            tok_all += delta
            key = ids[q]
            if sampling:
                if (_mix(key) >> np.uint64(40)) >= thr:
                    continue
                w = np.int64(np.rint(delta / rate))
                tok_sampled += w
            else:
                w = delta
            c = key if direct else _intern(key, keys, vals, n)
            p = last[c]
            if p < 0:
                d = _NEVER
                live += 1
            else:
                # marks at times > p: all live marks minus those at times <= p (the words
                # before p's word from the tree, then p's word up to p's bit)
                wp = p >> 6
                bp = np.uint64(p & 63)
                s = _popcount(bits[wp] & ((np.uint64(2) << bp) - np.uint64(1)))
                i = wp
                while i > 0:
                    s += fen[i]
                    i -= i & -i
                d = live - s + 1
                bits[wp] &= ~(np.uint64(1) << bp)
                i = wp + 1
                while i < size:
                    fen[i] -= 1
                    i += i & -i
                if sampling:
                    d = math.ceil(d / rate)
                    if d > _NEVER:
                        d = _NEVER
            bits[t >> 6] |= np.uint64(1) << np.uint64(t & 63)
            i = (t >> 6) + 1
            while i < size:
                fen[i] += 1
                i += i & -i
            last[c] = t
            t += 1
            followed += 1
            if d > m:
                m = d
            if m < _NEVER:
                if m < nh:
                    hist[m] += w
                else:
                    ovf_m[no] = m
                    ovf_w[no] = w
                    no += 1
    stats[0], stats[1], stats[2], stats[3], stats[4] = live, tok_all, tok_sampled, followed, no
    return t


@_njit
def _compact_times(last: Any, bits: Any) -> Any:  # pragma: no cover - compiled
    """Renumber the live marks (``last`` ≥ 0, each a set bit of ``bits``) 0, 1, ... in
    their order: a block's new time is the rank of its mark (the marks before it), read
    off the bitmap, in O(len(last) + len(bits)); returns how many."""
    before = np.empty(len(bits), dtype=np.int64)  # marks in the words before each word
    k = 0
    for w in range(len(bits)):
        before[w] = k
        k += _popcount(bits[w])
    for c in range(len(last)):
        p = last[c]
        if p >= 0:
            last[c] = before[p >> 6] + _popcount(bits[p >> 6] & ((np.uint64(1) << np.uint64(p & 63)) - np.uint64(1)))
    return k


@dataclass
class CompiledCurveBuilder:
    """:class:`kvgate.tier.stack.LruCurveBuilder`'s interface (:meth:`add`, :meth:`result`)
    on the compiled pass."""

    block_tokens: int
    sample_rate: float = 1.0
    _direct: bool = True
    _keys: np.ndarray = field(default_factory=lambda: np.full(1 << 10, -1, dtype=np.int64))
    _vals: np.ndarray = field(default_factory=lambda: np.zeros(1 << 10, dtype=np.int32))
    _n: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    _last: np.ndarray = field(default_factory=lambda: np.full(1 << 10, -1, dtype=np.int32))
    _bits: np.ndarray = field(default_factory=lambda: np.zeros(_MIN_TIMES >> 6, dtype=np.uint64))  # marks, 64 a word
    _fen: np.ndarray = field(default_factory=lambda: np.zeros((_MIN_TIMES >> 6) + 1, dtype=np.int32))  # over the words
    _hist: np.ndarray = field(default_factory=lambda: np.zeros(1 << 10, dtype=np.int64))
    _stats: np.ndarray = field(default_factory=lambda: np.zeros(5, dtype=np.int64))
    _ovf_m: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _ovf_w: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _t: int = 0
    _requests: int = 0
    _prompt: int = 0

    def __post_init__(self) -> None:
        if not HAVE_NUMBA:
            raise RuntimeError("numba is not importable: use kvgate.tier.stack.LruCurveBuilder")
        self._direct = self.sample_rate >= 1.0
        self._thr = np.uint64(min(int(self.sample_rate * (1 << 24)), 1 << 24))

    def _live(self) -> int:
        return int(self._stats[0])

    def _ensure(self, k: int, max_id: int) -> None:
        """Room for ``k`` more accesses: table, ``last``, the Fenwick tree and the overflow
        slots of ``hist``."""
        if self._direct:
            need_last = max_id + 1
        else:
            need_last = int(self._n[0]) + k
            cap = len(self._keys)
            if 2 * (int(self._n[0]) + k) > cap:  # at most half full (linear probing)
                new_cap = 1 << max(10, (2 * (int(self._n[0]) + k)).bit_length())
                self._keys, self._vals = _rehash(self._keys, self._vals, new_cap)
        if need_last > len(self._last):
            old = len(self._last)
            # in place: numpy's resize is realloc, which moves a large block by remapping its
            # pages (no second copy at once); the new ids' room is a sixteenth at least
            self._last.resize(max(need_last, old + old // 16, 1 << 10), refcheck=False)
            self._last[old:] = -1
        if self._t + k + 1 >= 64 * len(self._bits):
            self._compact(k)
        if len(self._ovf_m) < k:
            self._ovf_m = np.zeros(k, dtype=np.int64)
            self._ovf_w = np.zeros(k, dtype=np.int64)

    def _compact(self, k: int) -> None:
        """Renumber the live marks 0 .. live-1 in their order; a bitmap and its tree for
        them and ``k`` more accesses (with room to spare)."""
        old = 64 * len(self._bits)
        live = int(_compact_times(self._last, self._bits))
        self._t = live
        # room for three times as many accesses again as there are live blocks (and this
        # batch), so compactions come at geometrically spaced times: their cost stays a few
        # passes over the blocks in all (the room costs 0.19 B a time)
        words = (max(4 * live + k + 1, old, _MIN_TIMES) + 63) >> 6
        self._bits = np.zeros(0, dtype=np.uint64)
        self._fen = np.zeros(0, dtype=np.int32)
        self._bits = np.empty(words, dtype=np.uint64)
        self._fen = np.empty(words + 1, dtype=np.int32)
        _marks_build(self._bits, self._fen, live)

    def _merge_overflow(self) -> None:
        """Grow ``hist`` to the largest distance the pass met beyond it (by half again at
        least) and add those entries."""
        no = int(self._stats[4])
        if not no:
            return
        m, w = self._ovf_m[:no], self._ovf_w[:no]
        top = int(m.max()) + 1
        grown = np.zeros(max(top, len(self._hist) + len(self._hist) // 2), dtype=np.int64)
        grown[: len(self._hist)] = self._hist
        np.add.at(grown, m, w)
        self._hist = grown
        self._stats[4] = 0

    def _to_interned(self) -> None:
        """Leave direct indexing: the ids seen so far become the table's keys, with their
        ids as codes (codes go on from ``len(last)``)."""
        seen = np.flatnonzero(self._last >= 0)
        cap = 1 << max(10, (4 * len(seen) + 1).bit_length())
        keys = np.full(cap, -1, dtype=np.int64)
        vals = np.zeros(cap, dtype=np.int32)
        self._keys, self._vals = _rehash(keys, vals, cap)
        self._n[0] = 0
        for s in np.array_split(seen, max(1, len(seen) // (1 << 20))):
            _insert_as(s, self._keys, self._vals)
        self._n[0] = len(self._last)
        self._direct = False

    def add(self, input_length: np.ndarray, offsets: np.ndarray, ids: np.ndarray) -> None:
        """Requests ``input_length[i]`` with ids ``ids[offsets[i] - offsets[0]: ...]``."""
        length = np.ascontiguousarray(input_length, dtype=np.int64)
        off = np.ascontiguousarray(offsets - offsets[0], dtype=np.int64)
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        self._requests += len(length)
        self._prompt += int(length.sum())
        start = 0
        while start < len(length):
            sub_off = off[start:] - off[start]
            sub_ids = ids[off[start] :]
            k = len(sub_ids)
            max_id = int(sub_ids.max()) if k else 0
            if self._direct and max_id >= max(_DIRECT_LIMIT, 4 * (int(self._stats[3]) + k)):
                self._to_interned()
            self._ensure(k, max_id if self._direct else 0)
            t = _pass(sub_ids, sub_off, length[start:], self.block_tokens, self._thr, float(self.sample_rate), self._direct,
                      self._keys, self._vals, self._n, self._last, self._bits, self._fen, self._t, self._hist, self._stats,
                      self._ovf_m, self._ovf_w)
            self._merge_overflow()
            if t >= 0:
                self._t = int(t)
                return
            raise AssertionError("direct index beyond last: _ensure sized it")  # pragma: no cover

    def result(self) -> Any:
        """The curve so far (:class:`kvgate.tier.stack.LruCurve`)."""
        from kvgate.tier.curve import LruCurve

        hist = self._hist.copy()
        if self.sample_rate < 1.0 and len(hist) > 1:
            hist[1] += int(self._stats[1]) - int(self._stats[2])  # SHARDS_adj, as the numpy path
        top = int(np.flatnonzero(hist)[-1]) + 1 if np.any(hist) else 1
        hist = hist[:top]
        return LruCurve(self.block_tokens, self._requests, self._prompt, hist, int(hist.sum()), self._live(),
                        self.sample_rate, int(self._stats[3]))  # fmt: skip


@_njit
def _insert_as(ids: Any, keys: Any, vals: Any) -> None:  # pragma: no cover - compiled
    """Insert each id with itself as its code."""
    mask = len(keys) - 1
    for q in range(len(ids)):
        key = ids[q]
        h = np.int64(_mix(key) & np.uint64(mask))
        while keys[h] != -1 and keys[h] != key:
            h = (h + 1) & mask
        keys[h] = key
        vals[h] = key


@_njit
def _intern_all(ids: Any, keys: Any, vals: Any, n: Any, out: Any) -> None:  # pragma: no cover - compiled
    for q in range(len(ids)):
        out[q] = _intern(ids[q], keys, vals, n)


class Interner:
    """Hash ids → dense codes 0, 1, 2, ... in first-seen order, batch by batch (int32 out).

    Compiled: the open-addressing table of :func:`_intern`. Without numba: a sorted key
    array and ``np.searchsorted`` (the same codes, slower).
    """

    def __init__(self) -> None:
        self.n = 0
        self._keys = np.full(1 << 10, -1, dtype=np.int64)
        self._vals = np.zeros(1 << 10, dtype=np.int32)
        self._count = np.zeros(1, dtype=np.int64)
        self._skeys = np.zeros(0, dtype=np.int64)  # numpy path: sorted keys and their codes
        self._svals = np.zeros(0, dtype=np.int64)

    def codes(self, ids: np.ndarray) -> np.ndarray:
        """int32 codes of ``ids`` (int64, ≥ 0)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if HAVE_NUMBA:
            if 2 * (self.n + len(ids)) > len(self._keys):
                cap = 1 << max(10, (4 * (self.n + len(ids)) - 1).bit_length())
                self._keys, self._vals = _rehash(self._keys, self._vals, cap)
            out = np.empty(len(ids), dtype=np.int32)
            _intern_all(ids, self._keys, self._vals, self._count, out)
            self.n = int(self._count[0])
            return out
        return self._codes_numpy(ids)

    def _codes_numpy(self, ids: np.ndarray) -> np.ndarray:
        u, first = np.unique(ids, return_index=True)
        pos = np.searchsorted(self._skeys, u)
        known = (pos < len(self._skeys)) & (self._skeys[np.minimum(pos, max(len(self._skeys) - 1, 0))] == u) \
            if len(self._skeys) else np.zeros(len(u), dtype=bool)  # fmt: skip
        new = u[~known]
        if len(new):
            order = np.argsort(first[~known], kind="stable")  # first-seen order
            codes = np.empty(len(new), dtype=np.int64)
            codes[order] = np.arange(self.n, self.n + len(new))
            self.n += len(new)
            keys = np.concatenate([self._skeys, new])
            vals = np.concatenate([self._svals, codes])
            o = np.argsort(keys, kind="stable")
            self._skeys, self._svals = keys[o], vals[o]
        return self._svals[np.searchsorted(self._skeys, ids)].astype(np.int32)
