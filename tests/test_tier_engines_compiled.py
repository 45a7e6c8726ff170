"""The compiled engine cache models (kvgate.engines.sglang.cache_fast,
kvgate.engines.llamacpp.cache_fast) against the Python models they compile, request by
request, on traces built to reach their corner cases."""

from __future__ import annotations

import numpy as np
import pytest

from kvgate.tier import kernel
from kvgate.tier.traces import HashedTrace, synthetic_hashed

pytestmark = pytest.mark.skipif(not kernel.HAVE_NUMBA, reason="numba not importable here")


def _corner_trace(n: int = 1500, seed: int = 1) -> HashedTrace:
    syn = synthetic_hashed(n, seed=seed, mean_blocks=5, block_tokens=64)
    # partial last blocks, ids repeated inside prompts, prompts longer than their ids, 1-token prompts
    lists = [(max(int(syn.input_length[i]) - (i * 7) % 90, 1), syn.request_ids(i).tolist()) for i in range(n)]
    lists += [(256, [1, 2, 1, 3]), (256, [1, 2, 1, 3]), (256, [1, 1, 1, 1]), (400, [5, 1, 5, 1]), (1, [2]),
              (256, [1, 2, 1, 3]), (70, [1, 2]), (128, [1, 2])]
    return HashedTrace.from_lists(lists, 64)


@pytest.mark.parametrize("device, host", [(64, 0), (640, 0), (640, 100), (640, 700), (6400, 2000), (3000, 90000),
                                          (20000, 0), (128, 64)])
def test_compiled_sglang_model_equals_the_python_model(device, host):
    from kvgate.engines.sglang import cache as sm

    t = _corner_trace()
    a, b = sm.SglangRadixCache(device, host), sm.SglangRadixCache(device, host)
    slow, fast = sm.replay(t, a, compiled=False), sm.replay(t, b)
    assert np.array_equal(slow[0], fast[0]) and np.array_equal(slow[1], fast[1])
    assert (a.device_used, a.host_used, a.stored_tokens, a.loaded_tokens) == \
        (b.device_used, b.host_used, b.stored_tokens, b.loaded_tokens)
    assert slow[0].sum() > 0
    if host > device:  # write-through: only a host pool larger than the device holds host-only nodes
        assert slow[1].sum() > 0


@pytest.mark.parametrize("slots, n_ctx, ram, sps, unified", [
    (1, 0, 0, 0.1, False), (1, 4096, None, 0.1, False), (1, 4096, 3 * 2**20, 0.1, False),
    (4, 16384, 2**22, 0.1, False), (4, 16384, 2**22, 0.1, True), (3, 2048, 2**21, 0.0, False),
    (2, 0, None, 0.5, False), (4, 100_000, 700_000, 0.1, False), (2, 512, 2**24, 0.9, True)])
def test_compiled_llamacpp_model_equals_the_python_model(slots, n_ctx, ram, sps, unified):
    from kvgate.engines.llamacpp.cache import LlamaCppServer, replay

    t = _corner_trace(900, seed=3)

    def server():
        return LlamaCppServer(64, n_slots=slots, n_ctx=n_ctx, cache_ram_bytes=ram, bytes_per_token=2048,
                              n_layer=4, n_stream=1 if unified else slots, slot_prompt_similarity=sps,
                              cache_idle_slots=ram != 0, kv_unified=unified)

    a, b = server(), server()
    slow, fast = replay(t, a, compiled=False), replay(t, b)
    assert np.array_equal(slow, fast)
    assert (a.slots, a.last_used, a.saved_tokens, a._clock) == (b.slots, b.last_used, b.saved_tokens, b._clock)
    assert [(s.prompt, s.size) for s in a.states] == [(s.prompt, s.size) for s in b.states]
    assert slow.sum() > 0
    if ram != 0:
        assert a.saved_tokens > 0
