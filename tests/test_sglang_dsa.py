"""SGLang's pool for DeepSeek sparse attention (DSA) models, worked by hand from SGLang's
code (v0.5.5 / v0.5.9 ``mem_cache/memory_pool.py`` ``NSATokenToKVPool``,
``model_runner`` ``profile_max_num_token`` / ``get_cell_size_per_token``; v0.5.17
``pool_configurator._compute_cell_size``): per layer and token

- fp8_e4m3 row: 512 fp8 latent + 512 / 128 × 4 B scales + 64 × 2 B bf16 rope = 656 B
- bf16 row: (512 + 64) × 2 = 1,152 B
- indexer keys (any KV dtype): 128 fp8 + one 4-byte f32 scale = 132 B
- the profile's cell before v0.5.17 under fp8: 576 × 1 + 132 = 708 B

GLM-5 (tests/data/configs/glm-5.json): 78 layers; DeepSeek-V3.2: 61 layers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvgate.engines import crosscheck, read_engine_log
from kvgate.engines.sglang.fit import fit_sglang
from kvgate.engines.sglang.flags import SglangFlags, is_blackwell
from kvgate.engines.sglang.pool import SGLang, cell_bytes, pool_bytes
from kvgate.errors import KvgateError
from kvgate.fit import lookup_gpu, resolve_release
from kvgate.fit.interval import Interval, Term
from kvgate.geometry import GeometryError, KVGeometry
from kvgate.model import load_model
from kvgate.units import GiB

DATA = Path(__file__).parent / "data"
GLM5 = DATA / "configs" / "glm-5.json"
DSV32 = DATA / "configs" / "deepseek-v3.2.json"
DSV3 = Path(__file__).parents[1] / "src" / "kvgate" / "model" / "presets" / "deepseek-v3.json"


def geo(path: Path, fmt: str, version: str | None = None, **kw) -> KVGeometry:
    return KVGeometry(load_model(path), fmt, layout=SGLang(version=version, **kw))


@pytest.mark.parametrize("path,layers", [(GLM5, 78), (DSV32, 61)])
def test_bytes_per_token_by_hand(path, layers):
    # what the pool stores per token; GLM-5 fp8: 78 × 788 = 61,464 B, bf16: 78 × 1,284 = 100,152 B
    assert geo(path, "fp8").bytes_per_token() == layers * (512 + 4 * 4 + 64 * 2 + 128 + 4) == layers * 788
    assert geo(path, "bf16").bytes_per_token() == layers * ((512 + 64) * 2 + 132) == layers * 1284
    # plain MLA with the indexer in the K format (kvgate's engine-neutral MLA) is not what SGLang stores
    assert KVGeometry(load_model(path), "fp8").bytes_per_token() != layers * 788


@pytest.mark.parametrize("path,layers", [(GLM5, 78), (DSV32, 61)])
def test_profile_cell_per_release(path, layers):
    # before 0.5.17 the profile counts (kv_lora_rank + rope) × element_size(fp8) = 576 B per layer
    assert cell_bytes(geo(path, "fp8", "0.5.5")) == cell_bytes(geo(path, "fp8", "0.5.9")) == layers * (576 + 132)
    assert cell_bytes(geo(path, "fp8", "0.5.17")) == layers * 788
    assert cell_bytes(geo(path, "bf16", "0.5.9")) == cell_bytes(geo(path, "bf16", "0.5.17")) == layers * 1284


def test_non_dsa_mla_unchanged():
    # DeepSeek-V3 (no indexer): MLATokenToKVPool's plain 576-value latent, page 1
    g = geo(DSV3, "fp8")
    assert g.bytes_per_token() == cell_bytes(g) == 61 * 576 and g.layout.page == 1


def test_dsa_pool_refuses_other_dtypes_and_pages():
    with pytest.raises(GeometryError, match="bf16 or fp8_e4m3"):
        geo(GLM5, "fp16")
    with pytest.raises(GeometryError, match="page-size 64"):
        geo(GLM5, "bf16", page_size=1)


def test_deepseek_v32_log_by_hand():
    """tests/data/logs/sglang_deepseek-v3.2_dp8.log (sgl-project/sglang PR #11309, 8×B200:
    fp8_e4m3 is SGLang's DSA default at compute capability 10): "#tokens: 975424, KV size:
    43.67 GB". (975,424 + 64) rows × 656 B × 61 layers = 39,035,127,808 B; index pages
    (975,424 + 64 + 1) // 64 = 15,242 × 64 × 132 B × 61 = 7,854,629,376 B; sum
    46,889,757,184 B = 43.6695 GiB."""
    pool = read_engine_log(DATA / "logs" / "sglang_deepseek-v3.2_dp8.log")
    model = load_model(DSV32)
    p = pool_bytes(KVGeometry(model, "fp8", layout=SGLang()), 975_424)
    assert (p.k_bytes, p.index_bytes) == (975_488 * 656 * 61, 15_242 * 64 * 132 * 61) == (39_035_127_808,
                                                                                           7_854_629_376)
    assert p.log_line() == "KV Cache is allocated. #tokens: 975424, KV size: 43.67 GB"
    cc = crosscheck(pool, model, kv_format="fp8")
    assert cc["status"] == "agrees" and cc["pool_bytes"] == 46_889_757_184
    # the log does not name its dtype: the model's bf16 is assumed, differs, and fp8 is the likely cause
    cc = crosscheck(pool, model)
    assert cc["status"] == "differs" and cc["causes"] == ["agrees with kv format fp8"]


def test_pre_indexer_log_line_of_pr_11309():
    """PR #11309's "before" line, printed before the indexer was counted in the log:
    "#tokens: 1462784, KV size: 54.52 GB" = (1,462,784 + 64) × 656 × 61 B: the fp8 row alone."""
    p = pool_bytes(geo(DSV32, "fp8"), 1_462_784)
    assert p.k_bytes == 1_462_848 * 656 * 61 and f"{p.k_bytes / GiB:.2f}" == "54.52"


def weights(n: int) -> Term:
    return Term("weights", Interval.point(n), "test")


@pytest.mark.parametrize("gpu,release,cell,dtype", [
    ("B200", "0.5.9", 78 * 708, "fp8_e4m3"),     # Blackwell: fp8_e4m3 by default, the 0.5.9 cell
    ("B200", "0.5.17", 78 * 788, "fp8_e4m3"),    # from 0.5.17 the cell is the stored row
    ("H200", "0.5.9", 78 * 1284, "bfloat16"),    # Hopper: bfloat16 by default
])
def test_fit_glm5_tokens_by_hand(gpu, release, cell, dtype):
    a = fit_sglang(load_model(GLM5), weights(90 * GiB), lookup_gpu(gpu), SglangFlags(tp_size=8, context_length=32768),
                   resolve_release("sglang", release))
    assert a.settings["kv_cache_dtype"] == dtype and a.settings["page_size"] == 64
    for end in ("low", "high"):
        t = getattr(a.kv_pool, end) // cell // 64 * 64
        assert a.tokens[end] == t
        assert a.log_lines[end][0].startswith(f"KV Cache is allocated. #tokens: {t}, KV size: ")
        stored = (t + 64) * 78 * (788 - 132 if dtype == "fp8_e4m3" else 1152) + (t + 65) // 64 * 64 * 78 * 132
        assert a.log_lines[end][0].endswith(f"KV size: {stored / GiB:.2f} GB")
    over = [n for n in a.notes if "stores" in n]
    assert bool(over) == (release == "0.5.9" and dtype == "fp8_e4m3")


def test_fit_dsa_flags():
    m, w = load_model(GLM5), weights(90 * GiB)
    with pytest.raises(KvgateError, match="bfloat16 or fp8_e4m3"):
        fit_sglang(m, w, lookup_gpu("H200"), SglangFlags(tp_size=8, kv_cache_dtype="fp8_e5m2", context_length=4096),
                   resolve_release("sglang", "0.5.9"))
    from kvgate.fit.gpus import gpu_from_total

    with pytest.raises(KvgateError, match="does not say") as e:
        fit_sglang(m, w, gpu_from_total(141 * GiB), SglangFlags(tp_size=8, context_length=4096),
                   resolve_release("sglang", "0.5.9"))
    assert "--kv-cache-dtype" in (e.value.hint or "")
    a = fit_sglang(m, w, gpu_from_total(141 * GiB), SglangFlags(tp_size=8, kv_cache_dtype="bf16", context_length=4096),
                   resolve_release("sglang", "0.5.9"))
    assert a.settings["kv_cache_dtype"] == "bfloat16" and a.settings["page_size"] == 64
    assert "page_size" in a.settings["defaults"]


def test_blackwell_names():
    assert [is_blackwell(n) for n in ("B200", "RTX 5090", "NVIDIA GB200", "H200", "H100 80GB", "RTX 4090",
                                      "given total")] == [True, True, True, False, False, False, None]


def test_cli_fit_glm5_json(capsys):
    from kvgate.cli import main

    assert main(["fit", str(GLM5), "--engine", "sglang", "--gpu", "B200", "--tp-size", "8", "--context-length",
                 "32768", "--weights-bytes", str(8 * 90 * GiB), "--release", "0.5.9", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["settings"]["kv_cache_dtype"] == "fp8_e4m3" and d["settings"]["page_size"] == 64
    assert d["tokens"]["low"] == d["kv_pool_bytes"]["low"] // (78 * 708) // 64 * 64


def test_glm5_before_its_release_is_said():
    a = fit_sglang(load_model(GLM5), weights(90 * GiB), lookup_gpu("B200"), SglangFlags(tp_size=8, context_length=4096),
                   resolve_release("sglang", "0.5.5"))
    assert any("GlmMoeDsaForCausalLM" in n for n in a.notes)
    d = fit_sglang(load_model(DSV32), weights(90 * GiB), lookup_gpu("B200"), SglangFlags(tp_size=8, context_length=4096),
                   resolve_release("sglang", "0.5.5"))
    assert not any("GlmMoeDsaForCausalLM" in n for n in d.notes)


def test_tier_sglang_counts_sglang_tokens(tmp_path, capsys):
    """``kvgate tier --cache-model sglang``: a device capacity in bytes is SGLang tokens of
    its DSA pool (GLM-5 fp8: 78 × 788 = 61,464 B per token), not plain MLA tokens."""
    from kvgate.cli import main

    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [0]}) + "\n")
    assert main(["tier", "--trace", str(p), "--model", str(GLM5), "--kv-format", "fp8", "--cache-model", "sglang",
                 "--device-capacity", str(1000 * 61_464 + 5), "--hicache-ratio", "2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["bytes_per_token"] == 61_464 and r["device"]["device_tokens"] == 1000
    # SGLang 0.5.23 pool_host/base.py: int(device tokens × ratio) whole tokens (the 5 spare bytes hold none)
    assert r["host"]["capacity_bytes"] == 2 * 1000 * 61_464


def test_engine_log_gate_sizes_sglang_sequences():
    """The engine-log gate on the DeepSeek-V3.2 log: one sequence of 4,000 tokens takes
    63 pages of 64 tokens × 61 × 788 B (fp8 row + indexer keys), and the record it keeps
    names SGLang's layout so that it rebuilds the same geometry."""
    from kvgate.engines import engine_layout, gate_from_engine_log

    pool = read_engine_log(DATA / "logs" / "sglang_deepseek-v3.2_dp8.log")
    r = gate_from_engine_log(pool, load_model(DSV32), slots=8, max_seq=4000, kv_format="fp8")
    assert r["slot_bytes"] == 63 * 64 * 61 * 788 == 193_810_176
    assert engine_layout(pool, 8) == {"name": "sglang", "page_size": None}
    assert r["record"]["inputs"]["layout"] == {"name": "sglang", "page_size": None, "qk_rope_head_dim": 64}
    from kvgate.gate.record import parse_record, recheck

    res = recheck(parse_record(r["record"]))
    assert res["status"] == "same" and not res["stale"], res["differences"]


def test_log_reader_takes_the_dsa_settings_lines():
    """Two lines as SGLang printed them (sgl-project/sglang issue #29562, GLM-5.2 on SM12):
    the KV dtype ``auto`` became and the page size SGLang forced."""
    from kvgate.engines.logtext import logical_lines
    from kvgate.engines.sglang.log import parse_sglang

    text = ("[2026-06-28 11:20:49] Setting page size to 64 for DeepSeek DSA.\n"
            "[2026-06-28 11:20:49] Setting KV cache dtype to fp8_e4m3 for DeepSeek DSA on SM12 device.\n")
    r = parse_sglang(logical_lines(text))
    assert (r["kv_cache_dtype"], r["page_size"]) == ("fp8_e4m3", 64)
    # 0.5.5's wording (server_args.py: "Setting KV cache dtype to {dtype} for DeepSeek NSA.")
    r = parse_sglang(logical_lines("[TP0] Setting KV cache dtype to bfloat16 for DeepSeek NSA.\n"))
    assert (r["kv_cache_dtype"], r["page_size"]) == ("bfloat16", None)
