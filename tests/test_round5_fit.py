"""Round 5 of ``kvgate fit``: llama.cpp's ``--fit`` (on by default at b11312), flip wording."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PRESET = "tests/data/llamacpp/conformance/preset-llama-3.1-70b.gguf"
REPRO = [PRESET, "--weights-bytes", "40GB", "-c", "16384", "-np", "2", "--gpu", "RTX 4090"]


def _fit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvgate", "fit", *args], capture_output=True, text=True, check=False)


def test_fit_on_by_default_keeps_40_of_80_layers() -> None:
    """Hand-worked: 40 GB over 80 layers = 0.5 GB a layer (high end), KV 64 MiB a layer
    (2 × 8 KV heads × 128 × 2 B × 8192 cells × 2 seqs); at -ngl 40 the high end uses
    20e9 B + 2560 MiB + compute 0.27 GiB + context 0.68 GiB = 22.08 GiB, 1.30 GiB under the
    RTX 4090's 23.38 GiB (≥ the 1024 MiB --fit leaves); -ngl 41 adds 0.5e9 B + 64 MiB
    = 0.53 GiB: 0.77 GiB left < 1 GiB. So --fit keeps 40 layers for sure."""
    r = _fit(*REPRO, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["fits"] == "yes"
    assert d["settings"]["n_gpu_layers"] == 40
    assert d["engine_error"] is None
    assert any("--fit" in n and "40 of 80 layers on the GPU" in n for n in d["notes"])


def test_fit_off_and_old_builds_keep_the_oom() -> None:
    for extra in (["-fit", "off"], ["--release", "b7000"]):
        d = json.loads(_fit(*REPRO, *extra, "--json").stdout)
        assert d["fits"] == "no", extra
        assert "cudaMalloc failed" in d["engine_error"]
        assert d["settings"]["n_gpu_layers"] == 999


def test_given_ngl_is_left_alone() -> None:
    d = json.loads(_fit(*REPRO, "-ngl", "999", "--json").stdout)
    assert d["fits"] == "no"
    assert d["settings"]["n_gpu_layers"] == 999


def test_fit_flag_in_engine_flags_help() -> None:
    r = subprocess.run([sys.executable, "-m", "kvgate", "help", "engine-flags", "llama.cpp"],
                       capture_output=True, text=True, check=False)
    assert "-fit, --fit on|off" in r.stdout


@pytest.mark.parametrize("bad", ["maybe"])
def test_fit_flag_rejects_other_values(bad: str) -> None:
    r = _fit(*REPRO, "-fit", bad)
    assert r.returncode == 2
