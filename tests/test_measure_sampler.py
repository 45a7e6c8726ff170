"""The sampler: exact running peak, largest gap, bounded timeline for hours-long runs."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from kvgate.measure.sampler import Sampler, Timeline


def test_timeline_bounded_for_millions_of_samples_and_peak_exact():
    tl = Timeline(256)
    n = 2_000_000  # 1 ms samples: 33 minutes; the size must not grow with n
    spike_at = 1_234_567  # one single-sample 8 GiB spike on a saw-tooth wobble of < 64 KiB
    base = 10**9
    add = tl.add
    for i in range(n):
        add(i * 0.001, base + (8 * 2**30 if i == spike_at else (i * 7919) % 65_536))
    exact_max, exact_min = base + 8 * 2**30, base
    assert len(tl) <= 256 and tl.count == n
    ts, vs = tl.points()
    assert len(vs) <= 512
    assert max(vs) == exact_max  # min/max-preserving: the one-sample spike survives
    assert min(vs) == exact_min
    assert ts[vs.index(max(vs))] == spike_at * 0.001
    assert ts == sorted(ts)


def test_sampler_peak_time_gap_idle_with_fake_clock():
    clock = {"t": 100.0}
    values = iter([5, 5, 7, 5, 50, 9, 9])  # 3 idle, then a run with a spike of 50
    s = Sampler(lambda: [next(values)], 1, interval_s=0.001, clock=lambda: clock["t"])
    for dt in (0.0, 0.001, 0.001):
        clock["t"] += dt
        s.sample_once()
    clock["t"] += 0.0005
    s.mark_start()
    for dt in (0.001, 0.004, 0.001, 0.002):  # the 4 ms gap is the largest after start
        clock["t"] += dt
        s.sample_once()
    ch = s.channels[0]
    assert ch.idle_value() == 5  # lower median of [5, 5, 7]
    assert ch.peak == 50 and abs(s.rel(ch.peak_t) - 0.005) < 1e-9
    assert abs(s.max_gap_s - 0.004) < 1e-9
    assert ch.run_samples == 4 and s.samples == 7
    tl = s.timeline(0)
    assert max(tl["used_bytes"]) == 50 and min(tl["t_s"]) < 0  # settle samples before t = 0


def test_sampler_thread_runs_and_stops_with_final_sample():
    n = {"calls": 0}

    def read():
        n["calls"] += 1
        return [n["calls"]]

    s = Sampler(read, 1, interval_s=0.001)
    s.start()
    time.sleep(0.05)
    s.mark_start()
    time.sleep(0.1)
    s.stop()
    assert s.error is None
    assert s.channels[0].peak == n["calls"]  # the final sample in stop() is the largest
    assert s.channels[0].run_samples >= 20
    assert s.max_gap_s is not None and s.max_gap_s < 0.1


def test_reader_error_is_kept_not_raised_in_thread():
    def read():
        raise RuntimeError("boom")

    s = Sampler(read, 1, interval_s=0.001)
    s.start()
    time.sleep(0.02)
    s.stop()
    assert isinstance(s.error, RuntimeError)


def _reference_points(samples, capacity, span):
    """The timeline algorithm without the fast path (as before issue 3's cost work)."""
    buckets, origin = [], None
    for t, v in samples:
        origin = t if origin is None else origin
        idx = int((t - origin) / span)
        if buckets and buckets[-1][0] == idx:
            b = buckets[-1]
            if v < b[2]:
                b[1], b[2] = t, v
            if v > b[4]:
                b[3], b[4] = t, v
            continue
        buckets.append([idx, t, v, t, v])
        while len(buckets) > capacity:
            span *= 2
            merged = []
            for b in buckets:
                i = b[0] // 2
                if merged and merged[-1][0] == i:
                    m = merged[-1]
                    if b[2] < m[2]:
                        m[1], m[2] = b[1], b[2]
                    if b[4] > m[4]:
                        m[3], m[4] = b[3], b[4]
                else:
                    merged.append([i] + b[1:])
            buckets = merged
    ts, vs = [], []
    for _, t1, v1, t2, v2 in buckets:
        for t, v in ([(t1, v1)] if t1 == t2 else sorted(((t1, v1), (t2, v2)))):
            ts.append(t)
            vs.append(v)
    return ts, vs


@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 6)), min_size=1, max_size=400),
       st.integers(2, 9))
@settings(max_examples=200, deadline=None)
def test_timeline_fast_path_equals_reference(steps, capacity):
    # dyadic times (k / 1024 s) and span: bucket arithmetic is exact, so the two must agree
    span = 2.0**-10
    t, samples = 0, []
    for dt, v in steps:
        t += dt
        samples.append((t * span, 10**9 + v * 2**20))
    tl = Timeline(capacity, span_s=span)
    for s in samples:
        tl.add(*s)
    assert tl.points() == _reference_points(samples, capacity, span)
    assert tl.count == len(samples)


