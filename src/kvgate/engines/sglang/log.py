"""SGLang startup logs → the token pool SGLang built.

Lines read (``python/sglang/srt/…``):

- ``KV Cache is allocated. #tokens: N, K size: X GB, V size: Y GB``
  (``mem_cache/memory_pool.py``, ``MHATokenToKVPool``): X = Σ_layers (N + page_size) ×
  head_num × head_dim × itemsize / GB, and **GB there is ``1024 * 1024 * 1024``** (the
  module's own constant), so the figures are GiB although printed "GB". The MLA pool
  prints ``KV size: X GB`` (one latent); newer releases put ``dtype: …`` first. Older
  releases (``tests/data/fit_logs/sglang_2025-01_llama-3.1-8b_h100_1.log``) print no ``#tokens``: ``KV Cache is allocated. K size:
  X GB, V size: Y GB.``; the pool's size is then the scheduler's ``max_total_num_tokens``
  (``model_runner.py`` ``init_memory_pool`` builds the pool with
  ``size=self.max_total_num_tokens``), and ``tokens`` stays ``None``.
- ``Load weight end. type=…, dtype=torch.bfloat16, avail mem=X GB, mem usage=Y GB``
  (``model_executor/model_runner.py``; ``get_available_gpu_memory`` divides by 1 << 30).
- ``server_args=ServerArgs(model_path='…', …, kv_cache_dtype='auto', …,
  mem_fraction_static=0.851, …, tp_size=…, page_size=…, context_length=…)``.
- ``max_total_num_tokens=N, chunked_prefill_size=…, max_prefill_tokens=…,
  max_running_requests=…, context_len=…`` (``managers/scheduler.py``).
- ``Using KV cache dtype: torch.float8_e4m3fn`` (``model_executor/model_runner.py``
  ``configure_kv_cache_dtype``, on rank 0): the cache's dtype after ``auto`` and the
  ``fp8_e4m3``/``fp8_e5m2`` names are resolved; read when the pool line has no ``dtype:``.
- DeepSeek sparse attention models (``server_args.py``, v0.5.5 "… for DeepSeek NSA.", v0.5.9
  on "… for DeepSeek DSA on SM10 device."): ``Setting KV cache dtype to fp8_e4m3 for
  DeepSeek DSA …`` (what ``auto`` became on this GPU) and ``Setting page size to 64 for
  DeepSeek DSA.``; read when ``server_args`` does not give them (or says ``auto``).

Several TP ranks → the minimum pool, as the scheduler takes the minimum over ranks. A rank
that prints a second pool in the same startup (a speculative draft model's pool, built after
the target's) keeps its first, the target's pool; the others are listed in ``extra_pools``,
never added to it.

Hybrid sliding-window models (``mem_cache/swa_memory_pool.py`` ``SWAKVPool``): the pool is
two ``MHATokenToKVPool``s, built in this order, each printing its own "KV Cache is
allocated" line: ``swa_kv_pool`` (``size=size_swa``, the sliding layers) then
``full_kv_pool`` (``size``, the full-attention layers); announced by ``Use sliding window
memory pool. full_layer_tokens=F, swa_layer_tokens=S`` (``model_runner``) and followed by
``SWAKVPool mem usage: X GB, swa size: S, full size: F``. With either line in the log, each
rank's first two pool lines are read as its SWA pool (``swa_pool``) and its full pool (the
pool: ``tokens``, ``k_size``, ``v_size``), each sized with its own layers; a rank whose
excerpt lost one of the two is left out when another rank shows both. When every rank shows
only its first line (the SWA pool, told apart by ``swa_layer_tokens``), the pool's size is
``full_layer_tokens`` and its bytes are not available.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from kvgate.engines.logtext import GIB, Line, launch_flags, logged, to_int

_NUM = r"(\d+(?:\.\d+)?)"


def _arg(text: str, key: str) -> str | None:
    m = re.search(r"[(,\s]" + key + r"=('([^']*)'|[^,)]+)", text)
    if not m:
        return None
    return m.group(2) if m.group(2) is not None else m.group(1).strip()


def _pool_size(p: dict[str, Any]) -> int:
    """Bytes of one rank's logged pool (K + V, or the MLA KV), for picking the smallest."""
    if p.get("k_size") is not None:
        return int(p["k_size"].bytes + p["v_size"].bytes)
    return int(p["kv_size"].bytes) if p.get("kv_size") is not None else 0


