"""vLLM startup logs (V1 engine, 0.8 onward; V0 lines of 0.5 … 0.10) → the KV pool vLLM built.

Lines read, with the vLLM source that prints them (``vllm/v1/…``, 0.8.5 … 0.24); one
reader per kind of line (``_read_*``), applied to every logical line in turn:

- vLLM 0.9–0.10 print one "GPU KV cache size" / "Maximum concurrency" pair per worker, from
  the engine core, before ``unify_kv_cache_configs`` gives every worker the least
  ``num_blocks``: all pairs are kept (``kv_cache_reports``), the smallest is the pool.
- ``Initializing a V1 LLM engine (v0.8.5) with config: model='…', dtype=torch.bfloat16,
  max_seq_len=…, tensor_parallel_size=…, pipeline_parallel_size=…, kv_cache_dtype=…,
  speculative_config=…, enable_prefix_caching=…`` (``engine/core.py``; V0:
  ``Initializing a V0 LLM engine (v0.7.2) …`` and before 0.7 ``Initializing an LLM engine
  (v0.6.4.post1) …``, ``engine/llm_engine.py``, the same repr); the banner
  ``version 0.18.0`` / ``vLLM API server version 0.8.5``; ``non-default args: {…}``
  (``entrypoints/utils.py``: ``block_size``, ``kv_cache_dtype``, ``max_model_len``,
  ``gpu_memory_utilization``, ``max_num_seqs``, ``kv_offloading_size`` …);
  ``Using max model len N``.
- ``Model loading took X GiB`` (``worker/gpu_model_runner.py``, ``memory / GiB_bytes``;
  V1 before 0.8 printed ``Loading model weights took X GB`` with the same 2^30 divisor).
- ``Available KV cache memory: X GiB`` (``worker/gpu_worker.py``, per rank,
  ``available_kv_cache_memory / GiB_bytes`` with ``%.2f``): several ranks → the minimum,
  as ``get_kv_cache_configs`` takes the minimum over workers.
- ``GPU KV cache size: N tokens`` and ``Maximum concurrency for L tokens per request: Xx``
  (a line cut off before the ``x`` gives L but no X: ``max_concurrency`` ``None``,
  ``max_concurrency_unread`` its line number)
  (``core/kv_cache_utils.py``; old V1 and V0: ``# GPU blocks: N`` / ``# cuda blocks: N``;
  V0's budget ``… the rest of the memory reserved for KV Cache is X GiB`` and, 0.6.x,
  ``Memory profiling results: … kv_cache_size=X GiB …``, ``worker/worker.py``;
  vllm-ascend's exact ``Available memory: N, total memory: M``), ``Overriding num_gpu_blocks=…
  with num_gpu_blocks_override=N``, ``Add K padding layers``.
- CUDA graphs: ``Graph capturing finished in S secs, took X GiB`` and ``Estimated CUDA
  graph memory: X GiB total``; ``Setting attention block size to N tokens``.
- ``… Current kv cache memory in use is N bytes.`` (``worker/gpu_worker.py``
  ``compile_or_warm_up_model``, 0.10–0.11: ``available_kv_cache_memory_bytes`` exactly;
  later releases print it in GiB with ``%.2f``): the same budget as "Available KV cache
  memory", per rank; the exact form replaces that rank's rounded one.
- Decode context parallelism: ``Multiplying the GPU KV cache size by the dcp_world_size
  N.`` (``core/kv_cache_utils.py``, 0.11) / ``… by the cp_world_size N (pcp_world_size P *
  dcp_world_size D).`` (0.12 onward): the "GPU KV cache size" that follows counts the
  tokens of all N ranks of a context-parallel group (``num_tokens *= pcp_size * dcp_size``);
  one rank holds 1/N of them (``tokens_per_rank``).
- Pipeline stages: ``Hidden layers were unevenly partitioned: [15,15,16,15]``
  (``distributed/utils.py`` ``get_pp_indices``, printed once per rank when the layers do
  not divide) and ``VLLM_PP_LAYER_PARTITION=16,32`` in a pasted launch command
  (``pp_layer_partition``: layers per stage; its length is the pipeline size).
- Parallel sizes (``parallel``: value and source for ``tp``, ``pp``, ``dcp``): the config
  line (``tensor_parallel_size``, ``pipeline_parallel_size``,
  ``decode_context_parallel_size``), else ``non-default args``, else the launch command
  (``-tp``/``--tensor-parallel-size``, ``-pp``/``--pipeline-parallel-size``,
  ``-dcp``/``--decode-context-parallel-size``), else the process tags: vLLM names a worker
  ``Worker[_DP d][_PP p][_TP t][_DCP c]…`` with a part only when that size exceeds 1
  (``v1/executor/multiproc_executor.py``), so ``Worker_TP3`` shows TP ≥ 4 (the largest
  index seen + 1: a lower bound when not every rank printed).

Every GiB figure is a :class:`~kvgate.engines.logtext.Logged` interval (vLLM's GiB are
2^30 bytes).
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass, field
from typing import Any

from kvgate.engines.logtext import GIB, Line, Logged, check_digits, launch_flags, logged, to_int

_NUM = r"(\d+(?:\.\d+)?)"


def _cfg_field(text: str, key: str) -> str | None:
    """``key=value`` from vLLM's config repr (value up to the next ``, name=`` at depth 0)."""
    m = re.search(r"(?:^|[\s,(:])" + re.escape(key) + r"=", text)
    if not m:
        return None
    i, depth, quote = m.end(), 0, None
    start = i
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif c == "," and depth == 0:
            break
        i += 1
    return text[start:i].strip().strip("'\"")


