"""The suite's hypothesis profiles, chosen by ``KVGATE_HYPOTHESIS_PROFILE`` (issue 28):

- ``kvgate-ci`` (the default; ``.ci/run`` sets it): the whole-command properties
  (``test_properties_*.py``) run 25 cases each; every other hypothesis test keeps its own
  case count; all of them derandomized (a fixed seed: the same cases on every run) and
  with no example database (a CI run is the same from a clean clone).
- ``kvgate-long``: 2,000 cases, a new seed each run (``benchmarks/fuzz.py``, or the suite run
  long by hand).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_QUIET = list(HealthCheck)
settings.register_profile("kvgate-ci", max_examples=25, deadline=None, database=None, derandomize=True,
                          suppress_health_check=_QUIET)
settings.register_profile("kvgate-long", max_examples=2000, deadline=None, database=None, suppress_health_check=_QUIET)
#: loaded for the whole suite under kvgate-ci: a fixed seed, each test's own case count
settings.register_profile("kvgate-ci-seed", deadline=None, database=None, derandomize=True)


def name() -> str:
    """The profile asked for (``kvgate-ci`` unless ``KVGATE_HYPOTHESIS_PROFILE`` says otherwise)."""
    chosen = os.environ.get("KVGATE_HYPOTHESIS_PROFILE", "kvgate-ci")
    if chosen not in ("kvgate-ci", "kvgate-long"):
        raise ValueError(f"KVGATE_HYPOTHESIS_PROFILE={chosen!r}: kvgate-ci or kvgate-long")
    return chosen


def load_for_suite() -> None:
    """The suite-wide default (tests/conftest.py): kvgate-ci → a fixed seed for every test."""
    settings.load_profile("kvgate-ci-seed" if name() == "kvgate-ci" else "kvgate-long")


#: the settings of the whole-command properties
PROFILE = settings.get_profile(name())
