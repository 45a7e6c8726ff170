"""The checkout's root holds only what a project keeps there: no stray outputs of a command
whose flag value was taken as a file name (``--plot --json`` once wrote a PNG named ``--json``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEPT = {".gitignore", "README.md", "pyproject.toml", "LICENSE", "CHANGELOG.md", ".ci", ".gitattributes"}


def test_tracked_files_at_the_root_are_the_projects_own():
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    root_files = {line for line in out.splitlines() if "/" not in line}
    assert root_files <= KEPT, sorted(root_files - KEPT)