def _bool(v: Any) -> bool | None:
    if v is None:
        return None
    return str(v).strip().lower() in ("true", "1")


def _int(v: Any) -> int | None:
    """An int from a logged value; ``None`` when absent or not an integer.

    Raises:
        LogNumberError: more digits than any real figure.
    """
    if v in (None, "None", "") or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return _int(str(v))
    try:
        return to_int(str(v).strip())
    except ValueError:
        return None


_EMPTY: dict[str, Any] = {
    "engine": "vllm", "version": None, "engine_generation": None, "model": None, "dtype": None,
    "kv_cache_dtype": None, "max_model_len": None, "tensor_parallel_size": None, "pipeline_parallel_size": None,
    "block_size": None, "attention_block_size": None, "enable_prefix_caching": None,
    "speculative_config": None, "quantization": None, "gpu_memory_utilization": None,
    "max_num_seqs": None, "max_num_batched_tokens": None, "kv_offloading_size": None,
    "num_gpu_blocks_override": None, "model_loading": None, "available_kv": None,
    "available_kv_by_rank": {}, "gpu_kv_cache_tokens": None, "gpu_blocks": None,
    "max_concurrency": None, "max_concurrency_unread": None, "concurrency_len": None, "cuda_graph": None,
    "padding_layers": None, "device": None, "non_default_args": None,
    "decode_context_parallel_size": None, "prefill_context_parallel_size": None, "data_parallel_size": None,
    "cp_world_size": None, "logged_gpu_kv_cache_tokens": None, "tokens_per_rank": None, "pp_layer_partition": None,
    "kv_cache_memory_by_rank": {}, "parallel": {}, "kv_cache_reports": [],
}
_ARG_KEYS = ("block_size", "kv_cache_dtype", "max_model_len", "gpu_memory_utilization", "max_num_seqs",
             "max_num_batched_tokens", "kv_offloading_size", "enable_prefix_caching", "num_gpu_blocks_override",
             "tensor_parallel_size", "pipeline_parallel_size", "speculative_config", "quantization",
             "decode_context_parallel_size", "prefill_context_parallel_size", "data_parallel_size")
_INT_KEYS = ("max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "block_size", "max_num_seqs",
             "decode_context_parallel_size", "prefill_context_parallel_size", "data_parallel_size")
_COMMAND_KEYS = (("model", ("model",)), ("tensor_parallel_size", ("tensor_parallel_size", "tensor_parallel", "tp")),
                 ("pipeline_parallel_size", ("pipeline_parallel_size", "pp")),
                 ("decode_context_parallel_size", ("decode_context_parallel_size", "dcp")),
                 ("max_model_len", ("max_model_len",)), ("kv_cache_dtype", ("kv_cache_dtype",)),
                 ("block_size", ("block_size",)), ("gpu_memory_utilization", ("gpu_memory_utilization",)),
                 ("max_num_seqs", ("max_num_seqs",)), ("enable_prefix_caching", ("enable_prefix_caching",)),
                 ("max_num_batched_tokens", ("max_num_batched_tokens",)))


