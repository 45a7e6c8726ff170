"""GGUF input: metadata only, per-layer head_count_kv, SWA pattern keys, weight bytes, bad files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from kvgate.errors import KvgateError  # noqa: E402
from kvgate.geometry import KVGeometry  # noqa: E402
from kvgate.model import ConfigError, load_model  # noqa: E402
from kvgate.model.gguf import GGUFError, load_gguf  # noqa: E402
from kvgate.model.weights import weight_bytes  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from gguf_from_config import TINY_TENSOR_BYTES  # noqa: E402


def _write(path: Path, arch: str, meta, tensors=(("t.weight", np.ones((8, 32), np.float32)),)) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    for fn, val in meta:
        getattr(w, fn)(val)
    for name, arr in tensors:
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


BASE = [("add_block_count", 4), ("add_embedding_length", 256), ("add_head_count", 8), ("add_context_length", 4096)]


def test_head_count_kv_per_layer_array(tmp_path):
    p = _write(tmp_path / "m.gguf", "llama", BASE + [("add_head_count_kv", [8, 4, 2, 1])])
    m = load_gguf(p)
    assert [l.num_kv_heads for l in m.layers] == [8, 4, 2, 1]
    assert [l.head_dim for l in m.layers] == [32] * 4  # 256 / 8 when key_length absent
    g = KVGeometry(m, "fp16")
    assert g.bytes_per_token() == sum(2 * h * 32 * 2 for h in (8, 4, 2, 1))


def test_key_value_length_and_swa_pattern_int(tmp_path):
    # cohere2 reads the int pattern from the file (load_swa_pattern(ml, 4)): il % 2 < 1 slides
    meta = BASE + [("add_head_count_kv", 2), ("add_key_length", 128), ("add_value_length", 64),
                   ("add_sliding_window", 100), ("add_sliding_window_pattern", 2)]
    m = load_gguf(_write(tmp_path / "m.gguf", "cohere2", meta))
    assert [l.kind for l in m.layers] == ["sliding", "full", "sliding", "full"]
    assert m.layers[0].head_dim == 128 and m.layers[0].v_head_dim == 64
    assert KVGeometry(m, "bf16").slot_bytes(1000) == 2 * 100 * 2 * 192 * 2 + 2 * 1000 * 2 * 192 * 2


def test_llama_ignores_sliding_window_as_llamacpp_does(tmp_path):
    # src/models/llama.cpp never reads attention.sliding_window: every layer is full
    meta = BASE + [("add_head_count_kv", 2), ("add_sliding_window", 100), ("add_sliding_window_pattern", 2)]
    m = load_gguf(_write(tmp_path / "m.gguf", "llama", meta))
    assert m.kinds() == {"full": 4}
    assert any("full attention on every layer" in n and "100" in n for n in m.notes)


def test_swa_arch_without_required_window_errors_with_keys(tmp_path):
    # cohere2: ml.get_key(LLM_KV_ATTENTION_SLIDING_WINDOW, n_swa) is required
    meta = BASE + [("add_head_count_kv", 2), ("add_sliding_window_pattern", 2)]
    with pytest.raises(ConfigError) as e:
        load_gguf(_write(tmp_path / "m.gguf", "cohere2", meta))
    assert "sliding_window" in e.value.message and "cohere2.attention" in e.value.hint


def test_unknown_arch_swa_without_pattern_errors_with_keys(tmp_path):
    meta = BASE + [("add_head_count_kv", 2), ("add_sliding_window", 100)]
    with pytest.raises(ConfigError) as e:
        load_gguf(_write(tmp_path / "m.gguf", "notanarch", meta))
    assert "notanarch.attention.sliding_window=100" in e.value.hint


def test_arch_builtin_swa_pattern_gemma3(tmp_path):
    meta = [("add_block_count", 12), ("add_embedding_length", 256), ("add_head_count", 4),
            ("add_head_count_kv", 1), ("add_key_length", 64), ("add_value_length", 64), ("add_sliding_window", 512)]
    m = load_gguf(_write(tmp_path / "g.gguf", "gemma3", meta))
    assert [i for i, l in enumerate(m.layers) if l.kind == "full"] == [5, 11]


def test_gemma2_default_window_and_dense_first_patterns(tmp_path):
    # gemma2: SWA always, n_swa = 4096 when the file has none, pattern 2 (even layers slide)
    meta = [("add_block_count", 4), ("add_embedding_length", 256), ("add_head_count", 4), ("add_head_count_kv", 2)]
    m = load_gguf(_write(tmp_path / "g.gguf", "gemma2", meta))
    assert [(l.kind, l.window) for l in m.layers] == [("sliding", 4096), ("full", None)] * 2
    # cohere2moe: load_swa_pattern(ml, 4, dense_first=true): full at il % 4 == 0
    eight = [("add_block_count", 8), ("add_embedding_length", 256), ("add_head_count", 4), ("add_head_count_kv", 2)]
    m = load_gguf(_write(tmp_path / "c.gguf", "cohere2moe", eight + [("add_sliding_window", 256)]))
    assert [i for i, l in enumerate(m.layers) if l.kind == "full"] == [0, 4]
    # smallthinker: the window is forced to 4096 whatever the file says
    m = load_gguf(_write(tmp_path / "s.gguf", "smallthinker", eight + [("add_sliding_window", 1000)]))
    assert {l.window for l in m.layers if l.kind == "sliding"} == {4096}
    assert [i for i, l in enumerate(m.layers) if l.kind == "full"] == [0, 4]
    assert any("4,096 whatever the file says" in n for n in m.notes)


def test_llama4_chunked_8192_unless_window_zero(tmp_path):
    meta = [("add_block_count", 8), ("add_embedding_length", 256), ("add_head_count", 4), ("add_head_count_kv", 2)]
    m = load_gguf(_write(tmp_path / "l.gguf", "llama4", meta))
    assert [i for i, l in enumerate(m.layers) if l.kind == "full"] == [3, 7]
    assert all(l.chunked and l.window == 8192 for l in m.layers if l.kind == "sliding")
    m = load_gguf(_write(tmp_path / "l0.gguf", "llama4", meta + [("add_sliding_window", 0)]))
    assert m.kinds() == {"full": 8}


def test_not_modelled_arch_is_refused_naming_the_cache(tmp_path):
    meta = BASE + [("add_head_count_kv", 2)]
    with pytest.raises(ConfigError) as e:
        load_gguf(_write(tmp_path / "f.gguf", "plamo2", meta))  # (falcon-h1 is modelled now)
    assert "plamo2" in e.value.message and "hybrid Mamba state" in e.value.message


MLA_KEYS = [("add_head_count_kv", 1), ("add_kv_lora_rank", 512), ("add_rope_dimension_count", 64),
            ("add_key_length", 576), ("add_value_length", 512), ("add_key_length_mla", 192),
            ("add_value_length_mla", 128)]


def test_mla_and_shared_kv_layers(tmp_path):
    # convert_hf_to_gguf.py today: key_length = kv_lora_rank + rope = 576 with one KV head,
    # and the per-head sizes in key_length_mla / value_length_mla (llama_hparams::is_mla)
    meta = BASE + MLA_KEYS + [("add_shared_kv_layers", 1)]
    m = load_gguf(_write(tmp_path / "d.gguf", "deepseek2", meta))
    assert [l.kind for l in m.layers] == ["mla", "mla", "mla", "shared"]
    assert KVGeometry(m, "q8_0").bytes_per_token() == 3 * (576 // 32) * 34


CASES = Path("/work/shared/cases/turn2")
L1 = Path(__file__).parent / "data" / "llamacpp" / "deepseek-v2-lite-pre-mla-keys.gguf"


def test_pre_mla_keys_gguf_is_full_per_head_attention_L1():
    """L1: a DeepSeek-V2-Lite GGUF converted before ``attention.key_length_mla`` existed
    (metadata only, from an Ollama deepseek-coder-v2 16B run). llama.cpp's ``is_mla()`` is
    false, so each of the 27 layers caches K of 16 heads × 192 and V of 16 × 128 in f16.
    ``-c 16384 -np 8``: n_ctx_seq = 16384 / 8 = 2,048 cells per stream, 8 streams.
    K = 27 × 2048 × 8 × 16 × 192 × 2 B = 2,717,908,992 B (2,592 MiB);
    V = 27 × 2048 × 8 × 16 × 128 × 2 B = 1,811,939,328 B (1,728 MiB); the logged 4,320 MiB."""
    from kvgate.geometry import LlamaCpp

    m = load_model(L1)
    assert m.kinds() == {"full": 27}
    assert (m.layers[0].num_kv_heads, m.layers[0].head_dim, m.layers[0].v_head_dim) == (16, 192, 128)
    assert any("key_length_mla" in n for n in m.notes)
    g = KVGeometry(m, "fp16", layout=LlamaCpp(n_seq=8))
    assert g.layout.cache_bytes(g, 2048) == 2_717_908_992 + 1_811_939_328 == 4_320 * 2**20


def test_same_file_with_mla_keys_is_latent(tmp_path):
    meta = [("add_block_count", 27), ("add_embedding_length", 2048), ("add_head_count", 16)] + MLA_KEYS
    m = load_gguf(_write(tmp_path / "m.gguf", "deepseek2", meta))
    assert m.kinds() == {"mla": 27} and m.layers[0].latent_dim == 576
    assert not m.notes


def test_zero_width_layers_and_nextn(tmp_path):
    # head_count_kv 0 on a non-recurrent layer: ggml tensors of width 0 (0 bytes);
    # nextn_predict_layers 1: the last layer is an MTP head, filtered out of the main cache
    meta = [("add_block_count", 4), ("add_embedding_length", 256), ("add_head_count", [4, 0, 4, 4]),
            ("add_head_count_kv", [2, 0, 2, 2]), ("add_key_length", 64), ("add_value_length", 64),
            ("add_nextn_predict_layers", 1)]
    m = load_gguf(_write(tmp_path / "z.gguf", "llama", meta))
    assert [l.kind for l in m.layers] == ["full", "shared", "full", "shared"]
    assert KVGeometry(m, "fp16").bytes_per_token() == 2 * 2 * (2 * 64) * 2
    assert any("head_count_kv 0" in n for n in m.notes) and any("nextn" in n for n in m.notes)


def test_weight_bytes_from_tensor_infos_only(tmp_path):
    tensors = (("a", np.zeros((16, 32), np.float16)), ("b", np.zeros((3,), np.float32)))
    p = _write(tmp_path / "w.gguf", "llama", BASE + [("add_head_count_kv", 8)], tensors)
    assert load_gguf(p).config["weight_bytes"] == 16 * 32 * 2 + 12
    wb = weight_bytes(p)
    assert wb.exact and wb.bytes == 16 * 32 * 2 + 12 and wb.tensors == 2


def test_quantized_tensor_bytes(tmp_path):
    raw = np.zeros((4, 34), np.uint8)  # 4 rows × one q8_0 block (32 values → 34 B)
    w = gguf.GGUFWriter(str(tmp_path / "q.gguf"), "llama")
    for fn, val in BASE + [("add_head_count_kv", 8)]:
        getattr(w, fn)(val)
    w.add_tensor("q", raw, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    assert weight_bytes(tmp_path / "q.gguf").bytes == 4 * 34


def test_not_gguf_and_truncated(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 100)
    with pytest.raises(GGUFError, match="not a GGUF file"):
        load_model(bad)
    good = _write(tmp_path / "g.gguf", "llama", BASE + [("add_head_count_kv", 8)])
    data = good.read_bytes()
    for cut in (6, 30, len(data) // 2):
        t = tmp_path / f"t{cut}.gguf"
        t.write_bytes(data[:cut])
        with pytest.raises(KvgateError):
            load_model(t)
    with pytest.raises(KvgateError, match="not found"):
        load_model(tmp_path / "missing.gguf")


def test_tiny_tensor_helper_bytes(shared_dir, tmp_path):
    import json

    from gguf_from_config import write_gguf

    c = json.loads((shared_dir / "cases" / "configs" / "qwen3-0.6b.json").read_text())
    p = write_gguf(c, tmp_path / "q.gguf")
    assert weight_bytes(p).bytes == TINY_TENSOR_BYTES


# ----------------------------------------------------------------------------- bad metadata values

def _write_raw(path: Path, kv: dict[str, tuple[str, object]]) -> Path:
    """A llama GGUF whose keys are written with explicit types: {suffix: (add_method, value)};
    a value of None leaves the key out."""
    w = gguf.GGUFWriter(str(path), "llama")
    for suffix, (fn, val) in kv.items():
        if val is not None:
            getattr(w, fn)(f"llama.{suffix}", val)
    w.add_tensor("t.weight", np.ones((8, 32), np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return path


RAW = {"block_count": ("add_uint32", 4), "embedding_length": ("add_uint32", 256),
       "attention.head_count": ("add_uint32", 8), "attention.head_count_kv": ("add_uint32", 2),
       "context_length": ("add_uint32", 4096)}


def _geometry_error(tmp_path, capsys, **override) -> str:
    from kvgate.cli import main

    p = _write_raw(tmp_path / "bad.gguf", {**RAW, **override})
    assert main(["geometry", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR: ") and "Traceback" not in err
    return err


def test_raw_writer_baseline(tmp_path):
    m = load_gguf(_write_raw(tmp_path / "ok.gguf", RAW))
    assert [(l.num_kv_heads, l.head_dim) for l in m.layers] == [(2, 32)] * 4


def test_block_count_implausible_or_zero(tmp_path, capsys):
    err = _geometry_error(tmp_path, capsys, block_count=("add_uint32", 4_000_000_000))
    assert "GGUF 'llama.block_count' 4,000,000,000 is not a plausible layer count (more than 100,000)" in err
    err = _geometry_error(tmp_path, capsys, block_count=("add_uint32", 0))
    assert "GGUF key 'llama.block_count' must be an integer ≥ 1, got 0" in err


@pytest.mark.parametrize("key,fn,val,shown", [
    ("attention.key_length", "add_string", "abc", "'abc' (str)"),
    ("attention.key_length", "add_float32", 128.0, "128.0 (float)"),
    ("attention.key_length", "add_bool", True, "True (bool)"),
    ("attention.value_length", "add_string", "64", "'64' (str)"),
    ("block_count", "add_string", "4", "'4' (str)"),
    ("embedding_length", "add_float32", 256.0, "256.0 (float)"),
    ("attention.head_count", "add_string", "8", "'8' (str)"),
    ("attention.head_count_kv", "add_bool", True, "True (bool)"),
    ("attention.sliding_window", "add_string", "100", "'100' (str)"),
    ("context_length", "add_float32", 4096.0, "4096.0 (float)"),
])
def test_numeric_key_wrong_type_named(tmp_path, capsys, key, fn, val, shown):
    err = _geometry_error(tmp_path, capsys, **{key: (fn, val)})
    assert f"GGUF key 'llama.{key}' must be an integer, got {shown}" in err


def test_numeric_key_out_of_range_named(tmp_path, capsys):
    err = _geometry_error(tmp_path, capsys, **{"attention.key_length": ("add_uint32", 0)})
    assert "GGUF key 'llama.attention.key_length' must be an integer ≥ 1, got 0" in err
    err = _geometry_error(tmp_path, capsys, **{"attention.value_length": ("add_int32", -64)})
    assert "GGUF key 'llama.attention.value_length' must be an integer ≥ 1, got -64" in err
    err = _geometry_error(tmp_path, capsys, **{"attention.head_count_kv": ("add_int32", -2)})
    assert "GGUF key 'llama.attention.head_count_kv' must be an integer ≥ 0, got -2" in err
    err = _geometry_error(tmp_path, capsys, **{"attention.shared_kv_layers": ("add_uint32", 4)})
    assert "GGUF key 'llama.attention.shared_kv_layers' must be an integer in [0, 3], got 4" in err
    err = _geometry_error(tmp_path, capsys, **{"attention.head_count_kv": ("add_array", ["2", "2", "2", "2"])})
    assert "GGUF key 'llama.attention.head_count_kv' entry 0 must be an integer, got '2' (str)" in err


def test_head_dim_needs_divisible_embedding(tmp_path, capsys):
    err = _geometry_error(tmp_path, capsys, embedding_length=("add_uint32", 250))
    assert ("GGUF 'llama.embedding_length' 250 is not divisible by 'llama.attention.head_count' 8, "
            "and there is no 'llama.attention.key_length' to give the head dim") in err
    # an explicit key_length needs no division
    p = _write_raw(tmp_path / "ok.gguf", {**RAW, "embedding_length": ("add_uint32", 250),
                                         "attention.key_length": ("add_uint32", 64)})
    assert load_gguf(p).layers[0].head_dim == 64


@pytest.mark.parametrize("head_count", [None, 0])
def test_head_count_missing_or_zero_named(tmp_path, capsys, head_count):
    err = _geometry_error(tmp_path, capsys, **{"attention.head_count": ("add_uint32", head_count)})
    assert "GGUF 'llama.attention.head_count' is missing or 0, but layer 0 is an attention layer" in err


def _dsa_meta(arch: str, n: int, ctx: int) -> list:
    return [("add_block_count", n), ("add_embedding_length", 256), ("add_head_count", 4), ("add_context_length", ctx),
            ("add_uint32", (f"{arch}.attention.indexer.key_length", 128))] + MLA_KEYS


def _write_kv(path, arch, meta):
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    for fn, val in meta:
        if fn == "add_uint32":
            w.add_uint32(*val)
        else:
            getattr(w, fn)(val)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_dsa_indexer_keys_beside_the_latent(tmp_path):
    # llama_kv_cache_dsa: one indexer key head of attention.indexer.key_length per cell, in -ctk's type
    m = load_gguf(_write_kv(tmp_path / "d.gguf", "deepseek32", _dsa_meta("deepseek32", 4, 4096)))
    assert [(l.kind, l.latent_dim, l.index_dim) for l in m.layers] == [("mla", 576, 128)] * 4
    assert KVGeometry(m, "fp16").bytes_per_token() == 4 * (576 + 128) * 2


def test_glm52_builtin_indexer_table_and_glm5_all_full(tmp_path):
    # src/models/glm-dsa.cpp: n_ctx_train < 1,048,576 (GLM-5/5.1): every layer has an indexer;
    # else GLM_5_2_DEFAULT_INDEXER_TYPES = 1, 1, then 1, 0, 0, 0 repeated
    m = load_gguf(_write_kv(tmp_path / "g5.gguf", "glm-dsa", _dsa_meta("glm-dsa", 10, 202752)))
    assert [l.index_dim for l in m.layers] == [128] * 10
    m = load_gguf(_write_kv(tmp_path / "g52.gguf", "glm-dsa", _dsa_meta("glm-dsa", 10, 1048576)))
    assert [l.index_dim > 0 for l in m.layers] == [True, True, True, False, False, False, True, False, False, False]


def test_kimi_linear_kda_state(tmp_path):
    # llama_hparams::n_embd_r = 3 (d_conv - 1) n_head kda; n_embd_s = kda^2 n_head; f32 in llama.cpp
    meta = [("add_block_count", 4), ("add_embedding_length", 256), ("add_head_count", 2),
            ("add_head_count_kv", [0, 0, 0, 1]), ("add_ssm_conv_kernel", 4),
            ("add_uint32", ("kimi-linear.kda.head_dim", 64))] + MLA_KEYS[1:]
    m = load_gguf(_write_kv(tmp_path / "k.gguf", "kimi-linear", meta))
    assert [l.kind for l in m.layers] == ["linear"] * 3 + ["mla"]
    from kvgate.geometry import LlamaCpp

    g = KVGeometry(m, "fp16", layout=LlamaCpp(n_seq=1))
    r = 3 * 3 * 2 * 64
    s = 64 * 64 * 2
    assert g.layout.cache_parts(g, 256)["rs"] == 3 * (r + s) * 4


def test_zero_width_layer_gets_widest_v_with_fa_off(tmp_path):
    # Llama-Nemotron (deci): head_count_kv 0 layers stay in llama_kv_cache at width 0, but a
    # transposed V (-fa off) is made at n_embd_v_gqa_max for every layer
    meta = [("add_block_count", 3), ("add_embedding_length", 256), ("add_head_count", [4, 4, 0]),
            ("add_head_count_kv", [2, 1, 0]), ("add_key_length", 64), ("add_value_length", 64)]
    m = load_gguf(_write_kv(tmp_path / "z.gguf", "deci", meta))
    from kvgate.geometry import LlamaCpp

    on = KVGeometry(m, "fp16", layout=LlamaCpp(flash_attn="on"))
    off = KVGeometry(m, "fp16", layout=LlamaCpp(flash_attn="off"))
    cells = 256
    assert on.layout.cache_bytes(on, cells) == cells * (2 * 2 * 64 + 2 * 1 * 64) * 2
    # V of every layer padded to 2 heads x 64: 3 layers; K as on
    assert off.layout.cache_bytes(off, cells) == cells * ((2 + 1) * 64 * 2 + 3 * 2 * 64 * 2)


# ------------------------------------------------------------------ found by trying to break it

_Q35 = [("add_block_count", 8), ("add_embedding_length", 256), ("add_head_count", 8), ("add_head_count_kv", 2),
        ("add_key_length", 64), ("add_value_length", 64), ("add_ssm_conv_kernel", 4), ("add_ssm_inner_size", 256),
        ("add_ssm_state_size", 64), ("add_ssm_group_count", 2), ("add_ssm_time_step_rank", 4)]


def test_qwen35_without_interval_uses_llamacpps_default_of_4(tmp_path):
    # src/models/qwen35.cpp: uint32_t full_attn_interval = 4; get_key(..., false)
    m = load_gguf(_write(tmp_path / "q.gguf", "qwen35", _Q35))
    assert [i for i, l in enumerate(m.layers) if l.kind == "full"] == [3, 7]


@pytest.mark.parametrize("arch,drop", [("qwen35", "add_ssm_state_size"), ("mamba2", "add_ssm_group_count"),
                                       ("jamba", "add_ssm_inner_size")])
def test_recurrent_arch_missing_required_state_key_is_refused(tmp_path, arch, drop):
    meta = [(f, v) for f, v in _Q35 if f != drop]
    with pytest.raises(ConfigError) as e:
        load_gguf(_write(tmp_path / "r.gguf", arch, meta))
    assert "requires" in e.value.message and arch in e.value.message


def test_lfm2_without_l_cache_and_kda_without_heads_are_refused(tmp_path):
    base = [("add_block_count", 4), ("add_embedding_length", 256), ("add_head_count", 4),
            ("add_head_count_kv", [0, 2, 0, 2])]
    with pytest.raises(ConfigError, match="shortconv.l_cache"):
        load_gguf(_write(tmp_path / "l.gguf", "lfm2", base))
    meta = [("add_block_count", 2), ("add_embedding_length", 256), ("add_head_count", 0),
            ("add_head_count_kv", [0, 1]), ("add_ssm_conv_kernel", 4)] + MLA_KEYS[1:]
    with pytest.raises(ConfigError, match="head_count"):
        load_gguf(_write_kv(tmp_path / "k.gguf", "kimi-linear", meta + [("add_uint32", ("kimi-linear.kda.head_dim", 64))]))


def test_nextn_must_leave_a_main_layer_and_does_not_overlap_shared_layers(tmp_path):
    with pytest.raises(ConfigError, match="nextn_predict_layers"):
        load_gguf(_write(tmp_path / "n.gguf", "llama", BASE + [("add_nextn_predict_layers", 4)]))
    # gemma3n: layers 0..19 own KV, 20..27 reuse it, 28..29 are MTP heads
    meta = [("add_block_count", 30), ("add_embedding_length", 256), ("add_head_count", 4), ("add_head_count_kv", 1),
            ("add_key_length", 64), ("add_value_length", 64), ("add_sliding_window", 512),
            ("add_nextn_predict_layers", 2)]
    m = load_gguf(_write(tmp_path / "g.gguf", "gemma3n", meta))
    assert all(l.kind != "shared" for l in m.layers[:20]) and all(l.kind == "shared" for l in m.layers[20:])


def test_llamacpp_flags_np_ub_and_cache_types_as_llamacpp_takes_them(tmp_path, capsys):
    from kvgate.cli import main

    p = _write(tmp_path / "g.gguf", "gemma2", [("add_block_count", 2), ("add_embedding_length", 256),
                                               ("add_head_count", 4), ("add_head_count_kv", 2),
                                               ("add_sliding_window", 1000)])
    assert main(["geometry", str(p), "--max-seq", "256", "-np", "257"]) == 2
    assert "LLAMA_MAX_SEQ" in capsys.readouterr().err
    assert main(["geometry", str(p), "-ctk", "fp8"]) == 2
    assert "gemma2.context_length" in capsys.readouterr().err  # the file has none: named
    assert main(["geometry", str(p), "-c", "4096", "-ctk", "fp8"]) == 2
    assert "no fp8 cache type" in capsys.readouterr().err
    # -ub 4096 is clamped to n_batch 2048 (llama_context): SWA cells pad256(1000 + 2048) = 3,072
    assert main(["geometry", str(p), "-c", "32768", "-ub", "4096", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["engine_cache_bytes"]
    per_cell = 2 * 2 * 64 * 2  # K + V, 2 heads x 64, f16
    assert got == 32768 * per_cell + 3072 * per_cell
    assert main(["geometry", str(p), "-c", "32768", "-ub", "4096", "-b", "4096", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engine_cache_bytes"] == 32768 * per_cell + 5120 * per_cell


def _plain_and_header_readers(path):
    import gguf

    from kvgate.model.gguf import read_gguf

    return gguf.GGUFReader(str(path), "r"), read_gguf(path)


@pytest.mark.slow  # gguf-py's own reader takes ~16 s on this vocabulary: scripts/test skips it, .ci/run runs it
def test_header_reader_keeps_long_tokenizer_arrays_as_counts(tmp_path):
    """A 262,208-token Gemma-3 vocabulary (the shape's own count, written as a real string
    array): the header reader gives the same metadata, token count, tensors and weight bytes
    as gguf-py's reader, without one numpy view per token."""
    import os
    import sys
    from pathlib import Path

    pytest.importorskip("gguf")
    from kvgate.model.gguf import LONG_ARRAY, gguf_metadata, gguf_weight_bytes, load_gguf

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        from llamacpp_gpu_buffers import write_header
    finally:
        sys.path.pop(0)
    p = tmp_path / "g12.gguf"
    os.truncate(p, write_header(p, "gemma3_12b", "Q8_0"))
    plain, fast = _plain_and_header_readers(p)
    n = len(plain.fields["tokenizer.ggml.tokens"].data)
    assert n >= LONG_ARRAY and len(fast.fields["tokenizer.ggml.tokens"].data) == n
    assert len(fast.fields["tokenizer.ggml.tokens"].parts) < 10 < len(plain.fields["tokenizer.ggml.tokens"].parts)
    assert gguf_metadata(fast) == gguf_metadata(plain)
    assert [(t.name, t.n_bytes, list(t.shape)) for t in fast.tensors] == \
        [(t.name, t.n_bytes, list(t.shape)) for t in plain.tensors]
    assert gguf_weight_bytes(fast) == gguf_weight_bytes(plain)
    assert load_gguf(p).config["tokenizer_tokens"] == n


@pytest.mark.parametrize("name", sorted(p.name for p in (Path(__file__).parent / "data" / "llamacpp" /
                                                         "conformance").glob("*.gguf"))[:12])
def test_header_reader_reads_the_conformance_ggufs_as_gguf_py_does(name):
    pytest.importorskip("gguf")
    from kvgate.model.gguf import gguf_metadata

    plain, fast = _plain_and_header_readers(Path(__file__).parent / "data" / "llamacpp" / "conformance" / name)
    assert gguf_metadata(fast) == gguf_metadata(plain)
    assert {k: len(f.data) for k, f in fast.fields.items()} == {k: len(f.data) for k, f in plain.fields.items()}
