"""A fake ``pynvml`` module fed with recorded values, for NVML logic tests on CPU.

Values are what an H200 with driver 580 reports (DESIGN.md §5): total 143,771 MiB; idle,
NVML v2 "used" 0 MiB and "reserved" 616 MiB, so free = total − reserved.
"""

from __future__ import annotations

import types
from collections.abc import Callable

MiB = 2**20
H200_TOTAL = 143_771 * MiB
H200_RESERVED = 616 * MiB

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return f"NVML error {self.value}"


def make(*, gpus: int = 1, used_fn: Callable[[int], int] | None = None, v2: bool = True,
         init_error: int | None = None, procs: list | int | None = None, mem_error: Callable[[], int | None] | None = None,
         cuda: int = 13000) -> types.ModuleType:
    """A module with the pynvml names kvgate uses.

    Args:
        used_fn: index → "used" bytes in the v1 sense (total − free); default: reserved only.
        v2: whether ``nvmlDeviceGetMemoryInfo_v2`` exists (else FUNCTION_NOT_FOUND).
        init_error: an NVML error code for ``nvmlInit`` to raise.
        procs: list of (pid, used) for compute processes, a callable returning one, or an
            error code.
        mem_error: called on every memory query; a returned code is raised.
    """
    m = types.ModuleType("pynvml")
    for k, v in globals().items():
        if k.startswith("NVML_"):
            setattr(m, k, v)
    m.NVMLError = NVMLError
    m.nvmlMemory_v2 = 0x02000028
    m.calls = []
    m.shutdowns = 0
    used_fn = used_fn or (lambda i: H200_RESERVED)

    def nvmlInit():
        m.calls.append("init")
        if init_error is not None:
            raise NVMLError(init_error)

    def nvmlShutdown():
        m.shutdowns += 1

    def nvmlDeviceGetCount():
        return gpus

    def nvmlDeviceGetHandleByIndex(i):
        if not 0 <= i < gpus:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return ("handle", i)

    def nvmlDeviceGetMemoryInfo(handle, version=None):
        if mem_error is not None:
            code = mem_error()
            if code is not None:
                raise NVMLError(code)
        i = handle[1]
        used = used_fn(i)
        free = H200_TOTAL - used
        if version:
            if not v2:
                raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
            return types.SimpleNamespace(version=version, total=H200_TOTAL, reserved=H200_RESERVED, free=free,
                                         used=used - H200_RESERVED)
        return types.SimpleNamespace(total=H200_TOTAL, free=free, used=used)

    def nvmlDeviceGetName(handle):
        return b"NVIDIA H200"

    def nvmlDeviceGetUUID(handle):
        return f"GPU-00000000-0000-0000-0000-00000000000{handle[1]}"

    def nvmlSystemGetDriverVersion():
        return "580.95.05"

    def nvmlSystemGetNVMLVersion():
        return "13.580.95.05"

    def nvmlSystemGetCudaDriverVersion():
        return cuda

    def nvmlDeviceGetComputeRunningProcesses(handle):
        if isinstance(procs, int):
            raise NVMLError(procs)
        lst = procs() if callable(procs) else (procs or [])
        return [types.SimpleNamespace(pid=p, usedGpuMemory=u) for p, u in lst]

    for fn in (nvmlInit, nvmlShutdown, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex, nvmlDeviceGetMemoryInfo,
               nvmlDeviceGetName, nvmlDeviceGetUUID, nvmlSystemGetDriverVersion, nvmlSystemGetNVMLVersion,
               nvmlSystemGetCudaDriverVersion, nvmlDeviceGetComputeRunningProcesses):
        setattr(m, fn.__name__, fn)
    return m
