"""Records: exclusive creation (two writers of one name: exactly one wins) and ``--force``
all-or-nothing for a JSON + Markdown pair (kvgate.atomicio.write_files_atomic)."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from kvgate import atomicio
from kvgate.atomicio import OutputExistsError, write_files_atomic
from kvgate.errors import KvgateError


def _another_writer_first(monkeypatch, name: str) -> None:
    """Make a second writer create ``name`` right after the first one's existence check
    (just before the commit), as a concurrent process can."""
    real_replace, real_link = os.replace, os.link

    def racing(fn):
        def wrapped(src, dst, *a, **k):
            if os.path.basename(str(dst)) == name and not os.path.exists(dst):
                with open(dst, "w") as fh:
                    fh.write("THE OTHER WRITER")
            return fn(src, dst, *a, **k)
        return wrapped

    monkeypatch.setattr(atomicio.os, "replace", racing(real_replace))
    monkeypatch.setattr(atomicio.os, "link", racing(real_link))


def test_a_writer_that_loses_the_race_fails_and_leaves_the_winners_file(tmp_path, monkeypatch):
    js, md = tmp_path / "r.json", tmp_path / "r.md"
    _another_writer_first(monkeypatch, "r.json")
    with pytest.raises(OutputExistsError, match="appeared while writing"):
        write_files_atomic([(js, "{}\n"), (md, "# mine\n")])
    assert js.read_text() == "THE OTHER WRITER"  # not replaced
    assert not md.exists()  # and no half pair of ours
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temporary files left


def test_a_race_on_the_second_file_undoes_the_first(tmp_path, monkeypatch):
    js, md = tmp_path / "r.json", tmp_path / "r.md"
    _another_writer_first(monkeypatch, "r.md")
    with pytest.raises(OutputExistsError):
        write_files_atomic([(js, "{}\n"), (md, "# mine\n")])
    assert not js.exists() and md.read_text() == "THE OTHER WRITER"


def _write(args):
    path, tag = args
    try:
        write_files_atomic([(path + ".json", tag), (path + ".md", tag)])
        return tag
    except OutputExistsError:
        return None


def test_writers_racing_in_processes_exactly_one_wins(tmp_path):
    base = str(tmp_path / "rec")
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(4) as pool:
        results = pool.map(_write, [(base, f"writer {i}") for i in range(8)])
    winners = [r for r in results if r]
    assert len(winners) == 1
    assert open(base + ".json").read() == open(base + ".md").read() == winners[0]


def test_force_whose_markdown_write_fails_keeps_the_old_json(tmp_path, monkeypatch):
    js, md = tmp_path / "r.json", tmp_path / "r.md"
    js.write_text("OLD JSON")
    md.write_text("OLD MD")
    real = os.replace

    def fail_on_md(src, dst, *a, **k):
        if str(dst).endswith("r.md"):
            raise OSError(28, "No space left on device")
        return real(src, dst, *a, **k)

    monkeypatch.setattr(atomicio.os, "replace", fail_on_md)
    with pytest.raises(KvgateError, match="No space left"):
        write_files_atomic([(js, "NEW JSON"), (md, "NEW MD")], force=True)
    monkeypatch.undo()
    assert js.read_text() == "OLD JSON" and md.read_text() == "OLD MD"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.md"]  # backups and temps removed


def test_force_onto_a_directory_touches_nothing(tmp_path):
    js, md = tmp_path / "r.json", tmp_path / "r.md"
    js.write_text("OLD JSON")
    md.mkdir()
    with pytest.raises(KvgateError, match="is a directory"):
        write_files_atomic([(js, "NEW JSON"), (md, "NEW MD")], force=True)
    assert js.read_text() == "OLD JSON"


def test_force_replaces_both_and_leaves_no_backup(tmp_path):
    js, md = tmp_path / "r.json", tmp_path / "r.md"
    js.write_text("OLD JSON")
    write_files_atomic([(js, "NEW JSON"), (md, "NEW MD")], force=True)
    assert js.read_text() == "NEW JSON" and md.read_text() == "NEW MD"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.md"]
