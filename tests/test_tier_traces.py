"""Hashed-trace readers (kvgate.tier.traces): formats, block size, time units, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvgate.replay.readers.base import TraceError
from kvgate.tier.stream import load_hashed_trace
from kvgate.tier.traces import engine_blocks_per_trace_block, synthetic_hashed


def _write(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_mooncake_format_512_blocks_ms(tmp_path):
    p = _write(tmp_path, [
        {"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 1500, "input_length": 600, "output_length": 5, "hash_ids": [0, 2]},
    ])  # fmt: skip
    t = load_hashed_trace(p)
    assert (t.format, t.block_tokens) == ("mooncake", 512)
    assert t.arrival_s.tolist() == [0.0, 1.5]
    assert t.prompt_tokens == 1600 and t.ids.tolist() == [0, 1, 0, 2] and t.offsets.tolist() == [0, 2, 4]
    assert "Mooncake" in t.attribution


def test_qwen_bailian_format_16_blocks_seconds(tmp_path):
    rows = [
        {"chat_id": 1, "parent_chat_id": -1, "timestamp": 10.0, "input_length": 40, "output_length": 3,
         "type": "text", "turn": 1, "hash_ids": [5, 6, 7]},
        {"chat_id": 2, "parent_chat_id": 1, "timestamp": 12.5, "input_length": 50, "output_length": 3,
         "type": "text", "turn": 2, "hash_ids": [5, 6, 7, 8]},
    ]  # fmt: skip
    t = load_hashed_trace(_write(tmp_path, rows))
    assert (t.format, t.block_tokens) == ("qwen-bailian", 16)
    assert t.arrival_s.tolist() == [0.0, 2.5]


def test_offline_trace_block_size_from_the_data(tmp_path):
    # no time column; ceil(L / 64) ids on every line and no other size 16..4096 fits
    rows = [{"input_length": 100, "hash_ids": [1, 2]}, {"input_length": 129, "hash_ids": [1, 2, 3]},
            {"input_length": 64, "hash_ids": [1]}]  # fmt: skip
    t = load_hashed_trace(_write(tmp_path, rows))
    assert (t.format, t.block_tokens, t.arrival_s) == ("offline", 64, None)
    assert "from the data" in t.block_reason
    assert load_hashed_trace(_write(tmp_path, rows), block_tokens=32).block_tokens == 32


def test_block_size_ambiguous_or_absent_is_refused(tmp_path):
    rows = [{"input_length": 10, "hash_ids": [1]}]  # fits every size 16..4096
    with pytest.raises(TraceError, match="cannot be told") as e:
        load_hashed_trace(_write(tmp_path, rows))
    assert "--trace-block-tokens" in e.value.hint
    with pytest.raises(TraceError, match="no size"):
        load_hashed_trace(_write(tmp_path, [{"input_length": 10, "hash_ids": [1, 2, 3, 4, 5]}]))


@pytest.mark.parametrize("row, match", [
    ({"input_length": 10, "hash_ids": "abc"}, "line 2: hash_ids is not a list"),
    ({"input_length": -1, "hash_ids": [1]}, "line 2: input_length"),
    ({"input_length": 10, "hash_ids": [1.5]}, "line 2: hash_ids holds 1.5"),
    ({"input_length": 10, "hash_ids": [-3]}, "line 2: hash_ids holds -3"),
])  # fmt: skip
def test_bad_lines_are_named(tmp_path, row, match):
    p = _write(tmp_path, [{"input_length": 10, "hash_ids": [1]}, row])
    with pytest.raises(TraceError, match=match):
        load_hashed_trace(p, block_tokens=16)


def test_missing_columns_and_bad_json(tmp_path):
    with pytest.raises(TraceError, match="no hash_ids column"):
        load_hashed_trace(_write(tmp_path, [{"input_length": 3}]), block_tokens=16)
    p = tmp_path / "bad.jsonl"
    p.write_text('{"input_length": 3, "hash_ids": [1]}\n{oops\n')
    with pytest.raises(TraceError, match="line 2: not valid JSON"):
        load_hashed_trace(p, block_tokens=16)
    with pytest.raises(TraceError, match="not found"):
        load_hashed_trace(tmp_path / "nope.jsonl")


def test_engine_blocks_map_onto_trace_blocks():
    assert engine_blocks_per_trace_block(512, 16) == 32
    assert engine_blocks_per_trace_block(16, 16) == 1
    with pytest.raises(TraceError, match="does not divide"):
        engine_blocks_per_trace_block(512, 48)


def test_synthetic_is_seeded_and_prefix_shaped():
    a, b = synthetic_hashed(2000, seed=3), synthetic_hashed(2000, seed=3)
    assert np.array_equal(a.ids, b.ids) and a.n_requests == 2000
    assert len(np.unique(a.ids)) < len(a.ids)  # some prefixes reused
