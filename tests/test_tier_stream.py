"""The streaming hashed-trace reader (kvgate.tier.stream), the compiled curve kernel
(kvgate.tier.kernel) against the numpy path and the brute-force LRU, and the hostile traces
of issue 28 (each a clean error or the right answer)."""

from __future__ import annotations

import gzip
import json
import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from kvgate.cli import main
from kvgate.replay.readers.base import TraceError
from kvgate.tier import kernel
from kvgate.tier.lru import simulate_lru
from kvgate.tier.stack import LruCurveBuilder, curve_builder, lru_curve
from kvgate.tier.stream import TraceStream, load_hashed_trace
from kvgate.tier.traces import HashedTrace, synthetic_hashed

sys.path.insert(0, str(Path(__file__).parent))
from _hashed_traces import hashed_traces  # noqa: E402

ROWS = [{"timestamp": 10 * i, "input_length": 600 + 300 * (i % 3), "output_length": 1,
         "hash_ids": [0, 1 + i % 4, 5 + i][: 2 + i % 2]} for i in range(40)]  # fmt: skip


def _text(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _write(tmp_path, text: str | bytes, name="t.jsonl"):
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def test_gzip_and_zstd_read_as_the_plain_file(tmp_path):
    import pyarrow as pa

    plain = load_hashed_trace(_write(tmp_path, _text(ROWS)))
    gz = load_hashed_trace(_write(tmp_path, gzip.compress(_text(ROWS).encode()), "t.jsonl.gz"))
    zp = tmp_path / "t.jsonl.zst"
    with pa.CompressedOutputStream(str(zp), "zstd") as out:
        out.write(_text(ROWS).encode())
    zs = load_hashed_trace(zp)
    for t in (gz, zs):
        assert (t.format, t.block_tokens, t.n_requests) == ("mooncake", 512, 40)
        assert np.array_equal(t.ids, plain.ids) and np.array_equal(t.offsets, plain.offsets)
        assert np.array_equal(t.input_length, plain.input_length) and np.array_equal(t.arrival_s, plain.arrival_s)


def test_ids_are_interned_dense_in_first_seen_order(tmp_path):
    rows = [{"input_length": 1024, "hash_ids": [10**15, 7]}, {"input_length": 1024, "hash_ids": [10**15, 3]}]
    t = load_hashed_trace(_write(tmp_path, _text(rows)), block_tokens=512)
    assert t.ids.dtype == np.int32 and t.ids.tolist() == [0, 1, 0, 2]


def test_line_reader_agrees_with_pyarrow(tmp_path):
    # a float input_length (100.0) is refused by pyarrow's int64 column: the line reader reads the file
    rows = [dict(r) for r in ROWS]
    rows[-1]["input_length"] = float(rows[-1]["input_length"])
    slow = load_hashed_trace(_write(tmp_path, _text(rows), "slow.jsonl"))
    fast = load_hashed_trace(_write(tmp_path, _text(ROWS), "fast.jsonl"))
    assert np.array_equal(slow.ids, fast.ids) and np.array_equal(slow.input_length, fast.input_length)
    assert np.array_equal(slow.arrival_s, fast.arrival_s)


def test_batches_hand_each_request_on_once_when_the_line_reader_takes_over(tmp_path, monkeypatch):
    import kvgate.tier.stream as ts

    monkeypatch.setattr(ts, "BLOCK_BYTES", 1 << 10)  # many small pyarrow blocks
    monkeypatch.setattr(ts, "_SLOW_CHUNK", 7)
    rows = [{"input_length": 512 * (1 + i % 3), "hash_ids": list(range(i, i + 1 + i % 3))} for i in range(300)]
    rows[250]["hash_ids"] = [True, 5, 6][: 1 + 250 % 3]  # bool: refused by pyarrow only at this block
    rows[250]["hash_ids"] = [250 + k for k in range(1 + 250 % 3)]
    rows[250]["input_length"] = float(rows[250]["input_length"])
    p = _write(tmp_path, _text(rows))
    got: list[int] = []
    t = TraceStream(p, block_tokens=512).read(on_batch=lambda le, off, ids: got.extend(le.tolist()))
    assert got == [r["input_length"] for r in rows] and t.n_requests == 300


@pytest.mark.parametrize("line, match", [
    ('{"input_length": 10, "hash_ids": [true, 5]}', "line 2: hash_ids holds True"),
    ('{"input_length": 10, "hash_ids": [[1], 2]}', r"line 2: hash_ids holds \[1\]"),
    ('{"input_length": 10, "hash_ids": [' + "9" * 5000 + "]}", "line 2: .*4,300 digits"),
    ('{"input_length": 10, "hash_ids": [' + "9" * 1000 + "]}", "line 2: hash_ids holds 9999"),
    ('{"input_length": 10, "hash_ids": ' + "[" * 5000 + "]" * 5000 + "}", "line 2: .*nested too deeply"),
    ('{"input_length": 10, "hash_ids": 7}', "line 2: hash_ids is not a list"),
    ('{"input_length": 10}', "line 2: hash_ids is not a list: None"),
    ('{"input_length": 10, "hash_ids": [1, null, 3]}', "line 2: hash_ids holds None"),
])  # fmt: skip
def test_hostile_lines_are_named(tmp_path, line, match):
    p = _write(tmp_path, '{"input_length": 10, "hash_ids": [1]}\n' + line + "\n")
    with pytest.raises(TraceError, match=match):
        load_hashed_trace(p, block_tokens=16)
    with pytest.raises(TraceError, match=match):  # the lean read (SHARDS) too
        TraceStream(p, block_tokens=16).read(on_batch=lambda *a: None, keep_ids=False, lean=True)


def test_deep_nesting_in_a_column_not_read_is_read(tmp_path):
    p = _write(tmp_path, '{"input_length": 10, "hash_ids": [1]}\n'
                         '{"input_length": 10, "hash_ids": [1], "x": ' + "[" * 5000 + "]" * 5000 + "}\n")
    assert load_hashed_trace(p, block_tokens=16).ids.tolist() == [0, 0]


def test_overflowing_timestamp_is_named(tmp_path):
    p = _write(tmp_path, '{"timestamp": 0, "input_length": 600, "hash_ids": [1, 2]}\n'
                         '{"timestamp": ' + "9" * 400 + ', "input_length": 600, "hash_ids": [1, 3]}\n')
    with pytest.raises(TraceError, match="line 2: timestamp is not a finite number"):
        load_hashed_trace(p)


def test_zero_token_prompts_are_refused(tmp_path):
    p = _write(tmp_path, _text([{"input_length": 0, "hash_ids": []}] * 3))
    with pytest.raises(TraceError, match="every request has 0 prompt tokens"):
        load_hashed_trace(p, block_tokens=16)
    assert main(["tier", "--trace", str(p), "--model", "llama-3.1-8b", "--trace-block-tokens", "16"]) == 2


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_waiting(tmp_path):
    f = tmp_path / "pipe.jsonl"
    os.mkfifo(f)
    box: dict[str, object] = {}

    def go():
        try:
            load_hashed_trace(f)
        except TraceError as e:
            box["err"] = e.message

    th = threading.Thread(target=go, daemon=True)
    th.start()
    th.join(5)
    assert not th.is_alive(), "reading a FIFO hung"
    assert "not a regular file" in str(box["err"])


def test_limit_stops_reading(tmp_path):
    # a broken line after the limit is never read
    p = _write(tmp_path, _text(ROWS[:5]) + "{oops\n")
    t = load_hashed_trace(p, limit=5)
    assert t.n_requests == 5
    with pytest.raises(TraceError, match="line 6: not valid JSON"):
        load_hashed_trace(p)


def test_json_list_and_its_bad_items(tmp_path):
    t = load_hashed_trace(_write(tmp_path, json.dumps(ROWS[:4]), "t.json"))
    assert t.n_requests == 4 and t.format == "mooncake"
    bad = [*ROWS[:2], {"timestamp": 1, "input_length": 5, "hash_ids": [-1]}]
    with pytest.raises(TraceError, match="item 3: hash_ids holds -1"):
        load_hashed_trace(_write(tmp_path, json.dumps(bad), "b.json"))


def test_curve_built_while_reading_equals_the_curve_of_the_kept_ids(tmp_path):
    syn = synthetic_hashed(3000, seed=4, mean_blocks=6)
    rows = [{"input_length": int(syn.input_length[i]), "hash_ids": syn.request_ids(i).tolist()}
            for i in range(syn.n_requests)]  # fmt: skip
    p = _write(tmp_path, _text(rows))
    for rate in (1.0, 0.25):
        b = curve_builder(512, rate)
        t = TraceStream(p, block_tokens=512).read(on_batch=b.add, keep_ids=False)
        assert not t.ids_kept and len(t.ids) == 0 and t.n_requests == 3000
        ref = lru_curve(syn, sample_rate=rate)
        assert np.array_equal(b.result().hist, ref.hist)


def _counted_and_kept(p, **kw):
    """(requests, prompt tokens, warnings) or the error, of a counted read and a kept one."""
    out = []
    for keep in (False, True):
        try:
            t = TraceStream(p, **kw).read(keep_ids=keep)
            assert t.ids_kept is keep and (keep or len(t.input_length) == 0)
            out.append((t.n_requests, t.prompt_tokens, t.warnings))
        except TraceError as exc:
            out.append(str(exc))
    return out


@pytest.mark.parametrize("fast_block", [1 << 20, 1 << 9])  # one batch; a batch of a few lines each
def test_counted_read_says_what_the_kept_read_says(tmp_path, monkeypatch, fast_block):
    import kvgate.tier.stream as ts

    monkeypatch.setattr(ts, "FAST_BLOCK_BYTES", fast_block)
    rows = [{"timestamp": 1000 * i, "input_length": 600, "output_length": 1, "hash_ids": [0, i + 1]}
            for i in range(60)]  # fmt: skip
    rows[37]["timestamp"] = 5
    rows[41]["input_length"] = 2000  # 2 blocks of 512 for 2,000 tokens: short (the first)
    rows[50]["input_length"] = 3000  # short again
    rows[44]["input_length"] = 100  # 2 blocks for 100 tokens: a whole block over
    p = _write(tmp_path, _text(rows))
    counted, kept = _counted_and_kept(p, block_tokens=512)
    assert counted == kept
    n, prompt, warnings = counted
    assert (n, prompt) == (60, 58 * 600 - 600 + 2000 + 3000 + 100)
    assert [w.split(":")[0] for w in warnings] == ["timestamps are not sorted", "2 of 60 requests carry fewer hash "
                                                   "blocks than their input_length needs (first", "request 45"]
    assert "first: request 42, 2 blocks of 512 tokens for 2,000 tokens" in warnings[1]
    # relative times whose unit cannot be told: the same error either way
    amb = [{"timestamp": 1000 * i, "input_length": 600, "hash_ids": [0, i + 1]} for i in range(60)]
    counted, kept = _counted_and_kept(_write(tmp_path, _text(amb), "amb.jsonl"), block_tokens=512)
    assert counted == kept and "is ambiguous" in counted
    zero = [{"input_length": 0, "hash_ids": []}] * 3
    counted, kept = _counted_and_kept(_write(tmp_path, _text(zero), "zero.jsonl"), block_tokens=512)
    assert counted == kept and "every request has 0 prompt tokens" in counted
    # times sorted in each batch, not across them
    tally = ts._Tally(512)
    for t0 in (10.0, 5.0):
        tally.add(ts.Batch(np.array([600, 600]), np.array([0, 2, 4]), np.arange(4), np.array([t0, t0 + 1])))
    assert tally.unsorted and (tally.lo, tally.hi, tally.n, tally.prompt) == (5.0, 11.0, 4, 2400)


@pytest.mark.parametrize("rate", [1.0, 0.5, 0.1])
def test_compiled_and_numpy_paths_agree(rate):
    if not kernel.HAVE_NUMBA:
        pytest.skip("numba not importable here")
    t = synthetic_hashed(4000, seed=11, mean_blocks=7)
    big = HashedTrace(t.input_length, t.offsets, t.ids * 7919 + 2**45, t.block_tokens)  # forces the intern table
    a = LruCurveBuilder(512, rate)
    a.add(t.input_length, t.offsets, t.ids)
    for tr in (t, big):
        b = curve_builder(512, rate, compiled=True)
        h = 1234  # two batches
        b.add(tr.input_length[:h], tr.offsets[: h + 1], tr.ids[: tr.offsets[h]])
        b.add(tr.input_length[h:], tr.offsets[h:], tr.ids[tr.offsets[h] :])
        ra, rb = a.result(), b.result()
        if tr is t or rate == 1.0:  # a sampled run of other ids samples other blocks
            assert np.array_equal(ra.hist, rb.hist)
            assert (ra.distinct_blocks, ra.accesses) == (rb.distinct_blocks, rb.accesses)


@pytest.mark.parametrize("rate", [0.5, 0.1, 0.02])
@pytest.mark.parametrize("chunk", [1 << 17, 50])  # one chunk; many, cut inside the batches
def test_sampled_builder_equals_the_compiled_kernel(rate, chunk, monkeypatch):
    import kvgate.tier.shards as shards

    if not kernel.HAVE_NUMBA:
        pytest.skip("numba not importable here")
    monkeypatch.setattr(shards, "CHUNK", chunk)
    t = synthetic_hashed(6000, seed=5, mean_blocks=7)
    big = HashedTrace(t.input_length - 100, t.offsets, t.ids * 7919 + 2**45, t.block_tokens)  # partial last blocks
    for tr in (t, big):
        a = curve_builder(512, rate)
        assert isinstance(a, shards.SampledCurveBuilder)
        b = curve_builder(512, rate, compiled=True)
        for lo, hi in ((0, 1), (1, 2500), (2500, 2501), (2501, 6000)):
            for x in (a, b):
                x.add(tr.input_length[lo:hi], tr.offsets[lo : hi + 1], tr.ids[tr.offsets[lo] : tr.offsets[hi]])
        ra, rb = a.result(), b.result()
        assert np.array_equal(ra.hist, rb.hist) and ra.unbounded_hit_tokens > 0
        assert (ra.distinct_blocks, ra.accesses, ra.n_requests, ra.prompt_tokens) == \
            (rb.distinct_blocks, rb.accesses, rb.n_requests, rb.prompt_tokens)


def test_numpy_fallback_when_numba_is_missing(monkeypatch):
    monkeypatch.setattr(kernel, "HAVE_NUMBA", False)
    assert isinstance(curve_builder(512), LruCurveBuilder)
    t = synthetic_hashed(500, seed=2)
    assert lru_curve(t).unbounded_hit_tokens == simulate_lru(t, None)[0]
    ids = np.array([9, 3, 9, 2**40], dtype=np.int64)
    assert kernel.Interner().codes(ids).tolist() == [0, 1, 0, 2]


@st.composite
def _traces(draw):
    n = draw(st.integers(1, 25))
    block = draw(st.sampled_from([1, 4, 16]))
    pool = draw(st.integers(1, 12))
    reqs = []
    for _ in range(n):
        ids = draw(st.lists(st.integers(0, pool), min_size=0, max_size=6))
        extra = draw(st.integers(0, block))
        reqs.append((max(len(ids) * block - extra, 0), ids))
    return HashedTrace.from_lists(reqs, block)


@seed(20261205)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_traces())
def test_curve_equals_brute_force_lru_on_generated_traces(t):
    curve = lru_curve(t)
    assert curve.unbounded_hit_tokens == simulate_lru(t, None)[0]
    for c in range(0, int(t.ids.max() if len(t.ids) else 0) + 3):
        assert curve.hit_tokens(c) == simulate_lru(t, c)[0]
    if kernel.HAVE_NUMBA:
        assert np.array_equal(lru_curve(t, compiled=False).hist, curve.hist)