def test_hot_path_exact_peak_on_a_flat_run_with_one_sample_spike():
    clock = {"t": 50.0}
    n, spike_at, base = 300_000, 212_345, 70_405_455_872 - 4 * 2**30
    state = {"i": 0}

    def read():
        i = state["i"]
        state["i"] += 1
        return [base + 4 * 2**30 if i == spike_at else base]  # 5 min of a flat line at 1 ms, one spike

    s = Sampler(read, 1, interval_s=0.001, clock=lambda: clock["t"], timeline_points=64)
    s.mark_start()
    for _ in range(n):
        clock["t"] += 0.001
        s.sample_once()
    ch = s.channels[0]
    assert ch.peak == base + 4 * 2**30 == 70_405_455_872
    assert abs(s.rel(ch.peak_t) - (spike_at + 1) * 0.001) < 1e-6
    assert ch.run_samples == n and ch.last == base
    tl = s.timeline(0)
    assert len(tl["used_bytes"]) <= 128 and max(tl["used_bytes"]) == ch.peak
    assert tl["t_s"][tl["used_bytes"].index(ch.peak)] == round(s.rel(ch.peak_t), 6)
    assert s.long_gaps == 0 and abs(s.max_gap_s - 0.001) < 1e-6


def test_gaps_top_five_with_times_values_and_long_count():
    clock = {"t": 1000.0}
    step = {"v": 0}

    def read():
        step["v"] += 1
        return [step["v"] * 2**20, 7]

    s = Sampler(read, 2, interval_s=0.001, clock=lambda: clock["t"])
    s.sample_once()  # settle: gaps before the start do not count
    clock["t"] += 0.5
    s.sample_once()
    s.mark_start()
    # gaps after the start (ms): 1 ×20, then 105 at sample 21, 12, 30, 2, 9, 50, 11
    dts = [0.001] * 20 + [0.105, 0.001, 0.012, 0.030, 0.002, 0.009, 0.050, 0.011, 0.001]
    times = []
    for dt in dts:
        clock["t"] += dt
        s.sample_once()
        times.append(clock["t"])
    assert abs(s.max_gap_s - 0.105) < 1e-9
    got = [(round(g.length_s, 6), round(s.rel(g.t0), 6)) for g in s.gaps]
    assert [x for x, _ in got] == [0.105, 0.05, 0.03, 0.012, 0.011]
    first = s.gaps[0]
    assert first.before == (22 * 2**20, 7) and first.after == (23 * 2**20, 7)  # samples 22 and 23 overall
    assert s.long_gaps == 5  # > 10 ms: 105, 12, 30, 50, 11 (9 is not)
    summ = s.gap_summary(0)
    assert summ["over_10x_interval"] == 5 and summ["long_gap_threshold_s"] == 0.01
    row = summ["largest"][0]
    assert row["gap_s"] == 0.105 and row["used_before_bytes"] == 22 * 2**20 and row["used_after_bytes"] == 23 * 2**20
    assert row["at_s"] == round(times[19] - s.start_t, 6)
    assert s.gap_summary(1)["largest"][0]["used_before_bytes"] == 7


# --- the sampling loop holds unchanged samples and accounts them in bulk ---------------------

import threading  # noqa: E402

from kvgate.measure.sampler import HOLD_MAX, TOP_GAPS  # noqa: E402

MiB = 2**20


def test_loop_counts_every_sample_keeps_exact_peak_idle_and_the_long_gap():
    calls = {"n": 0}

    def read():  # 3 MiB; a 300 MiB spike for calls 201..204; a 40 ms stall at call 300
        calls["n"] += 1
        n = calls["n"]
        if n == 300:
            time.sleep(0.04)
        return [3 * MiB + (300 * MiB if 200 < n < 205 else 0)]

    s = Sampler(read, 1, interval_s=0.001)
    s.log = []
    s.start()
    time.sleep(0.08)
    s.mark_start()
    time.sleep(0.5)
    s.stop()
    ch = s.channels[0]
    assert s.error is None
    # every sample the loop took is counted once, plus the final one in stop()
    assert s.samples == calls["n"] == ch.run_samples + len(ch.idle)
    assert ch.peak == 303 * MiB  # the 4-sample spike, exactly
    assert ch.idle_value() == 3 * MiB
    assert s.max_gap_s >= 0.04 and s.long_gaps >= 1  # the 40 ms stall is seen
    assert 303 * MiB in s.timeline(0)["used_bytes"]
    # unchanged samples during the run are held and accounted in bulk, not one by one
    assert len(s.log) < s.samples / 2


