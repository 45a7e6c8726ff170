"""The driver reserve per card (kvgate.fit.gpus): each reading is a CUDA total a public vLLM
startup log printed, read back from the log; a card's band holds its readings; the every-card
band holds every card's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvgate.fit.gpus import (
    GPU_TABLE,
    RESERVE_READINGS,
    RESERVED_HIGH,
    RESERVED_LOW,
    excluding_logs,
    lookup_gpu,
    printed_interval,
    reserve_band,
)
from kvgate.fit.interval import Interval

DATA = Path(__file__).parent / "data"
MiB = 2**20


def _log_text(name: str) -> str:
    for folder in ("fit_logs", "logs"):
        p = DATA / folder / name
        if p.exists():
            return p.read_text(encoding="utf-8")
    raise AssertionError(f"{name} is not under tests/data/fit_logs or tests/data/logs")


@pytest.mark.parametrize("r", RESERVE_READINGS, ids=lambda r: r.log)
def test_each_reading_is_printed_in_its_log(r) -> None:
    text = _log_text(r.log)
    number = r.printed.split()[0]
    # vLLM prints round(x, 2): "31.4" for 31.40; V0 "total_gpu_memory (79.22GiB)"
    shown = {number, number.rstrip("0").rstrip(".")}
    assert any(f"{n}GiB)" in text or f"/{n} GiB)" in text or f"{n}GiB" in text for n in shown), r
    assert r.card in GPU_TABLE


def test_readings_have_a_source_url() -> None:
    man = {e["file"]: e["source_url"] for e in json.loads((DATA / "fit_logs" / "manifest.json").read_text())}
    terms = {e["file"]: e["source_url"] for e in json.loads((DATA / "logs" / "nontorch_terms.json").read_text())["records"]}
    for r in RESERVE_READINGS:
        assert (man | terms).get(r.log, "").startswith("https://"), r.log


def test_a_card_band_holds_its_readings_and_the_every_card_band_holds_all() -> None:
    for r in RESERVE_READINGS:
        band, _ = reserve_band(r.card)
        nvml = GPU_TABLE[r.card][1] * MiB
        p = printed_interval(r.printed)
        assert band.low <= nvml - p.high and nvml - p.low <= band.high
        assert RESERVED_LOW <= band.low and band.high <= RESERVED_HIGH
        cuda = lookup_gpu(r.card).cuda_total
        assert cuda.low <= p.low and p.high <= cuda.high  # the printed total is inside the card's CUDA total


def test_a100_80gb_reserve_is_above_the_old_every_card_band() -> None:
    # vLLM printed 79.25 GiB on an A100 80GB (81,920 MiB): 762.9 … 773.1 MiB reserved, above the
    # 621 MiB the every-card band used to end at; the card's CUDA total now says so
    band, src = reserve_band("A100 80GB")
    assert band.low > 621 * MiB and "public vLLM logs" in src
    assert lookup_gpu("A100-80GB").cuda_total.high < 81_920 * MiB - 621 * MiB


def test_leaving_a_log_out_drops_its_reading() -> None:
    a100 = [r.log for r in RESERVE_READINGS if r.card == "A100 80GB"]
    with excluding_logs(a100):
        band, src = reserve_band("A100 80GB")
        assert "every card" in src and band.high < 773 * MiB  # only the other cards' bands are left
    assert reserve_band("A100 80GB")[0] != band


def test_every_card_band_is_the_hull_of_the_cards() -> None:
    cards = {r.card for r in RESERVE_READINGS}
    hull = Interval(min(reserve_band(c)[0].low for c in cards), max(reserve_band(c)[0].high for c in cards))
    # the H200's measured 615.06 MiB lies inside the cards' hull, so the hull is the band
    assert hull.low < 644_939_776 < hull.high
    assert (RESERVED_LOW, RESERVED_HIGH) == (hull.low, hull.high)
    assert reserve_band("T4")[0] == Interval(RESERVED_LOW, RESERVED_HIGH)


def test_a_measured_card_states_its_reserve() -> None:
    # the H200's CUDA total was measured; the reserve taken off is that one figure, said so
    h200 = lookup_gpu("H200")
    assert h200.reserve is not None
    band, src = h200.reserve
    assert band.low == band.high == h200.nvml_total_bytes - h200.cuda_total.low and "measured" in src


def test_a_total_must_leave_a_gib_after_the_widest_reserve() -> None:
    from kvgate.errors import KvgateError
    from kvgate.fit.gpus import gpu_from_total

    with pytest.raises(KvgateError, match="less than 1 GiB is left"):
        gpu_from_total(800 * MiB)  # above the band's top (793.6 MiB), yet nothing left for CUDA
    g = gpu_from_total(RESERVED_HIGH + 2**30 + 1)
    assert g.cuda_total.low == 2**30 + 1 and g.reserve is not None and "no card named" in g.reserve[1]


def test_reserve_band_takes_table_names_only() -> None:
    from kvgate.errors import KvgateError

    with pytest.raises(KvgateError, match="no card"):
        reserve_band("a100-80gb")  # an alias: lookup_gpu resolves it
    assert reserve_band(lookup_gpu("a100-80gb").name) == lookup_gpu("A100 80GB").reserve


def test_gpu_list_shows_each_cards_reserve(run_cli) -> None:
    out = run_cli("fit", "--gpu", "list")
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= 100
    row = {ln.split("  ")[0].strip(): ln for ln in lines if ln[:1].isalnum()}
    assert "742–794 MiB (1 log)" in row["A100 80GB"] and "615.06 MiB measured" in row["H200"]
    assert "404–794 MiB (every card)" in row["T4"]
    doc = json.loads(run_cli("fit", "--gpu", "list", "--json"))
    a100 = next(g for g in doc["gpus"] if g["name"] == "A100 80GB")
    assert (a100["driver_reserve_bytes"]["low"], a100["driver_reserve_bytes"]["high"]) == \
        (reserve_band("A100 80GB")[0].low, reserve_band("A100 80GB")[0].high)


@pytest.mark.parametrize("text,says,hint", [
    ("79.25", "(a number without a unit is bytes)", "e.g. 79.25GiB"),
    ("abc", "--cuda-total: cannot parse", "with its unit"),
    ("-79.25GiB", "--cuda-total: byte quantity must not be negative", "with its unit"),
])
def test_cuda_total_errors_name_the_flag_and_the_unit(text, says, hint) -> None:
    from kvgate.errors import KvgateError
    from kvgate.fit.gpus import gpu_from_cuda_total

    with pytest.raises(KvgateError) as e:
        gpu_from_cuda_total(text)
    assert says in str(e.value) and hint in (e.value.hint or "")
