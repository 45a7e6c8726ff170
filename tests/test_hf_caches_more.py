"""transformers caches kvgate used to size wrong: mllama cross-attention, GLM-5.2's shared
indexer layers, a wrapped Kimi-Linear text config, MiniMax-M3's sparse layers.

Every figure is worked by hand below from the config (bf16: 2 bytes a value). The same
configs are checked against transformers' own ``StaticCache`` on the meta device in
``tests/test_conformance_transformers.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvgate.errors import KvgateError
from kvgate.geometry import KVGeometry, get_layout
from kvgate.model import load_model, spec_from_config
from kvgate.model.layer_types import with_images

CONFIGS = Path(__file__).resolve().parent / "data" / "configs"
L = 4096


def _raw(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


# --------------------------------------------------------------------------- mllama

MLLAMA = "llama-3.2-11b-vision-assembled"
CROSS = [3, 8, 13, 18, 23, 28, 33, 38]
# self-attention: 8 KV heads × 128 (4096 / 32), K and V: 2 · 8 · 128 · 2 B = 4,096 B a token
SELF_POS = 2 * 8 * 128 * 2
# one image: max_num_tiles 4 × ((560 // 14)² + 1) = 4 × 1,601 = 6,404 vision positions
IMAGE_POSITIONS = 4 * ((560 // 14) ** 2 + 1)


def test_mllama_cross_layers_hold_nothing_without_an_image() -> None:
    m = load_model(CONFIGS / f"{MLLAMA}.json")
    assert [i for i, l in enumerate(m.layers) if l.kind == "cross"] == CROSS
    g = KVGeometry(m, "bf16")
    assert g.bytes_per_token() == 32 * SELF_POS == 131_072
    assert g.slot_bytes(L) == 32 * L * SELF_POS == 536_870_912  # not 40 layers × L (671,088,640)
    assert all(g.layer_bytes(i, L) == 0 for i in CROSS)
    assert any("text only (0 images)" in n and "6,404 positions" in n for n in m.notes), m.notes


@pytest.mark.parametrize("images", [1, 3])
def test_mllama_cross_layers_hold_images_times_tiles_times_patches(images: int) -> None:
    m = spec_from_config(_raw(MLLAMA), name="m", source="t", images=images)
    g = KVGeometry(m, "bf16")
    cross = images * IMAGE_POSITIONS * SELF_POS  # 1 image: 6,404 × 4,096 = 26,230,784 B
    assert IMAGE_POSITIONS == 6_404
    assert all(g.layer_bytes(i, L) == cross for i in CROSS)
    assert all(g.layer_bytes(i, 10 * L) == cross for i in CROSS)  # does not grow with the text
    assert g.slot_bytes(L) == 32 * L * SELF_POS + 8 * cross
    assert g.bytes_per_token() == 131_072  # a text token adds nothing to a cross layer
    if images == 1:
        assert g.slot_bytes(L) == 746_717_184
    assert with_images(load_model(CONFIGS / f"{MLLAMA}.json"), images).layers == m.layers


def test_mllama_images_option_is_checked() -> None:
    with pytest.raises(KvgateError, match="images must be a non-negative integer"):
        spec_from_config(_raw(MLLAMA), name="m", source="t", images=-1)
    with pytest.raises(KvgateError, match="no cross-attention layers"):
        with_images(load_model("qwen3-0.6b"), 1)


def test_mllama_cross_layers_refused_by_layouts_without_a_rule() -> None:
    m = load_model(CONFIGS / f"{MLLAMA}.json")
    with pytest.raises(KvgateError, match="CrossAttention"):
        KVGeometry(m, "bf16", layout=get_layout("vllm")).slot_bytes(L)


# --------------------------------------------------------------------------- GLM-5.2

def test_glm52_shared_indexer_layers_hold_no_indexer_keys() -> None:
    """GLM-5.2: 78 MLA layers of 512 + 64 = 576 values (1,152 B); indexer keys of 128
    values (256 B) only on the 21 layers whose ``indexer_types`` is "full" (0, 1, 2, 6,
    10, …, 74)."""
    m = load_model(CONFIGS / "glm-5.2.json")
    full = [i for i, l in enumerate(m.layers) if l.index_dim]
    assert full == [0, 1, 2] + list(range(6, 78, 4))
    assert len(full) == 21
    g = KVGeometry(m, "bf16")
    assert g.bytes_per_token() == 78 * 1_152 + 21 * 256 == 95_232  # every layer with keys: 109,824
    assert g.slot_bytes(L) == 95_232 * L
    assert any("57 layers reuse another layer's top-k" in n for n in m.notes), m.notes


def test_glm5_without_indexer_types_keeps_keys_on_every_layer() -> None:
    """GLM-5 (no ``indexer_types``): transformers' default schedule runs the indexer on
    every layer (``index_topk_freq`` 1)."""
    g = KVGeometry(load_model(CONFIGS / "glm-5.json"), "bf16")
    assert g.bytes_per_token() == 78 * (1_152 + 256)


def test_indexer_types_of_the_wrong_shape_is_refused() -> None:
    raw = _raw("glm-5.2")
    raw["indexer_types"] = ["full", "sometimes"] + ["shared"] * 76
    with pytest.raises(KvgateError, match="indexer_types"):
        spec_from_config(raw, name="g", source="t")


# --------------------------------------------------------------------------- Kimi-Linear

def test_wrapped_kimi_linear_text_config_is_a_hybrid_not_all_mla() -> None:
    """A wrapper transformers does not know around a ``kimi_linear`` text config: 7 MLA
    layers (512 + 64 = 576 values, 1,152 B a token) and 20 KDA layers, each with a conv
    state of 3 · 32 · 128 = 12,288 channels × 4 columns in bf16 (98,304 B) and a recurrent
    state of 32 · 128 · 128 values in fp32 (2,097,152 B)."""
    m = load_model(CONFIGS / "kimi-linear-wrapped-reconstructed.json")
    assert m.kinds() == {"linear": 20, "mla": 7}
    assert m.layers == load_model(CONFIGS / "kimi-linear-48b-a3b-reconstructed.json").layers
    assert any("'kimi_linear_vl' is not in transformers" in n and "KimiLinearConfig" in n for n in m.notes), m.notes
    g = KVGeometry(m, "bf16")
    state = 20 * (12_288 * 4 * 2 + 32 * 128 * 128 * 4)
    assert state == 43_909_120
    assert g.slot_bytes(L) == 7 * 1_152 * L + state == 76_939_264  # all-MLA read: 127,401,984


# --------------------------------------------------------------------------- MiniMax-M3

def test_minimax_m3_sparse_layers_keep_kv_and_index_keys() -> None:
    """MiniMax-M3: 60 layers of 4 KV heads × 128 (K + V: 2,048 B a token); the 57 layers
    whose ``sparse_attention_freq`` is 1 add index keys of ``sparse_index_dim`` 128
    (256 B a token)."""
    m = load_model(CONFIGS / "minimax-m3.json")
    assert [i for i, l in enumerate(m.layers) if l.index_dim] == list(range(3, 60))
    assert any("'minimax_m3' is not in transformers" in n and "MiniMaxM3VLTextConfig" in n for n in m.notes)
    g = KVGeometry(m, "bf16")
    assert g.bytes_per_token() == 60 * 2_048 + 57 * 256 == 137_472
    assert g.slot_bytes(L) == 137_472 * L
    with pytest.raises(KvgateError, match="IndexedAttention"):
        KVGeometry(m, "bf16", layout=get_layout("vllm")).slot_bytes(L)


def test_records_keep_cross_layers_and_leave_other_layers_as_before() -> None:
    """A decision record stores a cross layer's ``images`` and ``image_positions``; other
    layers are dumped without those keys, so the digests of records written before them
    stay the same (tests/test_records.py recomputes the H200 example records)."""
    from dataclasses import asdict

    from kvgate.gate.schema import Layer
    from kvgate.model import LayerSpec

    m = spec_from_config(_raw(MLLAMA), name="m", source="t", images=2)
    cross = Layer(**asdict(m.layers[3])).model_dump()
    assert (cross["kind"], cross["images"], cross["image_positions"]) == ("cross", 2, IMAGE_POSITIONS)
    assert LayerSpec(**cross) == m.layers[3]
    full = Layer(**asdict(m.layers[0])).model_dump()
    assert "images" not in full and "image_positions" not in full


def test_geometry_images_flag_sizes_the_cross_attention_layers(capsys):
    """``kvgate geometry --images N``: each image adds 8 cross layers × 6,404 positions × 2 (K, V) ×
    8 KV heads × 128 × 2 B (bf16) = 209,846,272 B to the 32 full layers' 32 × 4,096 × 2 × 8 × 128 × 2
    = 536,870,912 B; a model without cross-attention refuses the flag."""
    from kvgate.cli import main

    cfg = str(Path(__file__).parent / "data" / "configs" / "llama-3.2-11b-vision-assembled.json")
    per_image = 8 * 6_404 * 2 * 8 * 128 * 2
    full = 32 * 4_096 * 2 * 8 * 128 * 2
    for images in (0, 1, 3):
        assert main(["geometry", cfg, "--max-seq", "4096", "--images", str(images), "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert got["slot_bytes"] == full + images * per_image
    assert main(["geometry", "qwen3-4b", "--max-seq", "16", "--images", "1"]) == 2
    assert "no cross-attention layers" in capsys.readouterr().err
