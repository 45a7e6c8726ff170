"""From inputs and a measurement to a decision record (schema ``kvgate.decision/2``).

:class:`DecisionInputs` holds everything needed to recompute a decision without the
original machine: the model's layer list, the geometry options, the scenario, the
candidates, the weights policy and any concurrency fit. :func:`decide` evaluates it and
returns the record as a plain dict, validated by
:class:`kvgate.gate.schema.DecisionRecord` and carrying its inputs' digest (ints of
bytes; every ratio as ``{"exact": "num/den", "float": ...}``).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from typing import Any

from kvgate import __version__
from kvgate.errors import KvgateError
from kvgate.gate.engine_words import engine_of_layout, table_quantity
from kvgate.gate.fit import check_overhead, conservative_fit, least_squares, project_sweep
from kvgate.gate.schema import DECISION_SCHEMA, DecisionInputsModel, DecisionRecord, exact, ratio, validate
from kvgate.gate.verdict import (
    CANDIDATES,
    DEFAULT_SENSITIVITY,
    Gate,
    Scenario,
    kv_quant_candidate,
    paging_candidate,
    tiering_candidate,
)
from kvgate.gate.weights_policy import WeightsPolicy, wcache_override_mb
from kvgate.geometry import KVGeometry, get_layout
from kvgate.measure.measurement import Measurement
from kvgate.model import LayerSpec, ModelSpec


@dataclass
class DecisionInputs:
    """Serializable inputs of one decision.

    Attributes:
        model: the model (only its layer list is needed to recompute).
        kv_format, kv_format_v, tp, layout, state_format: geometry options.
        scenario: T, P, U0, n, N, L0, L, ΔW, m.
        candidates: names from ``CANDIDATES``.
        quant_to: target format of the ``kv-quant`` candidate.
        measured_reclaim_bytes: paging reclaim measured from a trace (else the bound).
        policy: resident-weights policy.
        fit_points: ``[(sequences, peak_bytes)]`` from a concurrency sweep, or ``None``.
        sensitivity_threshold: N·S / H above which a verdict is flagged (10%).
    """

    model: ModelSpec
    scenario: Scenario
    kv_format: str = "bf16"
    kv_format_v: str | None = None
    tp: int = 1
    layout: dict[str, Any] = field(default_factory=lambda: {"name": "contiguous"})
    state_format: str = "fp32"
    candidates: list[str] = field(default_factory=lambda: ["paging", "tiering"])
    quant_to: str = "fp8"
    measured_reclaim_bytes: int | None = None
    measured_reclaim_source: dict[str, Any] | None = None
    policy: WeightsPolicy = field(default_factory=WeightsPolicy)
    fit_points: list[tuple[int, int]] | None = None
    sensitivity_threshold: Fraction = DEFAULT_SENSITIVITY

    def geometry(self, kv_format: str | None = None) -> KVGeometry:
        opts = {k: v for k, v in self.layout.items() if k != "name"}
        return KVGeometry(
            self.model,
            kv_format or self.kv_format,
            kv_format_v=None if kv_format else self.kv_format_v,
            tp=self.tp,
            layout=get_layout(self.layout.get("name", "contiguous"), **opts),
            state_format=self.state_format,
        )

    def build_gate(self, *, check_peak: bool = True) -> tuple[Gate, KVGeometry]:
        """The :class:`Gate` and geometry for these inputs.

        With ``check_peak`` (a measurement that completed), the KV of the measured slots
        must fit in the measured peak, and a concurrency fit must give each sequence at
        least its KV (:func:`kvgate.gate.fit.check_overhead`).

        Raises:
            KvgateError: unknown candidates or formats, a bad TP split, or measured slots
                that the measured peak cannot have held.
            NegativeOverheadError: a fit below the KV slot bytes S(L0).
        """
        if not self.candidates:
            raise KvgateError("no candidates to judge", hint=f"--candidates takes a comma list of {', '.join(CANDIDATES)}")
        unknown = [c for c in self.candidates if c not in CANDIDATES]
        if unknown:
            raise KvgateError(f"unknown candidate(s): {', '.join(unknown)}", hint=f"one of: {', '.join(CANDIDATES)}")
        geo = self.geometry()
        slot_fn = _cached(geo.slot_bytes)
        sc = self.scenario
        measured_kv = sc.slots_measured * slot_fn(sc.max_seq_measured)
        # The slots claimed at the peak were allocated by the workload: they must fit in
        # what it added, P − U0 (P alone when U0 is not available, or under a concurrency
        # sweep, whose fit checks the growth per sequence against S itself).
        added = sc.peak_bytes - (sc.idle_bytes if sc.idle_bytes is not None and not self.fit_points else 0)
        if check_peak and measured_kv > added:
            what = (f"the memory the workload added (P − U0 = {added:,} B)" if added != sc.peak_bytes
                    else f"the measured peak {sc.peak_bytes:,} B")
            raise KvgateError(
                f"{sc.slots_measured} slot(s) of {slot_fn(sc.max_seq_measured):,} B at max_seq "
                f"{sc.max_seq_measured:,} = {measured_kv:,} B are more than {what}: the peak cannot have "
                "held them, so no verdict can be trusted from this measurement",
                hint="check --slots-measured, --max-seq-measured, --kv-format, --idle/--peak (or the GPU measured)",
            )
        cands = []
        for name in self.candidates:
            if name == "paging":
                cands.append(paging_candidate(slot_fn, self.measured_reclaim_bytes))
            elif name == "tiering":
                cands.append(tiering_candidate(slot_fn))
            else:
                new = self.geometry(self.quant_to)
                cands.append(kv_quant_candidate(slot_fn, _cached(new.slot_bytes), self.quant_to))
        # three or more levels: decide on the conservative end of the interval
        fit = conservative_fit(self.fit_points) if self.fit_points else None
        if check_peak and self.fit_points:
            check_overhead(least_squares(self.fit_points)[0], slot_fn(sc.max_seq_measured),
                           where=f" (levels {', '.join(str(k) for k, _ in self.fit_points)})")
        return Gate(slot_fn, cands, self.policy, fit, self.sensitivity_threshold), geo

    def to_dict(self) -> dict[str, Any]:
        sc = asdict(self.scenario)
        sc["margin"] = ratio(self.scenario.margin)
        return {
            "model": {
                "name": self.model.name,
                "source": self.model.source,
                "summary": self.model.summary(),
                "model_type": self.model.model_type,
                "dtype": self.model.dtype,
                "max_position_embeddings": self.model.max_position_embeddings,
                "layers": [asdict(layer) for layer in self.model.layers],
                "notes": list(self.model.notes),
            },
            "kv_format": self.kv_format,
            "kv_format_v": self.kv_format_v,
            "tp": self.tp,
            "layout": dict(self.layout),
            "state_format": self.state_format,
            "scenario": sc,
            "candidates": list(self.candidates),
            "quant_to": self.quant_to,
            "measured_reclaim_bytes": self.measured_reclaim_bytes,
            "measured_reclaim_source": self.measured_reclaim_source,
            "policy": self.policy.to_dict(),
            "fit_points": [list(p) for p in self.fit_points] if self.fit_points else None,
            "sensitivity_threshold": ratio(self.sensitivity_threshold),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DecisionInputs:
        """Rebuild inputs from a record's ``inputs`` section.

        Raises:
            RecordError: a missing, unknown or malformed field (named), from
                :class:`kvgate.gate.schema.DecisionInputsModel`.
        """
        d = validate(DecisionInputsModel, d, "record inputs").model_dump(mode="json")
        try:
            m = d["model"]
            model = ModelSpec(
                name=m["name"],
                source=m["source"],
                layers=[LayerSpec(**layer) for layer in m["layers"]],
                max_position_embeddings=m.get("max_position_embeddings"),
                dtype=m.get("dtype"),
                model_type=m.get("model_type"),
                notes=list(m.get("notes") or []),
            )
            sc = dict(d["scenario"])
            sc["margin"] = exact(sc["margin"])
            scenario = Scenario(**sc)
            return cls(
                model=model,
                scenario=scenario,
                kv_format=d["kv_format"],
                kv_format_v=d.get("kv_format_v"),
                tp=d.get("tp", 1),
                layout=d.get("layout") or {"name": "contiguous"},
                state_format=d.get("state_format", "fp32"),
                candidates=list(d.get("candidates") or ["paging", "tiering"]),
                quant_to=d.get("quant_to", "fp8"),
                measured_reclaim_bytes=d.get("measured_reclaim_bytes"),
                measured_reclaim_source=d.get("measured_reclaim_source"),
                policy=WeightsPolicy(**(d.get("policy") or {})),
                fit_points=[tuple(p) for p in d["fit_points"]] if d.get("fit_points") else None,
                sensitivity_threshold=exact(d["sensitivity_threshold"]),
            )
        except KeyError as exc:
            raise KvgateError(f"record inputs are missing field {exc.args[0]!r}") from exc
        except TypeError as exc:
            raise KvgateError(f"record inputs are malformed: {exc}") from exc


def _cached(fn: Callable[[int], int]) -> Callable[[int], int]:
    cache: dict[int, int] = {}

    def wrapped(x: int) -> int:
        if x not in cache:
            cache[x] = fn(x)
        return cache[x]

    return wrapped


def _share(part: int | Fraction, total: int) -> dict[str, Any]:
    return ratio(Fraction(part) / total)


def decide(
    inputs: DecisionInputs,
    measurement: Measurement | None = None,
    *,
    notes: list[str] | None = None,
    measurement_doc: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Evaluate the gate and return the decision record (a JSON-ready dict).

    A measurement whose status is not ``ok`` (failed or interrupted workload) yields
    verdict ``no-verdict`` for every candidate, with the exit code, and no boundaries:
    never a verdict from partial data. With a concurrency fit the notes carry the sweep's
    fit, residuals, interval and advice (:class:`kvgate.gate.fit.SweepProjection`).

    Raises:
        KvgateError: inputs the gate refuses (see :meth:`DecisionInputs.build_gate`);
            RecordError if the assembled record does not validate (a kvgate bug).
    """
    sc = inputs.scenario
    status = "ok" if measurement is None or measurement.status == "ok" else "no-verdict"
    gate, geo = inputs.build_gate(check_peak=status == "ok")
    s_l = geo.slot_bytes(sc.max_seq)
    s_l0 = geo.slot_bytes(sc.max_seq_measured)
    given_notes, policy_notes = list(inputs.model.notes) + list(notes or []), _policy_notes(inputs)
    record: dict[str, Any] = {
        "schema": DECISION_SCHEMA,
        "kvgate_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "status": status,
        "inputs": inputs.to_dict(),
        "measurement": _measurement_section(measurement, measurement_doc),
        "geometry": {
            **geo.describe(),
            "bytes_per_token": geo.bytes_per_token(),
            "state_bytes": geo.state_bytes(),
            "slot_bytes": s_l,
            "slot_bytes_measured": s_l0,
            "slots_bytes": sc.slots_target * s_l,
        },
        "notes": given_notes + policy_notes,
    }
    if status != "ok" and measurement is not None:
        record["verdicts"] = {c.name: "no-verdict" for c in gate.candidates}
        record["no_verdict_reason"] = (
            f"workload {measurement.status} (exit code {measurement.basis.exit_code}); "
            "no verdict from partial data"
        )
        return finalize(record)

    kv_only = gate.kv_only_target(sc)
    if inputs.fit_points:
        record["notes"] = given_notes + _sweep_lines(inputs, gate, kv_only) + policy_notes
    fit_t = gate.fit_target(sc)
    used = gate.target(sc)
    h = sc.total_bytes - sc.peak_bytes
    sens = gate.sensitivity(sc)
    record["projection"] = {
        "kv_only_bytes": kv_only,
        "fit_bytes": fit_t,
        "used_bytes": used,
        "used": "fit" if fit_t is not None and fit_t > kv_only else "kv-only",
        "limit_bytes": sc.limit,
        "fit": None
        if gate.fit is None
        else {
            "points": [list(p) for p in gate.fit.points],
            "slope_bytes_per_seq": ratio(gate.fit.slope),
            "intercept_bytes": ratio(gate.fit.intercept),
            "overhead_per_seq_bytes": ratio(gate.fit.slope - s_l0),
        },
    }
    cands = []
    need = gate.required_reclaim(sc)
    for c in gate.candidates:
        r = c.reclaim_fn(sc)
        cands.append(
            {
                "name": c.name,
                "verdict": gate.verdict(sc, c),
                "reclaim_bytes": r,
                "reclaim_share": _share(r, sc.total_bytes),
                "reclaim_per_slot_bytes": r // sc.slots_target if sc.slots_target else 0,
                "bound": c.bound_text,
                "measured": c.measured,
                "bound_only": c.bound_only and not c.measured,
                # What the candidate must free for the target to fit, and its share of R:
                # "pays only if paging frees ≥ 71% of the mirror".
                "required_reclaim_bytes": need,
                "required_share_of_reclaim": _share(need, r) if r > 0 else None,
                "boundaries_insufficient": gate.candidate_boundaries(sc, c),
            }
        )
    record["candidates"] = cands
    record["verdicts"] = {c["name"]: c["verdict"] for c in cands}
    record["table"] = [
        {"key": "slot", "quantity": f"one slot S({sc.max_seq})", "bytes": s_l, "share": _share(s_l, sc.total_bytes)},
        {"key": "all_slots", "quantity": f"all {sc.slots_target} slots N·S", "bytes": sc.slots_target * s_l,
         "share": _share(sc.slots_target * s_l, sc.total_bytes)},
        {"key": "headroom", "quantity": "peak headroom H = T − P", "bytes": h, "share": _share(h, sc.total_bytes)},
        {"key": "peak", "quantity": f"peak used P ({sc.slots_measured} slot{'s' if sc.slots_measured != 1 else ''})",
         "bytes": sc.peak_bytes,
         "share": _share(sc.peak_bytes, sc.total_bytes)},
        {"key": "target", "quantity": f"projected peak at {sc.slots_target} slots", "bytes": used,
         "share": _share(used, sc.total_bytes)},
    ]
    engine = engine_of_layout(measurement.basis.sampler if measurement is not None else None,
                              record["geometry"].get("layout", {}).get("name"))
    if engine is not None:  # an engine-log record: sequences and the KV cache pool, in the JSON too
        for row in record["table"]:
            row["quantity"] = table_quantity(row["key"], engine, sequences=sc.slots_target, length=sc.max_seq)
    record["sensitivity"] = {
        "value": ratio(sens) if sens is not None else None,
        "threshold": ratio(gate.sensitivity_threshold),
        "flagged": sens is None or sens > gate.sensitivity_threshold,
    }
    bounds = gate.boundaries(sc)
    record["boundaries"] = bounds
    return finalize(record)


