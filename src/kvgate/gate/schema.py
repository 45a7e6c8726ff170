"""Typed, versioned documents: the decision record (``kvgate.decision/2``) and the
measurement document (``kvgate.measurement/1``), as pydantic v2 models.

The models are the one definition of both formats: :func:`load_record` and
:func:`load_measurement` validate through them, every field is typed (byte counts are
strict ints in ``[0, 2**64 − 1]``, counts strict ints), and an unknown field is refused
with its name (``extra="forbid"``). The published JSON Schema under ``docs/schema/`` is
generated from them (``python -m kvgate.gate.schema --write docs/schema``), and a test
checks that the committed files equal the generated ones.

Every ratio is written twice: exact, as ``"num/den"``, and as a float for tools that
want one: ``{"exact": "396/143771", "float": 0.0027543...}`` (:class:`Ratio`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import typing
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, create_model, model_validator

from kvgate.errors import KvgateError
from kvgate.units import MAX_BYTES

DECISION_SCHEMA = "kvgate.decision/2"
MEASUREMENT_SCHEMA = "kvgate.measurement/1"

MAX_COUNT = 2**31 - 1  # slots, positions, heads, layers: far above any real value

Bytes = Annotated[int, Strict(), Field(ge=0, le=MAX_BYTES)]
SignedBytes = Annotated[int, Strict(), Field(ge=-MAX_BYTES, le=MAX_BYTES)]
Count = Annotated[int, Strict(), Field(ge=0, le=MAX_COUNT)]
PosCount = Annotated[int, Strict(), Field(ge=1, le=MAX_COUNT)]
AnyInt = Annotated[int, Strict()]
Str = Annotated[str, Strict()]
Flt = Annotated[float, Field(allow_inf_nan=False)]
_FRAC = re.compile(r"^-?[0-9]{1,200}(/[0-9]{1,200})?$")


class RecordError(KvgateError):
    """Not a decision record, or one that does not validate or cannot be recomputed."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class Ratio(_Strict):
    """An exact ratio (or exact fractional bytes) and its float.

    Attributes:
        exact: ``"num/den"`` or ``"num"`` (the value used to recompute).
        float: the same value as a float (display and plotting only).
    """

    exact: Annotated[str, Field(pattern=_FRAC.pattern)]
    float: Flt

    @model_validator(mode="after")
    def _den(self) -> Ratio:
        if "/" in self.exact and int(self.exact.split("/")[1]) == 0:
            raise ValueError(f"ratio {self.exact!r} has denominator 0")
        return self


def ratio(x: Fraction | int | str) -> dict[str, Any]:
    """The JSON form of a ratio: ``{"exact": "n/d", "float": n/d}``.

    >>> ratio(Fraction(396, 143771))
    {'exact': '396/143771', 'float': 0.0027543802018487728}
    """
    f = Fraction(x)
    return {"exact": str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}",
            "float": float(f) if abs(f) < 2**1000 else float("inf") if f > 0 else float("-inf")}


def exact(x: Any) -> Fraction:
    """The exact value of a ratio in any of its stored forms: ``{"exact": ...}``,
    ``"n/d"``, an int. Raises :class:`RecordError` otherwise."""
    v = x.get("exact") if isinstance(x, dict) else x
    if isinstance(v, bool) or not isinstance(v, (int, str)) or (isinstance(v, str) and not _FRAC.match(v)):
        raise RecordError(f"not an exact ratio: {x!r:.80}")
    try:
        return Fraction(v)
    except (ValueError, ZeroDivisionError) as exc:
        raise RecordError(f"not an exact ratio: {x!r:.80}") from exc


# --------------------------------------------------------------------------- inputs

_BYTES_FIELD = re.compile(r"(^|_)bytes$")


