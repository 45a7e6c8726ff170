"""Every command's default text fits 100 columns (sources behind -v), the KV heads copied
under tensor parallelism are said, and llama.cpp's verdict and -ngl flip point name one
-ngl (issue 29, item 5). All in-process."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvgate.cli import main
from kvgate.fit.render import SOURCES_HINT, plain_source
from kvgate.output import WIDTH, fit_width, pack, wrap_line

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "data" / "logs"
TRACES = ROOT / "tests" / "data" / "traces"
QWEN_TP4_LOG = str(LOGS / "vllm_0.8.5_qwen3-30b-a3b_tp4.log")

COMMANDS = {
    "fit vLLM (the quick start)": ["fit", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "32768",
                                   "--max-num-seqs", "16", "--release", "0.11.0"],
    "fit vLLM TP 8, KV heads copied": ["fit", "qwen3-30b-a3b", "--gpu", "H100", "-tp", "8", "--max-model-len", "32768"],
    "fit vLLM TP 8, 70B": ["fit", "llama-3.1-70b", "--gpu", "H100", "-tp", "8", "--max-model-len", "32768",
                           "--max-num-seqs", "512", "--gpu-memory-utilization", "0.95"],
    "fit vLLM TP table": ["fit", "llama-3.1-70b", "--gpu", "H100", "-tp", "auto", "--max-model-len", "32768"],
    "fit SGLang": ["fit", "llama-3.1-8b", "--gpu", "H200", "--context-length", "32768", "--mem-fraction-static", "0.85"],
    "fit SGLang DSA TP 8": [
        "fit", str(ROOT / "tests" / "data" / "configs" / "glm-5.json"), "--gpu", "B200", "--tp-size", "8",
        "--context-length", "32768", "--weights-bytes", "750GB", "--release", "0.5.9"],
    "fit llama.cpp": ["fit", "qwen3-4b", "-c", "32768", "-np", "4", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on",
                      "--gpu", "RTX 4090"],
    "fit llama.cpp, layers on the CPU": ["fit", "llama-3.1-8b", "-c", "131072", "-np", "4", "--gpu", "RTX 4090"],
    "import-log vLLM": ["import-log", QWEN_TP4_LOG, "--model", "qwen3-30b-a3b", "--kv-format", "bf16", "--tp", "4"],
    "import-log what-if": ["import-log", str(ROOT / "tests" / "data" / "fit_logs" / "vllm_0.8-v0_qwen3-0.6b_h100_1.log"),
                           "--model", "qwen3-0.6b", "--gpu", "H200", "--kv-cache-dtype", "fp8"],
    "import-log SGLang": ["import-log", str(LOGS / "sglang_qwen3-235b-a22b-fp8_tp4.log")],
    "import-log llama.cpp": ["import-log", str(LOGS / "llamacpp_tiny-llama_server.log")],
    "import-log vLLM DCP": ["import-log", str(LOGS / "vllm_0.18_qwen3.5-35b-a3b_tp8_dcp4.log")],
    "gate --engine-log": ["gate", "--engine-log", QWEN_TP4_LOG, "--model", "qwen3-30b-a3b", "--kv-format", "bf16",
                          "--tp", "4", "--max-num-seqs", "32", "--max-model-len", "8192", "--no-record"],
    "gate measured": ["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--kv-format", "int8-f32scale",
                      "--slots-measured", "4", "--slots", "8", "--total", "32607MiB", "--idle", "936MiB",
                      "--peak", "19625MiB", "--no-record"],
    "geometry": ["geometry", "qwen3-30b-a3b", "--max-seq", "8192", "--kv-format", "int8-f32scale"],
    "geometry vLLM TP 8": ["geometry", "llama-3.1-70b", "--max-seq", "8192", "--tp", "8", "--layout", "vllm",
                           "--kv-available", "40GiB"],
    "weights": ["weights", "llama-3.1-70b"],
    "tier": ["tier", "--trace", str(TRACES / "mooncake_conversation_head.jsonl"), "--model", "llama-3.1-8b",
             "--device-capacity", "64GiB", "--host-capacity", "1TiB"],
    "replay": ["replay", "--model", "llama-3.1-8b", "--max-seq", "8192", "--trace",
               str(TRACES / "azure_conv_2023_head.csv"), "--slots", "8"],
    "demo": ["demo", "--no-record"],
    "help engine-flags": ["help", "engine-flags"],
}


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def _wide(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if len(ln) > WIDTH]


@pytest.mark.parametrize("argv", COMMANDS.values(), ids=COMMANDS.keys())
def test_default_text_fits_100_columns(argv, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # nothing written into the checkout
    out = _run(capsys, argv)
    assert out.strip() and _wide(out) == []


def test_every_commands_help_fits_100_columns(capsys):
    listing = json.loads(_run(capsys, ["help", "--json"]))
    assert len(listing["commands"]) > 10
    for command in listing["commands"]:
        assert _wide(_run(capsys, ["help", command])) == [], command


@pytest.mark.parametrize("name", ["fit vLLM (the quick start)", "fit SGLang DSA TP 8", "fit llama.cpp"])
def test_sources_are_behind_v(name, capsys, monkeypatch, tmp_path):
    """Each term's source (the --json ``terms[].source`` as the table says it) is left out
    of the default text, which says -v shows it; -v shows each beneath its row, in 100
    columns too."""
    monkeypatch.chdir(tmp_path)
    argv = COMMANDS[name]
    terms = json.loads(_run(capsys, [*argv, "--json"]))["terms"]
    default, verbose = _run(capsys, argv), _run(capsys, [*argv, "-v"])
    assert SOURCES_HINT in default and SOURCES_HINT not in verbose
    assert _wide(verbose) == []
    flat_default, flat_verbose = " ".join(default.split()), " ".join(verbose.split())
    sources = [" ".join(plain_source(t["source"]).split()) for t in terms]
    assert len(sources) >= 2
    for src in sources:
        assert src not in flat_default and src in flat_verbose
    # beneath its own row: the row, then its source's first words on the next line
    lines = verbose.splitlines()
    for t, src in zip(terms, sources):
        row = next(i for i, ln in enumerate(lines) if ln.lstrip("−= ").startswith(t["name"]))
        assert lines[row + 1].startswith("    ") and src.startswith(lines[row + 1].strip()), (row, lines[row + 1])


def test_import_log_what_if_sources_behind_v(capsys):
    argv = COMMANDS["import-log what-if"]
    default, verbose = _run(capsys, argv), _run(capsys, [*argv, "--sources"])
    assert SOURCES_HINT in default and "    carried from the log (1.12 GiB at line 3)" in verbose
    assert _wide(verbose) == []


def test_json_is_not_wrapped(capsys):
    d = json.loads(_run(capsys, [*COMMANDS["fit vLLM (the quick start)"], "--json"]))
    assert any(len(t["source"]) > WIDTH for t in d["terms"])  # whole strings, as before


# -------------------------------------------------------------- KV heads copied under TP
def test_tp8_over_4_kv_heads_says_the_copies_and_bytes(capsys):
    """Qwen3-30B-A3B: 48 layers, 4 KV heads of 128, bf16. At -tp 8 vLLM keeps max(1, 4 // 8) = 1
    head a rank (QKVParallelLinear: num_kv_head_replicas = 8 / 4 = 2): 48 × 1 × 128 × 2 (K, V)
    × 2 B = 24,576 B per token per GPU, where an even 1/8 of the model's 98,304 B is 12,288."""
    out = " ".join(_run(capsys, COMMANDS["fit vLLM TP 8, KV heads copied"]).split())
    assert ("KV heads replicated: the model has 4 KV heads, -tp 8 has more ranks, so each GPU keeps 1 and "
            "each head is copied on 2 GPUs: 24,576 B of KV per token on each GPU, 2× an even 1/8 share") in out
    # 24,576 B × 32,768 tokens = 0.75 GiB a request on each GPU, not "its 1/8 share"
    assert "one request of 32,768 tokens needs 0.75 GiB of KV cache per GPU KV heads" in out
    d = json.loads(_run(capsys, [*COMMANDS["fit vLLM TP 8, KV heads copied"], "--json"]))
    assert d["request_bytes"] == 24_576 * 32_768


def test_sglang_tp8_says_the_copies_too(capsys):
    out = " ".join(_run(capsys, ["fit", "qwen3-30b-a3b", "--gpu", "H100", "--tp-size", "8",
                                 "--context-length", "32768"]).split())
    assert "--tp-size 8 has more ranks, so each GPU keeps 1 and each head is copied on 2 GPUs: 24,576 B" in out


def test_no_copies_no_sentence(capsys):
    """Llama-3.1-70B has 8 KV heads: -tp 8 gives each GPU one, no copies; -tp 4 on Qwen3's 4 too."""
    for argv in (COMMANDS["fit vLLM TP 8, 70B"],
                 ["fit", "qwen3-30b-a3b", "--gpu", "H100", "-tp", "4", "--max-model-len", "32768"]):
        out = _run(capsys, argv)
        assert "KV heads" not in out and "(each of" in out


def test_mla_latent_is_whole_on_every_gpu(capsys):
    """DeepSeek-V3's MLA latent (kv_lora_rank 512 + rope 64 = 576 values, bf16: 1,152 B a layer,
    61 layers = 70,272 B a token) is not split by -tp: every GPU keeps all of it."""
    out = " ".join(_run(capsys, ["fit", "deepseek-v3", "--gpu", "H200", "-tp", "8", "--max-model-len",
                                 "32768"]).split())
    assert ("KV heads: the MLA latent is one KV head, kept whole on each of the 8 GPUs (-tp 8 does not split "
            "it): 70,272 B of KV per token on each GPU") in out


# -------------------------------------------------------------- llama.cpp: one -ngl figure
def _ngl_figures(text: str) -> tuple[int, int]:
    flat = " ".join(text.split())
    verdict = re.search(r"verdict: FITS: --fit sets .*?\(-ngl (\d+)\)", flat)
    flip = re.search(r"-ngl: at -c [\d,]+, \d+ layer\(s\) on the CPU \(pass -ngl (\d+)\)", flat)
    assert verdict and flip, flat
    return int(verdict[1]), int(flip[1])


@pytest.mark.parametrize("ctx", ["65536", "98304", "131072"])
def test_llamacpp_verdict_and_flip_name_one_ngl(ctx, capsys):
    """--fit keeps 1024 MiB free, so while it moves layers the flip point is its pick: the
    verdict's -ngl and the flip point's are one figure (they were 20 and 21 at -c 131072)."""
    argv = ["fit", "llama-3.1-8b", "-c", ctx, "--gpu", "RTX 4090"]
    verdict, flip = _ngl_figures(_run(capsys, argv))
    assert verdict == flip
    d = json.loads(_run(capsys, [*argv, "--json"]))
    f = d["flip_points"]
    assert f["n_gpu_layers_at_ctx_size"]["sure"] == d["settings"]["n_gpu_layers"] == verdict
    assert f["layers_on_cpu_at_ctx_size"]["sure"] == 32 + 1 - verdict  # i_gpu_start = n_layer + 1 - ngl and f["n_gpu_layers_margin_bytes"] == 2**30


def test_llamacpp_given_ngl_flip_is_the_edge(capsys):
    """-ngl given: --fit leaves the layers alone, so the flip point is where the buffers
    just fit (no margin), at least the layers --fit would keep."""
    base = ["fit", "llama-3.1-8b", "-c", "131072", "--gpu", "RTX 4090", "--json"]
    fitted = json.loads(_run(capsys, base))["flip_points"]["n_gpu_layers_at_ctx_size"]["sure"]
    d = json.loads(_run(capsys, [*base, "-ngl", "10"]))
    f = d["flip_points"]
    assert f["n_gpu_layers_margin_bytes"] == 0 and f["n_gpu_layers_at_ctx_size"]["sure"] > fitted


# -------------------------------------------------------------- the wrapping itself
def test_wrap_keeps_numbers_with_units_and_flags_with_values():
    line = "note: " + "x " * 40 + "needs 1,557,135,360 B and --max-num-seqs 16 and 8.23 GB of it, more words here"
    out = wrap_line(line)
    assert all(len(ln) <= WIDTH for ln in out) and len(out) == 2
    assert out[1].startswith(" " * len("note: "))  # hangs under the text after the label
    flat = " ".join(" ".join(out).split())
    assert flat == " ".join(line.split())
    for kept in ("1,557,135,360 B", "--max-num-seqs 16", "8.23 GB"):
        assert any(kept in ln for ln in out), kept


def test_wrap_hangs_a_label_column_line_under_its_value():
    line = "KV pool (per rank)   " + "word " * 30
    out = fit_width(line).splitlines()
    assert len(out) == 2 and out[1].startswith(" " * 21) and not out[1].startswith(" " * 22)


def test_pack_never_splits_a_flag_from_its_value():
    items = [f"--flag-{i} {i * 1000:,}" for i in range(20)]
    text = pack("flags: ", items)
    assert all(len(ln) <= WIDTH for ln in text.splitlines())
    assert [it for ln in text.splitlines() for it in re.findall(r"--flag-\d+ [\d,]+", ln)] == items
