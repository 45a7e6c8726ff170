"""The engine is a place, not a string (DESIGN.md §8): outside ``src/kvgate/engines/`` at most
:data:`MOST_FILES` source files spell an engine's name ("vllm", "sglang", "llama.cpp") as a
string literal of their code. Docstrings do not count (they name engines in sentences);
f-string parts count only when a whole part is the name (``pool.engine == 'vllm'`` inside an
f-string's braces does). Counted with :mod:`ast`, as anyone can repeat:
``python -c 'import tests.test_engine_name_literals as t; print(t.literal_files())'``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "kvgate"
NAMES = frozenset({"vllm", "sglang", "llama.cpp"})
#: issue 24's bound ("engine-name literals in at most 5 files outside engines/")
MOST_FILES = 5


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, kinds) and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant) and isinstance(n.body[0].value.value, str)}


def name_literals(source: str) -> list[int]:
    """The lines of ``source`` whose code (not a docstring) holds an engine's name as a literal."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return sorted(n.lineno for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and n.value in NAMES and id(n) not in docs)


def literal_files() -> dict[str, list[int]]:
    """Source file (relative to src/kvgate) -> lines, for every file outside engines/ with one."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("engines/"):
            continue
        lines = name_literals(path.read_text(encoding="utf-8"))
        if lines:
            out[rel] = lines
    return out


def test_the_counter_sees_code_literals_and_skips_docstrings():
    src = '"""vllm"""\n\ndef f(e):\n    """sglang"""\n    return e == "llama.cpp" or f"{e == \'vllm\'}"\n'
    assert name_literals(src) == [5, 5]
    assert name_literals('x = "vllm serve"\n') == []  # a sentence, not a name


def test_engine_names_as_literals_in_at_most_five_files_outside_engines():
    files = literal_files()
    assert len(files) <= MOST_FILES, (
        f"{len(files)} files outside engines/ spell an engine's name (at most {MOST_FILES}): "
        + "; ".join(f"{f} lines {v[:5]}" for f, v in files.items())
        + ". Ask the engine instead (kvgate.engines.registry.get_engine(name).<rule>)")
