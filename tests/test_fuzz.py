"""Property-based fuzzing (issue 11 #10): configs, GGUF headers, nvidia-smi logs, records
and traces. Whatever the input, kvgate either answers or raises a ``KvgateError``
subclass (one ERROR line): never another exception, never a traceback.

A few hundred cases each here (fast); ``benchmarks/fuzz.py`` runs the same properties
with 10,000+ cases each.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvgate.engines.llamacpp.arch import SWA_RULES
from kvgate.errors import KvgateError

HERE = Path(__file__).resolve().parent
SMI_LOG = (HERE / "data/smi/synthetic_h200_units.csv").read_bytes()
BASE_CFG = {"model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
            "head_dim": 64, "hidden_size": 512, "max_position_embeddings": 4096}
TRACE_CSV = b"timestamp,prompt_tokens,output_tokens\n0.0,512,64\n0.5,1024,128\n1.25,200,20\n"
TRACE_JSONL = b'{"timestamp": 0, "input_length": 512, "output_length": 64}\n' \
              b'{"timestamp": 1000, "input_length": 100, "output_length": 10}\n'

# ------------------------------------------------------------------ value strategies

_scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**63, 2**64, 10**80]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
_values = st.recursive(_scalars, lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=6), c, max_size=4)),
                       max_leaves=12)


def _mutate_bytes(data: bytes, draw_ops: list[tuple[int, int, int]]) -> bytes:
    """Apply (kind, position, byte) edits: 0 flip a byte, 1 truncate, 2 insert, 3 delete."""
    b = bytearray(data)
    for kind, pos, val in draw_ops:
        if not b:
            break
        i = pos % len(b)
        if kind == 0:
            b[i] = val
        elif kind == 1:
            del b[i:]
        elif kind == 2:
            b[i:i] = bytes([val])
        else:
            del b[i]
    return bytes(b)


byte_ops = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**20), st.integers(0, 255)), min_size=1, max_size=6)


def only_kvgate_errors(fn: Callable[[], Any]) -> None:
    """Run ``fn``; a ``KvgateError`` is an accepted answer, anything else fails."""
    try:
        fn()
    except KvgateError:
        pass


def _tmpfile(data: bytes, suffix: str) -> str:
    fd, path = tempfile.mkstemp(suffix=suffix)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


# ------------------------------------------------------------------ properties

def check_config(cfg: dict[str, Any]) -> None:
    """A config dict through spec_from_config and the geometry."""
    from kvgate.geometry import KVGeometry
    from kvgate.model.config import spec_from_config

    def go() -> None:
        spec = spec_from_config(cfg, name="fuzz", source="fuzz")
        KVGeometry(spec, "bf16").slot_bytes(1024)

    only_kvgate_errors(go)


def check_json_text(text: bytes) -> None:
    """Raw bytes through the one JSON reader."""
    from kvgate.atomicio import loads_json

    only_kvgate_errors(lambda: loads_json(text, what="fuzz"))


def check_gguf(data: bytes) -> None:
    """A (mutated) GGUF file through the model loader."""
    from kvgate.model import load_model

    path = _tmpfile(data, ".gguf")
    try:
        only_kvgate_errors(lambda: load_model(path))
    finally:
        os.unlink(path)


def check_smi(data: bytes) -> None:
    """A (mutated) nvidia-smi CSV log through the importer and the measurement loader."""
    from kvgate.gate.record import load_measurement
    from kvgate.measure.smi_csv import load_smi_csv

    path = _tmpfile(data, ".csv")
    try:
        only_kvgate_errors(lambda: load_measurement(load_smi_csv(path)))
    finally:
        os.unlink(path)


def check_record(doc: Any) -> None:
    """A (mutated) decision record through the loader and the gate."""
    from kvgate.gate.decision import DecisionInputs
    from kvgate.gate.record import parse_record

    def go() -> None:
        rec = parse_record(doc)
        inputs = DecisionInputs.from_dict(rec["inputs"])
        gate, _ = inputs.build_gate()
        for c in gate.candidates:
            gate.verdict(inputs.scenario, c)

    only_kvgate_errors(go)


def check_trace(data: bytes, suffix: str) -> None:
    """A (mutated) CSV / JSONL trace through the trace loader."""
    from kvgate.replay.trace import load_trace

    path = _tmpfile(data, suffix)
    try:
        only_kvgate_errors(lambda: load_trace(path))
    finally:
        os.unlink(path)


# ------------------------------------------------------------------ strategies of whole inputs

configs = st.builds(lambda edits, extra: {**BASE_CFG, **edits, **extra},
                    st.dictionaries(st.sampled_from(sorted(BASE_CFG) + ["sliding_window", "layer_types", "v_head_dim",
                                                                         "kv_lora_rank", "text_config"]), _values, max_size=3),
                    st.dictionaries(st.text(max_size=8), _values, max_size=2))
json_texts = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda d, inner: (b"[" * d + inner + b"]" * d), st.integers(0, 5000), st.sampled_from([b"1", b"9" * 5000, b"NaN"])),
    st.builds(lambda v: json.dumps(v, allow_nan=True).encode(), _values),
)


@st.composite
def records(draw: Any) -> Any:
    """The write-up's record with one to three values replaced somewhere in its tree."""
    doc = json.loads(json.dumps(_demo_record()))
    for _ in range(draw(st.integers(1, 3))):
        node: Any = doc
        path = []
        while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)) > 0:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            k = draw(st.sampled_from(keys))
            path.append((node, k))
            node = node[k]
        if path:
            parent, k = path[-1]
            parent[k] = draw(_values)
        else:
            doc[draw(st.text(max_size=6))] = draw(_values)
    return doc


