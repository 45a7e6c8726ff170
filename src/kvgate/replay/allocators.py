"""Admission schedules of the two allocators (:mod:`kvgate.replay.simulate`, items 3 and 5
of its service model): FIFO with head-of-line blocking, in integer decode steps.

- :func:`schedule_contiguous`: K identical slots (the source's mirror);
- :func:`schedule_budget`: admit while the logical reservations of the live requests fit
  a byte budget (the paged layout, with its whole-request oracle).

Both are one pass over the requests with a heap (O(n log K), O(n log n)). Until the first
request that has to wait, "admit at arrival" is checked vectorized
(:func:`first_blocked`) and the loop starts only there. The loop reads its inputs in
chunks of :data:`CHUNK` requests, so the Python objects it handles are bounded by the
chunk, not by the trace (10^7 requests once held ~1 GiB of Python ints here). When numba
imports and the trace is large (:mod:`kvgate.replay.fastpath`), both loops run compiled
over the whole trace instead
(:mod:`kvgate.replay.compiled`: the same schedules, 10^7 requests in well under a second).
"""

from __future__ import annotations

import heapq

import numpy as np

from kvgate.replay import fastpath

CHUNK = 1 << 16  # requests converted to Python ints at a time by the admission loops
_PREFIX = 1 << 12  # requests in the first, cheap look for where admission first waits


def first_blocked(arrive: np.ndarray, service: np.ndarray, cost: np.ndarray, capacity: int) -> int:
    """Index of the first request that would not fit at its arrival if every earlier one
    was admitted at its own arrival; ``len(arrive)`` if all fit (vectorized).

    Up to that index the FIFO schedule is simply "admit at arrival" (nothing waited), so
    the loops only start there.
    """
    m = len(arrive)
    if m == 0:
        return 0
    # Requests after a prefix cannot change where the prefix blocks (their events sort
    # after its admissions), so try a short prefix first: overloaded traces block early.
    if m > 8 * _PREFIX:
        k = first_blocked(arrive[:_PREFIX], service[:_PREFIX], cost[:_PREFIX], capacity)
        if k < _PREFIX:
            return k
    # With everyone admitted at arrival, the memory in use as request i is admitted is
    #   Σ_{j ≤ i} c_j − Σ_{j < i, service_j = 0} c_j − Σ_{service_j > 0, arrive_j + service_j ≤ arrive_i} c_j
    # (at one step finishes free before admissions; a request with service 0 frees right
    # after its own admission): one sort of the finishes, no sort of all events.
    cost = np.asarray(cost, dtype=np.int64)
    used = np.cumsum(cost)
    zero = service == 0
    if bool(zero.any()):
        used -= np.cumsum(np.where(zero, cost, 0)) - np.where(zero, cost, 0)
    busy = ~zero
    fin = (arrive + service)[busy]
    order = np.argsort(fin, kind="stable")
    freed = np.concatenate([[0], np.cumsum(cost[busy][order])])
    used -= freed[np.searchsorted(fin[order], arrive, side="right")]
    over = np.flatnonzero(used > capacity)
    return int(over[0]) if len(over) else m


def schedule_contiguous(arrive: np.ndarray, service: np.ndarray, slots: int) -> np.ndarray:
    """Admission steps of a FIFO queue with ``slots`` identical servers.

    Request i is admitted at max(arrive[i], admission of i − 1, the earliest step a slot
    is free); it holds the slot for ``service[i]`` steps. Inputs are int64 steps, arrivals
    non-decreasing. Returns int64 steps, non-decreasing.
    """
    n = len(arrive)
    if n and fastpath.use(n):  # the whole loop compiled: no need to find where it first waits
        from kvgate.replay import compiled

        out = np.empty(n, dtype=np.int64)
        compiled.schedule_contiguous_loop(compiled.i64(arrive), compiled.i64(service), min(int(slots), n), out)
        return out
    k = first_blocked(arrive, service, np.ones(n, dtype=np.int64), slots)
    out = np.asarray(arrive, dtype=np.int64).copy()
    if k == n:
        return out
    fin = arrive[:k] + service[:k]
    live = fin[fin > arrive[k]].tolist()
    free = live + [0] * (slots - len(live))  # heap of the steps at which each slot is free
    heapq.heapify(free)
    replace = heapq.heapreplace
    prev = int(out[k])
    for a in range(k, n, CHUNK):
        b = min(a + CHUNK, n)
        times = out[a:b].tolist()
        s_list = service[a:b].tolist()
        for i in range(b - a):
            t = times[i]
            if t < prev:
                t = prev
            f = free[0]
            if f > t:
                t = f
            times[i] = t
            prev = t
            replace(free, t + s_list[i])
        out[a:b] = times
    return out


def schedule_budget(arrive: np.ndarray, service: np.ndarray, cost: np.ndarray, budget: int) -> np.ndarray:
    """Admission steps of a FIFO queue that admits while Σ cost of live requests ≤ budget.

    ``cost`` are bytes (int64, or Python ints in an object array), each ≤ ``budget``.
    Request i is admitted at the earliest step ≥ max(arrive[i], admission of i − 1) at
    which it fits once the requests finished by then are freed; it stays ``service[i]``
    steps. Returns int64 steps, non-decreasing.
    """
    n = len(arrive)
    if n and cost.dtype != object and int(budget) < 2**62 and fastpath.use(n):
        from kvgate.replay import compiled

        out = np.empty(n, dtype=np.int64)
        compiled.schedule_budget_loop(compiled.i64(arrive), compiled.i64(service), compiled.i64(cost), int(budget), out)
        return out
    k = first_blocked(arrive, service, cost, budget) if cost.dtype != object else 0
    out = np.asarray(arrive, dtype=np.int64).copy()
    if k == n:
        return out
    fin = arrive[:k] + service[:k]
    still = np.flatnonzero(fin > arrive[k])  # admitted before k and live at its arrival
    heap = list(zip(fin[still].tolist(), cost[still].tolist()))  # (finish step, cost)
    heapq.heapify(heap)
    used = sum(c for _, c in heap)
    pop, push = heapq.heappop, heapq.heappush
    prev = int(out[k])
    for a in range(k, n, CHUNK):
        b = min(a + CHUNK, n)
        times = out[a:b].tolist()
        c_list, s_list = cost[a:b].tolist(), service[a:b].tolist()
        for i in range(b - a):
            t = times[i]
            if t < prev:
                t = prev
            c = c_list[i]
            while heap and heap[0][0] <= t:
                used -= pop(heap)[1]
            while used + c > budget:
                f, cc = pop(heap)
                used -= cc
                if f > t:
                    t = f
            times[i] = t
            prev = t
            push(heap, (t + s_list[i], c))
            used += c
        out[a:b] = times
    return out
