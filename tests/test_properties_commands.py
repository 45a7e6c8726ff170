"""Property tests of whole commands under generated input (issue 28): engine flag sets per
engine for ``fit``, config.json dicts, GGUF metadata, engine log lines and request CSVs.
Every command, called in-process, either answers (exit 0, or 4 for a cross-check that
differs) or refuses cleanly (exit 2 with one JSON error document): never a traceback,
never a hang. For ``fit``: every low/high interval is ordered and each flag's value comes
back in ``settings`` as the engine reads it.

Profiles: ``kvgate-ci`` (a fixed seed, a few dozen cases per property: the suite) and
``kvgate-long`` (thousands, no fixed seed: ``benchmarks/fuzz.py``). Set
``KVGATE_HYPOTHESIS_PROFILE=kvgate-long`` to run the suite's properties long.
"""

from __future__ import annotations

import io
import json
import re
import tempfile
import threading
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hypothesis_profiles import PROFILE  # kvgate-ci / kvgate-long (tests/hypothesis_profiles.py)

HERE = Path(__file__).resolve().parent

#: A command that runs longer than this in-process is a hang.
HANG_S = 60.0


def run_command(argv: list[str]) -> tuple[int, Any, str]:
    """``(exit code, the JSON document on stdout, stderr)`` of ``kvgate ARGV --json`` run
    in-process; asserts no traceback, one JSON document, exit 0/2/4, no hang."""
    from kvgate.cli import main

    out, err = io.StringIO(), io.StringIO()
    got: dict[str, Any] = {}

    def target() -> None:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                got["code"] = main([*argv, "--json"])
            except SystemExit as exc:
                got["code"] = exc.code
            except BaseException as exc:  # noqa: BLE001 - the property: there is none
                got["exc"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(HANG_S)
    assert not t.is_alive(), f"hang: kvgate {' '.join(argv)[:300]}"
    if "exc" in got:
        raise AssertionError(f"traceback: kvgate {' '.join(argv)[:300]}") from got["exc"]
    code = got["code"]
    assert code in (0, 2, 4), f"exit {code}: kvgate {' '.join(argv)[:300]}\n{err.getvalue()[-1500:]}"
    assert "Traceback" not in err.getvalue()
    doc = json.loads(out.getvalue())  # exactly one JSON document (json.loads refuses a second)
    if code == 2:
        assert isinstance(doc, dict) and doc["exit_code"] == 2 and doc["error"], doc
    return code, doc, err.getvalue()


def intervals_ordered(doc: Any, path: str = "") -> list[str]:
    """Paths of every ``{"low": a, "high": b}`` with both numbers and a > b."""
    bad = []
    if isinstance(doc, dict):
        lo, hi = doc.get("low"), doc.get("high")
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and not isinstance(lo, bool) and lo > hi:
            bad.append(f"{path}: {lo} > {hi}")
        for k, v in doc.items():
            bad += intervals_ordered(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            bad += intervals_ordered(v, f"{path}[{i}]")
    return bad


# -- fit: engine flag sets per engine ------------------------------------------------------

_HOSTILE = ["-1", "0", "nan", "inf", "1e999", "9" * 400, "0,1,2", "1,000", "abc", "", " 12 ", "1.5", "0x10", "1e308"]
_count = st.one_of(st.integers(0, 2**18).map(str), st.sampled_from(_HOSTILE))
_small_count = st.one_of(st.integers(1, 8).map(str), st.sampled_from(_HOSTILE))
_human = st.one_of(_count, st.sampled_from(["32k", "32K", "1.5k", "1.5K", "4k", "8K", "1m", "auto"]))
_share = st.one_of(st.floats(0, 1.2, allow_nan=False).map(lambda x: f"{x:.3f}"), st.sampled_from(_HOSTILE))
_pow2 = st.one_of(st.sampled_from(["1", "16", "32", "64", "128", "256"]), st.sampled_from(_HOSTILE))

#: engine -> (flag, value strategy, settings key or None: not echoed)
FLAGS: dict[str, list[tuple[str, Any, str | None]]] = {
    "vllm": [("--max-model-len", _human, "max_model_len"), ("--max-num-seqs", _human, "max_num_seqs"),
             ("--max-num-batched-tokens", _human, "max_num_batched_tokens"),
             ("--gpu-memory-utilization", _share, "gpu_memory_utilization"),
             ("-tp", _small_count, "tensor_parallel_size"), ("-pp", _small_count, "pipeline_parallel_size"),
             ("--block-size", _pow2, "block_size"),
             ("--kv-cache-dtype", st.sampled_from(["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16", "abc"]),
              "kv_cache_dtype"),
             ("--kv-cache-memory-bytes", _human, "kv_cache_memory_bytes")],
    "sglang": [("--context-length", _count, "context_length"),
               ("--max-running-requests", _count, "max_running_requests"),
               ("--mem-fraction-static", _share, "mem_fraction_static"), ("--tp-size", _small_count, "tp_size"),
               ("--page-size", _pow2, "page_size"), ("--chunked-prefill-size", _count, "chunked_prefill_size"),
               ("--kv-cache-dtype", st.sampled_from(["auto", "fp8_e4m3", "fp8_e5m2", "abc"]), "kv_cache_dtype")],
    "llama.cpp": [("-c", _count, "ctx_size"), ("-np", _small_count, "parallel"),
                  ("-ctk", st.sampled_from(["f16", "q8_0", "q4_0", "bf16", "f32", "iq4_nl", "abc"]), "cache_type_k"),
                  ("-ctv", st.sampled_from(["f16", "q8_0", "q4_0", "bf16", "f32", "abc"]), "cache_type_v"),
                  ("-ngl", _count, "n_gpu_layers"), ("-fa", st.sampled_from(["on", "off", "auto"]), "flash_attn"),
                  ("-b", _count, "batch_size"), ("-fit", st.sampled_from(["on", "off"]), "fit")],
}
MODELS = ["llama-3.1-8b", "qwen3-30b-a3b", str(HERE / "data/configs/qwen3-8b.json")]
GPUS = ["H100", "L4", "RTX-4090", "A100-80GB"]


@st.composite
def fit_argv(draw: Any) -> tuple[str, list[tuple[str, str, str | None]], list[str]]:
    engine = draw(st.sampled_from(sorted(FLAGS)))
    chosen = draw(st.lists(st.sampled_from(FLAGS[engine]), unique_by=lambda f: f[0], max_size=5))
    flags = [(flag, draw(values), key) for flag, values, key in chosen]
    argv = ["fit", draw(st.sampled_from(MODELS)), "--gpu", draw(st.sampled_from(GPUS)), "--engine", engine]
    for flag, value, _ in flags:
        argv.append(f"{flag}={value}")  # the = form: a value may start with "-"
    return engine, flags, argv


def expected_setting(flag: str, text: str) -> Any:
    """The value a flag's text means, by the one parser of flag values."""
    from kvgate.fit.humanint import human_readable_int
    from kvgate.units import parse_count, parse_real

    if flag in ("--gpu-memory-utilization", "--mem-fraction-static"):
        return parse_real(text, what=flag)
    if flag in ("--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "-tp", "-pp", "--block-size",
                "--kv-cache-memory-bytes"):
        return human_readable_int(text, flag=flag, allow_auto=flag == "--max-model-len")
    if re.fullmatch(r"-[a-z]+|--[a-z-]+", flag) and flag not in ("-ctk", "-ctv", "-fa", "-fit", "--kv-cache-dtype"):
        return parse_count(text, what=flag)
    return text


def check_fit(engine: str, flags: list[tuple[str, str, str | None]], argv: list[str]) -> None:
    code, doc, _ = run_command(argv)
    if code != 0:
        return
    assert doc["engine"] == engine
    assert intervals_ordered(doc) == [], intervals_ordered(doc)
    for flag, text, key in flags:
        if key is None or flag == "--max-model-len" and text.strip().lower() in ("auto", "-1"):
            continue
        if flag == "-c" and expected_setting(flag, text) == 0:  # -c 0: the model's own context
            assert doc["settings"][key] > 0
            continue
        assert doc["settings"][key] == expected_setting(flag, text), (flag, text, doc["settings"])


@PROFILE
@given(fit_argv())
def test_fit_flag_sets_answer_or_refuse_with_ordered_intervals_and_flags_round_trip(case):
    check_fit(*case)


# -- config.json dicts, GGUF metadata through fit -----------------------------------------

def check_config_fit(cfg: dict[str, Any], engine: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "config.json"
        p.write_text(json.dumps(cfg, allow_nan=True))
        code, doc, _ = run_command(["fit", str(p), "--gpu", "H100", "--engine", engine])
        if code == 0:
            assert intervals_ordered(doc) == []


@PROFILE
@given(st.deferred(lambda: __import__("test_fuzz").configs), st.sampled_from(sorted(FLAGS)))
def test_fit_on_generated_configs_answers_or_refuses(cfg, engine):
    check_config_fit(cfg, engine)


def check_gguf_fit(arch: str, items: list, flags: list[str]) -> None:
    import gguf

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
        code, doc, _ = run_command(["fit", str(path), "--gpu", "H100", *flags])
        if code == 0:
            assert intervals_ordered(doc) == []


_lcpp_flags = st.lists(st.sampled_from([["-c", "5000"], ["-np", "3"], ["-kvu"], ["-fa", "off"], ["-fa", "on"],
                                        ["-ctk", "q8_0"], ["-ctv", "q4_0"], ["-ngl", "2"]]),
                       max_size=3).map(lambda xs: [a for x in xs for a in x])


@PROFILE
@given(st.deferred(lambda: __import__("test_fuzz").gguf_meta()), _lcpp_flags)
def test_fit_on_generated_gguf_metadata_answers_or_refuses(meta, flags):
    check_gguf_fit(meta[0], meta[1], flags)


# -- engine log lines -----------------------------------------------------------------------

LOGS = [HERE / "data/logs" / n for n in ("vllm_0.8.5_qwen3-30b-a3b_tp4.log", "sglang_gemma3-4b.log",
                                          "llamacpp_tiny-llama_server.log")]
_NUM = re.compile(r"\d+(?:\.\d+)?")
_numbers = st.one_of(st.integers(0, 2**40).map(str), st.sampled_from(["0", "-1", "nan", "inf", "1e999", "9" * 60,
                                                                      "0.0", "99999999999999999999"]))


@st.composite
def engine_logs(draw: Any) -> bytes:
    """A real startup log with lines dropped, repeated or cut, and numbers replaced."""
    lines = draw(st.sampled_from(LOGS)).read_text(encoding="utf-8", errors="replace").splitlines()
    for _ in range(draw(st.integers(0, 6))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["number", "number", "drop", "repeat", "cut"]))
        if op == "number" and _NUM.search(lines[i]):
            hits = list(_NUM.finditer(lines[i]))
            m = hits[draw(st.integers(0, len(hits) - 1))]
            lines[i] = lines[i][: m.start()] + draw(_numbers) + lines[i][m.end():]
        elif op == "drop":
            del lines[i]
        elif op == "repeat":
            lines.insert(i, lines[i])
        elif op == "cut":
            lines = lines[:i]
    return ("\n".join(lines) + "\n").encode()


def check_engine_log(data: bytes, model: str | None) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "engine.log"
        p.write_bytes(data)
        run_command(["import-log", str(p), *(["--model", model] if model else [])])


@PROFILE
@given(engine_logs(), st.sampled_from([None, "qwen3-30b-a3b", "llama-3.1-8b"]))
def test_import_log_on_mutated_engine_logs_answers_or_refuses(data, model):
    check_engine_log(data, model)


# -- request CSVs --------------------------------------------------------------------------

_good = st.integers(1, 5_000).map(str)
_cell = st.one_of(_good, _good, _good, _good, st.integers(-5, 50_000).map(str), st.sampled_from(["", "nan", "inf", "1e999", "9" * 500, "-0", "1.5",
                                                                    "2023-11-16 18:15:46.68", "x", '"3"']))
_header = st.sampled_from(["timestamp,prompt_tokens,output_tokens", "TIMESTAMP,ContextTokens,GeneratedTokens",
                           "arrival_time,input_tokens,completion_tokens", "prompt_tokens,output_tokens",
                           "a,b,c", ""])


@st.composite
def request_csvs(draw: Any) -> bytes:
    header = draw(_header)
    ncol = max(1, header.count(",") + 1)
    width = st.one_of(st.just(ncol), st.just(ncol), st.integers(max(0, ncol - 1), ncol + 1))
    rows = [draw(st.lists(_cell, min_size=n, max_size=n)) for n in draw(st.lists(width, max_size=8))]
    return ("\n".join([header] + [",".join(r) for r in rows]) + "\n").encode()


def check_request_csv(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "requests.csv"
        p.write_bytes(data)
        run_command(["replay", "--model", "llama-3.1-8b", "--max-seq", "4096", "--trace", str(p), "--slots", "4",
                     "--total", "80GiB", "--peak", "40GiB", "--rate", "2"])


@PROFILE
@given(request_csvs())
def test_replay_on_generated_request_csvs_answers_or_refuses(data):
    check_request_csv(data)


# -- tier: hashed traces ---------------------------------------------------------------------

_hash = st.one_of(st.integers(0, 40), st.integers(0, 40), st.integers(-3, 2**70), st.booleans(), st.text(max_size=3),
                  st.lists(st.integers(0, 9), max_size=2), st.none(), st.floats(allow_nan=True))
_length = st.one_of(st.integers(0, 20_000), st.integers(0, 20_000), st.sampled_from([-1, 2**64, 10**400]),
                    st.floats(allow_nan=True), st.text(max_size=3), st.none())


def _valid_line(draw: Any, t: int) -> dict[str, Any]:
    ids = draw(st.lists(st.integers(0, 30), min_size=1, max_size=12))
    return {"timestamp": t, "input_length": len(ids) * 512 - draw(st.integers(0, 511)), "output_length": 1,
            "hash_ids": ids}


_DEEP = object()  # a line nested 2,000 deep


@st.composite
def hashed_traces(draw: Any, hostile: bool = True) -> bytes:
    """Mooncake-format JSONL: valid lines, and (``hostile``) lines with any field of any
    type or size, missing fields, nested ids, a deep line, a bare value."""
    lines = []
    for t in range(draw(st.integers(1, 12))):
        line: Any = _valid_line(draw, t * 100)
        if hostile and draw(st.integers(0, 3)) == 0:
            kind = draw(st.sampled_from(["hash_ids", "input_length", "timestamp", "drop", "deep", "bare", "ids"]))
            if kind == "hash_ids":
                line["hash_ids"] = draw(st.lists(_hash, max_size=6))
            elif kind in ("input_length", "timestamp"):
                line[kind] = draw(_length)
            elif kind == "drop":
                del line[draw(st.sampled_from(sorted(line)))]
            elif kind == "deep":
                line = _DEEP if draw(st.booleans()) else {"hash_ids": [[[[1]]]]}
            elif kind == "bare":
                line = draw(st.sampled_from([1, "x", None, [], True]))
            else:
                line["hash_ids"] = draw(st.sampled_from([[], [5] * 3, list(range(5000))]))
        lines.append("[" * 2000 + "]" * 2000 if line is _DEEP else json.dumps(line))
    return ("\n".join(lines) + "\n").encode()


_tier_flags = st.sampled_from([[], ["--device-blocks", "8"], ["--device-blocks", "8", "--host-capacity", "1GiB"],
                               ["--cache-model", "vllm", "--device-blocks", "8", "--kv-offloading-size", "1"],
                               ["--cache-model", "sglang", "--device-blocks", "8", "--hicache-ratio", "2"],
                               ["--cache-model", "llama.cpp", "-np", "2", "-c", "8192"],
                               ["--at-capacity-blocks", "1,4,16"]])


def check_tier_trace(data: bytes, flags: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "trace.jsonl"
        p.write_bytes(data)
        run_command(["tier", "--trace", str(p), "--model", "llama-3.1-8b", *flags])


@PROFILE
@given(hashed_traces(hostile=False), _tier_flags)
def test_tier_on_generated_valid_traces_answers(data, flags):
    """Valid traces (hostile ones: benchmarks/fuzz.py --only tier-traces, with the reader's own tests)."""
    check_tier_trace(data, flags)


def test_found_compose_log_of_two_services_without_a_pool_is_refused_not_indexerror(tmp_path):
    """Found by the engine-log property: two ``docker compose`` services, neither with a
    pool line, and no line outside them: ``select_startup`` indexed an empty list."""
    real = (HERE / "data/logs/vllm_0.8.5_qwen3-30b-a3b_tp4.log").read_text().splitlines()
    loading = next(ln for ln in real if "Loading weights took" in ln)
    concurrency = next(ln for ln in real if "Maximum concurrency" in ln)
    p = tmp_path / "engine.log"
    p.write_text(f"{loading}\n{concurrency.replace('qwen3-1  |', 'qwen3-inf  |')}\n")
    code, doc, _ = run_command(["import-log", str(p)])
    assert code == 2 and "docker compose services" in doc["error"]
