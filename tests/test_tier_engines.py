"""vLLM's block pool + CPU offload (kvgate.engines.vllm.cache) and SGLang's radix cache + HiCache
(kvgate.engines.sglang.cache), worked by hand on small traces."""

from __future__ import annotations

from kvgate.engines.sglang import cache as sm
from kvgate.engines.vllm import cache as vm
from kvgate.tier.lru import simulate_lru
from kvgate.tier.traces import HashedTrace

# trace blocks of 32 tokens; vLLM blocks of 16: trace block h is engine blocks (h, 0), (h, 1)
REQS = [(64, [1, 2]), (64, [1, 3]), (32, [2]), (64, [1, 3])]


def test_vllm_device_pool_by_hand():
    t = HashedTrace.from_lists(REQS, 32)
    # 6 blocks. r0 fills 4, freed tail first: LRU order (2,1) (2,0) (1,1) (1,0).
    # r1 hits (1,0) (1,1) = 32 tokens, takes the 2 spare blocks. r2 [2], 32 tokens: at most 31 from the cache
    # (num_tokens - 1) -> one block, 16 tokens; its second block evicts the LRU (2,1). r3 hits (1,0) (1,1) (3,0):
    # 48 (its last block is recomputed, num_tokens - 1).
    d, h = vm.replay(t, vm.VllmPrefixCache(32, 16, 6, 0))
    assert d.tolist() == [0, 32, 16, 48] and h.tolist() == [0, 0, 0, 0]
    # the plain LRU counts whole trace blocks up to the input length: r2 32, r3 64
    assert simulate_lru(t, None)[1].tolist() == [0, 32, 32, 64]


def test_vllm_cpu_offload_by_hand():
    t = HashedTrace.from_lists(REQS, 32)
    # 4 blocks: r1 evicts (2,1) (2,0); r2 finds (2,0) only in the CPU tier (stored by r0): 16 from the host;
    # r2's 2 blocks evict (3,1) (3,0); r3 hits (1,0) (1,1) on the device and (3,0) in the CPU tier.
    d, h = vm.replay(t, vm.VllmPrefixCache(32, 16, 4, 0))
    assert d.tolist() == [0, 32, 0, 32] and h.tolist() == [0, 0, 0, 0]
    c = vm.VllmPrefixCache(32, 16, 4, 100)
    d, h = vm.replay(t, c)
    assert d.tolist() == [0, 32, 0, 32] and h.tolist() == [0, 0, 16, 16]
    # write-through: r0 stores 4 blocks, r1 (3,0) (3,1), r2 and r3 nothing new
    assert c.stored_blocks == 6


def test_vllm_request_longer_than_the_pool_is_not_admitted():
    t = HashedTrace.from_lists([(64, [1, 2]), (64, [1, 2])], 32)
    c = vm.VllmPrefixCache(32, 16, 3, 0)
    d, _ = vm.replay(t, c)
    assert d.tolist() == [0, 0] and c.too_long == [0, 1]


def test_sglang_radix_and_hicache_by_hand():
    t = HashedTrace.from_lists(REQS, 32)
    # 64 device tokens (2 nodes). r1 hits node 1 (32); inserting 3 evicts leaf 2. r2 misses; inserting 2
    # evicts leaf 3. r3 hits node 1 only.
    d, h = sm.replay(t, sm.SglangRadixCache(64, 0))
    assert d.tolist() == [0, 32, 0, 32] and h.tolist() == [0, 0, 0, 0]
    # write-through host pool: evicted nodes stay on the host and are loaded back (>= 10 tokens); at most
    # input_len - 1 tokens come from the cache: r2 31, r3 32 + 31.
    c = sm.SglangRadixCache(64, 1000)
    d, h = sm.replay(t, c)
    assert d.tolist() == [0, 32, 0, 32] and h.tolist() == [0, 0, 31, 31]
    assert c.stored_tokens == 3 * 32  # nodes 1, 2, 3 each copied once
