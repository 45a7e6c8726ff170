"""llama.cpp's context padding by build (:func:`kvgate.engines.llamacpp.fit.kv_pad`), against
the Apple M4 CI runs of b4556 and b4846 in tests/data/fit_logs: ``llama-perplexity -c 128 -b 128``
without flash attention prints ``kv_size = 128`` and ``Metal KV buffer size = 24.00 MiB``
(Pythia-1.4B: 24 layers × 2048 K + 2048 V f16 per cell = 192 KiB per cell)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvgate.engines.llamacpp.fit import LlamaCppFlags, _kv_on_gpu, kv_geometry, kv_pad
from kvgate.fit.release import Release, parse_version
from kvgate.model import load_model

LOGS = Path(__file__).parent / "data" / "fit_logs"
LOGS_C128 = {"b4556": "llamacpp_b4556_pythia-1.4b-q4_0_apple-m4_ppl-c128_1.log",
             "b4846": "llamacpp_b4846_pythia-1.4b-q4_k_apple-m4_ppl-c128_1.log"}
MiB = 2**20


def _rel(build: str) -> Release:
    return Release("llama.cpp", build, parse_version(build), "given")


def _kv(release: Release | None, fa: str = "off", ctx: int = 128) -> int:
    f = LlamaCppFlags(ctx_size=ctx, flash_attn=fa, ubatch_size=128, batch_size=128)
    g = kv_geometry(load_model(LOGS / "configs" / "pythia-1.4b.json"), f, release)
    return _kv_on_gpu(g, ctx, 1, 999, release)[0]


@pytest.mark.parametrize("build", sorted(LOGS_C128))
def test_without_flash_attention_pads_to_32_cells_as_the_logs_print(build):
    text = (LOGS / LOGS_C128[build]).read_text(encoding="utf-8")
    assert f"build: {build[1:]} " in text
    assert "kv_size = 128," in text and "Metal KV buffer size =    24.00 MiB" in text
    assert _kv(_rel(build)) == 24 * MiB


def test_flash_attention_and_newest_builds_pad_to_256_cells():
    assert _kv(_rel("b4846"), fa="on") == 48 * MiB
    assert _kv(_rel("b7400")) == 48 * MiB
    assert _kv(None) == 48 * MiB


def test_kv_pad_window_by_build():
    off = LlamaCppFlags(flash_attn="off")
    assert [kv_pad(off, _rel(b)) for b in ("b2227", "b2860", "b4846", "b6869", "b6870")] == [256, 32, 32, 32, 256]
    assert kv_pad(LlamaCppFlags(flash_attn="on"), _rel("b4846")) == 256
