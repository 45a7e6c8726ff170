"""Engine flags are documented once (``kvgate help engine-flags``); every other ``--help``
shows them as one pointer per engine; ``kvgate fit --help`` reads like the README's
"Will it fit?" section."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from kvgate.cli import build_parser, main
from kvgate.commands._engine_flags import FLAGS

ROOT = Path(__file__).resolve().parents[1]


def _out(capsys, argv: list[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def _help(command: str) -> str:
    parser = build_parser(command.replace("-", "_"))
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command].format_help()


def test_engine_flags_lists_each_engine_with_defaults(capsys):
    out = _out(capsys, ["help", "engine-flags"])
    for title in ("vLLM (vllm serve)", "SGLang (python -m sglang.launch_server)", "llama.cpp (llama-server"):
        assert title in out
    assert "--gpu-memory-utilization U\n      default: 0.9; 0.92 from 0.20.0" in out
    assert "1024" in out and "0.88 (1), 0.87 (2+)" in out and "-ctk, --cache-type-k TYPE" in out


def test_engine_flags_for_one_engine(capsys):
    out = _out(capsys, ["help", "engine-flags", "vllm"])
    assert "vLLM (vllm serve)" in out and "SGLang (" not in out and "llama.cpp (" not in out
    doc = json.loads(_out(capsys, ["help", "engine-flags", "llama.cpp", "--json"]))
    assert list(doc) == ["llama.cpp"] and doc["llama.cpp"][0]["spellings"] == "-c, --ctx-size N"


def test_engine_flags_of_an_unknown_engine_is_an_input_error(capsys):
    assert main(["help", "engine-flags", "tgi"]) == 2
    assert "one of: vllm, sglang, llama.cpp" in capsys.readouterr().err


def _spellings(text: str) -> list[str]:
    return [s for s in re.findall(r"(?<![\w-])(-{1,2}[a-z][a-z0-9-]*)", text) if s != "--no-"]


@pytest.mark.parametrize("engine", list(FLAGS))
def test_every_documented_fit_flag_is_one_fit_parses(engine):
    """The page and the parser agree: each spelling documented for ``fit`` is an option of
    ``kvgate fit`` (and each for the layout commands, of ``kvgate gate``)."""
    options = {cmd: {o for a in build_parser(cmd)._subparsers._group_actions[0].choices[cmd]._actions  # type: ignore[union-attr]
                     for o in a.option_strings} for cmd in ("fit", "gate")}
    for f in FLAGS[engine]:
        names = [s.replace("--[no-]", "--") for s in _spellings(f.spellings.replace("[no-]", ""))]
        for cmd, key in (("fit", "fit"), ("gate", "layout")):
            if key in f.commands:
                assert any(n in options[cmd] for n in names), (engine, f.spellings, cmd)


@pytest.mark.parametrize("command", ["gate", "geometry", "run", "replay"])
def test_other_helps_show_engine_flags_as_one_pointer(command):
    text = _help(command)
    assert "kvgate help engine-flags vllm" in text and "kvgate help engine-flags llama.cpp" in text
    # no per-flag help line for an engine spelling (they were 24 of gate's 59 options)
    for flag in ("--max-num-batched-tokens", "--kv-cache-dtype", "--ctx-size", "-ctk", "--swa-full"):
        # an argparse entry is the flag then its metavar or its help; the pointer lists "FLAG,"
        assert not re.search(rf"^\s+{re.escape(flag)}(?: [A-Z]|\s{{2,}}\S|$)", text, flags=re.M), flag
    assert len(text.splitlines()) < 150


def test_gate_help_is_shorter_than_it_was():
    assert len(_help("gate").splitlines()) <= 130  # 173 with every engine flag repeated (issue 20)


def test_help_command_is_the_commands_own_help(capsys):
    assert _out(capsys, ["help", "gate"]).rstrip("\n") == _help("gate").rstrip("\n")
    listing = _out(capsys, ["help"])
    assert "engine-flags" in listing and "import-log" in listing and "fit" in listing


def _words(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def test_fit_help_reads_like_the_readme_fit_section():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Will it fit?", 1)[1].split("\n## ", 1)[0]
    para = section.split("\n\n", 1)[1].split("\n\n", 1)[0]  # the section's first paragraph
    sentences = [s for s in re.split(r"(?<=[.)])\s+(?=[A-Z(])", _words(para)) if s][:3]
    text = _words(_help("fit"))
    for s in sentences[:2]:
        assert s.rstrip(".") in text, s
    for needle in ("can't tell", "--weights-bytes", "--mem-fraction-static", "-c as the whole context",
                   "kvgate help engine-flags"):
        assert needle in text


@pytest.mark.parametrize("width", [60, 72, 80, 100])
def test_engine_flags_never_break_a_flag_at_its_hyphen(width):
    """Wrapped as a sentence, ``--kv-format`` stays one word (was ``--kv-`` / ``format``)."""
    from kvgate.commands._engine_flags import render_engine_flags

    text = render_engine_flags(width=width)
    broken = [ln for ln in text.splitlines() if re.search(r"\w-$", ln)]
    assert not broken, broken
    assert "--kv-format" in text


def test_np_default_in_the_help_is_the_one_fit_runs(capsys):
    """With no -np, ``fit`` runs llama-server's auto slots; the help's default says that number."""
    gguf = ROOT / "tests" / "data" / "llamacpp" / "conformance" / "qwen3-8b.gguf"
    out = _out(capsys, ["fit", str(gguf), "--gpu", "RTX-4090", "--weights-bytes", "5GB"])
    flags = next(ln for ln in out.splitlines() if ln.startswith("flags: "))
    slots = int(re.search(r"-np (\d+)", flags).group(1))
    assert slots > 1 and "-kvu" in flags  # llama-server's auto: several slots, one unified cache
    doc = json.loads(_out(capsys, ["help", "engine-flags", "llama.cpp", "--json"]))
    row = next(r for r in doc["llama.cpp"] if r["spellings"].startswith("-np"))
    assert f"auto = {slots} slots" in row["default"], row
    kvu = next(r for r in doc["llama.cpp"] if r["spellings"].startswith("-kvu"))
    assert "auto -np" in kvu["default"], kvu
    assert f"auto, {slots} slots" in " ".join(_help("fit").split())
