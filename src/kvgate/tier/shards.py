"""SHARDS (``tier --sample-rate R``) in numpy, so that a sampled run holds what it follows
and little else: no numba (its import and its compiled functions are ~110 MiB resident,
more than the followed state of 10^7 requests at R = 1%).

Each batch of requests is filtered as it comes: the spatial hash of every id
(:func:`kvgate.tier.stack.spatial_hash24`, the same as the compiled kernel's) picks the
followed accesses; their tokens (block ``j`` of a request of ``L`` tokens:
``min((j + 1)·B, L) − min(j·B, L)``) and requests are kept, and every request's tokens
``min(blocks·B, L)`` are added to the whole (the SHARDS_adj term). The followed accesses
go to :class:`kvgate.tier.stack.LruCurveBuilder`'s exact pass in chunks of
:data:`CHUNK` (their requests renumbered densely inside the chunk), so its sorted-array
intern and its segment arithmetic run a few dozen times, not once a batch. The curve is
the one the compiled kernel gives at the same rate, to the token (tested).
"""

from __future__ import annotations

import numpy as np

from kvgate.tier.curve import LruCurve, LruCurveBuilder, spatial_hash24

CHUNK = 1 << 16  # followed accesses handed to the exact pass at once (its temporaries: ~100 B each)


class SampledCurveBuilder:
    """:class:`~kvgate.tier.stack.LruCurveBuilder`'s interface (``add``, ``result``) for
    a SHARDS rate ``sample_rate`` < 1 (module docstring)."""

    def __init__(self, block_tokens: int, sample_rate: float) -> None:
        if not 0.0 < sample_rate < 1.0:
            raise ValueError(f"sample_rate must be in (0, 1), got {sample_rate}")
        self.block_tokens = block_tokens
        self.sample_rate = sample_rate
        self._thr = np.uint64(int(sample_rate * (1 << 24)))
        self._inner = LruCurveBuilder(block_tokens, sample_rate)
        self._ids: list[np.ndarray] = []
        self._req: list[np.ndarray] = []
        self._delta: list[np.ndarray] = []
        self._held = 0
        self._requests = 0
        self._prompt = 0

    def add(self, input_length: np.ndarray, offsets: np.ndarray, ids: np.ndarray) -> None:
        """Requests ``input_length[i]`` with ids ``ids[offsets[i] - offsets[0]: ...]``."""
        length = np.asarray(input_length, dtype=np.int64)
        off = np.asarray(offsets, dtype=np.int64) - int(offsets[0])
        ids = np.asarray(ids, dtype=np.int64)
        B = self.block_tokens
        self._inner._all_tokens += int(np.minimum(np.diff(off) * B, length).sum())
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
        dense = np.zeros(len(req), dtype=np.int64)  # requests 0, 1, 2, ... inside the chunk
        np.cumsum(req[1:] != req[:-1], out=dense[1:])
        self._inner._follow(ids, dense, delta)

    def result(self) -> LruCurve:
        """The curve so far (:class:`~kvgate.tier.stack.LruCurve`)."""
        self._flush()
        inner = self._inner
        inner._n, inner._prompt = self._requests, self._prompt
        return inner.result()
