"""SHARDS (``tier --sample-rate R``) in numpy, so that a sampled run holds what it follows
and little else: no numba (its import and its compiled functions are ~110 MiB resident,
more than the followed state of 10^7 requests at R = 1%).

Each batch of requests is filtered as it comes: the spatial hash of every id
(:func:`kvgate.tier.curve.spatial_hash24`, the same as the compiled kernel's) picks the
followed accesses; their tokens (block ``j`` of a request of ``L`` tokens:
``min((j + 1)·B, L) − min(j·B, L)``) and requests are kept, and every request's tokens
``min(blocks·B, L)`` are added to the whole (the SHARDS_adj term). The followed accesses
are handed on in chunks of :data:`CHUNK` and go through the one-pass rule of
:mod:`kvgate.tier.curve` (the distance at each touch, ``D(t) = t − p − #{v < t : prev(v) >
p}``, the running maximum over a request's sampled blocks); the curve is the one the
compiled kernel and :class:`~kvgate.tier.curve.LruCurveBuilder` give at the same rate, to
the token (tested).

**What is held per followed block** (about 12 B, where the exact pass's numpy builder held
~100 B with its temporaries): its id in a sorted int64 array and, aligned with it, its last
touch (int32 until the times need more); new ids are merged into both in place, from the
back, in slices (room grown by ``realloc``, 1/16 at a time), so no second copy of the
followed set is made. The *live marks* (the last touches, whose count above ``p`` the
distance needs) are a bitmap over the followed times, one bit a time, counted through the
popcounts of its 64-bit words; when the times outgrow the followed blocks
(:data:`COMPACT_FACTOR`), each last touch is renumbered to its rank among them, which
keeps every distance (the rule reads only the order of the times and how many live marks
lie between two of them). The histogram is kept over the *sampled* distances (at most
the followed blocks, not 1/R of them) and scaled by ``⌈d / R⌉`` when the curve is asked
for: the running maximum commutes with that scaling (it is non-decreasing), so the
buckets are the ones a scaled histogram would have had.
"""

from __future__ import annotations

import numpy as np

from kvgate.tier.curve import _NEVER, _SHIFT, LruCurve, count_greater_before, spatial_hash24

CHUNK = 1 << 15  # followed accesses handed to the pass at once (its temporaries: ~150 B each)
COMPACT_FACTOR = 32  # renumber the times when they pass this many per followed block ...
COMPACT_MIN = 1 << 21  # ... and this many
_MOVE = 1 << 16  # ids moved at once by the in-place merge
_INT32_TIMES = (1 << 31) - 1


