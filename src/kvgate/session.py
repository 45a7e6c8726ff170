"""From typed options to what they name, and to one decision: the library API under
``kvgate gate``, ``run``, ``demo`` and the engine-log gate.

:func:`build_layout`, :func:`engine_geometry` and :func:`load_replay_trace` turn options
(:mod:`kvgate.options`) into a layout, a geometry and a trace. :class:`GatePlan` loads
the model once, checks every option once (before a workload runs), loads a ``--trace``
once and replays it at most once; :meth:`GatePlan.decide` builds the gate once per
measurement. :func:`decide_from_options` is the
one-call form.

    engine = EngineOptions(model="qwen3-30b-a3b", kv_format="int8-f32scale", max_seq=8192, slots=8)
    gate = GateOptions(slots_target=8, slots_measured=4)
    d = decide_from_options(engine, gate, Measurement(total_bytes=..., peak_used_bytes=...))
    d.record["verdicts"]        # {"paging": "not-a-bottleneck", "tiering": ...}
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kvgate.errors import KvgateError
from kvgate.gate.verdict import Scenario
from kvgate.gate.weights_policy import policy_from_env
from kvgate.geometry import KVGeometry, Layout, layout_from_options
from kvgate.model import ModelSpec
from kvgate.options import EngineOptions, GateOptions, ReplayOptions

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.gate.decision import DecisionInputs
    from kvgate.measure.measurement import Measurement
    from kvgate.replay.trace import Trace


def build_layout(engine: EngineOptions) -> Layout:
    """The :class:`kvgate.geometry.Layout` the options name (engine defaults for options
    not given).

    Raises:
        GeometryError: unknown layout, or an option it does not take (named).
    """
    return layout_from_options(engine.layout, **engine.layout_options)


def layout_record(engine: EngineOptions) -> dict[str, Any]:
    """``{"name": layout, **every option}``: what a record stores to rebuild the layout."""
    d = dict(build_layout(engine).to_dict())
    d["name"] = engine.layout
    return d


def engine_geometry(engine: EngineOptions, model: ModelSpec) -> KVGeometry:
    """:class:`kvgate.geometry.KVGeometry` of ``model`` under ``engine``.

    Raises:
        KvgateError: bad format, TP split or layout option; under the vllm layout with
            ``-pp``/``-dcp``, a split vLLM refuses (:func:`kvgate.engines.vllm.fit.check_parallel`).
    """
    k, v = engine.formats_for(model)
    layout = build_layout(engine)
    pp, dcp = getattr(layout, "pipeline_parallel_size", 1), getattr(layout, "decode_context_parallel_size", 1)
    if pp > 1 or dcp > 1:  # only an engine's layout splits into stages / context ranks
        from kvgate.engines.registry import get_engine  # noqa: PLC0415 - the engines import this module's peers

        get_engine(layout.name).check_parallel(model, engine.tp, pp, dcp)  # as kvgate fit refuses them
    return KVGeometry(model, k, kv_format_v=v, tp=engine.tp, layout=layout)


def load_replay_trace(replay: ReplayOptions) -> Trace:
    """The trace ``replay`` names, read once by :func:`kvgate.replay.trace.load_trace`
    with its ``rate``, ``seed`` and ``time_unit``.

    Raises:
        TraceError: unreadable trace, ambiguous time unit, bad values.
    """
    from kvgate.replay.trace import load_trace

    return load_trace(replay.trace, rate=replay.rate, seed=replay.seed, time_unit=replay.time_unit)


@dataclass(frozen=True)
class Decision:
    """A decision: its inputs and its record (a ``kvgate.decision/2`` dict)."""

    inputs: DecisionInputs
    record: dict[str, Any]


class GatePlan:
    """Everything a decision needs except the measurement, checked once.

    Args:
        engine: model, formats, TP, layout, max_seq (required), slots.
        gate: target, thresholds, weights policy.
        replay: a trace whose replay measures paging's reclaim, or ``None`` (the bound N·S).
        model: an already loaded model (else ``load_model(engine.model)``).

    Raises:
        KvgateError: no model or max_seq, a bad format / layout option / candidate, a
            trace that does not load, ``--trace`` with no target slot.
    """

    def __init__(self, engine: EngineOptions, gate: GateOptions, replay: ReplayOptions | None = None, *,
                 model: ModelSpec | None = None) -> None:
        self.engine, self.gate, self.replay = engine, gate, replay
        if model is None:
            if not engine.model:
                raise KvgateError("no model", hint="give --model (config.json, model directory, GGUF file or preset)")
            from kvgate.engines.registry import load_model_for

            # as the engine reads it (llama.cpp maps a remote-code config the way its converter does)
            model = load_model_for(engine.model, engine.layout)
        max_seq = engine.max_seq_for(model)
        if max_seq is None:
            raise KvgateError("no target max_seq", hint="give --max-seq L (vLLM --max-model-len, llama.cpp -c)")
        self.max_seq: int = max_seq
        notes = list(model.notes)
        mpe = model.max_position_embeddings
        if mpe and max_seq > mpe:
            notes.append(f"max_seq {max_seq:,} is beyond the model's max_position_embeddings {mpe:,}")
        ctx_note = engine.ctx_note(max_seq)
        if ctx_note:
            notes.append(ctx_note)
        self.model = replace(model, notes=notes)
        self.kv_format, self.kv_format_v = engine.formats_for(self.model)
        self.layout = layout_record(engine)
        self._trace: Trace | None = None
        self._reclaim: dict[str, Any] | None = None
        if replay is not None:
            if gate.slots_target < 1:
                raise KvgateError("--trace needs at least one target slot (--slots N ≥ 1)")
            from kvgate.replay.simulate import arrival_steps

            self._trace = load_replay_trace(replay)
            arrival_steps(self._trace.arrival_s, speed=replay.speed, decode_rate=replay.decode_rate)

    def for_gate(self, gate: GateOptions) -> GatePlan:
        """This plan with other gate options (``run``: the measured level that gates),
        sharing the loaded model and trace (and the replay, while N is unchanged)."""
        other = copy.copy(self)
        other.gate = gate
        if gate.slots_target != self.gate.slots_target:
            other._reclaim = None
        return other

    # -- the replay, at most once
    def reclaim(self) -> dict[str, Any] | None:
        """Paging's reclaim measured by replaying the trace (cached), or ``None``."""
        if self.replay is None:
            return None
        if self._reclaim is None:
            from kvgate.replay.reclaim import paging_reclaim

            self._reclaim = paging_reclaim(self.model, self.engine, self.replay, slots=self.gate.slots_target,
                                           max_seq=self.max_seq, trace=self._trace)
        return self._reclaim

    def inputs(self, measurement: Measurement, *, fit_points: list[tuple[int, int]] | None = None,
               with_replay: bool = True) -> DecisionInputs:
        """:class:`DecisionInputs` for ``measurement`` (no gate is built here).

        Raises:
            KvgateError: ``half-free`` without the idle used memory.
        """
        from kvgate.gate.decision import DecisionInputs

        g, m = self.gate, measurement
        if g.weights_policy == "half-free" and m.idle_used_bytes is None:
            raise KvgateError("--weights-policy half-free needs the idle used memory U0 (free = T − U0 at engine start)",
                              hint="give --idle, or a measurement that has it")
        sc = Scenario(
            total_bytes=m.total_bytes,
            peak_bytes=m.peak_used_bytes,
            idle_bytes=m.idle_used_bytes,
            slots_measured=g.slots_measured,
            slots_target=g.slots_target,
            max_seq_measured=g.max_seq_measured or self.max_seq,
            max_seq=self.max_seq,
            weights_delta_bytes=g.weights_delta_bytes,
            margin=g.margin,
            total_measured_bytes=m.total_bytes,
        )
        model = self.model
        measured = source = None
        rep = self.reclaim() if with_replay else None
        if rep is not None and self.replay is not None:
            measured = int(rep["measured_reclaim_bytes"])
            model = replace(model, notes=list(model.notes) + replay_notes(rep, self.replay.trace))
            source = {
                "trace": self.replay.trace,
                "slots": g.slots_target,
                "block_size": self.replay.page_size,
                "decode_rate": self.replay.decode_rate,
                "speed": self.replay.speed,
                "rate": self.replay.rate,
                "bound_bytes": rep.get("bound_bytes"),
                "unwritten_at_peak_bytes": rep.get("unwritten_at_peak_bytes"),
            }
        return DecisionInputs(
            model=model,
            scenario=sc,
            kv_format=self.kv_format,
            kv_format_v=self.kv_format_v,
            tp=self.engine.tp,
            layout=dict(self.layout),
            candidates=list(g.candidates),
            quant_to=g.quant_to,
            measured_reclaim_bytes=measured,
            measured_reclaim_source=source,
            policy=policy_from_env(g.weights_policy, m.idle_used_bytes if m.idle_used_bytes is not None else 0,
                                   g.weights_max_bytes),
            fit_points=fit_points,
            sensitivity_threshold=g.sensitivity,
        )

    def check(self) -> None:
        """Check every option against a placeholder measurement (the trace is loaded,
        not replayed), so a typo costs no workload run: 1 PiB total and a 512 TiB peak,
        no idle (a peak of 0 would fail "the peak must hold the measured slots", and no
        real device's peak reaches 512 TiB).

        Raises:
            KvgateError: whatever building the gate raises (candidates, formats, TP split,
                layout, weights policy).
        """
        from kvgate.measure.measurement import Measurement

        placeholder = Measurement(total_bytes=1 << 50, peak_used_bytes=1 << 49, idle_used_bytes=0)
        self.inputs(placeholder, with_replay=False).build_gate(check_peak=True)

    def decide(self, measurement: Measurement, *, fit_points: list[tuple[int, int]] | None = None,
               notes: list[str] | None = None, measurement_doc: dict[str, Any] | None = None) -> Decision:
        """The decision for ``measurement`` (the gate built once, the trace replayed at
        most once per plan).

        Raises:
            KvgateError: see :meth:`inputs` and :func:`kvgate.gate.decision.decide`.
        """
        from kvgate.gate.decision import decide

        inputs = self.inputs(measurement, fit_points=fit_points)
        rec = decide(inputs, measurement, notes=notes, measurement_doc=measurement_doc)
        return Decision(inputs=inputs, record=rec)


