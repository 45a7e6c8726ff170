"""Record digests, and the comparison ``recheck`` makes.

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

import hashlib
import json
from typing import Any


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


def stored_differences(stored: dict[str, Any], recomputed: dict[str, Any]) -> list[dict[str, Any]]:
    """Every figure of a record's ``inputs`` and ``measurement`` that its recomputation
    (built from the parsed inputs alone) gives another value: ``measurement.headroom_bytes``
    (total − peak), the float twin of a ratio (``inputs.scenario.margin.float``,
    ``inputs.sensitivity_threshold.float``, from its exact value). The digest is taken over
    what the inputs parse to, so an edit of one of these alone keeps the digest; it shows
    here instead, as ``[{"field", "recorded", "recomputed"}]``. A field one side lacks is
    not compared.

    >>> stored_differences({"inputs": {"m": {"exact": "1/10", "float": 0.9}}},
    ...                    {"inputs": {"m": {"exact": "1/10", "float": 0.1}}})
    [{'field': 'inputs.m.float', 'recorded': 0.9, 'recomputed': 0.1}]
    """
    out = []
    for part in ("inputs", "measurement"):
        a: dict[str, Any] = {}
        b: dict[str, Any] = {}
        _leaves(stored.get(part), part, a)
        _leaves(recomputed.get(part), part, b)
        for key in sorted(set(a) & set(b)):
            x, y = a[key], b[key]
            if x != y or isinstance(x, bool) is not isinstance(y, bool):
                out.append({"field": key, "recorded": x, "recomputed": y})
    return out
