"""``kvgate tier``: the JSON it carries, the gate's verdicts and boundaries, bad input."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from kvgate.cli import main
from kvgate.tier.gate import Speed, decide
from kvgate.tier.lru import simulate_lru
from kvgate.tier.stream import load_hashed_trace

BPT = 131072  # llama-3.1-8b bf16
BLOCK = 512 * BPT


def _run(capsys, *argv):
    code = main(["tier", *argv, "--json"])
    out = capsys.readouterr().out
    return code, (json.loads(out) if code == 0 else None)


def _trace(tmp_path):
    p = tmp_path / "t.jsonl"
    rows = [(0, 1000, [0, 1]), (10, 1200, [0, 1, 2]), (20, 700, [3, 4]), (30, 1536, [0, 1, 2]),
            (40, 1024, [3, 4])]  # fmt: skip
    p.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 1, "hash_ids": h}) + "\n"
                         for t, n, h in rows))  # fmt: skip
    return p


def test_json_carries_the_curve_and_the_tier(tmp_path, capsys):
    p = _trace(tmp_path)
    code, r = _run(capsys, "--trace", str(p), "--model", "llama-3.1-8b", "--device-blocks", "2",
                   "--host-capacity", str(4 * BLOCK))  # fmt: skip
    assert code == 0
    t = load_hashed_trace(p)
    assert (r["block_tokens"], r["prompt_tokens"], r["bytes_per_token"]) == (512, 5460, BPT)
    # hand: r1 hits 1024; r3 hits 1536 (run 3); r4 hits 1024 -> 3584 unbounded
    assert r["unbounded_hit_tokens"] == 3584 == simulate_lru(t, None)[0]
    assert r["unbounded_hit_share"] == 3584 / 5460
    for pt in r["curve"]:
        assert pt["hit_tokens"] == simulate_lru(t, pt["capacity_blocks"])[0]
        assert pt["capacity_bytes"] == pt["capacity_blocks"] * BLOCK
    assert r["device"]["hit_tokens"] == simulate_lru(t, 2)[0]
    assert r["host"]["hit_tokens"] == simulate_lru(t, 6)[0]
    assert r["host"]["added_hit_tokens"] == simulate_lru(t, 6)[0] - simulate_lru(t, 2)[0]
    assert r["verdict"] == "pays-if" and r["condition"]
    assert r["prefill_tokens_per_s"] == {"value": None, "source": "not available"}


def test_at_capacity_blocks_reports_exactly_those(tmp_path, capsys):
    p = _trace(tmp_path)
    code, r = _run(capsys, "--trace", str(p), "--model", "llama-3.1-8b", "--at-capacity-blocks", "1,3,1000")
    t = load_hashed_trace(p)
    assert [c["capacity_blocks"] for c in r["curve"]] == [1, 3, 1000]
    assert [c["hit_tokens"] for c in r["curve"]] == [simulate_lru(t, c)[0] for c in (1, 3, 1000)]
    assert "device" not in r and "verdict" not in r


def test_measured_speeds_give_pays_or_insufficient(tmp_path, capsys):
    p = _trace(tmp_path)
    base = ["--trace", str(p), "--model", "llama-3.1-8b", "--device-blocks", "1", "--host-capacity", "10TiB",
            "--prefill-tokens-per-s", "10000", "--prefill-source", "test"]  # fmt: skip
    # a hit loads 131072 B per token; recomputing costs 1e-4 s per token -> break-even 1.31072e9 B/s
    _, r = _run(capsys, *base, "--h2d-bandwidth", "50GB", "--h2d-source", "test")
    assert r["verdict"] == "pays"
    assert r["boundaries"]["bandwidth_below_which_a_hit_is_slower_bytes_per_s"] == 1.31072e9
    _, r = _run(capsys, *base, "--h2d-bandwidth", "1GB", "--h2d-source", "test")
    assert r["verdict"] == "insufficient"


def test_gate_rules():
    kw = dict(prompt_tokens=10_000, bytes_per_token=100, prefill=Speed(1000.0, "x"), bandwidth=Speed(1e6, "y"))
    assert decide(device_hit_tokens=500, tiered_hit_tokens=550, **kw).verdict == "not-a-bottleneck"  # 0.5% < 1%
    slow = {**kw, "bandwidth": Speed(5e4, "y")}  # below W* = b x r = 1e5 B/s
    assert decide(device_hit_tokens=500, tiered_hit_tokens=600, **slow).verdict == "insufficient"
    v = decide(device_hit_tokens=500, tiered_hit_tokens=600, **{**kw, "bandwidth": Speed(2e5, "y")})
    assert v.breakeven_bandwidth_bytes_per_s == 1e5
    assert v.verdict == "pays" and v.benefit_s == 0.1 and v.cost_s == 0.05
    assert decide(device_hit_tokens=0, tiered_hit_tokens=100, min_gain=Fraction(0), **kw).verdict == "pays"
    # storing what the tier holds doubles the load: break-even bandwidth doubles
    v = decide(device_hit_tokens=500, tiered_hit_tokens=600, stored_tokens=100, **kw)
    assert v.breakeven_bandwidth_bytes_per_s == 2e5


def test_bad_input(tmp_path, capsys):
    p = _trace(tmp_path)
    base = ["tier", "--trace", str(p), "--model", "llama-3.1-8b"]
    assert main([*base, "--host-capacity", "1TiB"]) == 2
    assert "device pool" in capsys.readouterr().err
    assert main([*base, "--prefill-tokens-per-s", "100"]) == 2
    assert "source" in capsys.readouterr().err
    assert main([*base, "--at-capacity-blocks", "a,b"]) == 2
    assert main([*base, "--cache-ram", "8"]) == 2


def test_llamacpp_model_through_the_command(tmp_path, capsys):
    p = _trace(tmp_path)
    code, r = _run(capsys, "--trace", str(p), "--model", "llama-3.1-8b", "--cache-model", "llama.cpp",
                   "-np", "1", "-c", "8192", "--cache-ram", "-1")  # fmt: skip
    assert code == 0
    # one slot: r1 follows r0 (1000 shared), r2 evicts r1 to the cache, r3 restores it (1200 -> 1536 shares
    # 3 blocks = 1200 tokens), r4 shares nothing with r3 but the cache holds r2 ([3, 4], 700 tokens)
    assert r["device"]["hit_tokens"] == 1000
    assert r["host"]["hit_tokens"] == 1000 + 1200 + 700
    assert r["host"]["added_hit_tokens"] == 1900
    assert pytest.approx(r["unbounded_hit_share"]) == 3584 / 5460


def test_engine_models_through_the_command(tmp_path, capsys):
    p = _trace(tmp_path)
    base = ["--trace", str(p), "--model", "llama-3.1-8b", "--device-capacity", str(4 * BLOCK)]
    code, r = _run(capsys, *base, "--cache-model", "vllm", "--kv-offloading-size", "64")
    assert code == 0 and r["device"]["engine_blocks"] == 4 * 32 and r["device"]["block_size"] == 16
    assert r["host"]["capacity_bytes"] == 64 * 2**30 and r["host"]["write_through"]
    code, r = _run(capsys, *base, "--cache-model", "sglang", "--hicache-ratio", "2")
    assert code == 0 and r["device"]["device_tokens"] == 4 * 512 and r["host"]["capacity_bytes"] == 8 * BLOCK
    bad = ["tier", "--trace", str(p), "--model", "llama-3.1-8b"]
    assert main([*bad, "--cache-model", "vllm"]) == 2
    assert "device pool" in capsys.readouterr().err
    assert main([*bad, "--device-blocks", "2", "--kv-offloading-size", "1"]) == 2
    assert "vllm's" in capsys.readouterr().err
