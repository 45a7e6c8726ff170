"""vLLM (V1 engine, 0.8 onward) startup logs → the KV pool vLLM built.

Lines read, with the vLLM source that prints them (``vllm/v1/…``, 0.8.5 … 0.24):

- ``Initializing a V1 LLM engine (v0.8.5) with config: model='…', dtype=torch.bfloat16,
  max_seq_len=…, tensor_parallel_size=…, pipeline_parallel_size=…, kv_cache_dtype=…,
  speculative_config=…, enable_prefix_caching=…`` (``engine/core.py``); the banner
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
  V0's budget ``… the rest of the memory reserved for KV Cache is X GiB``,
  ``worker/worker.py``), ``Overriding num_gpu_blocks=…
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
import re
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


def parse_vllm(lines: list[Line]) -> dict[str, Any]:
    """The figures of a vLLM startup log (module docstring) as a dict; a figure not in
    the log is ``None``. Byte figures are :class:`Logged`; ``available_kv`` is the
    minimum over ranks, ``available_kv_by_rank`` every rank's."""
    r: dict[str, Any] = {
        "engine": "vllm", "version": None, "model": None, "dtype": None, "kv_cache_dtype": None,
        "max_model_len": None, "tensor_parallel_size": None, "pipeline_parallel_size": None,
        "block_size": None, "attention_block_size": None, "enable_prefix_caching": None,
        "speculative_config": None, "quantization": None, "gpu_memory_utilization": None,
        "max_num_seqs": None, "max_num_batched_tokens": None, "kv_offloading_size": None,
        "num_gpu_blocks_override": None, "model_loading": None, "available_kv": None,
        "available_kv_by_rank": {}, "gpu_kv_cache_tokens": None, "gpu_blocks": None,
        "max_concurrency": None, "max_concurrency_unread": None, "concurrency_len": None, "cuda_graph": None,
        "padding_layers": None, "device": None, "non_default_args": None,
        "decode_context_parallel_size": None, "prefill_context_parallel_size": None, "data_parallel_size": None,
        "cp_world_size": None, "logged_gpu_kv_cache_tokens": None, "tokens_per_rank": None, "pp_layer_partition": None,
        "kv_cache_memory_by_rank": {}, "parallel": {},
    }
    src: dict[str, str] = {}
    avail: dict[Any, Logged] = {}
    loading: dict[Any, Logged] = {}
    for ln in lines:
        t = ln.text
        m = re.search(r"Initializing a V1 LLM engine \(v?([^)\s]+)\) with config: (.*)", t)
        if m:
            r["version"] = m.group(1)
            cfg = m.group(2)
            r["model"] = _cfg_field(cfg, "model") or r["model"]
            dt = _cfg_field(cfg, "dtype")
            r["dtype"] = dt.replace("torch.", "") if dt else r["dtype"]
            r["kv_cache_dtype"] = _cfg_field(cfg, "kv_cache_dtype") or r["kv_cache_dtype"]
            r["max_model_len"] = _int(_cfg_field(cfg, "max_seq_len")) or r["max_model_len"]
            r["tensor_parallel_size"] = _int(_cfg_field(cfg, "tensor_parallel_size")) or r["tensor_parallel_size"]
            r["pipeline_parallel_size"] = _int(_cfg_field(cfg, "pipeline_parallel_size")) or r["pipeline_parallel_size"]
            for k in ("decode_context_parallel_size", "prefill_context_parallel_size", "data_parallel_size"):
                r[k] = _int(_cfg_field(cfg, k)) or r[k]
            for k in ("tensor_parallel_size", "pipeline_parallel_size", "decode_context_parallel_size"):
                if r[k] is not None:
                    src.setdefault(k, "the config line")
            q = _cfg_field(cfg, "quantization")
            r["quantization"] = None if q in (None, "None") else q
            sp = _cfg_field(cfg, "speculative_config")
            r["speculative_config"] = None if sp in (None, "None") else sp
            pc = _cfg_field(cfg, "enable_prefix_caching")
            r["enable_prefix_caching"] = _bool(pc) if pc is not None else r["enable_prefix_caching"]
            dev = _cfg_field(cfg, "device_config")
            r["device"] = dev or r["device"]
            continue
        m = re.search(r"(?:vLLM API server version|█\s+version)\s+v?(\d+\.\d+[\w.+-]*)", t)
        if m and r["version"] is None:
            r["version"] = m.group(1)
        m = re.search(r"non-default args: (\{.*\})\s*$", t)
        if m:
            args = _literal(m.group(1))
            if isinstance(args, dict):
                r["non_default_args"] = args
                for k in ("block_size", "kv_cache_dtype", "max_model_len", "gpu_memory_utilization",
                          "max_num_seqs", "max_num_batched_tokens", "kv_offloading_size",
                          "enable_prefix_caching", "num_gpu_blocks_override", "tensor_parallel_size",
                          "pipeline_parallel_size", "speculative_config", "quantization",
                          "decode_context_parallel_size", "prefill_context_parallel_size", "data_parallel_size"):
                    if k in args and args[k] is not None:
                        r[k] = args[k]
                        src.setdefault(k, "non-default args")
                if args.get("model") and not r["model"]:
                    r["model"] = args["model"]
            continue
        m = re.search(r"Using max model len (\d+)", t)
        if m:
            r["max_model_len"] = to_int(m.group(1), "max model len")
        m = re.search(r"(?:Model loading took|Loading model weights took) " + _NUM + r" (GiB|GB)", t)
        if m:
            loading[_rank_key(ln)] = logged(m.group(1), GIB, m.group(2))
        m = re.search(r"Available KV cache memory: " + _NUM + r" GiB", t)
        if m:
            avail[_rank_key(ln)] = logged(m.group(1), GIB, "GiB")
        m = re.search(r"Current kv cache memory in use is (?:(\d+) bytes|" + _NUM + r" GiB)", t)
        if m:
            exact = m.group(1)
            cur = (Logged(to_int(exact, "kv cache memory"), to_int(exact), to_int(exact), f"{exact} bytes")
                   if exact else logged(m.group(2), GIB, "GiB"))
            r["kv_cache_memory_by_rank"][_rank_key(ln)] = cur
        m = re.search(r"Multiplying the GPU KV cache size by the (?:dcp_world_size (\d+)|cp_world_size (\d+) "
                      r"\(pcp_world_size (\d+) \* dcp_world_size (\d+)\))", t)
        if m:
            if m.group(1):
                r["cp_world_size"] = r["decode_context_parallel_size"] = to_int(m.group(1))
            else:
                r["cp_world_size"] = to_int(m.group(2))
                r["prefill_context_parallel_size"] = to_int(m.group(3))
                r["decode_context_parallel_size"] = to_int(m.group(4))
            src["decode_context_parallel_size"] = "the 'Multiplying the GPU KV cache size' line"
        m = re.search(r"GPU KV cache size: ([\d,]+) tokens", t)
        if m:
            r["gpu_kv_cache_tokens"] = to_int(m.group(1))
        m = re.search(r"the rest of the memory reserved for KV Cache is " + _NUM + r" ?GiB", t)
        if m and _rank_key(ln) not in avail:
            avail[_rank_key(ln)] = logged(m.group(1), GIB, "GiB")
        m = re.search(r"# (?:GPU|cuda|CUDA|npu|NPU|xpu|XPU) blocks: ([\d,]+)", t)
        if m:
            r["gpu_blocks"] = to_int(m.group(1))
        m = re.search(r"num_gpu_blocks_override=(\d+)", t)
        if m:
            r["num_gpu_blocks_override"] = to_int(m.group(1))
        m = re.search(r"Maximum concurrency for ([\d,]+) tokens per request:", t)
        if m:
            r["concurrency_len"] = to_int(m.group(1))
            x = re.match(r"\s*" + _NUM + "x", t[m.end():])
            # a line cut off before the "x" (24.2 of 24.25x?) gives no figure: not available
            r["max_concurrency"] = check_digits(x.group(1), "maximum concurrency") if x else None
            r["max_concurrency_unread"] = None if x else ln.number
        m = re.search(r"(?:Graph capturing finished in \d+ secs?, took|Estimated CUDA graph memory:) "
                      + _NUM + r" GiB", t)
        if m:
            r["cuda_graph"] = logged(m.group(1), GIB, "GiB")
        m = re.search(r"Hidden layers were unevenly partitioned: \[([\d, ]+)\]|\bVLLM_PP_LAYER_PARTITION=['\"]?([\d,]+)", t)
        if m:
            r["pp_layer_partition"] = [to_int(x) for x in (m.group(1) or m.group(2)).replace(" ", "").split(",") if x]
            src.setdefault("pipeline_parallel_size", "the stages' layer partition")
        m = re.search(r"Setting attention block size to (\d+) tokens", t)
        if m:
            r["attention_block_size"] = to_int(m.group(1))
        m = re.search(r"Add (\d+) padding layers", t)
        if m:
            r["padding_layers"] = to_int(m.group(1))
    for key, cur in r["kv_cache_memory_by_rank"].items():
        # the same budget, printed later; the exact bytes replace the rounded GiB
        if key not in avail or (cur.low == cur.high and avail[key].contains(cur.bytes)):
            avail[key] = cur
    if avail:
        r["available_kv_by_rank"] = {("?" if k is None else k): v for k, v in avail.items()}
        r["available_kv"] = min(avail.values(), key=lambda v: v.bytes)
    if loading:
        r["model_loading"] = max(loading.values(), key=lambda v: v.bytes)
    for k in ("max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "block_size", "max_num_seqs"):
        if r[k] is not None:
            r[k] = _int(r[k])
    cmd = launch_flags("\n".join(ln.text for ln in lines))
    for key, names in (("model", ("model",)), ("tensor_parallel_size", ("tensor_parallel_size", "tensor_parallel", "tp")),
                       ("pipeline_parallel_size", ("pipeline_parallel_size", "pp")),
                       ("decode_context_parallel_size", ("decode_context_parallel_size", "dcp")),
                       ("max_model_len", ("max_model_len",)), ("kv_cache_dtype", ("kv_cache_dtype",)),
                       ("block_size", ("block_size",)), ("gpu_memory_utilization", ("gpu_memory_utilization",)),
                       ("max_num_seqs", ("max_num_seqs",)), ("enable_prefix_caching", ("enable_prefix_caching",)),
                       ("max_num_batched_tokens", ("max_num_batched_tokens",))):
        for n in names:
            if r[key] is None and n in cmd:
                r[key] = cmd[n]
                src.setdefault(key, "the launch command")
    for k in ("max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "block_size", "max_num_seqs",
              "decode_context_parallel_size", "prefill_context_parallel_size", "data_parallel_size"):
        if r[k] is not None:
            r[k] = _int(r[k])
    if r["pipeline_parallel_size"] is None and r["pp_layer_partition"]:
        r["pipeline_parallel_size"] = len(r["pp_layer_partition"])
    tags = _tag_sizes(lines)
    if tags.get("workers") and "TP" not in tags:
        tags["TP"] = 1  # worker tags name every dimension above 1, and none names TP
    for k, tag in (("tensor_parallel_size", "TP"), ("pipeline_parallel_size", "PP"), ("decode_context_parallel_size", "DCP")):
        if r[k] is None and tag in tags:
            r[k] = tags[tag]
            src[k] = (f"the process tags (Worker_{tag}…: at least {tags[tag]})" if tag in tags and tags[tag] > 1
                      else f"the process tags (no Worker_{tag}…: {tag} 1)")
    for short, k in (("tp", "tensor_parallel_size"), ("pp", "pipeline_parallel_size"), ("dcp", "decode_context_parallel_size")):
        if r[k] is not None:
            r["parallel"][short] = {"value": r[k], "source": src.get(k, "the log")}
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
    return r


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
