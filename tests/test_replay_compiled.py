"""The compiled replay (kvgate.replay.compiled) against the numpy path it replaces: the same
schedules, the same figures, the same plotted series, to the bit, on random traces that
queue, reject, hold nothing (output 0), use odd block sizes and span 10^14 steps."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvgate.replay import compiled, fastpath
from kvgate.replay.allocators import schedule_budget, schedule_contiguous
from kvgate.replay.simulate import replay, series
from kvgate.replay.timeline import LazyTimelines
from kvgate.replay.trace import Trace, synthetic_lognormal

pytestmark = pytest.mark.skipif(not compiled.HAVE_NUMBA, reason="numba does not import here")


@pytest.fixture(autouse=True)
def _compiled_from_one_request(monkeypatch):
    monkeypatch.setattr(fastpath, "MIN_REQUESTS", 1)  # (the tests' traces are small)


def _both(monkeypatch, fn):
    out = []
    for use in (True, False):
        monkeypatch.setattr(fastpath, "ENABLED", use)
        out.append(fn())
    return out


def _random_trace(seed: int, n: int, *, zero_share: float = 0.1, span: float = 0.0) -> Trace:
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(0.05, n) * (rng.random(n) < 0.7)  # bursts: many arrivals at one step
    arrival = np.cumsum(gaps) - gaps[0]
    if span:
        arrival[n // 2 :] += span
    prompt = rng.integers(0, 300, n)
    output = rng.integers(0, 120, n) * (rng.random(n) >= zero_share)
    return Trace(arrival, prompt, output, source=f"random {seed}")


CASES = [
    # (trace seed, n, block size, slots, budget in slots, rate)
    (1, 3000, 16, 4, None, 50.0),
    (2, 3000, 16, None, 6, 20.0),
    (3, 2000, 1, 3, 5, 10.0),
    (4, 2000, 7, 8, None, 50.0),
    (5, 2000, 64, 2, 40, 50.0),
    (6, 500, 1000, 1, 3, 5.0),
]


@pytest.mark.parametrize("seed,n,B,slots,budget_slots,rate", CASES)
def test_compiled_replay_equals_the_numpy_path(monkeypatch, seed, n, B, slots, budget_slots, rate):
    t = _random_trace(seed, n)
    L = 512
    pp = 10
    S = L * pp + 37  # a fixed part per sequence, as a window-capped layer gives
    kw = dict(slot_bytes=S, block_bytes=B * pp, max_seq=L, block_size=B, decode_rate=rate, slots=slots)
    if budget_slots is not None:
        kw["budget_bytes"] = budget_slots * S

    def run():
        r = replay(t, **kw)
        ser = {f"{a}/{pts}": series(r, a, max_points=pts) for a in ("contiguous", "paged") for pts in (50, 10**7)}
        return bool(r.walks), json.dumps([r.to_dict(), ser], sort_keys=True)

    (walked, fast), (walked_np, slow) = _both(monkeypatch, run)
    assert walked and not walked_np
    assert fast == slow


def test_compiled_replay_equals_numpy_on_a_long_span_and_queues(monkeypatch):
    t = _random_trace(11, 1500, span=2e12)  # arrival steps near 10^14: int64 step arithmetic
    kw = dict(slot_bytes=5120, block_bytes=160, max_seq=512, block_size=16, decode_rate=50.0, slots=3)
    a, b = _both(monkeypatch, lambda: json.dumps(replay(t, **kw).to_dict(), sort_keys=True))
    assert a == b
    assert json.loads(a)["contiguous"]["queue_delay_max_s"] > 0


def test_compiled_walk_is_refused_when_bytes_could_pass_int64(monkeypatch):
    """Byte figures that could reach 2^62 go to the numpy path (Python ints there)."""
    t = _random_trace(12, 200)
    big = 2**40
    r = replay(t, slot_bytes=64 * big, block_bytes=16 * big, max_seq=64, block_size=16, budget_bytes=2**61)
    assert r.walks == {}
    monkeypatch.setattr(fastpath, "ENABLED", False)
    assert json.dumps(r.to_dict()) == json.dumps(
        replay(t, slot_bytes=64 * big, block_bytes=16 * big, max_seq=64, block_size=16, budget_bytes=2**61).to_dict()
    )


@pytest.mark.parametrize("slots", [1, 3, 50, 10**12])
def test_compiled_contiguous_schedule_equals_the_heap_loop(monkeypatch, slots):
    rng = np.random.default_rng(slots % 1000)
    arrive = np.sort(rng.integers(0, 5000, 4000))
    service = rng.integers(0, 60, 4000)
    a, b = _both(monkeypatch, lambda: schedule_contiguous(arrive, service, slots))
    assert a.tolist() == b.tolist()
    assert np.all(a >= arrive) and np.all(np.diff(a) >= 0)


@pytest.mark.parametrize("budget", [40, 100, 1000])
def test_compiled_budget_schedule_equals_the_heap_loop(monkeypatch, budget):
    rng = np.random.default_rng(budget)
    arrive = np.sort(rng.integers(0, 3000, 4000))
    service = rng.integers(0, 40, 4000)
    cost = rng.integers(1, 40, 4000)  # many equal finish steps with different costs: tuple order
    a, b = _both(monkeypatch, lambda: schedule_budget(arrive, service, cost, budget))
    assert a.tolist() == b.tolist()


def test_replay_keeps_no_timeline_until_one_is_read():
    t = synthetic_lognormal(5000, prompt_median=300, output_median=60, sigma=1.0, rate=40.0, seed=5)
    r = replay(t, slot_bytes=2048 * 16, block_bytes=16 * 16, max_seq=2048, block_size=16, slots=4)
    assert isinstance(r.timelines, LazyTimelines)
    assert not r.timelines.is_built("contiguous") and not r.timelines.is_built("paged")
    series(r, "paged", max_points=100)  # binned: from the compiled walk, still no timeline
    assert not r.timelines.is_built("paged")
    assert len(r.timelines["paged"]) == int(r.walks["paged"][compiled.N_EPOCHS])
    assert r.timelines.is_built("paged")


def test_small_traces_take_the_numpy_path_without_numba(monkeypatch):
    """Below fastpath.MIN_REQUESTS the replay neither walks compiled nor needs numba."""
    monkeypatch.setattr(fastpath, "MIN_REQUESTS", 10**6)
    t = _random_trace(13, 300)
    r = replay(t, slot_bytes=5120, block_bytes=160, max_seq=512, block_size=16, slots=3)
    assert r.walks == {}
    assert not fastpath.use(10**6 - 1) and fastpath.use(10**6)


def test_compiled_replay_matches_the_brute_force_step_simulator():
    """tests/test_replay.py's property (every figure against a step-by-step simulation),
    run here with the compiled path on (this module's fixture: from one request on)."""
    from tests.test_replay import test_replay_matches_brute_force

    assert fastpath.use(1)
    test_replay_matches_brute_force()
