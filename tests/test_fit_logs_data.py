"""Consistency of the engine startup logs collected for calibrating ``kvgate fit``.

``tests/data/fit_logs/manifest.json`` describes each log in that folder: where it
comes from, the engine and its release, the model, the GPU, the engine flags and
every memory term the engine printed (as printed, with its unit). These tests
check the manifest against the files so that a transcription error fails:

- every manifest file exists, every ``.log`` file is in the manifest, no duplicates;
- every printed term (weights, activation, non-torch, CUDA graph, available KV
  memory, token pool, concurrency, blocks, SGLang and llama.cpp pool lines) is a
  verbatim substring of its log;
- every engine flag value not listed under ``inferred`` is printed in its log;
- the collection keeps the spread it was gathered with (counts below).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

FIT_LOGS = Path(__file__).parent / "data" / "fit_logs"
MANIFEST = FIT_LOGS / "manifest.json"

REQUIRED_KEYS = {
    "file", "source_url", "engine", "release", "release_series", "model", "architecture",
    "gpu", "gpu_type", "tp", "pp", "dtype", "kv_cache_dtype", "max_model_len", "max_num_seqs",
    "max_num_batched_tokens", "gpu_memory_utilization", "mem_fraction_static", "enforce_eager",
    "n_ctx", "n_seq_max", "n_batch", "n_ubatch", "n_gpu_layers_offloaded", "flash_attn",
    "weights", "torch_peak", "non_torch_memory", "cuda_graph_pool", "available_kv_cache_memory",
    "gpu_kv_cache_tokens", "maximum_concurrency", "gpu_blocks", "sglang_max_total_num_tokens",
    "sglang_kv_cache_allocated", "sglang_memory_pool_end", "llamacpp_kv_buffer",
    "llamacpp_compute_buffers", "other_printed", "inferred", "licence", "notes",
}

# Terms copied from the log as printed: each must be a substring of the file.
PRINTED_TERMS = (
    "weights", "torch_peak", "non_torch_memory", "cuda_graph_pool", "available_kv_cache_memory",
    "gpu_kv_cache_tokens", "maximum_concurrency", "gpu_blocks", "sglang_max_total_num_tokens",
    "sglang_kv_cache_allocated", "sglang_memory_pool_end", "llamacpp_kv_buffer",
    "llamacpp_compute_buffers", "n_gpu_layers_offloaded",
)
# Numeric engine settings: printed in the log unless listed under "inferred".
NUMERIC_SETTINGS = (
    "max_model_len", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization",
    "mem_fraction_static", "n_ctx", "n_seq_max", "n_batch", "n_ubatch",
)
ENGINES = {"vllm", "sglang", "llama.cpp"}

# The spread actually gathered (see tests/data/fit_logs/SOURCES.md). The issue asked
# for 40 logs; 43 are here (35 vLLM), and this floor keeps them all.
MIN_LOGS = 43
MIN_ARCHITECTURES = 10
MIN_GPU_TYPES = 2
MIN_VLLM_PRINTED_RELEASES = 3
MIN_VLLM_SERIES = 3


def _manifest() -> list[dict[str, Any]]:
    entries = json.loads(MANIFEST.read_text(encoding="utf-8"))
    assert isinstance(entries, list)
    return entries


def _text(entry: dict[str, Any]) -> str:
    return (FIT_LOGS / entry["file"]).read_text(encoding="utf-8")


def _values(value: Any) -> list[str]:
    """The printed strings of one manifest field (a string, a list or a dict of them)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for item in value for v in _values(item)]
    if isinstance(value, dict):
        return [v for item in value.values() for v in _values(item)]
    raise AssertionError(f"printed term must be text, got {value!r}")


def _renderings(value: int | float) -> set[str]:
    """How an engine prints a number: plain, with thousands separators, two decimals."""
    out = {str(value)}
    if isinstance(value, int):
        out.add(f"{value:,}")
    else:
        out |= {f"{value:.2f}", f"{value:.4f}"}
    return out


ENTRIES = _manifest()
IDS = [e.get("file", "?") for e in ENTRIES]


def test_manifest_lists_every_log_once() -> None:
    files = [e["file"] for e in ENTRIES]
    assert len(files) == len(set(files)), "duplicate file in manifest.json"
    on_disk = sorted(p.name for p in FIT_LOGS.glob("*.log"))
    assert sorted(files) == on_disk


