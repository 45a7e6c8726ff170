""":class:`kvgate.engines.llamacpp.cache.LlamaCppServer` compiled (numba): the same rules,
request by request, with a prompt named by its request's index into the trace's arrays
(a slot or a cached state holds the index of the request whose prompt it is) instead of
:class:`~kvgate.engines.llamacpp.cache.Prompt` tuples.

The server's C++ floats stay float32 (``f_sim``, ``f_keep``, the prompt cache's size per
token), the cached states are kept oldest first (``pop(0)`` is the oldest), and the
byte and token totals the Python model sums on each step are kept as running sums.
Tested equal to the Python model request by request, its final states and slots
included (``tests/test_tier_engines_compiled.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvgate.engines.llamacpp.prompt import Prompt, _State
from kvgate.tier.kernel import _njit
from kvgate.tier.traces import HashedTrace


@_njit
def _lcp(r1: Any, r2: Any, ids: Any, off: Any, length: Any, B: Any) -> Any:  # pragma: no cover - compiled
    """``common_prefix`` of requests ``r1`` and ``r2``'s prompts."""
    a, b = off[r1], off[r2]
    n = min(off[r1 + 1] - a, off[r2 + 1] - b)
    j = 0
    while j < n and ids[a + j] == ids[b + j]:
        j += 1
    return min(j * B, length[r1], length[r2])


@_njit
def _size(n: Any, bpt: Any, n_layer: Any, n_stream: Any) -> Any:  # pragma: no cover - compiled
    head = 4 + 4 * n_stream
    if n == 0:
        return head
    return head + 8 + 24 * n_layer + n * (12 + bpt)


@_njit
def _drop(k: Any, sreq: Any, ssize: Any, ns: Any, tot: Any, length: Any) -> Any:  # pragma: no cover - compiled
    """Remove state ``k`` (the later ones move up); returns the new count. ``tot`` =
    [bytes held, tokens held]."""
    tot[0] -= ssize[k]
    tot[1] -= length[sreq[k]]
    for q in range(k, ns - 1):
        sreq[q] = sreq[q + 1]
        ssize[q] = ssize[q + 1]
    return ns - 1


