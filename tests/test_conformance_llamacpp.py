"""Conformance: kvgate's llama.cpp layout against llama.cpp's own byte counts.

``tests/data/llamacpp/conformance.json`` was written by
``benchmarks/llamacpp_conformance.py``: llama.cpp, built on CPU at the pinned commit, made
each model of ``tests/data/llamacpp/conformance/*.gguf`` (metadata-only GGUFs written from
published configs by ``tests/gguf_from_config.py``) with ``llama_model_init_from_user``
and ``no_alloc``, created a context for every setting (``-c``, ``-np``, ``-ctk``/``-ctv``,
``-fa``, ``--swa-full``, ``-kvu``, ``-ub``) and reported its memory's bytes with
``llama_get_memory_breakdown`` (or refused the setting, with its log lines).

Each row here runs ``kvgate geometry GGUF <the same llama.cpp flags> --json`` on the same
file and asserts that kvgate's ``engine_cache_bytes`` equals llama.cpp's bytes, or that
kvgate refuses what llama.cpp refused. Rows kvgate cannot get exact are in ``KNOWN_OFF``
with the reason; they are asserted to be still off (a fix must move them out).
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "llamacpp"
FIXTURE = DATA / "conformance.json"

# "model/setting-id" -> why kvgate is not exact there
KNOWN_OFF: dict[str, str] = {}

# llama.cpp's refusal (a substring of its log) -> what kvgate's error must say for the same
REASONS = [
    ("quantized V cache requires flash_attn", "quantized V cache"),
    ("does not support different K", "different K"),
    ("K cache type", "K cache type"),
    ("V cache type", "V cache type"),
]


def kvgate_argv(gguf: Path, s: dict[str, Any]) -> list[str]:
    """``kvgate geometry`` argv with llama.cpp's own flags for setting ``s``."""
    argv = ["geometry", str(gguf), "-c", str(s["n_ctx"]), "-np", str(s["n_seq"]), "-ctk", s["type_k"],
            "-ctv", s["type_v"], "-fa", s["flash_attn"], "-ub", str(s["n_ubatch"]), "--json"]
    if s["swa_full"]:
        argv.append("--swa-full")
    if s["kv_unified"]:
        argv.append("-kvu")
    return argv


def kvgate_result(gguf: Path, s: dict[str, Any]) -> tuple[int | None, str]:
    """(kvgate's whole-cache bytes, or None when it refuses; its error text)."""
    from kvgate.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(kvgate_argv(gguf, s))
    if rc != 0:
        return None, err.getvalue().strip()
    return int(json.loads(out.getvalue())["engine_cache_bytes"]), ""


def rows() -> list[dict[str, Any]]:
    return list(json.loads(FIXTURE.read_text())["rows"])


def row_id(r: dict[str, Any]) -> str:
    return f"{r['model']}/{r['setting']['id']}"


def compare(r: dict[str, Any]) -> tuple[str, int | None, int | None]:
    """``(verdict, llama.cpp bytes, kvgate bytes)``; verdict one of ``exact``,
    ``both refuse`` (for the same reason, where llama.cpp logs one kvgate knows),
    ``refuse, other reason``, ``off``, ``kvgate refuses``, ``llama.cpp refuses``, or
    ``llama.cpp aborts`` (a GGML_ASSERT while building the graph: a crash, not a size)."""
    gguf = DATA / "conformance" / r["gguf"]
    lc = r["llamacpp"].get("context_bytes")
    kv, err = kvgate_result(gguf, r["setting"])
    if r["llamacpp"].get("error", "").startswith("aborted"):
        return "llama.cpp aborts", lc, kv
    if lc is None and kv is None:
        said = " ".join(r["llamacpp"].get("log", []))
        for theirs, ours in REASONS:
            if theirs in said:
                return ("both refuse" if ours in err else "refuse, other reason"), lc, kv
        return "both refuse", lc, kv
    if lc is None:
        return "llama.cpp refuses", lc, kv
    if kv is None:
        return "kvgate refuses", lc, kv
    return ("exact" if kv == lc else "off"), lc, kv


def test_fixture_is_pinned_and_broad() -> None:
    data = json.loads(FIXTURE.read_text())
    from kvgate.engines.llamacpp.pool import PINNED_COMMIT

    assert data["llama_cpp_commit"] == PINNED_COMMIT
    rs = data["rows"]
    assert len({r["model"] for r in rs}) >= 10
    kinds = {r["setting"]["id"] for r in rs}
    for needed in ("base", "fa-off", "np4", "np4-kvu", "swa-full-np4", "q8_0", "q4_0"):
        assert needed in kinds
    # every GGUF the fixture names is committed
    for r in rs:
        assert (DATA / "conformance" / r["gguf"]).is_file(), r["gguf"]


@pytest.mark.parametrize("r", rows(), ids=row_id)
def test_kvgate_matches_llamacpp(r: dict[str, Any]) -> None:
    verdict, lc, kv = compare(r)
    rid = row_id(r)
    if verdict == "llama.cpp aborts":
        pytest.skip(f"llama.cpp itself aborts on this setting ({r['llamacpp']['error']}): no size to compare")
    if rid in KNOWN_OFF:
        assert verdict not in ("exact", "both refuse"), f"{rid} is exact now: remove it from KNOWN_OFF"
        return
    assert verdict in ("exact", "both refuse"), (
        f"{rid}: llama.cpp {lc if lc is not None else 'refuses'}"
        f" vs kvgate {kv if kv is not None else 'refuses'}; llama.cpp log: {r['llamacpp'].get('log')}")
