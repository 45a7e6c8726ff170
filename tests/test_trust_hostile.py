"""Hostile inputs give ERROR: (exit 2), never a traceback (exit 1): deeply nested JSON in a
safetensors header, in --speculative-config, in a config.json that also holds a NaN;
integers over 4,300 digits in JSONL traces; --page-size / --block-size of 1e19."""

from __future__ import annotations

import json
import struct

import pytest

from kvgate.cli import main
from kvgate.errors import EXIT_INPUT, KvgateError
from kvgate.guarded import loads_json, parse_float, parse_int

DEEP = "[" * 100_000 + "]" * 100_000
HUGE = "9" * 5000


def _run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def _safetensors(path, header: bytes):
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


@pytest.mark.parametrize("header", [DEEP.encode(), ('{"a": ' + DEEP + "}").encode(),
                                    ('{"__metadata__": {"n": ' + HUGE + "}}").encode(), b'{"a": NaN}'])
def test_hostile_safetensors_headers(tmp_path, capsys, header):
    from kvgate.model.weights import WeightsError, read_safetensors_header

    p = _safetensors(tmp_path / "model.safetensors", header)
    with pytest.raises(WeightsError, match="safetensors header"):
        read_safetensors_header(p)
    code, err = _run(["weights", str(p)], capsys)
    assert code == EXIT_INPUT and "ERROR:" in err


@pytest.mark.parametrize("value", [DEEP, '{"num_speculative_tokens": ' + HUGE + "}", '{"a": ' + DEEP + "}"])
def test_hostile_speculative_configs(capsys, value):
    code, err = _run(["geometry", "qwen3-30b-a3b", "--max-seq", "8192", f"--speculative-config={value}"], capsys)
    assert code == EXIT_INPUT and "ERROR:" in err and "--speculative-config" in err


def test_hostile_speculative_config_in_the_library():
    from kvgate.engines.vllm.pool import GeometryError, parse_speculative_config

    with pytest.raises(GeometryError, match="nested too deeply"):
        parse_speculative_config(DEEP)


def test_config_json_with_a_nan_and_deep_nesting(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "llama", "rope_scaling": NaN, "x": ' + DEEP + "}")
    code, err = _run(["geometry", str(cfg), "--max-seq", "8192"], capsys)
    assert code == EXIT_INPUT and "nested too deeply" in err


@pytest.mark.parametrize("line", [
    '{"timestamp": 0, "prompt_tokens": ' + HUGE + ', "output_tokens": 1}',
    '{"timestamp": ' + HUGE + ', "prompt_tokens": 1, "output_tokens": 1}',
    '{"timestamp": 0, "prompt_tokens": 1e999, "output_tokens": 1}',
])
@pytest.mark.parametrize("first", [True, False])
def test_hostile_jsonl_traces(tmp_path, capsys, line, first):
    ok = '{"timestamp": 0, "prompt_tokens": 10, "output_tokens": 2}'
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join([line, ok] if first else [ok, line]) + "\n")
    code, err = _run(["replay", "--trace", str(p), "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots", "2"],
                     capsys)
    assert code == EXIT_INPUT and "ERROR:" in err and "line" in err


def test_deep_nesting_in_an_unused_jsonl_field_is_no_traceback(tmp_path, capsys):
    ok = '{"timestamp": 0, "prompt_tokens": 10, "output_tokens": 2}'
    p = tmp_path / "t.jsonl"
    p.write_text(ok + '\n{"timestamp": 1, "prompt_tokens": 1, "output_tokens": 1, "x": ' + DEEP + "}\n")
    code, _ = _run(["replay", "--trace", str(p), "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots", "2"],
                   capsys)
    assert code in (0, EXIT_INPUT)  # the fast reader skips the unused field; the row reader refuses it


@pytest.mark.parametrize("flag", ["--page-size", "--block-size"])
def test_huge_page_sizes(tmp_path, capsys, flag):
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n")
    code, err = _run(["replay", "--trace", str(p), "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots", "2",
                      flag, str(10**19)], capsys)
    assert code == EXIT_INPUT and "ERROR:" in err


def test_guarded_reader():
    for bad in (DEEP, "[" + HUGE + "]", "NaN", "[1e999]", b"\xff\xfe"):
        with pytest.raises(KvgateError):
            loads_json(bad)
    assert loads_json('{"a": [1, 2.5]}') == {"a": [1, 2.5]}
    assert parse_int("8192", what="x") == 8192 and parse_int(4.0, what="x") == 4
    for bad in ("1e19", HUGE, "nan", "2.5", True, None, "0x10"):
        with pytest.raises(KvgateError):
            parse_int(bad, what="x")
    assert parse_float("0.25", what="x") == 0.25
    for bad in ("inf", "nan", HUGE * 2, "1e999"):
        with pytest.raises(KvgateError):
            parse_float(bad, what="x")
    assert json.loads("[1]") == [1]


@pytest.mark.parametrize("cell", ["[]", "[[]]", "{}", "[1, 2]"])
def test_a_list_in_a_count_cell_is_named(tmp_path, capsys, cell):
    """Found by benchmarks/fuzz.py (jsonl-huge): ``"prompt_tokens": []`` became an empty
    column and numpy's min() raised ValueError."""
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "prompt_tokens": ' + cell + ', "output_tokens": 64}\n')
    code, err = _run(["replay", "--trace", str(p), "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots", "2"],
                     capsys)
    assert code == EXIT_INPUT and "prompt_tokens" in err
