"""Decision records on disk: JSON (schema ``kvgate.decision/1``) + Markdown, written
atomically, never overwritten without ``force``; loading and recomputation (recheck).
"""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import Any

from kvgate.atomicio import check_writable, read_json, write_atomic, write_json_atomic
from kvgate.gate.decision import SCHEMA, DecisionInputs, decide, with_overrides
from kvgate.errors import KvgateError
from kvgate.measure.measurement import Measurement, basis_differences, Basis
from kvgate.gate.render import render_markdown

DEFAULT_DIR = "kvgate-records"


class RecordError(KvgateError):
    """Not a decision record, or a record that cannot be recomputed."""


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
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", rec["inputs"]["model"]["name"])
        js = d / f"{name}-L{sc['max_seq']}-N{sc['slots_target']}-{stamp}.json"
    return js, js.with_suffix(".md")


def write_record(rec: dict[str, Any], out: str | None = None, *, force: bool = False) -> Path:
    """Write the JSON record and its Markdown rendering atomically; returns the JSON path.

    Raises:
        OutputExistsError: either file exists and ``force`` is false (nothing written).
    """
    js, md = record_paths(out, rec)
    check_writable(js, force=force)
    check_writable(md, force=force)
    write_json_atomic(js, rec, force=force)
    write_atomic(md, render_markdown(rec), force=force)
    return js


def load_record(path: str | Path) -> dict[str, Any]:
    """Read a decision record.

    Raises:
        RecordError / KvgateError: missing, unparsable, or not ``kvgate.decision/1``.
    """
    rec = read_json(path, what="decision record")
    if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
        got = rec.get("schema") if isinstance(rec, dict) else type(rec).__name__
        raise RecordError(f"{path} is not a kvgate decision record (schema {got!r}, expected {SCHEMA!r})")
    for key in ("inputs", "verdicts"):
        if key not in rec:
            raise RecordError(f"decision record {path} is missing field {key!r}")
    return rec


def recorded_measurement(rec: dict[str, Any]) -> Measurement | None:
    m = rec.get("measurement")
    return Measurement.from_dict(m) if m else None


def recheck(rec: dict[str, Any], *, new_measurement: Measurement | None = None, **what_if: Any) -> dict[str, Any]:
    """Recompute a record, optionally on a new measurement and with what-if overrides.

    Returns ``{"recorded": rec', "what_if": rec'' | None, "changes": {...},
    "basis_differences": [...], "status": "same" | "changed" | "different-basis"}``.
    ``rec'`` is the record recomputed as stored (it must reproduce the stored verdicts).
    A new measurement on a different basis is not applied: status ``different-basis``.
    """
    inputs = DecisionInputs.from_dict(rec["inputs"])
    old_m = recorded_measurement(rec)
    recomputed = decide(inputs, old_m)
    recomputed["created"] = rec.get("created")  # the decision's own date, not the recheck's
    result: dict[str, Any] = {"recorded": recomputed, "what_if": None, "changes": {}, "basis_differences": []}
    if new_measurement is not None:
        diffs = basis_differences(old_m.basis if old_m else Basis(), new_measurement.basis)
        if diffs:
            result["basis_differences"] = [{"field": f, "recorded": a, "new": b} for f, a, b in diffs]
            result["status"] = "different-basis"
            return result
        what_if = {
            "total_bytes": new_measurement.total_bytes,
            "peak_bytes": new_measurement.peak_used_bytes,
            "idle_bytes": new_measurement.idle_used_bytes,
            **{k: v for k, v in what_if.items() if v is not None},
        }
    changes = {k: v for k, v in what_if.items() if v is not None}
    stale = recomputed["verdicts"] != rec["verdicts"]
    new_total = changes.get("total_bytes", inputs.scenario.total_bytes)
    new_peak = changes.get("peak_bytes", inputs.scenario.peak_bytes)
    if "peak_bytes" in changes and new_peak > new_total:
        raise RecordError(f"what-if peak {new_peak:,} B is above the card's total {new_total:,} B")
    if changes:
        if "total_bytes" in changes and "peak_bytes" not in changes and changes["total_bytes"] < inputs.scenario.peak_bytes:
            raise RecordError(
                f"what-if card memory {changes['total_bytes']:,} B is below the measured peak "
                f"{inputs.scenario.peak_bytes:,} B: the measured workload itself would not fit",
                hint="re-measure on that card",
            )
        new_inputs = with_overrides(inputs, **changes)
        result["what_if"] = decide(new_inputs, new_measurement or old_m)
        result["changes"] = changes
        same = result["what_if"]["verdicts"] == recomputed["verdicts"]
        result["status"] = "same" if same and not stale else "changed"
    else:
        result["status"] = "changed" if stale else "same"
    result["stale"] = stale  # recomputing the record itself gives other verdicts than it stores
    return result
