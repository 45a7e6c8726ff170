"""SGLang's radix cache with LRU eviction and HiCache's host tier, replayed over a hashed
trace one request at a time.

Read from sgl-project/sglang, ``python/sglang/srt/mem_cache/``:

- ``radix_cache.py`` ``RadixCache``: prompts (and their generated tokens) are inserted
  into a radix tree when a request finishes; a request's hit is its longest prefix in the
  tree (``match_prefix``), and every node on the path gets ``last_access_time`` = now;
  ``evict`` pops device leaves least recently accessed first (a heap), skipping locked
  ones (the running request's path), and a parent whose children are all gone becomes a
  leaf in turn.
- ``hiradix_cache.py`` (0050c575) ``HiRadixCache``: with ``--hicache-write-policy
  write_through`` a node is copied to the host pool on its first hit (``inc_hit_count``,
  ``write_through_threshold`` 1; 3 for ``write_through_selective``); evicting a backed-up
  node from the device keeps it in the tree on the host (``_evict_backuped``), a node
  without a backup is deleted (``_evict_regular``); the host pool evicts its LRU leaves
  among nodes no longer on the device (``evict_host``); a match that ends on host-only
  nodes loads them back, all or nothing, if they hold at least ``load_back_threshold``
  (10) tokens (``load_back``). ``schedule_batch.Req.init_next_round_input``: at most
  ``input_len − 1`` tokens are taken from the cache (one is computed for the logits). Host size: ``--hicache-size`` GB, or ``--hicache-ratio``
  (default 2) × the device pool.

Granularity: the radix tree splits at any token; a hashed trace only knows its blocks, so
a node here is one trace block (its tokens: the most any request wrote of it), and a hit
counts a block's tokens up to the request's own (a request whose last block is partial
matches part of it). Generated tokens (``serve(..., output_tokens=)``) are inserted as a
private node under the prompt; ``kvgate tier`` replays prompts only.
Device and host capacities are in tokens (``max_total_num_tokens`` and the host pool's);
a capacity in bytes becomes tokens at the bytes SGLang's pool stores per token
(:func:`pool_geometry`: DeepSeek sparse attention's DSA rows and indexer keys).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvgate.engines.sglang.pool import SGLang
from kvgate.geometry import KVGeometry
from kvgate.tier import progress
from kvgate.tier.traces import HashedTrace

_ROOT = -1


@dataclass
class _Node:
    parent: int
    tokens: int
    last: int = 0
    on_device: bool = True
    on_host: bool = False
    hits: int = 0
    children_device: int = 0  # children with a device copy
    children: int = 0  # children in the tree at all


@dataclass
class SglangRadixCache:
    """Device radix cache (``device_tokens``) and HiCache host pool (``host_tokens``, 0: none)."""

    device_tokens: int
    host_tokens: int = 0
    write_through_threshold: int = 1
    load_back_threshold: int = 10
    nodes: dict[Any, _Node] = field(default_factory=dict)
    device_used: int = 0
    host_used: int = 0
    stored_tokens: int = 0
    loaded_tokens: int = 0
    _clock: int = 0
    _gen: int = 0
    _heap: list[tuple[int, Any]] = field(default_factory=list)
    _hheap: list[tuple[int, Any]] = field(default_factory=list)

    def _touch(self, key: int) -> None:
        n = self.nodes[key]
        n.last = self._clock
        if n.on_device and n.children_device == 0:
            heapq.heappush(self._heap, (n.last, key))
        if n.on_host and not n.on_device and n.children == 0:
            heapq.heappush(self._hheap, (n.last, key))

    def _evict_device(self, need: int, locked: dict[int, None]) -> None:
        skipped = []
        while self.device_used + need > self.device_tokens and self._heap:
            last, key = heapq.heappop(self._heap)
            n = self.nodes.get(key)
            if n is None or not n.on_device or n.children_device or n.last != last:
                continue
            if key in locked:
                skipped.append((last, key))
                continue
            self.device_used -= n.tokens
            n.on_device = False
            p = self.nodes.get(n.parent)
            if p is not None:
                p.children_device -= 1
            if n.on_host:
                if n.children == 0:
                    heapq.heappush(self._hheap, (n.last, key))
            else:
                self._delete(key)
            if p is not None and p.on_device and p.children_device == 0:
                heapq.heappush(self._heap, (p.last, n.parent))
        for item in skipped:
            heapq.heappush(self._heap, item)

    def _delete(self, key: int) -> None:
        n = self.nodes.pop(key)
        p = self.nodes.get(n.parent)
        if p is not None:
            p.children -= 1
            if p.children == 0 and p.on_host and not p.on_device:
                heapq.heappush(self._hheap, (p.last, n.parent))

    def _evict_host(self, need: int) -> bool:
        while self.host_used + need > self.host_tokens and self._hheap:
            last, key = heapq.heappop(self._hheap)
            n = self.nodes.get(key)
            if n is None or n.on_device or not n.on_host or n.children or n.last != last:
                continue
            self.host_used -= n.tokens
            n.on_host = False
            self._delete(key)
        return self.host_used + need <= self.host_tokens

    def _backup(self, key: int) -> None:
        n = self.nodes[key]
        if n.on_host or not self.host_tokens:
            return
        if not self._evict_host(n.tokens):
            return
        n.on_host = True
        self.host_used += n.tokens
        self.stored_tokens += n.tokens

    def serve(self, ids: list[int], n_tokens: int, block_tokens: int, output_tokens: int = 0) -> tuple[int, int]:
        """Serve one request; returns ``(device hit tokens, host hit tokens)``."""
        self._clock += 1
        want = [min(block_tokens, n_tokens - j * block_tokens) for j in range(len(ids))]
        want = [w for w in want if w > 0]
        ids = ids[: len(want)]
        dev = host = 0
        j = 0
        path: list[int] = []
        # device run, then the host run behind it
        while j < len(ids) and ids[j] in self.nodes and self.nodes[ids[j]].on_device:
            got = min(self.nodes[ids[j]].tokens, want[j])
            dev += got
            path.append(ids[j])
            j += 1
            if got < want[j - 1]:
                break
        k = j
        load = []
        if self.host_tokens and (not path or self.nodes[path[-1]].tokens >= want[len(path) - 1]):
            while k < len(ids) and ids[k] in self.nodes and self.nodes[ids[k]].on_host \
                    and not self.nodes[ids[k]].on_device:  # fmt: skip
                load.append(ids[k])
                got = min(self.nodes[ids[k]].tokens, want[k])
                host += got
                k += 1
                if got < want[k - 1]:
                    break
        if load and sum(self.nodes[x].tokens for x in load) < self.load_back_threshold:
            load, host = [], 0
        # the locked nodes in the order they are locked (the path from the root): the order
        # they are backed up in below (SGLang writes a request's nodes through along its path)
        locked = dict.fromkeys(path)
        if load:
            need = sum(self.nodes[x].tokens for x in load)
            self._evict_device(need, locked)
            if self.device_used + need > self.device_tokens:
                load, host = [], 0
            else:
                for x in load:
                    hit = self.nodes[x]
                    hit.on_device = True
                    self.device_used += hit.tokens
                    p = self.nodes.get(hit.parent)
                    if p is not None:
                        p.children_device += 1
                    locked[x] = None
                    path.append(x)
                self.loaded_tokens += need
        for x in path:
            self.nodes[x].hits += 1
            self._touch(x)
        # insert the rest of the prompt (and the generated tokens) on the device
        parent = path[-1] if path else _ROOT
        rest = list(zip(ids[len(path):], want[len(path):]))
        if output_tokens:
            self._gen += 1
            rest.append((-(self._gen + 1), output_tokens))
        for key, tok in rest:
            self._evict_device(tok, locked)
            if self.device_used + tok > self.device_tokens:
                break  # does not fit: the rest is not cached
            n = self.nodes.get(key)
            if n is not None:  # present (host-only, or a shorter copy): refresh on the device
                if n.on_device:
                    grow = max(tok - n.tokens, 0)
                    n.tokens += grow
                    self.device_used += grow
                else:
                    n.on_device = True
                    n.tokens = max(n.tokens, tok)
                    self.device_used += n.tokens
                    if parent in self.nodes:
                        self.nodes[parent].children_device += 1
            else:
                self.nodes[key] = _Node(parent, tok)
                self.device_used += tok
                if parent in self.nodes:
                    self.nodes[parent].children_device += 1
                    self.nodes[parent].children += 1
            self.nodes[key].hits += 1
            locked[key] = None
            self._touch(key)
            parent = key
        for x in list(locked):
            if x in self.nodes and self.nodes[x].hits >= self.write_through_threshold:
                self._backup(x)
        for x in locked:
            if x in self.nodes:
                self._touch(x)
        # schedule_batch.Req.init_next_round_input: max_prefix_len = input_len - 1 (one token computed)
        over = dev + host - max(n_tokens - 1, 0)
        if over > 0:
            cut = min(over, host)
            host -= cut
            dev -= over - cut
        return dev, host


DEFAULT_HICACHE_RATIO = 2.0  # arg_groups/hicache_hook.py (0.5.23): 2.0 in cache mode


def host_pool_tokens(device_tokens: int, bytes_per_token: int, *, ratio: float | None = None,
                     size_gb: int = 0, page_size: int = 1) -> int:
    """Tokens of one rank's HiCache host pool, as SGLang 0.5.23 sizes it
    (``sglang/srt/mem_cache/pool_host/base.py``, ``HostKVCache.__init__``)::

        if host_size > 0:
            self.size = sync_fixed_hicache_size(
                int(host_size * 1e9 // self.size_per_token), host_size)
        else:
            self.size = int(device_capacity_tokens * host_to_device_ratio)
        # Reserve the padding page only when sizing an independent pool.
        self.page_num = self.size // self.page_size + 1
        self.size = self.page_num * self.page_size

    ``--hicache-size`` is "The size of host KV cache memory pool in gigabytes. Overrides
    --hicache-ratio in either host memory mode." (``arg_groups/fields/memory.py``: an int,
    default 0), so GB = 10^9 B over one rank's bytes per token (each TP rank builds its
    own pool: the size is per rank); ``--hicache-ratio`` is "The ratio of the size of host
    KV cache memory pool to the size of device pool" (default 2.0 in cache mode). The
    padding page is not handed out, so the usable tokens are ``size // page × page``
    (``sync_fixed_hicache_size`` only takes the minimum over pipeline stages: one stage here).
    """
    if size_gb > 0:
        size = int(size_gb * 10**9 // bytes_per_token)
    else:
        size = int(device_tokens * (DEFAULT_HICACHE_RATIO if ratio is None else ratio))
    return size // page_size * page_size


def pool_geometry(geo: KVGeometry) -> KVGeometry:
    """``geo``'s model, KV formats and TP laid out as SGLang's token pool
    (:class:`kvgate.engines.sglang.pool.SGLang`): its ``bytes_per_token()`` is what one token
    costs there (GLM-5 fp8: 61,464 B; equal to ``geo``'s for models without DSA layers).

    Raises:
        GeometryError: a KV format SGLang refuses for a DSA model.
    """
    return KVGeometry(geo.model, geo.fmt_k, kv_format_v=geo.fmt_v, tp=geo.tp, layout=SGLang())


def replay(trace: HashedTrace, cache: SglangRadixCache, *, compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-request ``(device hit tokens, host hit tokens)`` (int64 ``[n]`` each); on a fresh
    cache run compiled (:mod:`kvgate.engines.sglang.cache_fast`) when numba imports, unless
    ``compiled`` is False."""
    from kvgate.tier import kernel

    if compiled is not False and kernel.HAVE_NUMBA and not cache.nodes and cache._clock == 0:
        from kvgate.engines.sglang import cache_fast

        return cache_fast.replay_compiled(trace, cache)
    ids = trace.ids.tolist()
    off = trace.offsets.tolist()
    dev = np.zeros(trace.n_requests, dtype=np.int64)
    host = np.zeros(trace.n_requests, dtype=np.int64)
    for i in range(trace.n_requests):
        dev[i], host[i] = cache.serve(ids[off[i] : off[i + 1]], int(trace.input_length[i]), trace.block_tokens)
    return dev, host


def tier_hits(trace: HashedTrace, device: dict[str, Any], *, bytes_per_token: int, device_blocks: int,
              device_bytes: int | None, host_bytes: int, engine_block_size: int | None,
              prompt: int) -> tuple[int, int, int, str]:
    """``kvgate tier --cache-model sglang``: the radix cache replayed once without and once
    with HiCache's host pool. Returns (device hits, device + host hits, tokens stored on the
    host, the basis of the host boundary); ``device`` (the answer's device part) gains the
    device pool in tokens (``device_bytes // bytes per token`` when given in bytes)."""
    dev_tok = device_blocks * trace.block_tokens if device_bytes is None else device_bytes // bytes_per_token
    progress.stage("SGLang radix cache: device alone (1 of 2 replays)")
    d0, _ = replay(trace, SglangRadixCache(dev_tok, 0))
    progress.stage("SGLang radix cache: with the HiCache host pool (2 of 2 replays)")
    tiered_s = SglangRadixCache(dev_tok, host_bytes // bytes_per_token)
    d1, h1 = replay(trace, tiered_s)
    dev, both, stored = int(d0.sum()), int(d1.sum() + h1.sum()), tiered_s.stored_tokens
    device.update({"device_tokens": dev_tok, "hit_tokens": dev, "hit_share": dev / prompt if prompt else None,
                   "lru_hit_tokens": device["hit_tokens"], "basis": BASIS})  # fmt: skip
    return dev, both, stored, "the LRU curve (an estimate for sglang: replaying every host size is one replay each)"


#: what the device figures of ``kvgate tier --cache-model sglang`` are
BASIS = "SGLang's radix cache (kvgate.engines.sglang.cache)"


def tier_device(trace: HashedTrace, *, bytes_per_token: int, device_blocks: int, device_bytes: int | None,
                engine_block_size: int | None, prompt: int) -> dict[str, Any]:
    """``kvgate tier --cache-model sglang`` with no host tier: the radix cache's own device
    hits (the answer's ``device`` keys: the pool in tokens, hits, share, the basis)."""
    dev_tok = device_blocks * trace.block_tokens if device_bytes is None else device_bytes // bytes_per_token
    progress.stage("SGLang radix cache: device alone")
    d0, _ = replay(trace, SglangRadixCache(dev_tok, 0))
    dev = int(d0.sum())
    return {"device_tokens": dev_tok, "hit_tokens": dev, "hit_share": dev / prompt if prompt else None,
            "basis": BASIS}  # fmt: skip
