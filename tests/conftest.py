"""Shared fixtures: where the project's shared data (cases, traces) lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hypothesis_profiles import load_for_suite

load_for_suite()  # a fixed hypothesis seed in CI (KVGATE_HYPOTHESIS_PROFILE, tests/hypothesis_profiles.py)

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


def _find_shared() -> Path | None:
    env = os.environ.get("KVGATE_SHARED")
    for cand in ([Path(env)] if env else []) + [REPO.parent / "shared", REPO / "shared"]:
        if (cand / "cases").is_dir():
            return cand
    return None


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``../shared`` beside the checkout (CI lays a copy there)."""
    p = _find_shared()
    if p is None:
        pytest.skip("shared/ data folder not found beside the repository")
    return p


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """``tests/data``: recorded real data (device logs, measurements)."""
    return DATA


@pytest.fixture
def run_cli(capsys):
    """``run_cli("fit", ...)``: kvgate's stdout for a command that must exit 0."""
    from kvgate.cli import main

    def run(*argv):
        assert main(list(argv)) == 0
        return capsys.readouterr().out
    return run


@pytest.fixture(autouse=True)
def _transformers_logs_to_the_live_stderr():
    """transformers' logger keeps the stream that was ``sys.stderr`` when it first logged; a test
    that captured stderr then leaves it a closed stream, and a later warning prints "--- Logging
    error ---" with a traceback (seen under pytest-xdist, where the order differs)."""
    import sys

    mod = sys.modules.get("transformers.utils.logging")
    handler = getattr(mod, "_default_handler", None) if mod is not None else None
    if handler is not None:
        handler.stream = sys.stderr  # not setStream: it flushes the old, closed stream
    yield
