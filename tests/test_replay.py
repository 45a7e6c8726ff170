"""Trace replay (kvgate.replay.simulate): hand-computed traces, invariants against a brute-force
step simulator, both Azure traces against their own columns, the command and the plot."""

from __future__ import annotations

import csv
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvgate.cli import main
from kvgate.replay.simulate import ReplayError, measured_paging_reclaim, replay, series
from kvgate.replay.trace import Trace, load_trace, synthetic_fixed, synthetic_lognormal

# A toy geometry: 10 bytes per position, L = 64, blocks of 16 -> S = 640 B, block = 160 B.
PP, L, B = 10, 64, 16
S, BB = L * PP, B * PP


def trace(rows):
    """rows: (arrival s, prompt, output)."""
    a, p, o = zip(*rows)
    return Trace(np.array(a, dtype=float), np.array(p), np.array(o), source="hand")


def run(rows, **kw):
    args = dict(slot_bytes=S, block_bytes=BB, max_seq=L, block_size=B, decode_rate=1.0)
    args.update(kw)
    return replay(trace(rows), **args)


def epochs(res, name):
    tl = res.timelines[name]
    return [
        (
            int(tl.start[j]),
            int(tl.end[j]),
            int(tl.live[j]),
            int(tl.positions_first[j]),
            int(tl.positions_last[j]),
            int(tl.blocks_first[j]),
            int(tl.blocks_last[j]),
        )
        for j in range(len(tl))
    ]


# ----------------------------------------------------------------- hand-computed traces


def test_single_request():
    # p=10, o=5 at t=0, 1 token/s: steps 0..4 hold 11..15 positions (one block), done at 5 s.
    r = run([(0.0, 10, 5)], slots=1)
    assert epochs(r, "contiguous") == [(0, 5, 1, 11, 15, 1, 1)]
    c, p, s = r.contiguous, r.paged, r.summary
    assert (c.peak_reserved_bytes, c.written_at_peak_bytes, c.reclaim_at_peak_bytes) == (640, 150, 490)
    assert (p.peak_reserved_bytes, p.written_at_peak_bytes, p.reclaim_at_peak_bytes) == (160, 150, 10)
    assert c.max_concurrency == p.max_concurrency == 1
    assert c.queue_delay_p50_s == c.queue_delay_p99_s == 0.0
    assert c.end_time_s == p.end_time_s == 5.0
    assert s["bound_bytes"] == 640
    assert s["paged_footprint_peak_bytes"] == 160
    assert s["measured_reclaim_bytes"] == 480
    assert s["unwritten_at_peak_bytes"] == 490
    assert s["ratio"] == 0.75
    # time averages over steps 0..4: written (11+...+15)·10/5 = 130 B, reserved 640 B.
    assert c.mean_written_bytes == 130 and c.mean_reserved_bytes == 640
    assert p.mean_written_bytes == 130 and p.mean_reserved_bytes == 160
    assert r.inputs["budget_bytes"] == 640 and r.inputs["slots"] == 1


def test_two_overlapping_requests():
    # A: t=0 p=10 o=10 holds 11+t (t=0..9); B: t=3 p=20 o=4 holds 18+t (t=3..6).
    # Blocks of 16: A has 1 block until t=5 (16 positions), 2 from t=6; B has 2 throughout.
    r = run([(0.0, 10, 10), (3.0, 20, 4)], slots=2)
    want = [(0, 3, 1, 11, 13, 1, 1), (3, 7, 2, 35, 41, 3, 4), (7, 10, 1, 18, 20, 2, 2)]
    assert epochs(r, "contiguous") == want
    assert epochs(r, "paged") == want  # paged: 2 + 2 blocks reserved logically, fits 1280 B
    c, p, s = r.contiguous, r.paged, r.summary
    assert c.peak_reserved_bytes == 1280 and c.peak_time_s == 3.0
    assert c.written_at_peak_bytes == 410 and c.reclaim_at_peak_bytes == 870
    assert p.peak_reserved_bytes == 640 and p.peak_time_s == 6.0
    assert p.written_at_peak_bytes == 410 and p.reclaim_at_peak_bytes == 230
    assert s["measured_reclaim_bytes"] == 1280 - 640
    assert s["ratio"] == 0.5
    assert c.max_concurrency == p.max_concurrency == 2
    # Block·steps: A holds 11..20 positions = 1·6 + 2·4 blocks, B 21..24 = 2·4; 22 over 10 s.
    assert p.mean_reserved_bytes == 22 * 160 // 10
    assert c.mean_reserved_bytes == (10 + 4) * 640 // 10


