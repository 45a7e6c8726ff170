"""llama.cpp / llama-server startup logs → the KV cache llama.cpp allocated.

Lines read (``src/…`` of ggml-org/llama.cpp; older spellings in brackets):

- ``llama_context: n_seq_max = 4``, ``n_ctx``, ``n_ctx_seq`` (``n_ctx_per_seq``),
  ``n_batch``, ``n_ubatch``, ``flash_attn``, ``kv_unified``
  (``llama-context.cpp``; before 2025 ``llama_new_context_with_model:``). ``flash_attn``
  is kept as ``on`` / ``off`` / ``auto`` (``enabled``/``1`` → on, ``disabled``/``0`` → off,
  ``auto -> enabled`` → on; the printed text in ``flash_attn_printed``), and a later
  ``Flash Attention was auto, set to enabled|disabled`` line resolves ``auto``.
- every ``llama_kv_cache: size = 160.00 MiB (  4096 cells,   8 layers,  1/1 seqs),
  K (f16):   80.00 MiB, V (f16):   80.00 MiB`` (``kv_size`` cells per stream,
  ``n_seq_max/n_stream`` seqs) (``llama-kv-cache.cpp``). The line as each build printed it
  (``LLAMA_LOG_INFO`` in ``src/llama-kv-cache*.cpp``, ``__func__`` naming the printer):
  ``KV self size = …, K (f16): …`` without cells, after ``llama_kv_cache_init: kv_size = N``
  (2024), ``init: kv_size = N`` (``llama_kv_cache_unified::init``, early 2025, e.g. b4904) or
  ``llama_kv_cache_unified: kv_size = N, …, padding = 32`` (its constructor, e.g. b5398),
  whose N are the cells; then the one-line summary ``llama_kv_cache_unified: size = … (N
  cells, L layers)``, ``… L layers, S seqs)`` (e.g. b5489), ``S/ T seqs`` (``%2u/%2u``) and
  ``S/T seqs``, and ``llama_kv_cache:`` once the class was renamed; each
  preceded for iSWA models by ``llama_kv_cache_iswa: creating (non-)SWA KV
  cache, size = N cells``; the sizes are ``ggml_nbytes / 1024.0 / 1024.0`` with ``%7.2f``
  (MiB, 2^20).
- the recurrent state ``llama_memory_recurrent: size = … (N cells, L layers, S seqs),
  R (f32): … MiB, S (f32): … MiB`` (``llama-memory-recurrent.cpp``).
- model metadata (``print_info:`` / ``llm_load_print_meta:``): ``arch``, ``general.name``,
  ``file type``, ``n_layer``, ``n_head_kv``, ``n_embd_head_k``/``_v``,
  ``n_embd_k_gqa``/``_v_gqa``, ``n_swa``, ``n_ctx_train``, ``model params``.
- a line is read wherever its function name stands: after a timestamp, a journal head, or
  a host program's own prefix (WasmEdge's ``[WASI-NN] llama.cpp: llama_kv_cache: …``); a
  cache line whose ``llama_kv_cache:`` prefix an excerpt dropped is still read by its
  ``size = … MiB (… cells …), K (f16): … MiB, V (f16): … MiB`` shape (``source`` None).
- the build: ``build: 6000 (abc1234)`` / ``common_params_print_info: build 9421 (ed7be1568)``
  / ``main: build = 3265 (…)``; the model path from ``llama_model_loader: loaded meta data
  … from /path/model.gguf``.
"""

from __future__ import annotations

import re
from typing import Any

from kvgate.engines.logtext import MIB, Line, logged, to_int

_NUM = r"(\d+(?:\.\d+)?)"
_KV = re.compile(
    r"(?:^|(?<=[\s:\]]))(?:(llama_kv_cache(?:_unified)?|llama_kv_cache_iswa|llama_memory_recurrent"
    r"|llama_new_context_with_model|llama_init_from_model|llama_context(?:_unified|_kv_self)?):\s+)?"
    r"(?:size|KV self size)\s*=\s*" + _NUM + r" MiB"
    r"(?:\s*\(\s*(\d+) cells,\s*(\d+) layers(?:,\s*(\d+)(?:/\s*(\d+))? seqs)?\))?,"
    r"\s*(K|R) \((\w+)\):\s*" + _NUM + r" MiB,\s*(V|S) \((\w+)\):\s*" + _NUM + r" MiB")
_AT = r"(?:^|(?<=[\s\]]))"  # a function name at the start or after a host program's prefix
_CTX = re.compile(_AT + r"(?:llama_context(?:_unified|_base)?|llama_new_context_with_model|llama_init_from_model):\s+"
                  r"(\w+)\s*=\s*(\S+)\s*$")
_META = re.compile(_AT + r"(?:print_info|llm_load_print_meta):\s+([\w.]+(?: [\w.]+)*?)\s*=\s*(.+?)\s*$")
_FA = re.compile(_AT + r"(?:llama_context(?:_unified|_base)?|llama_new_context_with_model|llama_init_from_model):\s+"
                 r"flash_attn\s*=\s*(.+?)\s*$")
