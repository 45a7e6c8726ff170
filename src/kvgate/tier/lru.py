"""The plain LRU prefix cache, simulated at one capacity, word for word.

The reference rule (:mod:`kvgate.tier.stack` gives every capacity in one pass; this is
the slow, obviously-right check): requests in file order; a request's hit is the
longest leading run of its hash ids present in the cache, counted as
``min(run × block_tokens, input_length)`` tokens; then each of its hash ids is touched
in order: a present one becomes most recent, an absent one is inserted as most recent,
and the least recent is evicted while the cache holds more than C blocks.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from kvgate.tier.traces import HashedTrace


def simulate_lru(trace: HashedTrace, capacity_blocks: int | None) -> tuple[int, np.ndarray]:
    """Replay ``trace`` through an LRU of ``capacity_blocks`` trace blocks (``None``:
    unbounded).

    Returns:
        ``(hit_tokens, per_request)``: the total and an int64 ``[n]`` array of each
        request's hit tokens.
    """
    cache: OrderedDict[int, None] = OrderedDict()
    B = trace.block_tokens
    per = np.zeros(trace.n_requests, dtype=np.int64)
    ids_all = trace.ids.tolist()
    off = trace.offsets.tolist()
    for i in range(trace.n_requests):
        ids = ids_all[off[i] : off[i + 1]]
        run = 0
        for h in ids:
            if h not in cache:
                break
            run += 1
        per[i] = min(run * B, int(trace.input_length[i]))
        for h in ids:
            if h in cache:
                cache.move_to_end(h)
            else:
                cache[h] = None
                if capacity_blocks is not None:
                    while len(cache) > capacity_blocks:
                        cache.popitem(last=False)
    return int(per.sum()), per
