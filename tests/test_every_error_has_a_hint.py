"""Every input error is an ``ERROR:`` line and a ``HINT:`` line, exit 2, and under ``--json``
one document whose ``hint`` is a sentence. The inputs are the ones that printed an ERROR
with no HINT when kvgate was tried as a new user would (missing, empty, binary, cut-short
files; a folder with no config.json; an impossible TP split; a replay of no slots)."""

import json
from pathlib import Path

import pytest

from kvgate.cli import main

ROOT = Path(__file__).resolve().parents[1]
AZURE = str(ROOT / "examples" / "traces" / "azure_conv_first1000.csv")


def _files(tmp_path: Path) -> None:
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "binary.json").write_bytes(bytes(range(128, 256)) * 8)
    (tmp_path / "cut.json").write_text('{"num_hidden_layers": 4, "hidden_')
    (tmp_path / "folder").mkdir()
    (tmp_path / "binary.csv").write_bytes(b"\x8d\xcau\xec" + bytes(range(128, 256)) * 8)


CASES = [
    (["fit", "missing.json", "--gpu", "H100"], "model config not found"),
    (["fit", "empty.json", "--gpu", "H100"], "is not valid JSON"),
    (["fit", "cut.json", "--gpu", "H100"], "is not valid JSON"),
    (["weights", "binary.json"], "is not UTF-8 text"),
    (["fit", "folder", "--gpu", "H100"], "has no config.json"),
    (["geometry", "qwen3-4b", "--max-seq", "8192", "--tp", "3"], "does not divide the 8 KV heads"),
    (["replay", "--model", "qwen3-4b", "--max-seq", "8192", "--trace", AZURE, "--slots", "0"], "--slots must be"),
    (["recheck", "missing.json"], "decision record not found"),
    (["import-log", "missing.log"], "engine log not found"),
    (["tier", "--trace", "missing.jsonl", "--model", "llama-3.1-8b"], "trace file not found"),
    (["tier", "--trace", "folder", "--model", "llama-3.1-8b"], "trace path is a directory"),
    (["replay", "--model", "qwen3-4b", "--max-seq", "8192", "--trace", "missing.csv", "--slots", "4"],
     "trace file not found"),
    # was "cannot read trace binary.csv: 'utf-8' codec can't decode byte 0x8d in position 0: ..."
    (["replay", "--model", "qwen3-4b", "--max-seq", "8192", "--trace", "binary.csv", "--slots", "4"],
     "trace binary.csv is not UTF-8 text (byte 0)"),
]


@pytest.mark.parametrize("argv,needle", CASES, ids=[" ".join(a[:2]) + f" [{n}]" for a, n in CASES])
def test_error_has_a_hint(argv, needle, tmp_path, monkeypatch, capsys):
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and lines[0].startswith("ERROR: ") and needle in lines[0], err
    assert len(lines) == 2 and lines[1].startswith("HINT: ") and len(lines[1]) > len("HINT: ") + 10, err

    assert main([*argv, "--json"]) == 2
    out, err = capsys.readouterr()
    doc = json.loads(out)  # one document, nothing else on stdout
    assert doc["exit_code"] == 2 and needle in doc["error"]
    assert isinstance(doc["hint"], str) and doc["hint"] == err.splitlines()[1].removeprefix("HINT: ")


def test_tp_hint_lists_only_sizes_that_split_the_heads(capsys):
    """The hint's sizes are the ones geometry accepts: each of them gives a geometry."""
    assert main(["geometry", "qwen3-4b", "--max-seq", "8192", "--tp", "3"]) == 2
    hint = capsys.readouterr().err.splitlines()[1]
    sizes = [int(s) for s in hint.rsplit(":", 1)[1].split(",")]
    assert sizes
    for tp in sizes:
        assert main(["geometry", "qwen3-4b", "--max-seq", "8192", "--tp", str(tp)]) == 0, tp
    capsys.readouterr()


LOG = str(ROOT / "examples" / "logs" / "vllm_0.8.5_qwen3-30b-a3b_tp4.log")


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
@pytest.mark.parametrize("argv", [["import-log", LOG, "--out"], ["demo", "--out"]], ids=["import-log", "demo"])
def test_out_to_a_directory_says_directory_not_force(argv, force, tmp_path, capsys):
    """``--out DIR`` said "exists; pass --force", and ``--force`` then failed on the directory:
    the first answer names the directory and the hint a file in it; nothing is written."""
    d = tmp_path / "records.json"
    d.mkdir()
    assert main([*argv, str(d), *force]) == 2
    err = " ".join(capsys.readouterr().err.split())  # unwrapped from 100 columns (a long tmp path)
    assert err == f"ERROR: {d} is a directory, not a file HINT: give a file name, e.g. {d / 'out.json'}", err
    assert list(d.iterdir()) == []


@pytest.mark.parametrize("argv,said", [
    (["fit", "qwen3-4b", "--total", "24Gib"], "upper-case B"),
    (["fit", "qwen3-4b", "--gpu", "H100", "--weights-bytes", "1PB"], "KiB/MiB/GiB/TiB"),
    (["fit", "qwen3-4b", "--total=-5GiB"], "more than 0 bytes"),
])
def test_a_refused_flag_value_keeps_its_own_hint(argv, said, capsys):
    """argparse passes a converter's message on, not its hint: the hint was "kvgate fit --help
    lists the options" alone, and the one that says what to write was lost."""
    with pytest.raises(SystemExit) as e:  # a usage error leaves through argparse's exit
        main(argv)
    err = capsys.readouterr().err.splitlines()
    assert e.value.code == 2 and err[0].startswith("ERROR: argument --") and said in err[1], err
    with pytest.raises(SystemExit):
        main([*argv, "--json"])
    assert said in json.loads(capsys.readouterr().out)["hint"]



def test_a_refused_write_hints_where_to_write(tmp_path, capsys):
    """A record under a path whose folder is a file cannot be written: say so, and where to."""
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    out = tmp_path / "notes.txt" / "record.json"
    assert main(["demo", "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"ERROR: cannot write {out}") and err[1].startswith("HINT: give a path in a folder"), err
    assert not out.exists()


def test_errors_on_a_terminal_wrap_to_100_columns_and_stay_one_line_in_a_pipe(monkeypatch, capsys):
    """On a terminal an ERROR/HINT pair wraps at 100 columns, continuation under the text; piped
    (here, pytest's capture), each stays one line for grep."""
    import io
    import sys

    from kvgate.cli import main

    assert main(["fit", "nosuchmodel", "--gpu", "H100"]) == 2
    piped = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in piped] == ["ERROR", "HINT"] and len(piped[1]) > 100

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["fit", "nosuchmodel", "--gpu", "H100"]) == 2
    lines = tty.getvalue().splitlines()
    assert lines[0].startswith("ERROR: ") and lines[1].startswith("HINT: ") and len(lines) > 2
    assert all(len(line) <= 100 for line in lines)
    assert all(line.startswith("      ") for line in lines[2:])
    assert " ".join(x.strip() for x in lines[1:]) == piped[1]
