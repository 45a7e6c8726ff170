"""Exact weight bytes from safetensors headers (every spec dtype) and the labelled estimate."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kvgate.cli import main
from kvgate.model import load_model
from kvgate.model.weights import DTYPE_BITS, WeightsError, estimate_weight_bytes, safetensors_file_bytes, weight_bytes


def write_st(path: Path, tensors: dict[str, tuple[str, list[int], int]], *, pad_data: int | None = None) -> Path:
    """A safetensors file: {name: (dtype, shape, nbytes)}; data zero-filled."""
    header, off = {}, 0
    for name, (dt, shape, nb) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + nb]}
        off += nb
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    data = b"\0" * (off if pad_data is None else pad_data)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def test_every_spec_dtype(tmp_path):
    expected = {
        "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
        "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "C64": 8, "F64": 8, "I64": 8, "U64": 8,
    }
    tensors = {f"t_{dt}": (dt, [3, 8], 24 * b) for dt, b in expected.items()}
    tensors["t_F4"] = ("F4", [3, 8], 12)  # 24 × 4 bits
    tensors["t_F6_E2M3"] = ("F6_E2M3", [4, 8], 24)  # 32 × 6 bits
    tensors["t_F6_E3M2"] = ("F6_E3M2", [4, 4], 12)
    assert set(DTYPE_BITS) == set(expected) | {"F4", "F6_E2M3", "F6_E3M2"}
    wb = safetensors_file_bytes(write_st(tmp_path / "m.safetensors", tensors))
    assert wb.exact and wb.tensors == len(tensors)
    assert wb.bytes == sum(nb for _, _, nb in tensors.values())
    assert wb.by_dtype["F4"] == 12 and wb.by_dtype["BF16"] == 48


def test_matches_the_safetensors_library(tmp_path):
    np = pytest.importorskip("numpy")
    st = pytest.importorskip("safetensors.numpy")
    arrs = {"a": np.zeros((7, 5), np.float16), "b": np.zeros((3,), np.int64), "c": np.zeros((2, 2, 2), np.float32)}
    p = tmp_path / "lib.safetensors"
    st.save_file(arrs, str(p))
    assert weight_bytes(p).bytes == sum(a.nbytes for a in arrs.values())


def test_unknown_dtype_named(tmp_path):
    p = write_st(tmp_path / "u.safetensors", {"w": ("Q4_K", [32], 18)})
    with pytest.raises(WeightsError) as e:
        weight_bytes(p)
    assert "'Q4_K'" in e.value.message and "'w'" in e.value.message


def test_offsets_disagree_with_shape(tmp_path):
    p = write_st(tmp_path / "m.safetensors", {"w": ("BF16", [4, 4], 30)})
    with pytest.raises(WeightsError, match="data_offsets span 30 B but shape"):
        weight_bytes(p)
    p = write_st(tmp_path / "f4.safetensors", {"w": ("F4", [3], 2)})
    with pytest.raises(WeightsError, match="whole number of bytes"):
        weight_bytes(p)


def test_truncated_and_not_safetensors(tmp_path):
    p = write_st(tmp_path / "t.safetensors", {"w": ("F32", [100], 400)}, pad_data=100)
    with pytest.raises(WeightsError, match="truncated"):
        weight_bytes(p)
    q = tmp_path / "x.safetensors"
    q.write_bytes(b"\xff" * 16)
    with pytest.raises(WeightsError, match="does not fit the file"):
        weight_bytes(q)
    with pytest.raises(WeightsError, match="not found"):
        weight_bytes(tmp_path / "nope.safetensors")


def test_sharded_index(tmp_path):
    write_st(tmp_path / "model-00001-of-00002.safetensors", {"a": ("BF16", [10, 10], 200), "b": ("F32", [5], 20)})
    write_st(tmp_path / "model-00002-of-00002.safetensors", {"c": ("F8_E4M3", [64], 64)})
    idx = {"metadata": {"total_size": 284},
           "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                          "c": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(idx))
    wb = weight_bytes(tmp_path)  # the directory finds the index
    assert wb.exact and wb.bytes == 284 and wb.tensors == 3 and not wb.notes
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(WeightsError, match="missing"):
        weight_bytes(tmp_path / "model.safetensors.index.json")


def test_estimate_matches_measured_qwen3_30b_a3b():
    # cases/README.md: the model built from config in bf16 on an H200 had
    # 61,064,245,248 B of parameters.
    wb = estimate_weight_bytes(load_model("qwen3-30b-a3b").config)
    assert not wb.exact and wb.bytes == 61_064_245_248
    assert wb.params == 30_532_122_624


@pytest.mark.parametrize("name,params", [
    ("llama-3.1-8b", 8_030_261_248),   # Meta's published count
    ("qwen3-0.6b", 596_049_920),       # Qwen3-0.6B safetensors (tied embeddings)
    ("mixtral-8x7b", 46_702_792_704),  # Mixtral-8x7B published count
])
def test_estimate_dense_and_moe(name, params):
    assert estimate_weight_bytes(load_model(name).config).params == params


CONFIGS = Path(__file__).parent / "data" / "configs"


@pytest.mark.parametrize("name,params", [
    ("gemma-2-9b", 9_241_705_984),          # tied embeddings, 4 norms per layer
    ("gemma-3-1b", 999_885_952),
    ("qwen3-next-80b-a3b", 79_674_391_296),  # gated-delta-net mixers, gated q_proj, shared expert
])
def test_estimate_published_counts(name, params):
    assert estimate_weight_bytes(load_model(CONFIGS / f"{name}.json").config).params == params


def test_estimate_hybrid_and_ssm_are_labelled():
    for name in ("jamba-v0.1", "mamba-codestral-7b"):
        wb = estimate_weight_bytes(load_model(CONFIGS / f"{name}.json").config)
        assert not wb.exact and wb.bytes == 2 * wb.params
    # Jamba: MoE only on odd layers (expert_layer_period 2, offset 1): ~51.6 B parameters
    assert round(estimate_weight_bytes(load_model(CONFIGS / "jamba-v0.1.json").config).params / 1e9, 1) == 51.6


def test_weights_command(tmp_path, capsys):
    p = write_st(tmp_path / "m.safetensors", {"w": ("BF16", [8, 8], 128)})
    assert main(["weights", str(p), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bytes"] == 128 and out["kind"] == "exact"
    assert main(["weights", "qwen3-0.6b"]) == 0
    assert "ESTIMATE" in capsys.readouterr().out


def _cli_error(argv, capsys) -> str:
    """Run the CLI, expect exit 2 with an ERROR line and no traceback; return stderr."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR: ") and "Traceback" not in err
    return err


