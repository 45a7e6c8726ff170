"""Decision records on disk (schema ``kvgate.decision/2``): JSON + Markdown written as
one (both or neither), never overwritten without ``force``; the one loader for records
and measurements; recomputation (``recheck``) of one record or a directory of them.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import sys
from pathlib import Path
from typing import Any

from kvgate.atomicio import check_writable, read_json, write_files_atomic
from kvgate.errors import (
    EXIT_CHANGED,
    EXIT_DIFFERENT_BASIS,
    EXIT_INPUT,
    EXIT_OK,
    KvgateError,
    worst_exit,
)
from kvgate.gate.decision import DecisionInputs, decide, finalize, with_overrides
from kvgate.gate.digest import derived_differences, inputs_digest, stored_differences
from kvgate.gate.render import render_markdown
from kvgate.gate.schema import (
    DECISION_SCHEMA,
    MEASUREMENT_SCHEMA,
    DecisionRecord,
    MeasurementDocument,
    RecordError,
    validate,
)
from kvgate.geometry import GeometryError, get_layout
from kvgate.measure.fallback import Saved, save_with_fallback
from kvgate.measure.measurement import Basis, Measurement, basis_differences

DEFAULT_DIR = "kvgate-records"

__all__ = ["RecordError", "record_paths", "write_record", "save_record", "load_record", "load_measurement",
           "recheck", "recheck_path", "DEFAULT_DIR"]


def record_paths(out: str | None, rec: dict[str, Any]) -> tuple[Path, Path]:
    """Where a record goes: ``out`` as a ``.json`` file, or a directory (default
    ``./kvgate-records``) holding ``<model>-L<max_seq>-N<slots>-<UTC time>.json``.
    The Markdown rendering sits beside it with ``.md``.

    Raises:
        RecordError: ``out`` is an existing file that is not ``.json``.
    """
    if out and not out.endswith(".json") and Path(out).exists() and not Path(out).is_dir():
        raise RecordError(f"--out {out} is an existing file, not a directory or a .json record",
                          hint="give a directory, or a file name ending in .json")
    if out and out.endswith(".json"):
        js = Path(out)
    else:
        d = Path(out or DEFAULT_DIR)
        sc = rec["inputs"]["scenario"]
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", rec["inputs"]["model"]["name"])[:80] or "model"
        js = d / f"{name}-L{sc['max_seq']}-N{sc['slots_target']}-{stamp}.json"
    return js, js.with_suffix(".md")


def write_record(rec: dict[str, Any], out: str | None = None, *, force: bool = False) -> Path:
    """Write the JSON record and its Markdown rendering as one (both files or neither);
    returns the JSON path. The record is validated first and its digest set.

    Raises:
        OutputExistsError: either file exists and ``force`` is false (nothing written).
        RecordError: the record does not validate.
        KvgateError: the directory is not writable (nothing written).
    """
    rec = finalize(rec)
    js, md = record_paths(out, rec)
    check_writable(js, force=force)
    check_writable(md, force=force)
    from kvgate.atomicio import write_json_text

    write_files_atomic([(js, write_json_text(rec)), (md, render_markdown(rec))], force=force)
    return js


def save_record(rec: dict[str, Any], out: str | None, *, force: bool = False) -> Saved:
    """:func:`write_record` that never loses the decision (``kvgate run``, after a
    measured workload): if the record cannot be written where ``out`` says, it goes to a
    fallback directory under its default name (:func:`kvgate.measure.fallback.save_with_fallback`),
    and as a last resort its JSON to stderr. Show ``saved.warning`` when it is set.
    """
    js, _ = record_paths(out, rec)

    def write(p: Path) -> Path:
        if p == js:
            return write_record(rec, out, force=force)
        return write_record(rec, str(p), force=False)

    saved = save_with_fallback(write, js, what="decision record")
    if saved.path is None:
        sys.stderr.write(json.dumps(rec, indent=2) + "\n")
    return saved


def parse_record(doc: Any, where: str = "decision record") -> dict[str, Any]:
    """Validate a parsed record and return it normalized,
    with ``digest_recorded`` (the stored digest or ``None``) and ``digest`` recomputed.

    Raises:
        RecordError: not a decision record, or a field that does not validate (named).
    """
    if not isinstance(doc, dict) or doc.get("schema") != DECISION_SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise RecordError(f"{where} is not a kvgate decision record (schema {got!r:.60}, expected "
                          f"{DECISION_SCHEMA!r})")
    stored = doc.get("digest")
    rec = validate(DecisionRecord, doc, where).model_dump(mode="json", by_alias=True)
    rec["digest"] = inputs_digest(rec)
    rec["digest_recorded"] = stored
    return rec


def load_record(path: str | Path) -> dict[str, Any]:
    """Read and validate a decision record (the one loader every command uses).

    Returns the record as a dict, plus ``digest_recorded``: the digest stored in the
    file (``None`` if it has none), next to
    ``digest`` recomputed from its inputs; they differ when the inputs were edited.

    Raises:
        RecordError / KvgateError: missing, unparsable, not a record, or invalid (the
            message names the file and the field).
    """
    return parse_record(read_json(path, what="decision record"), f"decision record {path}")


def load_measurement(source: str | Path | dict[str, Any], *, domain: str | None = None) -> tuple[Measurement, dict[str, Any]]:
    """Read and validate a ``kvgate.measurement/1`` document (a path or a parsed dict),
    and pick one domain (``domain``, else the one with the least headroom; see
    :func:`kvgate.measure.select.select_measurement`).

    Returns ``(measurement, document)``.

    Raises:
        RecordError / KvgateError: unreadable, not a measurement, an unknown or invalid
            field (named), or ``domain`` absent.
    """
    where = "measurement" if isinstance(source, dict) else f"measurement {source}"
    doc = source if isinstance(source, dict) else read_json(source, what="measurement")
    if not isinstance(doc, dict) or doc.get("schema") != MEASUREMENT_SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise RecordError(f"{where} is not a kvgate measurement (schema {got!r:.60}, expected {MEASUREMENT_SCHEMA!r})")
    validate(MeasurementDocument, doc, where)
    from kvgate.measure.select import select_measurement

    return select_measurement(doc, domain=domain).measurement, doc


def recorded_measurement(rec: dict[str, Any]) -> Measurement | None:
    m = rec.get("measurement")
    return Measurement.from_dict(m) if m else None


def recheck(rec: dict[str, Any], *, new_measurement: Measurement | None = None, **what_if: Any) -> dict[str, Any]:
    """Recompute a (loaded) record, optionally on a new measurement and with what-ifs.

    Returns ``{"status": "same" | "changed" | "different-basis", "exit_code",
    "recorded": rec', "what_if": rec'' | None, "changes": {...}, "basis_differences": [...],
    "digest": {"recorded", "recomputed", "matches"}, "differences": [...], "stale"}``.
    ``rec'`` is the record recomputed from its inputs; ``differences`` lists every derived
    figure (verdicts, sensitivity, boundaries, geometry, projections) where ``rec'``
    differs from what the file stores; ``stale`` is true when any differs or the digest
    does not match (the record was edited, or made by another kvgate version); the stored
    ``inputs`` and ``measurement`` figures that are themselves derived (headroom, the float
    twin of a ratio) are compared too (:func:`kvgate.gate.digest.stored_differences`). A new
    measurement on a different basis is not applied: status ``different-basis``.

    Raises:
        KvgateError: what-ifs the gate refuses (peak above the card, ...).
    """
    inputs = DecisionInputs.from_dict(rec["inputs"])
    lay = dict(inputs.layout)
    try:  # the record's layout and its options, named by field before anything is sized
        get_layout(str(lay.pop("name", "contiguous")), **lay)
    except GeometryError as exc:
        raise RecordError(f"inputs.layout: {exc.message}", hint=exc.hint) from None
    old_m = recorded_measurement(rec)
    recomputed = decide(inputs, old_m)
    recomputed["created"] = rec.get("created")  # the decision's own date, not the recheck's
    stored_digest = rec.get("digest_recorded", rec.get("digest"))
    digest = {"recorded": stored_digest, "recomputed": recomputed["digest"],
              "matches": None if stored_digest is None else stored_digest == recomputed["digest"]}
    diffs = derived_differences(rec, recomputed)
    diffs += stored_differences(rec, recomputed)  # derived figures the digest cannot see (headroom, float twins)
    if old_m is not None:  # the stored measurement must be the one the inputs were taken from
        for name, want, got in (("total_bytes", old_m.total_bytes, inputs.scenario.total_bytes),
                                ("peak_used_bytes", old_m.peak_used_bytes, inputs.scenario.peak_bytes),
                                ("idle_used_bytes", old_m.idle_used_bytes, inputs.scenario.idle_bytes)):
            if want is not None and got is not None and want != got:
                diffs.append({"field": f"measurement.{name} vs inputs.scenario", "recorded": want, "recomputed": got})
    # a record without its digest cannot show that nothing was edited: never "unchanged"
    stale = bool(diffs) or digest["matches"] is not True
    result: dict[str, Any] = {"recorded": recomputed, "what_if": None, "changes": {}, "basis_differences": [],
                              "digest": digest, "differences": diffs, "stale": stale}
    if new_measurement is not None:
        bd = basis_differences(old_m.basis if old_m else Basis(), new_measurement.basis)
        if bd:
            result["basis_differences"] = [{"field": f, "recorded": a, "new": b} for f, a, b in bd]
            result["status"] = "different-basis"
            result["exit_code"] = EXIT_DIFFERENT_BASIS
            return result
        what_if = {
            "total_bytes": new_measurement.total_bytes,
            "peak_bytes": new_measurement.peak_used_bytes,
            "idle_bytes": new_measurement.idle_used_bytes,
            **{k: v for k, v in what_if.items() if v is not None},
        }
    changes = {k: v for k, v in what_if.items() if v is not None}
    new_total = changes.get("total_bytes", inputs.scenario.total_bytes)
    new_peak = changes.get("peak_bytes", inputs.scenario.peak_bytes)
    if "peak_bytes" in changes and new_peak > new_total:
        raise RecordError(f"what-if peak {new_peak:,} B is above the card's total {new_total:,} B")
    changed = stale
    if changes:
        if "total_bytes" in changes and "peak_bytes" not in changes and changes["total_bytes"] < inputs.scenario.peak_bytes:
            raise RecordError(
                f"what-if card memory {changes['total_bytes']:,} B is below the measured peak "
                f"{inputs.scenario.peak_bytes:,} B: the measured workload itself would not fit",
                hint="re-measure on that card",
            )
        result["what_if"] = decide(with_overrides(inputs, **changes), new_measurement or old_m)
        result["changes"] = changes
        changed = changed or result["what_if"]["verdicts"] != recomputed["verdicts"]
    result["status"] = "changed" if changed else "same"
    result["exit_code"] = EXIT_CHANGED if changed else EXIT_OK
    return result


def recheck_path(path: str | Path, *, new_measurement: Measurement | None = None,
                 **what_if: Any) -> list[dict[str, Any]]:
    """Recheck one record file, or every ``*.json`` in a directory (not its subfolders),
    never stopping at a bad one. Always a list, one result per file, in name order::

        {"record": path, "status": "same" | "changed" | "different-basis" | "error"
                                   | "skipped",
         "exit_code": int, "error": message | None, ...recheck()'s keys when recomputed}

    ``error``: the file could not be read, is not valid, or could not be recomputed (the
    message names it); ``skipped``: a JSON file in the directory that is not a decision
    record (a measurement, say). The command's exit code is
    ``kvgate.errors.worst_exit([r["exit_code"] for r in results])``.

    Raises:
        KvgateError: ``path`` does not exist, or a directory holds no decision record.
    """
    p = Path(path)
    if p.is_dir():
        files = sorted(x for x in p.glob("*.json") if not x.is_dir())
    elif p.exists():
        files = [p]
    else:
        raise KvgateError(f"decision record not found: {p}")
    results = []
    for f in files:
        res: dict[str, Any] = {"record": str(f), "error": None}
        try:
            doc = read_json(f, what="decision record")
            if p.is_dir() and not (isinstance(doc, dict) and doc.get("schema") == DECISION_SCHEMA):
                got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
                res.update(status="skipped", exit_code=EXIT_OK, error=f"not a decision record (schema {got!r:.60})")
                results.append(res)
                continue
            rec = parse_record(doc, f"decision record {f}")
            res["stored"] = {"verdicts": rec["verdicts"], "created": rec.get("created")}
            res.update(recheck(rec, new_measurement=new_measurement, **what_if))
            res["inputs"] = rec["inputs"]
        except KvgateError as exc:
            res.update(status="error", exit_code=EXIT_INPUT, error=exc.message + (f" ({exc.hint})" if exc.hint else ""))
        except (RecursionError, MemoryError) as exc:  # pragma: no cover - refused earlier by read_json
            res.update(status="error", exit_code=EXIT_INPUT, error=f"cannot read {f}: {type(exc).__name__}")
        results.append(res)
    if p.is_dir() and not any(r["status"] != "skipped" for r in results):
        raise KvgateError(f"no decision records (schema {DECISION_SCHEMA}) in {p} "
                          "(subfolders are not searched)")
    return results


def recheck_exit_code(results: list[dict[str, Any]]) -> int:
    """The exit code of a recheck over ``results``: 2 > 3 > 4 > 0 (:func:`worst_exit`)."""
    return worst_exit([r["exit_code"] for r in results])