def finalize(record: dict[str, Any]) -> dict[str, Any]:
    """Validate a record against :class:`DecisionRecord`, normalize it (the JSON the
    schema describes) and set its ``digest`` over the normalized inputs and measurement.

    Raises:
        RecordError: the record does not validate (names the field).
    """
    from kvgate.gate.digest import inputs_digest

    rec = validate(DecisionRecord, record, "decision record").model_dump(mode="json", by_alias=True)
    rec["digest"] = inputs_digest(rec)
    return rec


def _sweep_lines(inputs: DecisionInputs, gate: Gate, kv_only: int) -> list[str]:
    """The concurrency sweep's fit, residuals, interval and advice, projected from the
    gated run as :meth:`kvgate.gate.verdict.Gate.fit_target` projects (the weights terms
    W = P_kv-only − P − N·S(L) + n·S(L0), and N·(S(L) − S(L0)) when max_seq changes)."""
    sc = inputs.scenario
    s_l, s_l0 = gate.slot_fn(sc.max_seq), gate.slot_fn(sc.max_seq_measured)
    weights = kv_only - sc.peak_bytes - sc.slots_target * s_l + sc.slots_measured * s_l0
    proj = project_sweep(inputs.fit_points or [], from_level=sc.slots_measured, from_peak=sc.peak_bytes,
                         target=sc.slots_target, total_bytes=sc.total_bytes, limit_bytes=sc.limit,
                         kv_only_bytes=kv_only, fit_offset_bytes=weights + sc.slots_target * (s_l - s_l0))
    lines = proj.lines()
    if proj.has_interval and proj.conservative_bytes > sc.limit >= gate.target(sc):
        lines.append("WARNING: the fit fits under the limit but the interval's conservative end does not: "
                     "treat this verdict as not-a-bottleneck only if the workload's growth really flattens; "
                     "measure the target to be sure")
    return lines


