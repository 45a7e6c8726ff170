"""SHARDS in numpy (kvgate.tier.shards): the same curve as the exact pass's numpy builder
(kvgate.tier.curve.LruCurveBuilder, a separate implementation of the same rule) at every
rate, through the in-place merge of new ids, the renumbering of the times and the widening
of the times to int64; what it holds per followed block; the lean read it is fed by."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import kvgate.tier.shards as shards
import kvgate.tier.stream as ts
from kvgate.tier.curve import LruCurveBuilder
from kvgate.tier.stack import curve_builder
from kvgate.tier.stream import TraceStream
from kvgate.tier.traces import HashedTrace, synthetic_hashed

sys.path.insert(0, str(Path(__file__).parent))
from _hashed_traces import hashed_traces  # noqa: E402

SPLITS = ((0, 1), (1, 2500), (2500, 2501), (2501, 6000))


def _scatter(ids: np.ndarray) -> np.ndarray:
    """The ids mapped to 62-bit values in no order: new ids land inside the followed set."""
    return ((ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(12345)) >> np.uint64(2)).astype(
        np.int64)


def _fed(b, t: HashedTrace, splits=SPLITS):
    for lo, hi in splits:
        hi = min(hi, t.n_requests)
        b.add(t.input_length[lo:hi], t.offsets[lo : hi + 1], t.ids[t.offsets[lo] : t.offsets[hi]])
    return b.result()


def _reference(t: HashedTrace, rate: float):
    b = LruCurveBuilder(t.block_tokens, rate)
    b.add(t.input_length, t.offsets, t.ids)
    return b.result()


def _same(a, b) -> None:
    assert np.array_equal(a.hist, b.hist) and a.unbounded_hit_tokens > 0
    assert (a.distinct_blocks, a.accesses, a.n_requests, a.prompt_tokens, a.sample_rate) == \
        (b.distinct_blocks, b.accesses, b.n_requests, b.prompt_tokens, b.sample_rate)


@pytest.mark.parametrize("rate", [0.5, 0.1, 0.02])
@pytest.mark.parametrize("chunk, move", [(1 << 17, 1 << 16), (50, 1 << 16), (50, 3)])
def test_sampled_curve_equals_the_numpy_exact_pass(rate, chunk, move, monkeypatch):
    monkeypatch.setattr(shards, "CHUNK", chunk)
    monkeypatch.setattr(shards, "_MOVE", move)  # the merge moves the followed ids a few at a time
    t = synthetic_hashed(6000, seed=5, mean_blocks=7)
    for tr in (t, HashedTrace(t.input_length - 100, t.offsets, _scatter(t.ids), t.block_tokens)):
        a = curve_builder(512, rate)
        assert isinstance(a, shards.SampledCurveBuilder)
        _same(_fed(a, tr), _reference(tr, rate))


@pytest.mark.parametrize("rate", [0.5, 0.1])
def test_renumbered_times_keep_the_curve(rate, monkeypatch):
    monkeypatch.setattr(shards, "CHUNK", 40)
    monkeypatch.setattr(shards, "COMPACT_FACTOR", 1)
    monkeypatch.setattr(shards, "COMPACT_MIN", 1)  # every chunk
    t = synthetic_hashed(6000, seed=9, mean_blocks=7)
    b = shards.SampledCurveBuilder(512, rate)
    seen: list[int] = []
    compact = b._compact

    def counting() -> None:
        seen.append(b._t)
        compact()
        assert b._t == b._nb  # the times are the ranks of the last touches

    monkeypatch.setattr(b, "_compact", counting)
    _same(_fed(b, t, [(lo, lo + 25) for lo in range(0, 6000, 25)]), _reference(t, rate))
    assert len(seen) > 20


def test_times_widen_to_int64_past_int32(monkeypatch):
    monkeypatch.setattr(shards, "CHUNK", 64)
    monkeypatch.setattr(shards, "_INT32_TIMES", 3000)  # as if 2^31 - 1
    t = synthetic_hashed(6000, seed=3, mean_blocks=7)
    b = shards.SampledCurveBuilder(512, 0.5)
    _same(_fed(b, t), _reference(t, 0.5))
    assert b._last.dtype == np.int64 and b._accesses > 3000


def _small_traces():
    return hashed_traces(pool=60, requests=(5, 120), min_ids=0, max_ids=9, keep_last_token=False)


@seed(20261205)
@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # the same patch each time
@given(_small_traces(), st.sampled_from([0.9, 0.5, 0.2]), st.booleans())
def test_sampled_curve_equals_the_exact_pass_on_generated_traces(monkeypatch, t, rate, scattered):
    # a chunk of a few accesses, renumbered times after most of them, ids merged a few at a time
    monkeypatch.setattr(shards, "CHUNK", 5)
    monkeypatch.setattr(shards, "COMPACT_FACTOR", 2)
    monkeypatch.setattr(shards, "COMPACT_MIN", 8)
    monkeypatch.setattr(shards, "_MOVE", 2)
    if scattered:
        t = HashedTrace(t.input_length, t.offsets, _scatter(t.ids), t.block_tokens)
    b = shards.SampledCurveBuilder(t.block_tokens, rate)
    for i in range(t.n_requests):
        b.add(t.input_length[i : i + 1], t.offsets[i : i + 2], t.request_ids(i))
    ref = _reference(t, rate)
    got = b.result()
    assert np.array_equal(got.hist, ref.hist)
    assert (got.distinct_blocks, got.accesses) == (ref.distinct_blocks, ref.accesses)


def test_what_is_held_per_followed_block():
    # 200,000 fresh blocks at R = 0.5: ~100,000 followed; their ids (8 B), last touches (4 B),
    # 1/16 more room, the bitmap of the times and the histogram of sampled distances
    t = synthetic_hashed(20_000, seed=1, mean_blocks=12, share=0.2)
    b = shards.SampledCurveBuilder(512, 0.5)
    _fed(b, t, ((0, 20_000),))
    nb = b._nb
    assert nb > 50_000
    assert b._last.dtype == np.int32
    assert b._keys.nbytes + b._last.nbytes <= 12 * ((1 + 1 / 16) * nb + 1024)
    assert b._marks.nbytes <= 2 * (b._accesses / 8 + 8) + 8 * 1024
    assert b._hist.nbytes <= 8 * max(2 * len(np.trim_zeros(b._hist, "b")), 1024)


def test_lean_read_hands_on_what_the_full_read_does(tmp_path, monkeypatch):
    syn = synthetic_hashed(3000, seed=4, mean_blocks=6)
    rows = [{"timestamp_ms": 1000 * i, "input_length": int(syn.input_length[i]), "hash_ids": syn.request_ids(i).tolist()}
            for i in range(syn.n_requests)]  # fmt: skip
    rows[2000]["hash_ids"] = list(range(10**6, 10**6 + 12_000))  # a line over the lean 64 KiB block
    rows[2000]["input_length"] = 12_000 * 512
    rows[100]["timestamp_ms"] = 5  # unsorted
    rows[7]["input_length"] = 10 * 512  # fewer blocks than the length needs
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert p.stat().st_size > 2 * ts.LEAN_BLOCK_BYTES
    out = []
    for lean in (False, True):
        got: list[tuple[list[int], list[int]]] = []

        def keep(le, off, ids, got=got):
            got.append((le.tolist(), ids.tolist()))

        t = TraceStream(p, block_tokens=512).read(on_batch=keep, keep_ids=False, lean=lean)
        lens = [x for g in got for x in g[0]]
        ids = [x for g in got for x in g[1]]
        out.append((lens, ids, t.n_requests, t.prompt_tokens, t.warnings))
    assert out[0] == out[1] and len(out[0][2:][2]) == 2

    def no_thread(*a, **k):
        raise AssertionError("a lean read starts no read-ahead thread")

    monkeypatch.setattr(ts, "_prefetched", no_thread)
    TraceStream(p, block_tokens=512).read(on_batch=lambda *a: None, keep_ids=False, lean=True)