_DEMO: dict[str, Any] = {}


def _demo_record() -> dict[str, Any]:
    if not _DEMO:
        from kvgate.gate import source_case as case
        from kvgate.gate.decision import DecisionInputs, decide
        from kvgate.gate.verdict import Scenario
        from kvgate.model import load_model

        sc = Scenario(total_bytes=case.TOTAL_BYTES, peak_bytes=case.PEAK_BYTES, idle_bytes=case.IDLE_BYTES,
                      slots_measured=case.SLOTS_MEASURED, slots_target=case.SLOTS_TARGET,
                      max_seq_measured=case.MAX_SEQ, max_seq=case.MAX_SEQ)
        _DEMO.update(decide(DecisionInputs(model=load_model(case.MODEL), scenario=sc, kv_format=case.KV_FORMAT),
                            case.measurement()))
    return _DEMO


_GGUF: dict[str, bytes] = {}


def gguf_bytes() -> bytes:
    if not _GGUF:
        from gguf_from_config import write_gguf

        with tempfile.TemporaryDirectory() as d:
            p = write_gguf(dict(BASE_CFG), Path(d) / "m.gguf")
            _GGUF["b"] = Path(p).read_bytes()
    return _GGUF["b"]


# ------------------------------------------------------------------ the tests (few cases: fast)

FAST = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@FAST
@given(configs)
def test_fuzz_configs(cfg):
    check_config(cfg)


@FAST
@given(json_texts)
def test_fuzz_json_text(text):
    check_json_text(text)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(byte_ops)
def test_fuzz_gguf_headers(ops):
    pytest.importorskip("gguf")
    check_gguf(_mutate_bytes(gguf_bytes(), ops))


@FAST
@given(byte_ops)
def test_fuzz_smi_logs(ops):
    check_smi(_mutate_bytes(SMI_LOG, ops))


@FAST
@given(records())
def test_fuzz_records(doc):
    check_record(doc)


@FAST
@given(byte_ops, st.sampled_from([(TRACE_CSV, ".csv"), (TRACE_JSONL, ".jsonl")]))
def test_fuzz_traces(ops, base):
    data, suffix = base
    check_trace(_mutate_bytes(data, ops), suffix)


# ------------------------------------------------------------------ GGUF metadata, per architecture

_ARCHS = sorted(SWA_RULES) + [
    "llama", "deepseek2", "deepseek32", "glm-dsa", "kimi-linear", "nemotron_h", "qwen35", "jamba", "mamba2",
    "deci", "falcon-h1", "notanarch"]
_small = st.integers(min_value=0, max_value=9)