def decide_from_options(engine: EngineOptions, gate: GateOptions, measurement: Measurement,
                        replay: ReplayOptions | None = None, *, fit_points: list[tuple[int, int]] | None = None,
                        notes: list[str] | None = None, measurement_doc: dict[str, Any] | None = None,
                        model: ModelSpec | None = None) -> Decision:
    """One decision from typed options: ``GatePlan(engine, gate, replay).decide(measurement)``.

    Raises:
        KvgateError: see :class:`GatePlan` and :meth:`GatePlan.decide`.
    """
    return GatePlan(engine, gate, replay, model=model).decide(
        measurement, fit_points=fit_points, notes=notes, measurement_doc=measurement_doc)


def replay_notes(replay: dict[str, Any], trace: str) -> list[str]:
    """Notes for the record: bound vs measured reclaim, ratio, warnings, attribution."""
    from kvgate.units import fmt_mib

    bound, got = int(replay["bound_bytes"]), int(replay["measured_reclaim_bytes"])
    ratio = replay.get("ratio")
    notes = [
        f"paging reclaim measured by replaying {trace}: {fmt_mib(got)} "
        f"against the bound N·S = {fmt_mib(bound)}"
        + (f" ({ratio:.1%} of the bound)" if isinstance(ratio, (int, float)) else "")
    ]
    notes += [f"replay: {w}" for w in replay.get("warnings") or []]
    if replay.get("attribution"):
        notes.append(str(replay["attribution"]))
    return notes
