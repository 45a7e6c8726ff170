"""The sampler: exact running peak, largest gap, bounded timeline for hours-long runs."""

from __future__ import annotations

import time

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