@st.composite
def gguf_meta(draw):
    """(arch, [(key suffix, value)]) with the keys llama.cpp's loaders read, any subset, any shape."""
    arch = draw(st.sampled_from(_ARCHS))
    n = draw(st.integers(min_value=1, max_value=6))
    per = lambda: st.one_of(_small, st.lists(_small, min_size=0, max_size=8))  # noqa: E731
    kv = {
        "block_count": st.just(n),
        "embedding_length": st.sampled_from([0, 64, 96, 256]),
        "attention.head_count": per(),
        "attention.head_count_kv": per(),
        "attention.key_length": st.sampled_from([0, 32, 80, 128, 576]),
        "attention.value_length": st.sampled_from([0, 32, 128, 512]),
        "attention.sliding_window": st.sampled_from([0, 1, 100, 4096]),
        "attention.sliding_window_pattern": st.one_of(_small, st.lists(st.booleans(), min_size=0, max_size=8)),
        "attention.kv_lora_rank": st.sampled_from([0, 512]),
        "attention.key_length_mla": st.sampled_from([0, 192]),
        "attention.value_length_mla": st.sampled_from([0, 128]),
        "attention.indexer.key_length": st.sampled_from([0, 128]),
        "attention.indexer.types": st.lists(st.integers(0, 2), min_size=0, max_size=8),
        "attention.recurrent_layers": st.lists(st.booleans(), min_size=0, max_size=8),
        "attention.shared_kv_layers": _small,
        "nextn_predict_layers": _small,
        "feed_forward_length": per(),
        "ssm.conv_kernel": _small, "ssm.inner_size": st.sampled_from([0, 64]), "ssm.state_size": _small,
        "ssm.group_count": _small, "ssm.time_step_rank": _small,
        "shortconv.l_cache": _small, "kda.head_dim": st.sampled_from([0, 64]),
        "full_attention_interval": _small, "context_length": st.sampled_from([0, 4096, 1048576]),
    }
    keys = draw(st.lists(st.sampled_from(sorted(kv)), unique=True, max_size=8))
    # a plausible model underneath, which the drawn keys then replace or extend
    items = {"block_count": n, "embedding_length": 256, "attention.head_count": 4, "attention.head_count_kv": 2,
             "context_length": 4096}
    items.update({k: draw(kv[k]) for k in keys if k != "block_count"})
    return arch, list(items.items())


def check_gguf_meta(arch: str, items: list, flags: list[str]) -> None:
    """A GGUF of these keys either sizes under llama.cpp flags or is refused with a KvgateError."""
    import gguf

    from kvgate.cli import main

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.gguf"
        w = gguf.GGUFWriter(str(path), arch)
        for key, val in items:
            name = f"{arch}.{key}"
            if isinstance(val, list):
                if val and isinstance(val[0], bool):
                    w.add_key_value(name, val, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.BOOL)
                else:
                    w.add_array(name, val)
            else:
                w.add_uint32(name, val)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(out):
            rc = main(["geometry", str(path), "--json"] + flags)
        assert rc in (0, 2), f"exit {rc} for {arch} {items} {flags}: {out.getvalue()[-2000:]}"


_flags = st.lists(st.sampled_from([["-c", "5000"], ["-np", "3"], ["-kvu"], ["--swa-full"], ["-fa", "off"], ["-fa", "on"],
                                   ["-ctk", "q4_0"], ["-ctv", "q8_0"], ["-ub", "64"], ["-c", "0"]]), max_size=4)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(gguf_meta(), _flags)
def test_fuzz_gguf_metadata_per_architecture(meta, flags):
    pytest.importorskip("gguf")
    arch, items = meta
    check_gguf_meta(arch, items, [x for f in flags for x in f])


# ------------------------------------------------------------------ hostile inputs, round 2:
# safetensors headers, speculative configs, JSONL traces with huge numbers, /metrics pages
# and completion replies. Hypothesis cannot draw a 5,000-digit integer or a 100,000-deep
# nesting cheaply, so the strategies splice such pieces into drawn documents.

_HOSTILE_PIECES = st.sampled_from([
    "9" * 4301, "-" + "9" * 5000, "1e999", "-1e999", "NaN", "Infinity", "1" + "0" * 400 + ".5",
    "[" * 5000 + "]" * 5000, "{\"a\":" * 3000 + "1" + "}" * 3000, "[" * 100_000, "\"\\ud800\"", "1e-999",
    "18446744073709551616", "-1", "0", "2.5", "true", "null", "\"x\"", "[]", "{}",
])


