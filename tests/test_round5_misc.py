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