def _long_traces():
    return hashed_traces(pool=40, requests=(20, 80), min_ids=1, max_ids=8, keep_last_token=True)


@seed(20261205)
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # the same patch each time
@given(_long_traces(), st.booleans())
def test_compiled_curve_equals_brute_force_lru_through_many_compactions(monkeypatch, t, interned):
    # the marks' bitmap starts at one word (64 times) and is compacted every few requests
    # (word edges, bit 63, a request's block touched twice); fed one request at a time
    if not kernel.HAVE_NUMBA:
        pytest.skip("numba not importable here")
    monkeypatch.setattr(kernel, "_MIN_TIMES", 64)
    if interned:  # ids too large to index: the intern table
        t = HashedTrace(t.input_length, t.offsets, t.ids + 2**40, t.block_tokens)
    b = curve_builder(t.block_tokens, compiled=True)
    for i in range(t.n_requests):
        b.add(t.input_length[i : i + 1], t.offsets[i : i + 2], t.request_ids(i))
    curve = b.result()
    assert curve.unbounded_hit_tokens == simulate_lru(t, None)[0]
    for c in sorted({1, 2, 3, 7, 20, 41, 63, 64, 65, int(t.ids.max() - t.ids.min()) + 2}):
        assert curve.hit_tokens(c) == simulate_lru(t, c)[0]


