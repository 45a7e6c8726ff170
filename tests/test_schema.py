"""Typed records: the published JSON Schema, unknown fields, ratios, digests."""

import json
from fractions import Fraction
from pathlib import Path

import pytest

from kvgate.cli import main
from kvgate.gate.digest import canonical_json, inputs_digest
from kvgate.gate.record import load_measurement, load_record, recheck_exit_code, recheck_path
from kvgate.gate.schema import RecordError, json_schemas, ratio

ROOT = Path(__file__).resolve().parents[1]


def demo(tmp_path, name="rec.json"):
    assert main(["demo", "--out", str(tmp_path / name)]) == 0
    return tmp_path / name


def test_committed_schema_equals_the_generated_one():
    """docs/schema/ is generated from the models: regenerate with
    `python -m kvgate.gate.schema --write docs/schema` when a model changes."""
    for name, text in json_schemas().items():
        assert (ROOT / "docs/schema" / name).read_text(encoding="utf-8") == text, name


def test_schema_forbids_unknown_fields_everywhere_it_types():
    sch = json.loads(json_schemas()["decision-2.schema.json"])
    assert sch["additionalProperties"] is False
    for name in ("DecisionInputsModel", "ScenarioInputs", "Layer", "Ratio", "CandidateOut", "Basis"):
        assert sch["$defs"][name]["additionalProperties"] is False, name


def test_unknown_field_refused_with_its_name(tmp_path):
    path = demo(tmp_path)
    doc = json.loads(path.read_text())
    doc["inputs"]["scenario"]["peak_bytez"] = 1
    path.write_text(json.dumps(doc))
    with pytest.raises(RecordError, match=r"inputs\.scenario\.peak_bytez: unknown field"):
        load_record(path)


@pytest.mark.parametrize("field,value,needle", [
    ("slots_target", "8", "inputs.scenario.slots_target"),
    ("slots_target", 8.0, "inputs.scenario.slots_target"),
    ("slots_target", True, "inputs.scenario.slots_target"),
    ("slots_target", -1, "inputs.scenario.slots_target"),
    ("peak_bytes", 10**80, "inputs.scenario.peak_bytes"),
    ("max_seq", 0, "inputs.scenario.max_seq"),
])
def test_int_fields_are_typed(tmp_path, field, value, needle):
    path = demo(tmp_path)
    doc = json.loads(path.read_text())
    doc["inputs"]["scenario"][field] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(RecordError, match=needle.replace(".", r"\.")):
        load_record(path)


def test_every_ratio_is_exact_and_float(tmp_path):
    rec = load_record(demo(tmp_path))
    ratios = [rec["inputs"]["scenario"]["margin"], rec["inputs"]["sensitivity_threshold"],
              rec["sensitivity"]["value"], rec["sensitivity"]["threshold"]]
    ratios += [r["share"] for r in rec["table"]] + [c["reclaim_share"] for c in rec["candidates"]]
    for r in ratios:
        assert set(r) == {"exact", "float"} and float(Fraction(r["exact"])) == r["float"]
    # one slot of the write-up's case: 396 MiB / 32,607 MiB
    slot = next(r for r in rec["table"] if r["key"] == "slot")
    assert slot["share"] == {"exact": "44/3623", "float": 396 / 32607}  # 396/32607 reduced by 9
    assert ratio(Fraction(1, 10)) == {"exact": "1/10", "float": 0.1}


def test_digest_is_sha256_of_canonical_inputs(tmp_path):
    import hashlib

    rec = load_record(demo(tmp_path))
    body = json.dumps({"inputs": rec["inputs"], "measurement": rec["measurement"]}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=True)
    assert rec["digest"] == rec["digest_recorded"] == "sha256:" + hashlib.sha256(body.encode()).hexdigest()
    assert canonical_json({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert inputs_digest(rec) == rec["digest"]


def test_kv_heads_edit_is_reported_as_changed(tmp_path):
    """Issue 11 #8: one layer's KV heads 4 → 400 printed "recomputed, unchanged"."""
    path = demo(tmp_path)
    doc = json.loads(path.read_text())
    assert doc["inputs"]["model"]["layers"][0]["num_kv_heads"] == 4
    doc["inputs"]["model"]["layers"][0]["num_kv_heads"] = 400
    path.write_text(json.dumps(doc))
    [res] = recheck_path(path)
    assert res["status"] == "changed" and res["exit_code"] == 4 and res["stale"] is True
    assert res["digest"]["matches"] is False
    fields = {d["field"]: d for d in res["differences"]}
    # sensitivity by hand: S' = 47·8192·1056 + 8192·(2·400·128 + 8·400) bytes;
    # N·S'/H with N = 8, H = 12,982 MiB: 24.4% → 74.7%
    s_new = 47 * 8192 * 1056 + 8192 * (2 * 400 * 128 + 8 * 400)
    sens = Fraction(8 * s_new, 12_982 * 2**20)
    assert round(float(sens) * 100, 1) == 74.7
    assert fields["sensitivity.value"]["recomputed"] == f"{sens.numerator}/{sens.denominator}"
    assert fields["geometry.slot_bytes"] == {"field": "geometry.slot_bytes", "recorded": 396 * 2**20,
                                             "recomputed": s_new}
    for b in ("total_bytes", "max_seq", "slots", "weights_delta_bytes"):
        assert f"boundaries.{b}" in fields  # every boundary moved


def test_recheck_directory_names_every_bad_file_and_goes_on(tmp_path):
    demo(tmp_path, "a.json")
    (tmp_path / "b.json").write_text("{not json")
    (tmp_path / "c.json").write_bytes(b"\xff\xfe{}")
    (tmp_path / "d.json").write_text(json.dumps({"schema": "kvgate.decision/2", "inputs": {}}))
    demo(tmp_path, "e.json")
    (tmp_path / "f.json").write_text(json.dumps({"schema": "kvgate.measurement/1", "domains": []}))
    res = recheck_path(tmp_path)
    by = {Path(r["record"]).stem: r for r in res}
    assert [by[n]["status"] for n in "abcdef"] == [
        "same", "error", "error", "error", "same", "skipped"], {n: by[n]["status"] for n in by}
    assert "line 1 column 2" in by["b"]["error"] and "b.json" in by["b"]["error"]
    assert "not UTF-8" in by["c"]["error"]
    assert "inputs.model" in by["d"]["error"]
    assert recheck_exit_code(res) == 2


def test_load_measurement_validates_fields(tmp_path):
    from kvgate.gate import source_case as case
    from kvgate.measure.measurement import measurement_file

    doc = measurement_file([case.measurement()])
    m, _ = load_measurement(doc)
    assert m.total_bytes == case.measurement().total_bytes
    doc["domains"][0]["peak_used_byte"] = 1
    with pytest.raises(RecordError, match=r"domains\.0\.peak_used_byte: unknown field"):
        load_measurement(doc)
    doc = measurement_file([case.measurement()])
    doc["domains"][0]["total_bytes"] = "32GiB"
    with pytest.raises(RecordError, match=r"domains\.0\.total_bytes"):
        load_measurement(doc)