@_njit
def _replay(ids: Any, off: Any, length: Any, B: Any, n_slots: Any, n_ctx: Any, ram: Any, bpt: Any,
            n_layer: Any, n_stream: Any, sps: Any, idle: Any, kvu: Any, out: Any, slots: Any, last_used: Any,
            sreq: Any, ssize: Any, misc: Any) -> None:
    # pragma: no cover - compiled
    """``ram``: -1 no limit, 0 off, else bytes. ``misc`` out: [states, saved tokens, clock]."""
    F = np.float32
    enabled = ram != 0
    limit = ram if ram > 0 else 0
    ns = 0
    tot = np.zeros(2, dtype=np.int64)
    saved = 0
    clock = 0
    for r in range(len(length)):
        nt = length[r]
        if nt == 0:
            out[r] = 0
            continue
        # _pick_slot
        ret = -1
        update = False
        if sps != 0.0:
            best = F(0.0)
            for i in range(n_slots):
                p = slots[i]
                if p < 0 or length[p] == 0:
                    continue
                f_sim = F(_lcp(p, r, ids, off, length, B)) / F(nt)
                if f_sim > best and f_sim > F(sps):
                    best, ret = f_sim, i
            if ret >= 0:
                if (best * F(nt)) / F(length[slots[ret]]) < F(0.5):
                    update = True
        if ret < 0:
            t_last = -1
            for i in range(n_slots):
                if ret < 0 or last_used[i] <= t_last:
                    t_last, ret = last_used[i], i
            update = True
        # the slot's old prompt to the cache, a cached prompt into the slot, the cache's limits
        for step in range(2):
            if step == 0:
                if not (update and enabled):
                    continue
                todo_first, todo_last = ret, ret + 1
            else:
                if not (idle and enabled):
                    continue
                todo_first, todo_last = 0, n_slots
            for i in range(todo_first, todo_last):
                if step == 1 and i == ret:
                    continue
                p = slots[i]
                did = False
                # _save(p)
                if p >= 0 and length[p] > 0:
                    held = False
                    for k in range(ns):
                        if _lcp(sreq[k], p, ids, off, length, B) == length[p]:
                            held = True
                            break
                    new = _size(length[p], bpt, n_layer, n_stream)
                    if not held and not (limit > 0 and new > limit):
                        k = 0
                        while k < ns:
                            if _lcp(sreq[k], p, ids, off, length, B) == length[sreq[k]]:
                                ns = _drop(k, sreq, ssize, ns, tot, length)
                            else:
                                k += 1
                        if limit > 0:
                            while ns > 0 and tot[0] + new > limit:
                                ns = _drop(0, sreq, ssize, ns, tot, length)
                        sreq[ns] = p
                        ssize[ns] = new
                        ns += 1
                        tot[0] += new
                        tot[1] += length[p]
                        saved += length[p]
                        did = True
                if step == 0:
                    # _load(ret, r)
                    cur = slots[ret]
                    lc = _lcp(cur, r, ids, off, length, B) if cur >= 0 else 0
                    n_cur = length[cur] if cur >= 0 else 0
                    fk_best = F(lc) / F(n_cur) if n_cur > 0 else F(-1.0)
                    fs_best = F(lc) / F(nt)
                    pick = -1
                    for k in range(ns):
                        lk = _lcp(sreq[k], r, ids, off, length, B)
                        f_keep = F(lk) / F(length[sreq[k]])
                        f_sim = F(lk) / F(nt)
                        if f_keep < F(0.25):
                            continue
                        if fk_best < f_keep and fs_best < f_sim:
                            fk_best, fs_best, pick = f_keep, f_sim, k
                    if pick >= 0:
                        slots[ret] = sreq[pick]
                        ns = _drop(pick, sreq, ssize, ns, tot, length)
                if step == 0 or did:
                    # _update()
                    if limit > 0:
                        while ns > 0 and tot[0] > limit:
                            ns = _drop(0, sreq, ssize, ns, tot, length)
                    spt = F(tot[0]) / F(max(1, tot[1]))
                    if spt < F(1.0):
                        spt = F(1.0)
                    cur_lim = n_ctx
                    if limit > 0:
                        by = np.int64(F(limit) / spt)
                        if by > cur_lim:
                            cur_lim = by
                    if n_ctx > 0:
                        while ns > 0 and tot[1] > cur_lim:
                            ns = _drop(0, sreq, ssize, ns, tot, length)
                if step == 1 and kvu:
                    slots[i] = -1
        cur = slots[ret]
        n_past = _lcp(cur, r, ids, off, length, B) if cur >= 0 else 0
        has_new = n_past < nt
        if 0 < n_past and not has_new and n_past - 1 <= 0:
            n_past = 0
        if n_past == nt and n_past > 0:
            n_past -= 1
        slots[ret] = r
        clock += 1
        last_used[ret] = clock
        out[r] = n_past
    misc[0], misc[1], misc[2] = ns, saved, clock


def replay_compiled(trace: HashedTrace, server: Any) -> np.ndarray:
    """``kvgate.engines.llamacpp.cache.replay`` on a fresh ``server``, compiled; the
    server's slots, states, saved tokens and clock are left as the Python model leaves them."""
    s = server
    n = trace.n_requests
    ids = np.asarray(trace.ids, dtype=np.int64).reshape(-1)
    off = np.asarray(trace.offsets, dtype=np.int64)
    length = np.asarray(trace.input_length, dtype=np.int64)
    out = np.zeros(n, dtype=np.int64)
    slots = np.full(s.n_slots, -1, dtype=np.int64)
    last_used = np.full(s.n_slots, -1, dtype=np.int64)
    sreq = np.zeros(n + 1, dtype=np.int64)
    ssize = np.zeros(n + 1, dtype=np.int64)
    misc = np.zeros(3, dtype=np.int64)
    ram = -1 if s.cache_ram_bytes is None else int(s.cache_ram_bytes)
    _replay(ids, off, length, int(trace.block_tokens), int(s.n_slots), int(s.n_ctx), ram, int(s.bytes_per_token),
            int(s.n_layer), int(s.n_stream), float(s.slot_prompt_similarity), bool(s.cache_idle_slots),
            bool(s.kv_unified), out, slots, last_used, sreq, ssize, misc)

    def prompt(r: int) -> Any:
        return Prompt(tuple(ids[off[r] : off[r + 1]].tolist()), int(length[r]))

    s.slots = [None if r < 0 else prompt(int(r)) for r in slots.tolist()]
    s.last_used = last_used.tolist()
    s.states = [_State(prompt(int(r)), int(z)) for r, z in zip(sreq[: misc[0]].tolist(), ssize[: misc[0]].tolist())]
    s.saved_tokens = int(misc[1])
    s._clock = int(misc[2])
    return out
