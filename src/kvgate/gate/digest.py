"""Record digests, the comparison ``recheck`` makes, and the 0.1.0 → 2 upgrade.

A record's digest is ``"sha256:" + sha256(canonical JSON of {"inputs", "measurement"})``
where canonical JSON is ``json.dumps(sort_keys=True, separators=(",", ":"),
ensure_ascii=True, allow_nan=False)`` of the validated record (defaults filled in by the
schema, so a field left at its default digests the same as one written out). The inputs
hold everything a verdict is computed from: the model's layers, KV formats, layout, TP,
scenario (T, P, U0, n, N, L0, L, ΔW, margin), candidates, measured reclaim, weights
policy, concurrency fit and sensitivity threshold; the measurement holds the basis.

``recheck`` recomputes the digest and every derived figure, and reports each one that
differs (:func:`derived_differences`): an edit of one layer's KV heads from 4 to 400
changes the digest, the sensitivity and every boundary even when the verdicts do not.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from kvgate.gate.schema import DECISION_SCHEMA, DECISION_SCHEMA_V1, exact, ratio


def canonical_json(obj: Any) -> str:
    """The canonical text a digest is taken over (sorted keys, no spaces, ASCII)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def inputs_digest(rec: dict[str, Any]) -> str:
    """``"sha256:<hex>"`` of a (validated) record's ``inputs`` and ``measurement``.

    >>> inputs_digest({"inputs": {}, "measurement": None})[:15]
    'sha256:44136fa3'
    """
    body = canonical_json({"inputs": rec.get("inputs"), "measurement": rec.get("measurement")})
    return "sha256:" + hashlib.sha256(body.encode("ascii")).hexdigest()


# Figures compared between a stored record and its recomputation: (label, getter).
def _summary(rec: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, v in (rec.get("verdicts") or {}).items():
        out[f"verdicts.{name}"] = v
    geo = rec.get("geometry") or {}
    for k in ("bytes_per_token", "state_bytes", "slot_bytes", "slot_bytes_measured", "slots_bytes"):
        out[f"geometry.{k}"] = geo.get(k)
    proj = rec.get("projection") or {}
    for k in ("kv_only_bytes", "fit_bytes", "used_bytes", "limit_bytes"):
        if proj:
            out[f"projection.{k}"] = proj.get(k)
    sens = rec.get("sensitivity")
    if sens:
        out["sensitivity.value"] = None if sens.get("value") is None else exact(sens["value"])
        out["sensitivity.flagged"] = sens.get("flagged")
    for k, b in (rec.get("boundaries") or {}).items():
        out[f"boundaries.{k}"] = b.get("value")
    for c in rec.get("candidates") or []:
        out[f"candidates.{c['name']}.reclaim_bytes"] = c.get("reclaim_bytes")
        out[f"candidates.{c['name']}.boundaries_insufficient"] = c.get("boundaries_insufficient")
    return out


def derived_differences(stored: dict[str, Any], recomputed: dict[str, Any]) -> list[dict[str, Any]]:
    """Every derived figure that differs: ``[{"field", "recorded", "recomputed"}]``
    (verdicts, geometry bytes, projections, sensitivity, boundaries, reclaims). Exact
    fractions are compared exactly and reported as ``"n/d"`` strings."""
    a, b = _summary(stored), _summary(recomputed)
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            out.append({"field": key, "recorded": _plain(a.get(key)), "recomputed": _plain(b.get(key))})
    return out


def _plain(v: Any) -> Any:
    from fractions import Fraction

    if isinstance(v, Fraction):
        return ratio(v)["exact"]
    return v


# --------------------------------------------------------------------------- upgrade

def _r(x: Any) -> Any:
    """A v1 ratio (``"n/d"`` string or int) as a v2 :class:`Ratio`; anything else is
    left for validation to name."""
    if isinstance(x, (str, int)) and not isinstance(x, bool):
        try:
            return ratio(exact(x))
        except Exception:  # noqa: BLE001 - validation reports the field
            return x
    return x


def upgrade_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """A ``kvgate.decision/1`` record (kvgate 0.1.0) in the version-2 shape.

    Ratios become ``{"exact", "float"}``; 0.1.0's ``projection.limit_bytes`` (an exact
    string) is replaced by its ``limit_bytes_floor`` (the int the gate compares with);
    the boundaries' ``exact`` values are dropped (recomputed from the inputs). There is
    no digest. The argument is not modified.
    """
    d = copy.deepcopy(doc)
    d["schema"] = DECISION_SCHEMA
    d["upgraded_from"] = DECISION_SCHEMA_V1
    inp = d.get("inputs")
    if isinstance(inp, dict):
        sc = inp.get("scenario")
        if isinstance(sc, dict) and "margin" in sc:
            sc["margin"] = _r(sc["margin"])
        elif isinstance(sc, dict):
            sc["margin"] = ratio(exact("1/10"))
        inp["sensitivity_threshold"] = _r(inp.get("sensitivity_threshold", "1/10"))
    for row in d.get("table") or []:
        if isinstance(row, dict) and "share" in row:
            row["share"] = _r(row["share"])
    for c in d.get("candidates") or []:
        if isinstance(c, dict) and "reclaim_share" in c:
            c["reclaim_share"] = _r(c["reclaim_share"])
    sens = d.get("sensitivity")
    if isinstance(sens, dict):
        if sens.get("value") is not None:
            sens["value"] = _r(sens["value"])
        if "threshold" in sens:
            sens["threshold"] = _r(sens["threshold"])
    proj = d.get("projection")
    if isinstance(proj, dict):
        if "limit_bytes_floor" in proj:
            proj["limit_bytes"] = proj.pop("limit_bytes_floor")
        fit = proj.get("fit")
        if isinstance(fit, dict):
            for k in ("slope_bytes_per_seq", "intercept_bytes", "overhead_per_seq_bytes"):
                if k in fit:
                    fit[k] = _r(fit[k])
    for b in (d.get("boundaries") or {}).values():
        if isinstance(b, dict):
            b.pop("exact", None)
    return d
