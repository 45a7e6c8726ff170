"""SGLang's hybrid sliding-window pool in ``kvgate fit`` (kvgate.engines.sglang.swa): which
releases build two pools for which architectures, how --swa-full-tokens-ratio splits the
budget, and the lines SGLang prints — checked against real MiMo-V2-Flash logs
(sglang#15464, sglang#18039; tests/data/logs/SOURCES.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvgate.cli import main
from kvgate.engines.sglang.pool import SGLang
from kvgate.engines.sglang.swa import swa_log_lines, swa_split, two_pools_why
from kvgate.geometry import KVGeometry
from kvgate.model import load_model

DATA = Path(__file__).parent / "data"
MIMO = str(DATA / "configs" / "mimo-v2-flash.json")
GiB = 2**30


def fit_json(capsys, *argv):
    try:
        code = main(["fit", *argv, "--json"])
    except SystemExit as exc:
        code = exc.code
    return code, json.loads(capsys.readouterr().out)


def _mimo_split(version, ratio, page):
    m = load_model(MIMO)
    geo = KVGeometry(m, "bf16", tp=4, layout=SGLang(page_size=page))
    return swa_split(geo, m, version, ratio)


def _logged(name):
    text = (DATA / "logs" / name).read_text()
    pools = [(int(t), k, v) for t, k, v in re.findall(r"#tokens: (\d+), K size: ([\d.]+) GB, V size: ([\d.]+) GB", text)]
    usage = re.findall(r"SWAKVPool mem usage: ([\d.]+) GB, swa size: (\d+), full size: (\d+)", text)
    split = re.findall(r"full_layer_tokens=(\d+), swa_layer_tokens=(\d+)", text)
    return pools, usage, split


def test_both_pool_lines_and_mem_usage_match_the_15464_log():
    """Each rank printed its SWA pool (39 layers, 2 KV heads of 192 + 128 at TP 4) and its
    full pool (9 layers, 1 KV head), 1,496,958 tokens each, and their sum: every figure
    kvgate prints for those token counts is the log's, to the hundredth of a GiB."""
    pools, usage, _ = _logged("sglang_mimo-v2-flash_tp4_swa-pools.log")
    (mem, swa, full), = set(usage)
    lines = swa_log_lines(_mimo_split((0, 5, 7), 1.0, 1), int(full), int(swa), 1)
    logged = {f"KV Cache is allocated. #tokens: {t}, K size: {k} GB, V size: {v} GB" for t, k, v in pools}
    assert set(lines[1:3]) == logged  # the SWA pool (41.76 GB K) and the full pool (4.82 GB K)
    assert lines[3] == f"SWAKVPool mem usage: {mem} GB, swa size: {swa}, full size: {full}"


def test_ratio_split_and_swa_pool_line_match_the_18039_log():
    """At the default ratio 0.8 and --page-size 64 SGLang printed 375,360 full and 300,288
    SWA tokens: int(375,360 × 0.8) = 300,288 (page-aligned), and the SWA pool of 300,288 +
    64 rows prints the logged K and V sizes."""
    pools, _, split = _logged("sglang_mimo-v2-flash_tp4_swa-ratio.log")
    (full, swa), = set(split)
    sp = _mimo_split((0, 5, 8), 0.8, 64)
    lines = swa_log_lines(sp, int(full), int(swa), 64)
    assert lines[0] == f"Use sliding window memory pool. full_layer_tokens={full}, swa_layer_tokens={swa}"
    assert int(full) * 4 // 5 // 64 * 64 == int(swa)
    t, k, v = pools[0]
    assert lines[1] == f"KV Cache is allocated. #tokens: {t}, K size: {k} GB, V size: {v} GB"


def test_layers_rule_reaches_the_18039_pair_from_a_page_aligned_profile():
    """The rule of 0.5.7–0.5.8 (every layer counted full, then the layer-tokens split) gives
    the logged (375,360, 300,288) for some profiled max_total_num_tokens; the byte rule of
    0.5.9 at the same budgets does not (it gives more full tokens for the same bytes)."""
    old, new = _mimo_split((0, 5, 8), 0.8, 64), _mimo_split((0, 5, 9), 0.8, 64)
    hits = [rest for rest in range(300_000 * old.first_cell, 330_000 * old.first_cell, 64 * old.first_cell)
            if old.tokens(rest, 64) == (375360, 300288)]
    assert hits
    assert all(new.tokens(rest, 64) != (375360, 300288) for rest in hits)


