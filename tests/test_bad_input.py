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
        (lambda r: r["inputs"]["scenario"].__setitem__("peak_bytes", float("nan")), "NaN is not a JSON number"),
        (lambda r: r["inputs"]["scenario"].__setitem__("peak_bytes", 1.5), "inputs.scenario.peak_bytes"),
        (lambda r: r["inputs"]["scenario"].__setitem__("peak_bytes", 2 * r["inputs"]["scenario"]["total_bytes"]),
         "above total"),
        (lambda r: r["inputs"]["model"].__setitem__("layers", []), "inputs.model.layers"),
        (lambda r: r["inputs"]["model"]["layers"][0].__setitem__("head_dim", "x"), "head_dim"),
        (lambda r: r["inputs"]["scenario"].__setitem__("margin", "abc"), "inputs.scenario.margin"),
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
    assert main(["recheck", str(path)]) == 4  # EXIT_CHANGED
    out = " ".join(capsys.readouterr().out.split())  # unwrapped from 100 columns
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


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["gate", "--model", "qwen3-0.6b", "--max-seq", "1024", "--slots-measured", "1000", "--slots", "4",
          "--total", "24GiB", "--idle", "500MiB", "--peak", "1GiB", "--no-record"], "the peak cannot have held them"),
        (GATE + ["--total", "32607MiB", "--peak", "19625MiB", "--weights-policy", "half-free", "--no-record"],
         "needs the idle used memory"),
        (GATE + ["--total", "32607MiB", "--peak", "19625MiB", "--weights-max", "10GiB", "--no-record"],
         "--weights-max applies to --weights-policy half-free"),
        (GATE + ["--total", "32607MiB", "--peak", "19625MiB", "--rate", "2", "--no-record"], "--rate applies to --trace"),
    ],
)
def test_gate_inputs_that_cannot_hold(argv, needle, capsys):
    code, lines, err = _err(argv, capsys)
    assert code == 2 and len(lines) == 1 and needle in lines[0], err


