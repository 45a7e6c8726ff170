"""The hypothesis properties run in CI (issue 28): ``.ci/run`` → ``scripts/test`` → pytest over
``tests/`` with the ``kvgate-ci`` profile (a fixed seed, short whole-command properties)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import settings

from hypothesis_profiles import PROFILE, name

REPO = Path(__file__).resolve().parents[1]


def test_ci_runs_scripts_test_under_the_ci_profile():
    ci = (REPO / ".ci/run").read_text()
    assert re.search(r"^export KVGATE_HYPOTHESIS_PROFILE=kvgate-ci$", ci, re.M)
    assert ci.index("KVGATE_HYPOTHESIS_PROFILE") < ci.index("\nscripts/test")
    assert "-m pytest" in (REPO / "scripts/test").read_text()


def test_pytest_collects_the_property_modules_with_nothing_deselected():
    tomllib = pytest.importorskip("tomllib")  # Python ≥ 3.11
    opts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert opts["testpaths"] == ["tests"]
    assert not re.search(r"(-k|--ignore|--deselect|-m)\b", opts.get("addopts", ""))
    for mod in ("test_properties_commands.py", "test_properties_hostile.py", "test_fuzz.py"):
        assert (REPO / "tests" / mod).is_file()


@pytest.mark.skipif(os.environ.get("KVGATE_HYPOTHESIS_PROFILE", "kvgate-ci") != "kvgate-ci", reason="run long by hand")
def test_under_the_ci_profile_every_property_has_a_fixed_seed_and_the_command_ones_are_short():
    assert name() == "kvgate-ci"
    assert settings.default.derandomize is True and settings.default.database is None
    assert PROFILE.derandomize is True and PROFILE.max_examples == 25


def test_an_unknown_profile_name_is_refused(monkeypatch):
    monkeypatch.setenv("KVGATE_HYPOTHESIS_PROFILE", "kvgate-fast")
    with pytest.raises(ValueError, match="kvgate-ci or kvgate-long"):
        name()
