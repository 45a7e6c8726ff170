"""Bad input found by trying to break kvgate: each is one ERROR line, exit 2, nothing written."""

import json

import pytest

from kvgate.cli import main

BASE = {"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64,
        "hidden_size": 512, "max_position_embeddings": 4096}
GATE = ["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--kv-format", "int8-f32scale",
        "--slots-measured", "4", "--slots", "8"]


def _err(argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err
    return code, [l for l in err.splitlines() if l.startswith("ERROR:")], err


@pytest.mark.parametrize(
    "change,needle",
    [
        ({"layer_types": ["full_attention"] * 3 + [{"a": 1}]}, "must be strings"),
        ({"layer_types": ["sliding_attention"] * 4, "sliding_window": "abc"}, "sliding window"),
        ({"v_head_dim": "abc"}, "v_head_dim"),
        ({"v_head_dim": -5}, "v_head_dim"),
        ({"v_head_dim": 1.5}, "v_head_dim"),
        ({"layer_types": ["sliding_attention"] * 4, "sliding_window": -4}, "sliding window"),
        ({"sliding_window": 1.5}, "sliding_window"),
        ({"num_hidden_layers": 10**9}, "not a plausible layer count"),
    ],
)
def test_config_values_are_checked(tmp_path, capsys, change, needle):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**BASE, **change}))
    code, lines, err = _err(["geometry", str(cfg), "--max-seq", "1024"], capsys)
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err


def _edited_record(tmp_path, edit):
    path = tmp_path / "r.json"
    assert main(["demo", "--out", str(path)]) == 0
    rec = json.loads(path.read_text())
    edit(rec)
    path.write_text(json.dumps(rec))
    return path


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda r: r["inputs"]["scenario"].__setitem__("peak_bytes", float("nan")), "peak_bytes"),
        (lambda r: r["inputs"]["scenario"].__setitem__("peak_bytes", 2 * r["inputs"]["scenario"]["total_bytes"]),
         "above total"),
        (lambda r: r["inputs"]["model"].__setitem__("layers", []), "no layers"),
        (lambda r: r["inputs"]["model"]["layers"][0].__setitem__("head_dim", "x"), "head_dim"),
        (lambda r: r["inputs"]["scenario"].__setitem__("margin", "abc"), "not a number"),
    ],
)
def test_hand_edited_records_are_refused(tmp_path, capsys, edit, needle):
    path = _edited_record(tmp_path, edit)
    capsys.readouterr()
    code, lines, err = _err(["recheck", str(path)], capsys)
    assert code == 2 and len(lines) == 1 and needle in lines[0], err


def test_recheck_reports_a_record_whose_verdicts_no_longer_hold(tmp_path, capsys):
    path = _edited_record(tmp_path, lambda r: r["verdicts"].__setitem__("paging", "pays"))
    capsys.readouterr()
    assert main(["recheck", str(path)]) == 1
    out = capsys.readouterr().out
    assert "CHANGED from the stored verdicts" in out


def test_idle_above_peak(capsys):
    code, lines, _ = _err(GATE + ["--total", "32607MiB", "--idle", "20000MiB", "--peak", "19625MiB", "--no-record"],
                          capsys)
    assert code == 2 and "idle used" in lines[0]


def test_argparse_errors_use_the_error_format(capsys):
    with pytest.raises(SystemExit) as e:
        main(["geometry", "qwen3-30b-a3b", "--max-seq", "0"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.startswith("ERROR: argument --max-seq: must be positive") and "HINT:" in err


def test_out_that_is_an_existing_file(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("keep me")
    code, lines, _ = _err(["demo", "--out", str(f)], capsys)
    assert code == 2 and "existing file" in lines[0]
    assert f.read_text() == "keep me"


def test_what_if_peak_above_total(tmp_path, capsys):
    path = _edited_record(tmp_path, lambda r: None)
    capsys.readouterr()
    code, lines, _ = _err(["recheck", str(path), "--peak", "40GiB"], capsys)
    assert code == 2 and "above the card's total" in lines[0]


def test_empty_candidate_list(capsys):
    code, lines, _ = _err(GATE + ["--total", "32607MiB", "--peak", "19625MiB", "--candidates", "", "--no-record"],
                          capsys)
    assert code == 2 and "no candidates" in lines[0]
