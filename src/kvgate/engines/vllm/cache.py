"""vLLM's prefix cache (automatic prefix caching) and its native CPU offload tier,
replayed over a hashed trace, one request at a time.

Read from vllm-project/vllm (main, the commits named per file):

- ``vllm/v1/core/kv_cache_manager.py`` (003df296) ``KVCacheManager.get_computed_blocks``:
  the hit is the longest leading run of the request's *full* blocks whose hash is cached
  (``find_longest_cache_hit``), at most ``num_tokens − 1`` tokens ("we must recompute the
  last token to obtain logits"), in whole blocks.
- ``vllm/v1/core/block_pool.py`` / ``kv_cache_utils.FreeKVCacheBlockQueue``: free blocks
  wait in an LRU queue, still holding their hash until a new allocation pops them from
  the front (eviction); a hit takes its block out of the queue (``touch``); blocks of a
  running request are pinned (out of the queue).
- ``single_type_kv_cache_manager.SingleTypeKVCacheManager.free``: a finished request's
  blocks are freed in reverse order, so its tail blocks are evicted first.
- ``vllm/v1/kv_offload/cpu/manager.py`` (0358cbba) ``CPUOffloadingManager`` with
  ``cpu/policies/lru.py`` (0c2bbc47) ``LRUCachePolicy``: blocks are stored once (a block
  already held is skipped), evicting the least recently used; a lookup hit is
  ``touch``ed (in reverse, so the request's first block ends most recent). The
  offloading connector looks the CPU tier up for the blocks after the device hit, loads
  the consecutive run it holds into device blocks, and stores every new full block a
  request computed (write-through: ``stored_blocks``).

Units: engine blocks of ``block_size`` tokens (``--block-size``, default 16); a trace
block of B tokens is B / block_size engine blocks (:func:`kvgate.tier.traces.
engine_blocks_per_trace_block`), engine block k of trace block id h is keyed ``(h, k)``
(the trace's ids already name the whole prefix). A request writes its prompt and, when
:meth:`VllmPrefixCache.serve` is given ``output_tokens``, its generated tokens, whose blocks
are cached too but never named by a later prompt; ``kvgate tier`` replays prompts only (a
hashed trace's reader keeps no output lengths), so generated blocks take no pool space there. A request needing more blocks than the pool
is not admitted by vLLM: it is counted with no hit and listed in ``too_long``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvgate.engines.vllm.pool import DEFAULT_BLOCK_SIZE
from kvgate.tier import progress
from kvgate.tier.traces import HashedTrace, engine_blocks_per_trace_block

_GEN = -1  # trace id of generated-token blocks (never named by a prompt)


@dataclass
class VllmPrefixCache:
    """The device block pool and (``cpu_blocks`` > 0) the CPU offload tier.

    Args:
        trace_block_tokens: B, tokens per trace block.
        block_size: vLLM's ``--block-size``.
        num_gpu_blocks: blocks of the device pool (vLLM's ``num_gpu_blocks``).
        cpu_blocks: blocks of the CPU tier (``--kv-offloading-size`` / block bytes); 0: none.
    """

    trace_block_tokens: int
    block_size: int = DEFAULT_BLOCK_SIZE
    num_gpu_blocks: int = 0
    cpu_blocks: int = 0
    free: OrderedDict[Any, None] = field(default_factory=OrderedDict)  # hash -> None, LRU first
    cpu: OrderedDict[Any, None] = field(default_factory=OrderedDict)
    stored_blocks: int = 0
    loaded_blocks: int = 0
    too_long: list[int] = field(default_factory=list)
    _spare: int = -1  # free blocks holding no cached hash (fresh, or a duplicate's)
    _gen: int = 0

    def __post_init__(self) -> None:
        self.per = engine_blocks_per_trace_block(self.trace_block_tokens, self.block_size)
        self._spare = self.num_gpu_blocks

    def _keys(self, ids: list[int], n_tokens: int) -> list[tuple[Any, int]]:
        """Hashes of the prompt's full engine blocks."""
        full = n_tokens // self.block_size
        names: list[Any] = ids
        if len(set(ids)) < len(ids):
            # an id repeated inside one prompt breaks the trace's rule (an id names its whole
            # prefix); vLLM chains each block's hash to its parent's (kv_cache_utils.hash_block_tokens),
            # so from the first repeat on each block is named by the chain: the same in every prompt
            # with the same ids up to it, never equal to a block with another prefix
            seen: set[int] = set()
            names = []
            chained: Any = None
            for h in ids:
                if chained is None and h in seen:
                    chained = ("chain", hash((names[-1], h)))
                elif chained is not None:
                    chained = ("chain", hash((chained, h)))
                seen.add(h)
                names.append(h if chained is None else chained)
        return [(names[j // self.per], j % self.per) for j in range(min(full, len(ids) * self.per))]

    def serve(self, i: int, ids: list[int], n_tokens: int, output_tokens: int = 0) -> tuple[int, int]:
        """Serve request ``i``; returns ``(device hit tokens, CPU-tier hit tokens)``."""
        keys = self._keys(ids, n_tokens)
        cap = max(n_tokens - 1, 0) // self.block_size
        total_blocks = -(-(n_tokens + output_tokens) // self.block_size)
        if total_blocks > self.num_gpu_blocks:
            self.too_long.append(i)
            return 0, 0
        g = 0
        while g < min(len(keys), cap) and keys[g] in self.free:
            g += 1
        c = 0
        if self.cpu_blocks:
            while g + c < min(len(keys), cap) and keys[g + c] in self.cpu:
                c += 1
            for k in reversed(keys[g : g + c]):  # LRUCachePolicy.touch
                self.cpu.move_to_end(k)
        # pin the device hits, allocate the rest (loaded CPU blocks take device blocks too)
        for k in keys[:g]:
            del self.free[k]
        new = total_blocks - g
        spare = min(new, self._spare)
        self._spare -= spare
        for _ in range(new - spare):
            self.free.popitem(last=False)  # evict the least recently freed block
        req_blocks = list(keys[: min(len(keys), total_blocks)])
        while len(req_blocks) < total_blocks:  # partial prompt block and generated tokens: unique
            self._gen += 1
            req_blocks.append((_GEN, self._gen))
        self.loaded_blocks += c
        if self.cpu_blocks:
            full = (n_tokens + output_tokens) // self.block_size
            for k in req_blocks[:full]:
                if k in self.cpu:
                    continue
                if len(self.cpu) >= self.cpu_blocks:
                    self.cpu.popitem(last=False)
                self.cpu[k] = None
                self.stored_blocks += 1
        for k in reversed(req_blocks):  # free in reverse: the tail is evicted first
            if k in self.free:  # another free block already holds this hash: this one holds none useful
                self._spare += 1
            else:
                self.free[k] = None
        return g * self.block_size, c * self.block_size


def replay(trace: HashedTrace, cache: VllmPrefixCache, *, with_output: bool = False,
           output_tokens: np.ndarray | None = None, compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-request ``(device hit tokens, CPU hit tokens)`` (int64 ``[n]`` each); prompts
    only on a fresh cache run compiled (:mod:`kvgate.engines.vllm.cache_fast`) when numba imports,
    unless ``compiled`` is False."""
    from kvgate.engines.vllm import cache_fast as vllm_fast
    from kvgate.tier import kernel

    fresh = not cache.free and not cache.cpu and cache._spare == cache.num_gpu_blocks
    if compiled is not False and kernel.HAVE_NUMBA and fresh and not with_output:
        return vllm_fast.replay_compiled(trace, cache)
    ids = trace.ids.tolist()
    off = trace.offsets.tolist()
    dev = np.zeros(trace.n_requests, dtype=np.int64)
    cpu = np.zeros(trace.n_requests, dtype=np.int64)
    for i in range(trace.n_requests):
        out = int(output_tokens[i]) if (with_output and output_tokens is not None) else 0
        dev[i], cpu[i] = cache.serve(i, ids[off[i] : off[i + 1]], int(trace.input_length[i]), out)
    return dev, cpu


def tier_hits(trace: HashedTrace, device: dict[str, Any], *, bytes_per_token: int, device_blocks: int,
              device_bytes: int | None, host_bytes: int, engine_block_size: int | None,
              prompt: int) -> tuple[int, int, int, str]:
    """``kvgate tier --cache-model vllm``: the prefix cache replayed once without and once
    with the CPU offload tier. Returns (device hits, device + host hits, tokens stored on
    the host, the basis of the host boundary); ``device`` (the answer's device part) gains
    vLLM's blocks (``device_bytes // (block_size × bytes per token)`` when given in bytes);
    ``engine_block_size`` ``None``: vLLM's default ``--block-size``."""
    B, bs = trace.block_tokens, DEFAULT_BLOCK_SIZE if engine_block_size is None else engine_block_size
    per_block = bs * bytes_per_token
    gpu_blocks = device_blocks * B // bs if device_bytes is None else device_bytes // per_block
    progress.stage("vLLM prefix cache: device alone (1 of 2 replays)")
    d0, _ = replay(trace, VllmPrefixCache(B, bs, gpu_blocks, 0))
    progress.stage("vLLM prefix cache: with the CPU offload tier (2 of 2 replays)")
    tiered_v = VllmPrefixCache(B, bs, gpu_blocks, host_bytes // per_block)
    d1, h1 = replay(trace, tiered_v)
    dev, both, stored = int(d0.sum()), int(d1.sum() + h1.sum()), tiered_v.stored_blocks * bs
    device.update({"engine_blocks": gpu_blocks, "block_size": bs, "hit_tokens": dev,
                   "hit_share": dev / prompt if prompt else None, "lru_hit_tokens": device["hit_tokens"],
                   "too_long_requests": len(tiered_v.too_long), "basis": BASIS})  # fmt: skip
    return dev, both, stored, "the LRU curve (an estimate for vllm: replaying every host size is one replay each)"


#: what the device figures of ``kvgate tier --cache-model vllm`` are
BASIS = "vLLM's prefix cache (kvgate.engines.vllm.cache)"


def tier_device(trace: HashedTrace, *, bytes_per_token: int, device_blocks: int, device_bytes: int | None,
                engine_block_size: int | None, prompt: int) -> dict[str, Any]:
    """``kvgate tier --cache-model vllm`` with no host tier: the prefix cache's own device
    hits (the answer's ``device`` keys: vLLM's blocks, hits, share, requests too long for
    the pool, the basis), not plain LRU under vLLM's name."""
    bs = DEFAULT_BLOCK_SIZE if engine_block_size is None else engine_block_size
    per_block = bs * bytes_per_token
    gpu_blocks = device_blocks * trace.block_tokens // bs if device_bytes is None else device_bytes // per_block
    cache = VllmPrefixCache(trace.block_tokens, bs, gpu_blocks, 0)
    progress.stage("vLLM prefix cache: device alone")
    d0, _ = replay(trace, cache)
    dev = int(d0.sum())
    return {"engine_blocks": gpu_blocks, "block_size": bs, "hit_tokens": dev,
            "hit_share": dev / prompt if prompt else None, "too_long_requests": len(cache.too_long),
            "basis": BASIS}  # fmt: skip
