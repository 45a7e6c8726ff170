"""The one doorway to NVML: every NVML call in kvgate goes through :class:`Nvml`.

Modelled on nvitop's ``api/libnvml.py``: the library is imported and initialised lazily
on first use, shut down at interpreter exit, NVML errors become typed
:class:`~kvgate.errors.KvgateError` subclasses with a hint, a newer call is tried before
the older one (``nvmlDeviceGetMemoryInfo_v2`` → v1), and a value NVML cannot give is
``None`` ("not available"), never 0.

Memory (all ``int`` bytes):

- ``used = total − free``: what counts for an out-of-memory error. NVML v1 "used" is
  ``total − free``; v2 "used" leaves out the driver-reserved memory, which v2 reports
  separately as ``reserved`` (``total = used_v2 + reserved + free``). kvgate records
  ``total − free`` as used, and v2 ``reserved`` on its own. Seen on an H200 (driver 580):
  idle v2 used 0 MiB, reserved 616 MiB (DESIGN.md §5).
- ``nvidia-smi --query-gpu=memory.total,memory.free,memory.used,memory.reserved`` shows
  the same quantities (``memory.used`` there is the v2 value).

Tests inject a fake module (``Nvml(module=fake)``) fed with recorded values.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvgate.errors import KvgateError


class NvmlError(KvgateError):
    """NVML failed (base class). ``code`` is the NVML error code, or ``None``."""

    def __init__(self, message: str, *, hint: str | None = None, code: int | None = None) -> None:
        super().__init__(message, hint=hint)
        self.code = code


class NvmlUnavailableError(NvmlError):
    """nvidia-ml-py is not installed, libnvidia-ml.so.1 is missing, or no driver is loaded."""


class NvmlDeviceError(NvmlError):
    """A GPU index that does not exist, or a GPU selection that does not parse."""


class NvmlPermissionError(NvmlError):
    """NVML refused the query (NVML_ERROR_NO_PERMISSION)."""


class NvmlGpuLostError(NvmlError):
    """The GPU fell off the bus or needs a reset (NVML_ERROR_GPU_IS_LOST / RESET_REQUIRED)."""


_HINT_NO_GPU = "on a machine without an NVIDIA GPU, measure host memory with --domain host"

# NVML error-code names (pynvml constants) -> (error class, hint). Codes are looked up on
# the module in use so a fake module in tests can define them.
_ERROR_MAP: dict[str, tuple[type[NvmlError], str]] = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": (
        NvmlUnavailableError,
        "libnvidia-ml.so.1 was not found: install the NVIDIA driver; " + _HINT_NO_GPU,
    ),
    "NVML_ERROR_DRIVER_NOT_LOADED": (
        NvmlUnavailableError,
        "the NVIDIA kernel driver is not loaded (does `nvidia-smi` work?); " + _HINT_NO_GPU,
    ),
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": (
        NvmlUnavailableError,
        "the NVML library and the kernel driver differ in version: reboot or reload the driver",
    ),
    "NVML_ERROR_NO_PERMISSION": (NvmlPermissionError, "run with permission to query the GPU (see `nvidia-smi -q`)"),
    "NVML_ERROR_GPU_IS_LOST": (NvmlGpuLostError, "the GPU is lost: check `nvidia-smi` and the kernel log"),
    "NVML_ERROR_RESET_REQUIRED": (NvmlGpuLostError, "the GPU needs a reset before it can be measured"),
    "NVML_ERROR_INVALID_ARGUMENT": (NvmlDeviceError, "check the --gpu index against `nvidia-smi -L`"),
}

# Codes that mean "this query is not available here": the value becomes None.
_NOT_AVAILABLE = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_NOT_FOUND")


@dataclass(frozen=True)
class MemoryInfo:
    """One NVML memory reading, in bytes.

    ``used_bytes`` = ``total_bytes − free_bytes`` (NVML v1 "used";
    ``nvidia-smi --query-gpu=memory.total`` minus ``memory.free``). ``reserved_bytes`` is
    NVML v2 driver-reserved memory, ``None`` when only v1 answered.
    """

    total_bytes: int
    free_bytes: int
    reserved_bytes: int | None

    @property
    def used_bytes(self) -> int:
        return self.total_bytes - self.free_bytes


@dataclass(frozen=True)
class DeviceInfo:
    """What the basis needs about one GPU; ``None`` = not available."""

    index: int
    name: str | None
    uuid: str | None
    total_bytes: int
    reserved_bytes: int | None


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def cuda_version_text(v: int) -> str:
    """NVML's CUDA driver version integer as text: ``12080`` → ``"12.8"``.

    Rule from ``nvmlSystemGetCudaDriverVersion``: major = v // 1000, minor = (v % 1000) // 10.

    >>> cuda_version_text(12080)
    '12.8'
    >>> cuda_version_text(13000)
    '13.0'
    """
    return f"{v // 1000}.{(v % 1000) // 10}"


class Nvml:
    """A lazily initialised NVML session. Thread-safe init; queries are plain calls.

    Args:
        module: the ``pynvml`` module to use (tests pass a fake). ``None`` imports
            ``pynvml`` from nvidia-ml-py on first use.
    """

    def __init__(self, module: Any | None = None) -> None:
        self._mod = module
        self._initialised = False
        self._lock = threading.Lock()
        self._v2: bool | None = None  # whether nvmlDeviceGetMemoryInfo_v2 works here

    # -- the doorway ------------------------------------------------------------------
    def _module(self) -> Any:
        if self._mod is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError as exc:
                raise NvmlUnavailableError(
                    "the Python NVML bindings (pynvml) are not installed",
                    hint="pip install nvidia-ml-py; " + _HINT_NO_GPU,
                ) from exc
            self._mod = pynvml
        return self._mod

    def _init(self) -> Any:
        mod = self._module()
        if self._initialised:
            return mod
        with self._lock:
            if not self._initialised:
                self._translate(mod.nvmlInit, "nvmlInit")
                self._initialised = True
                atexit.register(self.shutdown)
        return mod

    def _translate(self, fn: Callable[..., Any], name: str, *args: Any) -> Any:
        """Call ``fn(*args)``, turning ``NVMLError`` into a typed :class:`NvmlError`."""
        mod = self._module()
        try:
            return fn(*args)
        except mod.NVMLError as exc:
            code = getattr(exc, "value", None)
            for const, (cls, hint) in _ERROR_MAP.items():
                if code is not None and code == getattr(mod, const, object()):
                    raise cls(f"NVML {name} failed: {exc}", hint=hint, code=code) from exc
            raise NvmlError(f"NVML {name} failed: {exc}", hint="check `nvidia-smi`", code=code) from exc

    def call(self, name: str, *args: Any) -> Any:
        """Call ``pynvml.<name>(*args)`` after lazy init; errors become :class:`NvmlError`."""
        mod = self._init()
        return self._translate(getattr(mod, name), name, *args)

    def try_call(self, name: str, *args: Any) -> Any:
        """Like :meth:`call`, but ``None`` when NVML says not supported / not found."""
        mod = self._init()
        if not hasattr(mod, name):
            return None
        try:
            return self.call(name, *args)
        except NvmlError as exc:
            if exc.code is not None and any(exc.code == getattr(mod, c, object()) for c in _NOT_AVAILABLE):
                return None
            raise

    def shutdown(self) -> None:
        """``nvmlShutdown`` if initialised (registered with ``atexit``). Never raises."""
        with self._lock:
            if self._initialised and self._mod is not None:
                self._initialised = False
                try:
                    self._mod.nvmlShutdown()
                except Exception:  # noqa: BLE001 - at exit nothing useful can be done
                    pass

    # -- queries ------------------------------------------------------------------------
    def device_count(self) -> int:
        """``nvmlDeviceGetCount`` (``nvidia-smi -L | wc -l``)."""
        return int(self.call("nvmlDeviceGetCount"))

    def handle(self, index: int) -> Any:
        """Device handle for GPU ``index`` (``nvidia-smi -i INDEX``).

        Raises:
            NvmlDeviceError: no such GPU.
        """
        n = self.device_count()
        if not 0 <= index < n:
            have = ", ".join(map(str, range(n))) or "none"
            raise NvmlDeviceError(f"GPU {index} does not exist (this machine has {n}: {have})",
                                  hint="pick one of `nvidia-smi -L`")
        return self.call("nvmlDeviceGetHandleByIndex", index)

    def memory(self, handle: Any) -> MemoryInfo:
        """One memory reading: v2 (with ``reserved``) when the driver has it, else v1.

        Whether v2 works is decided on the first call and remembered, so the fast loop
        makes exactly one NVML call per reading.
        """
        mod = self._init()
        if self._v2 is None:
            self._v2 = False
            if hasattr(mod, "nvmlMemory_v2"):
                try:
                    m = mod.nvmlDeviceGetMemoryInfo(handle, version=mod.nvmlMemory_v2)
                    self._v2 = True
                    return MemoryInfo(int(m.total), int(m.free), int(m.reserved))
                except (mod.NVMLError, TypeError):  # no v2 in this driver / an old pynvml
                    pass
        if self._v2:
            m = self._translate(mod.nvmlDeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo_v2", handle, mod.nvmlMemory_v2)
            return MemoryInfo(int(m.total), int(m.free), int(m.reserved))
        m = self.call("nvmlDeviceGetMemoryInfo", handle)
        return MemoryInfo(int(m.total), int(m.free), None)

    def used_reader(self, handles: list[Any]) -> Callable[[], list[int]]:
        """A cheap callable returning ``[total − free]`` bytes for each handle, in order.

        This is the sampler's hot path: one NVML memory query per GPU per call and nothing
        else. With the real pynvml it calls ``nvmlDeviceGetMemoryInfo_v2`` (or v1) through
        ctypes directly, on one preallocated struct, skipping pynvml's per-call function
        lookup (a lock), struct allocation and return-code wrapper; errors are typed as in
        :meth:`call` (the failing query is repeated through pynvml to raise them). The
        callable's ``query`` attribute names the call it makes (for the measurement's basis).
        """
        for h in handles:
            self.memory(h)  # decides v1/v2 and fails early
        mod = self._init()
        fast = self._ctypes_reader(mod, handles)
        if fast is not None:
            return fast
        query = mod.nvmlDeviceGetMemoryInfo
        args = (mod.nvmlMemory_v2,) if self._v2 else ()
        err = mod.NVMLError

        def read() -> list[int]:
            try:
                out = []
                for h in handles:
                    m = query(h, *args)
                    out.append(m.total - m.free)
                return out
            except err:
                return [self.memory(h).used_bytes for h in handles]  # re-raises it, typed

        read.query = ("pynvml nvmlDeviceGetMemoryInfo_v2" if self._v2  # type: ignore[attr-defined]
                      else "pynvml nvmlDeviceGetMemoryInfo")
        return read

    def _ctypes_reader(self, mod: Any, handles: list[Any]) -> Callable[[], list[int]] | None:
        """The direct ctypes reader (see :meth:`used_reader`), ``None`` when ``mod`` is not
        the real pynvml (a fake in tests) or lacks what it needs."""
        import ctypes

        getfn = getattr(mod, "_nvmlGetFunctionPointer", None)
        struct = getattr(mod, "c_nvmlMemory_v2_t" if self._v2 else "c_nvmlMemory_t", None)
        if getfn is None or struct is None or not all(isinstance(h, ctypes._Pointer) for h in handles):
            return None
        name = "nvmlDeviceGetMemoryInfo_v2" if self._v2 else "nvmlDeviceGetMemoryInfo"
        try:
            fn = getfn(name)
        except mod.NVMLError:
            return None
        mem = struct()
        version = int(mod.nvmlMemory_v2) if self._v2 else 0
        if self._v2:
            mem.version = version
        ref = ctypes.byref(mem)
        hs = list(handles)
        if len(hs) == 1:  # the common case, one GPU: no loop in the sampler's hot path
            h0 = hs[0]

            def read_one() -> list[int]:
                if fn(h0, ref):
                    return [self.memory(h0).used_bytes]  # raises the typed error
                return [mem.total - mem.free]

            read_one.query = f"ctypes {name}"  # type: ignore[attr-defined]
            return read_one

        def read() -> list[int]:
            out = []
            for h in hs:
                if fn(h, ref):
                    return [self.memory(x).used_bytes for x in hs]  # raises the typed error
                out.append(mem.total - mem.free)
            return out

        read.query = f"ctypes {name}"  # type: ignore[attr-defined]
        return read

    def device_info(self, index: int) -> DeviceInfo:
        """Name, UUID and memory of GPU ``index`` (``nvidia-smi --query-gpu=name,uuid,memory.total``)."""
        h = self.handle(index)
        mem = self.memory(h)
        name = self.try_call("nvmlDeviceGetName", h)
        uuid = self.try_call("nvmlDeviceGetUUID", h)
        return DeviceInfo(index, _text(name) if name is not None else None,
                          _text(uuid) if uuid is not None else None, mem.total_bytes, mem.reserved_bytes)

    def versions(self) -> dict[str, str | None]:
        """``driver_version`` (``nvidia-smi --query-gpu=driver_version``), ``nvml_version``
        and ``cuda_version`` (the driver's CUDA version, as in ``nvidia-smi``'s header)."""
        drv = self.try_call("nvmlSystemGetDriverVersion")
        nv = self.try_call("nvmlSystemGetNVMLVersion")
        cuda = self.try_call("nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = self.try_call("nvmlSystemGetCudaDriverVersion")
        return {
            "driver_version": _text(drv) if drv is not None else None,
            "nvml_version": _text(nv) if nv is not None else None,
            "cuda_version": cuda_version_text(int(cuda)) if cuda is not None else None,
        }

    def processes(self, handle: Any) -> dict[int, int | None] | None:
        """``{pid: used bytes or None}`` of compute processes on the GPU, or ``None`` when
        NVML cannot list them (``nvidia-smi --query-compute-apps=pid,used_memory``).

        PIDs are as NVML sees them: inside a container with its own PID namespace they
        are host PIDs and will not match the container's.
        """
        procs = self.try_call("nvmlDeviceGetComputeRunningProcesses", handle)
        if procs is None:
            return None
        out: dict[int, int | None] = {}
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out[int(p.pid)] = int(used) if used is not None else None
        return out


_DEFAULT: Nvml | None = None


def session() -> Nvml:
    """The process-wide NVML session (created on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Nvml()
    return _DEFAULT


def parse_gpu_selection(text: str, count: int) -> list[int]:
    """``"0"``, ``"0,1"`` or ``"all"`` → sorted GPU indices, checked against ``count``.

    >>> parse_gpu_selection("1,0", 2)
    [0, 1]
    >>> parse_gpu_selection("all", 3)
    [0, 1, 2]

    Raises:
        NvmlDeviceError: an index that does not parse or does not exist, or no GPU.
    """
    if count <= 0:
        raise NvmlDeviceError("NVML reports no GPU on this machine", hint=_HINT_NO_GPU)
    if text.strip().lower() == "all":
        return list(range(count))
    out = set()
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise NvmlDeviceError(f"cannot parse GPU index {part!r} in --gpu {text!r}",
                                  hint="use an index (0), a list (0,1) or all")
        i = int(part)
        if i >= count:
            raise NvmlDeviceError(f"GPU {i} does not exist (this machine has {count})",
                                  hint="pick one of `nvidia-smi -L`")
        out.add(i)
    return sorted(out)
