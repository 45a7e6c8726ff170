"""Host-tier capacities as the engines define them: SGLang's --hicache-size (GB per rank,
overriding --hicache-ratio) and --hicache-ratio (per rank, not divided by TP), llama.cpp's
--cache-ram per server."""

from __future__ import annotations

import json

from kvgate.cli import main
from kvgate.engines.sglang.cache import host_pool_tokens

BPT = 131072  # llama-3.1-8b bf16, one rank


def _trace(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"timestamp": i, "input_length": 1500, "output_length": 1,
                                     "hash_ids": [0, i % 9 + 1, i % 40 + 20]}) + "\n" for i in range(200)))
    return p


def _json(capsys, *argv):
    assert main(["tier", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_host_pool_tokens_follows_sglang_sizing():
    # int(host_size * 1e9 // size_per_token); else int(device tokens * ratio); whole pages
    assert host_pool_tokens(2048, BPT, size_gb=1) == 10**9 // BPT == 7629
    assert host_pool_tokens(2048, BPT, ratio=2.5) == 5120
    assert host_pool_tokens(2048, BPT, ratio=2.5, size_gb=1) == 7629  # the size overrides the ratio
    assert host_pool_tokens(2048, BPT) == 4096  # the default ratio, 2.0
    assert host_pool_tokens(2048, BPT, size_gb=1, page_size=64) == 7616


def test_hicache_size_and_ratio_through_the_command(tmp_path, capsys):
    base = ["--trace", str(_trace(tmp_path)), "--model", "llama-3.1-8b", "--cache-model", "sglang",
            "--device-blocks", "4"]
    r = _json(capsys, *base, "--hicache-size", "1")
    assert r["host"]["capacity_bytes"] == 7629 * BPT and r["host"]["capacity_bytes_given"] == 10**9
    assert "per rank" in r["host"]["capacity_basis"]
    both = _json(capsys, *base, "--hicache-size", "1", "--hicache-ratio", "3")
    assert both["host"]["capacity_bytes"] == 7629 * BPT
    # per rank: TP 2 halves the bytes per token (so the tokens double), the ratio is not divided by TP
    r2 = _json(capsys, *base, "--hicache-ratio", "2", "--tp", "2")
    assert r2["bytes_per_token"] == BPT // 2
    assert r2["host"]["capacity_bytes"] == 2 * r2["device"]["device_tokens"] * (BPT // 2)
    assert r2["host"]["gpus_sharing"] == 1
    assert main(["tier", "--trace", base[1], "--model", "llama-3.1-8b", "--device-blocks", "4",
                 "--hicache-size", "1"]) == 2
    assert "sglang's" in capsys.readouterr().err


def test_cache_ram_is_per_server(tmp_path, capsys):
    r = _json(capsys, "--trace", str(_trace(tmp_path)), "--model", "llama-3.1-8b", "--cache-model", "llama.cpp",
              "-np", "2", "-c", "8192", "--cache-ram", "4")
    assert r["host"]["capacity_bytes"] == 4 * 2**20 and "per server" in r["host"]["capacity_basis"]
