"""The layering: only the CLI parses flags, and the engine-log gate takes every engine flag
through the same typed options as the other commands.

- pyproject.toml bans ``argparse`` (ruff's flake8-tidy-imports ``TID251``) everywhere but
  src/kvgate/cli.py and src/kvgate/commands/; `.ci/run` runs ``ruff check src tests``.
- tests/data/logs/vllm_0.8.5_qwen3-30b-a3b_tp4.log has no config line (no KV format, no
  TP). Qwen3-30B-A3B: 48 layers × 4 KV heads × 128. In fp8 under TP 2: 48 × 2 heads × 128
  × 2 (K, V) × 1 B = 24,576 B per token per rank, 8,192 tokens = 201,326,592 B per slot
  (under TP 1 it would be twice that: the wrong answer ``-tp 2`` gave before it reached
  the typed options).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvgate.cli import main

ROOT = Path(__file__).resolve().parents[1]
LOG = str(ROOT / "tests" / "data" / "logs" / "vllm_0.8.5_qwen3-30b-a3b_tp4.log")
BANNED = "import argparse\n\n\ndef f(args: argparse.Namespace) -> int:\n    return int(args.slots)\n"


def _ruff(source: str, path: str) -> subprocess.CompletedProcess[str]:
    """``ruff check`` of ``source`` as if it were the repository file ``path``, with the
    repository's configuration."""
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--config", str(ROOT / "pyproject.toml"),
                           "--output-format", "concise", "--stdin-filename", path, "-"],
                          input=source, capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_argparse_is_banned_below_the_cli_in_the_config():
    tomllib = pytest.importorskip("tomllib")  # Python ≥ 3.11
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]["lint"]
    assert "TID251" in lint["select"]
    assert "argparse" in lint["flake8-tidy-imports"]["banned-api"]
    ignores = lint["per-file-ignores"]
    allowed = sorted(k for k, v in ignores.items() if "TID251" in v and k.startswith("src/"))
    assert allowed == ["src/kvgate/cli.py", "src/kvgate/commands/*"]
    assert "ruff check src tests" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


@pytest.mark.parametrize("path", ["src/kvgate/gate/verdict_extra.py", "src/kvgate/session.py",
                                  "src/kvgate/options.py", "src/kvgate/measure/x.py"])
def test_a_module_below_the_cli_importing_argparse_is_flagged(path):
    res = _ruff(BANNED, path)
    assert res.returncode == 1 and "TID251" in res.stdout, res.stdout + res.stderr
    res = _ruff(BANNED.replace("import argparse", "from argparse import Namespace").replace("argparse.", ""), path)
    assert res.returncode == 1 and "TID251" in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize("path", ["src/kvgate/cli.py", "src/kvgate/commands/gate.py"])
def test_the_cli_may_import_argparse(path):
    res = _ruff(BANNED, path)
    assert res.returncode == 0, res.stdout + res.stderr


def _engine_gate(capsys, *flags: str) -> dict:
    assert main(["gate", "--engine-log", LOG, "--model", "qwen3-30b-a3b", "--no-record", "--json", *flags]) == 0, \
        capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _numbers(res: dict) -> dict:
    rec = res["record"]
    return {"slot_bytes": res["slot_bytes"], "pool_bytes": res["pool_bytes"], "tp": res["tp"],
            "kv_format": res["kv_format"], "geometry": rec["geometry"], "projection": rec["projection"],
            "verdicts": rec["verdicts"], "boundaries": rec["boundaries"], "inputs_tp": rec["inputs"]["tp"],
            "inputs_kv": rec["inputs"]["kv_format"], "candidates": [c["verdict"] for c in res["candidates"]]}


TARGET = ("--slots", "8", "--max-seq", "8192")


def test_engine_log_tp_spellings_are_one(capsys):
    kv = _numbers(_engine_gate(capsys, "--kv-format", "fp8", "--tp", "2", *TARGET))
    assert kv["slot_bytes"] == 48 * 2 * 128 * 2 * 8192 == 201_326_592 and kv["tp"] == kv["inputs_tp"] == 2
    for flags in (("-tp", "2"), ("--tensor-parallel-size", "2")):
        assert _numbers(_engine_gate(capsys, "--kv-format", "fp8", *flags, *TARGET)) == kv, flags


