"""Hostile files (issue 28): a FIFO, /dev/zero or a device is refused before it is read
(never a hang or a MemoryError); a config-like JSON file above its cap is refused before it
is read, saying the cap; a PyTorch checkpoint given as the model is refused; a GGUF whose
head_count_kv is 0 on every layer is refused instead of a 0-byte KV cache that "FITS"."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from kvgate.atomicio import read_json
from kvgate.cli import main
from kvgate.errors import KvgateError
from kvgate.guarded import MAX_CONFIG_BYTES, check_regular, open_regular, read_regular

gguf = pytest.importorskip("gguf")
sys.path.insert(0, str(Path(__file__).parent))


def run_json(argv, capsys, timeout_s=20.0):
    """The command in-process, in a thread: a hang fails the test instead of the run."""
    got = {}

    def target():
        try:
            got["code"] = main([*argv, "--json"])
        except SystemExit as exc:
            got["code"] = exc.code

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), f"hung: {argv}"
    out = capsys.readouterr().out
    return got["code"], json.loads(out)


@pytest.fixture
def fifo(tmp_path):
    p = tmp_path / "pipe"
    os.mkfifo(p)
    return p


@pytest.mark.parametrize("argv", [
    ["fit", "{p}", "--gpu", "H100"],
    ["geometry", "{p}"],
    ["weights", "{p}"],
    ["import-log", "{p}"],
    ["gate", "--engine-log", "{p}", "--model", "llama-3.1-8b", "--max-model-len", "4096", "--max-num-seqs", "4",
     "--no-record"],
    ["replay", "--model", "llama-3.1-8b", "--max-seq", "4096", "--trace", "{p}", "--slots", "4", "--total", "80GiB",
     "--peak", "40GiB"],
    ["import-smi", "{p}"],
    ["recheck", "{p}"],
    ["gate", "--model", "llama-3.1-8b", "--max-seq", "8192", "--slots", "4", "--measurement", "{p}", "--no-record"],
])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_fifo_and_device_are_refused_not_read(argv, kind, fifo, capsys):
    p = str(fifo) if kind == "fifo" else kind
    code, doc = run_json([a.replace("{p}", p) for a in argv], capsys)
    assert code == 2 and "not a regular file" in doc["error"] and p in doc["error"]


@pytest.mark.parametrize("name", ["m.gguf", "model.safetensors", "config.json"])
def test_fifo_with_a_model_file_name_is_refused(tmp_path, name, capsys):
    os.mkfifo(tmp_path / name)
    code, doc = run_json(["fit", str(tmp_path / name), "--gpu", "H100"], capsys)
    assert code == 2 and "FIFO" in doc["error"]


def test_fifo_safetensors_in_a_model_directory_is_refused(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256,
        "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 1000,
        "intermediate_size": 512, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}))
    os.mkfifo(tmp_path / "model.safetensors")
    code, doc = run_json(["weights", str(tmp_path)], capsys)
    assert code == 2 and "FIFO" in doc["error"]


def test_open_regular_refuses_a_fifo_swapped_in_after_the_check(fifo, monkeypatch):
    """The fstat after a non-blocking open catches a FIFO the stat did not see."""
    import kvgate.guarded as g

    monkeypatch.setattr(g, "check_regular", lambda path, what="file": 0)
    t0 = time.monotonic()
    with pytest.raises(KvgateError, match="FIFO"):
        open_regular(fifo, what="x")
    assert time.monotonic() - t0 < 5


def test_check_regular_names_missing_and_directory(tmp_path):
    with pytest.raises(KvgateError, match="not found"):
        check_regular(tmp_path / "nope", what="model config")
    with pytest.raises(KvgateError, match="a directory"):
        check_regular(tmp_path, what="model config")
    (tmp_path / "f").write_bytes(b"12345")
    assert check_regular(tmp_path / "f") == 5


def test_config_above_the_cap_is_refused_before_reading(tmp_path, capsys):
    """A sparse 3 GB config.json: refused from its size, in well under a second, naming the cap."""
    d = tmp_path / "m"
    d.mkdir()
    with open(d / "config.json", "wb") as fh:
        fh.truncate(3 * 10**9)
    t0 = time.monotonic()
    code, doc = run_json(["fit", str(d), "--gpu", "H100"], capsys)
    assert time.monotonic() - t0 < 5
    assert code == 2 and "3,000,000,000 bytes" in doc["error"] and f"{MAX_CONFIG_BYTES:,}" in doc["error"]


def test_read_regular_cap_is_inclusive(tmp_path):
    p = tmp_path / "x"
    p.write_bytes(b"a" * 10)
    assert read_regular(p, max_bytes=10) == b"a" * 10
    with pytest.raises(KvgateError, match="is 10 bytes, more than the 9 bytes"):
        read_regular(p, max_bytes=9)
    (tmp_path / "r.json").write_text('{"a": 1}')
    assert read_json(tmp_path / "r.json", max_bytes=8) == {"a": 1}


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "consolidated.pth"])
def test_pytorch_checkpoint_as_model_is_refused_not_read(tmp_path, name, capsys):
    """A sparse 3 GB pytorch_model.bin was read whole as a "config" (MemoryError)."""
    p = tmp_path / name
    with open(p, "wb") as fh:
        fh.truncate(3 * 2**30)
    for argv in (["fit", str(p), "--gpu", "H100"], ["geometry", str(p)], ["weights", str(p)]):
        code, doc = run_json(argv, capsys)
        assert code == 2 and "pickle" in doc["error"], argv


def _gguf(path: Path, head_count_kv) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    for fn, val in (("add_block_count", 4), ("add_embedding_length", 256), ("add_head_count", 8),
                    ("add_context_length", 4096), ("add_head_count_kv", head_count_kv)):
        getattr(w, fn)(val)
    import numpy as np

    w.add_tensor("t.weight", np.ones((8, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("hkv", [0, [0, 0, 0, 0]])
def test_gguf_with_head_count_kv_zero_everywhere_is_refused(tmp_path, hkv, capsys):
    p = _gguf(tmp_path / "m.gguf", hkv)
    code, doc = run_json(["fit", str(p), "--gpu", "H100"], capsys)
    assert code == 2 and "head_count_kv" in doc["error"] and "every one of the 4 layers" in doc["error"]


def test_gguf_with_some_zero_head_count_kv_layers_still_sizes(tmp_path, capsys):
    """A 0 on some layers is legitimate (llama.cpp keeps a zero-width K/V for them)."""
    p = _gguf(tmp_path / "m.gguf", [2, 0, 2, 2])
    code, doc = run_json(["geometry", str(p)], capsys)
    assert code == 0 and doc["bytes_per_token"] > 0