def _rank(words: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``#{set bits of the bitmap ``words`` at positions < x}`` for each of ``x`` (int64,
    below ``64 × len(words)``)."""
    prefix = np.zeros(len(words) + 1, dtype=np.int64)  # set bits of the words before word w
    np.cumsum(np.bitwise_count(words), out=prefix[1:])
    w = x >> 6
    below = (np.uint64(1) << (x & 63).astype(np.uint64)) - np.uint64(1)
    out: np.ndarray = prefix[w] + np.bitwise_count(words[w] & below).astype(np.int64)
    return out


class SampledCurveBuilder:
    """:class:`~kvgate.tier.curve.LruCurveBuilder`'s interface (``add``, ``result``) for
    a SHARDS rate ``sample_rate`` < 1 (module docstring)."""

    def __init__(self, block_tokens: int, sample_rate: float) -> None:
        if not 0.0 < sample_rate < 1.0:
            raise ValueError(f"sample_rate must be in (0, 1), got {sample_rate}")
        self.block_tokens = block_tokens
        self.sample_rate = sample_rate
        self._thr = np.uint64(int(sample_rate * (1 << 24)))
        self._ids: list[np.ndarray] = []
        self._req: list[np.ndarray] = []
        self._delta: list[np.ndarray] = []
        self._held = 0
        self._requests = 0
        self._prompt = 0
        self._all_tokens = 0
        self._sampled_tokens = 0
        # the followed blocks: sorted ids and, aligned, their last touch; _nb of them in use
        self._keys = np.zeros(1024, dtype=np.int64)
        self._last = np.zeros(1024, dtype=np.int32)
        self._nb = 0
        self._marks = np.zeros(1024, dtype=np.uint64)  # bit t: t is a followed block's last touch
        self._t = 0  # followed accesses so far (the time of the next one, after compactions)
        self._accesses = 0
        self._hist = np.zeros(1024, dtype=np.int64)  # tokens (weighted 1/R) by sampled distance

    # -- input ---------------------------------------------------------------------------------------------------
    def add(self, input_length: np.ndarray, offsets: np.ndarray, ids: np.ndarray) -> None:
        """Requests ``input_length[i]`` with ids ``ids[offsets[i] - offsets[0]: ...]``."""
        length = np.asarray(input_length, dtype=np.int64)
        off = np.asarray(offsets, dtype=np.int64) - int(offsets[0])
        ids = np.asarray(ids, dtype=np.int64)
        B = self.block_tokens
        self._all_tokens += int(np.minimum(np.diff(off) * B, length).sum())
        self._prompt += int(length.sum())
        keep = np.flatnonzero(spatial_hash24(ids) < self._thr)
        if len(keep):
            req = np.searchsorted(off, keep, side="right") - 1  # the request of each followed access
            pos = keep - off[req]
            L = length[req]
            self._ids.append(ids[keep])
            self._req.append(req + self._requests)
            self._delta.append(np.minimum((pos + 1) * B, L) - np.minimum(pos * B, L))
            self._held += len(keep)
        self._requests += len(length)
        if self._held >= CHUNK:
            self._flush()

    def _flush(self) -> None:
        if not self._held:
            return
        ids, req, delta = (np.concatenate(x) for x in (self._ids, self._req, self._delta))
        self._ids, self._req, self._delta, self._held = [], [], [], 0
        dense = np.zeros(len(req), dtype=np.int64)  # requests 0, 1, 2, ... inside the chunk (whole ones)
        np.cumsum(req[1:] != req[:-1], out=dense[1:])
        del req
        self._follow(ids, dense, delta)

    # -- the pass ------------------------------------------------------------------------------------------------
    def _follow(self, ids: np.ndarray, req: np.ndarray, delta: np.ndarray) -> None:
        """Followed accesses of whole requests, in order: ``ids``, their request
        (non-decreasing, below 2^22) and tokens."""
        k = len(ids)
        if self._t + k >= _INT32_TIMES and self._last.dtype == np.int32:
            self._last = self._last.astype(np.int64)
        a = self._t
        t = a + np.arange(k, dtype=np.int64)
        # the chunk's distinct ids u (sorted), each access's index in u, and the accesses by (id, time)
        order = np.argsort(ids, kind="stable")
        first = np.ones(k, dtype=bool)
        np.not_equal(ids[order[1:]], ids[order[:-1]], out=first[1:])
        u = ids[order[first]]
        inv = np.empty(k, dtype=np.int64)
        inv[order] = np.cumsum(first) - 1
        same = ~first[1:]
        del first
        nb = self._nb
        keys = self._keys[:nb]
        at = np.searchsorted(keys, u)
        known = at < nb
        known[known] = keys[at[known]] == u[known]
        del keys  # a view: the merge below may move the array
        pb = self._last[at[known]].astype(np.int64)  # the known blocks' last touches, before this chunk
        # previous touch of each access: inside the chunk, or the block's last touch before it
        prev_u = np.full(len(u), -1, dtype=np.int64)
        prev_u[known] = pb
        prev = prev_u[inv]
        del prev_u
        prev[order[1:][same]] = t[order[:-1][same]]
        last_in_chunk = np.ones(k, dtype=bool)
        last_in_chunk[order[:-1][same]] = False
        del order, same
        # D(t) = t - p - #{v < t : prev(v) > p}   (kvgate.tier.curve); before the chunk, from the live marks
        seen = prev >= 0
        before = seen & (prev < a)
        p0 = prev[before]
        # live marks after p (all lie before a)
        live_after = nb - _rank(self._marks[: ((a + 63) >> 6) + 1], p0 + 1)
        d = t - prev
        d[before] -= (a - 1 - p0) - live_after
        del p0, live_after, before
        d -= count_greater_before(prev)
        d[~seen] = _NEVER
        del seen, prev
        # the running maximum within each request, over the sampled distances
        m = np.maximum.accumulate((req << _SHIFT) | d) & _NEVER
        del d
        w = np.rint(delta / self.sample_rate).astype(np.int64)
        self._sampled_tokens += int(w.sum())
        hit = m < _NEVER
        mh = m[hit]
        if len(mh):
            top = int(mh.max()) + 1
            if top > len(self._hist):  # a sampled distance is at most the followed blocks
                self._hist.resize(max(top, min(2 * len(self._hist), nb + len(u) + 2)), refcheck=False)
            np.add.at(self._hist, mh, w[hit])
        del m, w, hit, mh
        # live marks: the known blocks' old last touches go, this chunk's last touches come
        new_last = t[last_in_chunk]
        new_codes = inv[last_in_chunk]  # the unique id of each, in u's order
        del inv, last_in_chunk
        words_needed = ((a + k) >> 6) + 2
        if words_needed > len(self._marks):
            self._marks.resize(max(words_needed, len(self._marks) * 2), refcheck=False)
        one = np.uint64(1)
        np.bitwise_and.at(self._marks, pb >> 6, ~(one << (pb & 63).astype(np.uint64)))
        np.bitwise_or.at(self._marks, new_last >> 6, one << (new_last & 63).astype(np.uint64))
        # last touches: in place for the known blocks, the new ones merged in
        last_u = np.empty(len(u), dtype=self._last.dtype)
        last_u[new_codes] = new_last
        del new_last, new_codes
        self._last[at[known]] = last_u[known]
        fresh = ~known
        if bool(fresh.any()):
            self._merge(u[fresh], at[fresh], last_u[fresh])
        self._t += k
        self._accesses += k
        if self._t > max(COMPACT_FACTOR * self._nb, COMPACT_MIN):
            self._compact()

    def _merge(self, new: np.ndarray, at: np.ndarray, last: np.ndarray) -> None:
        """Sorted ids ``new`` (none followed yet) into the followed set, each before the
        followed id at ``at`` (``searchsorted``), with their last touches: the followed ids
        from ``at[0]`` on move up, from the back, ``_MOVE`` at a time (no second copy)."""
        nb, nn = self._nb, len(new)
        need = nb + nn
        if need > len(self._keys):
            room = max(need, len(self._keys) + len(self._keys) // 16)  # realloc: a large array's pages are remapped
            self._keys.resize(room, refcheck=False)
            self._last.resize(room, refcheck=False)
        hi = nb
        lo0 = int(at[0])
        while hi > lo0:
            lo = max(hi - _MOVE, lo0)
            src = np.arange(lo, hi, dtype=np.int64)
            dst = src + np.searchsorted(at, src, side="right")  # the new ids before each
            self._keys[dst] = self._keys[lo:hi].copy()
            self._last[dst] = self._last[lo:hi].copy()
            hi = lo
        dst = at + np.arange(nn, dtype=np.int64)
        self._keys[dst] = new
        self._last[dst] = last
        self._nb = need

    def _compact(self) -> None:
        """Each last touch renumbered to its rank among them (module docstring)."""
        nb = self._nb
        self._last[:nb] = _rank(self._marks[: (self._t >> 6) + 1], self._last[:nb].astype(np.int64))
        self._marks = np.zeros(max(1024, 2 * ((nb >> 6) + 2)), dtype=np.uint64)
        full, rest = nb >> 6, nb & 63
        self._marks[:full] = ~np.uint64(0)
        if rest:
            self._marks[full] = (np.uint64(1) << np.uint64(rest)) - np.uint64(1)
        self._t = nb
        if self._last.dtype == np.int64 and nb < _INT32_TIMES // 2:
            self._last = self._last.astype(np.int32)

    # -- output --------------------------------------------------------------------------------------------------
    def result(self) -> LruCurve:
        """The curve so far (:class:`~kvgate.tier.curve.LruCurve`)."""
        self._flush()
        R = self.sample_rate
        nz = np.flatnonzero(self._hist)
        # the distance of a sampled block, scaled: ceil(d / R) (the same float arithmetic as the exact pass's)
        scaled = np.minimum(np.ceil(nz / R).astype(np.int64), _NEVER)
        hist = np.zeros(max(int(scaled[-1]) + 1 if len(nz) else 0, 2), dtype=np.int64)
        np.add.at(hist, scaled, self._hist[nz])
        # SHARDS_adj (Waldspurger et al. 2015, section 4.3): the difference between the expected
        # and the sampled weight goes to the first bucket
        hist[1] += self._all_tokens - self._sampled_tokens
        top = int(np.flatnonzero(hist)[-1]) + 1 if np.any(hist) else 1
        hist = hist[:top]
        return LruCurve(self.block_tokens, self._requests, self._prompt, hist, int(hist.sum()), self._nb,
                        R, self._accesses)  # fmt: skip
