"""A config.json in llama.cpp's layout, mapped as ``convert_hf_to_gguf.py`` maps it
(``kvgate.engines.llamacpp.config``), and the GGUF reader's V default (``n_embd / n_head``).

The expected bytes are llama.cpp's own rules written out: K and V rows of ``head_count_kv
× head dim`` per layer and cell in f16; MiniCPM3's K is ``qk_nope + qk_rope`` = 96 (the
converter's ``key_length``) and its V ``n_embd / n_head`` = 64 (no ``value_length``:
``src/llama-model.cpp`` ``load_hparams``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvgate.cli import main

CONFIGS = Path(__file__).resolve().parent / "data" / "configs"
MINICPM3 = CONFIGS / "minicpm3-4b-reconstructed.json"


def geometry_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["geometry", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_minicpm3_config_in_llamacpp_layout_caches_full_heads_k96_v64(capsys):
    rep = geometry_json(capsys, str(MINICPM3), "-c", "4096")
    assert rep["bytes_per_token"] == 62 * 40 * (96 + 64) * 2 == 793_600
    assert rep["engine_cache_bytes"] == 4096 * 793_600
    assert rep["layer_kinds"] == {"full": 62}


def test_minicpm3_gguf_as_the_converter_writes_it_is_sized_the_same(tmp_path, capsys):
    """The GGUF side: the keys MiniCPM3Model.set_gguf_parameters writes (no value_length),
    read by kvgate's GGUF reader, give V 64 (was 96: the key length)."""
    import gguf

    from kvgate.engines.llamacpp.config import converter_metadata

    meta = converter_metadata(json.loads(MINICPM3.read_text()))
    assert meta is not None and "minicpm3.attention.value_length" not in meta
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "minicpm3")
    for key, v in meta.items():
        if key != "general.architecture":
            w.add_uint32(key, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    by_layer = geometry_json(capsys, str(tmp_path / "m.gguf"), "-c", "4096", "--by-layer")["by_layer"]
    assert {(r["kv_heads_per_rank"], r["head_dim"], r["position_bytes"]) for r in by_layer} == {(40, 96, 40 * 160 * 2)}
    assert geometry_json(capsys, str(MINICPM3), "-c", "4096")["engine_cache_bytes"] == \
        geometry_json(capsys, str(tmp_path / "m.gguf"), "-c", "4096")["engine_cache_bytes"]


def test_minicpm3_config_outside_llamacpp_keeps_transformers_reading(capsys):
    """transformers' MiniCPM3 (and kvgate's contiguous layout) keep the MLA latent reading."""
    rep = geometry_json(capsys, str(MINICPM3), "--max-seq", "4096")
    assert rep["layer_kinds"] == {"mla": 62}


@pytest.mark.parametrize("name,layers,kv,hd", [
    ("deepseek-moe-16b-base", 28, 16, 2048 // 16),   # DeepseekForCausalLM -> deepseek
    ("internlm2-chat-1.8b", 24, 8, 2048 // 16),      # InternLM2ForCausalLM -> internlm2
])
def test_remote_code_configs_sized_as_the_converter_maps_them(capsys, name, layers, kv, hd):
    rep = geometry_json(capsys, str(CONFIGS / f"{name}.json"), "-c", "8192", "-np", "2")
    assert rep["bytes_per_token"] == layers * kv * hd * 2 * 2
    assert rep["engine_cache_bytes"] == 8192 * layers * kv * hd * 2 * 2
    assert any("convert_hf_to_gguf.py" in n for n in rep["notes"])


@pytest.mark.parametrize("name", ["deepseek-moe-16b-base", "internlm2-chat-1.8b"])
def test_remote_code_configs_still_refused_outside_llamacpp(capsys, name):
    assert main(["geometry", str(CONFIGS / f"{name}.json"), "--max-seq", "4096", "--json"]) == 2
    assert "unknown model_type" in json.loads(capsys.readouterr().out)["error"]


def test_orion_context_as_the_converter_reads_it():
    """OrionModel.set_gguf_parameters: max_sequence_length first; head_count_kv defaults to
    the head count."""
    from kvgate.engines.llamacpp.config import converter_metadata

    meta = converter_metadata({"architectures": ["OrionForCausalLM"], "model_type": "orion", "num_hidden_layers": 40,
                               "hidden_size": 5120, "num_attention_heads": 40, "max_sequence_length": 4096,
                               "max_position_embeddings": 8192})
    assert meta == {"general.architecture": "orion", "orion.block_count": 40, "orion.context_length": 4096,
                    "orion.embedding_length": 5120, "orion.attention.head_count": 40,
                    "orion.attention.head_count_kv": 40}


def test_converter_field_missing_is_named():
    from kvgate.engines.llamacpp.config import llamacpp_spec_from_config
    from kvgate.model.spec import ConfigError

    cfg = {k: v for k, v in json.loads(MINICPM3.read_text()).items() if k != "qk_rope_head_dim"}
    with pytest.raises(ConfigError, match="qk_rope_head_dim"):
        llamacpp_spec_from_config(cfg, name="x", source="x")


# ---------------------------------------------------------------- llama.cpp's own bytes

def _config_of(model: str) -> Path | None:
    """The config.json a conformance GGUF was written from (test data or a preset)."""
    p = CONFIGS / f"{model}.json" if not model.startswith("preset-") else \
        Path(__file__).resolve().parents[1] / "src" / "kvgate" / "model" / "presets" / f"{model[len('preset-'):]}.json"
    return p if p.is_file() else None


def _models_with_configs() -> list[str]:
    from test_conformance_llamacpp import rows

    return sorted({r["model"] for r in rows() if _config_of(r["model"]) is not None})


@pytest.mark.parametrize("model", _models_with_configs())
def test_config_in_llamacpp_layout_equals_llamacpp_bytes(model):
    """For every model of ``tests/data/llamacpp/conformance.json`` (llama.cpp at the pinned
    commit, ``llama_get_memory_breakdown``) whose config.json is here, kvgate sized from the
    **config** with the same llama.cpp flags equals llama.cpp's bytes, or both refuse; this
    includes the remote-code ``deci`` (Llama-Nemotron) and ``mimo2`` mapped as the converter
    maps them."""
    from test_conformance_llamacpp import kvgate_result, rows

    cfg = _config_of(model)
    assert cfg is not None
    checked = 0
    for r in rows():
        if r["model"] != model or r["llamacpp"].get("error", "").startswith("aborted"):
            continue
        lc = r["llamacpp"].get("context_bytes")
        kv, err = kvgate_result(cfg, r["setting"])
        assert kv == lc, (r["setting"]["id"], lc, kv, err[-300:])
        checked += 1
    assert checked
