"""``recheck`` compares the derived figures stored among a record's inputs and measurement
(issue 28): an edit of ``measurement.headroom_bytes`` or of a ratio's float twin keeps the
digest (taken over what the inputs parse to) but is caught, exit 4, named."""

from __future__ import annotations

import json

import pytest

from kvgate.cli import main

GATE = ["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--kv-format", "int8-f32scale", "--slots", "4",
        "--total", "32607MiB", "--peak", "19625MiB"]


@pytest.fixture
def record(tmp_path, capsys):
    out = tmp_path / "rec.json"
    assert main([*GATE, "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def _recheck(path, capsys):
    code = main(["recheck", str(path), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_unedited_record_rechecks_unchanged(record, capsys):
    code, doc = _recheck(record, capsys)
    res = doc[0] if isinstance(doc, list) else doc
    assert code == 0 and res["differences"] == []


@pytest.mark.parametrize("path,value", [
    (("measurement", "headroom_bytes"), 1),
    (("inputs", "scenario", "margin", "float"), 0.9),
    (("inputs", "sensitivity_threshold", "float"), 0.9),
    (("measurement", "headroom_bytes"), 13_612_613_633),  # off by one byte
])
def test_edit_of_a_stored_derived_figure_is_caught(record, tmp_path, path, value, capsys):
    doc = json.loads(record.read_text())
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    code, out = _recheck(edited, capsys)
    res = out[0] if isinstance(out, list) else out
    field = ".".join(path)
    assert code == 4 and res["stale"] is True
    assert [d["recorded"] for d in res["differences"] if d["field"] == field] == [value]


def test_stored_differences_ignore_fields_a_side_lacks():
    from kvgate.gate.digest import stored_differences

    assert stored_differences({"inputs": {"a": 1}}, {"inputs": {"a": 1, "b": 2}, "measurement": {"c": 3}}) == []
    assert stored_differences({"inputs": {"a": True}}, {"inputs": {"a": 1}}) != []
