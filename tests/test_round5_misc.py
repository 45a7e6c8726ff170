"""Round-5 faults: vLLM and mllama cross-attention, old SGLang logs, layout options a
layout does not take, unreadable vLLM figures, llama.cpp's printed flash-attention state."""

from __future__ import annotations

import pytest

from kvgate.cli import main

MLLAMA = "tests/data/configs/llama-3.2-11b-vision-assembled.json"


@pytest.mark.parametrize("extra", [["-pp", "2"], ["-pp", "2", "--images", "1"],
                                   ["--layout", "vllm", "--kv-available", "10GiB"],
                                   ["--layout", "vllm"]])
def test_vllm_refuses_mllama_cross_attention_by_name(extra, capsys):
    # 40 layers, cross_attention_layers = 3, 8, ..., 38 (every fifth from 3): 8 of them
    assert main(["geometry", MLLAMA, "--max-seq", "8192", *extra]) == 2
    err = capsys.readouterr().err
    assert "CrossAttention layers 3, 8, 13, 18, 23, 28, 33, 38 (8)" in err
    assert "page size" not in err and "[0," not in err


OLD_SGLANG = "tests/data/fit_logs/sglang_2025-01_llama-3.1-8b_h100_1.log"


def test_old_sglang_log_pool_comes_from_max_total_num_tokens_and_is_checked_to_the_token():
    from kvgate.engines import read_engine_log
    from kvgate.engines.crosscheck import crosscheck
    from kvgate.model import load_model

    pool = read_engine_log(OLD_SGLANG)  # "K size: 27.13 GB, V size: 27.13 GB" and max_total_num_tokens=444500
    assert pool.pool_tokens == 444_500
    assert pool.pool_bytes is not None and pool.pool_bytes.text.startswith("K 27.13 GB")
    cc = crosscheck(pool, load_model("llama-3.1-8b"), kv_format="bf16")
    # llama-3.1-8b: 32 layers × 8 KV heads × 128 × 2 B = 65,536 B of K (and of V) per token;
    # MHATokenToKVPool holds 444,500 + 1 rows: 444,501 × 131,072 = 58,261,635,072 B, and each of
    # K, V = 29,130,817,536 B = 27.1301 GiB prints as SGLang's "27.13 GB"
    assert cc["status"] == "agrees"
    assert cc["pool_bytes"] == 58_261_635_072
    assert "max_total_num_tokens 444,500" in cc["lines"][0]


def test_gate_on_an_old_sglang_log_sizes_the_pool(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import os
    log = os.path.join(os.path.dirname(__file__), "..", OLD_SGLANG)
    assert main(["gate", "--engine-log", log, "--model", "llama-3.1-8b", "--slots", "16", "--max-seq", "8192",
                 "--no-record"]) == 0
    out = capsys.readouterr().out
    assert "KV cache pool 58,261,635,072 B per GPU" in out
