"""One parser of flag values (kvgate.units: parse_count, parse_real, parse_share) and every
argparse converter built on it: overflow, NaN, infinity, negative and out-of-range values
are refused naming the flag, exit 2, one JSON error document under --json (issue 28)."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from kvgate.cli import main
from kvgate.units import MAX_COUNT, UnitError, parse_count, parse_real, parse_share

TRACE = "{trace}"  # a small Mooncake-format trace, written by the fixture
TIER = ["tier", "--trace", TRACE, "--model", "llama-3.1-8b"]


@pytest.fixture
def trace(tmp_path):
    p = tmp_path / "t.jsonl"
    rows = [(0, 1000, [0, 1]), (10, 1200, [0, 1, 2]), (20, 700, [3, 4]), (30, 1536, [0, 1, 2]), (40, 1024, [3, 4])]
    p.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 1, "hash_ids": h}) + "\n"
                         for t, n, h in rows))
    return str(p)


def _with(argv, trace):
    return [trace if a == TRACE else a for a in argv]


def run_json(argv, capsys):
    try:
        code = main([*argv, "--json"])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr().out
    assert out.count("\n{") == 0, "more than one JSON document"
    return code, json.loads(out) if out.strip() else None


# -- the parsers ---------------------------------------------------------------------------

@pytest.mark.parametrize("text,want", [("8192", 8192), ("8,192", 8192), ("8_192", 8192), ("8e3", 8000),
                                       (" 12 ", 12), ("1,000,000", 10**6)])
def test_parse_count_reads_grouped_and_whole_numbers(text, want):
    assert parse_count(text, what="--n") == want


@pytest.mark.parametrize("text,needle", [("0,1,2", "not a number"), ("1,5", "not a number"), ("12,34", "not a number"),
                                         ("nan", "finite"), ("inf", "finite"), ("-1", "negative"),
                                         ("1.5", "whole"), ("9" * 400, "more than 64 characters"),
                                         ("1e999999999", "out of range"), (str(MAX_COUNT + 1), "above"),
                                         ("", "not a number"), ("0x10", "not a number")])
def test_parse_count_refuses_naming_the_flag(text, needle):
    with pytest.raises(UnitError) as e:
        parse_count(text, what="--device-blocks")
    assert e.value.message.startswith("--device-blocks: ") and needle in e.value.message


def test_parse_count_range_is_inclusive():
    assert parse_count(str(MAX_COUNT), what="x") == MAX_COUNT
    assert parse_count("-1", what="x", minimum=-1) == -1
    with pytest.raises(UnitError, match="at least -1"):
        parse_count("-5", what="x", minimum=-1)


@pytest.mark.parametrize("text", ["nan", "NaN", "-inf", "inf", "Infinity", "1e999", "1e308", "-1", "0"])
def test_parse_real_refuses_nonfinite_huge_and_nonpositive(text):
    with pytest.raises(UnitError) as e:
        parse_real(text, what="--prefill-tokens-per-s", maximum=1e12, open_min=True)
    assert "--prefill-tokens-per-s" in e.value.message


def test_parse_real_bounds_and_value():
    assert parse_real("9,500.5", what="x", open_min=True) == 9500.5
    assert parse_real("0", what="x") == 0.0  # closed minimum
    assert parse_real("1", what="x", maximum=1.0) == 1.0
    with pytest.raises(UnitError):
        parse_real(float("nan"), what="x")


@pytest.mark.parametrize("text,want", [("10%", Fraction(1, 10)), ("0.1", Fraction(1, 10)), ("1/10", Fraction(1, 10)),
                                       ("0%", Fraction(0)), ("100%", Fraction(1)), ("1e-2", Fraction(1, 100))])
def test_parse_share_reads_percent_decimal_ratio_exactly(text, want):
    assert parse_share(text, what="--min-gain") == want


@pytest.mark.parametrize("text,needle", [("200%", "at most 100%"), ("1.5", "at most 100%"), ("100%", "below 100%"), ("-5%", "at least 0%"),
                                         ("1e999", "out of range"), ("1e999999999", "out of range"),
                                         ("nan", "finite"), ("1/0", "division by zero"), ("abc", "not a number")])
def test_parse_share_refuses_out_of_range_and_hostile(text, needle):
    with pytest.raises(UnitError) as e:
        parse_share(text, what="--min-gain", open_max=text == "100%")
    assert e.value.message.startswith("--min-gain: ") and needle in e.value.message


# -- the flags (in-process, one JSON error document, exit 2) -----------------------------

@pytest.mark.parametrize("argv,flag", [
    (TIER + ["--min-gain", "200%"], "--min-gain"),
    (TIER + ["--min-gain", "1.5"], "--min-gain"),
    (TIER + ["--min-gain=-5%"], "--min-gain"),
    (TIER + ["--min-gain", "1e999"], "--min-gain"),
    (TIER + ["--cache-model", "vllm", "--device-blocks", "100", "--kv-offloading-size", "1e308"],
     "--kv-offloading-size"),
    (TIER + ["--cache-model", "sglang", "--device-blocks", "100", "--hicache-ratio", "1e308"], "--hicache-ratio"),
    (TIER + ["--device-blocks", "100", "--host-capacity", "1GiB", "--prefill-tokens-per-s", "1e308",
             "--prefill-source", "x"], "--prefill-tokens-per-s"),
    (TIER + ["--trace-block-tokens", "1" + "0" * 26], "--trace-block-tokens"),
    (TIER + ["--device-blocks", "0,1,2"], "--device-blocks"),
    (TIER + ["--cache-model", "llama.cpp", "-sps", "nan"], "-sps"),
    (TIER + ["--cache-model", "llama.cpp", "-sps=-1"], "-sps"),
    (TIER + ["--cache-model", "llama.cpp", "-sps", "1e999"], "-sps"),
    (TIER + ["--cache-model", "llama.cpp", "--cache-ram=-5"], "--cache-ram"),
    (TIER + ["--sample-rate", "nan"], "--sample-rate"),
    (["fit", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "9" * 400 + "k"], "--max-model-len"),
    (["fit", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "9" * 20 + "k"], "--max-model-len"),
    (["fit", "llama-3.1-8b", "--gpu", "H100", "-c", "1" + "0" * 400], "-c"),
    (["fit", "llama-3.1-8b", "--gpu", "H100", "--engine", "sglang", "--tp-size", "9" * 400], "--tp-size"),
    (["fit", "llama-3.1-8b", "--gpu", "H100", "--gpu-memory-utilization", "nan"], "--gpu-memory-utilization"),
    (["fit", "llama-3.1-8b", "--gpu", "H100", "--engine", "sglang", "--mem-fraction-static", "inf"],
     "--mem-fraction-static"),
    (["gate", "--engine-log", "tests/data/logs/vllm_0.8.5_qwen3-30b-a3b_tp4.log", "--model", "qwen3-30b-a3b",
      "--no-record", "--pp", "1" + "0" * 26], "--pp"),
    (["geometry", "llama-3.1-8b", "--max-seq", "9" * 5000], "--max-seq"),
    (["load", "--url", "http://127.0.0.1:9", "--trace", "x.csv", "--rate", "nan"], "--rate"),
    (["load", "--url", "http://127.0.0.1:9", "--trace", "x.csv", "--max-prompt-tokens", "1" + "0" * 400],
     "--max-prompt-tokens"),
    (["workload", "stream", "--streams", "1" + "0" * 400], "--streams"),
    (["workload", "check", "--seed=-1"], "--seed"),
    (["import-log", "tests/data/logs/vllm_0.8.5_qwen3-30b-a3b_tp4.log", "--startup", "1" + "0" * 30], "--startup"),
])
def test_hostile_flag_value_is_one_json_error_naming_the_flag(argv, flag, trace, capsys):
    code, doc = run_json(_with(argv, trace), capsys)
    assert code == 2, doc
    assert flag in doc["error"] and doc["exit_code"] == 2


def test_converter_error_without_json_is_error_and_hint_lines(trace, capsys):
    with pytest.raises(SystemExit) as e:
        main(_with(TIER, trace) + ["--min-gain", "200%"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("ERROR: argument --min-gain: must be below 100%") and "HINT:" in err


def test_gate_margin_names_the_flag(capsys):
    code, doc = run_json(["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots", "4",
                          "--peak", "20GiB", "--total", "24GiB", "--no-record", "--margin", "1e999999999"], capsys)
    assert code == 2 and "--margin" in doc["error"]
    code, doc = run_json(["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots", "4",
                          "--peak", "20GiB", "--total", "24GiB", "--no-record", "--margin", "nan"], capsys)
    assert code == 2 and "--margin" in doc["error"]


@pytest.mark.parametrize("argv", [["fit", "llama-3.1-8b", "--gpu", ""], ["fit", "llama-3.1-8b", "--gpu", "  "]])
def test_fit_empty_gpu_is_refused_not_the_local_gpu(argv, capsys):
    code, doc = run_json(argv, capsys)
    assert code == 2 and doc["error"] == "--gpu is empty"


def test_tier_valid_edge_values_still_answer(trace, capsys):
    code, doc = run_json(_with(TIER, trace) + ["--min-gain", "99.5%", "--cache-model", "llama.cpp", "-sps", "0", "--cache-ram=-1"],
                         capsys)
    assert code == 0 and doc["min_gain_share"] == 0.995
    code, doc = run_json(_with(TIER, trace) + ["--min-gain", "100%"], capsys)  # the gate takes [0, 1)
    assert code == 2 and "below 100%" in doc["error"]


HOSTILE = ["nan", "NaN", "inf", "-inf", "1e999", "-1e999", "1e308", "9" * 400, "9" * 5000, "1" + "0" * 26, "0,1,2",
           "-1", "-5", "0", "1e-999", "-0", "", " ", "0x10", "1_000", "1,000", "12k", "1e999999999", "1/0", "%"]


def _converters():
    """Every ``type=`` converter of every command's options: (command, flags, converter)."""
    import argparse

    from kvgate.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    seen = set()

    def walk(name, p):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub_name, sp in a.choices.items():
                    yield from walk(f"{name} {sub_name}", sp)
            elif a.type is not None and a.option_strings:
                key = (name, tuple(a.option_strings))
                if key not in seen:
                    seen.add(key)
                    yield name, "/".join(a.option_strings), a.type
    for name, p in sub.choices.items():
        yield from walk(name, p)


