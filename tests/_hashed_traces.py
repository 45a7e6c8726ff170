"""A hypothesis strategy for small hashed traces (tests/test_tier_shards.py and
tests/test_tier_stream.py): a block size of 1 or 16, requests of a few block ids from a small
pool, each request's tokens its blocks less part of the last one."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kvgate.tier.traces import HashedTrace


@st.composite
def hashed_traces(draw: Any, *, pool: int, requests: tuple[int, int], min_ids: int, max_ids: int,
                  keep_last_token: bool) -> HashedTrace:
    """``pool``: the largest block id; ``requests``: how many, at least/at most; each request
    ``min_ids`` … ``max_ids`` ids; ``keep_last_token``: a request's last block keeps a token
    (else it may lose the whole block, and an empty request has 0 tokens)."""
    block = draw(st.sampled_from([1, 16]))
    top = draw(st.integers(1, pool))
    reqs = []
    for _ in range(draw(st.integers(*requests))):
        ids = draw(st.lists(st.integers(0, top), min_size=min_ids, max_size=max_ids))
        short = draw(st.integers(0, block - 1 if keep_last_token else block))
        reqs.append((max(len(ids) * block - short, 0), ids))
    return HashedTrace.from_lists(reqs, block)
