"""The plain LRU prefix cache's hit curve for every capacity, in one pass.

**The rule** (``lru``, the reference every engine model is compared with): requests in
file order; a request's hit is the longest leading run of its hash ids present in the
cache, counted as ``min(run × block_tokens, input_length)`` tokens; then each of its
hash ids is touched in order (a present one becomes most recent, an absent one is
inserted as most recent, and the least recent is evicted while the cache holds more than
C blocks). :func:`kvgate.tier.lru.simulate_lru` is that rule, word for word, at one C.

**One pass for every C** (Mattson, Gecsei, Slutz, Traiger, "Evaluation techniques for
storage hierarchies", IBM Systems Journal 9(2), 1970). LRU is a stack algorithm: after
every touch the cache of capacity C holds exactly the C most recently touched distinct
blocks. So a block is present in the cache of capacity C iff its *stack distance* (1 +
the number of distinct blocks touched since its last touch; ∞ if never touched) is ≤ C.

*The longest leading run.* Let ``d_j`` be block j's stack distance at the start of the
request and ``m_j = max(d_1..d_j)``. The run of the cache of capacity C is the largest j
with ``m_j ≤ C`` (m is non-decreasing in j), so block j adds
``δ_j = min(j·B, L) − min((j−1)·B, L)`` tokens to every capacity C ≥ m_j:
``hit(C) = Σ_requests Σ_j δ_j·[m_j ≤ C]``, one histogram over m. The distances are
computed at each block's own *touch* (the earlier blocks of the same request already
moved to the top), which changes nothing: a block i < j moved above block j was deeper
than j at the start, so j's touch distance is at most ``m_j``, and equals ``d_j`` when
``d_j = m_j``; the running maximum over touch distances is ``m_j``.

*The distance at each touch* uses the identity, for access t to a block last touched
at p (0-based positions in the access stream): ``D(t) = t − p − #{v < t : prev(v) > p}``
(the accesses in (p, t) minus those whose block is touched again before t). The count
is taken per segment of whole requests: the part before the segment from the sorted
positions of the blocks' last touches (``#live marks in (p, a)``), the part inside it by
:func:`count_greater_before` (numpy, O(K log K) for K accesses, no Python loop per
access). Memory: the segment's arrays, one int64 per distinct block (its last touch, the
sorted live marks) and the histogram: O(distinct blocks), not O(accesses).

**SHARDS** (Waldspurger, Park, Garthwaite, Ahmad, "Efficient MRC construction with
SHARDS", FAST 2015): with ``sample_rate`` R < 1 only blocks whose spatial hash falls
below R are followed; their distances, scaled by 1/R, and their tokens, weighted 1/R,
estimate the curve. The prefix rule is kept over the sampled blocks of each request
(``m̂_j`` = the running maximum of the sampled distances), so the estimate is exact for
a trace whose leading runs are decided by sampled blocks; its error against the exact
curve is measured in ``benchmarks/RESULTS.md`` (section "Host tier").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_SHIFT = 41  # distances < 2^41 (bits for the segmented running maximum)
_NEVER = (1 << _SHIFT) - 1  # "never touched": stack distance ∞
_MAX_SEGMENT_REQUESTS = 1 << 20


def spatial_hash24(ids: np.ndarray) -> np.ndarray:
    """SHARDS' spatial hash: splitmix64's finalizer of each id, top 24 bits (uint64)."""
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z >> np.uint64(40)


def count_greater_before(x: np.ndarray) -> np.ndarray:
    """``g[i] = #{j < i : x[j] > x[i]}`` for an int array ``x`` of shape ``[n]``.

    Radix on the ranks of ``x``, top bit first: two values first differ at one bit, and
    the larger has a 1 there, so each level counts, for every element with a 0 at that bit,
    the earlier elements of its group (same higher bits) with a 1. Each level is a stable
    partition of the groups by the bit (numpy, O(n)); ⌈log2 n⌉ levels.

    Returns:
        int64 ``[n]``.
    """
    n = len(x)
    out = np.zeros(n, dtype=np.int64)
    if n < 2:
        return out
    r = np.unique(x, return_inverse=True)[1].astype(np.int64).reshape(-1)
    bits = int(r.max()).bit_length()
    perm = np.arange(n, dtype=np.int64)  # element order: by (group, index)
    start = np.zeros(n, dtype=np.int64)  # position of the element's group start in perm
    idx = np.arange(n, dtype=np.int64)
    for b in range(bits - 1, -1, -1):
        bit = (r[perm] >> b) & 1
        ones_incl = np.cumsum(bit)
        ones_before_pos = ones_incl - bit  # ones before this position, whole array
        base = ones_before_pos[start]  # ones before the group start
        ones_before = ones_before_pos - base
        zero = bit == 0
        out[perm[zero]] += ones_before[zero]
        # group sizes and zero counts, per element
        new_group = np.empty(n, dtype=bool)
        new_group[0] = True
        new_group[1:] = start[1:] != start[:-1]
        g_starts = np.flatnonzero(new_group)
        g_ends = np.append(g_starts[1:], n)
        g_ones = ones_incl[g_ends - 1] - ones_before_pos[g_starts]
        g_zeros = (g_ends - g_starts) - g_ones
        gid = np.cumsum(new_group) - 1
        zeros_before = (idx - start) - ones_before
        newpos = np.where(zero, start + zeros_before, start + g_zeros[gid] + ones_before)
        new_perm = np.empty_like(perm)
        new_perm[newpos] = perm
        # new groups: zeros part starts at start, ones part at start + g_zeros
        new_start_by_pos = np.where(zero, start, start + g_zeros[gid])
        new_start = np.empty_like(start)
        new_start[newpos] = new_start_by_pos
        perm, start = new_perm, new_start
    return out


@dataclass
class LruCurve:
    """The LRU hit curve of a hashed trace (one pass, :class:`LruCurveBuilder`).

    Attributes:
        block_tokens: tokens per trace block.
        n_requests, prompt_tokens: the trace's requests and Σ input_length.
        hist: int64 ``[k + 1]``; ``hist[c]`` = tokens first hit at capacity ``c`` blocks
            (``hist[0] == 0``); capacities above ``len(hist) - 1`` add nothing.
        unbounded_hit_tokens: Σ hist (an unbounded cache; cold misses only).
        distinct_blocks: distinct hash ids seen (followed ones, when sampled).
        sample_rate: 1 for the exact curve, R < 1 for a SHARDS estimate.
    """

    block_tokens: int
    n_requests: int
    prompt_tokens: int
    hist: np.ndarray
    unbounded_hit_tokens: int
    distinct_blocks: int
    sample_rate: float = 1.0
    accesses: int = 0

    @property
    def exact(self) -> bool:
        """Whether every block was followed (no SHARDS sampling)."""
        return self.sample_rate >= 1.0

    def hit_tokens(self, capacity_blocks: int) -> int:
        """Tokens served from an LRU cache of ``capacity_blocks`` trace blocks."""
        if capacity_blocks <= 0:
            return 0
        c = min(int(capacity_blocks), len(self.hist) - 1)
        return max(int(self.hist[: c + 1].sum()), 0)

    def at(self, capacities: list[int] | np.ndarray) -> np.ndarray:
        """:meth:`hit_tokens` at each of ``capacities`` (int64)."""
        cum = np.maximum(np.cumsum(self.hist), 0)
        c = np.clip(np.asarray(capacities, dtype=np.int64), 0, len(self.hist) - 1)
        out: np.ndarray = cum[c]
        return out

    def changes(self) -> tuple[np.ndarray, np.ndarray]:
        """``(capacities, hit_tokens)``: every capacity at which the curve rises, with the
        hit there (int64 arrays, ascending)."""
        c = np.flatnonzero(self.hist)
        return c.astype(np.int64), np.cumsum(self.hist)[c]

    def saturation_blocks(self) -> int:
        """The smallest capacity that serves every hit an unbounded cache serves."""
        nz = np.flatnonzero(self.hist)
        return int(nz[-1]) if len(nz) else 0


@dataclass
class LruCurveBuilder:
    """Feed requests in file order (:meth:`add`), then :meth:`result`.

    Args:
        block_tokens: tokens per trace block.
        sample_rate: 1.0 (exact) or the SHARDS rate R in (0, 1).
        segment_accesses: accesses per segment (memory vs. numpy call overhead).
    """

    block_tokens: int
    sample_rate: float = 1.0
    segment_accesses: int = 1 << 20
    _last: np.ndarray = field(default_factory=lambda: np.full(1024, -1, dtype=np.int64))
    _live: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _hist: np.ndarray = field(default_factory=lambda: np.zeros(1024, dtype=np.int64))
    _t: int = 0
    _n: int = 0
    _prompt: int = 0
    _remap_keys: np.ndarray | None = None
    _remap_vals: np.ndarray | None = None
    _next_code: int = 0
    _all_tokens: int = 0
    _sampled_tokens: int = 0

    def add(self, input_length: np.ndarray, offsets: np.ndarray, ids: np.ndarray) -> None:
        """Requests ``input_length[i]`` with ids ``ids[offsets[i] - offsets[0]: ...]``
        (the arrays of :class:`~kvgate.tier.traces.HashedTrace` or a slice of them)."""
        n = len(input_length)
        off = offsets - offsets[0]
        i = 0
        while i < n:
            # whole requests, about segment_accesses ids, at most _MAX_SEGMENT_REQUESTS
            j = int(np.searchsorted(off, off[i] + self.segment_accesses, side="right")) - 1
            j = min(max(j, i + 1), n, i + _MAX_SEGMENT_REQUESTS)
            self._segment(input_length[i:j], off[i : j + 1] - off[i], ids[off[i] : off[j]])
            i = j

    def _codes(self, ids: np.ndarray) -> np.ndarray:
        """Dense codes for ids (ids themselves when they are small)."""
        if self._remap_keys is None and self.sample_rate >= 1.0 and (len(ids) == 0 or int(ids.max()) < (1 << 28)):
            return ids  # dense ids index the last-touch array directly (sampled ids are remapped: memory O(sample))
        if self._remap_keys is None:  # switch to a remap; codes so far were the ids
            seen = np.flatnonzero(self._last >= 0)
            self._remap_keys, self._remap_vals = seen.astype(np.int64), seen.astype(np.int64)
            self._next_code = len(self._last)
        assert self._remap_vals is not None
        u = np.unique(ids)
        pos = np.searchsorted(self._remap_keys, u)
        if len(self._remap_keys):
            known = (pos < len(self._remap_keys)) & (self._remap_keys[np.minimum(pos, len(self._remap_keys) - 1)] == u)
        else:
            known = np.zeros(len(u), dtype=bool)
        new = u[~known]
        if len(new):  # sorted and unknown: merged in place of a sort (one new array each, no argsort)
            at = pos[~known]
            self._remap_keys = np.insert(self._remap_keys, at, new)
            self._remap_vals = np.insert(self._remap_vals, at, np.arange(self._next_code, self._next_code + len(new)))
            self._next_code += len(new)
        return self._remap_vals[np.searchsorted(self._remap_keys, ids)]

    def _segment(self, length: np.ndarray, off: np.ndarray, ids: np.ndarray) -> None:
        nreq = len(length)
        self._n += nreq
        self._prompt += int(length.sum())
        k = len(ids)
        if k == 0:
            return
        B = self.block_tokens
        req = np.repeat(np.arange(nreq, dtype=np.int64), np.diff(off))
        pos = np.arange(k, dtype=np.int64) - off[req]  # 0-based block index in its request
        L = length[req]
        delta = np.minimum((pos + 1) * B, L) - np.minimum(pos * B, L)
        self._all_tokens += int(delta.sum())
        if self.sample_rate < 1.0:
            keep = spatial_hash24(ids) < np.uint64(int(self.sample_rate * (1 << 24)))
            ids, req, delta = ids[keep], req[keep], delta[keep]
        self._follow(ids, req, delta)

    def _follow(self, ids: np.ndarray, req: np.ndarray, delta: np.ndarray) -> None:
        """The followed accesses of whole requests, in order: ``ids``, their request
        (non-decreasing, below 2^22) and their tokens ``delta`` (every access, or the
        sampled ones under SHARDS)."""
        k = len(ids)
        if k == 0:
            return
        codes = self._codes(ids)
        top = int(codes.max()) + 1
        if top > len(self._last):
            grown = np.full(max(top, 2 * len(self._last)), -1, dtype=np.int64)
            grown[: len(self._last)] = self._last
            self._last = grown
        a = self._t
        t = a + np.arange(k, dtype=np.int64)
        # previous touch of each access: inside the segment, or the block's last touch before it
        order = np.argsort(codes, kind="stable")
        sc = codes[order]
        same = sc[1:] == sc[:-1]
        prev = self._last[codes].copy()
        prev[order[1:][same]] = t[order[:-1][same]]
        last_in_seg = np.ones(k, dtype=bool)
        last_in_seg[order[:-1][same]] = False
        # D(t) = t - p - #{v < t : prev(v) > p}   (module docstring)
        seen = prev >= 0
        before = seen & (prev < a)
        g1 = np.zeros(k, dtype=np.int64)
        pb = prev[before]
        live_after = len(self._live) - np.searchsorted(self._live, pb, side="right")
        g1[before] = (a - 1 - pb) - live_after
        g2 = count_greater_before(prev)
        if self.sample_rate < 1.0:
            self._sampled_tokens += int(np.rint(delta / self.sample_rate).sum())
        d = np.full(k, _NEVER, dtype=np.int64)
        d[seen] = (t - prev - g1 - g2)[seen]
        if self.sample_rate < 1.0:
            d[seen] = np.ceil(d[seen] / self.sample_rate).astype(np.int64)
            d = np.minimum(d, _NEVER)
        # running maximum within each request
        m = np.maximum.accumulate((req << _SHIFT) | d) & _NEVER
        hit = m < _NEVER
        mh, dh = m[hit], delta[hit]
        if len(mh):
            top_m = int(mh.max()) + 1
            if top_m > len(self._hist):
                grown = np.zeros(max(top_m, 2 * len(self._hist)), dtype=np.int64)
                grown[: len(self._hist)] = self._hist
                self._hist = grown
            if self.sample_rate < 1.0:
                w = np.rint(dh / self.sample_rate).astype(np.int64)
                np.add.at(self._hist, mh, w)
            else:
                np.add.at(self._hist, mh, dh)
        # live marks: drop the re-touched ones, add this segment's last touches
        gone = np.sort(pb)
        if len(gone):
            keep = np.ones(len(self._live), dtype=bool)
            keep[np.searchsorted(self._live, gone)] = False
            self._live = self._live[keep]
        self._live = np.concatenate([self._live, t[last_in_seg]])
        self._last[codes[last_in_seg]] = t[last_in_seg]
        self._t += k

    def result(self) -> LruCurve:
        """The curve so far."""
        hist = self._hist.copy()
        if self.sample_rate < 1.0 and len(hist) > 1:
            # SHARDS_adj (Waldspurger et al. 2015, section 4.3): the difference between the
            # expected and the sampled weight goes to the first bucket
            hist[1] += self._all_tokens - self._sampled_tokens
        top = int(np.flatnonzero(hist)[-1]) + 1 if np.any(hist) else 1
        hist = hist[:top]
        return LruCurve(self.block_tokens, self._n, self._prompt, hist, int(hist.sum()), len(self._live),
                        self.sample_rate, self._t)  # fmt: skip