@dataclass
class _State:
    """What the line readers collect: the result dict, each figure's source, the budgets
    and weights per rank, and the token / concurrency reports in log order."""

    r: dict[str, Any]
    src: dict[str, str] = field(default_factory=dict)
    avail: dict[Any, Logged] = field(default_factory=dict)
    loading: dict[Any, Logged] = field(default_factory=dict)
    reports: list[dict[str, Any]] = field(default_factory=list)


def parse_vllm(lines: list[Line]) -> dict[str, Any]:
    """The figures of a vLLM startup log (module docstring) as a dict; a figure not in
    the log is ``None``. Byte figures are :class:`Logged`; ``available_kv`` is the
    minimum over ranks, ``available_kv_by_rank`` every rank's; ``kv_cache_reports`` every
    "GPU KV cache size" / "Maximum concurrency" pair of the startup (one per worker), of
    which the smallest is the pool."""
    st = _State(r=copy.deepcopy(_EMPTY))
    for ln in lines:
        for read in _READERS:
            if read(st, ln, ln.text):
                break
    _finish_budgets(st)
    _finish_reports(st)
    _fill_from_command(st, lines)
    _fill_from_tags(st, lines)
    _finish_tokens(st.r)
    return st.r


# ---------------------------------------------------------------- line readers
# Each reads one kind of line into the state; True: the line is done (no other reader).

_CONFIG = re.compile(r"Initializing (?:an|a (V[01])) LLM engine \(v?([^)\s]+)\) with config: (.*)")


def _read_config(st: _State, ln: Line, t: str) -> bool:
    """``Initializing a V1 LLM engine (v0.8.5) with config: …`` (``v1/engine/core.py``), V0's
    ``Initializing a V0 LLM engine (v0.7.2) …`` and the older ``Initializing an LLM engine
    (v0.6.4.post1) …`` (``engine/llm_engine.py``): the same config repr."""
    m = _CONFIG.search(t)
    if not m:
        return False
    r = st.r
    r["version"], r["engine_generation"] = m.group(2), m.group(1) or "V0"
    cfg = m.group(3)
    r["model"] = _cfg_field(cfg, "model") or r["model"]
    dt = _cfg_field(cfg, "dtype")
    r["dtype"] = dt.replace("torch.", "") if dt else r["dtype"]
    r["kv_cache_dtype"] = _cfg_field(cfg, "kv_cache_dtype") or r["kv_cache_dtype"]
    r["max_model_len"] = _int(_cfg_field(cfg, "max_seq_len")) or r["max_model_len"]
    for k in ("tensor_parallel_size", "pipeline_parallel_size", "decode_context_parallel_size",
              "prefill_context_parallel_size", "data_parallel_size"):
        r[k] = _int(_cfg_field(cfg, k)) or r[k]
    for k in ("tensor_parallel_size", "pipeline_parallel_size", "decode_context_parallel_size"):
        if r[k] is not None:
            st.src.setdefault(k, "the config line")
    q = _cfg_field(cfg, "quantization")
    r["quantization"] = None if q in (None, "None") else q
    sp = _cfg_field(cfg, "speculative_config")
    r["speculative_config"] = None if sp in (None, "None") else sp
    pc = _cfg_field(cfg, "enable_prefix_caching")
    r["enable_prefix_caching"] = _bool(pc) if pc is not None else r["enable_prefix_caching"]
    r["device"] = _cfg_field(cfg, "device_config") or r["device"]
    return True


def _read_banner(st: _State, ln: Line, t: str) -> bool:
    m = re.search(r"(?:vLLM API server version|█\s+version)\s+v?(\d+\.\d+[\w.+-]*)", t)
    if m and st.r["version"] is None:
        st.r["version"] = m.group(1)
    return False


def _read_args(st: _State, ln: Line, t: str) -> bool:
    m = re.search(r"non-default args: (\{.*\})\s*$", t)
    if not m:
        return False
    args = _literal(m.group(1))
    if isinstance(args, dict):
        st.r["non_default_args"] = args
        for k in _ARG_KEYS:
            if k in args and args[k] is not None:
                st.r[k] = args[k]
                st.src.setdefault(k, "non-default args")
        if args.get("model") and not st.r["model"]:
            st.r["model"] = args["model"]
    return True


