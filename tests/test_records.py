"""Decision records: atomic writes, no silent overwrite, recheck, basis discipline."""

import json
import os
from pathlib import Path

import pytest

from kvgate.atomicio import OutputExistsError, write_atomic
from kvgate.cli import main
from kvgate.gate import source_case as case
from kvgate.gate.record import load_record, recheck
from kvgate.measure.measurement import Basis, Measurement, measurement_file
from kvgate.units import GiB, MiB


def demo_record(tmp_path):
    assert main(["demo", "--out", str(tmp_path / "rec.json")]) == 0
    return tmp_path / "rec.json"


def test_demo_writes_json_and_markdown(tmp_path, capsys):
    path = demo_record(tmp_path)
    out = capsys.readouterr().out
    assert "not-a-bottleneck" in out and "record: " in out
    rec = load_record(path)
    assert rec["schema"] == "kvgate.decision/2" and rec["digest"] == rec["digest_recorded"]
    assert rec["verdicts"] == {"paging": "not-a-bottleneck", "tiering": "not-a-bottleneck"}
    md = path.with_suffix(".md").read_text()
    assert "| one slot S(8192) | 415,236,096 | 396 MiB | 1.2% |" in md
    assert "23,565.6 MiB" in md


def test_record_never_overwritten_without_force(tmp_path, capsys):
    path = demo_record(tmp_path)
    before = path.read_bytes()
    assert main(["demo", "--out", str(path)]) == 2
    assert "exists" in capsys.readouterr().err
    assert path.read_bytes() == before
    assert main(["demo", "--out", str(path), "--force"]) == 0


def test_atomic_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "x.json"

    class Boom(Exception):
        pass

    class BadData(bytes):
        pass

    write_atomic(target, "first")
    with pytest.raises(OutputExistsError):
        write_atomic(target, "second")
    assert target.read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temp files left


def test_default_directory_gets_unique_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--record"]) == 0
    assert main(["demo", "--record"]) == 0
    files = sorted((tmp_path / "kvgate-records").glob("*.json"))
    assert len(files) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["kvgate-records"]


def test_demo_writes_nothing_unless_asked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["demo"]) == 0
    assert "record:" not in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_gitignore_covers_the_records_folder_wherever_kvgate_runs():
    from kvgate.gate.record import DEFAULT_DIR

    lines = (Path(__file__).resolve().parents[1] / ".gitignore").read_text().splitlines()
    assert f"{DEFAULT_DIR}/" in lines  # unanchored: a records folder in any subfolder is ignored too


def test_recheck_reproduces_and_answers_what_ifs(tmp_path):
    rec = load_record(demo_record(tmp_path))
    same = recheck(rec)
    assert same["status"] == "same" and same["recorded"]["verdicts"] == rec["verdicts"]
    longer = recheck(rec, max_seq=40960)
    assert longer["status"] == "changed"
    assert longer["what_if"]["verdicts"] == {"paging": "pays-if", "tiering": "pays"}
    assert longer["what_if"]["geometry"]["slot_bytes"] == 1980 * MiB
    smaller = recheck(rec, total_bytes=23_565 * MiB)  # just below the boundary
    assert smaller["what_if"]["verdicts"]["paging"] == "pays-if"
    bigger = recheck(rec, total_bytes=23_566 * MiB)
    assert bigger["what_if"]["verdicts"]["paging"] == "not-a-bottleneck"
    assert recheck(rec, slots_target=29)["status"] == "changed"
    assert recheck(rec, slots_target=28)["status"] == "same"


def test_recheck_refuses_a_different_basis(tmp_path, capsys):
    path = demo_record(tmp_path)
    other = Measurement(total_bytes=24 * GiB, peak_used_bytes=18 * GiB, idle_used_bytes=GiB,
                        basis=Basis(device_name="NVIDIA GeForce RTX 4090", total_bytes=24 * GiB, sampler="nvml"))
    mfile = tmp_path / "m.json"
    mfile.write_text(json.dumps(measurement_file([other])))
    capsys.readouterr()
    assert main(["recheck", str(path), "--measurement", str(mfile)]) == 3
    out = capsys.readouterr().out
    assert "different basis: re-measure" in out
    assert "RTX 4090" in out and "device_name" in out


def test_recheck_applies_same_basis_measurement(tmp_path):
    rec = load_record(demo_record(tmp_path))
    m = case.measurement()
    m2 = Measurement(total_bytes=m.total_bytes, peak_used_bytes=28_000 * MiB, idle_used_bytes=m.idle_used_bytes,
                     basis=m.basis)
    res = recheck(rec, new_measurement=m2)
    assert res["status"] == "changed" and res["exit_code"] == 4
    assert res["what_if"]["verdicts"] == {"paging": "pays-if", "tiering": "pays"}


def test_recheck_directory_and_json(tmp_path, capsys):
    demo_record(tmp_path)
    capsys.readouterr()
    assert main(["recheck", str(tmp_path), "--total", "22GiB", "--json"]) == 4
    out = json.loads(capsys.readouterr().out)
    assert isinstance(out, list) and len(out) == 1  # one shape: a list, even for one file
    assert out[0]["what_if"]["verdicts"]["tiering"] == "pays"


def test_records_get_the_usual_file_mode(tmp_path):
    import stat

    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "r.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644


def test_readme_shows_the_demo_as_it_prints(capsys):
    """README.md's demo block is the real output (only the record's file name differs)."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("$ kvgate demo\n", 1)[1].split("```", 1)[0]
    assert main(["demo", "--no-record"]) == 0
    printed = capsys.readouterr().out
    strip = lambda t: [l for l in t.rstrip().splitlines() if not l.startswith("record:")]
    assert strip(block) == strip(printed)


@pytest.mark.parametrize("rel", ["examples/h200-static-cache/record.json", "examples/h200-int8-mirror/wl_record.json"])
def test_h200_example_records_recompute_to_their_verdicts(rel):
    """Records written on the H200 (benchmarks/RESULTS.md) recompute on CPU to what they store."""
    from pathlib import Path

    rec = load_record(Path(__file__).resolve().parents[1] / rel)
    res = recheck(rec)
    assert res["status"] == "same" and res["recorded"]["verdicts"] == rec["verdicts"]
    assert res["recorded"]["projection"]["fit"] is not None  # measured at 2 and 4 sequences
    assert rec["measurement"]["basis"]["device_name"] == "NVIDIA H200"


def test_a_late_basis_field_is_written_only_when_known(tmp_path):
    """``sampler_loop`` joined the basis after records were written: a record whose basis
    has none keeps the digest it was written with; a known loop is kept and digested."""
    from pathlib import Path

    assert "sampler_loop" not in Basis(sampler="nvml").to_dict()
    assert Basis(sampler="nvml", sampler_loop="python thread").to_dict()["sampler_loop"] == "python thread"
    rec = load_record(Path(__file__).resolve().parents[1] / "examples/h200-static-cache/record.json")
    assert "sampler_loop" not in json.dumps(rec["measurement"]) and rec["digest"] == rec["digest_recorded"]
    doc = json.loads((Path(__file__).resolve().parents[1] / "examples/h200-static-cache/record.json").read_text())
    doc["measurement"]["basis"]["sampler_loop"] = "python thread"
    edited = tmp_path / "r.json"
    edited.write_text(json.dumps(doc))
    again = load_record(edited)
    assert again["measurement"]["basis"]["sampler_loop"] == "python thread" and again["digest"] != again["digest_recorded"]
