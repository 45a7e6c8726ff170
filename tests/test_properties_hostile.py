"""Hostile input through whole commands (issue 28, second break-it pass): every option of
``fit``, ``gate`` (with and without ``--engine-log``), ``import-log``, ``tier``, ``geometry``,
``weights`` and ``replay`` — read from the commands' own parsers, so a flag added later is
covered — with overflowing, NaN, negative, huge, comma-grouped, empty, suffixed and
path-like values; and hashed trace files the published formats allow or nearly allow
(an id repeated in a request, deep nesting, 5,000-digit ids, nested ``hash_ids``,
400-digit timestamps, booleans as ids, 0-token prompts, CSV, gzip/zstd garbage).

The property is :func:`test_properties_commands.run_command`'s: an answer (exit 0, or 4)
or a clean refusal (exit 2 with one JSON error document), never a traceback, never a hang.
The suite runs a few dozen fixed-seed cases per property (profile ``kvgate-ci``);
``benchmarks/fuzz.py --only fit-every-flag,gate-flags,engine-log-flags,tier-files,...``
runs thousands.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from test_properties_commands import PROFILE, intervals_ordered, run_command

HERE = Path(__file__).resolve().parent
LOGS = HERE / "data/logs"

#: values a hostile user types: overflow, NaN, negative, huge, grouped, empty, suffixed, paths
VALUES = ["", " ", "-1", "0", "1", "2", "3", "8", "nan", "NaN", "inf", "-inf", "1e999", "1e308", "1e-999",
          "9" * 400, "9" * 400 + "k", "1" + "0" * 26, "0,1,2", "1,000", "8,192", "1.5", "-0", "0x10", "1_000",
          "32k", "32K", "1m", "abc", "auto", "-5%", "200%", "50%", "0.5", "1/0", "1/3", "24GiB", "1e308GiB",
          "-24GiB", "24G", "99999999999999999999TiB", "18446744073709551616", "\x00", "é", "../../etc/passwd",
          "/dev/zero", "/dev/null", "list", "on", "off", "fp8", "q8_0", "bf16", "vllm", "sglang", "llama.cpp",
          "H100", "L4", "0.11.0", "99.99.99", "v0.10", "none", "true", "[1,2]", "{}", "-tp", "--json"]

#: ordinary values, so that most cases get past the parser into the command's own rules
ORDINARY = ["1", "2", "4", "8", "16", "64", "256", "512", "1024", "4096", "8192", "32768", "32k", "0.5", "0.9",
            "0.95", "auto", "24GiB", "80GiB", "500MiB", "10%", "fp8", "fp8_e4m3", "bf16", "q8_0", "q4_0", "f16",
            "on", "off", "0.11.0", "0.24.0", "H100", "L4", "A100-80GB"]

#: exit codes seen, by command (benchmarks/fuzz.py prints them)
EXITS: dict[str, dict[int, int]] = {}

SKIP = {"--help", "-h", "--json", "--out", "--out-md", "--force", "--record-dir", "--measurement-out"}


@cache
def options(command: str) -> list[tuple[str, tuple[str, ...]]]:
    """``(option string, choices)`` of every value-taking option of ``command``."""
    from kvgate.cli import build_parser

    parser = build_parser(command.replace("-", "_"))
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for a in sub.choices[command]._actions:
        if not a.option_strings or a.nargs == 0 or SKIP & set(a.option_strings):
            continue
        choices = tuple(str(c) for c in a.choices) if a.choices else ()
        out += [(o, choices) for o in a.option_strings]
    return out


@cache
def switches(command: str) -> list[str]:
    """The options of ``command`` that take no value (``--enforce-eager``, ``-kvu``)."""
    from kvgate.cli import build_parser

    parser = build_parser(command.replace("-", "_"))
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a.option_strings[0] for a in sub.choices[command]._actions
            if a.option_strings and a.nargs == 0 and not SKIP & set(a.option_strings) and a.dest != "help"]


@st.composite
def hostile_flags(draw: Any, command: str, most: int = 4) -> list[str]:
    """1..``most`` options of ``command`` with hostile (or their own choice) values, in the
    ``=`` form (a value may start with ``-``), and maybe a switch."""
    argv: list[str] = []
    if not options(command):
        return argv
    for opt, choices in draw(st.lists(st.sampled_from(options(command)), min_size=1, max_size=most,
                                      unique_by=lambda o: o[0])):
        ordinary = st.sampled_from(choices or ORDINARY)
        value = draw(st.one_of(ordinary, ordinary, ordinary, st.sampled_from(VALUES), st.integers(-2, 2**20).map(str)))
        argv.append(f"{opt}={value}")
    if switches(command) and draw(st.booleans()):
        argv.append(draw(st.sampled_from(switches(command))))
    return argv


# -- fit: every flag, every engine ---------------------------------------------------------

FIT_MODELS = ["llama-3.1-8b", "qwen3-30b-a3b", str(HERE / "data/configs/qwen3-8b.json"),
              str(HERE / "data/configs/gemma3n-kv-sharing-reconstructed.json"),
              str(HERE / "data/configs/kobart-summary-v3.json"), str(HERE / "data/configs/deepseek-v3.2.json"),
              str(HERE / "data/configs/jamba-v0.1.json"), str(HERE / "data/configs/gpt-oss-120b.json")]


@st.composite
def fit_every_flag(draw: Any) -> list[str]:
    engine = draw(st.sampled_from([[], ["--engine", "vllm"], ["--engine", "sglang"], ["--engine", "llama.cpp"]]))
    gpu = draw(st.sampled_from([["--gpu", "H100"], ["--gpu", "L4"], ["--total", "24GiB"], ["--gpu", "MI300X"]]))
    return ["fit", draw(st.sampled_from(FIT_MODELS)), *gpu, *engine, *draw(hostile_flags("fit"))]


def _run(argv: list[str]) -> tuple[int, Any, str]:
    res = run_command(argv)
    seen = EXITS.setdefault(argv[0], {})
    seen[res[0]] = seen.get(res[0], 0) + 1
    return res


def check_fit_argv(argv: list[str]) -> None:
    code, doc, _ = _run(argv)
    if code == 0:
        assert intervals_ordered(doc) == [], (argv, intervals_ordered(doc))


@PROFILE
@given(fit_every_flag())
def test_fit_with_any_flag_given_a_hostile_value_answers_or_refuses(argv):
    check_fit_argv(argv)


# -- gate, gate --engine-log, import-log ----------------------------------------------------

GATE = ["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots", "4", "--total", "32607MiB",
        "--peak", "19625MiB", "--no-record"]
ENGINE_LOGS = ["vllm_0.8.5_qwen3-30b-a3b_tp4.log", "sglang_gemma3-4b.log", "llamacpp_tiny-llama_server.log",
               "vllm_0.24.0_qwen3.6-35b-a3b_fp8kv.log", "sglang_qwen3-235b-a22b-fp8_tp4.log",
               "llamacpp_qwen3-ctx4096_cpu.log"]


@st.composite
def gate_argv(draw: Any) -> list[str]:
    return [*GATE, *draw(hostile_flags("gate"))]


@st.composite
def engine_log_argv(draw: Any) -> list[str]:
    log = str(LOGS / draw(st.sampled_from(ENGINE_LOGS)))
    if draw(st.booleans()):
        return ["import-log", log, *draw(hostile_flags("import-log"))]
    return ["gate", "--engine-log", log, "--no-record", *draw(hostile_flags("gate"))]


def check_argv(argv: list[str]) -> None:
    _run(argv)


@PROFILE
@given(gate_argv())
def test_gate_with_any_flag_given_a_hostile_value_answers_or_refuses(argv):
    check_argv(argv)


@PROFILE
@given(engine_log_argv())
def test_engine_log_commands_with_hostile_flags_answer_or_refuse(argv):
    check_argv(argv)


# -- geometry, weights, replay ----------------------------------------------------------------

@st.composite
def other_argv(draw: Any) -> list[str]:
    which = draw(st.sampled_from(["geometry", "weights", "replay"]))
    if which == "geometry":
        return ["geometry", draw(st.sampled_from(FIT_MODELS)), "--max-seq", "8192", *draw(hostile_flags("geometry"))]
    if which == "weights":
        return ["weights", draw(st.sampled_from(FIT_MODELS)), *draw(hostile_flags("weights"))]
    trace = str(HERE / "data/traces" / "azure_conv_2023_head.csv")
    return ["replay", "--model", "llama-3.1-8b", "--max-seq", "4096", "--trace", trace, "--slots", "4",
            "--total", "80GiB", "--peak", "40GiB", *draw(hostile_flags("replay"))]


# -- tier: hostile trace files and flags ------------------------------------------------------

_ids = st.lists(st.integers(0, 30), min_size=1, max_size=10)
_odd_id = st.sampled_from([True, False, None, 1.5, -1, 2**63, 2**64, "7", [3], [[3]], {"a": 1}, int("9" * 40)])
_odd_len = st.sampled_from([0, 0, -1, 1.5, True, None, "512", 2**63, 10**9 + 1])
_odd_time = st.sampled_from([-1, 1e308, float("1e300") * 10, "2024-01-01", None, True])


@st.composite
def tier_trace_file(draw: Any) -> tuple[bytes, str]:
    """(file bytes, suffix): Mooncake JSONL with hostile lines, or that text as CSV, gzip,
    zstd, cut compressed streams or compressed garbage."""
    lines: list[str] = []
    for t in range(draw(st.integers(1, 10))):
        ids = draw(_ids)
        line: dict[str, Any] = {"timestamp": t * 100, "input_length": len(ids) * 512 - draw(st.integers(0, 511)),
                                "output_length": 1, "hash_ids": ids}
        kind = draw(st.sampled_from(["ok", "ok", "repeat", "digits", "nested", "time400", "bool", "zero", "odd_id",
                                     "odd_len", "odd_time", "deep", "dup_key", "extra", "empty_ids"]))
        text = None
        if kind == "repeat":
            line["hash_ids"] = ids[:1] * 3 + ids
            line["input_length"] = len(line["hash_ids"]) * 512
        elif kind == "digits":
            text = json.dumps(line).replace(f'"hash_ids": [{ids[0]}', '"hash_ids": [' + "7" * 5000, 1)
        elif kind == "nested":
            line["hash_ids"] = [ids, [ids]]
        elif kind == "time400":
            text = json.dumps(line).replace(f'"timestamp": {t * 100}', '"timestamp": ' + "9" * 400, 1)
        elif kind == "bool":
            line["hash_ids"] = [True, *ids]
        elif kind == "zero":
            line["input_length"] = 0
        elif kind == "odd_id":
            line["hash_ids"] = [*ids, draw(_odd_id)]
        elif kind == "odd_len":
            line["input_length"] = draw(_odd_len)
        elif kind == "odd_time":
            line["timestamp"] = draw(_odd_time)
        elif kind == "deep":
            text = '{"hash_ids": ' + "[" * 5000 + "]" * 5000 + "}"
        elif kind == "dup_key":
            text = json.dumps(line)[:-1] + ', "hash_ids": [1, 1, 1]}'
        elif kind == "extra":
            line["hash_ids_2"] = ids
            line["input_length"] = str(line["input_length"])
        elif kind == "empty_ids":
            line["hash_ids"] = []
        lines.append(text if text is not None else json.dumps(line))
    body = ("\n".join(lines) + "\n").encode()
    form = draw(st.sampled_from(["jsonl", "jsonl", "jsonl", "csv", "gz", "zst", "gz-cut", "zst-cut", "gz-garbage",
                                 "zst-garbage", "json-list"]))
    if form == "csv":
        rows = ["timestamp,input_length,output_length,hash_ids"]
        for ln in lines:
            try:
                d = json.loads(ln)
                rows.append(f'{d.get("timestamp")},{d.get("input_length")},1,"{d.get("hash_ids")}"')
            except (ValueError, RecursionError, AttributeError):
                rows.append(ln)
        return ("\n".join(rows) + "\n").encode(), ".csv"
    if form.startswith("gz"):
        data = gzip.compress(body)
        if form == "gz-cut":
            data = data[: max(2, len(data) // 2)]
        elif form == "gz-garbage":
            data = data[:10] + draw(st.binary(min_size=1, max_size=200))
        return data, ".jsonl.gz"
    if form.startswith("zst"):
        import pyarrow as pa

        buf = pa.BufferOutputStream()
        with pa.CompressedOutputStream(buf, "zstd") as out:
            out.write(body)
        data = buf.getvalue().to_pybytes()
        if form == "zst-cut":
            data = data[: max(4, len(data) // 2)]
        elif form == "zst-garbage":
            data = data[:4] + draw(st.binary(min_size=1, max_size=200))
        return data, ".jsonl.zst"
    if form == "json-list":
        return ("[" + ",".join(lines) + "]").encode(), ".json"
    return body, ".jsonl"


TIER_FLAGS = st.sampled_from([
    [], ["--device-blocks", "8"], ["--device-blocks", "8", "--host-capacity", "1GiB"],
    ["--cache-model", "vllm", "--device-blocks", "4", "--kv-offloading-size", "1"],
    ["--cache-model", "vllm", "--device-blocks", "2", "--kv-offloading-size", "0.001"],
    ["--cache-model", "sglang", "--device-blocks", "4", "--hicache-ratio", "2"],
    ["--cache-model", "llama.cpp", "-np", "2", "-c", "8192"],
    ["--cache-model", "llama.cpp", "-np", "2", "-c", "8192", "--cache-ram", "1"],
    ["--at-capacity-blocks", "0,1,4,16"], ["--trace-block-tokens", "16"], ["--sample-rate", "0.5"],
])


def check_tier_file(data: bytes, suffix: str, flags: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / f"trace{suffix}"
        p.write_bytes(data)
        _run(["tier", "--trace", str(p), "--model", "llama-3.1-8b", *flags])


@PROFILE
@given(tier_trace_file(), TIER_FLAGS)
def test_tier_on_hostile_trace_files_answers_or_refuses(file, flags):
    check_tier_file(*file, flags)


@st.composite
def tier_argv(draw: Any) -> list[str]:
    trace = str(HERE / "data/traces" / "mooncake_conversation_head.jsonl")
    return ["tier", "--trace", trace, "--model", "llama-3.1-8b", *draw(hostile_flags("tier"))]


@PROFILE
@given(st.one_of(other_argv(), tier_argv()))
def test_geometry_weights_replay_tier_with_hostile_flags_answer_or_refuse(argv):
    check_argv(argv)
