""":class:`kvgate.engines.vllm.cache.VllmPrefixCache` compiled (numba): the same rules, request by
request, on integer block keys instead of tuples in ``OrderedDict`` s.

Engine block ``k`` of the trace block named ``c`` (a dense code, :func:`_names`) is key
``c × per + k``; the blocks a request writes past its named ones (a partial prompt block)
take fresh keys above those. The free queue and the CPU tier are doubly linked lists over
the keys (``move_to_end``, ``popitem(last=False)``, ``del`` in O(1), as the ``OrderedDict``
s do), so every step of :meth:`~kvgate.engines.vllm.cache.VllmPrefixCache.serve` keeps its order.
Tested equal to the Python model request by request (``tests/test_tier_stream.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvgate.tier import kernel
from kvgate.tier.kernel import _njit
from kvgate.tier.traces import HashedTrace


def _names(trace: HashedTrace) -> tuple[np.ndarray, int]:
    """Dense codes of the trace blocks as the Python model names them: the id, or, from
    an id repeated inside a prompt on, the chain (``VllmPrefixCache._keys``)."""
    ids = np.asarray(trace.ids, dtype=np.int64)
    _, codes = np.unique(ids, return_inverse=True)
    codes = codes.astype(np.int64).reshape(-1)
    n_codes = int(codes.max()) + 1 if len(codes) else 0
    off = trace.offsets
    # requests holding a repeated id: found with one sort of (request, id) pairs
    req = np.repeat(np.arange(trace.n_requests), np.diff(off))
    if len(ids):
        o = np.lexsort((ids, req))
        dup = (req[o][1:] == req[o][:-1]) & (ids[o][1:] == ids[o][:-1])
        rep = np.unique(req[o][1:][dup])
    else:
        rep = np.zeros(0, dtype=np.int64)
    chains: dict[Any, int] = {}
    for i in rep.tolist():
        seen: set[int] = set()
        prev: Any = None
        chained: Any = None
        for q in range(int(off[i]), int(off[i + 1])):
            h = int(ids[q])
            if chained is None and h in seen:
                chained = ("chain", hash((prev, h)))
            elif chained is not None:
                chained = ("chain", hash((chained, h)))
            seen.add(h)
            prev = h
            if chained is not None:
                codes[q] = chains.setdefault(chained, n_codes + len(chains))
    return codes, n_codes + len(chains)


@_njit
def _unlink(k: Any, prv: Any, nxt: Any, inq: Any, ends: Any) -> None:  # pragma: no cover - compiled
    p, n = prv[k], nxt[k]
    if p >= 0:
        nxt[p] = n
    else:
        ends[0] = n
    if n >= 0:
        prv[n] = p
    else:
        ends[1] = p
    inq[k] = False
    ends[2] -= 1


@_njit
def _append(k: Any, prv: Any, nxt: Any, inq: Any, ends: Any) -> None:  # pragma: no cover - compiled
    t = ends[1]
    prv[k] = t
    nxt[k] = -1
    if t >= 0:
        nxt[t] = k
    else:
        ends[0] = k
    ends[1] = k
    inq[k] = True
    ends[2] += 1


@_njit
def _replay(codes: Any, off: Any, length: Any, per: Any, bs: Any, num_gpu: Any, cpu_blocks: Any,
            n_keys: Any, gen0: Any) -> Any:  # pragma: no cover - compiled
    n = len(length)
    dev = np.zeros(n, dtype=np.int64)
    cpu = np.zeros(n, dtype=np.int64)
    too_long = np.zeros(n, dtype=np.bool_)
    fprv = np.full(n_keys, -1, dtype=np.int64)
    fnxt = np.full(n_keys, -1, dtype=np.int64)
    fin = np.zeros(n_keys, dtype=np.bool_)
    fends = np.array([-1, -1, 0], dtype=np.int64)  # head, tail, size
    cprv = np.full(n_keys, -1, dtype=np.int64)
    cnxt = np.full(n_keys, -1, dtype=np.int64)
    cin = np.zeros(n_keys, dtype=np.bool_)
    cends = np.array([-1, -1, 0], dtype=np.int64)
    spare = num_gpu
    gen = gen0
    stored = 0
    loaded = 0
    blocks = np.empty(0, dtype=np.int64)
    for i in range(n):
        L = length[i]
        a = off[i]
        nids = off[i + 1] - a
        full = L // bs
        nkeys = min(full, nids * per)
        cap = max(L - 1, 0) // bs
        total = -(-L // bs)
        if total > num_gpu:
            too_long[i] = True
            continue
        if len(blocks) < total:
            blocks = np.empty(max(total, 2 * len(blocks)), dtype=np.int64)
        nk = min(nkeys, total)
        for j in range(nk):
            blocks[j] = codes[a + j // per] * per + j % per
        for j in range(nk, total):
            blocks[j] = gen
            gen += 1
        lim = min(nkeys, cap)
        g = 0
        while g < lim and fin[blocks[g]]:
            g += 1
        c = 0
        if cpu_blocks > 0:
            while g + c < lim and cin[blocks[g + c]]:
                c += 1
            for j in range(g + c - 1, g - 1, -1):
                k = blocks[j]
                _unlink(k, cprv, cnxt, cin, cends)
                _append(k, cprv, cnxt, cin, cends)
        for j in range(g):
            _unlink(blocks[j], fprv, fnxt, fin, fends)
        new = total - g
        sp = min(new, spare)
        spare -= sp
        for _ in range(new - sp):
            _unlink(fends[0], fprv, fnxt, fin, fends)
        loaded += c
        if cpu_blocks > 0:
            full2 = L // bs
            for j in range(min(full2, total)):
                k = blocks[j]
                if cin[k]:
                    continue
                if cends[2] >= cpu_blocks:
                    _unlink(cends[0], cprv, cnxt, cin, cends)
                _append(k, cprv, cnxt, cin, cends)
                stored += 1
        for j in range(total - 1, -1, -1):
            k = blocks[j]
            if fin[k]:
                spare += 1
            else:
                _append(k, fprv, fnxt, fin, fends)
        dev[i] = g * bs
        cpu[i] = c * bs
    return dev, cpu, too_long, stored, loaded


def replay_compiled(trace: HashedTrace, cache: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`kvgate.engines.vllm.cache.replay` (prompts only) on a fresh ``cache``, compiled; the
    cache's counters (``stored_blocks``, ``loaded_blocks``, ``too_long``) are set as the
    Python model sets them (its queues stay empty)."""
    if not kernel.HAVE_NUMBA:
        raise RuntimeError("numba is not importable")
    codes, n_names = _names(trace)
    per, bs = cache.per, cache.block_size
    length = np.asarray(trace.input_length, dtype=np.int64)
    total = -(-length // bs)
    named = np.minimum(length // bs, np.diff(trace.offsets) * per)
    gen = int(np.maximum(total - named, 0).sum())
    n_keys = n_names * per + gen + 1
    dev, cpu, too_long, stored, loaded = _replay(codes, np.asarray(trace.offsets, dtype=np.int64), length, per, bs,
                                                 cache.num_gpu_blocks, cache.cpu_blocks, n_keys, n_names * per)
    cache.stored_blocks += int(stored)
    cache.loaded_blocks += int(loaded)
    cache.too_long.extend(np.flatnonzero(too_long).tolist())
    return dev, cpu