@pytest.mark.parametrize(("config", "release", "two"), [
    ("gemma-3-1b.json", (0, 4, 9), False),     # SWAKVPool defined, never chosen
    ("gemma-3-1b.json", (0, 4, 10), True),     # the class's get_attention_sliding_window_size
    ("gemma-3-1b.json", (0, 5, 1), False),     # server_args: "Disable hybrid SWA memory for …"
    ("gemma-3-1b.json", (0, 5, 12), False),    # not in is_hybrid_swa_model's list
    ("mimo-v2-flash.json", (0, 5, 7), True),
    ("gpt-oss-120b.json", (0, 5, 5), False),   # disabled from 0.5.2
    ("gpt-oss-120b.json", (0, 5, 7), False),   # is_hybrid_model: MiMo alone
    ("gpt-oss-120b.json", (0, 5, 8), True),    # is_hybrid_swa_model's list
    ("llama-4-scout-17b-16e-instruct.json", (0, 5, 5), False),  # "not any('Llama4' in arch)"
    ("llama-4-scout-17b-16e-instruct.json", (0, 5, 8), True),
    ("gemma-4-31b-it-nvfp4.json", (0, 5, 10), False),
    ("gemma-4-31b-it-nvfp4.json", (0, 5, 11), True),
    ("qwen3-8b.json", (0, 5, 12), False),      # no sliding layers
])
def test_two_pools_by_architecture_and_release(config, release, two):
    assert (two_pools_why(load_model(str(DATA / "configs" / config)), release) is not None) == two


def test_gpt_oss_on_blackwell_keeps_one_pool():
    """server_args.py (0.5.9+): the trtllm_mha backend, GPT-OSS's default on SM100, turns the
    hybrid pool off."""
    m = load_model(str(DATA / "configs" / "gpt-oss-120b.json"))
    assert two_pools_why(m, (0, 5, 12), gpu_blackwell=True) is None
    assert two_pools_why(m, (0, 5, 12), gpu_blackwell=False) is not None


def test_fit_prints_both_pools_and_stores_their_sum(capsys):
    """fit at 0.5.12: max_total_num_tokens is the full pool; the SWA pool is ratio × it,
    page-aligned; the stored bytes are the two pools' rows, which the mem usage line adds up."""
    code, out = fit_json(capsys, MIMO, "--engine", "sglang", "--gpu", "H200", "--tp-size", "4", "--release",
                         "0.5.12", "--weights-bytes", "310GB", "--mem-fraction-static", "0.85", "--page-size", "64")
    assert code == 0
    hi = out["log_lines"]["high"]
    full, swa = map(int, re.search(r"full_layer_tokens=(\d+), swa_layer_tokens=(\d+)", hi[0]).groups())
    assert out["tokens"]["high"] == full and swa == int(full * 0.8) // 64 * 64
    sp = _mimo_split((0, 5, 12), 0.8, 64)
    assert sum(sp.pool_bytes(full, swa, 64)) == out["kv_stored_bytes"]["high"]
    assert f"SWAKVPool mem usage: {out['kv_stored_bytes']['high'] / GiB:.2f} GB" in hi[3]
    # the configurator spends no more than the budget on the tokens; the page rows come on top
    assert sum(sp.pool_bytes(full, swa, 0)) <= out["kv_pool_bytes"]["high"] < out["kv_stored_bytes"]["high"]


def test_ratio_flag_moves_tokens_between_pools(capsys):
    """A smaller --swa-full-tokens-ratio gives the full pool more tokens and the SWA pool fewer."""
    base = ("--engine", "sglang", "--gpu", "H200", "--tp-size", "4", "--release", "0.5.12",
            "--weights-bytes", "310GB", "--mem-fraction-static", "0.85")
    _, a = fit_json(capsys, MIMO, *base)
    _, b = fit_json(capsys, MIMO, *base, "--swa-full-tokens-ratio", "0.2")
    assert b["tokens"]["high"] > a["tokens"]["high"]
    assert b["settings"]["swa_full_tokens_ratio"] == 0.2 and a["settings"]["swa_full_tokens_ratio"] == 0.8
    assert "swa_full_tokens_ratio" in a["settings"]["defaults"]


def test_gemma3_one_pool_note_quotes_sglang(capsys):
    code, out = fit_json(capsys, str(DATA / "configs" / "gemma-3-1b.json"), "--engine", "sglang", "--gpu", "L4",
                         "--release", "0.5.5")
    assert code == 0
    assert any("Disable hybrid SWA memory for Gemma3ForCausalLM" in n for n in out["notes"])


@pytest.mark.parametrize("bad", ["0", "1.5", "-0.2"])
def test_bad_ratio_refused(capsys, bad):
    try:
        code = main(["fit", MIMO, "--engine", "sglang", "--gpu", "H200", "--swa-full-tokens-ratio", bad])
    except SystemExit as exc:
        code = exc.code
    assert code == 2


def test_reader_takes_a_lone_swa_line_for_the_swa_pool():
    """The #18039 excerpt keeps each rank's first pool line only: 300,288 tokens, which
    'Use sliding window memory pool' names swa_layer_tokens; the pool SGLang sizes the
    scheduler by is the full one, 375,360 tokens (its bytes are not in the excerpt)."""
    from kvgate.engines.logtext import logical_lines
    from kvgate.engines.sglang.log import parse_sglang

    r = parse_sglang(logical_lines((DATA / "logs" / "sglang_mimo-v2-flash_tp4_swa-ratio.log").read_text()))
    assert r["tokens"] == r["max_total_num_tokens"] == 375360
    assert r["swa_pool"]["tokens"] == 300288 and r["k_size"] is None
    r = parse_sglang(logical_lines((DATA / "logs" / "sglang_mimo-v2-flash_tp4_swa-pools.log").read_text()))
    assert r["tokens"] == 1496958 and r["swa_pool"]["tokens"] == 1496958 and r["k_size"] is not None
