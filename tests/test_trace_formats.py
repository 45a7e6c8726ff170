"""Public trace formats and time units (kvgate.replay.readers, kvgate.replay.timeunits).

Fixtures are excerpts of the published traces (tests/data/traces/SOURCES.md says which
rows are verbatim and which are written in the published layout). Expected values are
computed here from the files with the json/csv modules and datetime, not by kvgate.
"""

from __future__ import annotations

import csv
import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvgate.replay.readers import columnar
from kvgate.replay.readers.formats import (
    AZURE_2024_ATTRIBUTION,
    AZURE_ATTRIBUTION,
    BURSTGPT_ATTRIBUTION,
    MOONCAKE_ATTRIBUTION,
)
from kvgate.replay.simulate import measured_paging_reclaim
from kvgate.replay.trace import Trace, TraceError, load_trace

DATA = Path(__file__).parent / "data" / "traces"


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- issue 11, fault kind 6: Mooncake milliseconds read as seconds --------------------------


def test_mooncake_milliseconds_fault_measured_reclaim(tmp_path):
    """Two Mooncake-shaped requests 100 ms apart, each 16 prompt + 16 output tokens.

    Geometry: max_seq L = 64, blocks of B = 16 positions at 160 B (10 B per position), so
    S = 64·10 = 640 B and nothing is fixed; 2 slots; 50 tokens/s (a 20 ms step).
    Read in ms, the second arrives at step 0.1·50 = 5 while the first holds steps 0..15:
    both slots are reserved (peak 2·640 = 1,280 B), and each request holds p + k = 17..32
    positions = 2 blocks, so laid out in blocks the peak is 4·160 = 640 B: measured reclaim
    1,280 − 640 = 640 B of the bound 2·640 = 1,280 B, 50%. Read in seconds (the old
    reader), the second arrives at step 5,000, alone: 640 − 2·160 = 320 B, 25%.
    """
    p = _write(tmp_path, "mooncake.jsonl",
               '{"timestamp": 0, "input_length": 16, "output_length": 16, "hash_ids": [0]}\n'
               '{"timestamp": 100, "input_length": 16, "output_length": 16, "hash_ids": [1]}\n')  # fmt: skip
    t = load_trace(p)
    assert (t.format, t.time_unit) == ("mooncake", "ms")
    assert t.arrival_s.tolist() == [0.0, 0.1]
    r = measured_paging_reclaim(t, slot_bytes=640, block_bytes=160, max_seq=64, slots=2, block_size=16)
    assert (r["bound_bytes"], r["contiguous_peak_reserved_bytes"], r["measured_reclaim_bytes"]) == (1280, 1280, 640)
    assert r["ratio"] == 0.5
    as_seconds = Trace(np.array([0.0, 100.0]), t.prompt_tokens, t.output_tokens)
    wrong = measured_paging_reclaim(as_seconds, slot_bytes=640, block_bytes=160, max_seq=64, slots=2, block_size=16)
    assert (wrong["measured_reclaim_bytes"], wrong["ratio"]) == (320, 0.25)


def test_mooncake_excerpt_is_milliseconds():
    path = DATA / "mooncake_conversation_head.jsonl"
    rows = _jsonl(path)
    t = load_trace(path)
    assert len(t) == len(rows) == 40
    assert (t.format, t.time_unit, t.attribution) == ("mooncake", "ms", MOONCAKE_ATTRIBUTION)
    assert t.arrival_s.tolist() == [(r["timestamp"] - rows[0]["timestamp"]) / 1000 for r in rows]
    assert t.arrival_s[-1] == 12.0  # the 40th request's timestamp is 12000 ms
    assert t.prompt_tokens.tolist() == [r["input_length"] for r in rows]
    assert t.output_tokens.tolist() == [r["output_length"] for r in rows]
    # The replay of the trace as read equals the replay of the arrivals computed here, and
    # differs from the seconds reading (what the old reader did).
    geo = dict(slot_bytes=131072 * 1056 * 48, block_bytes=16 * 1056 * 48, max_seq=131072, slots=8)
    ms = Trace(t.arrival_s, t.prompt_tokens, t.output_tokens)
    s = Trace(np.array([float(r["timestamp"] - rows[0]["timestamp"]) for r in rows]), t.prompt_tokens, t.output_tokens)
    got = measured_paging_reclaim(t, **geo)
    assert got["measured_reclaim_bytes"] == measured_paging_reclaim(ms, **geo)["measured_reclaim_bytes"]
    assert got["measured_reclaim_bytes"] != measured_paging_reclaim(s, **geo)["measured_reclaim_bytes"]


# --- the other formats ------------------------------------------------------------------------


