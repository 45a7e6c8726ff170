"""Text and Markdown renderings of a decision record (the source's table, verdicts,
boundaries, basis). Reads only the record dict, so a stored record renders the same."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from kvgate.gate.engine_words import RECORD_ENGINE_WORDS as _RECORD_ENGINE_WORDS
from kvgate.gate.engine_words import engine_of, table_quantity
from kvgate.gate.schema import exact
from kvgate.output import table
from kvgate.units import NA, GiB, fmt_bytes, fmt_gib, fmt_mib, fmt_pct

_BOUNDARY_LABEL = {
    "total_bytes": "card memory",
    "max_seq": "max_seq",
    "slots": "concurrent slots",
    "weights_delta_bytes": "resident weights",
}


def _engine_quantity(r: dict[str, Any], sc: dict[str, Any], engine: str | None) -> str:
    """A table row's label; in an engine-log record, in the engine's words (sequences, KV
    cache pool) instead of slots and a measured peak (:mod:`kvgate.gate.engine_words`; a
    record stored before its JSON said so is relabelled the same way)."""
    if engine is None or r["key"] not in ("slot", "all_slots", "headroom", "peak", "target"):
        return str(r["quantity"])
    return table_quantity(r["key"], engine, sequences=sc["slots_target"], length=sc["max_seq"])


def _mib(b: int | Fraction | str) -> str:
    return fmt_mib(Fraction(b))


def _mib_gib(b: int | Fraction | str) -> str:
    b = Fraction(b)
    return f"{fmt_mib(b)} ({fmt_gib(b)})" if abs(b) >= GiB else fmt_mib(b)


def boundary_lines(rec: dict[str, Any]) -> list[str]:
    """One sentence per boundary, e.g. ``card memory below 23,565.6 MiB (23.01 GiB)``.

    When the target fits (not-a-bottleneck) each line says where it stops fitting;
    otherwise where it would fit without any optimization. An engine-log record's lines
    say the KV cache pool and the engine's flags, and leave out the resident-weights
    boundary, which a pool (what is left after the weights) does not have
    (:mod:`kvgate.gate.engine_words`).
    """
    sc = rec["inputs"]["scenario"]
    fits = all(v == "not-a-bottleneck" for v in rec["verdicts"].values())
    eng = engine_of(rec)
    labels = dict(_BOUNDARY_LABEL)
    if eng is not None:
        labels.update(total_bytes="KV cache pool", max_seq=_RECORD_ENGINE_WORDS[eng][1],
                      slots=_RECORD_ENGINE_WORDS[eng][0])
    out = []
    for key, b in rec["boundaries"].items():
        if eng is not None and key == "weights_delta_bytes":
            continue
        label = labels[key]
        v = b["value"]
        if key == "total_bytes":
            if v is None and eng is not None:
                out.append(f"{label}: no pool up to 64× this size holds the target without a change")
            elif v is None:
                out.append(f"{label}: no card up to 64× this size fits the target without an optimization")
            else:
                shown = _mib_gib(v)
                out.append(f"{label} below {shown}   (now {_mib(sc['total_bytes'])})" if fits
                           else f"{label} of at least {shown} fits without an optimization   (now {_mib(sc['total_bytes'])})")
        elif key == "max_seq":
            if v is None:
                out.append(f"{label}: fits at any length up to 16,777,216" if fits else f"{label}: no length fits without an optimization")
            else:
                out.append(f"{label} above {v:,}   (now {sc['max_seq']:,})" if fits
                           else f"{label} of at most {v:,} fits without an optimization   (now {sc['max_seq']:,})")
        elif key == "slots":
            if v is None:
                out.append(f"{label}: even 0 {'sequences' if eng else 'slots'} do not fit")
            else:
                out.append(f"{label} {'above' if eng else 'more than'} {v:,}   (now {sc['slots_target']:,})" if fits
                           else f"{label}: at most {v:,} fit without an optimization   (now {sc['slots_target']:,})")
        elif v is not None:
            out.append(f"{label} heavier by more than {_mib_gib(v)}" if v >= 0
                       else f"{label} lighter by at least {_mib_gib(-v)} would fit without an optimization")
    return out


def pays_if_text(c: dict[str, Any]) -> str:
    """``pays only if paging frees ≥ 71.2% of the mirror N·S (27,898.7 MiB of
    39,204 MiB): measure it with --trace`` for a bound-only candidate (gate/source_case.py at 99 slots)."""
    need, bound = c.get("required_reclaim_bytes") or 0, c["reclaim_bytes"]
    share = exact(c["required_share_of_reclaim"]) if c.get("required_share_of_reclaim") else Fraction(0)
    return (f"pays only if {c['name']} frees ≥ {fmt_pct(share, 1)} of the mirror N·S "
            f"({_mib(need)} of {_mib(bound)}): measure it with --trace")


def candidate_limit_lines(rec: dict[str, Any]) -> list[str]:
    """For candidates that pay (or pay if): where even their full reclaim stops being enough."""
    eng = engine_of(rec)
    seqs, length = _RECORD_ENGINE_WORDS[eng] if eng else ("slots", "max_seq")
    out = []
    for c in rec.get("candidates", []):
        if c["verdict"] not in ("pays", "pays-if"):
            continue
        b = c["boundaries_insufficient"]
        parts = []
        if b.get("total_bytes") is not None:
            parts.append(f"{'KV cache pool' if eng else 'card'} below {_mib_gib(b['total_bytes'])}")
        if isinstance(b.get("max_seq"), int):
            parts.append(f"{length} above {b['max_seq']:,}")
        if isinstance(b.get("slots"), int):
            parts.append(f"{seqs} above {b['slots']:,}" if eng else f"more than {b['slots']:,} slots")
        if not parts:
            parts.append(f"nothing in range (its reclaim grows with {length} and {seqs})")
        name = c["name"]
        if eng and name == "kv-quant" and rec["inputs"].get("quant_to"):
            name = f"kv-quant ({_kv_dtype_flag(eng)} {rec['inputs']['quant_to']})"
        out.append(f"{name} is no longer enough with: " + ", ".join(parts))
    return out


def _kv_dtype_flag(engine: str) -> str:
    return _engine_words(engine)["kv_dtype_flag"]


def _engine_words(engine: str) -> Mapping[str, str]:
    """The engine's flags in sentences (:attr:`kvgate.engines.base.Engine.words`); an engine
    kvgate does not list speaks as the default one."""
    from kvgate.engines.registry import DEFAULT_ENGINE, ENGINES, get_engine  # noqa: PLC0415

    return get_engine(engine if engine in ENGINES else DEFAULT_ENGINE).words


def basis_line(m: dict[str, Any] | None) -> str:
    if not m:
        return "basis: no measurement (explicit numbers)"
    b = m["basis"]

    def g(k: str) -> str:
        v = b.get(k)
        return NA if v is None else str(v)

    iv = b.get("interval_s")
    interval = "" if iv is None else (f" every {iv * 1000:g} ms" if iv < 1 else f" every {iv:g} s")
    parts = [
        f"domain {g('domain')}",
        f"device {g('device_name')}",
        f"total {_mib(b['total_bytes']) if b.get('total_bytes') else NA}",
        f"driver {g('driver_version')}",
        f"CUDA {g('cuda_version')}",
        f"CPU {g('cpu_arch')}",
        f"sampler {g('sampler')}{interval}",
        f"exit code {g('exit_code')}",
    ]
    if b.get("source"):
        parts.append(f"source: {b['source']}")
    return "basis: " + " · ".join(parts)


def sensitivity_line(rec: dict[str, Any]) -> str:
    """``sensitivity  N·S / H = 24.4% > 10%: flagged ...`` for an ok record."""
    sens = rec["sensitivity"]
    if sens["value"] is None:
        return "sensitivity  no headroom at all: re-measure"
    v = exact(sens["value"])
    flag = "> " if sens["flagged"] else "≤ "
    eng = engine_of(rec)
    if eng is not None:
        seqs, length = _RECORD_ENGINE_WORDS[eng]
        return (f"sensitivity  N·S / KV cache pool = {fmt_pct(v, 1)} {flag}{fmt_pct(exact(sens['threshold']), 1, 0)}"
                + (f": flagged: read the engine's log again when the GPU, {length}, {seqs} or the weights change"
                   if sens["flagged"] else ": stable"))
    return (f"sensitivity  N·S / H = {fmt_pct(v, 1)} {flag}{fmt_pct(exact(sens['threshold']), 1, 0)}"
            + (": flagged (the write-up's rule): re-measure when the card, max_seq, slots or weights change"
               if sens["flagged"] else ": stable"))


def render_text(rec: dict[str, Any], *, record_path: str | None = None) -> str:
    """The human-readable report of a decision record."""
    inp = rec["inputs"]
    sc = inp["scenario"]
    geo = rec["geometry"]
    T = sc["total_bytes"]
    lines = [
        f"model     {inp['model']['name']} ({inp['model']['source']}): {inp['model']['summary']}",
        f"KV        {geo['kv_format_k']}" + (f" (V: {geo['kv_format_v']})" if geo["kv_format_v"] != geo["kv_format_k"] else "")
        + f", layout {geo['layout']['name']}, tp {geo['tp']}, max_seq {sc['max_seq']:,}"
        + (f" (measured at {sc['max_seq_measured']:,})" if sc["max_seq_measured"] != sc["max_seq"] else ""),
        (f"slots     {sc['slots_measured']} at the measured peak, target {sc['slots_target']}" if engine_of(rec) is None
         else f"sequences {sc['slots_target']} ({_RECORD_ENGINE_WORDS[str(engine_of(rec))][0]}) in the KV cache pool, "
              "empty at start"),
        "",
    ]
    if rec["status"] != "ok":
        lines += [f"verdict   NO VERDICT: {rec.get('no_verdict_reason', '')}", basis_line(rec.get("measurement"))]
        return "\n".join(lines)

    rows = [
        ["memory.total T", fmt_bytes(T), _mib(T), "100.0%"],
    ]
    if sc.get("idle_bytes") is not None:
        rows.append(["idle used U0", fmt_bytes(sc["idle_bytes"]), _mib(sc["idle_bytes"]), fmt_pct(sc["idle_bytes"], T)])
    else:
        rows.append(["idle used U0", NA, NA, ""])
    by_key = {r["key"]: r for r in rec["table"]}
    rows.append([by_key["peak"]["quantity"], fmt_bytes(sc["peak_bytes"]), _mib(sc["peak_bytes"]), fmt_pct(sc["peak_bytes"], T)])
    s = by_key["slot"]
    rows.append([s["quantity"], fmt_bytes(s["bytes"]), _mib(s["bytes"]), fmt_pct(s["bytes"], T)])
    a = by_key["all_slots"]
    rows.append([a["quantity"], fmt_bytes(a["bytes"]), _mib_gib(a["bytes"]), fmt_pct(a["bytes"], T)])
    for c in rec["candidates"]:
        per_slot = f"≤ {_mib(c['reclaim_per_slot_bytes'])}/slot" if not c["measured"] and c["name"] != "kv-quant" else ""
        label = f"{c['name']} reclaim R" + (" (measured, trace)" if c["measured"] else "")
        rows.append([label, fmt_bytes(c["reclaim_bytes"]),
                     (per_slot + ", " if per_slot else "") + f"{'≤ ' if not c['measured'] else ''}{_mib(c['reclaim_bytes'])}",
                     fmt_pct(c["reclaim_bytes"], T)])
    h = by_key["headroom"]
    rows.append([h["quantity"], fmt_bytes(h["bytes"]), _mib(h["bytes"]), fmt_pct(h["bytes"], T)])
    proj = rec["projection"]
    rows.append([f"projected peak at {sc['slots_target']} slots (KV only)", fmt_bytes(proj["kv_only_bytes"]),
                 _mib(proj["kv_only_bytes"]), fmt_pct(proj["kv_only_bytes"], T)])
    if proj["fit_bytes"] is not None:
        rows.append([f"projected peak at {sc['slots_target']} slots (fit)", fmt_bytes(proj["fit_bytes"]),
                     _mib(proj["fit_bytes"]), fmt_pct(proj["fit_bytes"], T)])
    margin = exact(sc["margin"])
    rows.append([f"limit ⌊(1 − {fmt_pct(margin, 1, 0)})·T⌋", fmt_bytes(proj["limit_bytes"]),
                 _mib(Fraction(proj["limit_bytes"])), fmt_pct(1 - margin, 1)])
    lines.append(table(rows, header=["quantity", "bytes", "MiB / GiB", "of T"], align="lrrr"))
    if proj["fit"]:
        f = proj["fit"]
        lines += [
            "",
            f"concurrency fit over {', '.join(str(p[0]) for p in f['points'])} sequences: "
            f"{_mib(exact(f['slope_bytes_per_seq']))} per sequence = S + {_mib(exact(f['overhead_per_seq_bytes']))} "
            f"per-sequence overhead (activations, workspace); the verdict uses the larger projection ({proj['used']})",
        ]
    lines += ["", "verdict"]
    target, limit = proj["used_bytes"], Fraction(proj["limit_bytes"])
    for c in rec["candidates"]:
        bound = not c["measured"] and c["name"] != "kv-quant"
        why = {
            "not-a-bottleneck": f"{_mib(target)} ≤ {_mib(limit)}: don't build",
            "pays": f"{_mib(target)} > {_mib(limit)}, and {_mib(target - c['reclaim_bytes'])} after "
                    + ("the full bound" if bound else "its reclaim") + " fits: build"
                    + (" (if the bound is reached: measure it with --trace)" if bound else ""),
            "pays-if": f"{_mib(target)} > {_mib(limit)}: {pays_if_text(c)}",
            "insufficient": f"{_mib(target - c['reclaim_bytes'])} even after the full "
                            + ("bound" if bound else "reclaim") + f" > {_mib(limit)}: no amount of "
                            + f"{c['name']} makes it fit",
        }[c["verdict"]]
        lines.append(f"  {c['name']:<9} {c['verdict']:<17} {why}")
    lines.append(sensitivity_line(rec))
    lines += ["", "the verdict flips with (each alone, the rest held):"]
    lines += [f"  {s}" for s in boundary_lines(rec)]
    lines += [f"  {s}" for s in candidate_limit_lines(rec)]
    if rec.get("notes"):
        lines += ["", "notes"] + [f"  - {n}" for n in rec["notes"]]
    lines += ["", basis_line(rec.get("measurement"))]
    if record_path:
        lines.append(f"record: {record_path}")
    return "\n".join(lines)


def render_markdown(rec: dict[str, Any]) -> str:
    """The Markdown rendering written next to each JSON record."""
    inp = rec["inputs"]
    sc = inp["scenario"]
    eng = engine_of(rec)
    title = (f"{sc['slots_target']} sequences of {sc['max_seq']:,} tokens ({_RECORD_ENGINE_WORDS[eng][0]} "
             f"{sc['slots_target']}, {_RECORD_ENGINE_WORDS[eng][1]} {sc['max_seq']:,}) in the {eng} KV cache pool"
             if eng else f"max_seq {sc['max_seq']:,}, {sc['slots_target']} slots")
    out = [
        f"# kvgate decision: {inp['model']['name']}, {title}",
        "",
        f"- created: {rec['created']} (kvgate {rec['kvgate_version']})",
        f"- model: `{inp['model']['source']}`: {inp['model']['summary']}",
        f"- KV format: {rec['geometry']['kv_format_k']} / {rec['geometry']['kv_format_v']}, layout "
        f"{rec['geometry']['layout']['name']}, tp {rec['geometry']['tp']}",
        f"- {basis_line(rec.get('measurement'))}",
        "",
    ]
    if rec["status"] != "ok":
        out += ["**No verdict**: " + rec.get("no_verdict_reason", ""), ""]
        return "\n".join(out)
    T = sc["total_bytes"]
    out += ["| quantity | bytes | MiB | share of T |", "|---|---:|---:|---:|"]
    for r in rec["table"]:
        out.append(f"| {_engine_quantity(r, sc, eng)} | {r['bytes']:,} | {_mib(r['bytes'])} | {fmt_pct(r['bytes'], T)} |")
    for c in rec["candidates"]:
        out.append(f"| {c['name']} reclaim R ({c['bound']}) | {c['reclaim_bytes']:,} | {_mib(c['reclaim_bytes'])} | "
                   f"{fmt_pct(c['reclaim_bytes'], T)} |")
    out += ["", "## Verdict", ""]
    out += [f"- **{c['name']}**: `{c['verdict']}`" + (f": {pays_if_text(c)}" if c["verdict"] == "pays-if" else "")
            for c in rec["candidates"]]
    sens = rec["sensitivity"]
    if sens["value"] is not None:
        out.append(f"- sensitivity N·S/{'KV cache pool' if eng else 'H'} = {fmt_pct(exact(sens['value']), 1)}"
                   + ((" (flagged: read the engine's log again on any change)" if eng
                       else " (flagged: re-measure on any change)") if sens["flagged"] else ""))
    out += ["", "## Where the verdict flips (each alone, the rest held)", ""]
    out += [f"- {s}" for s in boundary_lines(rec)]
    out += [f"- {s}" for s in candidate_limit_lines(rec)]
    if rec.get("notes"):
        out += ["", "## Notes", ""] + [f"- {n}" for n in rec["notes"]]
    return "\n".join(out) + "\n"


# -- the engine-log gate, in the engine's words ------------------------------------------

#: the gate's verdicts as a user of a paging engine reads them
_ENGINE_VERDICT = {"not-a-bottleneck": "not needed", "pays": "fits", "pays-if": "fits if enough",
                   "insufficient": "does not fit", "no-verdict": "can't tell"}


def render_engine_log_gate(res: dict[str, Any], engine: str, *, slots: int, max_seq: int) -> list[str]:
    """The engine-log gate (:func:`kvgate.engines.candidates.gate_from_engine_log`'s result)
    in the engine's words: the KV cache pool, sequences of tokens, maximum concurrency,
    and each change in the engine's own flag, with "fits / does not fit / fits if enough /
    not needed". No slots, mirror or paging: these engines already page.

    Args:
        res: the gate's result dict (``pool_bytes``, ``slot_bytes``, ``demand_bytes``,
            ``candidates``).
        engine: ``vllm``, ``sglang`` or ``llama.cpp``.
        slots, max_seq: the target N sequences of L tokens.
    """
    words = _engine_words(engine)
    C, S, D = res["pool_bytes"], res["slot_bytes"], res["demand_bytes"]
    fit_n = C // S if S else None
    out = [f"KV cache pool {C:,} B per GPU ({fmt_gib(C)})",
           f"{slots} sequences of {max_seq:,} tokens need {slots} × {S:,} = {D:,} B "
           f"({'fits' if D <= C else 'does not fit'}); maximum concurrency at {max_seq:,} tokens: "
           f"{fit_n:,} sequences" if fit_n is not None else "",
           "what would make them fit (the other settings held):" if D > C else
           "changes (not needed: the pool already holds them):"]
    rows = []
    for c in res["candidates"]:
        v = _ENGINE_VERDICT.get(c["verdict"], c["verdict"])
        name = c["name"]
        if name.startswith("kv-quant:"):
            q = name.split(":", 1)[1]
            if q == "fp8":  # the engine's own spelling (SGLang's choices have no plain fp8: server_args.py)
                q = words.get("fp8", q)
            flag = words["quant"].format(q=q)
            text = f"{slots} sequences need {c['demand_bytes']:,} B"
        elif name == "max-model-len cut":
            flag = words["len"]
            L = c.get("max_seq_fits")
            text = (f"{slots} sequences fit at up to {L:,} tokens each" if L
                    else f"{slots} sequences do not fit at any length")
        elif name == "fewer slots":
            flag = words["seqs"]
            n = c.get("slots_fit")
            text = (f"{n:,} sequences of {max_seq:,} tokens fit at once; more wait in the queue" if n
                    else f"not one sequence of {max_seq:,} tokens fits")
        elif name == "host offload":
            flag = words["offload"]
            need = c.get("reclaim_bytes") or 0
            host = c.get("host_bytes")
            text = (f"the trace's peak {c['trace_paged_peak_bytes']:,} B leaves {need:,} B for the host" if c.get("measured")
                    else f"needs {need:,} B of host memory at {slots} full-length sequences")
            text += "" if host is not None else " (host size unknown: --host-bytes)"
        elif name.startswith("more TP"):
            t2 = name.split("→")[-1].rstrip(")") if "→" in name else "2"
            flag = words["tp"].format(t=t2)
            text = (f"per GPU {c['demand_bytes']:,} B needed vs {c['capacity_bytes']:,} B"
                    + (" (the pool + half the weights, an estimate)" if c["capacity_bytes"] != C else " (pool held)")
                    if "demand_bytes" in c else c.get("text", ""))
        else:
            flag, text = name, c.get("text", "")
        rows.append(f"  {flag:<26} {v:<15} {text}")
    return [ln for ln in out if ln] + rows