_EMPTY: dict[str, Any] = {
    "engine": "sglang", "version": None, "model": None, "dtype": None, "kv_cache_dtype": None,
    "kv_store_dtype": None, "mem_fraction_static": None, "tp_size": None, "page_size": None,
    "context_length": None, "max_total_num_tokens": None, "max_running_requests": None,
    "tokens": None, "k_size": None, "v_size": None, "kv_size": None, "weights": None,
    "avail_after_weights": None, "model_type": None, "ranks": {}, "kv_dtype_line": None, "extra_pools": [],
    "swa_pool": None, "swa_layer_tokens": None, "full_layer_tokens": None, "swa_mem_usage": None,
}
_SGL_GB = "GB (SGLang's GB = 2^30 B)"
_POOL_LINE = re.compile(r"KV Cache is allocated\.(?: dtype: ([\w.]+),)?(?: #tokens: (\d+),)? (?:K size: "
                        + _NUM + r" GB, V size: " + _NUM + r" GB|KV size: " + _NUM + r" GB)")
_COMMAND_KEYS = (("tp_size", ("tp", "tp_size", "tensor_parallel_size"), to_int),
                 ("mem_fraction_static", ("mem_fraction_static",), str),
                 ("model", ("model", "model_path"), str), ("kv_cache_dtype", ("kv_cache_dtype",), str),
                 ("page_size", ("page_size",), to_int), ("context_length", ("context_length",), to_int))


def parse_sglang(lines: list[Line]) -> dict[str, Any]:
    """The figures of an SGLang startup log (module docstring); missing ones ``None``.
    One reader per kind of line (``_read_*``), then the pools, the DeepSeek DSA settings and
    a pasted launch command fill what the lines left out."""
    r: dict[str, Any] = copy.deepcopy(_EMPTY)
    dsa: dict[str, Any] = {}
    pools: dict[Any, list[dict[str, Any]]] = {}
    for ln in lines:
        t = ln.text
        _read_server_args(r, t)
        _read_pool_line(pools, ln, t)
        _read_swa(r, t)
        _read_weights(r, t)
        _read_dtype_lines(r, dsa, t)
        _read_scheduler(r, t)
    if r["kv_cache_dtype"] in (None, "auto") and "kv_cache_dtype" in dsa:
        r["kv_cache_dtype"] = dsa["kv_cache_dtype"]
    if r["page_size"] is None and "page_size" in dsa:
        r["page_size"] = dsa["page_size"]
    _pick_pool(r, _assign_pools(r, pools))
    if r["kv_store_dtype"] is None and r["kv_dtype_line"] is not None:
        r["kv_store_dtype"] = r["kv_dtype_line"]
    if r["max_total_num_tokens"] is None:
        r["max_total_num_tokens"] = r["tokens"]
    _fill_from_command(r, lines)
    return r


def _read_server_args(r: dict[str, Any], t: str) -> None:
    """``server_args=ServerArgs(model_path='…', kv_cache_dtype='auto', …)``."""
    if "server_args=ServerArgs(" not in t:
        return
    r["model"] = _arg(t, "model_path") or r["model"]
    r["kv_cache_dtype"] = _arg(t, "kv_cache_dtype") or r["kv_cache_dtype"]
    for k, conv in (("mem_fraction_static", str), ("tp_size", to_int), ("page_size", to_int),
                    ("context_length", to_int)):
        v = _arg(t, k)
        if v not in (None, "None"):
            try:
                r[k] = conv(v)
            except ValueError:
                pass


def _read_pool_line(pools: dict[Any, list[dict[str, Any]]], ln: Line, t: str) -> None:
    """``KV Cache is allocated. …``: one more pool of this rank, in log order."""
    m = _POOL_LINE.search(t)
    if not m:
        return
    p: dict[str, Any] = {"tokens": to_int(m.group(2), "#tokens") if m.group(2) else None, "dtype": m.group(1)}
    if m.group(3):
        p["k_size"] = logged(m.group(3), GIB, _SGL_GB)
        p["v_size"] = logged(m.group(4), GIB, _SGL_GB)
    else:
        p["kv_size"] = logged(m.group(5), GIB, _SGL_GB)
    pools.setdefault(ln.rank, []).append({"rank": ln.rank, "line": ln.number, **p})


def _read_weights(r: dict[str, Any], t: str) -> None:
    m = re.search(r"Load weight end\. (?:elapsed=[\d.]+ s, )?type=(\w+), (?:dtype=torch\.(\w+), )?avail mem="
                  + _NUM + r" GB, mem usage=" + _NUM + r" GB", t)
    if m:
        r["model_type"] = m.group(1)
        r["dtype"] = m.group(2) or r["dtype"]
        r["avail_after_weights"] = logged(m.group(3), GIB, "GB (2^30 B)")
        r["weights"] = logged(m.group(4), GIB, "GB (2^30 B)")