def test_index_weight_map_entry_not_a_file_name(tmp_path, capsys):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": 5}}))
    err = _cli_error(["weights", str(tmp_path)], capsys)
    assert "weight_map entry 'x' must name a shard file (a string), got 5" in err
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": ["a.safetensors"]}))
    err = _cli_error(["weights", str(tmp_path)], capsys)
    assert "'weight_map' must be an object mapping tensor names to shard files, got list" in err
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}))
    assert "no 'weight_map' in the safetensors index" in _cli_error(["weights", str(tmp_path)], capsys)


def test_index_metadata_not_an_object_is_ignored(tmp_path):
    write_st(tmp_path / "a.safetensors", {"w": ("F32", [2], 8)})
    idx = {"metadata": ["odd"], "weight_map": {"w": "a.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(idx))
    wb = weight_bytes(tmp_path)
    assert wb.bytes == 8 and not wb.notes


def _raw_st(path: Path, header: dict, data_len: int) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * data_len)
    return path


def test_overlapping_data_offsets_refused(tmp_path, capsys):
    hdr = {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
           "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
    p = _raw_st(tmp_path / "o.safetensors", hdr, 4)
    err = _cli_error(["weights", str(p)], capsys)
    assert "tensors 'a' and 'b' overlap (data_offsets end 4 > begin 0)" in err
    hdr = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
           "c": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}
    with pytest.raises(WeightsError, match="tensors 'a' and 'b' overlap"):
        weight_bytes(_raw_st(tmp_path / "p.safetensors", hdr, 12))
    # zero-length tensors at a boundary do not overlap anything
    hdr = {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
           "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},
           "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}
    assert weight_bytes(_raw_st(tmp_path / "z.safetensors", hdr, 8)).bytes == 8
    hdr = {"a": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}}
    with pytest.raises(WeightsError, match="bad data_offsets"):
        weight_bytes(_raw_st(tmp_path / "n.safetensors", hdr, 4))


@pytest.mark.parametrize("fname", ["x.bin", "pytorch_model.bin", "x.pt", "x.pth"])
def test_pytorch_pickle_checkpoints_refused(tmp_path, capsys, fname):
    p = tmp_path / fname
    p.write_bytes(b"\x80\x02}q\x00\xff\xfe")  # a pickle prefix, not UTF-8
    err = _cli_error(["weights", str(p)], capsys)
    assert f"PyTorch {p.suffix} checkpoints (pickle) are not read by kvgate" in err
    assert "HINT: give a .safetensors file, a model.safetensors.index.json, a .gguf file" in err


def test_directory_of_pytorch_checkpoints(tmp_path, capsys):
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x02")
    err = _cli_error(["weights", str(tmp_path)], capsys)
    assert "holds only PyTorch checkpoints (pytorch_model.bin), which kvgate does not read (pickle)" in err
    # with a config.json next to it, the estimate is still given
    (tmp_path / "config.json").write_text((Path(__file__).parent / "data" / "configs" / "gemma-3-1b.json").read_text())
    assert main(["weights", str(tmp_path)]) == 0
    assert "ESTIMATE" in capsys.readouterr().out


def test_gguf_header_without_tensors_has_no_weights(capsys):
    from kvgate.cli import main

    p = Path(__file__).parent / "data" / "llamacpp" / "conformance" / "qwen3-8b.gguf"
    assert main(["weights", str(p)]) == 2
    assert "without tensor infos" in capsys.readouterr().err