def _model_from_dataclass(cls: type, name: str, *, overrides: dict[str, Any] | None = None,
                          omit_when_none: tuple[str, ...] = ()) -> type[BaseModel]:
    """A strict model with one field per field of the dataclass ``cls`` (same names,
    defaults and types; ``*_bytes`` ints become :data:`Bytes`, other ints :data:`Count`),
    so a field added to the dataclass appears in the schema (and the committed-schema
    test says the schema must be regenerated)."""
    hints = typing.get_type_hints(cls)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        if overrides and f.name in overrides:
            t = overrides[f.name]
        elif t is int:
            t = Bytes if _BYTES_FIELD.search(f.name) else Count
        elif t == Optional[int]:
            t = Optional[Bytes] if _BYTES_FIELD.search(f.name) else Optional[Count]
        elif t is str:
            t = Str
        elif t is bool:
            t = Annotated[bool, Strict()]
        if f.name in omit_when_none:  # written only when known (Basis.to_dict)
            fields[f.name] = (t, Field(default=None, exclude_if=lambda v: v is None))
        elif f.default is not dataclasses.MISSING:
            fields[f.name] = (t, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            fields[f.name] = (t, Field(default_factory=f.default_factory))
        else:
            fields[f.name] = (t, ...)
    return create_model(name, __base__=_Strict, **fields)


def _layer_model() -> type[BaseModel]:
    from kvgate.model.spec import LATE_LAYER_FIELDS, LayerSpec

    return _model_from_dataclass(LayerSpec, "Layer", omit_when_none=LATE_LAYER_FIELDS)


Layer = _layer_model()

LayoutOptions = dict[str, Str | AnyInt | Annotated[bool, Strict()] | None]


class ModelInputs(_Strict):
    """The model as a record keeps it: only the layer list is needed to recompute."""

    name: Str
    source: Str
    summary: Str | None = None
    model_type: Str | None = None
    dtype: Str | None = None
    max_position_embeddings: Count | None = None
    layers: Annotated[list[Layer], Field(min_length=1, max_length=100_000)]  # type: ignore[valid-type]
    notes: list[Str] = Field(default_factory=list)


NonNeg = Annotated[int, Strict(), Field(ge=0)]
Pos = Annotated[int, Strict(), Field(ge=1)]


class ScenarioCheck(_Strict):
    """The invariants of :class:`kvgate.gate.verdict.Scenario` (checked on every
    construction). No upper caps: boundary searches go to 64× the card and a million
    times the slots; records cap their inputs (:class:`ScenarioInputs`)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    total_bytes: Pos
    peak_bytes: NonNeg
    slots_measured: NonNeg
    slots_target: NonNeg
    max_seq_measured: Pos
    max_seq: Pos
    idle_bytes: NonNeg | None = None
    weights_delta_bytes: AnyInt = 0
    margin: Fraction
    total_measured_bytes: NonNeg | None = None

    @model_validator(mode="after")
    def _margin(self) -> ScenarioCheck:
        if isinstance(self.margin, bool) or not 0 <= self.margin < 1:
            raise ValueError(f"margin must be in [0, 1), got {self.margin}")
        return self


class ScenarioInputs(_Strict):
    """T, P, U0, n, N, L0, L, ΔW, m (:class:`kvgate.gate.verdict.Scenario`)."""

    total_bytes: Annotated[int, Strict(), Field(ge=1, le=MAX_BYTES)]
    peak_bytes: Bytes
    slots_measured: Count
    slots_target: Count
    max_seq_measured: PosCount
    max_seq: PosCount
    idle_bytes: Bytes | None = None
    weights_delta_bytes: SignedBytes = 0
    margin: Ratio
    total_measured_bytes: Bytes | None = None

    @model_validator(mode="after")
    def _peak_fits(self) -> ScenarioInputs:
        if self.peak_bytes > self.total_bytes:
            raise ValueError(f"peak_bytes {self.peak_bytes:,} is above total_bytes {self.total_bytes:,}")
        m = exact(self.margin.model_dump())
        if not 0 <= m < 1:
            raise ValueError(f"margin {self.margin.exact} is outside [0, 1)")
        return self


class PolicyInputs(_Strict):
    name: Literal["fixed", "half-free"] = "fixed"
    idle_bytes: Bytes = 0
    env_value: Str | None = None
    config_mb: AnyInt = 0
    max_resident_bytes: Bytes | None = None


class ReclaimSource(_Strict):
    """Where a measured paging reclaim came from (a trace replay)."""

    model_config = ConfigDict(extra="allow")  # replay options grow with the trace readers
    trace: Str


class DecisionInputsModel(_Strict):
    """Everything a decision is recomputed from (:class:`kvgate.gate.decision.DecisionInputs`)."""

    model: ModelInputs
    kv_format: Str
    kv_format_v: Str | None = None
    tp: Annotated[int, Strict(), Field(ge=1, le=4096)] = 1
    layout: LayoutOptions = Field(default_factory=lambda: dict[str, str | int | bool | None](name="contiguous"))
    state_format: Str = "fp32"
    scenario: ScenarioInputs
    candidates: Annotated[list[Literal["paging", "tiering", "kv-quant"]], Field(min_length=1)]
    quant_to: Str = "fp8"
    measured_reclaim_bytes: Bytes | None = None
    measured_reclaim_source: ReclaimSource | None = None
    policy: PolicyInputs = Field(default_factory=PolicyInputs)
    fit_points: list[tuple[Count, Bytes]] | None = None
    sensitivity_threshold: Ratio


# --------------------------------------------------------------------------- measurement

def _measurement_models() -> tuple[type[BaseModel], type[BaseModel]]:
    from kvgate.measure.measurement import LATE_BASIS_FIELDS, Basis, Measurement

    basis = _model_from_dataclass(Basis, "Basis", omit_when_none=LATE_BASIS_FIELDS, overrides={
        "exit_code": Optional[AnyInt], "interval_s": Optional[Flt], "domain": Str,
        "command": Optional[list[Str]]})
    meas = _model_from_dataclass(Measurement, "MeasurementDomain", overrides={
        "basis": basis, "status": Literal["ok", "failed", "interrupted"],
        "peak_time_s": Optional[Flt], "max_gap_s": Optional[Flt],
        "timeline": Optional[dict[Str, list[AnyInt | Flt | None]]],
    })
    meas = create_model("MeasurementDomain", __base__=meas,
                        headroom_bytes=(Optional[SignedBytes], None))
    return basis, meas


BasisModel, MeasurementDomain = _measurement_models()


class MeasurementDocument(_Strict):
    """A ``kvgate.measurement/1`` file: one run of a workload over one or more domains."""

    schema_: Literal["kvgate.measurement/1"] = Field(alias="schema")
    status: Literal["ok", "failed", "interrupted"]
    command: list[Str] | None = None
    exit_code: AnyInt | None = None
    domains: Annotated[list[MeasurementDomain], Field(min_length=1)]  # type: ignore[valid-type]


# --------------------------------------------------------------------------- outputs

Verdict = Literal["not-a-bottleneck", "pays", "pays-if", "insufficient", "no-verdict"]


class FitOut(_Strict):
    points: list[tuple[Count, Bytes]]
    slope_bytes_per_seq: Ratio
    intercept_bytes: Ratio
    overhead_per_seq_bytes: Ratio


class Projection(_Strict):
    kv_only_bytes: AnyInt
    fit_bytes: AnyInt | None = None
    used_bytes: AnyInt
    used: Literal["fit", "kv-only"]
    limit_bytes: AnyInt
    fit: FitOut | None = None


class CandidateOut(_Strict):
    name: Literal["paging", "tiering", "kv-quant"]
    verdict: Verdict
    reclaim_bytes: AnyInt
    reclaim_share: Ratio
    reclaim_per_slot_bytes: AnyInt
    bound: Str
    measured: bool
    bound_only: bool = False
    required_reclaim_bytes: AnyInt | None = None
    required_share_of_reclaim: Ratio | None = None
    boundaries_insufficient: dict[Str, AnyInt | Literal["never"] | None]


class TableRow(_Strict):
    key: Literal["slot", "all_slots", "headroom", "peak", "target"]
    quantity: Str
    bytes: AnyInt
    share: Ratio


class Sensitivity(_Strict):
    value: Ratio | None
    threshold: Ratio
    flagged: bool


class Boundary(_Strict):
    value: AnyInt | None
    direction: Literal["below", "above"]
    now: AnyInt
    fits_now: bool


class GeometryOut(_Strict):
    """The geometry as computed (derived output, recomputed by ``recheck``). Besides the
    typed fields it echoes :meth:`kvgate.geometry.KVGeometry.describe`, whose keys grow
    with the engine layouts: extra keys are passed through here (only here)."""

    model_config = ConfigDict(extra="allow")
    model: Str
    model_source: Str
    kv_format_k: Str
    kv_format_v: Str
    state_format: Str
    conv_format: Str | None = None
    ssm_format: Str | None = None
    tp: AnyInt
    layout: LayoutOptions
    layers: Count
    layer_kinds: dict[Str, Count]
    bytes_per_token: AnyInt
    state_bytes: AnyInt
    slot_bytes: AnyInt
    slot_bytes_measured: AnyInt
    slots_bytes: AnyInt


class DecisionRecord(_Strict):
    """A decision record, ``kvgate.decision/2``.

    ``digest`` is ``"sha256:<hex>"`` of the canonical JSON of ``inputs`` and
    ``measurement`` (:func:`kvgate.gate.digest.inputs_digest`): ``recheck`` recomputes it
    and reports an edit. ``status`` ``no-verdict`` records have no projection, table,
    sensitivity or boundaries.
    """

    schema_: Literal["kvgate.decision/2"] = Field(alias="schema")
    kvgate_version: Str
    created: Str | None = None
    digest: Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")] | None = None
    upgraded_from: Literal["kvgate.decision/1"] | None = None  # always null: read in records written so far
    status: Literal["ok", "no-verdict"]
    inputs: DecisionInputsModel
    measurement: MeasurementDomain | None = None  # type: ignore[valid-type]
    geometry: GeometryOut
    notes: list[Str] = Field(default_factory=list)
    verdicts: dict[Literal["paging", "tiering", "kv-quant"], Verdict]
    no_verdict_reason: Str | None = None
    projection: Projection | None = None
    candidates: list[CandidateOut] | None = None
    table: list[TableRow] | None = None
    sensitivity: Sensitivity | None = None
    boundaries: dict[Literal["total_bytes", "max_seq", "slots", "weights_delta_bytes"], Boundary] | None = None


# --------------------------------------------------------------------------- errors, schema

def validation_message(exc: ValidationError, what: str) -> str:
    """One line naming the first failing field path, e.g.
    ``decision record: inputs.model.layers.0.num_kv_heads: Input should be ...``."""
    errs = exc.errors(include_url=False)
    parts = []
    for e in errs[:3]:
        loc = ".".join(str(x) for x in e["loc"]) or "(document)"
        msg = "unknown field (not in the schema)" if e["type"] == "extra_forbidden" else e["msg"]
        parts.append(f"{loc}: {msg}")
    more = f" (and {len(errs) - 3} more)" if len(errs) > 3 else ""
    return f"{what}: " + "; ".join(parts) + more


def validate(model: type[BaseModel], doc: Any, what: str) -> BaseModel:
    """``model.model_validate(doc)`` with a :class:`RecordError` naming the field."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise RecordError(validation_message(exc, what)) from exc
    except RecursionError as exc:
        raise RecordError(f"{what}: nested too deeply") from exc


SCHEMAS: dict[str, type[BaseModel]] = {
    "decision-2.schema.json": DecisionRecord,
    "measurement-1.schema.json": MeasurementDocument,
}


def json_schemas() -> dict[str, str]:
    """File name → JSON Schema text (indented, sorted keys, trailing newline)."""
    out = {}
    for name, model in SCHEMAS.items():
        sch = model.model_json_schema(by_alias=True)
        sch = {"$schema": "https://json-schema.org/draft/2020-12/schema",
               "$id": f"https://kvgate.invalid/schema/{name}", **sch}
        out[name] = json.dumps(sch, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m kvgate.gate.schema --write DIR``: (re)write the published schemas."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "--write":
        print("usage: python -m kvgate.gate.schema --write docs/schema", file=sys.stderr)
        return 2
    d = Path(args[1])
    d.mkdir(parents=True, exist_ok=True)
    for name, text in json_schemas().items():
        (d / name).write_text(text, encoding="utf-8")
        print(d / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