def _cli_json(capsys, *argv):
    code = main(["tier", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_repeated_id_with_vllm_and_a_host_tier(tmp_path, capsys):
    rows = [{"timestamp": i, "input_length": 2048, "hash_ids": h}
            for i, h in enumerate([[1, 2, 1, 3], [1, 2, 1, 3], [1, 1, 1, 1]])]  # fmt: skip
    p = _write(tmp_path, _text(rows))
    code, r = _cli_json(capsys, "--trace", str(p), "--model", "llama-3.1-8b", "--cache-model", "vllm",
                        "--device-capacity", "4GiB", "--kv-offloading-size", "8")  # fmt: skip
    assert code == 0
    # r1 repeats r0's chain: 2047 tokens -> 127 blocks of 16; r2 shares only its first block with them
    assert r["device"]["hit_tokens"] == 127 * 16 + 512


def test_engine_model_without_a_host_tier_is_the_engine_not_lru(tmp_path, capsys):
    p = _write(tmp_path, _text(ROWS))
    code, r = _cli_json(capsys, "--trace", str(p), "--model", "llama-3.1-8b", "--cache-model", "vllm",
                        "--device-capacity", "256MiB")  # fmt: skip
    assert code == 0 and r["device"]["basis"].startswith("vLLM's prefix cache")
    assert r["device"]["lru_hit_tokens"] is not None and "too_long_requests" in r["device"]
    code, r = _cli_json(capsys, "--trace", str(p), "--model", "llama-3.1-8b", "--device-capacity", "256MiB")
    assert r["device"]["basis"] == "plain LRU"


def test_kv_offloading_size_is_the_total_across_tp_ranks(tmp_path, capsys):
    p = _write(tmp_path, _text(ROWS))
    base = ["--trace", str(p), "--model", "llama-3.1-8b", "--cache-model", "vllm", "--device-capacity", "1GiB",
            "--kv-offloading-size", "8"]  # fmt: skip
    _, one = _cli_json(capsys, *base)
    _, eight = _cli_json(capsys, *base, "--tp", "8")
    assert one["host"]["capacity_bytes"] == 8 * 2**30 and one["host"]["gpus_sharing"] == 1
    assert eight["host"]["capacity_bytes"] == 2**30 and eight["host"]["capacity_bytes_given"] == 8 * 2**30
    assert "per GPU" in eight["host"]["capacity_basis"]


@pytest.mark.parametrize("gpu, cpu", [(20, 0), (60, 0), (60, 100), (400, 50), (4000, 4000), (8, 4)])
def test_compiled_vllm_model_equals_the_python_model(gpu, cpu):
    from kvgate.engines.vllm import cache as vm

    if not kernel.HAVE_NUMBA:
        pytest.skip("numba not importable here")
    syn = synthetic_hashed(1200, seed=1, mean_blocks=5, block_tokens=64)
    # partial last blocks, ids repeated inside prompts, and prompts longer than their ids
    lists = [(max(int(syn.input_length[i]) - i % 50, 1), syn.request_ids(i).tolist()) for i in range(1200)]
    lists += [(256, [1, 2, 1, 3]), (256, [1, 2, 1, 3]), (256, [1, 1, 1, 1]), (400, [5, 1, 5, 1]), (256, [1, 2, 1, 3])]
    t = HashedTrace.from_lists(lists, 64)
    a, b = vm.VllmPrefixCache(64, 16, gpu, cpu), vm.VllmPrefixCache(64, 16, gpu, cpu)
    slow, fast = vm.replay(t, a, compiled=False), vm.replay(t, b)
    assert np.array_equal(slow[0], fast[0]) and np.array_equal(slow[1], fast[1])
    assert (a.stored_blocks, a.loaded_blocks, a.too_long) == (b.stored_blocks, b.loaded_blocks, b.too_long)
    assert slow[0].sum() > 0 or gpu < 10