_FA_SET = re.compile(r"Flash Attention was auto, set to (enabled|disabled)", re.I)
_SWA = re.compile(r"creating\s+(non-SWA|SWA) KV cache, size = (\d+) cells")
# the cells (and layers) of the "KV self size" line that follows, as each build printed them
_KV_SIZE = re.compile(_AT + r"(?:llama_kv_cache_init|init|llama_kv_cache_unified|llama_kv_cache):\s+kv_size\s*=\s*(\d+),")


def parse_llamacpp(lines: list[Line]) -> dict[str, Any]:
    """The figures of a llama.cpp log (module docstring); missing ones ``None``.
    ``caches`` lists every KV / recurrent line in order: ``{kind, cells, layers, n_seq_max,
    n_stream, k_type, v_type, size, k_size, v_size, swa}`` (sizes :class:`Logged`);
    ``cells`` is per stream, as printed (``kv_size``): the cache holds cells × n_stream."""
    r: dict[str, Any] = {"engine": "llama.cpp", "version": None, "commit": None, "model": None,
                         "context": {}, "meta": {}, "caches": []}
    swa_next: str | None = None
    kv_size_next: int | None = None
    for ln in lines:
        t = ln.text
        m = _KV_SIZE.search(t)
        if m:  # builds before the one-line summary: the cells of the next "KV self size"
            kv_size_next = to_int(m.group(1), "kv_size")
            continue
        m = _SWA.search(t)
        if m:
            swa_next = "swa" if m.group(1) == "SWA" else "non-swa"
            continue
        m = _KV.search(t)
        if m:
            kind = "recurrent" if m.group(7) == "R" else "kv"
            r["caches"].append({
                "kind": kind, "source": m.group(1),
                "size": logged(m.group(2), MIB, "MiB"),
                "cells": to_int(m.group(3), "cells") if m.group(3) else (kv_size_next if kind == "kv" else None),
                "layers": to_int(m.group(4), "layers") if m.group(4) else None,
                "n_seq_max": to_int(m.group(5), "seqs") if m.group(5) else None,
                # "%2u/%u seqs" = n_seq_max / n_stream (llama-kv-cache.cpp); older lines print
                # one number and had one stream
                "n_stream": to_int(m.group(6), "streams") if m.group(6) else 1,
                "k_type": m.group(8), "k_size": logged(m.group(9), MIB, "MiB"),
                "v_type": m.group(11), "v_size": logged(m.group(12), MIB, "MiB"),
                "swa": swa_next if kind == "kv" else None,
            })
            swa_next = None
            kv_size_next = None
            continue
        m = _FA_SET.search(t)
        if m:  # the state "auto" resolved to (llama-context.cpp, after the graph reserve)
            r["context"]["flash_attn"] = "on" if m.group(1).lower() == "enabled" else "off"
            continue
        m = _FA.search(t)
        if m:
            r["flash_attn_printed"] = m.group(1)
            if not (r["context"].get("flash_attn") in ("on", "off") and _flash_attn(m.group(1)) == "auto"):
                r["context"]["flash_attn"] = _flash_attn(m.group(1))
            continue
        m = _CTX.search(t)
        if m:
            key = {"n_ctx_per_seq": "n_ctx_seq"}.get(m.group(1), m.group(1))
            r["context"][key] = _value(m.group(2))
            continue
        m = _META.search(t)
        if m:
            r["meta"][m.group(1).strip()] = _value(m.group(2))
            continue
        m = re.search(r"\bbuild(?::| =)?\s*(\d+) \(([0-9a-f]+)\)", t)
        if m:
            r["version"], r["commit"] = str(to_int(m.group(1), "build")), m.group(2)
            continue
        m = re.search(r"loaded meta data with .* from (\S+\.gguf)", t)
        if m:
            r["model"] = m.group(1)
    return r


def _flash_attn(printed: str) -> Any:
    """llama.cpp's printed flash-attention state as ``-fa`` says it: ``on`` / ``off`` /
    ``auto``. ``llama-context.cpp`` prints ``flash_attn = %s`` with
    ``llama_flash_attn_type_name`` (``enabled`` / ``disabled`` / ``auto``) since the
    ``flash_attn_type`` parameter, ``%d`` (1 / 0) before; a resolved ``auto -> enabled``
    is the state it took. Anything else is kept as printed."""
    v = printed.strip().lower()
    if "->" in v:
        v = v.split("->")[-1].strip()
    if v in ("enabled", "on", "1", "true"):
        return "on"
    if v in ("disabled", "off", "0", "false"):
        return "off"
    return "auto" if v == "auto" else printed.strip()


def _value(s: str) -> Any:
    s = s.strip()
    if re.fullmatch(r"-?\d+", s):
        return -to_int(s[1:]) if s.startswith("-") else to_int(s)
    if s in ("true", "false"):
        return s == "true"
    return s