def test_azure_2023_excerpt():
    path = DATA / "azure_conv_2023_head.csv"
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    t = load_trace(path)
    assert (t.format, t.time_unit, t.attribution) == ("azure", "datetime", AZURE_ATTRIBUTION)
    assert t.prompt_tokens.tolist() == [int(r["ContextTokens"]) for r in rows]
    assert t.output_tokens.tolist() == [int(r["GeneratedTokens"]) for r in rows]
    # 7 fraction digits (100 ns): whole 100-ns ticks between stamps, then / 1e7
    ticks = [int(r["TIMESTAMP"][11:13]) * 36_000_000_000 + int(r["TIMESTAMP"][14:16]) * 600_000_000
             + int(r["TIMESTAMP"][17:19]) * 10_000_000 + int(r["TIMESTAMP"][20:27]) for r in rows]  # fmt: skip
    assert t.arrival_s.tolist() == [(k - ticks[0]) * 100 / 1e9 for k in ticks]


def test_azure_2024_layout_with_utc_offsets():
    path = DATA / "azure_2024_shape.csv"
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    stamps = [datetime.fromisoformat(r["TIMESTAMP"]) for r in rows]
    t = load_trace(path)
    assert (t.format, t.attribution) == ("azure", AZURE_2024_ATTRIBUTION)
    assert "DynamoLLM" in t.attribution and "CC-BY 4.0" in t.attribution
    assert t.arrival_s.tolist() == [(s - stamps[0]) // timedelta(microseconds=1) * 1000 / 1e9 for s in stamps]
    assert t.prompt_tokens.tolist() == [2048, 4121, 890, 12003]


def test_burstgpt_excerpt_seconds():
    t = load_trace(DATA / "burstgpt_head.csv")
    assert (t.format, t.time_unit, t.attribution) == ("burstgpt", "s", BURSTGPT_ATTRIBUTION)
    assert t.arrival_s.tolist() == [0.0, 40.0, 113.0]  # Timestamp 5, 45, 118 s
    assert t.prompt_tokens.tolist() == [472, 1087, 417]  # Request tokens
    assert t.output_tokens.tolist() == [18, 230, 276]  # Response tokens, not Total tokens


def test_qwen_bailian_is_seconds_though_its_columns_are_mooncakes():
    path = DATA / "qwen_bailian_shape.jsonl"
    rows = _jsonl(path)
    t = load_trace(path)
    assert (t.format, t.time_unit) == ("qwen-bailian", "s")
    assert t.arrival_s.tolist() == [r["timestamp"] - rows[0]["timestamp"] for r in rows]
    assert t.prompt_tokens.tolist() == [318, 1024, 521] and t.output_tokens.tolist() == [97, 12, 132]


# --- time units -------------------------------------------------------------------------------

_AMBIGUOUS = "timestamp,input_length,output_length\n0,10,1\n3000,10,1\n5999,10,1\n9000,10,1\n"


def test_relative_integers_sparse_as_seconds_are_refused(tmp_path):
    """Mooncake's columns without hash_ids: gaps of 3,000 are 50 minutes as seconds, 3 s
    as milliseconds; both plausible, so kvgate asks instead of guessing."""
    p = _write(tmp_path, "t.csv", _AMBIGUOUS)
    with pytest.raises(TraceError) as ei:
        load_trace(p)
    msg, hint = ei.value.message, ei.value.hint
    assert "unit of column 'timestamp' is ambiguous" in msg
    assert "as seconds that is one request every 50 minutes over 2.5 hours" in msg
    assert "as milliseconds one every 3 s over 9 s" in msg
    assert "--time-unit s or --time-unit ms" in hint
    assert load_trace(p, time_unit="ms").arrival_s.tolist() == [0.0, 3.0, 5.999, 9.0]
    assert load_trace(p, time_unit="s").arrival_s.tolist() == [0.0, 3000.0, 5999.0, 9000.0]
    t = load_trace(p, time_unit="us")
    assert t.arrival_s.tolist() == [0.0, 0.003, 0.005999, 0.009] and t.time_unit_reason == "given"


def test_unit_named_by_the_column(tmp_path):
    p = _write(tmp_path, "t.csv", _AMBIGUOUS.replace("timestamp,", "timestamp_ms,"))
    t = load_trace(p)
    assert t.arrival_s.tolist() == [0.0, 3.0, 5.999, 9.0] and t.time_unit == "ms"
    q = _write(tmp_path, "u.csv", "arrival time (us),prompt_tokens,output_tokens\n5000000,1,1\n7500000,1,1\n")
    assert load_trace(q).arrival_s.tolist() == [0.0, 2.5]


@pytest.mark.parametrize("first, second, unit", [
    ("1700000000", "1700000001.5", "s"),
    ("1700000000000", "1700000001500", "ms"),
    ("1700000000000000", "1700000001500000", "us"),
    ("1700000000000000000", "1700000001500000000", "ns"),
])  # fmt: skip
def test_epoch_stamps_in_any_unit(tmp_path, first, second, unit):
    """2023-11-14 22:13:20 UTC in s, ms, µs and ns: 1.5 s apart in each."""
    t = load_trace(_write(tmp_path, "t.csv", f"time,prompt_tokens,output_tokens\n{first},1,1\n{second},1,1\n"))
    assert t.arrival_s.tolist() == [0.0, 1.5] and t.time_unit == unit


def test_dense_relative_and_absurd_spans_stay_seconds(tmp_path):
    t = load_trace(_write(tmp_path, "t.csv", "time,prompt_tokens,output_tokens\n0,1,1\n30,1,1\n60,1,1\n"))
    assert t.arrival_s.tolist() == [0.0, 30.0, 60.0] and t.time_unit == "s"
    # no unit makes 1e20 plausible: seconds, and the replay reports the span (test_replay)
    assert load_trace(_write(tmp_path, "u.csv", "time,prompt_tokens,output_tokens\n0,1,1\n1e20,1,1\n")).time_unit == "s"


def test_time_unit_checked_and_ignored_for_datetimes(tmp_path):
    with pytest.raises(TraceError, match="time unit must be one of s, ms, us, ns"):
        load_trace(DATA / "burstgpt_head.csv", time_unit="minutes")
    t = load_trace(DATA / "azure_2024_shape.csv", time_unit="ms")
    assert t.warnings == ["--time-unit ms ignored: column 'TIMESTAMP' holds date-times"]
    # the format's own unit gives way to a unit the user gives
    assert load_trace(DATA / "burstgpt_head.csv", time_unit="ms").arrival_s.tolist() == [0.0, 0.04, 0.113]


# --- the columnar reader and the Python reader agree ---------------------------------------------


def _both(monkeypatch, path, **kw):
    used = []
    real = columnar.read_columns

    def spy(*a, **k):
        out = real(*a, **k)
        used.append(out is not None)
        return out

    monkeypatch.setattr(columnar, "read_columns", spy)
    fast = load_trace(path, **kw)
    monkeypatch.setattr(columnar, "read_columns", lambda *a, **k: None)
    slow = load_trace(path, **kw)
    monkeypatch.setattr(columnar, "read_columns", real)
    return fast, slow, used


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    times=st.lists(st.one_of(st.integers(0, 10**6), st.floats(0, 1e4, allow_nan=False).map(lambda x: round(x, 3))),
                   min_size=1, max_size=30),
    suffix=st.sampled_from([".csv", ".jsonl"]),
    seed=st.integers(0, 2**16),
)  # fmt: skip
def test_columnar_and_python_readers_agree(tmp_path, monkeypatch, times, suffix, seed):
    rng = np.random.default_rng(seed)
    p_tok = rng.integers(0, 5000, len(times)).tolist()
    o_tok = rng.integers(0, 500, len(times)).tolist()
    path = tmp_path / f"t{suffix}"
    if suffix == ".csv":
        path.write_text(
            "time,prompt_tokens,output_tokens\n" + "".join(f"{t},{p},{o}\n" for t, p, o in zip(times, p_tok, o_tok))
        )
    else:
        path.write_text("".join(json.dumps({"time": t, "prompt_tokens": p, "output_tokens": o}) + "\n"
                                for t, p, o in zip(times, p_tok, o_tok)))  # fmt: skip
    try:
        fast, slow, used = _both(monkeypatch, path, time_unit="s")
    except TraceError:
        return
    assert used == [True]
    assert fast.arrival_s.tolist() == slow.arrival_s.tolist()
    assert fast.prompt_tokens.tolist() == slow.prompt_tokens.tolist()
    assert fast.output_tokens.tolist() == slow.output_tokens.tolist()
    assert fast.warnings == slow.warnings


def test_readers_agree_on_the_real_excerpts(monkeypatch):
    for name in ("azure_conv_2023_head.csv", "azure_2024_shape.csv", "mooncake_conversation_head.jsonl",
                 "burstgpt_head.csv", "qwen_bailian_shape.jsonl"):  # fmt: skip
        fast, slow, used = _both(monkeypatch, DATA / name)
        assert used == [True], name
        assert fast.arrival_s.tolist() == slow.arrival_s.tolist(), name
        assert (fast.format, fast.time_unit, fast.attribution) == (slow.format, slow.time_unit, slow.attribution)


@pytest.mark.parametrize("body", ['{"time": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "[" * 100_000 + "]" * 100_000])
def test_deeply_nested_json_is_a_trace_error(tmp_path, body):
    with pytest.raises(TraceError, match="nested too deeply"):
        load_trace(_write(tmp_path, "t.jsonl", body))
