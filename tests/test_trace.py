"""Trace loading (kvgate.replay.trace): column shapes, times, bad input, generators."""

from __future__ import annotations

import csv
import json
from datetime import datetime

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvgate.cli import main
from kvgate.replay.trace import (
    AZURE_ATTRIBUTION,
    Trace,
    TraceError,
    load_trace,
    poisson_arrivals,
    resample,
    synthetic_fixed,
    synthetic_lognormal,
)


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def _azure_columns(path):
    """The trace's columns read with the csv module and datetime, independently of kvgate."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    stamps = [datetime.fromisoformat(r["TIMESTAMP"][:26]) for r in rows]  # 7 fraction digits: keep 6
    prompt = [int(r["ContextTokens"]) for r in rows]
    output = [int(r["GeneratedTokens"]) for r in rows]
    return stamps, prompt, output


@pytest.mark.parametrize("name, n", [("code", 8819), ("conv", 19366)])
def test_azure_traces_load(shared_dir, name, n):
    path = shared_dir / "traces" / f"AzureLLMInferenceTrace_{name}.csv"
    t = load_trace(path)
    stamps, prompt, output = _azure_columns(path)
    assert len(t) == n == len(prompt)
    assert t.prompt_tokens.tolist() == prompt
    assert t.output_tokens.tolist() == output
    assert t.arrival_s[0] == 0.0
    assert t.arrivals == "timestamps"
    assert t.warnings == []
    assert t.attribution == AZURE_ATTRIBUTION
    assert "Splitwise" in t.attribution and "CC-BY 4.0" in t.attribution
    span = (stamps[-1] - stamps[0]).total_seconds()
    assert abs(t.duration_s - span) < 1e-6
    written = [p + o for p, o in zip(prompt, output)]
    d = t.describe()
    assert d["mean_written_positions"] == pytest.approx(sum(written) / len(written), rel=1e-15)
    assert d["max_written_positions"] == max(written)


def test_conv_mean_written_positions_matches_issue(shared_dir):
    # Issue 6: "on the conversation trace the mean request writes about 1,366 positions".
    _, prompt, output = _azure_columns(shared_dir / "traces" / "AzureLLMInferenceTrace_conv.csv")
    mean = (sum(prompt) + sum(output)) / len(prompt)
    assert round(mean) == 1366


def test_csv_common_names_seconds(tmp_path):
    p = _write(tmp_path, "t.csv", "arrival_time,prompt_tokens,output_tokens\n0.5,10,3\n1.25,20,4\n3,5,0\n")
    t = load_trace(p)
    assert t.arrival_s.tolist() == [0.0, 0.75, 2.5]
    assert t.prompt_tokens.tolist() == [10, 20, 5]
    assert t.output_tokens.tolist() == [3, 4, 0]
    assert t.attribution is None


@pytest.mark.parametrize(
    "header",
    [
        "timestamp,input_tokens,completion_tokens",
        "time,input_len,output_len",
        "Time,Context Tokens,Generated-Tokens",
        "TIMESTAMP,context_tokens,generated_tokens",
        "ts,num_prompt_tokens,num_output_tokens",
    ],
)
def test_csv_header_variants(tmp_path, header):
    t = load_trace(_write(tmp_path, "t.csv", f"{header}\n0,1,2\n2,3,4\n"))
    assert t.prompt_tokens.tolist() == [1, 3] and t.output_tokens.tolist() == [2, 4]
    assert t.arrival_s.tolist() == [0.0, 2.0]


def test_jsonl_datetimes_with_offset(tmp_path):
    lines = [
        {"timestamp": "2024-01-01T10:00:00+01:00", "input_len": 7, "output_len": 1},
        {"timestamp": "2024-01-01T09:00:02.5Z", "input_len": 8, "output_len": 2},
    ]
    p = _write(tmp_path, "t.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")
    t = load_trace(p)
    # 10:00+01:00 is 09:00Z, so the second request comes 2.5 s after the first.
    assert t.arrival_s.tolist() == [0.0, 2.5]
    assert t.prompt_tokens.tolist() == [7, 8]


def test_json_array_and_tsv(tmp_path):
    p = _write(tmp_path, "t.json", json.dumps([{"time": 0, "prompt_tokens": 1, "output_tokens": 1},
                                               {"time": 1, "prompt_tokens": 2, "output_tokens": 2}]))
    assert load_trace(p).prompt_tokens.tolist() == [1, 2]
    q = _write(tmp_path, "t.tsv", "time\tprompt_tokens\toutput_tokens\n0\t3\t4\n")
    assert load_trace(q).output_tokens.tolist() == [4]


def test_unsorted_timestamps_are_sorted_and_said(tmp_path):
    p = _write(tmp_path, "t.csv", "time,prompt_tokens,output_tokens\n5,50,5\n1,10,1\n3,30,3\n")
    t = load_trace(p)
    assert t.arrival_s.tolist() == [0.0, 2.0, 4.0]
    assert t.prompt_tokens.tolist() == [10, 30, 50]
    assert t.output_tokens.tolist() == [1, 3, 5]
    assert len(t.warnings) == 1
    assert "not sorted" in t.warnings[0] and "sorted by arrival time" in t.warnings[0]
    assert "line 3" in t.warnings[0]


def test_missing_columns_names_found(tmp_path):
    p = _write(tmp_path, "t.csv", "when,prompt_tokens,foo\n0,1,2\n")
    with pytest.raises(TraceError) as ei:
        load_trace(p)
    msg = ei.value.message
    assert "output tokens" in msg and "'when'" in msg and "'prompt_tokens'" in msg and "'foo'" in msg


def test_missing_time_column_needs_rate(tmp_path):
    p = _write(tmp_path, "t.csv", "prompt_tokens,output_tokens\n1,2\n3,4\n5,6\n")
    with pytest.raises(TraceError) as ei:
        load_trace(p)
    assert "no arrival-time column" in ei.value.message and "--rate" in ei.value.hint
    t = load_trace(p, rate=2.0, seed=7)
    assert t.arrivals == "poisson"
    assert t.arrival_s.tolist() == poisson_arrivals(3, 2.0, seed=7).tolist()
    assert t.warnings == []


def test_rate_overrides_timestamps_with_warning(tmp_path):
    p = _write(tmp_path, "t.csv", "time,prompt_tokens,output_tokens\n0,1,2\n9,3,4\n")
    t = load_trace(p, rate=1.0)
    assert t.arrivals == "poisson" and "ignored" in t.warnings[0]


def test_negative_tokens_give_the_line(tmp_path):
    p = _write(tmp_path, "t.csv", "time,prompt_tokens,output_tokens\n0,1,2\n1,-3,4\n2,5,-6\n")
    with pytest.raises(TraceError) as ei:
        load_trace(p)
    assert "negative" in ei.value.message and "line 3 (-3)" in ei.value.message


@pytest.mark.parametrize(
    "body, needle",
    [
        ("", "is empty"),
        ("   \n\n", "is empty"),
        ("time,prompt_tokens,output_tokens\n", "no requests"),
        ("time,prompt_tokens,output_tokens\n0,1.5,2\n", "not a whole number"),
        ("time,prompt_tokens,output_tokens\n0,abc,2\n", "line 2"),
        ("time,prompt_tokens,output_tokens\nyesterday,1,2\n", "neither seconds nor a date-time"),
        ("time,prompt_tokens,output_tokens\n0,1\n", "2 fields, the header has 3"),
        ("time,prompt_tokens,output_tokens\n,1,2\n", "is empty"),
        ("time,prompt_tokens,output_tokens\nnan,1,2\n", "not a finite time"),
    ],
)
def test_bad_csv(tmp_path, body, needle):
    with pytest.raises(TraceError) as ei:
        load_trace(_write(tmp_path, "t.csv", body))
    assert needle in ei.value.message


@pytest.mark.parametrize(
    "body, needle",
    [
        ('{"time": 0, "prompt_tokens": 1, "output_tokens": 2}\n{"time": 1,\n', "line 2: not valid JSON"),
        ("[1, 2]", "item 1 is not a JSON object"),
        ('{"time": 0, "prompt_tokens": null, "output_tokens": 2}\n', "not a whole number"),
        ('{"time": 0, "prompt_tokens": true, "output_tokens": 2}\n', "not a whole number"),
        ("[]", "no requests"),
    ],
)
def test_bad_jsonl(tmp_path, body, needle):
    with pytest.raises(TraceError) as ei:
        load_trace(_write(tmp_path, "t.jsonl", body))
    assert needle in ei.value.message


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(TraceError, match="not found"):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(TraceError, match="directory"):
        load_trace(tmp_path)


def test_poisson_arrivals():
    a = poisson_arrivals(100_000, 4.0, seed=3)
    assert a[0] == 0.0 and np.all(np.diff(a) >= 0)
    assert np.diff(a).mean() == pytest.approx(0.25, rel=0.02)
    assert a.tolist() == poisson_arrivals(100_000, 4.0, seed=3).tolist()
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(TraceError):
            poisson_arrivals(3, bad)


def test_synthetic_and_resample():
    f = synthetic_fixed(4, 10, 5, interval_s=0.5)
    assert f.arrival_s.tolist() == [0.0, 0.5, 1.0, 1.5]
    assert f.total_tokens.tolist() == [15] * 4
    ln = synthetic_lognormal(1000, prompt_median=100, output_median=20, sigma=0.5, seed=1)
    assert len(ln) == 1000 and ln.prompt_tokens.min() >= 1
    assert np.median(ln.prompt_tokens) == pytest.approx(100, rel=0.1)
    r = resample(ln, 5000, seed=2)
    assert len(r) == 5000 and r.arrival_s[0] == 0.0 and np.all(np.diff(r.arrival_s) >= 0)
    pairs = set(zip(ln.prompt_tokens.tolist(), ln.output_tokens.tolist()))
    assert set(zip(r.prompt_tokens.tolist(), r.output_tokens.tolist())) <= pairs


def test_trace_validates_arrays():
    with pytest.raises(TraceError, match="no requests"):
        Trace(np.zeros(0), np.zeros(0), np.zeros(0))
    with pytest.raises(TraceError, match="not sorted"):
        Trace(np.array([1.0, 0.0]), np.array([1, 1]), np.array([1, 1]))
    with pytest.raises(TraceError, match="negative output"):
        Trace(np.array([0.0]), np.array([1]), np.array([-1]))


@pytest.mark.parametrize(
    "body",
    ["", "a,b,c\n1,2,3\n", "time,prompt_tokens,output_tokens\n0,-1,2\n"],
)
def test_cli_bad_trace_is_a_clear_error(tmp_path, capsys, body):
    p = _write(tmp_path, "t.csv", body)
    rc = main(["replay", "--slot-bytes", "640", "--block-bytes", "160", "--max-seq", "64", "--slots", "1",
               "--trace", str(p)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("ERROR: ") and "Traceback" not in err


def test_cli_unsorted_trace_warns_in_output(tmp_path, capsys):
    p = _write(tmp_path, "t.csv", "time,prompt_tokens,output_tokens\n5,10,5\n1,10,1\n")
    rc = main(["replay", "--slot-bytes", "640", "--block-bytes", "160", "--max-seq", "64", "--slots", "1",
               "--trace", str(p), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert any("not sorted" in w for w in out["warnings"])


_cells = st.one_of(
    st.integers(-5, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", " ", "x", "2023-11-16 18:15:46.68", "1e3", "-0", "1.5", '"3"', "None"]),
    st.text(max_size=6),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    header=st.sampled_from(["time,prompt_tokens,output_tokens", "TIMESTAMP,ContextTokens,GeneratedTokens",
                            "prompt_tokens,output_tokens", "a,b,c", ""]),
    rows=st.lists(st.lists(_cells, min_size=0, max_size=4), max_size=6),
    suffix=st.sampled_from([".csv", ".jsonl"]),
)
def test_any_input_is_a_trace_or_a_trace_error(tmp_path, header, rows, suffix):
    """Whatever the file holds, the loader returns a Trace or raises TraceError (the CLI
    turns that into ERROR:/HINT: lines), never another exception."""
    if suffix == ".csv":
        body = header + "\n" + "\n".join(",".join(r) for r in rows)
    else:
        keys = header.split(",") if header else ["k"]
        body = "\n".join(json.dumps(dict(zip(keys, r))) for r in rows)
    p = tmp_path / f"fuzz{suffix}"
    p.write_text(body)
    try:
        t = load_trace(p, rate=None if "time" in header.lower() else 1.0)
    except TraceError:
        return
    assert len(t) >= 1 and t.arrival_s[0] == 0.0
    assert np.all(np.diff(t.arrival_s) >= 0) and np.all(t.prompt_tokens >= 0) and np.all(t.output_tokens >= 0)


@pytest.mark.parametrize("name, body, fragment", [
    ("t.csv", "timestamp,prompt_tokens,output_tokens\n2023-11-16 18:15:46,10,5\n2023-11-16 18:15:47,1,1\n5,10,5\n",
     "line 4: column 'timestamp' mixes timestamp kinds: '5' is seconds, but line 2 ('2023-11-16 18:15:46') "
     "is a date-time"),
    ("t.csv", "timestamp,prompt_tokens,output_tokens\n5,10,5\n2023-11-16 18:15:46,10,5\n",
     "line 3: column 'timestamp' mixes timestamp kinds: '2023-11-16 18:15:46' is a date-time, but line 2 ('5') "
     "is seconds"),
    ("t.jsonl", '{"timestamp": "2023-11-16T18:15:46", "prompt_tokens": 1, "output_tokens": 1}\n'
                '{"timestamp": 12.5, "prompt_tokens": 1, "output_tokens": 1}\n',
     "line 2: column 'timestamp' mixes timestamp kinds: '12.5' is seconds"),
    ("t.csv", "timestamp,prompt_tokens,output_tokens\n5,10,5\nsoon,10,5\n",
     "line 3: column 'timestamp' is neither seconds nor a date-time: 'soon'"),
])  # fmt: skip
def test_mixed_timestamp_kinds_are_an_error(tmp_path, name, body, fragment):
    with pytest.raises(TraceError) as ei:
        load_trace(_write(tmp_path, name, body))
    assert fragment in ei.value.message


@pytest.mark.parametrize("body, fragment", [
    ("[1, 2]\n[3, 4]\n", "line 1: not a JSON object (a list); a JSONL trace must be one JSON object per line"),
    ('{"time": 0, "prompt_tokens": 1, "output_tokens": 2}\n5\n',
     "line 2: not a JSON object (a number); a JSONL trace must be one JSON object per line"),
    ('{"time": 0, "prompt_tokens": 1, "output_tokens": 2} {"time": 1}\n',
     "line 1: not valid JSON (Extra data at column 53); a JSONL trace must be one JSON object per line"),
])  # fmt: skip
def test_jsonl_lines_must_be_objects(tmp_path, capsys, body, fragment):
    p = _write(tmp_path, "t.jsonl", body)
    with pytest.raises(TraceError) as ei:
        load_trace(p)
    assert fragment in ei.value.message
    rc = main(["replay", "--slot-bytes", "640", "--block-bytes", "160", "--max-seq", "64", "--slots", "2",
               "--trace", str(p)])
    err = capsys.readouterr().err
    assert rc == 2 and fragment in err and "Traceback" not in err