def _read_lengths(st: _State, ln: Line, t: str) -> bool:
    """``Using max model len N``; ``Setting attention block size to N tokens``; ``Add K
    padding layers``; ``num_gpu_blocks_override=N``."""
    for rx, key, what in ((r"Using max model len (\d+)", "max_model_len", "max model len"),
                          (r"Setting attention block size to (\d+) tokens", "attention_block_size", "block size"),
                          (r"Add (\d+) padding layers", "padding_layers", "padding layers"),
                          (r"num_gpu_blocks_override=(\d+)", "num_gpu_blocks_override", "blocks")):
        m = re.search(rx, t)
        if m:
            st.r[key] = to_int(m.group(1), what)
    return False


def _read_memory(st: _State, ln: Line, t: str) -> bool:
    """Weights, CUDA graphs and the per-rank KV budget in every spelling vLLM used."""
    m = re.search(r"(?:Model loading took|Loading model weights took) " + _NUM + r" (GiB|GB)", t)
    if m:
        st.loading[_rank_key(ln)] = logged(m.group(1), GIB, m.group(2))
    m = re.search(r"(?:Graph capturing finished in \d+ secs?, took|Estimated CUDA graph memory:) " + _NUM + r" GiB", t)
    if m:
        st.r["cuda_graph"] = logged(m.group(1), GIB, "GiB")
    m = re.search(r"Available KV cache memory: " + _NUM + r" GiB", t)
    if m:
        st.avail[_rank_key(ln)] = logged(m.group(1), GIB, "GiB")
    m = re.search(r"Current kv cache memory in use is (?:(\d+) bytes|" + _NUM + r" GiB)", t)
    if m:
        exact = m.group(1)
        st.r["kv_cache_memory_by_rank"][_rank_key(ln)] = (_exact(exact) if exact else logged(m.group(2), GIB, "GiB"))
    _read_v0_budget(st, ln, t)
    return False


def _read_v0_budget(st: _State, ln: Line, t: str) -> None:
    """V0's budget, read when the rank printed no V1 line: ``… the rest of the memory
    reserved for KV Cache is X GiB`` (``worker/worker.py``, 0.7–0.10); ``Memory profiling
    results: … kv_cache_size=X GiB …`` (0.6.x, ``"kv_cache_size=%.2fGiB"`` of
    ``available_kv_cache_memory / (1024**3)``); the 0.6.5 table row
    ``available_kv_cache_memory   X GiB``; and vllm-ascend's exact ``Available memory: N,
    total memory: M`` (``worker/worker_v1.py`` ``determine_available_memory``: N is
    ``available_kv_cache_memory`` in bytes)."""
    m = re.search(r"(?:the rest of the memory reserved for KV Cache is\s+|\bkv_cache_size=|"
                  r"\bavailable_kv_cache_memory\s+)" + _NUM + r" ?GiB", t)
    if m and _rank_key(ln) not in st.avail:
        st.avail[_rank_key(ln)] = logged(m.group(1), GIB, "GiB")
    m = re.search(r"\bAvailable memory: (\d+), total memory: \d+", t)
    if m:
        st.avail[_rank_key(ln)] = _exact(m.group(1))


def _read_context_parallel(st: _State, ln: Line, t: str) -> bool:
    m = re.search(r"Multiplying the GPU KV cache size by the (?:dcp_world_size (\d+)|cp_world_size (\d+) "
                  r"\(pcp_world_size (\d+) \* dcp_world_size (\d+)\))", t)
    if not m:
        return False
    r = st.r
    if m.group(1):
        r["cp_world_size"] = r["decode_context_parallel_size"] = to_int(m.group(1))
    else:
        r["cp_world_size"] = to_int(m.group(2))
        r["prefill_context_parallel_size"] = to_int(m.group(3))
        r["decode_context_parallel_size"] = to_int(m.group(4))
    st.src["decode_context_parallel_size"] = "the 'Multiplying the GPU KV cache size' line"
    return False


