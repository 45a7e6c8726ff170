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


#: Top-level fields that are not derived from a record's inputs: the inputs and the
#: measurement themselves (their edits show in the digest), and when, by whom and the
#: free-text notes (paths, warnings). Every other field is recomputed and compared.
NOT_DERIVED = ("schema", "kvgate_version", "created", "digest", "digest_recorded", "upgraded_from", "inputs",
               "measurement", "notes")
_ABSENT = object()


def derived_figures(rec: dict[str, Any]) -> dict[str, Any]:
    """Every derived figure of a record, flattened to ``{path: value}``.

    Paths name the figure as the record does: ``verdicts.paging``, ``geometry.slot_bytes``,
    ``candidates.paging.reclaim_share`` (list items by their ``name`` or ``key``),
    ``table.headroom.bytes``, ``projection.fit.points[1][0]``. A ratio is its exact value
    (``"n/d"``) at its path and its float twin at ``<path>.float``; a boundary is its flip
    value at ``boundaries.<variable>`` and ``now``, ``direction``, ``fits_now`` below it.

    >>> derived_figures({"inputs": {}, "sensitivity": {"value": {"exact": "1/4", "float": 0.25}, "flagged": True}})
    {'sensitivity.value': '1/4', 'sensitivity.value.float': 0.25, 'sensitivity.flagged': True}
    """
    out: dict[str, Any] = {}
    for key, value in rec.items():
        if key not in NOT_DERIVED:
            _leaves(value, key, out)
    return out


def _leaves(obj: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(obj, dict) and obj:
        if set(obj) == {"exact", "float"}:  # a ratio: exact, and its float twin apart
            out[path] = obj["exact"]
            out[f"{path}.float"] = obj["float"]
            return
        if path.startswith("boundaries.") and path.count(".") == 1 and "value" in obj:
            out[path] = obj["value"]  # the flip point; now / direction / fits_now below it
            obj = {k: v for k, v in obj.items() if k != "value"}
        for k, v in obj.items():
            _leaves(v, f"{path}.{k}", out)
    elif isinstance(obj, list) and obj:
        for i, v in enumerate(obj):
            name = (v.get("name") or v.get("key")) if isinstance(v, dict) else None
            _leaves(v, f"{path}.{name}" if isinstance(name, str) else f"{path}[{i}]", out)
    else:
        out[path] = obj


def derived_differences(stored: dict[str, Any], recomputed: dict[str, Any]) -> list[dict[str, Any]]:
    """Every derived figure (:func:`derived_figures`) where the stored record and its
    recomputation differ, in path order: ``[{"field", "recorded", "recomputed"}]``; a
    figure one side lacks is ``None`` there. Values compare with their JSON type (``1``
    is not ``true``, ``1`` is not ``1.0``)."""
    a, b = derived_figures(stored), derived_figures(recomputed)
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key, _ABSENT), b.get(key, _ABSENT)
        if type(x) is not type(y) or x != y:
            out.append({"field": key, "recorded": None if x is _ABSENT else x,
                        "recomputed": None if y is _ABSENT else y})
    return out


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
