"""The CLI: --json everywhere, and every bad input of issue 2 is one clear line, exit ≠ 0,
and nothing written."""

import json

import pytest

from kvgate.cli import main

GATE = ["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--kv-format", "int8-f32scale",
        "--slots-measured", "4", "--slots", "8"]


def run(argv, capsys):
    code = main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_gate_explicit_numbers(tmp_path, capsys):
    code, out, err = run(GATE + ["--total", "32607MiB", "--idle", "936MiB", "--peak", "19625MiB",
                                 "--out", str(tmp_path / "r.json")], capsys)
    assert code == 0, err
    assert "not-a-bottleneck" in out and "23,565.6 MiB" in out and "29,233" in out


def test_gate_json(tmp_path, capsys):
    code, out, _ = run(GATE + ["--total", "32607MiB", "--peak", "19625MiB", "--no-record", "--json"], capsys)
    assert code == 0
    d = json.loads(out)
    assert d["verdicts"]["paging"] == "not-a-bottleneck"
    assert d["geometry"]["slot_bytes"] == 415_236_096
    assert d["boundaries"]["slots"]["value"] == 28
    assert d["measurement"]["idle_used_bytes"] is None  # not given → not available, not 0


def test_geometry_json(capsys):
    code, out, _ = run(["geometry", "qwen3-30b-a3b", "--max-seq", "8192", "--kv-format", "int8-f32scale",
                        "--slots", "8", "--json"], capsys)
    assert code == 0
    d = json.loads(out)
    assert d["slot_bytes"] == 415_236_096 and d["slots_bytes"] == 8 * 415_236_096


def test_geometry_by_layer_and_tp(capsys):
    code, out, _ = run(["geometry", "qwen3-32b", "--max-seq", "1", "--tp", "4", "--by-layer", "--json"], capsys)
    d = json.loads(out)
    assert d["bytes_per_token"] == 65_536 and len(d["by_layer"]) == 64
    assert all(r["kv_heads_per_rank"] == 2 for r in d["by_layer"])


def test_every_command_takes_json():
    from kvgate.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        assert any("--json" in a.option_strings for a in p._actions), name


@pytest.fixture
def files(tmp_path):
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    missing_field = tmp_path / "nofield.json"
    missing_field.write_text(json.dumps({"num_attention_heads": 8, "hidden_size": 512}))
    return {"bad_json": str(bad_json), "missing_field": str(missing_field), "dir": tmp_path}


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["geometry", "/nonexistent/config.json", "--max-seq", "8"], "not found"),
        (["geometry", "{bad_json}", "--max-seq", "8"], "not valid JSON"),
        (["geometry", "{missing_field}", "--max-seq", "8"], "num_hidden_layers"),
        (["geometry", "qwen3-30b-a3b", "--max-seq", "8", "--kv-format", "int3"], "unknown KV format 'int3'"),
        (["geometry", "qwen3-30b-a3b", "--max-seq", "8", "--tp", "3"], "tensor parallel 3"),
        (["geometry", "no-such-model", "--max-seq", "8"], "no-such-model"),
        (GATE + ["--total", "0MiB", "--peak", "1MiB"], "must be positive"),
        (GATE + ["--total=-5GiB", "--peak", "1MiB"], "must not be negative"),
        (GATE + ["--total", "20GiB", "--peak", "21GiB"], "above total"),
        (GATE + ["--total", "32607 parsecs", "--peak", "1MiB"], "unknown unit"),
        (GATE + ["--total", "32607M", "--peak", "1MiB"], "ambiguous unit"),
        (GATE + ["--peak", "1MiB"], "--total and --peak"),
        (GATE, "give exactly one measurement"),
        (GATE + ["--measurement", "/nonexistent.json"], "not found"),
        (GATE + ["--measurement", "{bad_json}"], "not valid JSON"),
        (GATE + ["--total", "32GiB", "--peak", "1GiB", "--margin", "150%"], "--margin"),
        (GATE + ["--total", "32GiB", "--peak", "1GiB", "--candidates", "magic"], "unknown candidate"),
        (["recheck", "/nonexistent.json"], "not found"),
        (["recheck", "{bad_json}"], "not valid JSON"),
    ],
)
def test_bad_input_is_one_clear_line(argv, needle, files, capsys, monkeypatch):
    monkeypatch.chdir(files["dir"])
    before = set(files["dir"].rglob("*"))
    argv = [a.format(**files) for a in argv]
    code, out, err = run(argv, capsys)
    assert code == 2
    lines = [l for l in err.splitlines() if l.startswith("ERROR:")]
    assert len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err
    assert set(files["dir"].rglob("*")) == before  # nothing written