def _read_pool(st: _State, ln: Line, t: str) -> bool:
    """``GPU KV cache size: N tokens`` opens a report, ``Maximum concurrency for L tokens
    per request: Xx`` completes it (a line cut off before the ``x`` gives L but no X);
    V0 / early V1: ``# GPU blocks: N`` (``# cuda blocks``, NPU/XPU; a paste may drop the
    ``#``)."""
    m = re.search(r"GPU KV cache size: ([\d,]+) tokens", t)
    if m:
        st.reports.append({"tokens": to_int(m.group(1)), "line": ln.number, "max_concurrency": None,
                           "concurrency_len": None, "max_concurrency_unread": None})
    m = re.search(r"(?<![A-Za-z_])(?:GPU|cuda|CUDA|npu|NPU|xpu|XPU) blocks: ([\d,]+)", t)
    if m:
        st.r["gpu_blocks"] = to_int(m.group(1))
    m = re.search(r"Maximum concurrency for ([\d,]+) tokens per request:", t)
    if m:
        if not st.reports or st.reports[-1]["concurrency_len"] is not None:
            st.reports.append({"tokens": None, "line": ln.number, "max_concurrency": None,
                               "concurrency_len": None, "max_concurrency_unread": None})
        x = re.match(r"\s*" + _NUM + "x", t[m.end():])
        # a line cut off before the "x" (24.2 of 24.25x?) gives no figure: not available
        st.reports[-1].update(concurrency_len=to_int(m.group(1)),
                              max_concurrency=check_digits(x.group(1), "maximum concurrency") if x else None,
                              max_concurrency_unread=None if x else ln.number)
    return False


def _read_partition(st: _State, ln: Line, t: str) -> bool:
    m = re.search(r"Hidden layers were unevenly partitioned: \[([\d, ]+)\]|\bVLLM_PP_LAYER_PARTITION=['\"]?([\d,]+)", t)
    if m:
        st.r["pp_layer_partition"] = [to_int(x) for x in (m.group(1) or m.group(2)).replace(" ", "").split(",") if x]
        st.src.setdefault("pipeline_parallel_size", "the stages' layer partition")
    return False


_READERS = (_read_config, _read_banner, _read_args, _read_lengths, _read_memory, _read_context_parallel,
            _read_pool, _read_partition)


# ---------------------------------------------------------------- after the lines

def _exact(digits: str) -> Logged:
    n = to_int(digits, "bytes")
    return Logged(n, n, n, f"{digits} bytes")


def _finish_budgets(st: _State) -> None:
    """Every rank's budget (the exact "in use" bytes replace that rank's rounded GiB), the
    least of them (``get_kv_cache_configs`` takes the minimum over workers), and the
    largest weights any rank logged."""
    for key, cur in st.r["kv_cache_memory_by_rank"].items():
        # the same budget, printed later; the exact bytes replace the rounded GiB
        if key not in st.avail or (cur.low == cur.high and st.avail[key].contains(cur.bytes)):
            st.avail[key] = cur
    if st.avail:
        st.r["available_kv_by_rank"] = {("?" if k is None else k): v for k, v in st.avail.items()}
        st.r["available_kv"] = min(st.avail.values(), key=lambda v: v.bytes)
    if st.loading:
        st.r["model_loading"] = max(st.loading.values(), key=lambda v: v.bytes)


def _finish_reports(st: _State) -> None:
    """The pool of the startup from its "GPU KV cache size" / "Maximum concurrency" pairs.

    vLLM 0.9–0.10 prints one pair per worker: the engine core sizes each worker's
    ``KVCacheConfig`` from its own budget (``get_kv_cache_config``, which logs the pair),
    then ``unify_kv_cache_configs`` "changes the num_blocks of each worker to the smallest
    among all workers" (``vllm/v1/core/kv_cache_utils.py``, v0.10.0). So the pool is the
    pair with the fewest tokens; every pair is kept in ``kv_cache_reports``. A pair without
    a token line (V0 prints the concurrency after ``# GPU blocks``) is read as printed."""
    reps = st.reports
    st.r["kv_cache_reports"] = reps
    if not reps:
        return
    sized = [p for p in reps if p["tokens"] is not None]
    pick = min(sized, key=lambda p: p["tokens"]) if sized else reps[-1]
    for k in ("max_concurrency", "concurrency_len", "max_concurrency_unread"):
        st.r[k] = pick[k]
    st.r["gpu_kv_cache_tokens"] = pick["tokens"]


