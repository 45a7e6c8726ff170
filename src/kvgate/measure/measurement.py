"""A measurement of one memory domain while a workload ran, and its basis.

Terms (DESIGN.md §2, §5), all ``int`` bytes:

- ``total_bytes``  T: what the domain holds (``nvidia-smi --query-gpu=memory.total``;
  host: MemTotal or the cgroup limit when lower).
- ``idle_used_bytes``  U0: used before the workload started (``None``: not available).
- ``peak_used_bytes``  P: the largest "used" sampled while it ran. On a GPU "used" is
  ``total - free`` from NVML, what counts for an out-of-memory error.
- headroom H = T − P.

The **basis** says where and how the numbers were taken; a decision made on one basis is
never silently applied on another (:func:`basis_differences`). Unknown values are
``None`` and print as "not available", never 0.

File format (``kvgate.measurement/1``)::

    {"schema": "kvgate.measurement/1",
     "status": "ok" | "failed" | "interrupted",
     "command": [...] | null, "exit_code": int | null,
     "domains": [ <Measurement.to_dict()>, ... ]}
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from kvgate.errors import KvgateError
from kvgate.units import NA

SCHEMA = "kvgate.measurement/1"

STATUSES = ("ok", "failed", "interrupted")


class MeasurementError(KvgateError):
    """A measurement is inconsistent (peak above total, negative bytes, ...) or malformed."""


@dataclass
class Basis:
    """Where and how a figure was measured (DESIGN.md §5). ``None`` = not available.

    Comparing two bases (:func:`basis_differences`) uses ``BASIS_KEYS``: the device,
    its total memory, driver/CUDA versions and CPU architecture. The sampler, interval,
    command and dates are kept for the record but do not make a basis "different".
    """

    domain: str = "gpu:0"
    device_name: str | None = None
    device_uuid: str | None = None
    total_bytes: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    nvml_version: str | None = None
    cpu_arch: str | None = None
    sampler: str | None = None  # "nvml", "nvidia-smi", "psutil", "manual"
    interval_s: float | None = None
    command: list[str] | None = None
    exit_code: int | None = None
    start_time: str | None = None
    end_time: str | None = None
    source: str | None = None  # free text: "write-up", a log file name, ...
    sampler_loop: str | None = None  # the loop that sampled: "python thread, ctypes nvmlDeviceGetMemoryInfo_v2"

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict; a field of :data:`LATE_BASIS_FIELDS` only when known, so a
        measurement written before that field existed keeps its record digest."""
        d = asdict(self)
        for name in LATE_BASIS_FIELDS:
            if d[name] is None:
                del d[name]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Basis:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise MeasurementError(f"unknown basis field(s): {', '.join(unknown)}")
        return cls(**d)


#: Basis fields added after records were first written: left out of a written basis while
#: not available (``None``), so the digest of a record written before them still matches.
LATE_BASIS_FIELDS = ("sampler_loop",)

BASIS_KEYS = ("domain", "device_name", "total_bytes", "driver_version", "cuda_version", "cpu_arch")


def basis_differences(a: Basis, b: Basis) -> list[tuple[str, Any, Any]]:
    """Fields of ``BASIS_KEYS`` on which two bases differ: ``[(field, a_value, b_value)]``.

    A field unknown (``None``) on either side counts as a difference only for
    ``device_name`` and ``total_bytes`` (without them nothing can be matched).
    """
    out = []
    for key in BASIS_KEYS:
        va, vb = getattr(a, key), getattr(b, key)
        if va == vb:
            continue
        if (va is None or vb is None) and key not in ("device_name", "total_bytes"):
            continue
        out.append((key, va, vb))
    return out


def local_cpu_arch() -> str:
    """``platform.machine()`` of this machine, e.g. ``x86_64``."""
    return platform.machine() or NA


@dataclass
class Measurement:
    """Total T, idle U0 and peak P of one memory domain, with its basis.

    Raises (from :meth:`validate`):
        MeasurementError: negative or non-int bytes, total ≤ 0, idle or peak above total.
    """

    total_bytes: int
    peak_used_bytes: int
    idle_used_bytes: int | None = None
    basis: Basis = field(default_factory=Basis)
    peak_time_s: float | None = None
    reserved_bytes: int | None = None  # NVML v2 driver-reserved memory
    max_gap_s: float | None = None  # largest interval between consecutive samples
    samples: int | None = None
    status: str = "ok"
    timeline: dict[str, list] | None = None  # {"t_s": [...], "used_bytes": [...]}
    processes: list[dict[str, Any]] | None = None  # per-process bytes, None = not available
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    @property
    def domain(self) -> str:
        return self.basis.domain

    @property
    def headroom_bytes(self) -> int:
        """H = T − P."""
        return self.total_bytes - self.peak_used_bytes

    def validate(self) -> None:
        for name in ("total_bytes", "peak_used_bytes", "idle_used_bytes", "reserved_bytes"):
            v = getattr(self, name)
            if v is None and name in ("idle_used_bytes", "reserved_bytes"):
                continue
            if not isinstance(v, int) or isinstance(v, bool):
                raise MeasurementError(f"{name} must be an integer number of bytes, got {v!r}")
            if v < 0:
                raise MeasurementError(f"{name} must not be negative, got {v:,}")
        if self.total_bytes <= 0:
            raise MeasurementError(f"total_bytes must be positive, got {self.total_bytes:,}")
        if self.peak_used_bytes > self.total_bytes:
            raise MeasurementError(
                f"peak used ({self.peak_used_bytes:,} B) is above total ({self.total_bytes:,} B)",
                hint="check the units of --peak and --total",
            )
        if self.idle_used_bytes is not None and self.idle_used_bytes > self.total_bytes:
            raise MeasurementError(f"idle used ({self.idle_used_bytes:,} B) is above total ({self.total_bytes:,} B)")
        if self.status not in STATUSES:
            raise MeasurementError(f"unknown measurement status {self.status!r} (one of {', '.join(STATUSES)})")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["basis"] = self.basis.to_dict()
        d["headroom_bytes"] = self.headroom_bytes
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        """Inverse of :meth:`to_dict`. Unknown keys are an error naming them."""
        d = dict(d)
        d.pop("headroom_bytes", None)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise MeasurementError(f"unknown measurement field(s): {', '.join(unknown)}")
        for req in ("total_bytes", "peak_used_bytes"):
            if req not in d:
                raise MeasurementError(f"measurement is missing required field {req!r}")
        d["basis"] = Basis.from_dict(d.get("basis") or {})
        return cls(**d)


def measurement_file(domains: list[Measurement], *, status: str = "ok", command: list[str] | None = None,
                     exit_code: int | None = None) -> dict[str, Any]:
    """The ``kvgate.measurement/1`` document for one run over one or more domains."""
    return {
        "schema": SCHEMA,
        "status": status,
        "command": command,
        "exit_code": exit_code,
        "domains": [m.to_dict() for m in domains],
    }
