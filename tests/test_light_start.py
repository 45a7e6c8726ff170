"""Start-up is light: ``kvgate --help`` and a usage error load no numpy, pydantic, gguf or
transformers (``kvgate --help`` reads the commands' names and help lines from their
sources; a command loads what it uses when it runs), and the engines are loaded by name
from the registry only when asked (``kvgate.engines.registry``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("numpy", "pydantic", "gguf", "transformers", "torch")
COMMANDS = ("demo", "geometry", "gate", "recheck", "measure", "run", "import-smi", "replay", "workload", "fit",
            "help", "import-log", "load", "tier", "weights")

_PROBE = """
import contextlib, io, json, sys
from kvgate.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        rc = main(sys.argv[1:])
    except SystemExit as exc:
        rc = exc.code
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""


def _loaded(*argv: str) -> tuple[int, list[str]]:
    """Exit status and every module loaded by ``kvgate ARGV`` in a fresh interpreter."""
    res = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    return doc["rc"], doc["modules"]


def _heavy(mods: list[str]) -> list[str]:
    return sorted(m for m in mods if m.split(".")[0] in HEAVY)


def test_help_loads_at_most_150_modules_and_nothing_heavy():
    rc, mods = _loaded("--help")
    assert rc == 0
    assert _heavy(mods) == []
    assert len(mods) <= 150, len(mods)
    assert not [m for m in mods if m.startswith("kvgate.commands.")], "--help imported a command"


def test_an_unknown_command_loads_no_command():
    rc, mods = _loaded("no-such-command")
    assert rc == 2 and _heavy(mods) == [] and len(mods) <= 150


@pytest.mark.parametrize("command", COMMANDS)
def test_a_usage_error_loads_nothing_heavy(command):
    rc, mods = _loaded(command, "--no-such-flag")
    assert rc == 2
    assert _heavy(mods) == [], command


def test_help_lists_every_command_the_full_parser_has():
    """``--help`` reads names and help lines from the sources: the same as importing them."""
    import argparse

    from kvgate.cli import build_parser

    def listed(parser: argparse.ArgumentParser) -> list[tuple[str, str | None]]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return [(c.dest, c.help) for c in sub._choices_actions]

    assert listed(build_parser(names_only=True)) == listed(build_parser())
    assert len(listed(build_parser())) == len(COMMANDS)


def test_the_replay_page_is_vllms_default_block_size():
    """``kvgate.options.DEFAULT_PAGE_SIZE`` is written out so that building a parser loads no
    geometry; it is vLLM's ``--block-size`` default as the vLLM package states it."""
    from kvgate.engines.registry import get_engine
    from kvgate.options import DEFAULT_PAGE_SIZE

    assert DEFAULT_PAGE_SIZE == get_engine("vllm").layout_factory()().block_size == 16


def test_the_registry_loads_no_engine_rules():
    res = subprocess.run([sys.executable, "-c", "import sys, json; from kvgate.engines.registry import get_engine, "
                          "ENGINES; [get_engine(n) for n in ENGINES]; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    mods = json.loads(res.stdout)
    assert _heavy(mods) == []
    rules = [m for m in mods if m.startswith("kvgate.engines.") and m.rsplit(".", 1)[-1] in
             ("pool", "log", "fit", "flags", "budget", "cache")]
    assert rules == []
