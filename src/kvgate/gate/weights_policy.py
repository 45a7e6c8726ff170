"""Resident-weight policies: how much of the measured peak is weights, as card memory changes.

The write-up's engine sizes its device weight cache ("wcache") in ``vcuda_dev_create()``
(``src/npu/cuda/vllm_cuda_kernels.cu``) as::

    if (s->budget == 0) {
        size_t freeb = 0, totb = 0;
        if (cudaMemGetInfo(&freeb, &totb) != cudaSuccess) freeb = prop.totalGlobalMem / 2;
        s->budget = freeb / 2;                      /* half of free */
        const size_t cap = (size_t)24 << 30;        /* capped at 24 GiB */
        if (s->budget > cap) s->budget = cap;
        if (s->budget < (size_t)256 << 20) s->budget = (size_t)256 << 20;  /* floor 256 MiB */
    }

and ``src/npu/cuda/vllm_cuda.c`` lets ``VLLM_CUDA_WCACHE_MB`` override a config value
when ``atol`` parses it to a positive integer. A non-zero MB budget skips the default
rule. The snippet does not show the MB-to-bytes conversion; kvgate takes MB as MiB
(``<< 20``), like every other size in that code.

Two policies for the gate's card-memory boundary:

- ``fixed`` (default): resident weights do not move with card memory.
- ``half-free``: resident weights = the wcache budget at the new card's free memory
  (free = T − U0 at engine start), so that part of the peak moves with T.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from kvgate.errors import KvgateError

WCACHE_CAP_BYTES = 24 << 30
WCACHE_FLOOR_BYTES = 256 << 20
ENV_OVERRIDE = "VLLM_CUDA_WCACHE_MB"


def c_atol(text: str | None) -> int:
    """C's ``atol``: skip leading whitespace, optional sign, then digits; 0 if none.

    >>> c_atol("512"), c_atol("  64MB"), c_atol("-3"), c_atol("x"), c_atol("")
    (512, 64, -3, 0, 0)
    """
    if not text:
        return 0
    m = re.match(r"[ \t\n\v\f\r]*([+-]?)([0-9]+)", text)
    if not m:
        return 0
    value = int(m.group(2))
    return -value if m.group(1) == "-" else value


def wcache_override_mb(env_value: str | None, config_mb: int = 0) -> int:
    """The MB budget after the env override: ``env`` wins when ``atol`` gives > 0.

    >>> wcache_override_mb("1024"), wcache_override_mb("0", 512), wcache_override_mb(None, 0)
    (1024, 512, 0)
    """
    budget_mb = config_mb if config_mb and config_mb > 0 else 0
    if env_value:
        v = c_atol(env_value)
        if v > 0:
            budget_mb = v
    return budget_mb


def wcache_budget_bytes(
    free_bytes: int | None,
    total_bytes: int,
    *,
    config_mb: int = 0,
    env_value: str | None = None,
) -> int:
    """The engine's device weight-cache budget in bytes (rule above).

    Args:
        free_bytes: ``cudaMemGetInfo`` free at engine start; ``None`` when the call
            failed (then free is taken as ``total / 2``, and the budget is half of that).
        total_bytes: ``prop.totalGlobalMem``.
        config_mb: the engine config's ``wcache_mb`` (0 = unset).
        env_value: the value of ``VLLM_CUDA_WCACHE_MB`` (``None`` = unset).

    >>> wcache_budget_bytes(32 * GiB, 32 * GiB) == 16 * GiB
    True
    >>> wcache_budget_bytes(80 * GiB, 80 * GiB) == 24 * GiB      # cap
    True
    >>> wcache_budget_bytes(100 * MiB, 32 * GiB) == 256 * MiB    # floor
    True
    >>> wcache_budget_bytes(None, 32 * GiB) == 8 * GiB           # cudaMemGetInfo failed
    True
    >>> wcache_budget_bytes(32 * GiB, 32 * GiB, env_value="2048") == 2 * GiB
    True
    """
    mb = wcache_override_mb(env_value, config_mb)
    if mb > 0:
        return mb << 20
    freeb = total_bytes // 2 if free_bytes is None else free_bytes
    budget = freeb // 2
    if budget > WCACHE_CAP_BYTES:
        budget = WCACHE_CAP_BYTES
    if budget < WCACHE_FLOOR_BYTES:
        budget = WCACHE_FLOOR_BYTES
    return budget


@dataclass(frozen=True)
class WeightsPolicy:
    """How resident weights respond to a different card size.

    Attributes:
        name: ``fixed`` or ``half-free``.
        idle_bytes: U0, used memory when the engine starts (free = T − U0).
        env_value: ``VLLM_CUDA_WCACHE_MB`` as the engine would see it (``half-free``).
        config_mb: the engine config's ``wcache_mb`` (``half-free``).
        max_resident_bytes: weights that can be resident at most (the model's weight
            bytes); ``None`` when the budget is always filled.
    """

    name: str = "fixed"
    idle_bytes: int = 0
    env_value: str | None = None
    config_mb: int = 0
    max_resident_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.name not in POLICIES:
            raise KvgateError(f"unknown weights policy {self.name!r}", hint=f"one of: {', '.join(POLICIES)}")

    def resident_bytes(self, total_bytes: int) -> int:
        """Resident weight bytes on a card of ``total_bytes`` (0 for ``fixed``: only
        differences matter, see :meth:`delta_bytes`)."""
        if self.name == "fixed":
            return 0
        free = max(0, total_bytes - self.idle_bytes)
        budget = wcache_budget_bytes(free, total_bytes, config_mb=self.config_mb, env_value=self.env_value)
        if self.max_resident_bytes is not None:
            budget = min(budget, self.max_resident_bytes)
        return budget

    def delta_bytes(self, total_new: int, total_measured: int) -> int:
        """Change in the peak's resident weights when the card goes from
        ``total_measured`` to ``total_new`` (0 under ``fixed``)."""
        return self.resident_bytes(total_new) - self.resident_bytes(total_measured)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "idle_bytes": self.idle_bytes,
            "env_value": self.env_value,
            "config_mb": self.config_mb,
            "max_resident_bytes": self.max_resident_bytes,
        }


POLICIES = ("fixed", "half-free")


def policy_from_env(name: str, idle_bytes: int, max_resident_bytes: int | None = None) -> WeightsPolicy:
    """A policy reading ``VLLM_CUDA_WCACHE_MB`` from this process's environment."""
    return WeightsPolicy(name, idle_bytes=idle_bytes, env_value=os.environ.get(ENV_OVERRIDE),
                         max_resident_bytes=max_resident_bytes)