def test_no_two_logs_have_the_same_text() -> None:
    texts = [_text(e) for e in ENTRIES]
    assert len(texts) == len(set(texts))


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_entry_shape(entry: dict[str, Any]) -> None:
    assert set(entry) == REQUIRED_KEYS
    assert entry["engine"] in ENGINES
    assert entry["source_url"].startswith("https://")
    assert entry["licence"]
    assert isinstance(entry["inferred"], dict)
    # Unknown is None, never 0.
    for key, value in entry.items():
        assert value != 0 or isinstance(value, bool), f"{key} is 0; unknown must be null"
    name = entry["file"]
    prefix = {"vllm": "vllm_", "sglang": "sglang_", "llama.cpp": "llamacpp_"}[entry["engine"]]
    assert name.startswith(prefix) and name.endswith(".log")


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_printed_terms_appear_verbatim(entry: dict[str, Any]) -> None:
    text = _text(entry)
    for key in (*PRINTED_TERMS, "other_printed"):
        for value in _values(entry[key]):
            assert value in text, f"{entry['file']}: {key} {value!r} is not in the log"
    release = entry["release"]
    if not release.startswith("not printed"):
        assert release in text, f"{entry['file']}: release {release!r} is not in the log"
    for key in ("dtype", "kv_cache_dtype"):
        if entry[key] is not None and key not in entry["inferred"]:
            assert entry[key] in text, f"{entry['file']}: {key} {entry[key]!r} is not in the log"


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_settings_are_printed_or_marked_inferred(entry: dict[str, Any]) -> None:
    text = _text(entry)
    inferred = entry["inferred"]
    for key in NUMERIC_SETTINGS:
        value = entry[key]
        if value is None or key in inferred:
            continue
        assert any(r in text for r in _renderings(value)), f"{entry['file']}: {key}={value} not printed"
    for key, spellings in (
        ("tp", ("tensor_parallel_size={}", "--tensor-parallel-size {}", "--tensor_parallel {}", "-tp {}", "--tp {}")),
        ("pp", ("pipeline_parallel_size={}", "--pipeline-parallel-size {}", "-pp {}")),
    ):
        value = entry[key]
        if value is None or key in inferred:
            continue
        assert any(s.format(value) in text for s in spellings), f"{entry['file']}: {key}={value} not printed"
    eager = entry["enforce_eager"]
    if eager is not None and "enforce_eager" not in inferred:
        spellings = ("--enforce-eager", "enforce_eager=True", "'enforce_eager': True", "eager mode") if eager else ("enforce_eager=False",)
        assert any(s in text for s in spellings), f"{entry['file']}: enforce_eager={eager} not printed"


def test_each_log_prints_a_pool_term() -> None:
    """Every log carries at least one printed KV pool or non-KV term to calibrate on."""
    pool_keys = ("available_kv_cache_memory", "gpu_kv_cache_tokens", "gpu_blocks",
                 "sglang_kv_cache_allocated", "llamacpp_kv_buffer")
    for entry in ENTRIES:
        assert any(entry[k] for k in pool_keys), entry["file"]


def test_spread_of_the_collection() -> None:
    assert len(ENTRIES) >= MIN_LOGS
    engines = {e["engine"] for e in ENTRIES}
    assert engines == ENGINES
    architectures = {e["architecture"] for e in ENTRIES if e["architecture"]}
    assert len(architectures) >= MIN_ARCHITECTURES, sorted(architectures)
    gpu_types = {e["gpu_type"] for e in ENTRIES if e["gpu_type"]}
    assert len(gpu_types) >= MIN_GPU_TYPES, sorted(gpu_types)
    vllm = [e for e in ENTRIES if e["engine"] == "vllm"]
    printed = {e["release"] for e in vllm if not e["release"].startswith("not printed")}
    assert len(printed) >= MIN_VLLM_PRINTED_RELEASES, sorted(printed)
    assert len({e["release_series"] for e in vllm}) >= MIN_VLLM_SERIES


def test_sources_md_lists_every_log() -> None:
    sources = (FIT_LOGS / "SOURCES.md").read_text(encoding="utf-8")
    for entry in ENTRIES:
        assert f"`{entry['file']}`" in sources, entry["file"]
        assert entry["source_url"] in sources, entry["source_url"]