def _policy_notes(inputs: DecisionInputs) -> list[str]:
    """Say how resident weights move with the card under the ``half-free`` policy."""
    pol, sc = inputs.policy, inputs.scenario
    if pol.name != "half-free":
        return []
    from kvgate.units import fmt_mib

    how = (f"VLLM_CUDA_WCACHE_MB={pol.env_value!r} overrides it" if pol.env_value is not None
           and wcache_override_mb(pol.env_value, pol.config_mb) > 0 else "half of free, capped at 24 GiB, floored at 256 MiB")
    return [f"weights policy half-free: resident weights = the engine's wcache budget ({how}); "
            f"{fmt_mib(pol.resident_bytes(sc.total_bytes))} on this card (free = T − U0 = "
            f"{fmt_mib(sc.total_bytes - pol.idle_bytes)}), so the card-memory boundary moves them too"]


def _measurement_section(m: Measurement | None, doc: dict[str, Any] | None) -> dict[str, Any] | None:
    if m is None:
        return None
    d = m.to_dict()
    if d.get("timeline") and len(d["timeline"].get("t_s", [])) > 2000:
        # Keep records small: the full timeline stays in the measurement file.
        d["timeline"] = None
        d["extra"] = {**d.get("extra", {}), "timeline": "omitted (see the measurement file)"}
    return d


def with_overrides(inputs: DecisionInputs, **changes: Any) -> DecisionInputs:
    """A copy of ``inputs`` with scenario fields (``total_bytes``, ``max_seq``,
    ``slots_target``, ``weights_delta_bytes``, ``peak_bytes``, ...) replaced."""
    sc_fields = {k: v for k, v in changes.items() if v is not None}
    return replace(inputs, scenario=replace(inputs.scenario, **sc_fields))