def _drive_loop(values, dts, k, *, long_gap_s=0.01):
    """Run ``Sampler._loop`` in this thread on a fake clock (no real sleeping): sample i
    returns ``values[i]`` and then the clock advances ``dts[i]``; the run starts before
    sample ``k``."""
    clock = {"t": 10.0}
    i = {"n": 0}
    s = Sampler(lambda: read(), 1, interval_s=1e-9, clock=lambda: clock["t"])  # 1 ns: never sleeps
    s.long_gap_s = long_gap_s

    def read():
        n = i["n"]
        if n == k:
            s.mark_start()
        if n == len(values) - 1:
            s._stopping = True
        clock["t"] += dts[n]
        i["n"] += 1
        return [values[n]]

    s._loop()
    return s


def _reference(values, dts, k, *, long_gap_s=0.01):
    """The same samples, each through ``sample_once`` (every sample ingested on its own)."""
    clock = {"t": 10.0}
    s = Sampler(lambda: None, 1, interval_s=1e-9, clock=lambda: clock["t"])
    s.long_gap_s = long_gap_s
    for n, (v, dt) in enumerate(zip(values, dts)):
        if n == k:
            s.mark_start()
        clock["t"] += dt
        s.reader = lambda v=v: [v]
        s.sample_once()
    return s


@given(st.lists(st.tuples(st.sampled_from([0, 0, 0, 0, 1, 5]), st.sampled_from([1, 1, 1, 2, 15, 30, 105])),
                min_size=1, max_size=600), st.integers(0, 50))
@settings(max_examples=150, deadline=None)
def test_held_samples_change_no_statistic(steps, k):
    # values in MiB over a flat base, gaps in ms (dyadic-free: compared with a tolerance)
    values = [10**9 + v * MiB for v, _ in steps]
    dts = [d * 1e-3 for _, d in steps]
    k = min(k, len(values) - 1)
    got, ref = _drive_loop(values, dts, k), _reference(values, dts, k)
    a, b = got.channels[0], ref.channels[0]
    assert got.samples == ref.samples == len(values)
    assert (a.peak, a.peak_t, a.last, a.run_samples, a.idle) == (b.peak, b.peak_t, b.last, b.run_samples, b.idle)
    assert got.gaps == ref.gaps and got.long_gaps == ref.long_gaps and got.max_gap_s == ref.max_gap_s
    ta, tb = a.timeline.points(), b.timeline.points()
    assert (min(ta[1]), max(ta[1])) == (min(tb[1]), max(tb[1]))
    assert ta[0][ta[1].index(max(ta[1]))] == tb[0][tb[1].index(max(tb[1]))]  # the peak's first time


def test_a_long_flat_run_is_accounted_in_bulk_every_hold_max_samples():
    n = 10 * HOLD_MAX
    logged: list = []
    clock = {"t": 0.0}
    i = {"n": 0}
    s = Sampler(lambda: read(), 1, interval_s=1e-9, clock=lambda: clock["t"])  # 1 ns: never sleeps
    s.long_gap_s = 0.01
    s.log = logged
    s.mark_start()

    def read():
        i["n"] += 1
        if i["n"] == n:
            s._stopping = True
        clock["t"] += 2**-10  # dyadic: every gap is exactly the same
        return [5 * MiB]

    s._loop()
    assert s.samples == n and s.channels[0].run_samples == n
    # one entry for each sample until the top gaps are filled, then one per HOLD_MAX + 1
    # samples: the count other threads read (samples) lags the loop by ≤ HOLD_MAX intervals
    assert len(logged) <= 1 + TOP_GAPS + n // HOLD_MAX + 1
    assert max(t for t, _ in logged) == n * 2**-10  # the last sample is accounted at its time


def test_reader_error_mid_run_keeps_the_held_samples():
    calls = {"n": 0}

    def read():
        calls["n"] += 1
        if calls["n"] > 50:
            raise RuntimeError("GPU is lost")
        return [7]

    s = Sampler(read, 1, interval_s=0.001)
    s.mark_start()
    th = threading.Thread(target=s._loop)
    th.start()
    th.join(5)
    assert isinstance(s.error, RuntimeError)
    assert s.samples == 50 and s.channels[0].run_samples == 50 and s.channels[0].peak == 7


def test_the_measurement_basis_names_the_loop_that_sampled():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    import _fake_pynvml as fake
    from kvgate.measure.nvml import Nvml
    from kvgate.measure.runner import measure_command

    o = measure_command([sys.executable, "-c", "pass"], nvml=Nvml(module=fake.make()), settle_s=0.0)
    # the fake module has no ctypes entry points: pynvml's own call, in the Python thread
    assert o.measurements[0].basis.sampler_loop == "python thread, pynvml nvmlDeviceGetMemoryInfo_v2"
    assert o.document["domains"][0]["basis"]["sampler_loop"] == o.measurements[0].basis.sampler_loop
    h = measure_command([sys.executable, "-c", "pass"], domain="host", settle_s=0.0, interval_s=0.005)
    assert h.measurements[0].basis.sampler_loop == "python thread"
