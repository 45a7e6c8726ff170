""":class:`kvgate.engines.sglang.cache.SglangRadixCache` compiled (numba): the same rules,
request by request, on arrays indexed by a dense code per hash id instead of a dict of
node objects.

Codes are the ranks of the ids (``np.unique``), so the heaps' ``(last access, key)``
pairs order exactly as the Python model's ``(last, id)`` tuples do: one int64
``last << 32 | code`` per entry, popped from a ``heapq`` list with the same lazy deletion
(an entry is stale when its node is gone, moved, or touched since). The nodes a request
locks are kept in the order it locks them (its path from the root), the order the Python
model backs them up in. Prompts only (``output_tokens`` 0: ``kvgate tier``'s replay).
Tested equal to the Python model request by request (``tests/test_tier_sglang_fast.py``).
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from kvgate.tier.kernel import _njit
from kvgate.tier.traces import HashedTrace

_SHIFT = 32


@_njit
def _evict_host(need: Any, host_cap: Any, st: Any, exists: Any, parent: Any, tokens: Any, last: Any,
                on_dev: Any, on_host: Any, ch: Any, hheap: Any) -> Any:  # pragma: no cover - compiled
    """``SglangRadixCache._evict_host``; ``st`` = [device used, host used, stored, loaded]."""
    mask = (np.int64(1) << _SHIFT) - 1
    while st[1] + need > host_cap and len(hheap) > 0:
        e = heapq.heappop(hheap)
        la, key = e >> _SHIFT, e & mask
        if not exists[key] or on_dev[key] or not on_host[key] or ch[key] != 0 or last[key] != la:
            continue
        st[1] -= tokens[key]
        on_host[key] = False
        _delete(key, exists, parent, last, on_dev, on_host, ch, hheap)
    return st[1] + need <= host_cap


@_njit
def _delete(key: Any, exists: Any, parent: Any, last: Any, on_dev: Any, on_host: Any, ch: Any,
            hheap: Any) -> None:  # pragma: no cover - compiled
    exists[key] = False
    p = parent[key]
    if p >= 0 and exists[p]:
        ch[p] -= 1
        if ch[p] == 0 and on_host[p] and not on_dev[p]:
            heapq.heappush(hheap, (last[p] << _SHIFT) | p)


@_njit
def _evict_device(need: Any, dev_cap: Any, st: Any, clock: Any, lockstamp: Any, exists: Any, parent: Any,
                  tokens: Any, last: Any, on_dev: Any, on_host: Any, ch_dev: Any, ch: Any, heap: Any,
                  hheap: Any) -> None:  # pragma: no cover - compiled
    mask = (np.int64(1) << _SHIFT) - 1
    skipped = [np.int64(0)]
    skipped.pop()
    while st[0] + need > dev_cap and len(heap) > 0:
        e = heapq.heappop(heap)
        la, key = e >> _SHIFT, e & mask
        if not exists[key] or not on_dev[key] or ch_dev[key] != 0 or last[key] != la:
            continue
        if lockstamp[key] == clock:
            skipped.append(e)
            continue
        st[0] -= tokens[key]
        on_dev[key] = False
        p = parent[key]
        pe = p >= 0 and exists[p]
        if pe:
            ch_dev[p] -= 1
        if on_host[key]:
            if ch[key] == 0:
                heapq.heappush(hheap, (last[key] << _SHIFT) | key)
        else:
            _delete(key, exists, parent, last, on_dev, on_host, ch, hheap)
        if pe and on_dev[p] and ch_dev[p] == 0:
            heapq.heappush(heap, (last[p] << _SHIFT) | p)
    for e in skipped:
        heapq.heappush(heap, e)


@_njit
def _touch(key: Any, clock: Any, last: Any, on_dev: Any, on_host: Any, ch_dev: Any, ch: Any, heap: Any,
           hheap: Any) -> None:  # pragma: no cover - compiled
    last[key] = clock
    if on_dev[key] and ch_dev[key] == 0:
        heapq.heappush(heap, (np.int64(clock) << _SHIFT) | key)
    if on_host[key] and not on_dev[key] and ch[key] == 0:
        heapq.heappush(hheap, (np.int64(clock) << _SHIFT) | key)


@_njit
def _replay(codes: Any, off: Any, length: Any, B: Any, n_codes: Any, dev_cap: Any, host_cap: Any,
            wt_threshold: Any, load_back: Any, dev_out: Any, host_out: Any, st: Any) -> None:
    # pragma: no cover - compiled
    exists = np.zeros(n_codes, dtype=np.bool_)
    parent = np.full(n_codes, -1, dtype=np.int64)
    tokens = np.zeros(n_codes, dtype=np.int64)
    last = np.zeros(n_codes, dtype=np.int64)
    on_dev = np.zeros(n_codes, dtype=np.bool_)
    on_host = np.zeros(n_codes, dtype=np.bool_)
    hits = np.zeros(n_codes, dtype=np.int64)
    ch_dev = np.zeros(n_codes, dtype=np.int64)
    ch = np.zeros(n_codes, dtype=np.int64)
    lockstamp = np.zeros(n_codes, dtype=np.int64)
    heap = [np.int64(0)]
    heap.pop()
    hheap = [np.int64(0)]
    hheap.pop()
    longest = 0
    for i in range(len(length)):
        if off[i + 1] - off[i] > longest:
            longest = off[i + 1] - off[i]
    want = np.zeros(longest + 1, dtype=np.int64)
    path = np.zeros(longest + 1, dtype=np.int64)
    locked = np.zeros(2 * longest + 2, dtype=np.int64)
    load = np.zeros(longest + 1, dtype=np.int64)
    clock = 0
    for i in range(len(length)):
        clock += 1
        L = length[i]
        a = off[i]
        n = 0
        for j in range(off[i + 1] - a):
            w = L - j * B
            if w <= 0:
                break
            want[n] = B if B < w else w
            n += 1
        dev = 0
        host = 0
        j = 0
        npath = 0
        while j < n and exists[codes[a + j]] and on_dev[codes[a + j]]:
            c = codes[a + j]
            got = tokens[c] if tokens[c] < want[j] else want[j]
            dev += got
            path[npath] = c
            npath += 1
            j += 1
            if got < want[j - 1]:
                break
        k = j
        nload = 0
        if host_cap > 0 and (npath == 0 or tokens[path[npath - 1]] >= want[npath - 1]):
            while k < n and exists[codes[a + k]] and on_host[codes[a + k]] and not on_dev[codes[a + k]]:
                c = codes[a + k]
                load[nload] = c
                nload += 1
                got = tokens[c] if tokens[c] < want[k] else want[k]
                host += got
                k += 1
                if got < want[k - 1]:
                    break
        if nload > 0:
            s = 0
            for q in range(nload):
                s += tokens[load[q]]
            if s < load_back:
                nload = 0
                host = 0
        nlocked = 0
        for q in range(npath):
            c = path[q]
            if lockstamp[c] != clock:
                lockstamp[c] = clock
                locked[nlocked] = c
                nlocked += 1
        if nload > 0:
            need = 0
            for q in range(nload):
                need += tokens[load[q]]
            _evict_device(need, dev_cap, st, clock, lockstamp, exists, parent, tokens, last, on_dev, on_host,
                          ch_dev, ch, heap, hheap)
            if st[0] + need > dev_cap:
                nload = 0
                host = 0
            else:
                for q in range(nload):
                    x = load[q]
                    on_dev[x] = True
                    st[0] += tokens[x]
                    p = parent[x]
                    if p >= 0 and exists[p]:
                        ch_dev[p] += 1
                    if lockstamp[x] != clock:
                        lockstamp[x] = clock
                        locked[nlocked] = x
                        nlocked += 1
                    path[npath] = x
                    npath += 1
                st[3] += need
        for q in range(npath):
            x = path[q]
            hits[x] += 1
            _touch(x, clock, last, on_dev, on_host, ch_dev, ch, heap, hheap)
        par = path[npath - 1] if npath > 0 else np.int64(-1)
        for q in range(npath, n):
            key = codes[a + q]
            tok = want[q]
            _evict_device(tok, dev_cap, st, clock, lockstamp, exists, parent, tokens, last, on_dev, on_host,
                          ch_dev, ch, heap, hheap)
            if st[0] + tok > dev_cap:
                break
            pe = par >= 0 and exists[par]
            if exists[key]:
                if on_dev[key]:
                    grow = tok - tokens[key]
                    if grow > 0:
                        tokens[key] += grow
                        st[0] += grow
                else:
                    on_dev[key] = True
                    if tok > tokens[key]:
                        tokens[key] = tok
                    st[0] += tokens[key]
                    if pe:
                        ch_dev[par] += 1
            else:
                exists[key] = True
                parent[key] = par
                tokens[key] = tok
                last[key] = 0
                on_dev[key] = True
                on_host[key] = False
                hits[key] = 0
                ch_dev[key] = 0
                ch[key] = 0
                st[0] += tok
                if pe:
                    ch_dev[par] += 1
                    ch[par] += 1
            hits[key] += 1
            if lockstamp[key] != clock:
                lockstamp[key] = clock
                locked[nlocked] = key
                nlocked += 1
            _touch(key, clock, last, on_dev, on_host, ch_dev, ch, heap, hheap)
            par = key
        for q in range(nlocked):
            x = locked[q]
            if exists[x] and hits[x] >= wt_threshold:
                # SglangRadixCache._backup
                if on_host[x] or host_cap == 0:
                    continue
                if not _evict_host(tokens[x], host_cap, st, exists, parent, tokens, last, on_dev, on_host, ch, hheap):
                    continue
                on_host[x] = True
                st[1] += tokens[x]
                st[2] += tokens[x]
        for q in range(nlocked):
            x = locked[q]
            if exists[x]:
                _touch(x, clock, last, on_dev, on_host, ch_dev, ch, heap, hheap)
        cap = L - 1 if L > 1 else 0
        over = dev + host - cap
        if over > 0:
            cut = over if over < host else host
            host -= cut
            dev -= over - cut
        dev_out[i] = dev
        host_out[i] = host


def replay_compiled(trace: HashedTrace, cache: Any) -> tuple[np.ndarray, np.ndarray]:
    """``kvgate.engines.sglang.cache.replay`` on a fresh ``cache``, compiled; the cache's
    counters (``device_used``, ``host_used``, ``stored_tokens``, ``loaded_tokens``,
    the clock) are left as the Python model leaves them (its nodes are not built)."""
    ids = np.asarray(trace.ids, dtype=np.int64).reshape(-1)
    if len(ids):
        _, codes = np.unique(ids, return_inverse=True)
        codes = codes.astype(np.int64).reshape(-1)
        n_codes = int(codes.max()) + 1
    else:
        codes, n_codes = np.zeros(0, dtype=np.int64), 0
    if n_codes >= 1 << 31 or trace.n_requests >= 1 << 31:
        raise ValueError("more than 2^31 distinct blocks or requests")  # pragma: no cover
    n = trace.n_requests
    dev = np.zeros(n, dtype=np.int64)
    host = np.zeros(n, dtype=np.int64)
    st = np.zeros(4, dtype=np.int64)
    _replay(codes, np.asarray(trace.offsets, dtype=np.int64), np.asarray(trace.input_length, dtype=np.int64),
            int(trace.block_tokens), n_codes, int(cache.device_tokens), int(cache.host_tokens),
            int(cache.write_through_threshold), int(cache.load_back_threshold), dev, host, st)
    cache.device_used, cache.host_used = int(st[0]), int(st[1])
    cache.stored_tokens, cache.loaded_tokens = int(st[2]), int(st[3])
    cache._clock = n
    return dev, host