def test_engine_log_kv_format_spellings_are_one(capsys):
    kv = _numbers(_engine_gate(capsys, "--kv-format", "fp8", "--tp", "2", *TARGET))
    vllm = _numbers(_engine_gate(capsys, "--kv-cache-dtype", "fp8", "--tp", "2", *TARGET))
    assert vllm == kv and kv["kv_format"] == kv["inputs_kv"] == "fp8"
    all_vllm = _numbers(_engine_gate(capsys, "--kv-cache-dtype", "fp8", "-tp", "2", "--max-num-seqs", "8",
                                     "--max-model-len", "8192"))
    assert all_vllm == kv


def test_engine_log_takes_the_logs_values_when_not_given(capsys):
    """A KV format the user did not give is the log's: this log states none, so it is vLLM's
    --kv-cache-dtype auto, the model's dtype (bf16), said so, as import-log takes it."""
    rc = main(["gate", "--engine-log", LOG, "--model", "qwen3-30b-a3b", "--no-record", "--tp", "2", *TARGET])
    out = capsys.readouterr().out
    assert rc == 0 and "KV format not in the log and not given: bf16, the model's dtype, assumed" in out


def test_nothing_below_the_commands_imports_the_cli():
    """The library (everything but ``cli.py``, ``__main__.py`` and ``commands/``) never
    imports ``kvgate.cli``: what reads the parsers (the engine-flags page) is a command's."""
    import ast

    src = ROOT / "src" / "kvgate"
    offenders = []
    for path in src.rglob("*.py"):
        rel = path.relative_to(src).as_posix()
        if rel in ("cli.py", "__main__.py") or rel.startswith("commands/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "kvgate.cli" or n.startswith("kvgate.cli.") or n.startswith("kvgate.commands") for n in names):
                offenders.append(f"{rel}: {names}")
    assert offenders == []


def _imported_modules(tree) -> list[tuple[int, str]]:
    """Every module an AST imports (``import a.b``, ``from a.b import c`` as ``a.b`` and
    ``a.b.c``), and every string naming a kvgate module (``importlib`` targets, lazy maps)."""
    import ast

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            m = node.module or ""
            out += [(node.lineno, m)] + [(node.lineno, f"{m}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("kvgate.") \
                and " " not in node.value:
            out.append((node.lineno, node.value))
    return out


_ENGINE_INTERNALS = ("kvgate.engines.vllm", "kvgate.engines.sglang", "kvgate.engines.llamacpp")


def _engine_internal(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in _ENGINE_INTERNALS)


def test_nothing_outside_the_engines_imports_an_engines_internals():
    """Outside ``src/kvgate/engines/`` an engine is asked through ``kvgate.engines.registry``
    and the ``Engine`` interface of ``kvgate.engines.base`` (DESIGN.md §8), never by importing
    its package's modules (``kvgate.engines.vllm.*``, ``.sglang.*``, ``.llamacpp.*``): an
    engine rule changes in its package alone. Imports under ``TYPE_CHECKING`` and lazy
    module names count too."""
    import ast

    src = ROOT / "src" / "kvgate"
    offenders = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel.startswith("engines/"):
            continue
        for line, name in _imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
            if _engine_internal(name):
                offenders.append(f"{rel}:{line}: {name}")
    assert offenders == []


@pytest.mark.parametrize("source, flagged", [
    ("from kvgate.engines.vllm.fit import fit_vllm\n", True),
    ("import kvgate.engines.sglang.cache\n", True),
    ("from kvgate.engines import llamacpp\n", True),
    ("X = {'f': 'kvgate.engines.vllm.budget'}\n", True),
    ("from kvgate.engines.registry import get_engine\n", False),
    ("from kvgate.engines.base import Engine\n", False),
    ("from kvgate.engines.pool import EnginePool\n", False),
    ("x = 'see kvgate.engines.vllm.fit for the rule'\n", False),
])
def test_the_engine_layering_check_sees_each_kind_of_import(source, flagged):
    """The walk of the check above, on one line of each kind it must (not) flag."""
    import ast

    assert any(_engine_internal(n) for _, n in _imported_modules(ast.parse(source))) is flagged
