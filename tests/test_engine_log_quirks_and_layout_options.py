"""Round-5 faults: vLLM and mllama cross-attention, old SGLang logs, layout options a
layout does not take, unreadable vLLM figures, llama.cpp's printed flash-attention state."""

from __future__ import annotations

import os

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
    log = os.path.join(os.path.dirname(__file__), "..", OLD_SGLANG)
    assert main(["gate", "--engine-log", log, "--model", "llama-3.1-8b", "--slots", "16", "--max-seq", "8192",
                 "--no-record"]) == 0
    out = capsys.readouterr().out
    assert "KV cache pool 58,261,635,072 B per GPU" in out


@pytest.mark.parametrize("name, opts, bad", [("sglang", {"block_size": 16}, "block_size"),
                                             ("contiguous", {"page_size": 64}, "page_size"),
                                             ("llama.cpp", {"block_size": 16, "page_size": 1}, "block_size, page_size")])
def test_a_layout_option_the_layout_does_not_take_names_both(name, opts, bad):
    from kvgate.geometry import GeometryError, get_layout

    with pytest.raises(GeometryError) as ei:
        get_layout(name, **opts)
    assert ei.value.message.startswith(f"layout {name!r} does not take the option")
    assert ei.value.message.endswith(bad)
    assert "__init__" not in ei.value.message and "unexpected keyword" not in ei.value.message


def test_recheck_of_a_record_with_a_layout_option_it_does_not_take(tmp_path, capsys):
    import json
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from test_recheck_fidelity import RECORDS

    rec = json.loads(json.dumps(RECORDS["demo"]))
    rec["inputs"]["layout"] = {"name": "sglang", "block_size": 16}  # a vLLM option under the SGLang layout
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rec))
    assert main(["recheck", str(path)]) == 2
    err = capsys.readouterr()
    text = err.out + err.err
    assert "inputs.layout: layout 'sglang' does not take the option block_size" in text
    assert "__init__" not in text and "unexpected keyword" not in text


def test_a_cut_off_vllm_concurrency_line_says_not_available_in_words():
    from kvgate.engines import read_engine_log
    from kvgate.engines.crosscheck import crosscheck
    from kvgate.model import load_model

    with open("tests/data/fit_logs/vllm_0.8.5-dev_llama-3.1-8b_l40s_1.log") as fh:
        text = fh.read()
    full = "Maximum concurrency for 32,768 tokens per request: 4.84x"
    assert full in text
    cut = text.replace(full, "Maximum concurrency for 32,768 tokens per request: 4.8")  # 4.8 of 4.84x: no figure
    pool = read_engine_log("cut.log", text=cut)
    assert pool.parsed["max_concurrency"] is None and pool.parsed["max_concurrency_unread"] == 8
    assert pool.parsed["concurrency_len"] == 32_768
    cc = crosscheck(pool, load_model("llama-3.1-8b"), kv_format="bf16")
    # 158,656 logged tokens / block 16 = 9,916 blocks of 16 × 131,072 = 2,097,152 B
    assert cc["lines"][0].startswith("consistent to the block: 9,916 blocks of 2,097,152 B")
    assert cc["lines"][0].endswith("158,656 tokens and maximum concurrency not available "
                                   "(line 8 is cut off before its 'x')")
    assert "?" not in cc["lines"][0]
    whole = crosscheck(read_engine_log("whole.log", text=text), load_model("llama-3.1-8b"), kv_format="bf16")
    assert whole["lines"][0].endswith("158,656 tokens and 4.84x")


QWEN3_CPU = "tests/data/logs/llamacpp_qwen3-ctx4096_cpu.log"


@pytest.mark.parametrize("printed, extra, want", [
    ("enabled", "", "on"), ("disabled", "", "off"), ("1", "", "on"), ("0", "", "off"),
    ("auto -> enabled", "", "on"), ("auto -> disabled", "", "off"), ("auto", "", "auto"),
    ("auto", "llama_context: Flash Attention was auto, set to enabled\n", "on"),
    ("auto", "sched_reserve: Flash Attention was auto, set to disabled\n", "off"),
])
def test_llamacpp_printed_flash_attention_state_is_read_as_on_off(printed, extra, want):
    from kvgate.engines import read_engine_log

    with open(QWEN3_CPU) as fh:
        text = fh.read()
    line = "llama_context: flash_attn    = auto\n"
    assert line in text
    text = text.replace(line, f"llama_context: flash_attn    = {printed}\n" + extra)
    pool = read_engine_log("fa.log", text=text)
    assert pool.engine == "llama.cpp"
    assert pool.flags["flash_attn"] == want
    assert pool.parsed["flash_attn_printed"] == printed


def test_llamacpp_whatif_keeps_the_logged_flash_attention_on(tmp_path, capsys):
    with open(QWEN3_CPU) as fh:
        text = fh.read()
    log = tmp_path / "fa.log"
    log.write_text(text.replace("flash_attn    = auto", "flash_attn    = enabled"))
    assert main(["import-log", str(log), "--model", "qwen3-4b", "--gpu", "H100", "-c", "8192"]) == 0
    out = capsys.readouterr().out
    assert " -fa on " in out and "-fa auto" not in out