@pytest.mark.parametrize("argv", [["geometry", "qwen3-30b-a3b", "--max-seq", "0"], GATE[:-1] + ["-3"]])
def test_zero_or_negative_counts_rejected_by_parser(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "must be positive" in err or "must not be negative" in err


def test_gate_with_trace_uses_measured_reclaim(shared_dir, capsys):
    trace = shared_dir / "traces" / "AzureLLMInferenceTrace_code.csv"
    code, out, _ = run(GATE + ["--total", "32607MiB", "--peak", "19625MiB", "--no-record", "--json",
                               "--trace", str(trace)], capsys)
    assert code == 0
    d = json.loads(out)
    paging = next(c for c in d["candidates"] if c["name"] == "paging")
    tiering = next(c for c in d["candidates"] if c["name"] == "tiering")
    assert paging["measured"] is True and tiering["measured"] is False
    assert 0 < paging["reclaim_bytes"] < tiering["reclaim_bytes"] == 8 * 415_236_096
    assert any("Splitwise" in n for n in d["notes"])


def test_unknown_command_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bogus"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    for name in ("demo", "geometry", "gate", "recheck", "measure", "run", "import-smi", "replay", "weights"):
        assert f"'{name}'" in err


def test_no_command_prints_the_full_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(f"    {name} " in out for name in ("demo", "geometry", "gate", "replay", "run"))


@pytest.mark.parametrize("command", ["geometry", "gate", "replay", "run"])
def test_engine_flags_are_the_same_in_every_command(command):
    """Each flag is spelled once (kvgate.commands._args): every command that takes an
    engine takes the engines' spellings too."""
    from kvgate.cli import build_parser

    p = build_parser(command)
    sub = next(a for a in p._actions if a.dest == "command").choices[command]
    flags = {s for a in sub._actions for s in a.option_strings}
    assert {"--max-seq", "--max-model-len", "--max-num-seqs", "--kv-cache-dtype", "-tp", "--block-size",
            "-c", "-np", "-ctk", "-ctv", "-ub", "-fa", "--swa-full", "-kvu", "--kv-format", "--tp", "--layout"} <= flags
    assert ("--page-size" in flags) == (command != "geometry")


def test_geometry_kv_available_prints_the_token_line_once_when_releases_agree(capsys):
    # 10 GiB / (48 layers x 2 x 4 heads x 128 x 2 B x 16) = 6,826 blocks = 109,216 tokens under
    # both token rules for a one-group model: one line, saying both releases print it
    assert main(["geometry", "qwen3-30b-a3b", "--max-model-len", "8192", "--kv-available", "10GiB"]) == 0
    out = capsys.readouterr().out
    assert out.count("GPU KV cache size: 109,216 tokens") == 1
    assert 10 * 2**30 // (48 * 2 * 4 * 128 * 2 * 16) == 6_826


def test_max_model_len_reads_vllms_human_readable_integers(capsys):
    """``--max-model-len 32k`` is 32,000 and ``32K`` 32,768, as vLLM reads them, on every
    command that takes the engine flags (not only ``fit``)."""
    import json

    from kvgate.cli import main

    for text, want in (("32k", 32_000), ("32K", 32_768), ("32768", 32_768)):
        assert main(["geometry", "qwen3-32b", "--max-model-len", text, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["max_seq"] == want, doc.get("max_seq")
    try:
        code = main(["geometry", "qwen3-32b", "--max-model-len", "32q"])
    except SystemExit as exc:  # argparse's usage error
        code = exc.code
    assert code == 2