#: flags whose any-number value is refused by the command's own caps, naming the flag, exit 2
#: (kvgate load's check_bounds; tests/test_trust_load.py): checked below through the command
DOWNSTREAM = {("load", "--speed"), ("load", "--max-requests"), ("load", "--max-seconds"), ("load", "--interval")}


def test_every_converter_answers_a_finite_value_or_refuses_cleanly():
    """No converter lets OverflowError/RecursionError/... escape (argparse only turns
    ArgumentTypeError, ValueError and TypeError into its usage error), and none returns
    NaN or infinity."""
    import argparse
    import math

    from kvgate.errors import KvgateError

    checked = 0
    for command, flags, convert in _converters():
        if (command, flags) in DOWNSTREAM:
            continue
        for text in HOSTILE:
            try:
                v = convert(text)
            except (argparse.ArgumentTypeError, ValueError, TypeError, KvgateError):
                continue
            checked += 1
            if isinstance(v, float):
                assert math.isfinite(v), (command, flags, text, v)
            if isinstance(v, int) and not isinstance(v, bool):
                assert abs(v) <= 2**64, (command, flags, text, v)
    assert checked > 0


@pytest.mark.parametrize("flag", sorted(f for _, f in DOWNSTREAM))
@pytest.mark.parametrize("text", ["nan", "inf", "1e999", "9" * 400, "-1"])
def test_load_bounds_refuse_hostile_values_naming_the_flag(flag, text, capsys):
    code, doc = run_json(["load", "--url", "http://127.0.0.1:9", "--trace", "absent.csv", f"{flag}={text}"], capsys)
    assert code == 2 and flag in doc["error"]
