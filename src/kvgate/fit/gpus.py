"""GPU memory: a small table of common cards, the local GPU through NVML, or a given total.

Two totals matter, and they differ by the driver's reserved memory:

- **NVML total** (``nvidia-smi --query-gpu=memory.total``; NVML ``nvmlDeviceGetMemoryInfo``
  v1/v2 ``total``): what the table holds, exact where ``nvidia-smi`` prints it in MiB.
- **CUDA total** (``cudaMemGetInfo`` / ``torch.cuda.mem_get_info()[1]``): what vLLM multiplies
  by ``--gpu-memory-utilization`` and SGLang by ``--mem-fraction-static``. On an H200
  (driver 580.159.04) measured here: NVML total 150,754,820,096 B (143,771 MiB), CUDA total
  150,109,880,320 B, and the difference 644,939,776 B (615.06 MiB) is exactly NVML v2
  ``reserved``.

When only the NVML total is known, the reserved part is an interval,
:data:`RESERVED_LOW` … :data:`RESERVED_HIGH`, from every pair of (NVML total, CUDA total
printed by vLLM as ``total_gpu_memory``/``Free memory on device (x/Y GiB)``) we have: H100
80GB 437.7 and 468.4 MiB (``vllm_0.6.5-dev_llama-3-8b_h100_1.log``: 79.22 GiB;
``vllm_0.8-v0_qwen3-0.6b_h100_1.log``: 79.19 GiB), RTX 3090 430.1 MiB (23.58 GiB), L40S
581.9 and 602.4 MiB (44.42 / 44.4 GiB), H200 615.06 MiB (measured). vLLM prints two
decimals of GiB, so each log value is ±5.12 MiB: the band is [min − 5.12, max + 5.12].
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvgate.errors import KvgateError
from kvgate.fit.interval import Interval
from kvgate.units import MiB

RESERVED_LOW = 424 * MiB   # 430.1 − 5.12 MiB, rounded down
RESERVED_HIGH = 621 * MiB  # 615.06 MiB (H200, measured to the byte) + rounding slack

_SMI = "nvidia-smi memory.total as printed on this card in public nvidia-smi output"


@dataclass(frozen=True)
class Gpu:
    """One GPU's memory.

    Attributes:
        name: the card's name.
        nvml_total_bytes: NVML / ``nvidia-smi`` total, bytes.
        cuda_total: ``cudaMemGetInfo`` total as an interval (a point when measured).
        source: where the numbers come from.
    """

    name: str
    nvml_total_bytes: int
    cuda_total: Interval
    source: str

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "nvml_total_bytes": self.nvml_total_bytes,
                "cuda_total_bytes": self.cuda_total.to_dict(), "source": self.source}


# name -> (aliases, NVML total MiB, source)
GPU_TABLE: dict[str, tuple[tuple[str, ...], int, str]] = {
    "H100 80GB": (("h100", "h100-80gb", "h100-80gb-hbm3", "h100-sxm", "h100-pcie", "h800"), 81_559, _SMI + " (H100 80GB HBM3, H800)"),
    "H100 NVL 94GB": (("h100-nvl", "h100-94gb", "h100nvl"), 95_830, _SMI + " (H100 NVL)"),
    "H200": (("h200", "h200-141gb"), 143_771, "nvidia-smi memory.total on an H200, driver 580.159.04, measured"),
    "B200": (("b200",), 183_359, _SMI + " (B200, driver 570)"),
    "A100 80GB": (("a100-80gb", "a100-80g", "a100-sxm4-80gb", "a100-pcie-80gb", "a100-80gb-pcie"), 81_920, _SMI),
    "A100 40GB": (("a100-40gb", "a100-40g", "a100-sxm4-40gb", "a100-pcie-40gb"), 40_960, _SMI),
    "L40S": (("l40s",), 46_068, _SMI),
    "L4": (("l4",), 23_034, _SMI),
    "A10": (("a10", "a10g"), 23_028, _SMI + " (A10 and A10G)"),
    "RTX A6000": (("a6000", "rtx-a6000"), 49_140, _SMI),
    "RTX 3090": (("3090", "rtx-3090", "rtx3090"), 24_576, _SMI),
    "RTX 4090": (("4090", "rtx-4090", "rtx4090"), 24_564, _SMI),
    "V100 16GB": (("v100-16gb", "v100-pcie-16gb", "v100-sxm2-16gb", "tesla-v100-pcie-16gb", "tesla-v100-sxm2-16gb"),
                  16_384, _SMI + " (Tesla V100-PCIE-16GB '0MiB / 16384MiB' in public nvidia-smi tables, recent "
                  "drivers; older drivers print 16160MiB; the llama.cpp V100 logs of "
                  "tests/data/fit_logs run on a V100-PCIE-16GB)"),
    "V100 32GB": (("v100-32gb", "v100-pcie-32gb", "v100-sxm2-32gb", "v100s", "v100s-pcie-32gb",
                   "tesla-v100-pcie-32gb", "tesla-v100-sxm2-32gb"), 32_768,
                  _SMI + " (Tesla V100-SXM2-32GB and V100-PCIE-32GB '/32768 MiB' in public nvidia-smi output)"),
    "T4": (("t4", "tesla-t4"), 15_360, _SMI + " (Tesla T4 '15360MiB'; 15109MiB with ECC on; tests/data/fit_logs/vllm_0.4-dev_deepseek-coder-6.7b_t4_tp2_1.log)"),
    "RTX 3060 12GB": (("3060", "rtx-3060", "rtx3060", "rtx-3060-12gb", "3060-12gb"), 12_288, _SMI + " (RTX 3060 12GB)"),
    "RTX 4060": (("4060", "rtx-4060", "rtx4060", "rtx-4060-8gb"), 8_188,
                 _SMI + " (RTX 4060 8GB; tests/data/fit_logs/vllm_0.7.3-dev_qwen2.5-7b-bnb4_rtx4060_1.log)"),
    "RTX 5090": (("5090", "rtx-5090", "rtx5090", "rtx-5090-d"), 32_607,
                 "nvidia-smi line in tests/data/fit_logs/vllm_0.15.2rc1_qwen3-coder-30b-a3b-fp8_rtx5070ti+rtx5090d_1.log"),
    "RTX 5070 Ti": (("5070ti", "rtx-5070-ti", "5070-ti"), 16_303,
                    "nvidia-smi line in tests/data/fit_logs/vllm_0.15.2rc1_qwen3-coder-30b-a3b-fp8_rtx5070ti+rtx5090d_1.log"),
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
}

# measured CUDA totals (bytes), where we have them to the byte
_CUDA_MEASURED = {"H200": 150_109_880_320}


def _key(text: str) -> str:
    return re.sub(r"[\s_]+", "-", text.strip().lower()).replace("nvidia-", "").replace("geforce-", "")


def _from_table(name: str) -> Gpu:
    aliases, mib, source = GPU_TABLE[name]
    total = mib * MiB
    if name in _CUDA_MEASURED:
        cuda = Interval.point(_CUDA_MEASURED[name])
    else:
        cuda = Interval(total - RESERVED_HIGH, total - RESERVED_LOW)
    return Gpu(name, total, cuda, source)


def gpu_names() -> list[str]:
    """The table's card names."""
    return list(GPU_TABLE)


