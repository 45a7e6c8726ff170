"""An empty value is refused, never read as "not given" (issue 28): ``fit --release ""``,
``--kv-format ""``, ``--kv-cache-dtype ""``, ``--gpu ""``, every value-taking option and
positional of every command (one converter, :func:`kvgate.commands._types.nonempty`, put on
every parser by :func:`kvgate.commands._types.refuse_empty_values`): ``ERROR:``/``HINT:``,
exit 2, one JSON document under ``--json``."""

from __future__ import annotations

import argparse
import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest

from kvgate.cli import build_parser, main


def _value_options() -> list[tuple[str, str]]:
    """(command, option string) for every option of every command that takes a value."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for name, p in sub.choices.items():
        for a in p._actions:
            if a.option_strings and a.nargs != 0 and not getattr(a, "empty_refused_later", False):
                out += [(name, o) for o in a.option_strings]
    return out


OPTIONS = _value_options()


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_the_options_cover_every_command_and_the_string_flags_named_in_the_issue():
    assert len(OPTIONS) > 200
    have = set(OPTIONS)
    for want in [("fit", "--release"), ("fit", "--kv-cache-dtype"), ("fit", "--gpu"), ("geometry", "--kv-format"),
                 ("tier", "--trace"), ("gate", "--quant-to"), ("import-log", "--model"), ("fit", "-ctk")]:
        assert want in have, want


@pytest.mark.parametrize(("command", "option"), OPTIONS, ids=[f"{c} {o}" for c, o in OPTIONS])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_value_is_refused_naming_the_option_with_one_json_document(command, option, value):
    code, out, err = _run([command, f"{option}={value}" if option.startswith("--") else option, *(
        [] if option.startswith("--") else [value]), "--json"])
    assert code == 2, (command, option, err)
    doc = json.loads(out)
    assert doc["exit_code"] == 2 and doc["error"].endswith(" is empty") and doc["hint"], doc
    assert err.startswith("ERROR: ") and "\nHINT: " in err and "Traceback" not in err


@pytest.mark.parametrize(("argv", "name"), [(["fit", ""], "MODEL"), (["weights", ""], "MODEL_OR_FILE"),
                                            (["geometry", "", "--max-seq", "8"], "MODEL"), (["import-log", ""], "LOG"),
                                            (["recheck", ""], "RECORD"), (["help", ""], "TOPIC")])
def test_an_empty_positional_is_refused_by_its_name(argv, name):
    code, out, err = _run([*argv, "--json"])
    assert code == 2 and json.loads(out)["error"] == f"{name} is empty", err


def test_a_flag_left_out_keeps_its_default_and_a_given_value_passes(tmp_path):
    """The converter changes nothing but the empty value: the string defaults still apply."""
    parser = build_parser("fit")
    args = parser.parse_args(["fit", "llama-3.1-8b", "--release", "0.11.0", "--dtype", "BFloat16"])
    assert args.release == "0.11.0" and args.kv_cache_dtype == "auto" and args.dtype == "bfloat16"


def test_the_workload_run_remainder_keeps_its_empty_arguments():
    """``kvgate run -- sh -c ""``: the run command's own arguments are not kvgate's flags."""
    parser = build_parser("run")
    args = parser.parse_args(["run", "--model", "llama-3.1-8b", "--", "sh", "-c", ""])
    assert args.cmd[-1] == ""


def test_an_empty_candidate_list_is_refused_by_the_gate_in_its_own_words():
    """``--candidates`` is left to its reader (``empty_refused_later``): "" and "," alike."""
    gate = ["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots", "4", "--total", "32607MiB",
            "--peak", "19625MiB", "--no-record", "--json"]
    for value in ("", ","):
        code, out, _ = _run([*gate, f"--candidates={value}"])
        assert code == 2 and "no candidates" in json.loads(out)["error"]
