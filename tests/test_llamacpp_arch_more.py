"""llama.cpp's per-architecture rules on every path that sizes its cache: a config.json in
llama.cpp's layout (Phi-3 and Mistral run at full attention, forced windows), ``fit
--engine llama.cpp``, the log cross-check, and Falcon-H1 (attention K/V and a Mamba-2 state
in every layer, ``llama_memory_hybrid``) from a GGUF and from a config.json.

Every expected figure is worked by hand below from the shapes (llama.cpp commit
0c1e57098bba: ``src/models/phi3.cpp`` sets ``n_swa = 0``; ``src/llama-kv-cache-iswa.cpp``
sizes a sliding layer ``pad256(min(n_ctx_seq, W + n_ubatch))``; ``llama_hparams::n_embd_r``
= (d_conv − 1)·(d_inner + 2·n_group·d_state), ``n_embd_s`` = d_state·d_inner, f32).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gguf_from_config import write_gguf
from kvgate.engines.crosscheck import crosscheck
from kvgate.engines.llamacpp.arch import ARCH_NAMES, SWA_RULES
from kvgate.engines.llamacpp.fit import LlamaCppFlags, kv_geometry
from kvgate.engines.pool import read_engine_log
from kvgate.geometry import KVGeometry, LlamaCpp
from kvgate.model import load_model
from kvgate.model.gguf import load_gguf

REPO = Path(__file__).resolve().parents[1]
PHI3 = REPO / "tests" / "data" / "llamacpp" / "configs" / "phi-3-mini-4k-instruct.json"
FALCON_H1 = REPO / "tests" / "data" / "configs" / "falcon-h1-0.5b-reconstructed.json"
GEMMA2 = REPO / "tests" / "data" / "configs" / "gemma-2-9b.json"

# Phi-3-mini: 32 layers, 32 KV heads × head_dim 96 (3072 / 32), f16: K = V = 32·96·2 = 6,144 B
PHI3_KV_PER_CELL = 32 * (6_144 + 6_144)  # 393,216 B per cell over all layers


def _cache(model, max_seq: int, **layout) -> int:
    g = KVGeometry(model, "fp16", layout=LlamaCpp(**layout))
    return g.layout.cache_bytes(g, max_seq)  # type: ignore[attr-defined]


# ---------------------------------------------------------------- Phi-3 and friends: full attention


def test_phi3_config_with_a_sliding_window_is_full_attention_in_llamacpp():
    m = load_model(str(PHI3))
    assert m.kinds() == {"sliding": 32}  # transformers' view: the window of 2047
    # llama.cpp: every layer 4096 cells (n_swa = 0). The window would give
    # pad256(min(4096, 2047 + 512)) = 2560 cells: 1,006,632,960 B (−37.5%)
    assert _cache(m, 4096) == 4096 * PHI3_KV_PER_CELL == 1_610_612_736


def test_phi3_at_ubatch_256_the_window_was_43_75_percent_low():
    m = load_model(str(PHI3))
    # windowed: pad256(min(4096, 2047 + 256)) = 2304 cells = 905,969,664 B, 43.75% below
    assert _cache(m, 4096, n_ubatch=256) == 1_610_612_736
    assert 2304 * PHI3_KV_PER_CELL == 905_969_664


def test_phi3_note_says_why():
    g = KVGeometry(load_model(str(PHI3)), "fp16", layout=LlamaCpp())
    assert any("phi3 at full attention" in n and "2,047" in n for n in g.layout.notes)  # type: ignore[attr-defined]


def test_mistral_preset_runs_as_llama_at_full_attention():
    # MistralForCausalLM converts to arch "llama", which never reads attention.sliding_window:
    # 32 layers × 32,768 cells × (2 × 8 heads × 128 × 2 B = 4,096 B) = 4,294,967,296 B
    # (windowed it was pad256(4096 + 512) = 4608 cells: 603,979,776 B)
    assert _cache(load_model("mistral-7b-v0.1"), 32768) == 32 * 32768 * 4096 == 4_294_967_296


def test_fit_engine_llamacpp_sizes_phi3_at_full_attention():
    g = kv_geometry(load_model(str(PHI3)), LlamaCppFlags(ctx_size=4096))
    assert g.layout.cache_bytes(g, 4096) == 1_610_612_736  # type: ignore[attr-defined]


def test_gemma2_config_keeps_its_window():
    # gemma2 is in SWA_RULES: 21 of 42 layers slide over 4096 + 512 → 4608 cells at -c 32768;
    # per cell and layer 2 × 8 × 256 × 2 B = 8,192 B
    m = load_model(str(GEMMA2))
    assert _cache(m, 32768) == 21 * 32768 * 8192 + 21 * 4608 * 8192 == 6_429_868_032


def test_config_swa_rules():
    from kvgate.engines.llamacpp.arch import config_swa

    assert config_swa("phi3", 32, {2047}).full
    assert config_swa("llama", 32, {4096}).full
    assert not config_swa("gemma3", 26, {512}).full and config_swa("gemma3", 26, {512}).window is None
    assert config_swa("exaone4", 32, {4096}).full  # windowed only in the 64-layer model
    assert not config_swa("exaone4", 64, {4096}).full
    assert config_swa("llama4", 48, {4096}).window == 8192  # forced, chunked
    assert config_swa("smallthinker", 32, {2048}).window == 4096
    assert config_swa(None, 32, {4096}) == config_swa("not-an-arch", 32, {4096}) == config_swa("gemma3", 26, set())


def test_arch_for_config_reads_the_converters_class_names():
    from kvgate.engines.llamacpp.arch import arch_for_config

    assert arch_for_config({"architectures": ["Phi3ForCausalLM"]}, "phi3") == "phi3"
    assert arch_for_config({"architectures": ["MistralForCausalLM"]}, "mistral") == "llama"
    assert arch_for_config({"architectures": ["FalconH1ForCausalLM"]}, None) == "falcon-h1"
    assert arch_for_config({}, "qwen3_vl_text") == "qwen3vl"
    assert arch_for_config({}, "unknown_type") is None


def test_every_swa_rule_is_an_arch_of_the_pinned_commit():
    assert set(SWA_RULES) <= ARCH_NAMES and "dflash" in SWA_RULES and "phi3" not in SWA_RULES


# ---------------------------------------------------------------- the log cross-check

PHI3_LOG = """\
print_info: arch                  = phi3
print_info: n_swa                 = 0
llama_context: n_seq_max     = 1
llama_context: n_ctx         = 4096
llama_kv_cache: size = 1536.00 MiB (  4096 cells,  32 layers,  1/1 seqs), K (f16):  768.00 MiB, V (f16):  768.00 MiB
"""

# an older llama.cpp (before iSWA) ran Gemma-2 at full attention: one cache, no SWA cache;
# 42 layers × 4096 cells × 8 × 256 × 2 B = 704,643,072 B = 672 MiB for K, as for V
GEMMA2_OLD_LOG = """\
llama_context: n_seq_max     = 1
llama_context: n_ctx         = 4096
llama_kv_cache: size = 1344.00 MiB (  4096 cells,  42 layers,  1/1 seqs), K (f16):  672.00 MiB, V (f16):  672.00 MiB
"""


def test_crosscheck_phi3_log_agrees_with_full_attention(tmp_path):
    p = tmp_path / "phi3.log"
    p.write_text(PHI3_LOG)
    res = crosscheck(read_engine_log(p, engine="llama.cpp"), load_model(str(PHI3)))
    assert res["status"] == "agrees"
    assert res["pool_bytes"] == 1_610_612_736 == _cache(load_model(str(PHI3)), 4096)


def test_crosscheck_a_windowed_model_against_a_log_without_swa_cache_differs(tmp_path):
    p = tmp_path / "gemma2.log"
    p.write_text(GEMMA2_OLD_LOG)
    res = crosscheck(read_engine_log(p, engine="llama.cpp"), load_model(str(GEMMA2)))
    assert res["status"] == "differs"
    assert any("windows 21 layer(s)" in line and "no SWA cache" in line for line in res["lines"])


# ---------------------------------------------------------------- Falcon-H1

# 36 layers, each: 2 KV heads × 64, f16 → K = V = 256 B per cell (512 B per cell and layer);
# Mamba-2: d_inner 1536, d_state 128, 1 group, d_conv 4 →
# n_embd_r = 3 × (1536 + 256) = 5,376, n_embd_s = 128 × 1536 = 196,608, f32 → 807,936 B per layer
FH1_KV_PER_CELL = 36 * 512  # 18,432 B
FH1_STATE = 36 * (5_376 + 196_608) * 4  # 29,085,696 B per sequence


def _falcon_gguf(tmp_path) -> Path:
    return write_gguf(json.loads(FALCON_H1.read_text()), tmp_path / "falcon-h1.gguf")


def test_falcon_h1_gguf_every_layer_has_attention_and_state(tmp_path):
    m = load_gguf(_falcon_gguf(tmp_path))
    assert m.kinds() == {"full": 36}
    layer = m.layers[0]
    assert (layer.num_kv_heads, layer.head_dim, layer.conv_dim, layer.conv_kernel, layer.ssm_values) == \
        (2, 64, 1792, 4, 196_608)


@pytest.mark.parametrize("n_seq, expected", [
    (1, 4096 * FH1_KV_PER_CELL + FH1_STATE),          # 75,497,472 + 29,085,696 = 104,583,168
    (2, 2 * 4096 * FH1_KV_PER_CELL + 2 * FH1_STATE),  # two streams of 4096 cells, two state rows
])
def test_falcon_h1_gguf_cache_is_kv_cells_plus_state_rows(tmp_path, n_seq, expected):
    m = load_gguf(_falcon_gguf(tmp_path))
    g = KVGeometry(m, "fp16", layout=LlamaCpp(n_seq=n_seq))
    parts = g.layout.cache_parts(g, 4096)  # type: ignore[attr-defined]
    assert parts["rs"] == n_seq * FH1_STATE
    assert parts["k"] == parts["v"] == n_seq * 4096 * 36 * 256
    assert sum(parts.values()) == expected
    assert expected in (104_583_168, 209_166_336)


def test_falcon_h1_config_in_llamacpp_layout_counts_the_state():
    m = load_model(str(FALCON_H1))
    assert _cache(m, 4096) == 104_583_168  # was 75,497,472: the Mamba-2 state was left out


def test_falcon_h1_gguf_without_ssm_keys_is_refused_as_llamacpp_does(tmp_path):
    from gguf import GGUFWriter

    from kvgate.model.spec import ConfigError

    p = tmp_path / "f.gguf"
    w = GGUFWriter(str(p), "falcon-h1")
    w.add_block_count(4)
    w.add_embedding_length(256)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ConfigError) as e:
        load_gguf(p)
    assert "falcon-h1.ssm.conv_kernel" in e.value.message


# ---------------------------------------------------------------- architectures without a cache


def _tiny_gguf(path: Path, arch: str) -> Path:
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), arch)
    w.add_block_count(4)
    w.add_embedding_length(256)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_context_length(512)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("arch", ["bert", "gemma-embedding", "modern-bert", "llada"])
def test_an_architecture_llamacpp_gives_no_memory_holds_zero_bytes(tmp_path, arch):
    # llama_model::create_memory returns nullptr for it; as attention it would be
    # 4 layers × 512 cells × (2 × 4 heads × 64 × 2 B) = 2,097,152 B
    m = load_gguf(_tiny_gguf(tmp_path / "e.gguf", arch))
    assert _cache(m, 512) == 0
    assert any("no KV cache" in n for n in m.notes)


def test_minimax_01_lightning_attention_is_refused_not_sized_as_attention(tmp_path):
    from kvgate.model.spec import ConfigError

    with pytest.raises(ConfigError) as e:
        load_gguf(_tiny_gguf(tmp_path / "m.gguf", "minimax-01"))
    assert "lightning-attention" in e.value.message