def _read_dtype_lines(r: dict[str, Any], dsa: dict[str, Any], t: str) -> None:
    """DeepSeek DSA's KV dtype and page size; ``Using KV cache dtype: …``; the release."""
    m = re.search(r"Setting KV cache dtype to (\w+) for DeepSeek (?:DSA|NSA)", t)
    if m:
        dsa["kv_cache_dtype"] = m.group(1)
    m = re.search(r"Setting page size to (\d+) for DeepSeek (?:DSA|NSA)", t)
    if m:
        dsa["page_size"] = to_int(m.group(1), "page size")
    m = re.search(r"Using KV cache dtype: (?:torch\.)?([\w.]+)", t)
    if m:
        r["kv_dtype_line"] = m.group(1)
    m = re.search(r"sglang(?: version)?[ =:]+v?(\d+\.\d+\.\d+[\w.]*)", t, re.I)
    if m and r["version"] is None:
        r["version"] = m.group(1)


def _read_scheduler(r: dict[str, Any], t: str) -> None:
    """``max_total_num_tokens=N, …, max_running_requests=…, context_len=…``."""
    m = re.search(r"max_total_num_tokens=(\d+)", t)
    if not m:
        return
    r["max_total_num_tokens"] = to_int(m.group(1), "max_total_num_tokens")
    mr = re.search(r"max_running_requests=(\d+)", t)
    r["max_running_requests"] = to_int(mr.group(1)) if mr else r["max_running_requests"]
    mc = re.search(r"context_len=(\d+)", t)
    r["context_length"] = to_int(mc.group(1)) if mc else r["context_length"]


def _pick_pool(r: dict[str, Any], first: dict[Any, dict[str, Any]]) -> None:
    """The smallest rank's pool (by #tokens, or, old logs without it, by its bytes)."""
    if not first:
        return
    r["ranks"] = {("?" if k is None else k): v["tokens"] for k, v in first.items()}
    best = min(first.values(), key=lambda p: (p["tokens"] if p["tokens"] is not None else -1, _pool_size(p)))
    for k in ("tokens", "k_size", "v_size", "kv_size"):
        r[k] = best.get(k)
    r["kv_store_dtype"] = best.get("dtype")
    if r["swa_layer_tokens"] is not None or r["swa_mem_usage"] is not None:
        r["swa_pool"] = best.get("swa")


def _fill_from_command(r: dict[str, Any], lines: list[Line]) -> None:
    cmd = launch_flags("\n".join(ln.text for ln in lines))
    for key, names, conv in _COMMAND_KEYS:
        for n in names:
            if r[key] is None and n in cmd:
                try:
                    r[key] = conv(cmd[n])
                except ValueError:
                    pass


def _read_swa(r: dict[str, Any], t: str) -> None:
    """The hybrid sliding-window pool's own lines (module docstring)."""
    m = re.search(r"Use [Ss]liding window memory pool\. full_layer_tokens=(\d+), swa_layer_tokens=(\d+)", t)
    if m:
        r["full_layer_tokens"] = to_int(m.group(1), "full_layer_tokens")
        r["swa_layer_tokens"] = to_int(m.group(2), "swa_layer_tokens")
    m = re.search(r"SWAKVPool mem usage: " + _NUM + r" GB, swa size: (\d+), full size: (\d+)", t)
    if m:
        r["swa_mem_usage"] = logged(m.group(1), GIB, "GB (SGLang's GB = 2^30 B)")
        r["swa_layer_tokens"] = to_int(m.group(2), "swa size")
        r["full_layer_tokens"] = to_int(m.group(3), "full size")


def _assign_pools(r: dict[str, Any], pools: dict[Any, list[dict[str, Any]]]) -> dict[Any, dict[str, Any]]:
    """Each rank's pool (its first line; under a hybrid SWA pool its second, the full
    pool, with the first as its ``swa``); the lines after those go to ``extra_pools``."""
    hybrid = r["swa_layer_tokens"] is not None or r["swa_mem_usage"] is not None
    n = 2 if hybrid else 1
    if hybrid and any(len(v) >= 2 for v in pools.values()):
        cut = {k: v for k, v in pools.items() if len(v) < 2}
        r["swa_ranks_cut"] = sorted(("?" if k is None else k) for k in cut)
        pools = {k: v for k, v in pools.items() if k not in cut}
    out: dict[Any, dict[str, Any]] = {}
    swa_t, full_t = r["swa_layer_tokens"], r["full_layer_tokens"]
    for rank, lines in pools.items():
        if hybrid and len(lines) >= 2:
            out[rank] = {**lines[1], "swa": lines[0]}
        elif hybrid and swa_t is not None and full_t is not None and swa_t != full_t and lines[0]["tokens"] == swa_t:
            # the excerpt keeps only the first line of the pair, the SWA pool (swa_kv_pool is built
            # first): the full pool's size is full_layer_tokens, its bytes are not in the log
            out[rank] = {"rank": rank, "line": lines[0]["line"], "tokens": full_t, "dtype": lines[0]["dtype"],
                         "swa": lines[0]}
            r["swa_full_line_missing"] = True
        else:
            out[rank] = lines[0]
        r["extra_pools"] += lines[n:]
    return out
