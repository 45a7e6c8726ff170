"""Each engine declares its command-line flags once, as data, in its package
(``engines/<name>/flag_table.py``); ``commands/_flag_table.py`` alone turns them into
argparse options (issue 24: "one builder of engine flags")."""

from __future__ import annotations

import argparse

import pytest

from kvgate.cli import build_parser
from kvgate.commands._flag_table import CONVERTERS, add_engine_groups, given_engine_flags, tables


def _options(command: str) -> set[str]:
    choices = next(a.choices for a in build_parser()._actions if isinstance(a.choices, dict))
    return {o for a in choices[command]._actions for o in a.option_strings}


def test_every_use_names_a_declared_flag_and_a_known_converter():
    spellings = {n for t in tables() for f in t.flags for n in f.names}
    for t in tables():
        keys = {f.key for f in t.flags}
        for use, rows in t.uses.items():
            for u in rows:
                assert u.flag in keys, (t.engine, use, u.flag)
                assert set(u.names) <= spellings, (t.engine, use, u.names)
                assert not u.type or u.type[0] in CONVERTERS, (t.engine, use, u.type)
            if use in ("fit", "layout"):
                assert use in t.groups, (t.engine, use)


@pytest.mark.parametrize(("command", "use"), [("fit", "fit"), ("geometry", "layout"), ("gate", "layout"),
                                              ("gate", "whatif_gate"), ("import-log", "whatif"), ("tier", "tier"),
                                              ("import-log", "import_log")])
def test_each_commands_parser_takes_the_flags_the_tables_declare_for_it(command, use):
    declared = {n for t in tables() for u in t.uses.get(use, ()) for n in (u.names or t.flag(u.flag).names)}
    assert declared and declared <= _options(command)


def test_a_flag_given_names_its_engine_and_a_default_or_shared_one_does_not():
    p = argparse.ArgumentParser()
    add_engine_groups(p, "fit")
    assert given_engine_flags(p.parse_args(["-tp", "1", "--kv-cache-dtype", "fp8"]), "fit") == \
        {"vllm": [], "sglang": [], "llama.cpp": []}
    assert given_engine_flags(p.parse_args(["-tp", "2", "--tp-size", "2", "-ctk", "q8_0"]), "fit") == \
        {"vllm": ["-tp"], "sglang": ["--tp-size"], "llama.cpp": ["-ctk"]}
    q = argparse.ArgumentParser()
    add_engine_groups(q, "layout")
    assert given_engine_flags(q.parse_args(["--enable-prefix-caching", "-ub", "64"]), "layout", joined=True) == \
        {"vllm": ["--[no-]enable-prefix-caching"], "sglang": [], "llama.cpp": ["-ub/--ubatch-size"]}
