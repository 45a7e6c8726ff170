"""Which domain of a multi-domain measurement gates: the one with the least headroom.

``nvidia-smi --query-gpu=...`` logs every GPU by default and ``kvgate measure --gpu all``
samples every GPU, so a measurement often holds several domains (``gpu:0`` … ``gpu:7``).
The GPU that runs out first decides whether a target fits, so by default the domain with
the least headroom H = T − P gates (ties: the first in file order), among the GPUs the
workload used (:func:`workload_gpus`): those where NVML's per-process listing (``kvgate
measure``) saw the command, or, without that listing (an nvidia-smi log), those where
the workload added memory (P − U0 > 0). Another user's job, or an idle card flat the whole
time, on a GPU the command never touched does not gate it. Every domain's figures are
kept for display (:meth:`Selection.notes`), so the choice is never silent.

Under tensor parallelism (``--tp N``) every rank holds its share of the KV: all ranks are
shown and the worst one (least headroom) gates; a measurement with fewer GPU domains than
ranks is noted (the unmeasured ranks are not checked).

All figures are ``int`` bytes (:class:`~kvgate.measure.measurement.Measurement`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvgate.measure.measurement import SCHEMA, Measurement, MeasurementError
from kvgate.units import fmt_mib, fmt_pct


@dataclass
class Selection:
    """The gating domain of a measurement and why.

    Attributes:
        measurement: the chosen domain (it gates).
        measurements: every domain, in file order.
        rule: ``"only domain"``, ``"--domain"`` or ``"least headroom"`` (among the GPUs
            the command used, when that is known).
        tp: the tensor-parallel size the choice was made for (``None``: not given).
        warnings: e.g. fewer GPU domains than ``--tp`` ranks.
    """

    measurement: Measurement
    measurements: list[Measurement]
    rule: str
    tp: int | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def domain(self) -> str:
        return self.measurement.domain

    def domain_lines(self) -> list[str]:
        """One line per domain: ``gpu:1 NVIDIA H200: T …, U0 …, P …, H … (x% of T)``,
        the gating one marked ``← gates``."""
        out = []
        for m in self.measurements:
            idle = "not available" if m.idle_used_bytes is None else fmt_mib(m.idle_used_bytes)
            mark = "  ← gates" if m is self.measurement else ""
            name = f" {m.basis.device_name}" if m.basis.device_name else ""
            out.append(f"{m.domain}{name}: T {fmt_mib(m.total_bytes)}, U0 {idle}, P {fmt_mib(m.peak_used_bytes)}, "
                       f"H {fmt_mib(m.headroom_bytes)} ({fmt_pct(m.headroom_bytes, m.total_bytes)} of T){mark}")
        return out

    def notes(self, *, measurement_warnings: bool = True) -> list[str]:
        """Lines for a record's notes / a command's output: which domain gates and why,
        every domain's figures when there are several, and the warnings — with
        ``measurement_warnings`` also those the gating measurement carries in
        ``extra["warnings"]`` (an nvidia-smi log's skipped lines, unsorted samples)."""
        own = [f"measurement: {w}" for w in (self.measurement.extra.get("warnings") or [])
               ] if measurement_warnings else []
        if len(self.measurements) == 1:
            return list(self.warnings) + own
        why = {"--domain": "chosen with --domain",
               "least headroom": "the domain with the least headroom (it runs out first)"}.get(self.rule, self.rule)
        tp = f" of the {len(self.measurements)} measured; --tp {self.tp}: the worst rank gates" if self.tp and self.tp > 1 else ""
        head = f"gated on {self.domain}, {why}{tp}"
        return [head] + [f"  {line}" for line in self.domain_lines()] + list(self.warnings) + own


def select_domain(measurements: Sequence[Measurement], *, domain: str | None = None,
                  tp: int | None = None) -> Selection:
    """Choose the gating domain (see the module docstring).

    Args:
        measurements: every domain of one measurement, in file order (at least one).
        domain: ``"gpu:1"`` to choose one explicitly; ``None``: the least headroom.
        tp: tensor-parallel size (``--tp``), for the ranks check.

    Raises:
        MeasurementError: no domains, or ``domain`` not among them (naming those there are).
    """
    ms = list(measurements)
    if not ms:
        raise MeasurementError("measurement has no domains")
    warnings: list[str] = []
    gpus = [m for m in ms if m.domain.startswith("gpu")]
    if tp and tp > 1 and gpus and len(gpus) < tp:
        warnings.append(f"--tp {tp} but the measurement has {len(gpus)} GPU domain(s) "
                        f"({', '.join(m.domain for m in gpus)}): the other ranks are not measured and not checked")
    if domain is not None:
        for m in ms:
            if m.domain == domain:
                worst = min(ms, key=lambda x: x.headroom_bytes)
                if worst.headroom_bytes < m.headroom_bytes:
                    warnings.append(f"{worst.domain} has less headroom ({fmt_mib(worst.headroom_bytes)}) than the "
                                    f"chosen {domain} ({fmt_mib(m.headroom_bytes)})")
                return Selection(m, ms, "--domain", tp, warnings)
        raise MeasurementError(f"domain {domain!r} not in measurement (has: {', '.join(m.domain for m in ms)})",
                               hint="leave --domain out to gate on the domain with the least headroom")
    if len(ms) == 1:
        return Selection(ms[0], ms, "only domain", tp, warnings)
    pool = [m for m in ms if m not in gpus or m in workload_gpus(gpus, warnings)]
    chosen = min(pool, key=lambda x: x.headroom_bytes)  # min keeps the first of equals
    return Selection(chosen, ms, "least headroom", tp, warnings)


def added_bytes(m: Measurement) -> int | None:
    """P − U0: the memory the workload added on this domain (``None``: U0 not available)."""
    return None if m.idle_used_bytes is None else m.peak_used_bytes - m.idle_used_bytes


def workload_gpus(gpus: list[Measurement], warnings: list[str]) -> list[Measurement]:
    """The GPU domains the workload used; only these may gate.

    1. Where NVML's per-process listing is available (``kvgate measure``: ``processes``
       is a list), a GPU was used when a process of the command held memory on it.
    2. Otherwise (an nvidia-smi log, a file without per-process data) a GPU was used when
       the workload added memory there: P − U0 > 0. An idle card, flat the whole time,
       did not run the workload and says nothing about it.

    When no GPU can be shown to be used every GPU stays in (the verdict's own checks then
    refuse slots the peak cannot have held). The GPUs left out are named in ``warnings``.
    """
    if len(gpus) < 2:
        return gpus
    listed = [m for m in gpus if m.processes is not None]
    if listed and len(listed) == len(gpus):
        used = [m for m in gpus if m.processes]
        rule = "no process of the command seen there (NVML per-process listing)"
    elif any(m.processes for m in gpus):  # partly listed: the listing where it exists
        used = [m for m in gpus if m.processes or (m.processes is None and (added_bytes(m) or 0) > 0)]
        rule = "no process of the command seen there (NVML per-process listing), or no memory added (P − U0 = 0)"
    else:
        used = [m for m in gpus if (added_bytes(m) or 0) > 0 or added_bytes(m) is None]
        rule = "the workload added no memory there (P − U0 = 0: flat the whole time)"
    if not used:
        warnings.append("no GPU shows the workload (no process listed, no memory added on any): every GPU kept")
        return gpus
    worst_all = min(gpus, key=lambda x: x.headroom_bytes)
    # said whenever NVML's listing left a GPU out (as before), and for the P − U0 rule
    # when it changed the choice (an unused GPU with the least headroom)
    if len(used) < len(gpus) and (listed or worst_all not in used):
        idle = [m.domain for m in gpus if m not in used]
        warnings.append(f"{', '.join(idle)}: {rule}; shown, not gating")
    return used


def select_measurement(doc: dict[str, Any], *, domain: str | None = None, tp: int | None = None) -> Selection:
    """:func:`select_domain` over a ``kvgate.measurement/1`` document (from a file,
    ``kvgate measure``, or :func:`kvgate.measure.smi_csv.load_smi_csv`).

    This is what ``gate --measurement/--smi``, ``replay --measurement`` and ``recheck``
    should call: ``sel = select_measurement(doc, domain=args.domain, tp=args.tp)``, then
    gate on ``sel.measurement`` and show ``sel.notes()``.

    Raises:
        MeasurementError: wrong schema, no domains, a malformed domain, ``domain`` absent.
    """
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise MeasurementError(f"not a kvgate measurement (schema {got!r}, expected {SCHEMA!r})")
    domains = doc.get("domains") or []
    if not isinstance(domains, list) or not domains:
        raise MeasurementError("measurement file has no domains")
    for d in domains:
        if not isinstance(d, dict):
            raise MeasurementError(f"a measurement domain must be an object, got {type(d).__name__}")
    ms = [Measurement.from_dict(d) for d in domains]
    notes = honour_run_status(doc, ms)
    sel = select_domain(ms, domain=domain, tp=tp)
    sel.warnings[:0] = notes
    return sel


def honour_run_status(doc: dict[str, Any], measurements: list[Measurement]) -> list[str]:
    """Apply the run's own outcome to its domains, in place, and say so.

    A ``kvgate.measurement/1`` file records the run's ``status`` and ``exit_code`` at the
    top level and again in each domain (``status``, ``basis.exit_code``). A domain marked
    ``ok`` while the run says ``failed`` / ``interrupted``, or while either exit code is
    non-zero, is not an ok measurement (a hand-edited or mixed file): the worse outcome
    wins (a non-zero exit code alone means ``failed``), so no verdict is drawn from it
    (``gate`` then exits :data:`~kvgate.errors.EXIT_NO_VERDICT`). A domain without an exit
    code takes the run's.

    Returns:
        one line per domain whose status was changed (empty when all agree).

    Raises:
        MeasurementError: a top-level ``status`` that is not one of ``ok``, ``failed``,
            ``interrupted``, or an ``exit_code`` that is not an integer.
    """
    from kvgate.measure.measurement import STATUSES  # noqa: PLC0415

    status = doc.get("status", "ok")
    if status not in STATUSES:
        raise MeasurementError(f"measurement status {status!r} is not one of {', '.join(STATUSES)}")
    code = doc.get("exit_code")
    if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
        raise MeasurementError(f"measurement exit_code must be an integer or null, got {code!r}")
    notes = []
    for m in measurements:
        own = m.basis.exit_code
        if own is not None and (not isinstance(own, int) or isinstance(own, bool)):
            raise MeasurementError(f"{m.domain}: basis.exit_code must be an integer or null, got {own!r}")
        if own is None and code is not None:
            m.basis.exit_code = own = code
        worst = m.status
        if worst == "ok" and status != "ok":
            worst = status
        if worst == "ok" and any(c not in (None, 0) for c in (code, own)):
            worst = "failed"
        if worst != m.status:
            why = f"the run's status is {status}" if status != "ok" else \
                f"exit code {own if own not in (None, 0) else code}"
            if m.basis.exit_code in (None, 0) and code not in (None, 0):
                m.basis.exit_code = code
            notes.append(f"{m.domain} is marked {m.status} but {why}: treated as {worst} (no verdict from it)")
            m.status = worst
    return notes
