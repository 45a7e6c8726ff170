"""Engine releases outside the range kvgate models: the newest rules for a newer one (said
so), a refusal naming the flag and the range for an older one, llama.cpp build numbers."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from kvgate.cli import main
from kvgate.errors import KvgateError
from kvgate.fit import release as rel
from kvgate.fit.release import NEWEST, OLDEST, parse_version, resolve_release


def run_json(argv, capsys):
    try:
        code = main([*argv, "--json"])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, (json.loads(out.out) if out.out.strip() else None), out.err


# ------------------------------------------------------------------ 1. releases out of range
@pytest.mark.parametrize("engine", ["vllm", "sglang", "llama.cpp"])
def test_a_release_newer_than_modelled_uses_the_newest_rules_and_says_so(engine):
    newest = NEWEST[engine]
    given = "b999999" if engine == "llama.cpp" else "99.0"
    r = resolve_release(engine, given)
    assert r.text == given and r.version == parse_version(newest)
    assert f"rules of {newest} used" in r.how
    assert r.note and "newest kvgate models" in r.note and given in r.note


@pytest.mark.parametrize("argv", [["--release", "99.0"], ["--vllm-version", "99.0"],
                                  ["--engine", "sglang", "--release", "99.0"]])
def test_fit_header_and_notes_say_the_newest_rules_are_used(argv, capsys):
    code, doc, _ = run_json(["fit", "llama-3.1-8b", "--gpu", "H100", *argv], capsys)
    newest = NEWEST[doc["engine"]]
    assert code == 0 and doc["release"] == "99.0"
    assert f"rules of {newest} used" in doc["release_how"]
    assert any("newer than any" in n and newest in n for n in doc["notes"])
    assert main(["fit", "llama-3.1-8b", "--gpu", "H100", *argv]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert f"rules of {newest} used" in head


@pytest.mark.parametrize("engine,given", [("vllm", "0.0.1"), ("sglang", "0.3.9"), ("llama.cpp", "b1")])
def test_a_release_older_than_modelled_is_refused_naming_the_flag_and_range(engine, given):
    with pytest.raises(KvgateError) as e:
        resolve_release(engine, given)
    assert "--release" in e.value.message and OLDEST[engine][0] in e.value.message and NEWEST[engine] in e.value.message


def test_fit_refuses_an_old_or_unreadable_release(capsys):
    for bad in ("0.0.1", "latest"):
        code, _, err = run_json(["fit", "llama-3.1-8b", "--gpu", "H100", "--release", bad], capsys)
        assert code == 2 and "ERROR" in err and "--release" in err


def test_the_oldest_modelled_release_is_taken():
    assert resolve_release("vllm", "0.4").how == "given"  # 0.4 is 0.4.0, not older


@pytest.mark.parametrize("given", ["0.3.36", "latest"])
def test_llamacpp_release_must_be_a_build_number(given):
    with pytest.raises(KvgateError) as e:
        resolve_release("llama.cpp", given)
    assert "--release" in e.value.message and "build number" in e.value.message


def test_installed_llama_cpp_python_version_is_not_read_as_a_build(monkeypatch):
    real = metadata.version

    def fake(dist):
        if dist == "llama_cpp_python":
            return "0.3.36"
        return real(dist)
    monkeypatch.setattr(rel.metadata, "version", fake)
    r = resolve_release("llama.cpp", None)
    assert r.version == parse_version(NEWEST["llama.cpp"]) and r.text == NEWEST["llama.cpp"]
    assert r.note and "0.3.36" in r.note and "not a llama.cpp build number" in r.note