@st.composite
def hostile_json(draw: Any) -> str:
    """JSON text: a drawn document, a hostile piece, or a drawn object with hostile pieces
    spliced in as values."""
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return json.dumps(draw(_values))
    if kind == 1:
        return draw(_HOSTILE_PIECES)
    keys = draw(st.lists(st.text(max_size=8), min_size=1, max_size=4))
    return "{" + ", ".join(f"{json.dumps(k)}: {draw(_HOSTILE_PIECES)}" for k in keys) + "}"


_DTYPES = st.sampled_from(["F32", "F16", "BF16", "I8", "U8", "F8_E4M3", "F4", "BOOL", "Q4", "", "f32"])


@st.composite
def safetensors_headers(draw: Any) -> bytes:
    """A safetensors file: a header of plausible, wrong or hostile tensor entries, or
    hostile JSON, followed by a few data bytes; sometimes a lying header length."""
    if draw(st.booleans()):
        header = draw(hostile_json()).encode("utf-8", "surrogatepass")
    else:
        entries = {}
        for i in range(draw(st.integers(0, 4))):
            shape = draw(st.lists(st.one_of(st.integers(-2, 64), st.sampled_from([2**40, 2**63, 10**30])), max_size=3))
            begin = draw(st.one_of(st.integers(0, 64), st.sampled_from([-1, 2**64])))
            end = draw(st.one_of(st.integers(0, 128), st.sampled_from([2**63, 10**30])))
            entries[f"t{i}"] = draw(st.sampled_from([
                {"dtype": draw(_DTYPES), "shape": shape, "data_offsets": [begin, end]},
                {"dtype": draw(_DTYPES), "shape": shape},
                draw(_values),
            ]))
        if draw(st.booleans()):
            entries["__metadata__"] = draw(_values)
        header = json.dumps(entries).encode()
    n = len(header) + draw(st.sampled_from([0, 0, 0, -1, 1, 2**40]))
    return max(0, n).to_bytes(8, "little") + header + b"\0" * draw(st.integers(0, 64))


def check_safetensors(data: bytes) -> None:
    """A safetensors file through the header reader and the weight-bytes sum."""
    from kvgate.model.weights import read_safetensors_header, safetensors_file_bytes

    path = _tmpfile(data, ".safetensors")
    try:
        only_kvgate_errors(lambda: read_safetensors_header(path))
        only_kvgate_errors(lambda: safetensors_file_bytes(path))
    finally:
        os.unlink(path)


def check_speculative(text: str) -> None:
    """A --speculative-config value through the vLLM geometry's parser and the flag's type."""
    import argparse

    from kvgate.commands._flag_table import json_object as _json_object
    from kvgate.engines.vllm.pool import parse_speculative_config

    only_kvgate_errors(lambda: parse_speculative_config(text))
    try:
        _json_object(text)
    except argparse.ArgumentTypeError:
        pass


@st.composite
def jsonl_traces(draw: Any) -> bytes:
    """A JSONL trace whose rows carry drawn or hostile numbers in the columns the readers use."""
    rows = []
    for i in range(draw(st.integers(1, 4))):
        cells = {}
        for col, ok in (("timestamp", str(i)), ("prompt_tokens", "512"), ("output_tokens", "64")):
            cells[col] = draw(st.one_of(st.just(ok), _HOSTILE_PIECES, st.builds(json.dumps, _scalars)))
        if draw(st.booleans()):
            cells["extra"] = draw(_HOSTILE_PIECES)
        rows.append("{" + ", ".join(f'"{k}": {v}' for k, v in cells.items()) + "}")
    return ("\n".join(rows) + "\n").encode("utf-8", "surrogatepass")


_METRIC_NAMES = st.sampled_from([
    "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting",
    "vllm:num_preemptions_total", "sglang:token_usage", "sglang:num_used_tokens", "sglang:num_running_reqs",
    "sglang:num_queue_reqs", "llamacpp:kv_cache_usage_ratio", "llamacpp:kv_cache_tokens",
    "llamacpp:requests_processing", "llamacpp:requests_deferred", "x", "9bad"])
