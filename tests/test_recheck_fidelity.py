"""``kvgate recheck`` compares EVERY derived figure a record stores with its recomputation.

Each test edits one stored figure of a real record (one leaf: an int, a ratio's exact value
or its float twin, a boundary's ``now``, a verdict, a geometry field, ...) and checks that
recheck names it with the stored and the recomputed value, or that loading the record
refuses the edit naming the field. The fields are generated from the records themselves:
a figure added to the record later is covered without touching this file.

Records: the write-up's case (``kvgate demo``), the same case with a concurrency fit at
2, 4 and 8 sequences (the fit section), and a failed workload (``no_verdict_reason``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest

from kvgate.cli import main
from kvgate.gate import source_case as case
from kvgate.gate.digest import NOT_DERIVED, derived_figures
from kvgate.gate.record import load_record, recheck_path
from kvgate.gate.schema import RecordError
from kvgate.options import EngineOptions, GateOptions
from kvgate.session import decide_from_options

MIB = 2**20
VERDICTS = ["not-a-bottleneck", "pays", "pays-if", "insufficient", "no-verdict"]
OTHER = {"below": "above", "above": "below", "fit": "kv-only", "kv-only": "fit", "ok": "no-verdict",
         "no-verdict": "ok", "never": 123}


def _records() -> dict[str, dict[str, Any]]:
    engine = EngineOptions(model=case.MODEL, kv_format=case.KV_FORMAT, max_seq=case.MAX_SEQ, slots=case.SLOTS_TARGET)
    gate = GateOptions(slots_target=case.SLOTS_TARGET, slots_measured=case.SLOTS_MEASURED)
    m = case.measurement()
    demo = decide_from_options(engine, gate, m, notes=list(case.ERRATA)).record
    # peaks at 2, 4 and 8 sequences growing by 450 and 420 MiB per sequence (above S = 396 MiB)
    p4 = m.peak_used_bytes
    pts = [(2, p4 - 2 * 450 * MIB), (4, p4), (8, p4 + 4 * 420 * MIB)]
    fit = decide_from_options(engine, replace(gate, slots_target=16), m, fit_points=pts).record
    failed = replace(m, status="failed", basis=replace(m.basis, exit_code=3))
    no_verdict = decide_from_options(engine, gate, failed).record
    return {"demo": demo, "fit": fit, "no-verdict": no_verdict}


RECORDS = _records()


def _leaves(obj: Any, loc: tuple = ()) -> list[tuple[tuple, Any]]:
    """Every JSON leaf under ``obj`` with its location (keys and indices)."""
    if isinstance(obj, dict) and obj:
        return [x for k, v in obj.items() for x in _leaves(v, (*loc, k))]
    if isinstance(obj, list) and obj:
        return [x for i, v in enumerate(obj) for x in _leaves(v, (*loc, i))]
    return [(loc, obj)]


def _edit(value: Any, loc: tuple) -> Any:
    """A different value of the same kind (one the schema may still accept)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 + 1
    if value is None:
        return 1 if str(loc[-1]).endswith("bytes") or loc[-1] in ("value", "now") else "edited"
    if value in VERDICTS:
        return VERDICTS[(VERDICTS.index(value) + 1) % len(VERDICTS)]
    if value in OTHER:
        return OTHER[value]
    if loc[-1] == "exact":
        return str(Fraction(value) + 1)
    return value + " (edited)"


CASES = [(name, loc) for name, rec in RECORDS.items() for loc, _ in _leaves(rec)
         if loc[0] not in NOT_DERIVED]


def test_every_derived_section_is_covered():
    """The records carry every derived section, and an unedited record rechecks clean."""
    keys = {loc[0] for _, loc in CASES}
    assert {"status", "geometry", "verdicts", "projection", "candidates", "table", "sensitivity", "boundaries",
            "no_verdict_reason"} <= keys
    assert any(loc[:2] == ("projection", "fit") for name, loc in CASES if name == "fit")
    assert len(CASES) > 200


@pytest.mark.parametrize("name", list(RECORDS))
def test_an_unedited_record_rechecks_clean(tmp_path, name):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(RECORDS[name]))
    [res] = recheck_path(path)
    assert res["status"] == "same" and res["differences"] == [] and res["digest"]["matches"] is True


@pytest.mark.parametrize("name,loc", CASES, ids=[f"{n}:{'.'.join(map(str, loc))}" for n, loc in CASES])
def test_an_edited_figure_is_reported(tmp_path, capsys, name, loc):
    rec = copy.deepcopy(RECORDS[name])
    parent = rec
    for k in loc[:-1]:
        parent = parent[k]
    old = parent[loc[-1]]
    parent[loc[-1]] = _edit(old, loc)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rec))
    try:
        load_record(path)
    except RecordError as exc:  # refused, naming the field
        assert str(loc[0]) in exc.message, exc.message
        return
    [res] = recheck_path(path)
    assert res["status"] == "changed" and res["exit_code"] == 4
    assert res["digest"]["matches"] is True  # the inputs are untouched: the difference is the figure
    # every figure the edit changed is named, with the stored and the recomputed value
    original, edited = derived_figures(RECORDS[name]), derived_figures(rec)
    changed = {p for p in set(original) | set(edited) if original.get(p, "∅") != edited.get(p, "∅")
               or type(original.get(p)) is not type(edited.get(p))}
    assert changed
    reported = {d["field"]: d for d in res["differences"]}
    assert changed <= set(reported), sorted(changed - set(reported))
    for p in changed & set(original):
        if p in edited and type(edited[p]) is type(original[p]):
            assert reported[p]["recorded"] == edited[p] and reported[p]["recomputed"] == original[p]
    # and the command says it, path by path
    assert main(["recheck", str(path)]) == 4
    out = capsys.readouterr().out
    for p in changed:
        assert f"  {p}: " in out, out
    stored_v, new_v = rec.get("verdicts"), RECORDS[name]["verdicts"]
    flat = " ".join(out.split())  # the sentence as said, unwrapped from 100 columns
    assert ("CHANGED from the stored verdicts" in flat) == (stored_v != new_v)


def test_a_digest_only_change_says_what_changed(tmp_path, capsys):
    """An edit of an input that moves no derived figure (the model's source text) changes
    only the digest: recheck says so, with both digests, and does not claim the verdicts
    changed."""
    rec = copy.deepcopy(RECORDS["demo"])
    rec["inputs"]["model"]["notes"].append("edited")
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rec))
    [res] = recheck_path(path)
    assert res["status"] == "changed" and res["differences"] == [] and res["digest"]["matches"] is False
    assert main(["recheck", str(path)]) == 4
    out = " ".join(capsys.readouterr().out.split())  # unwrapped from 100 columns
    assert "CHANGED from the stored verdicts" not in out
    assert f"digest stored {rec['digest']} → recomputed {res['digest']['recomputed']}" in out
