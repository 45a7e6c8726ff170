"""The GPU table of ``kvgate fit --gpu`` (kvgate.fit.gpus): at least 50 cards, AMD Instinct
among them, each total quoted in its own source as nvidia-smi (MiB) or rocm-smi (bytes)
printed it, aliases that name one card each."""

from __future__ import annotations

import re

import pytest

from kvgate.errors import KvgateError
from kvgate.fit.gpus import GPU_TABLE, _key, lookup_gpu

MiB = 2**20


def _quoted_totals(source: str) -> set[int]:
    """Every MiB total a source quotes: ``16376MiB``, ``97 887 MiB``, ``97,887 MiB``,
    ``gpu_total_memory_mib 16303``, or a rocm-smi byte count (``VRAM Total Memory (B): N``)."""
    out = {int(re.sub(r"[ ,]", "", m)) for m in re.findall(r"(\d{1,3}(?:[ ,]\d{3})+|\d+) ?MiB", source)}
    out |= {int(m) for m in re.findall(r"memory_mib (\d+)", source)}
    out |= {int(b) // MiB for b in re.findall(r"\(B\): (\d+)", source) if int(b) % MiB == 0}
    return out


def test_table_has_fifty_cards_with_amd_instinct():
    assert len(GPU_TABLE) >= 50
    assert {"MI210", "MI250X (one GCD)", "MI300X"} <= set(GPU_TABLE)


@pytest.mark.parametrize("name", [n for n, (_, _, src) in GPU_TABLE.items() if "smi" in src or "MiB" in src])
def test_each_total_is_the_one_its_source_quotes(name):
    """The table's MiB is a total that the quoted smi output prints (the first, ECC-off
    figure where the source gives two)."""
    _, mib, source = GPU_TABLE[name]
    assert mib in _quoted_totals(source), (name, mib, source)


def test_every_card_has_a_source_and_aliases_name_one_card():
    owner: dict[str, str] = {}
    for name, (aliases, mib, source) in GPU_TABLE.items():
        assert source.strip() and isinstance(mib, int) and mib > 1024
        for a in (_key(name), *aliases):
            assert owner.setdefault(a, name) == name, f"alias {a!r} names {owner[a]} and {name}"
            assert lookup_gpu(a).name == name


def test_rocm_totals_are_whole_mib_of_the_bytes_rocm_smi_prints():
    """rocm-smi prints bytes: MI210 and one MI250X die 68,702,699,520 B = 65,520 MiB;
    RX 7900 XTX 25,753,026,560 B = 24,560 MiB."""
    for name, printed in (("MI210", 68_702_699_520), ("MI250X (one GCD)", 68_702_699_520),
                          ("RX 7900 XTX", 25_753_026_560), ("MI300X", 206_141_652_992)):
        assert lookup_gpu(name).nvml_total_bytes == printed


def test_ecc_variants_keep_the_ecc_off_total():
    """L20 prints 46068MiB with ECC on and 49140MiB off; the table keeps what its first
    quoted line prints, and says the other."""
    assert GPU_TABLE["L20"][1] == 46_068 and "49140MiB" in GPU_TABLE["L20"][2]
    assert GPU_TABLE["RTX 6000 Ada"][1] == 49_140 and "46068MiB" in GPU_TABLE["RTX 6000 Ada"][2]


def test_rtx_4060_ti_alone_is_ambiguous():
    with pytest.raises(KvgateError, match="ambiguous"):
        lookup_gpu("RTX 4060 Ti")
    assert lookup_gpu("rtx-4060-ti-16gb").nvml_total_bytes == 16_380 * MiB