def _fill_from_command(st: _State, lines: list[Line]) -> None:
    """Figures the log lines left out, from a launch command pasted with them."""
    r = st.r
    for k in ("max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "block_size", "max_num_seqs"):
        if r[k] is not None:
            r[k] = _int(r[k])
    cmd = launch_flags("\n".join(ln.text for ln in lines))
    for key, names in _COMMAND_KEYS:
        for n in names:
            if r[key] is None and n in cmd:
                r[key] = cmd[n]
                st.src.setdefault(key, "the launch command")
    for k in _INT_KEYS:
        if r[k] is not None:
            r[k] = _int(r[k])
    if r["pipeline_parallel_size"] is None and r["pp_layer_partition"]:
        r["pipeline_parallel_size"] = len(r["pp_layer_partition"])


def _fill_from_tags(st: _State, lines: list[Line]) -> None:
    """Parallel sizes the process tags show, and each size's source."""
    r = st.r
    tags = _tag_sizes(lines)
    if tags.get("workers") and "TP" not in tags:
        tags["TP"] = 1  # worker tags name every dimension above 1, and none names TP
    for k, tag in (("tensor_parallel_size", "TP"), ("pipeline_parallel_size", "PP"),
                   ("decode_context_parallel_size", "DCP")):
        if r[k] is None and tag in tags:
            r[k] = tags[tag]
            st.src[k] = (f"the process tags (Worker_{tag}…: at least {tags[tag]})" if tags[tag] > 1
                         else f"the process tags (no Worker_{tag}…: {tag} 1)")
    for short, k in (("tp", "tensor_parallel_size"), ("pp", "pipeline_parallel_size"),
                     ("dcp", "decode_context_parallel_size")):
        if r[k] is not None:
            r["parallel"][short] = {"value": r[k], "source": st.src.get(k, "the log")}


def _finish_tokens(r: dict[str, Any]) -> None:
    """One rank's tokens under context parallelism; the remaining conversions."""
    tokens = r["gpu_kv_cache_tokens"]
    cp = r["cp_world_size"] or (r["decode_context_parallel_size"] or 1) * (r["prefill_context_parallel_size"] or 1)
    r["logged_gpu_kv_cache_tokens"] = tokens
    if tokens is not None and cp > 1:
        r["cp_world_size"] = cp
        r["tokens_per_rank"] = tokens // cp
    if isinstance(r["enable_prefix_caching"], str):
        r["enable_prefix_caching"] = _bool(r["enable_prefix_caching"])
    if r["max_num_batched_tokens"] is not None:
        r["max_num_batched_tokens"] = _int(r["max_num_batched_tokens"])
    if r["max_model_len"] is None and r["concurrency_len"] is not None:
        r["max_model_len"] = r["concurrency_len"]


def _rank_key(ln: Line) -> Any:
    """The key of one rank's figure: the TP rank, or the whole process tag when it names a
    pipeline stage, data-parallel engine or context-parallel rank too (``Worker_PP1_TP0``
    and ``Worker_PP0_TP0`` are two ranks)."""
    if ln.who and re.search(r"(?:^|_)(?:PP|DP|DCP|PCP)\d", ln.who):
        return ln.who
    if ln.rank is None and ln.who is not None and ln.pid is not None:
        return f"{ln.who} pid={ln.pid}"  # Ray workers: no rank, one process each
    return ln.rank


def _tag_sizes(lines: list[Line]) -> dict[str, int]:
    """The least size of each parallel dimension the process tags show: the largest index
    seen + 1, and at least 2, as vLLM names a dimension only when its size exceeds 1
    (``Worker_PP1_TP3_DCP1`` → ``{"PP": 2, "TP": 4, "DCP": 2}``; ``Worker_TP0`` → TP 2);
    ``"workers"`` is set when a worker's tag names its dimensions (then a dimension it does
    not name is 1)."""
    out: dict[str, int] = {}
    for ln in lines:
        dims = re.findall(r"(?:^|_)(DP|PP|TP|DCP|PCP|EP)(\d+)", ln.who or "")
        for dim, idx in dims:
            out[dim] = max(out.get(dim, 2), to_int(idx) + 1)
        if dims and (ln.who or "").startswith(("Worker", "VllmWorker")):
            out["workers"] = 1  # a worker tag that names its dimensions
    return out


def _literal(s: str) -> Any:
    """A ``non-default args`` dict; values vLLM prints as reprs (``KVTransferConfig(…)``)
    are kept as their text."""
    try:
        return ast.literal_eval(s)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        out: dict[str, Any] = {}
        for m in re.finditer(r"'(\w+)':\s*('[^']*'|-?\d+(?:\.\d+)?|True|False|None)", s):
            out[m.group(1)] = ast.literal_eval(check_digits(m.group(2), m.group(1)))
        return out
