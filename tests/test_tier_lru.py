"""The plain LRU prefix cache (kvgate.tier.lru) and its one-pass curve (kvgate.tier.stack):
hand-worked traces, the brute-force simulator against the stack-distance curve on random
traces, and the shared Mooncake trace."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvgate.geometry import KVGeometry
from kvgate.model import load_model
from kvgate.tier.lru import simulate_lru
from kvgate.tier.stack import count_greater_before, lru_curve
from kvgate.tier.stream import load_hashed_trace
from kvgate.tier.traces import HashedTrace

GIB, TIB = 2**30, 2**40


def test_hand_worked_small_trace():
    # block 4 tokens. r0 [1,2,3] L=11; r1 [1,2,9] L=12; r2 [1,5] L=8; r3 [1,2,3] L=10.
    # unbounded: r0 0; r1 run 2 -> 8; r2 run 1 -> 4; r3 run 3 -> min(12, 10) = 10. Total 22.
    # C = 3: after r0 the stack (most recent last) is 1 2 3; r1 hits 1,2 (8), touches 1 2 9 -> 1 2 9 (3 evicted);
    #   r2 hits 1 (4), touches 1 5 -> 2 9 1 5 -> evict 2 -> 9 1 5; r3: 1 present, 2 absent -> run 1 (4). Total 16.
    # C = 4: as C = 3 but r2 leaves 2 9 1 5 -> r3 runs 1 2 (8). Total 20; C = 5 keeps all -> 22.
    # C = 2: r0 leaves 2 3; r1: 1 absent -> 0, leaves 2 9 ... touches 1 2 9 -> [1 2] -> [2 9]; r2: 0, leaves 1 5;
    #   r3: 1 present, 2 absent -> 4. Total 4.
    # C = 1: every request finds only its predecessor's last block, never a first block -> 0.
    t = HashedTrace.from_lists([(11, [1, 2, 3]), (12, [1, 2, 9]), (8, [1, 5]), (10, [1, 2, 3])], 4)
    assert simulate_lru(t, None)[1].tolist() == [0, 8, 4, 10]
    assert [simulate_lru(t, c)[0] for c in (1, 2, 3)] == [0, 4, 16]
    curve = lru_curve(t)
    assert curve.unbounded_hit_tokens == 22
    assert [curve.hit_tokens(c) for c in (0, 1, 2, 3, 4, 5, 100)] == [0, 0, 4, 16, 20, 22, 22]
    assert curve.prompt_tokens == 41
    caps, hits = curve.changes()
    assert caps.tolist() == [2, 3, 4, 5] and hits.tolist() == [4, 16, 20, 22]
    assert simulate_lru(t, 4)[0] == 20 and simulate_lru(t, 5)[0] == 22


def test_hit_is_capped_by_input_length_and_duplicates():
    # a request whose blocks cover more than its input: hit counts at most input_length;
    # an id repeated inside a request is touched twice.
    t = HashedTrace.from_lists([(5, [7, 7]), (3, [7, 7]), (9, [7, 8, 7])], 4)
    # r1: run 2 -> min(8, 3) = 3; r2: 7 present, 8 absent -> 4
    assert simulate_lru(t, None)[1].tolist() == [0, 3, 4]
    assert lru_curve(t).unbounded_hit_tokens == 7
    assert lru_curve(t).hit_tokens(1) == simulate_lru(t, 1)[0] == 7


@given(st.lists(st.integers(-1, 30), max_size=80))
def test_count_greater_before_brute_force(xs):
    x = np.array(xs, dtype=np.int64)
    assert count_greater_before(x).tolist() == [sum(1 for j in range(i) if xs[j] > xs[i]) for i in range(len(xs))]


_request = st.tuples(st.integers(0, 40), st.lists(st.integers(0, 14), max_size=7))


@settings(max_examples=150, deadline=None)
@given(st.lists(_request, min_size=1, max_size=30), st.integers(1, 9), st.integers(1, 25))
def test_one_pass_curve_equals_brute_force_at_every_capacity(reqs, block, segment):
    t = HashedTrace.from_lists(reqs, block)
    curve = lru_curve(t, segment_accesses=segment)
    for c in range(0, 18):
        assert curve.hit_tokens(c) == simulate_lru(t, c)[0], c
    assert curve.unbounded_hit_tokens == simulate_lru(t, None)[0]


def test_large_ids_are_remapped():
    big = 2**62
    reqs = [(8, [big + 1, big + 2]), (8, [big + 1, 3]), (8, [big + 1, big + 2])]
    t = HashedTrace.from_lists(reqs, 4)
    curve = lru_curve(t, segment_accesses=2)
    for c in range(5):
        assert curve.hit_tokens(c) == simulate_lru(t, c)[0]


def _mooncake(shared_dir):
    return load_hashed_trace(shared_dir / "traces" / "mooncake_conversation_trace.jsonl")


def test_mooncake_unbounded_hit_share(shared_dir):
    t = _mooncake(shared_dir)
    curve = lru_curve(t)
    # the trace's README: 54,098,411 of 144,793,823 prompt tokens (37.36%)
    assert (curve.n_requests, curve.prompt_tokens) == (12031, 144_793_823)
    assert curve.unbounded_hit_tokens == 54_098_411 == simulate_lru(t, None)[0]
    assert round(100 * curve.unbounded_hit_tokens / curve.prompt_tokens, 1) == 37.4


def test_mooncake_curve_at_one_gpu_pool_and_one_tib(shared_dir):
    t = _mooncake(shared_dir)
    curve = lru_curve(t)
    bpt = KVGeometry(load_model("llama-3.1-8b"), "bf16").bytes_per_token()
    assert bpt == 131072  # 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B
    block_bytes = 512 * bpt
    for gib in (12, 64):
        cap = gib * GIB // block_bytes  # 192 and 1024 blocks of 64 MiB
        hit = curve.hit_tokens(cap)
        assert hit == simulate_lru(t, cap)[0]
        assert 0.04 <= hit / t.prompt_tokens <= 0.05, gib
    cap = TIB // block_bytes  # 16384 blocks
    hit = curve.hit_tokens(cap)
    assert hit == simulate_lru(t, cap)[0]
    assert round(100 * hit / t.prompt_tokens) == 27


def test_shards_sample_tracks_the_exact_curve(shared_dir):
    t = _mooncake(shared_dir)
    exact = lru_curve(t)
    assert lru_curve(t, sample_rate=1.0).hist.tolist() == exact.hist.tolist()
    est = lru_curve(t, sample_rate=0.1)
    caps = [192, 1024, 4096, 16384, 65536]
    err = np.abs(est.at(caps) - exact.at(caps)) / t.prompt_tokens
    assert err.max() < 0.01, err  # SHARDS_adj at R = 0.1: 0.25 points here (benchmarks/RESULTS.md)
    with pytest.raises(ValueError):
        lru_curve(t, sample_rate=0.0)
