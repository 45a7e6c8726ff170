"""llama-server's slots + --cache-ram prompt cache (kvgate.engines.llamacpp.cache), worked by hand."""

from __future__ import annotations

from kvgate.engines.llamacpp.cache import LlamaCppServer, Prompt, common_prefix, replay, state_bytes
from kvgate.tier.traces import HashedTrace

# block 4 tokens; r0 [1,2] 8 tok; r1 [1,2,3] 12; r2 [5,6] 8; r3 [1,2,3,4] 16; r4 = r3
REQS = [(8, [1, 2]), (12, [1, 2, 3]), (8, [5, 6]), (16, [1, 2, 3, 4]), (16, [1, 2, 3, 4])]


def _server(cache_ram, **kw):
    return LlamaCppServer(4, n_slots=kw.pop("n_slots", 1), n_ctx=4096, cache_ram_bytes=cache_ram, bytes_per_token=100,
                          n_layer=1, n_stream=1, **kw)


def test_state_bytes_is_llama_kv_cache_state_write():
    # 4 (n_stream) + 4 (cell_count) + 8 (v_trans, n_layer) + 24 per layer + n x (12 + bytes per token)
    assert state_bytes(12, 100, 1) == 4 + 4 + 8 + 24 + 12 * 112 == 1384
    assert state_bytes(8, 100, 1) == 936
    assert state_bytes(0, 100, 1) == 8
    assert state_bytes(10, 2048, 4, n_stream=2) == 4 + 8 + 8 + 96 + 10 * 2060


def test_common_prefix_in_tokens():
    assert common_prefix(Prompt((1, 2, 3), 12), Prompt((1, 2, 4), 12), 4) == 8
    assert common_prefix(Prompt((1, 2), 6), Prompt((1, 2, 3), 12), 4) == 6  # the shorter's partial block
    assert common_prefix(Prompt((9,), 4), Prompt((1,), 4), 4) == 0


def test_hand_worked_replay_with_and_without_the_prompt_cache():
    t = HashedTrace.from_lists(REQS, 4)
    # r0 cold. r1: slot shares 8 of 12 (f_sim .67 > .1), f_keep 1 -> 8 cached, no save.
    # r2: nothing shared -> LRU slot, r1 saved to the cache (1384 B). r3: nothing in the slot; r2 saved
    # (936 B); the cache's r1 (f_keep 1, f_sim .75) is restored -> 12 cached. r4 = r3: the whole prompt
    # matches, one token is re-evaluated -> 15.
    assert replay(t, _server(None)).tolist() == [0, 8, 0, 12, 15]
    assert replay(t, _server(1384 + 936)).tolist() == [0, 8, 0, 12, 15]
    # one byte less: saving r2 drops r1 (the oldest) first -> r3 finds nothing
    assert replay(t, _server(1384 + 936 - 1)).tolist() == [0, 8, 0, 0, 15]
    # --cache-ram 0: no prompt cache at all
    s = _server(0)
    assert replay(t, s).tolist() == [0, 8, 0, 0, 15] and s.states == []


def test_prompt_larger_than_the_limit_is_not_saved():
    t = HashedTrace.from_lists(REQS, 4)
    s = _server(1000)  # r1's state (1384 B) exceeds the limit: skipped; r2's (936 B) fits
    assert replay(t, s).tolist() == [0, 8, 0, 0, 15]
    assert [st.prompt.n_tokens for st in s.states] == [8]
    assert s.saved_tokens == 8


def test_two_slots_lru_and_idle_slot_saving():
    # two slots: r0 takes slot 1 (LRU: both unused, the last of equals), r1 follows it (similarity), r2
    # takes the unused slot 0, keeping r1 in slot 1 for r3; idle-slot saving copies slot 1's r1 to the
    # cache when r2 is launched.
    t = HashedTrace.from_lists(REQS, 4)
    s = _server(None, n_slots=2)
    got = replay(t, s).tolist()
    assert got == [0, 8, 0, 12, 15]
    # r1 (idle slot 1) at r2's launch, r2 (idle slot 0) at r3's; at r4's launch slot 0's r2 is already held
    assert s.saved_tokens == 12 + 8
    off = _server(None, n_slots=2, cache_idle_slots=False)
    assert replay(t, off).tolist() == [0, 8, 0, 12, 15]


def test_model_matches_a_real_llama_server_request_by_request():
    # recorded by benchmarks/tier_llama_server.py against llama-server at commit 0c1e57098bba (CPU build):
    # every request's timings.cache_n at six --cache-ram settings (tests/data/tier/SOURCES.md)
    import json
    from pathlib import Path

    d = json.loads((Path(__file__).parent / "data" / "tier" / "mooncake_llama_server.json").read_text())
    t = HashedTrace.from_lists([(n, ids) for n, ids in d["requests"]], d["block_tokens"])
    totals = {}
    for ram, served in d["served_cache_n"].items():
        mib = int(ram)
        s = LlamaCppServer(d["block_tokens"], n_slots=1, n_ctx=d["n_ctx"],
                           cache_ram_bytes=None if mib < 0 else mib * 2**20,
                           bytes_per_token=d["bytes_per_token"], n_layer=d["n_layer"], n_stream=1)
        assert replay(t, s).tolist() == served, ram
        totals[mib] = sum(served)
    assert totals == {0: 2600, 1: 3792, 2: 4720, 4: 5856, 8: 10296, -1: 33915}