def gpu_table_text() -> str:
    """``--gpu list``: every card of the table with its total and where the total comes from."""
    from kvgate.output import table  # noqa: PLC0415

    rows = [[name, f"{mib:,} MiB", src if len(src) <= 60 else src[:59] + "…"]
            for name, (_, mib, src) in GPU_TABLE.items()]
    return (f"{len(rows)} cards (--gpu NAME or an alias; totals as nvidia-smi / rocm-smi print them)\n"
            "(--json: aliases and whole sources)\n" + table(rows, header=["card", "total", "source"], align="lrl"))


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
    raise KvgateError(f"unknown GPU {text!r}", hint=f"one of: {', '.join(GPU_TABLE)}; or --total BYTES")


def gpu_from_total(total_bytes: int) -> Gpu:
    """A GPU known only by its NVML total (``--total``): the CUDA total is that minus the
    reserved band (module docstring)."""
    if total_bytes <= RESERVED_HIGH:
        raise KvgateError(f"--total {total_bytes:,} B is too small for a GPU", hint="give the card's memory, e.g. 80GiB")
    return Gpu("given total", total_bytes, Interval(total_bytes - RESERVED_HIGH, total_bytes - RESERVED_LOW),
               "--total (NVML total); CUDA total = total − driver reserve band")


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
    else:
        cuda = Interval(total - RESERVED_HIGH, total - RESERVED_LOW)
        src = "this machine's GPU through NVML v1 (CUDA total = total − reserve band)"
    return Gpu(info.name or f"GPU {index}", total, cuda, src)