def test_one_slot_makes_the_second_wait_but_not_in_blocks():
    # Same two requests, budget one slot (640 B): contiguous admits B when A ends at 10 s;
    # paged reserves 2 blocks each (320 B + 320 B <= 640 B) and admits both at once.
    r = run([(0.0, 10, 10), (3.0, 20, 4)], slots=1)
    c, p = r.contiguous, r.paged
    assert epochs(r, "contiguous") == [(0, 10, 1, 11, 20, 1, 2), (10, 14, 1, 21, 24, 2, 2)]
    assert c.max_concurrency == 1 and p.max_concurrency == 2
    assert c.queue_delay_p50_s == 3.5  # delays (0, 7) s: median 3.5
    assert c.queue_delay_p99_s == pytest.approx(6.93)
    assert c.queue_delay_max_s == 7.0
    assert p.queue_delay_max_s == 0.0
    assert c.end_time_s == 14.0 and p.end_time_s == 10.0


def test_request_longer_than_max_seq_is_rejected():
    r = run([(0.0, 60, 5), (1.0, 60, 4), (2.0, 64, 1)], slots=2)
    # 65 > 64 and 65 > 64 rejected; 64 = L fits.
    for a in (r.contiguous, r.paged):
        assert a.rejected_too_long == 2 and a.rejected == 2 and a.admitted == 1
    assert any("2 request(s) longer than max_seq 64" in w for w in r.warnings)
    assert r.contiguous.peak_written_bytes == 640  # the full slot, written to the last position
    assert r.summary["unwritten_at_peak_bytes"] == 0
    assert r.summary["measured_reclaim_bytes"] == 640 - 4 * 160  # 64 positions = 4 blocks = S


def test_block_boundary_exactly_hit():
    # 15 + 1 = 16 positions: one block, no fragmentation. 16 + 1 = 17: two blocks.
    r = run([(0.0, 15, 1)], slots=1)
    assert epochs(r, "paged") == [(0, 1, 1, 16, 16, 1, 1)]
    assert r.paged.peak_reserved_bytes == 160 == r.paged.written_at_peak_bytes
    assert r.paged.reclaim_at_peak_bytes == 0
    r = run([(0.0, 16, 1)], slots=1)
    assert epochs(r, "paged") == [(0, 1, 1, 17, 17, 2, 2)]
    assert (r.paged.peak_reserved_bytes, r.paged.reclaim_at_peak_bytes) == (320, 150)
    # Empty prompt, 16 tokens: positions 1..16, the 16th exactly fills the first block.
    r = run([(0.0, 0, 16)], slots=1)
    assert epochs(r, "paged") == [(0, 16, 1, 1, 16, 1, 1)]
    assert r.paged.reclaim_at_peak_bytes == 0
    r = run([(0.0, 0, 17)], slots=1)
    assert epochs(r, "paged") == [(0, 17, 1, 1, 17, 1, 2)]


def test_budget_admits_exactly_k_slots():
    # Budget 3·S + S − 1 holds 3 slots. Five requests at t=0 (p=10, o=2): three run at
    # steps 0-1, two wait until step 2. Paged: 1 block each, 5·160 B fits, no waiting.
    budget = 3 * S + S - 1
    r = run([(0.0, 10, 2)] * 5, budget_bytes=budget)
    c, p = r.contiguous, r.paged
    assert r.inputs["slots"] == 3
    assert c.peak_reserved_bytes == 3 * S and c.max_concurrency == 3
    assert epochs(r, "contiguous") == [(0, 2, 3, 33, 36, 3, 3), (2, 4, 2, 22, 24, 2, 2)]
    assert c.queue_delay_p50_s == 0.0 and c.queue_delay_max_s == 2.0
    assert c.queue_delay_p99_s == pytest.approx(2.0)
    assert p.max_concurrency == 5 and p.queue_delay_max_s == 0.0
    assert p.peak_reserved_bytes == 5 * 160
    assert r.summary["bound_bytes"] == 3 * S
    # Asking for more slots than the budget holds caps them and says so.
    r = run([(0.0, 10, 2)] * 5, budget_bytes=budget, slots=5)
    assert r.inputs["slots"] == 3 and r.inputs["slots_asked"] == 5
    assert any("holds only 3 of the 5 slots" in w for w in r.warnings)


def test_paged_budget_blocks_fifo():
    # Budget 640 B = 4 blocks. A needs 3 blocks (p=40 o=2 -> 42 positions), B needs 2:
    # B waits until A finishes (step 2) although the free block count was 1.
    r = run([(0.0, 40, 2), (0.0, 20, 2)], budget_bytes=640)
    assert epochs(r, "paged") == [(0, 2, 1, 41, 42, 3, 3), (2, 4, 1, 21, 22, 2, 2)]
    assert r.paged.queue_delay_max_s == 2.0


