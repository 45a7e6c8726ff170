"""A partial download (shards named ``-0000i-of-0000N`` with some missing) is refused, not
summed into "exact" bytes (issue 25)."""

from __future__ import annotations

import json

import pytest
from tests.test_weights import write_st

from kvgate.model.weights import WeightsError, weight_bytes


def _shard(folder, i, n, nb=64):
    return write_st(folder / f"model-{i:05d}-of-{n:05d}.safetensors", {f"w{i}": ("BF16", [nb // 2], nb)})


def test_one_of_four_shards_without_index_is_refused(tmp_path):
    _shard(tmp_path, 1, 4)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(WeightsError) as e:
        weight_bytes(tmp_path)
    assert "1 of 4" in e.value.message and "model-00002-of-00004.safetensors" in e.value.message
    assert "--weights-bytes" in (e.value.hint or "")


def test_the_lone_shard_file_given_directly_is_refused(tmp_path):
    p = _shard(tmp_path, 3, 4)
    with pytest.raises(WeightsError) as e:
        weight_bytes(p)
    assert "1 of 4" in e.value.message and "00001-of-00004" in e.value.message


def test_index_naming_absent_shards_is_refused(tmp_path):
    _shard(tmp_path, 1, 2)
    wm = {"w1": "model-00001-of-00002.safetensors", "w2": "model-00002-of-00002.safetensors"}
    idx = tmp_path / "model.safetensors.index.json"
    idx.write_text(json.dumps({"metadata": {"total_size": 128}, "weight_map": wm}))
    with pytest.raises(WeightsError) as e:
        weight_bytes(idx)  # the index file itself: the weight_map check
    assert "1 of the 2 shards" in e.value.message and "partial download" in e.value.message
    with pytest.raises(WeightsError) as e:
        weight_bytes(tmp_path)  # the folder: the shard-name check comes first
    assert "1 of 2" in e.value.message


def test_complete_shard_set_is_exact(tmp_path):
    for i in (1, 2):
        _shard(tmp_path, i, 2)
    wm = {"w1": "model-00001-of-00002.safetensors", "w2": "model-00002-of-00002.safetensors"}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    wb = weight_bytes(tmp_path)
    assert wb.exact and wb.bytes == 128


def test_partial_gguf_split_is_refused(tmp_path):
    (tmp_path / "m-00001-of-00003.gguf").write_bytes(b"GGUF")
    (tmp_path / "m-00003-of-00003.gguf").write_bytes(b"GGUF")
    with pytest.raises(WeightsError) as e:
        weight_bytes(tmp_path / "m-00001-of-00003.gguf")
    assert "2 of 3" in e.value.message and "m-00002-of-00003.gguf" in e.value.message


def test_cli_partial_folder_prints_error_and_hint(tmp_path, capsys):
    from kvgate.cli import main

    _shard(tmp_path, 1, 4)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert main(["weights", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR:") and "HINT:" in err
