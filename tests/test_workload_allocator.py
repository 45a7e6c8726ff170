"""Reference-workload bookkeeping: slots, blocks, block tables, admission, bytes. No torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvgate.errors import KvgateError
from kvgate.workload.allocator import (
    BlockAllocator,
    BlockTables,
    MirrorGeometry,
    SlotAllocator,
    admit,
    blocks_for,
)
from kvgate.workload.config import load_config
from kvgate.workload.plan import plan_stream

SOURCE_SLOT = 415_236_096  # 48 × 8192 × (2·512 + 8·4), the write-up's slot


def test_bookkeeping_and_help_work_without_torch():
    # CI has no torch: block it and check the plain modules and the command's help.
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "import kvgate.workload.allocator, kvgate.workload.config, kvgate.workload.plan\n"
        "from kvgate.cli import main\n"
        "rc = main(['workload', 'stream', '--model', 'qwen3-30b-a3b', '--device', 'cpu', '--prompt', '8', '--tokens', '1'])\n"
        "assert rc == 2, rc\n"
        "main(['workload', '--help'])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "SUBCOMMAND" in r.stdout
    assert "ERROR: the reference workload needs torch and transformers" in r.stderr
    assert "pip install 'kvgate[gpu]'" in r.stderr


def test_source_slot_bytes_from_preset():
    _, cfg = load_config("qwen3-30b-a3b")
    g = MirrorGeometry.from_config(cfg, 8192)
    assert (g.n_layers, g.kv_heads, g.head_dim) == (48, 4, 128)
    assert g.position_bytes == 2 * 512 + 8 * 4 == 1056
    assert g.slot_bytes == 48 * 8192 * 1056 == SOURCE_SLOT
    assert g.mirror_bytes(8) == 3_321_888_768
    assert g.block_bytes(16) == 48 * 16 * 1056 == 811_008


def test_head_dim_from_config_not_derived(shared_dir):
    cfg = json.loads((shared_dir / "cases" / "configs" / "qwen3-4b.json").read_text())
    g = MirrorGeometry.from_config(cfg, 1)
    assert g.head_dim == 128  # not 2560 / 32 = 80
    assert g.position_bytes == 2 * 8 * 128 + 8 * 8


def test_head_dim_derived_only_when_absent():
    g = MirrorGeometry.from_config({"num_hidden_layers": 2, "num_attention_heads": 32, "hidden_size": 4096}, 4)
    assert (g.kv_heads, g.head_dim) == (32, 128)
    with pytest.raises(KvgateError, match="num_hidden_layers"):
        MirrorGeometry.from_config({"num_attention_heads": 4}, 4)


def test_slot_allocator_lazy_cap_and_reuse():
    s = SlotAllocator(2)
    assert s.slot_of("a") is None and s.in_use == 0
    assert s.acquire("a") == (0, True)
    assert s.acquire("a") == (0, False)  # second append: same slot, nothing new
    assert s.acquire("b") == (1, True)
    with pytest.raises(KvgateError, match=r"slot cap reached: 2 of 2 slots in use.*slot 3") as exc:
        s.acquire("c")
    assert "--slot-cap" in exc.value.hint
    assert s.release("a") == 0
    assert s.release("a") is None
    assert s.acquire("c") == (0, True)  # lowest free slot reused
    assert s.active() == {"b": 1, "c": 0}


def test_slot_cap_default_is_eight():
    s = SlotAllocator()
    for i in range(8):
        s.acquire(i)
    with pytest.raises(KvgateError, match="8 of 8"):
        s.acquire(8)


def test_block_allocator_and_tables():
    a = BlockAllocator(5)
    t = BlockTables(a, block_size=4)
    assert t.ensure("x", 1) == [0]
    assert t.ensure("x", 4) == []  # position 3 still in block 0
    assert t.ensure("x", 5) == [1]
    assert t.ensure("y", 8) == [2, 3]
    assert t.locate("x", 4) == (1, 0)
    assert t.locate("y", 7) == (3, 3)
    with pytest.raises(KvgateError, match="no block for position 8"):
        t.locate("x", 8)
    # Pool has 1 block left; asking for 2 more fails and gives back the partial one.
    with pytest.raises(KvgateError, match="all 5 blocks in use"):
        t.ensure("z", 9)
    assert a.free_count == 1 and "z" not in t.sequences()
    assert t.release("x") == 2
    assert a.free_count == 3 and a.used_count == 2
    with pytest.raises(KvgateError, match="not allocated"):
        a.free(0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 40)), max_size=30), st.integers(1, 8))
def test_block_tables_invariants(ops, bsz):
    a = BlockAllocator(64)
    t = BlockTables(a, bsz)
    held: dict[int, int] = {}
    for seq, n in ops:
        if n > 35:
            t.release(seq)
            held.pop(seq, None)
            continue
        want = max(n, held.get(seq, 0))
        try:
            t.ensure(seq, want)
            held[seq] = want
        except KvgateError:
            pass
        # Every sequence holds exactly ceil(positions / B) blocks; no block is shared.
        all_blocks = [b for s in t.sequences() for b in t.table(s)]
        assert len(all_blocks) == len(set(all_blocks)) == a.used_count
        for s in t.sequences():
            assert len(t.table(s)) == blocks_for(held[s], bsz)
    assert a.used_count + a.free_count == 64


def test_blocks_for():
    assert [blocks_for(n, 16) for n in (0, 1, 16, 17, 576)] == [0, 1, 1, 2, 36]


def test_admission_numbers():
    _, cfg = load_config("qwen3-30b-a3b")
    g = MirrorGeometry.from_config(cfg, 8192)
    c = admit(g, layout="contiguous", streams=4, prompt=512, tokens=64)
    assert c.mirror_bytes == 4 * SOURCE_SLOT == 1_660_944_384
    assert c.positions == 576 and c.blocks_per_seq == 36 and c.pool_blocks == 144
    p = admit(g, layout="paged", streams=4, prompt=512, tokens=64)
    assert p.mirror_bytes == 144 * 811_008 == 116_785_152 == p.written_bytes
    # The unwritten part of the mirror (paging's reclaim bound) for this workload:
    assert c.contiguous_bytes - p.written_bytes == 4 * 48 * (8192 - 576) * 1056 == 1_544_159_232


def test_admission_errors_give_numbers():
    g = MirrorGeometry(48, 4, 128, 8192)
    with pytest.raises(KvgateError, match=r"9 streams need 9 slots but the slot cap is 8 \(8 × 415,236,096 B"):
        admit(g, layout="contiguous", streams=9, prompt=512, tokens=64)
    with pytest.raises(KvgateError, match="8200 positions exceed max_seq 8192"):
        admit(g, layout="paged", streams=1, prompt=8000, tokens=200)
    with pytest.raises(KvgateError, match=r"4 streams × 36 blocks of 16 positions = 144 blocks, but the pool holds 100"):
        admit(g, layout="paged", streams=4, prompt=512, tokens=64, pool_blocks=100)
    with pytest.raises(KvgateError, match="unknown layout"):
        admit(g, layout="ring", streams=1, prompt=1, tokens=1)
    with pytest.raises(KvgateError, match="streams must be a positive integer"):
        admit(g, layout="paged", streams=0, prompt=1, tokens=1)
    assert admit(g, layout="contiguous", streams=9, prompt=512, tokens=64, slot_cap=9).slots == 9


def test_plan_warns_past_max_position_embeddings():
    plan = plan_stream(model="qwen3-30b-a3b", streams=1, max_seq=50_000, prompt=16, tokens=1)
    assert any("max_position_embeddings 40960" in w for w in plan.warnings)
    assert plan.to_dict()["mirror_bytes_expected"] == 48 * 50_000 * 1056
    assert not plan_stream(model="qwen3-30b-a3b", streams=1, max_seq=8192, prompt=16, tokens=1).warnings


def test_plan_rejects_unsupported_and_missing_model():
    with pytest.raises(KvgateError, match="does not support model_type 'deepseek_v3'"):
        plan_stream(model="deepseek-v3", streams=1, max_seq=64, prompt=8, tokens=1)
    with pytest.raises(KvgateError, match="--model is required"):
        plan_stream(model=None, streams=1, max_seq=64, prompt=8, tokens=1)
    with pytest.raises(KvgateError, match="neither"):
        plan_stream(model=None, streams=1, max_seq=64, prompt=8, tokens=1, weights="/no/such/dir")


def test_cli_help_and_errors_without_torch(capsys):
    from kvgate.cli import main

    with pytest.raises(SystemExit) as e:
        main(["workload", "stream", "--help"])
    assert e.value.code == 0
    assert "--layout" in capsys.readouterr().out
    assert main(["workload", "stream", "--model", "qwen3-30b-a3b", "--streams", "9"]) == 2
    err = capsys.readouterr().err
    assert "ERROR: 9 streams need 9 slots but the slot cap is 8" in err and "HINT:" in err