@pytest.mark.parametrize(
    "cfg,needle",
    [
        ({**BASE, "model_type": "deepseek_v3", "qk_rope_head_dim": 64}, "'kv_lora_rank'"),
        ({**BASE, "model_type": "gemma3_text", "sliding_window_pattern": 6}, "'sliding_window'"),
        ({**BASE, "model_type": "gemma2"}, "'sliding_window'"),
    ],
)
def test_architectures_take_transformers_defaults_and_say_so(tmp_path, capsys, cfg, needle):
    """A field the file leaves out is the config class's default (issue 10: transformers'
    classes are the truth), never a silent guess: the output names the field it took."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code = main(["geometry", str(path), "--max-seq", "1024"])
    out = capsys.readouterr().out
    assert code == 0
    notes = out.split("notes", 1)[1]
    assert needle.strip("'") in notes and "defaults" in notes, out


def test_jamba_without_a_pattern_uses_transformers_defaults():
    from kvgate.model import spec_from_config

    cfg = {"model_type": "jamba", "num_hidden_layers": 16, "num_attention_heads": 8, "num_key_value_heads": 2,
           "hidden_size": 512, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2}
    spec = spec_from_config(cfg, name="j", source="t")
    kinds = [layer.kind for layer in spec.layers]
    assert [i for i, k in enumerate(kinds) if k == "full"] == [4, 12]  # i % 8 == 4
    assert any("JambaConfig defaults" in n for n in spec.notes)


def test_paged_layouts_show_no_windows_full_row(capsys):
    assert main(["geometry", "qwen3-0.6b", "--max-seq", "4096", "--layout", "vllm"]) == 0
    assert "windows full" not in capsys.readouterr().out
    assert main(["geometry", "gpt-oss-20b", "--max-seq", "8192"]) == 0
    out = capsys.readouterr().out
    assert "windows full" in out and "24,576 B" in out


def test_recheck_domain_without_measurement(tmp_path, capsys):
    path = _edited_record(tmp_path, lambda r: None)
    capsys.readouterr()
    code, lines, _ = _err(["recheck", str(path), "--domain", "gpu:5"], capsys)
    assert code == 2 and "--domain" in lines[0]


# --------------------------------------------------------------------------- issue 11 #10

def _run(argv, capsys):
    """main() must return (no exception escapes: a traceback is a failed test)."""
    code = main(argv)
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err
    return code, cap


def test_config_nested_100000_deep_is_refused(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    code, cap = _run(["geometry", str(cfg), "--max-seq", "1024"], capsys)
    assert code == 2 and "nested too deeply" in cap.err and str(cfg) in cap.err


def test_config_with_an_integer_of_5000_digits_is_refused(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"num_hidden_layers": ' + "9" * 5000 + ', "num_attention_heads": 8}')
    code, cap = _run(["geometry", str(cfg), "--max-seq", "1024"], capsys)
    assert code == 2 and "more than 4,300 digits" in cap.err


@pytest.mark.parametrize("flag", ["--total", "--peak", "--idle"])
def test_80_digit_byte_count_is_refused(capsys, flag):
    vals = {"--total": "32607MiB", "--peak": "19625MiB", "--idle": "936MiB"}
    vals[flag] = "9" * 80 + "TiB"
    argv = GATE + [x for k, v in vals.items() for x in (k, v)] + ["--no-record"]
    code, cap = _run(argv, capsys)
    assert code == 2 and "2**64" in cap.err and "characters" in cap.err


def test_non_utf8_model_path_writes_json_and_md_or_neither(tmp_path, capsys):
    import os
    import shutil

    from kvgate.model import __file__ as model_init

    d = os.path.join(os.fsencode(tmp_path), b"m\xff")
    os.mkdir(d)
    shutil.copy(os.path.join(os.path.dirname(model_init), "presets", "qwen3-0.6b.json"), os.path.join(d, b"config.json"))
    out = tmp_path / "recs"
    code, cap = _run(["gate", "--model", os.fsdecode(d), "--max-seq", "1024", "--slots", "8", "--total", "24GiB",
                      "--peak", "10GiB", "--out", str(out)], capsys)
    assert code == 0, cap.err
    assert "m\\udcff" in cap.out  # the undecodable byte shown as an escape
    js, md = sorted(out.glob("*.json")), sorted(out.glob("*.md"))
    assert len(js) == 1 and len(md) == 1 and js[0].stem == md[0].stem
    md[0].read_bytes().decode("utf-8")  # valid UTF-8
    assert json.loads(js[0].read_text())["inputs"]["model"]["name"] == "m\udcff"


def test_record_pair_is_both_or_neither(tmp_path, monkeypatch):
    """The .md failing after the .json was written must take the .json away again."""
    from kvgate import atomicio
    from kvgate.atomicio import write_files_atomic

    real = atomicio.os.link  # the commit of a new file: exclusive creation by hard link
    calls = []

    def flaky(src, dst):
        calls.append(dst)
        if str(dst).endswith(".md"):
            raise FileExistsError(17, "File exists")  # another writer took the .md name first
        return real(src, dst)

    monkeypatch.setattr(atomicio.os, "link", flaky)
    from kvgate.errors import KvgateError

    with pytest.raises(KvgateError, match="appeared while writing"):
        write_files_atomic([(tmp_path / "r.json", "{}"), (tmp_path / "r.md", "# r")])
    assert len(calls) == 2 and sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("n", [10**9, -1180591620717411303424, 10**30])
def test_an_implausible_layer_count_is_refused_before_any_list_is_built(n):
    """``num_hidden_layers`` of 10^9 used to build a 10^9-entry list (gigabytes) and a huge
    negative one an OverflowError; both are a ConfigError naming the field (found by the
    config fuzz)."""
    from kvgate.model.config import spec_from_config
    from kvgate.model.spec import ConfigError

    cfg = {"model_type": "llama", "num_hidden_layers": n, "num_attention_heads": 8, "num_key_value_heads": 8,
           "head_dim": 64, "hidden_size": 512, "max_position_embeddings": 4096}
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        spec_from_config(cfg, name="t", source="t")
