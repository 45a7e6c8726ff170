"""GPU memory: a small table of common cards, the local GPU through NVML, or a given total.

Two totals matter, and they differ by the driver's reserved memory:

- **NVML total** (``nvidia-smi --query-gpu=memory.total``; NVML ``nvmlDeviceGetMemoryInfo``
  v1/v2 ``total``): what the table holds, exact where ``nvidia-smi`` prints it in MiB.
- **CUDA total** (``cudaMemGetInfo`` / ``torch.cuda.mem_get_info()[1]``): what vLLM multiplies
  by ``--gpu-memory-utilization`` and SGLang by ``--mem-fraction-static``. On an H200
  (driver 580.159.04) measured here: NVML total 150,754,820,096 B (143,771 MiB), CUDA total
  150,109,880,320 B, and the difference 644,939,776 B (615.06 MiB) is exactly NVML v2
  ``reserved``.

When only the NVML total is known, the reserved part is an interval. The driver's reserve is
the card's and the driver's, not one number: from the CUDA totals vLLM printed
(``total_gpu_memory (X GiB)`` / ``Free memory on device (x/Y GiB)``, two decimals of GiB, so
each figure is ±5.12 MiB) on cards named independently of that figure
(:data:`RESERVE_READINGS`): H100 80GB 432.6 … 483.8 MiB (three logs, two drivers at least: the
widest spread of one card), A100 80GB 762.9 … 773.1 MiB, A100 40GB 506.9 … 517.1 MiB, L40S
576.8 … 617.8 MiB, RTX 3090 425.0 … 435.2 MiB, RTX 5090 448.3 … 458.5 MiB; H200 615.06 MiB
measured to the byte. A card with readings takes its own band, widened to at least the widest
card's (51.2 MiB, so one reading does not stand for every driver) (:func:`reserve_band`); any
other card, a ``--total`` and NVML v1 take the hull of all
of those bands, :data:`RESERVED_LOW` … :data:`RESERVED_HIGH` (404 … 794 MiB). Under WSL 2 and on
Windows there is none (:func:`wsl_gpu`): an RTX 4080 printed 15.99 GiB of its 16,376 MiB and an
RTX 4060 8.00 GiB of its 8,188 MiB, so such readings are not in the table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal

from kvgate.errors import KvgateError
from kvgate.fit.interval import Interval
from kvgate.units import MiB, fmt_mib, fmt_mib_range

_SMI = "nvidia-smi memory.total as printed on this card in public nvidia-smi output"
_MODAL = "github modal-labs/modal-client PR #2797 (nvidia-smi totals of its GPU types)"


@dataclass(frozen=True)
class Gpu:
    """One GPU's memory.

    Attributes:
        name: the card's name.
        nvml_total_bytes: NVML / ``nvidia-smi`` total, bytes.
        cuda_total: ``cudaMemGetInfo`` total as an interval (a point when measured).
        source: where the numbers come from.
        reserve: the driver reserve taken off the NVML total to get ``cuda_total`` (bytes), and
            where that band comes from; ``None`` where nothing was taken off (measured, printed
            by the engine, WSL).
    """

    name: str
    nvml_total_bytes: int
    cuda_total: Interval
    source: str
    reserve: tuple[Interval, str] | None = None

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "nvml_total_bytes": self.nvml_total_bytes,
                "cuda_total_bytes": self.cuda_total.to_dict(), "source": self.source,
                "driver_reserve_bytes": None if self.reserve is None else self.reserve[0].to_dict(),
                "driver_reserve_source": None if self.reserve is None else self.reserve[1]}


# name -> (aliases, NVML total MiB, source)
GPU_TABLE: dict[str, tuple[tuple[str, ...], int, str]] = {
    "H100 80GB": (("h100", "h100-80gb", "h100-80gb-hbm3", "h100-sxm", "h100-pcie", "h800"), 81_559,
                  "nvidia-smi '0MiB /  81559MiB' (NVIDIA H100 80GB HBM3, github vllm-project/vllm issue #55169; "
                  "H100: 81559MiB in " + _MODAL + "); the H800 prints the same"),
    "H100 NVL 94GB": (("h100-nvl", "h100-94gb", "h100nvl"), 95_830,
                      "nvidia-smi '4MiB /  95830MiB' (NVIDIA H100 NVL, driver 580.65.06, in a public DeepSpeed "
                      "benchmark README; the same total in a Rackspace OpenStack Flex blog post, 2025-12-03)"),
    "H200": (("h200", "h200-141gb"), 143_771, "nvidia-smi memory.total 143771 MiB on an H200, driver 580.159.04, measured"),
    "B200": (("b200",), 183_359, "nvidia-smi '0MiB / 183359MiB' (NVIDIA B200, driver 575.57.08, the sample "
                                        "output of Modal's GPU glossary page 'What is nvidia-smi?')"),
    "A100 80GB": (("a100-80gb", "a100-80g", "a100-sxm4-80gb", "a100-pcie-80gb", "a100-80gb-pcie"), 81_920,
                  "A100 80GB: 81920MiB in " + _MODAL),
    "A100 40GB": (("a100-40gb", "a100-40g", "a100-sxm4-40gb", "a100-pcie-40gb"), 40_960,
                  "A100 40GB: 40960MiB in " + _MODAL),
    "L40S": (("l40s",), 46_068, "L40S: 46068MiB in " + _MODAL),
    "L4": (("l4",), 23_034, "L4: 23034MiB in " + _MODAL),
    "A10": (("a10", "a10g"), 23_028, "A10: 23028MiB in " + _MODAL + " (A10 and A10G)"),
    "RTX A6000": (("a6000", "rtx-a6000"), 49_140,
                  "nvidia-smi '0MiB / 49140MiB' (NVIDIA RTX A6000, ECC off, driver 565.57.01, in a public "
                  "RunPod support ticket, 2025-12-23); 46068MiB with ECC on (the L40S's figure, same memory)"),
    "RTX 3090": (("3090", "rtx-3090", "rtx3090"), 24_576,
                 "nvidia-smi '22598MiB /  24576MiB' (NVIDIA GeForce RTX 3090, github noonghunna/club-3090 issue "
                 "#1128)"),
    "RTX 4090": (("4090", "rtx-4090", "rtx4090"), 24_564,
                 "nvidia-smi '507MiB /  24564MiB' (NVIDIA GeForce RTX 4090, github RLinf/RLinf issue #255; "
                 "'23859MiB / 24564MiB' in github vllm-project/vllm issue #7553)"),
    "V100 16GB": (("v100-16gb", "v100-pcie-16gb", "v100-sxm2-16gb", "tesla-v100-pcie-16gb", "tesla-v100-sxm2-16gb"),
                  16_384, _SMI + " (Tesla V100-PCIE-16GB '0MiB / 16384MiB' in public nvidia-smi tables, recent "
                  "drivers; older drivers print 16160MiB; the llama.cpp V100 logs of "
                  "tests/data/fit_logs run on a V100-PCIE-16GB)"),
    "V100 32GB": (("v100-32gb", "v100-pcie-32gb", "v100-sxm2-32gb", "v100s", "v100s-pcie-32gb",
                   "tesla-v100-pcie-32gb", "tesla-v100-sxm2-32gb"), 32_768,
                  _SMI + " (Tesla V100-SXM2-32GB and V100-PCIE-32GB '/32768 MiB' in public nvidia-smi output)"),
    "T4": (("t4", "tesla-t4"), 15_360, "T4: 15360MiB in " + _MODAL + "; 15109MiB with ECC on; "
           "tests/data/fit_logs/vllm_0.4-dev_deepseek-coder-6.7b_t4_tp2_1.log runs on a T4"),
    "RTX 3060 12GB": (("3060", "rtx-3060", "rtx3060", "rtx-3060-12gb", "3060-12gb"), 12_288,
                      "nvidia-smi '0MiB /  12288MiB' (NVIDIA GeForce RTX 3060, driver 560.35.02 under WSL, "
                      "in a public training log, 2025-11-22)"),
    "RTX 4060": (("4060", "rtx-4060", "rtx4060", "rtx-4060-8gb"), 8_188,
                 "nvidia-smi '9MiB /   8188MiB' (NVIDIA GeForce RTX 4060, driver 550.163.01, in a public "
                 "Unsloth validation report, 2025-11-29); tests/data/fit_logs/vllm_0.7.3-dev_qwen2.5-7b-bnb4_rtx4060_1.log runs on one"),
    "RTX 5090": (("5090", "rtx-5090", "rtx5090", "rtx-5090-d"), 32_607,
                 "nvidia-smi '32607MiB' in tests/data/fit_logs/vllm_0.15.2rc1_qwen3-coder-30b-a3b-fp8_rtx5070ti+rtx5090d_1.log; "
                 "'29340MiB /  32607MiB' in github noonghunna/club-3090 issue #1322"),
    "RTX 5070 Ti": (("5070ti", "rtx-5070-ti", "5070-ti"), 16_303,
                    "nvidia-smi '16303MiB' in tests/data/fit_logs/vllm_0.15.2rc1_qwen3-coder-30b-a3b-fp8_rtx5070ti+rtx5090d_1.log"),
    # cards added with issue 25: each total as a public nvidia-smi / rocm-smi output prints it
    "RTX A5000": (("a5000", "rtx-a5000"), 24_564,
                  "nvidia-smi 'NVIDIA RTX A5000, 24564 MiB' (github akash-network/provider-configs PR #83); "
                  "23028MiB with ECC on (github mbilker/vgpu_unlock-rs issue #37)"),
    "RTX A4000": (("a4000", "rtx-a4000"), 16_376,
                  "nvidia-smi '1MiB /  16376MiB' (github geerlingguy/raspberry-pi-pcie-devices issue #791)"),
    "RTX A400": (("a400", "rtx-a400"), 4_094,
                 "nvidia-smi '1MiB /   4094MiB' (github geerlingguy/raspberry-pi-pcie-devices issues #791, #677)"),
    "Quadro RTX 4000": (("quadro-rtx-4000", "rtx-4000"), 8_192,
                        "nvidia-smi '1MiB /  8192MiB' (github akash-network/provider-configs PR #12)"),
    "RTX 5070": (("5070", "rtx-5070", "rtx5070"), 12_227,
                 "nvidia-smi '1731MiB /  12227MiB' (github shkhln/libc6-shim issue #14)"),
    "RTX 6000D": (("rtx-6000d", "6000d"), 85_651,
                  "nvidia-smi '0MiB /  85651MiB' (github aikitoria/open-gpu-kernel-modules issue #20)"),
    "RTX PRO 6000 Blackwell": (("rtx-pro-6000", "pro-6000", "rtx-pro-6000-blackwell",
                                "rtx-pro-6000-blackwell-workstation-edition", "rtx-pro-6000-blackwell-server-edition"),
                               97_887, "nvidia-smi memory.total '97 887 MiB' (Workstation Edition) and '97,887 MiB "
                               "total' on two cards, in public project notes (search index file ids 60416527314, "
                               "69814199154)"),
    "A800 80GB": (("a800", "a800-80gb", "a800-sxm4-80gb"), 81_920,
                  "nvidia-smi '34447MiB / 81920MiB' on A800-SXM4-80GB (github dexmal/dexbotic issue #41)"),
    "MI300X": (("mi300x", "instinct-mi300x", "amd-instinct-mi300x"), 196_592,
               "rocm-smi --showmeminfo vram 'VRAM Total Memory (B): 206141652992' (github ROCm/legacy-rocm-build "
               "issue #4750); ROCm: the driver reserve band below is NVIDIA's, not measured on AMD"),
    # cards added with issue 25, round 2: the total as public nvidia-smi / rocm-smi output prints it
    # ("search index file id N": the file as the search tool's index holds it)
    "RTX 4080": (("4080", "rtx-4080", "rtx4080", "rtx-4080-super", "4080-super"), 16_376,
                 "nvidia-smi '1909MiB /  16376MiB' (RTX 4080, WSL notes, search index file id 37147423438; "
                 "also 25670629466); the 4080 SUPER prints the same total (file id 55219783307)"),
    "RTX 5080": (("5080", "rtx-5080", "rtx5080"), 16_303,
                 "gpu_total_memory_mib 16303 on an RTX 5080, driver 610.88 (search index file id 60637830712); "
                 "the same 16 GB GDDR7 total as the RTX 5070 Ti's nvidia-smi line"),
    "GTX 1660 Ti": (("1660ti", "1660-ti", "gtx-1660-ti", "gtx1660ti"), 6_144,
                    "nvidia-smi '5MiB /  6144MiB' (GTX 1660 Ti, search index file ids 20352671906, 5831594494)"),
    "RTX 2080 Ti": (("2080ti", "2080-ti", "rtx-2080-ti", "rtx2080ti"), 11_264,
                    "nvidia-smi '688MiB / 11264MiB' (search index file ids 57003878600, 2444748349); 22528MiB on "
                    "memory-modded 22 GB boards (file id 5766344196)"),
    "RTX 3070": (("3070", "rtx-3070", "rtx3070"), 8_192,
                 "nvidia-smi '535MiB /   8192MiB' (search index file ids 47386422904, 24936937580)"),
    "RTX 3080": (("3080", "rtx-3080", "rtx3080", "rtx-3080-10gb"), 10_240,
                 "nvidia-smi '73MiB / 10240MiB' (RTX 3080 10GB, search index file ids 45402919764, 9387090229)"),
    "RTX 3090 Ti": (("3090ti", "3090-ti", "rtx-3090-ti", "rtx3090ti"), 24_564,
                    "nvidia-smi '1MiB /  24564MiB' (search index file ids 38730079768, 54492899325)"),
    "RTX 4060 Ti 16GB": (("rtx-4060-ti-16gb", "4060-ti-16gb", "4060ti-16gb"), 16_380,
                         "nvidia-smi '2MiB /  16380MiB' (search index file ids 48155927377, 32431662078)"),
    "RTX 4060 Ti 8GB": (("rtx-4060-ti-8gb", "4060-ti-8gb", "4060ti-8gb"), 8_188,
                        "nvidia-smi '1435MiB /   8188MiB' (search index file id 14094872246)"),
    "RTX 4070": (("4070", "rtx-4070", "rtx4070"), 12_282,
                 "nvidia-smi '19MiB /  12282MiB' (search index file ids 2166409833, 39784259410)"),
    "RTX 4000 Ada": (("rtx-4000-ada", "4000-ada", "rtx-4000-ada-generation"), 20_475,
                     "nvidia-smi '2MiB /  20475MiB' (RTX 4000 Ada Generation, ECC off, search index file ids "
                     "60910666302, 61162860653); 19195MiB with ECC on (file id 21224119244)"),
    "RTX 6000 Ada": (("rtx-6000-ada", "6000-ada", "rtx-6000-ada-generation"), 49_140,
                     "nvidia-smi '2MiB /  49140MiB' (RTX 6000 Ada Generation, ECC off, search index file ids "
                     "28683376639, 70288770903); 46068MiB with ECC on (file id 27924127611)"),
    "L40": (("l40",), 46_068,
            "nvidia-smi '5MiB /  46068MiB' (NVIDIA L40, search index file ids 15020386292, 59527357058)"),
    "L20": (("l20",), 46_068,
            "nvidia-smi '3MiB /  46068MiB' (NVIDIA L20, ECC on, search index file ids 67533193225, 54990278129); "
            "49140MiB with ECC off (file id 57433044301)"),
    "A40": (("a40",), 46_068,
            "nvidia-smi '0MiB / 46068MiB' (NVIDIA A40, search index file ids 20643033992, 15071196450)"),
    "A30": (("a30",), 24_576,
            "nvidia-smi '0MiB / 24576MiB' (NVIDIA A30, search index file ids 19961875791, 35048945771)"),
    "GH200": (("gh200", "gh200-480gb", "gh200-96gb"), 97_871,
              "nvidia-smi '0MiB /  97871MiB' (NVIDIA GH200 480GB: the 96 GB HBM3 Hopper side, search index file "
              "ids 55056782127, 47182422736)"),
    "H20": (("h20",), 97_871,
            "nvidia-smi '0MiB / 97871MiB' (NVIDIA H20, 96 GB, search index file ids 10232534572, 69782509629)"),
    "P100 16GB": (("p100", "p100-16gb", "tesla-p100", "tesla-p100-pcie-16gb", "p100-pcie-16gb"), 16_280,
                  "nvidia-smi '0MiB / 16280MiB' (Tesla P100-PCIE-16GB, search index file ids 20268372361, "
                  "38267605023)"),
    "P40": (("p40", "tesla-p40"), 24_451,
            "nvidia-smi '0MiB / 24451MiB' (Tesla P40, ECC off, search index file ids 32727711495, 32307428149); "
            "22919MiB with ECC on (file id 52676653614)"),
    "MI210": (("mi210", "instinct-mi210", "amd-instinct-mi210"), 65_520,
              "rocm-smi --showmeminfo vram 'VRAM Total Memory (B): 68702699520 (~64GB)' (card model 0x740f, "
              "gfx90a; search index file ids 6691393520, 6828424309); ROCm: the reserve band is NVIDIA's"),
    "MI250X (one GCD)": (("mi250x", "mi250", "instinct-mi250x", "amd-instinct-mi250x", "mi250x-gcd"), 65_520,
                         "rocm-smi 'VRAM Total Memory (B): 68702699520' on an 'AMD INSTINCT MI200 (MCM) OAM' (card "
                         "model 0x7408; search index file id 69016060398): each of the two dies is its own GPU; "
                         "ROCm: the reserve band is NVIDIA's"),
    "RX 7900 XTX": (("7900xtx", "7900-xtx", "rx-7900-xtx", "radeon-rx-7900-xtx", "amd-radeon-rx-7900-xtx"), 24_560,
                    "rocm-smi --showmeminfo vram 'VRAM Total Memory (B): 25753026560' (search index file ids "
                    "70657200999, 55333849140); ROCm: the reserve band is NVIDIA's"),
}

# measured CUDA totals (bytes), where we have them to the byte
_CUDA_MEASURED = {"H200": 150_109_880_320}


@dataclass(frozen=True)
class ReserveReading:
    """One CUDA total an engine printed on a card of the table named independently of that
    figure (not a card guessed from the total itself).

    Attributes:
        card: the table's name of the card.
        printed: the CUDA total as printed, e.g. ``"79.25 GiB"`` (its printing is its interval).
        log: the startup log under ``tests/data/fit_logs/`` or ``tests/data/logs/`` (source URL in
            that folder's manifest.json / nontorch_terms.json).
        how: how the card is known.
    """

    card: str
    printed: str
    log: str
    how: str


#: CUDA totals printed by vLLM (module docstring); tests/test_gpu_reserve.py reads each log back
RESERVE_READINGS: tuple[ReserveReading, ...] = (
    ReserveReading("H100 80GB", "79.18 GiB", "vllm_0.10.2_qwen3-30b-a3b_h100_1.log",
                   "device_name=NVIDIA_H100_80GB_HBM3 in the log's MoE config warning"),
    ReserveReading("H100 80GB", "79.18 GiB", "vllm_0.10.2_qwen3-30b-a3b_h100_2.log",
                   "device_name=NVIDIA_H100_80GB_HBM3 in the log's MoE config warning"),
    ReserveReading("H100 80GB", "79.22 GiB", "vllm_0.7.0-dev_llama-3.2-11b-vision_h100_1.log",
                   "H100-80G stated in the pull request"),
    ReserveReading("A100 80GB", "79.25 GiB", "vllm_0.26.1rc1_qwen3-coder-30b-a3b_a100-80gb_1.log",
                   "device_name=NVIDIA_A100 in the MoE config line; 56.93 GiB of weights on one card"),
    ReserveReading("A100 40GB", "39.50 GiB", "vllm_0.6.6_llama-3-8b_a100-40gb_1.log", "A100 40GB stated in the issue"),
    ReserveReading("L40S", "44.39 GiB", "vllm_0.6.6.post1_internvl3-78b_l40s_tp8_1.log",
                   "AWS g6e.48xlarge; nvidia-smi on the same page: NVIDIA L40S"),
    ReserveReading("L40S", "44.42 GiB", "vllm_0.7-v0_qwen2.5-32b_l40s_tp2_1.log", "L40S in the issue title"),
    ReserveReading("RTX 3090", "23.58 GiB", "vllm_0.8-v0_deepseek-moe-awq_rtx3090_multi_terms.log",
                   "RTX 3090s stated in the pull request comment"),
    ReserveReading("RTX 5090", "31.40 GiB", "vllm_2026-08_qwen3.8-27b-fp8_rtx5090_tp2_1.log",
                   "2 × RTX 5090 stated in the issue"),
)
_EXCLUDED: ContextVar[frozenset[str]] = ContextVar("kvgate_reserve_excluded", default=frozenset())


@contextmanager
def excluding_logs(files: Iterable[str]) -> Iterator[None]:
    """Within the block, the reserve bands ignore the readings of ``files`` (the leave-one-out
    evaluation of ``benchmarks/fit_logs_oos.py``: a log's own figure never sizes its card)."""
    token = _EXCLUDED.set(frozenset(files))
    try:
        yield
    finally:
        _EXCLUDED.reset(token)


def printed_interval(text: str) -> Interval:
    """The bytes a printed quantity stands for: ``"79.19 GiB"`` is 79.185 … 79.195 GiB; plain
    bytes are a point.

    Raises:
        KvgateError: not a byte quantity.
    """
    from kvgate.units import parse_bytes  # noqa: PLC0415

    t = str(text).strip()
    mid = parse_bytes(t)
    m = re.match(r"^\s*(\d+)\.(\d+)\s*([A-Za-z]+)\s*$", t)
    if not m:
        return Interval.point(mid)
    unit_bytes = parse_bytes("1" + m.group(3))
    half = int(Decimal(unit_bytes) * Decimal(5) / Decimal(10) ** (len(m.group(2)) + 1))
    return Interval(mid - half, mid + half)


def _reading_reserve(r: ReserveReading) -> Interval:
    nvml = GPU_TABLE[r.card][1] * MiB
    p = printed_interval(r.printed)
    return Interval(nvml - p.high, nvml - p.low)


def _widest_card_hull(readings: list[ReserveReading]) -> int:
    """The widest hull of one card's readings, bytes: how far drivers move one card's reserve."""
    widths = []
    for card in {r.card for r in readings}:
        own = [_reading_reserve(r) for r in readings if r.card == card]
        widths.append(max(i.high for i in own) - min(i.low for i in own))
    return max(widths, default=0)


def reserve_band(card: str | None = None) -> tuple[Interval, str]:
    """The driver reserve of ``card`` (a table name) in bytes and its source: the hull of the
    card's own readings, or, for a card without any (or ``None``: a ``--total``, NVML v1), the
    hull of every card's band and the H200's measured reserve (module docstring).

    Raises:
        KvgateError: ``card`` is not a name of the table (an alias: resolve it with
            :func:`lookup_gpu` first).
    """
    if card is not None and card not in GPU_TABLE:
        raise KvgateError(f"no card {card!r} in the table (reserve_band takes the table's names)",
                          hint="lookup_gpu(NAME) resolves aliases; kvgate fit --gpu list shows the table")
    excluded = _EXCLUDED.get()
    readings = [r for r in RESERVE_READINGS if r.log not in excluded]
    own = [_reading_reserve(r) for r in readings if r.card == card]
    if own:
        hull = Interval(min(i.low for i in own), max(i.high for i in own))
        short = max(0, _widest_card_hull(readings) - hull.width)  # drivers differ: at least the widest card's spread
        logs = f"{len(own)} CUDA total" + ("s" if len(own) > 1 else "")
        return (Interval(hull.low - short // 2, hull.high + (short - short // 2)),
                f"band from {logs} in public vLLM logs of this card; kvgate fit --gpu list")
    every = [reserve_band(c)[0] for c in {r.card for r in readings}]
    every += [Interval.point(GPU_TABLE[n][1] * MiB - b) for n, b in _CUDA_MEASURED.items()]
    said = "no card named" if card is None else "no CUDA total on record for this card"
    return (Interval(min(i.low for i in every), max(i.high for i in every)), f"{said}: every card's band")


#: the band of a card without readings, bytes (module docstring)
_EVERY_CARD = reserve_band(None)[0]
RESERVED_LOW: int = _EVERY_CARD.low
RESERVED_HIGH: int = _EVERY_CARD.high


def _key(text: str) -> str:
    return re.sub(r"[\s_]+", "-", text.strip().lower()).replace("nvidia-", "").replace("geforce-", "")


def _from_table(name: str) -> Gpu:
    aliases, mib, source = GPU_TABLE[name]
    total = mib * MiB
    if name in _CUDA_MEASURED:
        measured = Interval.point(total - _CUDA_MEASURED[name])
        return Gpu(name, total, Interval.point(_CUDA_MEASURED[name]), source,
                   (measured, "NVML reserved, measured on this card"))
    reserve = reserve_band(name)
    return Gpu(name, total, Interval(total - reserve[0].high, total - reserve[0].low), source, reserve)


def gpu_names() -> list[str]:
    """The table's card names."""
    return list(GPU_TABLE)


def gpu_table_text() -> str:
    """``--gpu list``: every card of the table with its total and where the total comes from."""
    from kvgate.output import table  # noqa: PLC0415

    rows = [[name, f"{mib:,} MiB", reserve_said(name), src if len(src) <= 36 else src[:35] + "…"]
            for name, (_, mib, src) in GPU_TABLE.items()]
    return (f"{len(rows)} cards (--gpu NAME or an alias; totals as nvidia-smi / rocm-smi print them; the\n"
            "driver reserve kvgate takes off for the CUDA total: the card's own band where public vLLM logs\n"
            "printed its CUDA total, measured where marked, else every card's band)\n"
            "(--json: aliases, whole sources, reserves in bytes)\n"
            + table(rows, header=["card", "total", "driver reserve", "source"], align="lrll"))


def reserve_said(name: str) -> str:
    """A table card's driver reserve in words: ``615.06 MiB measured``, ``433–484 MiB (3 logs)``
    or ``404–794 MiB (every card)``."""
    g = _from_table(name)
    if g.reserve is None:
        return "not available"
    band, _ = g.reserve
    if band.low == band.high:
        return f"{fmt_mib_range(band.low, band.high)} measured"
    own = sum(1 for r in RESERVE_READINGS if r.card == name and r.log not in _EXCLUDED.get())
    return f"{fmt_mib_range(band.low, band.high)} " + (f"({own} log{'s' if own > 1 else ''})" if own else "(every card)")


def lookup_gpu(text: str) -> Gpu:
    """A card of the table by name or alias, case and spacing ignored (``h100``,
    ``A100-80GB``, ``"RTX 4090"``). ``A100`` alone is ambiguous (40 or 80 GB), as is
    ``V100`` (16 or 32 GB).

    Raises:
        KvgateError: unknown or ambiguous name (the hint lists the table).
    """
    k = _key(text)
    for name, (aliases, _, _) in GPU_TABLE.items():
        if k == _key(name) or k in aliases:
            return _from_table(name)
    if k in ("v100", "tesla-v100"):
        raise KvgateError("GPU 'V100' is ambiguous: 16 GB or 32 GB", hint="--gpu V100-16GB or --gpu V100-32GB")
    if k in ("a100",):
        raise KvgateError("GPU 'A100' is ambiguous: 40 GB or 80 GB", hint="--gpu A100-40GB or --gpu A100-80GB")
    if k in ("rtx-4060-ti", "4060-ti", "4060ti"):
        raise KvgateError("GPU 'RTX 4060 Ti' is ambiguous: 8 GB or 16 GB",
                          hint="--gpu RTX-4060-Ti-16GB or --gpu RTX-4060-Ti-8GB")
    count = re.match(r"^\s*(\d+)\s*[x×*]\s*(.+)$", text, re.I)
    if count:  # "2xH100": one card's name; the count is the engine's tensor parallel size
        card = lookup_gpu(count.group(2))
        raise KvgateError(f"--gpu names one card, not {text!r}",
                          hint=f"--gpu {card.name!r} with the engine's tensor parallel size for the "
                               f"{count.group(1)} cards (vLLM -tp {count.group(1)}, SGLang --tp-size {count.group(1)})")
    import difflib  # noqa: PLC0415

    keys = {_key(n): n for n in GPU_TABLE} | {a: n for n, (al, _, _) in GPU_TABLE.items() for a in al}
    close = list(dict.fromkeys(keys[m] for m in difflib.get_close_matches(k, list(keys), n=3, cutoff=0.7)))
    mean = f" (did you mean {' or '.join(close)}?)" if close else ""
    raise KvgateError(f"unknown GPU {text!r}{mean}",
                      hint=f"kvgate fit --gpu list shows the {len(GPU_TABLE)} cards with their sources; or --total BYTES")


def gpu_from_total(total_bytes: int) -> Gpu:
    """A GPU known only by its NVML total (``--total``): the CUDA total is that minus the
    reserved band (module docstring)."""
    reserve = reserve_band(None)
    if total_bytes - reserve[0].high <= 1 * 2**30:  # as --cuda-total: at least 1 GiB left to CUDA
        raise KvgateError(f"--total {total_bytes:,} B is too small for a GPU: less than 1 GiB is left after the "
                          f"driver's reserve (up to {fmt_mib(reserve[0].high, 1)})",
                          hint="give the card's memory as nvidia-smi prints it, e.g. 81559MiB")
    return Gpu("given total", total_bytes, Interval(total_bytes - reserve[0].high, total_bytes - reserve[0].low),
               "--total (NVML total); CUDA total = total − driver reserve band", reserve)


def gpu_from_cuda_total(text: str) -> Gpu:
    """A GPU known by the CUDA total the engine printed (``--cuda-total``): vLLM's
    ``total_gpu_memory (79.19GiB)`` (V0 0.6.5 … 0.10, ``vllm/worker/worker.py``) or ``Free memory
    on device (x/79.19 GiB)`` (V1 ``gpu_worker.py`` ``init_device``, ``round(b / GiB_bytes, 2)``);
    that is ``torch.cuda.mem_get_info()[1]``, the driver reserve already taken off, so nothing
    is subtracted again. A figure with decimals in GiB/GB/MiB stands for the interval its
    printing allows (79.19 GiB = 79.185 … 79.195 GiB); plain bytes are exact.

    Raises:
        KvgateError: not a byte quantity, or too small for a GPU.
    """
    try:
        cuda = printed_interval(text)
    except KvgateError as e:
        raise KvgateError(f"--cuda-total: {e}", hint="give the total the engine printed, with its unit, e.g. "
                                                     "79.19GiB") from e
    if cuda.low <= 1 * 2**30:
        bare = re.fullmatch(r"\s*[\d.]+\s*", str(text)) is not None
        raise KvgateError(f"--cuda-total {text!r} is too small for a GPU"
                          + (" (a number without a unit is bytes)" if bare else ""),
                          hint=f"give the total the engine printed, with its unit, e.g. {str(text).strip()}GiB"
                          if bare else "give the total the engine printed, e.g. 79.19GiB")
    return Gpu("given CUDA total", cuda.high, cuda,
               "--cuda-total: the CUDA total as the engine printed it (driver reserve already off)")


def wsl_gpu(gpu: Gpu) -> Gpu:
    """``gpu`` under WSL 2: CUDA there reports the whole card as its total (no driver reserve
    subtracted). A public WSL 2 vLLM start on an RTX 5090 (32,607 MiB) printed "Free memory on
    device cuda:0 (30.12/31.84 GiB)": 31.84 GiB is 32,607 MiB to the printing
    (github Alex8791-cyber/cognithor PR #318). What WSL keeps for Windows shows as less free
    memory, not a smaller total."""
    return Gpu(gpu.name + " (WSL)", gpu.nvml_total_bytes, Interval.point(gpu.nvml_total_bytes),
               gpu.source + "; under WSL 2 the CUDA total is the whole card (no driver reserve)")


def local_gpu(index: int = 0) -> Gpu:
    """GPU ``index`` of this machine through NVML: the CUDA total is NVML v2
    ``total − reserved`` (exact, as measured on an H200), or the band when only v1 answers.

    Raises:
        NvmlError (a KvgateError): no NVML, no such GPU.
    """
    from kvgate.measure.nvml import session  # noqa: PLC0415

    nv = session()
    info = nv.device_info(index)
    total = info.total_bytes
    if info.reserved_bytes is not None:
        cuda = Interval.point(total - info.reserved_bytes)
        src = "this machine's GPU through NVML (v2 total − reserved = the CUDA total)"
        return Gpu(info.name or f"GPU {index}", total, cuda, src)
    reserve = reserve_band(None)
    cuda = Interval(total - reserve[0].high, total - reserve[0].low)
    src = "this machine's GPU through NVML v1 (CUDA total = total − reserve band)"
    return Gpu(info.name or f"GPU {index}", total, cuda, src, reserve)