def test_zero_output_request_holds_nothing():
    r = run([(0.0, 10, 0), (0.0, 10, 1)], slots=1)
    assert r.contiguous.admitted == 2
    assert epochs(r, "contiguous") == [(0, 1, 1, 11, 11, 1, 1)]


def test_decode_rate_and_speed_scale_time():
    # 2 tokens/s, speed 2: an arrival at 3 s comes at 1.5 s = step 3; 5 tokens take 2.5 s.
    r = run([(0.0, 1, 1), (3.0, 10, 5)], slots=1, decode_rate=2.0, speed=2.0)
    assert epochs(r, "contiguous") == [(0, 1, 1, 2, 2, 1, 1), (1, 3, 0, 0, 0, 0, 0), (3, 8, 1, 11, 15, 1, 1)]
    assert r.contiguous.end_time_s == 4.0
    # Alignment: 0.3 s at 10 tokens/s is step 3 exactly, not 4 (float 3.0000000000000004).
    r = run([(0.0, 1, 1), (0.3, 1, 1)], slots=1, decode_rate=10.0)
    assert [e[0] for e in epochs(r, "contiguous")] == [0, 1, 3]


def test_fixed_bytes_per_sequence():
    # S = 700 = 64·10 + 60 fixed (e.g. a window-capped layer): charged once per sequence.
    r = run([(0.0, 10, 5)], slot_bytes=700, slots=1)
    assert r.fixed_bytes == 60
    assert r.paged.peak_reserved_bytes == 60 + 160
    assert r.paged.written_at_peak_bytes == 60 + 150
    assert r.contiguous.reclaim_at_peak_bytes == 700 - 210
    assert r.summary["measured_reclaim_bytes"] == 700 - 220


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(slots=None, budget_bytes=None), "give a memory budget or a slot count"),
        (dict(budget_bytes=639), "holds no contiguous slot"),
        (dict(slots=1, block_bytes=161), "geometry is inconsistent"),
        (dict(slots=1, decode_rate=0.0), "decode rate must be a positive number"),
        (dict(slots=1, speed=float("nan")), "speed must be a positive number"),
        (dict(slots=0), "slots must be at least 1"),
        (dict(slots=1, block_size=0), "block size must be at least 1"),
    ],
)
def test_bad_parameters(kw, needle):
    with pytest.raises(ReplayError) as ei:
        run([(0.0, 1, 1)], **kw)
    assert needle in ei.value.message


def test_all_rejected_is_not_a_crash():
    r = run([(0.0, 100, 1)], slots=1)
    assert r.contiguous.admitted == 0 and r.contiguous.peak_reserved_bytes == 0
    assert r.contiguous.queue_delay_p50_s is None
    assert r.summary["measured_reclaim_bytes"] is None  # not available, never 0 (nothing held memory)
    assert series(r, "paged")["t_s"] == []


# ----------------------------------------------------------------- brute force, properties


