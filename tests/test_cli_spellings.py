"""Pasted engine command lines: vLLM's underscore spellings (``--max_model_len``), "did you mean"
for an unknown option, and the command's own --help in the hint."""

from __future__ import annotations

import json

import pytest

from kvgate.cli import build_parser, engine_spellings, main


def test_underscore_spellings_read_as_vllm_reads_them(capsys):
    assert main(["fit", "llama-3.1-8b", "--gpu", "H100", "--max_model_len", "32768", "--max_num_seqs=8",
                 "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert settings["max_model_len"] == 32768 and settings["max_num_seqs"] == 8


def test_underscores_after_double_dash_and_in_launch_commands_are_kept():
    p = build_parser()
    argv = ["fit", "m", "--max_model_len", "1", "--", "--max_num_seqs"]
    assert engine_spellings(p, argv) == ["fit", "m", "--max-model-len", "1", "--", "--max_num_seqs"]
    run = ["run", "--", "vllm", "serve", "m", "--max_model_len", "1"]
    assert engine_spellings(p, run) == run
    assert engine_spellings(p, ["fit", "m", "--not_an_option"]) == ["fit", "m", "--not_an_option"]


def test_unknown_option_gets_did_you_mean_and_the_commands_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fit", "llama-3.1-8b", "--gpu", "H100", "--max-model-length", "3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "did you mean --max-model-len?" in err and "kvgate fit --help" in err
