"""Memory over time for display (:func:`series`): the points the replay plot draws."""

from __future__ import annotations

import numpy as np

from kvgate.replay.results import ReplayResult


def series(res: ReplayResult, allocator: str, *, max_points: int = 2000) -> dict:
    """Memory over time for display: ``t_s``, ``reserved_bytes``, ``written_bytes``,
    ``live`` (lists).

    Exact (``binned`` false) when there are fewer than ``max_points // 2`` epochs: each
    epoch gives two points, (its start time, the value at its first step) and (its end
    time, the value at its last step), and a final point at the last finish holds 0, so
    joining the points with straight lines draws the replay (values step once per decode
    step inside an epoch). Otherwise time is cut into ``max_points // 2`` equal bins
    (``binned`` true, ``t_s`` the bin centres) and each bin shows the largest value of any
    epoch in it, so peaks stay visible.

    The binned points of a timeline not yet built come from a compiled walk over the
    schedule (:func:`_binned_walk`: the same numbers, without the timeline's memory)."""
    rate = res.decode_rate
    if res.walks and not getattr(res.timelines, "is_built", lambda _: True)(allocator):
        from kvgate.replay.compiled import N_EPOCHS

        stats = res.walks[allocator]
        if 2 * int(stats[N_EPOCHS]) >= max_points and stats[N_EPOCHS] > 0:
            return _binned_walk(res, allocator, max_points)
    tl = res.timelines[allocator]
    if len(tl) == 0:
        return {"t_s": [], "reserved_bytes": [], "written_bytes": [], "live": [], "binned": False}
    r_first, r_last = res.reserved_bytes(allocator, "first"), res.reserved_bytes(allocator, "last")
    w_first, w_last = res.written_bytes(allocator, "first"), res.written_bytes(allocator, "last")
    if 2 * len(tl) < max_points:
        t = np.empty(2 * len(tl) + 1)
        t[0:-1:2], t[1:-1:2], t[-1] = tl.start, tl.end, tl.end[-1]
        inter = lambda a, b: [int(x) for x in np.ravel(np.column_stack([a, b]))] + [0]  # noqa: E731
        return {
            "t_s": (t / rate).tolist(),
            "reserved_bytes": inter(r_first, r_last),
            "written_bytes": inter(w_first, w_last),
            "live": [int(x) for x in np.repeat(tl.live, 2)] + [0],
            "binned": False,
        }
    nb = max(1, max_points // 2)
    t0, t1 = int(tl.start[0]), int(tl.end[-1])
    width = max(1, -(-(t1 - t0) // nb))
    nb = -(-(t1 - t0) // width)
    out_r = np.full(nb, -1, dtype=np.float64)
    out_w = np.full(nb, -1, dtype=np.float64)
    out_n = np.full(nb, -1, dtype=np.int64)
    # An epoch spans bins (start_bin .. end_bin); put its last (largest) values on every
    # bin it touches by marking its end bin and the first value on its start bin, then
    # fill bins nothing ended in from the epoch that covers them.
    b_first = np.minimum((tl.start - t0) // width, nb - 1)
    b_last = np.minimum((tl.end - 1 - t0) // width, nb - 1)
    np.maximum.at(out_r, b_last, np.asarray(r_last, dtype=np.float64))
    np.maximum.at(out_w, b_last, np.asarray(w_last, dtype=np.float64))
    np.maximum.at(out_n, b_last, tl.live)
    np.maximum.at(out_r, b_first, np.asarray(r_first, dtype=np.float64))
    np.maximum.at(out_w, b_first, np.asarray(w_first, dtype=np.float64))
    np.maximum.at(out_n, b_first, tl.live)
    empty = out_n < 0
    if np.any(empty):
        # A bin no epoch starts or ends in lies inside one epoch: the one that started last before it.
        idx = np.searchsorted(b_first, np.flatnonzero(empty), side="right") - 1
        out_r[empty] = np.asarray(r_last, dtype=np.float64)[idx]
        out_w[empty] = np.asarray(w_last, dtype=np.float64)[idx]
        out_n[empty] = tl.live[idx]
    centers = (t0 + (np.arange(nb) + 0.5) * width) / rate
    return _binned_points(centers, out_r, out_w, out_n)


def _binned_points(centers: np.ndarray, reserved: np.ndarray, written: np.ndarray, live: np.ndarray) -> dict:
    """The binned series as printed: bin centres in seconds, bytes and live sequences as ints."""
    return {"t_s": centers.tolist(), "reserved_bytes": [int(x) for x in reserved],
            "written_bytes": [int(x) for x in written], "live": [int(x) for x in live], "binned": True}


def _binned_walk(res: ReplayResult, allocator: str, max_points: int) -> dict:
    """The binned branch of :func:`series` from :func:`kvgate.replay.compiled.walk_bins`."""
    from kvgate.replay.compiled import FINAL_END, walk_bins

    admit, prompt, output, B = res.timelines.source(allocator)  # type: ignore[attr-defined]
    keep = np.flatnonzero(output > 0)
    t0, t1 = int(admit[keep[0]]), int(res.walks[allocator][FINAL_END])  # first epoch's start, last one's end
    nb = max(1, max_points // 2)
    width = max(1, -(-(t1 - t0) // nb))
    nb = -(-(t1 - t0) // width)
    out_r, out_w, out_n = walk_bins(admit, prompt, output, B, res.slot_bytes, res.fixed_bytes, res.block_bytes,
                                    allocator == "contiguous", t0, width, nb)  # fmt: skip
    centers = (t0 + (np.arange(nb) + 0.5) * width) / res.decode_rate
    return _binned_points(centers, out_r, out_w, out_n)