def brute_force(rows, *, slot_bytes, block_bytes, max_seq, block_size, budget, slots, rate, speed):
    """Step-by-step reference: admissions and per-step (live, positions, blocks) by allocator."""
    arrive = [math.ceil(Fraction(a) / Fraction(speed) * Fraction(rate)) for a, _, _ in rows]
    reqs = [(t, p, o) for t, (_, p, o) in zip(arrive, rows) if p + o <= max_seq]
    fixed = slot_bytes - max_seq * block_bytes // block_size
    K = min(slots, budget // slot_bytes)

    def blocks(n):
        return -(-n // block_size)

    def simulate(cost, cap):
        admitted, live, i, t = [], [], 0, 0
        order = [j for j in range(len(reqs)) if cost(j) <= cap]
        while i < len(order):
            while i < len(order):
                live = [x for x in live if x[0] > t]  # a request with o = 0 is done at once
                j = order[i]
                if reqs[j][0] > t or sum(x[1] for x in live) + cost(j) > cap:
                    break
                live.append((t + reqs[j][2], cost(j)))
                admitted.append((t, reqs[j][1], reqs[j][2]))
                i += 1
            nxt = [x[0] for x in live if x[0] > t]
            if i < len(order) and reqs[order[i]][0] > t:
                nxt.append(reqs[order[i]][0])
            t = min(nxt) if nxt else t + 1
        return admitted

    sched = {
        "contiguous": simulate(lambda j: 1, K),
        "paged": simulate(lambda j: fixed + blocks(reqs[j][1] + reqs[j][2]) * block_bytes, budget),
    }
    steps = {}
    for name, adm in sched.items():
        per = {}
        end = max([s + o for s, _, o in adm], default=0)
        for t in range(end):
            live = [(p + t - s + 1) for s, p, o in adm if s <= t < s + o]
            per[t] = (len(live), sum(live), sum(blocks(w) for w in live))
        steps[name] = per
    return sched, steps, fixed, K


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 14))
    arrivals = sorted(draw(st.lists(st.integers(0, 120), min_size=n, max_size=n)))
    rows = [(a / 4, draw(st.integers(0, 40)), draw(st.integers(0, 25))) for a in arrivals]
    block_size = draw(st.sampled_from([1, 3, 16]))
    pp = draw(st.sampled_from([1, 7]))
    max_seq = draw(st.sampled_from([48, 64]))
    fixed = draw(st.sampled_from([0, 5]))
    slot_bytes = max_seq * pp + fixed
    slots = draw(st.integers(1, 4))
    budget = draw(st.integers(slot_bytes, 5 * slot_bytes))
    return dict(
        rows=rows,
        slot_bytes=slot_bytes,
        block_bytes=block_size * pp,
        max_seq=max_seq,
        block_size=block_size,
        budget=budget,
        slots=slots,
        rate=draw(st.sampled_from([1, 2])),
        speed=draw(st.sampled_from([1, 2])),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_replay_matches_brute_force(sc):
    res = replay(
        trace(sc["rows"]), slot_bytes=sc["slot_bytes"], block_bytes=sc["block_bytes"], max_seq=sc["max_seq"],
        budget_bytes=sc["budget"], slots=sc["slots"], block_size=sc["block_size"],
        speed=float(sc["speed"]), decode_rate=float(sc["rate"]),
    )  # fmt: skip
    sched, steps, fixed, K = brute_force(**sc)
    S_, bb, Bs = sc["slot_bytes"], sc["block_bytes"], sc["block_size"]
    for name in ("contiguous", "paged"):
        per = steps[name]
        tl = res.timelines[name]
        covered = set()
        for j in range(len(tl)):
            st0, en = int(tl.start[j]), int(tl.end[j])
            n = int(tl.live[j])
            assert per[st0] == (n, int(tl.positions_first[j]), int(tl.blocks_first[j]))
            assert per[en - 1] == (n, int(tl.positions_last[j]), int(tl.blocks_last[j]))
            covered.update(range(st0, en))
        # Steps outside every epoch hold nothing.
        assert all(per[t][0] == 0 for t in per if t not in covered)
        alloc = getattr(res, name)
        assert alloc.admitted == len(sched[name])
        if name == "contiguous":
            reserved = {t: v[0] * S_ for t, v in per.items()}
        else:
            reserved = {t: v[0] * fixed + v[2] * bb for t, v in per.items()}
        written = {t: v[0] * fixed + v[1] * bb // Bs for t, v in per.items()}
        assert alloc.peak_reserved_bytes == max(reserved.values(), default=0)
        assert alloc.peak_written_bytes == max(written.values(), default=0)
        assert alloc.max_concurrency == max((v[0] for v in per.values()), default=0)
        # Invariants at every step.
        for t, (n, pos, blk) in per.items():
            if name == "paged":
                assert written[t] <= reserved[t] < written[t] + n * bb or n == 0
                assert blk * Bs >= pos and blk * Bs < pos + n * Bs or n == 0
            else:
                assert n <= K
        if per:
            assert alloc.mean_reserved_bytes == sum(reserved.values()) // len(per)
            exact_written = sum(v[0] * fixed * Bs + v[1] * bb for v in per.values())
            assert alloc.mean_written_bytes == exact_written // (Bs * len(per))
        peaks = [t for t, v in reserved.items() if v == alloc.peak_reserved_bytes and per[t][0]]
        if peaks:
            assert alloc.written_at_peak_bytes == max(written[t] for t in peaks)
    # Summary: contiguous peak minus the block-rounded peak of the same schedule.
    as_paged = max((v[0] * fixed + v[2] * bb for v in steps["contiguous"].values()), default=0)
    assert res.summary["paged_footprint_peak_bytes"] == as_paged
    if res.contiguous.peak_reserved_bytes:
        assert res.summary["measured_reclaim_bytes"] == res.contiguous.peak_reserved_bytes - as_paged
    else:  # nothing ever held memory: not available, never 0
        assert res.summary["measured_reclaim_bytes"] is None
    assert res.summary["bound_bytes"] == K * S_


def test_invariants_on_a_large_synthetic_trace():
    t = synthetic_lognormal(20_000, prompt_median=600, output_median=150, sigma=1.0, rate=8.0, seed=5)
    S_, bb = 8192 * 1056 * 48, 16 * 1056 * 48
    res = replay(t, slot_bytes=S_, block_bytes=bb, max_seq=8192, slots=24, block_size=16, decode_rate=40.0)
    for name in ("contiguous", "paged"):
        tl = res.timelines[name]
        for which in ("first", "last"):
            pos = getattr(tl, f"positions_{which}")
            blk = getattr(tl, f"blocks_{which}")
            assert np.all(blk * 16 >= pos) and np.all(blk * 16 < pos + 16 * np.maximum(tl.live, 1))
            w, r = res.written_bytes(name, which), res.reserved_bytes(name, which)
            assert np.all(r >= w)
            if name == "paged":
                assert np.all(r < w + tl.live * bb + (tl.live == 0))
            else:
                assert np.all(r == tl.live * S_)
        assert np.all(tl.live <= (24 if name == "contiguous" else 10**9))
        assert np.all(tl.end > tl.start)
    assert res.contiguous.max_concurrency == 24


# ----------------------------------------------------------------- Azure traces


def _columns(path):
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [int(r["ContextTokens"]) for r in rows], [int(r["GeneratedTokens"]) for r in rows]


INT8 = 48 * 1056  # the write-up's mirror: 48 layers × (2·512 + 8·4) bytes per position


@pytest.mark.parametrize("name", ["code", "conv"])
@pytest.mark.parametrize("max_seq", [2048, 8192])
def test_azure_isolated_requests_against_columns(shared_dir, name, max_seq):
    """Slowed down (speed 1e-8) every request runs alone: the peaks are those of the
    longest admitted request, computed here from the CSV columns."""
    path = shared_dir / "traces" / f"AzureLLMInferenceTrace_{name}.csv"
    prompt, output = _columns(path)
    written = [p + o for p, o in zip(prompt, output)]
    too_long = sum(w > max_seq for w in written)
    w_max = max(w for w in written if w <= max_seq)
    S_ = max_seq * INT8
    res = replay(
        load_trace(path), slot_bytes=S_, block_bytes=16 * INT8, max_seq=max_seq, slots=1, speed=1e-8, decode_rate=50.0
    )
    c, p, s = res.contiguous, res.paged, res.summary
    assert c.rejected_too_long == p.rejected_too_long == too_long
    assert c.admitted == p.admitted == len(written) - too_long
    assert c.max_concurrency == p.max_concurrency == 1
    assert c.queue_delay_max_s == 0.0 and p.queue_delay_max_s == 0.0
    assert c.peak_written_bytes == w_max * INT8
    assert s["unwritten_at_peak_bytes"] == S_ - w_max * INT8
    blocks = -(-w_max // 16)
    assert p.peak_reserved_bytes == blocks * 16 * INT8
    assert p.reclaim_at_peak_bytes == (blocks * 16 - w_max) * INT8
    assert s["measured_reclaim_bytes"] == S_ - blocks * 16 * INT8
    assert s["bound_bytes"] == S_
    # The position-steps a request writes do not depend on when it runs.
    _assert_position_steps(res, prompt, output, max_seq)


def _assert_position_steps(res, prompt, output, max_seq):
    want_pos = sum(o * p + o * (o + 1) // 2 for p, o in zip(prompt, output) if p + o <= max_seq)
    want_seq = sum(o for p, o in zip(prompt, output) if p + o <= max_seq)
    for name in ("contiguous", "paged"):
        tl = res.timelines[name]
        length = tl.end - tl.start
        assert int(((tl.positions_first + tl.positions_last) * length).sum()) == 2 * want_pos
        assert int((tl.live * length).sum()) == want_seq


@pytest.mark.parametrize("name", ["code", "conv"])
def test_azure_real_time_8_slots(shared_dir, name):
    """At the trace's own pace with the write-up's 8 slots: counts and the schedule-free
    position-step totals match the columns; the measured reclaim stays under the bound."""
    path = shared_dir / "traces" / f"AzureLLMInferenceTrace_{name}.csv"
    prompt, output = _columns(path)
    max_seq = 8192
    S_ = max_seq * INT8
    res = replay(load_trace(path), slot_bytes=S_, block_bytes=16 * INT8, max_seq=max_seq, slots=8)
    too_long = sum(p + o > max_seq for p, o in zip(prompt, output))
    assert res.contiguous.rejected_too_long == too_long == (1 if name == "conv" else 0)
    assert res.contiguous.admitted == len(prompt) - too_long
    assert res.contiguous.max_concurrency == 8
    assert res.contiguous.peak_reserved_bytes == 8 * S_ == res.summary["bound_bytes"]
    assert 0 < res.summary["measured_reclaim_bytes"] <= res.summary["unwritten_at_peak_bytes"] < 8 * S_
    # At least the mean request's unwritten share of one slot is reclaimable per slot on
    # average, and at most the shortest's; loose but independent of the schedule.
    assert res.paged.max_concurrency > 8
    _assert_position_steps(res, prompt, output, max_seq)
    assert res.attribution and "Splitwise" in res.attribution


def test_measured_paging_reclaim_dict(shared_dir):
    t = load_trace(shared_dir / "traces" / "AzureLLMInferenceTrace_conv.csv")
    d = measured_paging_reclaim(t, slot_bytes=8192 * INT8, block_bytes=16 * INT8, max_seq=8192, slots=8)
    r = replay(t, slot_bytes=8192 * INT8, block_bytes=16 * INT8, max_seq=8192, slots=8)
    assert d["measured_reclaim_bytes"] == r.summary["measured_reclaim_bytes"]
    assert d["bound_bytes"] == 8 * 8192 * INT8
    assert d["ratio"] == pytest.approx(d["measured_reclaim_bytes"] / d["bound_bytes"])
    assert d["slots"] == 8 and d["rejected"] == 1 and "Splitwise" in d["attribution"]
    assert isinstance(d["measured_reclaim_bytes"], int)


def test_paging_reclaim_uses_model_geometry(shared_dir):
    from kvgate.model import load_model
    from kvgate.options import EngineOptions, ReplayOptions
    from kvgate.replay.reclaim import paging_reclaim, replay_geometry

    model = load_model("qwen3-30b-a3b")
    geo = replay_geometry(model, max_seq=8192, kv_format="int8-f32scale", block_size=16)
    assert geo["slot_bytes"] == 415_236_096  # the write-up's 396 MiB
    assert geo["block_bytes"] == 16 * INT8 and geo["fixed_bytes"] == 0
    path = shared_dir / "traces" / "AzureLLMInferenceTrace_conv.csv"
    got = paging_reclaim(model, EngineOptions(kv_format="int8-f32scale", max_seq=8192), ReplayOptions(trace=str(path)),
                         slots=8)["measured_reclaim_bytes"]
    want = measured_paging_reclaim(
        load_trace(path), slot_bytes=415_236_096, block_bytes=16 * INT8, max_seq=8192, slots=8
    )["measured_reclaim_bytes"]
    assert got == want


# ----------------------------------------------------------------- command and plot


def _tiny(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("time,prompt_tokens,output_tokens\n0,10,10\n3,20,4\n")
    return p


def test_command_json(tmp_path, capsys):
    rc = main(
        [
            "replay",
            "--slot-bytes",
            "640",
            "--block-bytes",
            "160",
            "--max-seq",
            "64",
            "--slots",
            "2",
            "--decode-rate",
            "1",
            "--trace",
            str(_tiny(tmp_path)),
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["summary"]["measured_reclaim_bytes"] == 640 and out["summary"]["bound_bytes"] == 1280
    assert out["contiguous"]["reclaim_at_peak_bytes"] == 870
    assert out["paged"]["reclaim_at_peak_bytes"] == 230
    assert out["timeline"]["contiguous"]["reserved_bytes"] == [640, 640, 1280, 1280, 640, 640, 0]
    assert out["timeline"]["contiguous"]["written_bytes"] == [110, 130, 350, 410, 180, 200, 0]
    assert out["timeline"]["contiguous"]["t_s"] == [0.0, 3.0, 3.0, 7.0, 7.0, 10.0, 10.0]
    assert out["timeline"]["paged"]["reserved_bytes"] == [160, 160, 480, 640, 320, 320, 0]
    assert out["budget_source"] == "--slots 2 × S"


def test_command_text_budget_from_headroom_and_plot(tmp_path, capsys):
    png = tmp_path / "r.png"
    argv = [
        "replay",
        "--slot-bytes",
        "640",
        "--block-bytes",
        "160",
        "--max-seq",
        "64",
        "--total",
        "10000",
        "--peak",
        "8720",
        "--decode-rate",
        "1",
        "--trace",
        str(_tiny(tmp_path)),
        "--plot",
        str(png),
    ]
    rc = main(argv)
    text = capsys.readouterr().out
    assert rc == 0
    assert "contiguous slots N = 2" in text  # headroom 1,280 B = 2 slots of 640 B
    assert "measured reclaim at the peak" in text and "50.0%" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(argv) == 2  # refuses to overwrite the plot
    assert "exists" in capsys.readouterr().err


def test_command_model_preset_and_attribution(shared_dir, capsys):
    path = shared_dir / "traces" / "AzureLLMInferenceTrace_code.csv"
    rc = main(
        [
            "replay",
            "--model",
            "qwen3-30b-a3b",
            "--kv-format",
            "int8-f32scale",
            "--max-seq",
            "8192",
            "--trace",
            str(path),
            "--slots",
            "8",
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0
    assert "415,236,096 B" in text and "811,008 B" in text
    assert "Splitwise" in text and "CC-BY 4.0" in text


@pytest.mark.parametrize(
    "extra, needle",
    [
        ([], "no memory budget"),
        (["--budget", "1GiB", "--total", "2GiB", "--peak", "1GiB"], "one budget source"),
        (["--total", "2GiB"], "--total and --peak go together"),
        (["--total", "1GiB", "--peak", "2GiB"], "no headroom"),
        (["--budget", "100"], "holds no contiguous slot"),
    ],
)
def test_command_budget_errors(tmp_path, capsys, extra, needle):
    rc = main(
        ["replay", "--slot-bytes", "640", "--block-bytes", "160", "--max-seq", "64", "--trace", str(_tiny(tmp_path))]
        + extra
    )
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err


def test_command_geometry_errors(tmp_path, capsys):
    base = ["replay", "--max-seq", "64", "--slots", "1", "--trace", str(_tiny(tmp_path))]
    assert main(base) == 2 and "no geometry" in capsys.readouterr().err
    assert main(base + ["--slot-bytes", "640"]) == 2 and "go together" in capsys.readouterr().err
    assert main(base + ["--model", "x", "--slot-bytes", "1", "--block-bytes", "1"]) == 2


def test_plot_renders_binned(tmp_path):
    from kvgate.replay.plot import render_replay_png

    t = synthetic_fixed(3000, 100, 50, interval_s=0.2)
    res = replay(t, slot_bytes=S * 4, block_bytes=BB, max_seq=256, slots=4, decode_rate=20.0)
    sr = series(res, "contiguous", max_points=200)
    assert sr["binned"] and len(sr["t_s"]) <= 100
    assert max(sr["reserved_bytes"]) == res.contiguous.peak_reserved_bytes
    assert max(sr["live"]) == res.contiguous.max_concurrency
    assert render_replay_png(res)[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "name, slots, reclaim, p99_s, paged_live",
    [
        ("code", 8, 1_184_071_680, 13.0384, 40),
        ("code", 32, 9_121_406_976, 0.0, 43),
        ("conv", 8, 2_158_903_296, 6660.1472, 46),
        ("conv", 32, 10_271_416_320, 2.16, 47),
    ],
)
def test_azure_recorded_results(shared_dir, name, slots, reclaim, p99_s, paged_live):
    """Regression values: the table in docs/replay.md (service model of this version:
    50 tokens/s, speed 1, blocks of 16, the write-up's 396 MiB slot). Change both together."""
    path = shared_dir / "traces" / f"AzureLLMInferenceTrace_{name}.csv"
    res = replay(load_trace(path), slot_bytes=8192 * INT8, block_bytes=16 * INT8, max_seq=8192, slots=slots)
    assert res.summary["measured_reclaim_bytes"] == reclaim
    assert res.contiguous.queue_delay_p99_s == pytest.approx(p99_s)
    assert res.paged.max_concurrency == paged_live


def test_command_budget_from_measurement_file(tmp_path, capsys):
    from kvgate.atomicio import write_json_atomic
    from kvgate.measure.measurement import Basis, Measurement, measurement_file

    m = Measurement(total_bytes=10_000, peak_used_bytes=8_720, basis=Basis(total_bytes=10_000))
    path = write_json_atomic(tmp_path / "m.json", measurement_file([m]))
    rc = main(
        [
            "replay",
            "--slot-bytes",
            "640",
            "--block-bytes",
            "160",
            "--max-seq",
            "64",
            "--decode-rate",
            "1",
            "--trace",
            str(_tiny(tmp_path)),
            "--measurement",
            str(path),
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["inputs"]["budget_bytes"] == 1_280 and out["inputs"]["slots"] == 2
    assert out["budget_source"].startswith("headroom of ")


@pytest.mark.parametrize(
    "slot, block, needle",
    [
        ("0", "1", "ERROR: --slot-bytes '0': byte quantity must be positive: '0'"),
        ("640", "0", "ERROR: --block-bytes '0': byte quantity must be positive: '0'"),
        ("0MiB", "160", "ERROR: --slot-bytes '0MiB': byte quantity must be positive"),
        ("640", "0.4", "ERROR: --block-bytes '0.4': byte quantity must be positive"),  # rounds to 0 B
        ("640", "-5", "ERROR: --block-bytes '-5': byte quantity must not be negative: '-5'"),
    ],
)
def test_command_geometry_bytes_must_be_positive(tmp_path, capsys, slot, block, needle):
    # no budget given either: the bad flag is named, not "no memory budget"
    rc = main(
        ["replay", "--slot-bytes", slot, "--block-bytes", block, "--max-seq", "64", "--trace", str(_tiny(tmp_path))]
    )
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "no memory budget" not in err and "Traceback" not in err


@pytest.mark.parametrize("late, steps", [("1e20", "5e+21"), ("1e22", "5e+23"), ("1e30", "5e+31"), ("1e300", "5e+301")])
def test_arrival_steps_beyond_2_53_are_refused(tmp_path, capsys, late, steps):
    """A second request at 1e20 s once wrapped int64 steps ("last request done 0.02 s")."""
    p = tmp_path / "t.csv"
    p.write_text(f"timestamp,prompt_tokens,output_tokens\n0,10,5\n{late},10,5\n")
    plot = tmp_path / "r.png"
    rc = main(
        [
            "replay",
            "--slot-bytes",
            "640",
            "--block-bytes",
            "160",
            "--max-seq",
            "64",
            "--slots",
            "2",
            "--trace",
            str(p),
            "--plot",
            str(plot),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert (
        f"ERROR: the trace spans {late.replace('e', 'e+')} s = {steps} decode steps at 50 tokens/s (speed 1); "
        "a replay handles at most 2^53 = 9,007,199,254,740,992 steps"
    ) in err
    assert not plot.exists()


def test_long_but_representable_span_is_exact():
    t = trace([(0.0, 10, 5), (1e13, 10, 5)])
    r = replay(t, slot_bytes=S, block_bytes=BB, max_seq=L, slots=2, block_size=B)
    # arrival step 5e14 (exact in float64 and int64), finish 5 decode steps later
    assert (r.contiguous.end_time_s, r.paged.end_time_s) == (1e13 + 0.1, 1e13 + 0.1)


def test_chunk_boundaries_change_nothing(monkeypatch):
    """The admission loops and the timeline walk their inputs in chunks (bounded memory);
    chunks of a few hundred requests/events must give the same replay as one chunk."""
    from kvgate.replay import allocators, timeline

    t = synthetic_lognormal(3000, prompt_median=300, output_median=60, sigma=1.0, rate=40.0, seed=5)
    kw = dict(slot_bytes=2048 * 16, block_bytes=16 * 16, max_seq=2048, block_size=16)
    results = []
    for ev, req in ((1 << 30, 1 << 30), (257, 131)):
        monkeypatch.setattr(timeline, "EVENT_CHUNK", ev)
        monkeypatch.setattr(timeline, "EPOCH_CHUNK", max(1, req - 24))
        monkeypatch.setattr(allocators, "CHUNK", req)
        for extra in (dict(slots=4), dict(budget_bytes=6 * 2048 * 16)):
            r = replay(t, **kw, **extra)
            tls = {k: [getattr(tl, f).tolist() for f in ("start", "end", "live", "positions_first", "positions_last",
                                                         "blocks_first", "blocks_last")] for k, tl in r.timelines.items()}  # fmt: skip
            results.append((r.to_dict(), tls))
    assert results[0] == results[2] and results[1] == results[3]
    assert results[0][0]["contiguous"]["queue_delay_max_s"] > 0  # the admission loop ran (someone waited)
    assert results[1][0]["paged"]["queue_delay_max_s"] > 0


def test_replay_json_summary_ratios_exact(capsys):
    from fractions import Fraction

    from kvgate.cli import main

    trace = Path(__file__).parent / "data" / "traces" / "azure_conv_2023_head.csv"
    assert main(["replay", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots", "16", "--trace", str(trace),
                 "--json"]) == 0
    summ = json.loads(capsys.readouterr().out)["summary"]
    assert Fraction(summ["ratio_exact"]) == Fraction(summ["measured_reclaim_bytes"], summ["bound_bytes"])
    assert float(Fraction(summ["ratio_exact"])) == summ["ratio"]
    assert Fraction(summ["unwritten_ratio_exact"]) == Fraction(summ["unwritten_at_peak_bytes"], summ["bound_bytes"])