_METRIC_VALUES = st.one_of(
    st.sampled_from(["2.5", "-5", "NaN", "+Inf", "-Inf", "1e999", "9" * 5000, "0x10", "", "1_000", "abc", "0.5"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers(-(2**70), 2**70).map(str))


@st.composite
def metrics_pages(draw: Any) -> str:
    """A /metrics page of engine names with hostile values, labels and garbage lines."""
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            labels = draw(st.sampled_from(["", '{engine="0"}', '{engine="1",model="m"}', "{", '{a="\\"}']))
            lines.append(f"{draw(_METRIC_NAMES)}{labels} {draw(_METRIC_VALUES)}")
        elif kind == 1:
            lines.append(draw(st.sampled_from(["# HELP x y", "# TYPE x gauge", "", "   "])))
        else:
            lines.append(draw(st.text(max_size=40)))
    return "\n".join(lines)


def check_metrics(page: str, slots: str) -> None:
    """A /metrics page and a /slots reply through the parsers and the normalized sample:
    values outside their range are None (flagged), never shown."""
    import math

    from kvgate.engines.metrics import RANGES, engine_sample, parse_prometheus, slots_usage

    def go() -> None:
        metrics = parse_prometheus(page)
        for engine in (None, "vllm", "sglang", "llama.cpp"):
            s = engine_sample(metrics, engine=engine)
            for key, (lo, hi) in RANGES.items():
                v = s[key]
                assert v is None or (math.isfinite(v) and lo <= v <= hi), (key, v)

    only_kvgate_errors(go)
    only_kvgate_errors(lambda: slots_usage(slots))


_REPLY_HEADS = st.sampled_from([
    b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 302 Found\r\nLocation: http://10.0.0.1/\r\n", b"HTTP/1.1 500 Oops\r\n",
    b"garbage\r\n", b"HTTP/1.1 200\r\n", b"HTTP/1.1 999999999999999999999 X\r\n", b"", b"HTTP/1.0 200 OK\r\n"])
_REPLY_HEADERS = st.sampled_from([
    b"", b"Content-Length: 10\r\n", b"Content-Length: -1\r\n", b"Content-Length: 99999999999999999999\r\n",
    b"Transfer-Encoding: chunked\r\n", b"Content-Length: x\r\n", b"X: " + b"a" * 70_000 + b"\r\n"])


@st.composite
def completion_replies(draw: Any) -> bytes:
    """A raw HTTP reply to POST /v1/completions: status lines, headers and bodies a
    broken or hostile server could send."""
    body = draw(st.one_of(st.builds(lambda t: t.encode("utf-8", "surrogatepass"), hostile_json()),
                          st.binary(max_size=64), st.just(b"0\r\n\r\n"), st.just(b"zz\r\nabc\r\n")))
    head = draw(_REPLY_HEADS) + draw(_REPLY_HEADERS)
    if draw(st.booleans()):
        head += f"Content-Length: {len(body)}\r\n".encode()
    return head + b"\r\n" + body


def check_completion_reply(raw: bytes) -> None:
    """A raw reply through the loopback client and the row it becomes: every reply is a
    counted outcome (ok, failed, refused), never another exception."""
    from kvgate.engines.loadgen import ReplyError, completion_result, http_request

    srv = _raw_server()
    srv.reply = raw
    try:
        status, data = http_request(srv.url, "POST", "/v1/completions", body=b"{}", timeout=2.0)
    except (ReplyError, KvgateError, OSError):
        return
    row = completion_result(status, data)
    assert row["status"] in (200, -1) or row["status"] == status


class _RawServer:
    """One loopback TCP server (127.0.0.1) that answers each connection with ``reply``
    after reading the request head, then closes; shared by the fuzz cases."""

    def __init__(self) -> None:
        import socket
        import threading

        self.reply = b""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2.0)
                try:
                    got = b""
                    while b"\r\n\r\n" not in got and len(got) < 65536:
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        got += chunk
                    conn.sendall(self.reply)
                except OSError:
                    pass


_RAW: list[_RawServer] = []


def _raw_server() -> _RawServer:
    if not _RAW:
        _RAW.append(_RawServer())
    return _RAW[0]


@FAST
@given(safetensors_headers())
def test_fuzz_safetensors_headers(data):
    check_safetensors(data)


@FAST
@given(hostile_json())
def test_fuzz_speculative_configs(text):
    check_speculative(text)


@FAST
@given(jsonl_traces())
def test_fuzz_jsonl_traces_with_huge_numbers(data):
    check_trace(data, ".jsonl")


@FAST
@given(metrics_pages(), hostile_json())
def test_fuzz_metrics_pages(page, slots):
    check_metrics(page, slots)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(completion_replies())
def test_fuzz_completion_replies(raw):
    check_completion_reply(raw)
