"""The flags of ``kvgate fit``, spelled as each engine spells them, and the typed inputs
built from them (nothing below ``commands/`` sees the Namespace)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from kvgate.commands._flag_table import add_engine_groups, add_engine_table_flags, given_engine_flags, parse_bytes_arg
from kvgate.commands._types import positive_int
from kvgate.engines.registry import ENGINES, detect_from_file, detect_from_flags
from kvgate.errors import KvgateError


def add_fit_flags(p: argparse.ArgumentParser) -> None:
    """MODEL, ``--engine``, the GPU, weights, release, and vLLM's memory flags."""
    p.add_argument("model", metavar="MODEL", nargs="?", help="model directory (exact weights from its safetensors), .gguf file, "
                   "Hub id in the local cache, config.json (weights ESTIMATED from it), or preset name "
                   "(the published checkpoint's exact bytes)")
    p.add_argument("--engine", choices=ENGINES, default=None,
                   help="the engine you will launch (default: the one whose flags are given, else llama.cpp for a .gguf, "
                        "else vllm)")
    g = p.add_argument_group("the GPU (one of; default: this machine's GPU 0 through NVML)")
    g.add_argument("--gpu", metavar="NAME", nargs="?", const="list",
                   help="a card by name: H100, H100-NVL, H200, B200, A100-80GB, A100-40GB, L40S, L4, A10, A6000, "
                        "RTX-3090, RTX-4090, RTX-5090, MI300X, ...; --gpu alone or --gpu list: the table")
    g.add_argument("--total", metavar="BYTES", type=parse_bytes_arg, help="the card's memory as nvidia-smi prints it, e.g. 81559MiB "
                   "(the driver reserve is taken off: the card's own band, else 404-794 MiB)")
    g.add_argument("--cuda-total", metavar="BYTES", default=None,
                   help="the CUDA total as the engine's log prints it (vLLM: total_gpu_memory (79.19GiB), "
                        "'Free memory on device (x/79.19 GiB)'): nothing taken off")
    g.add_argument("--wsl", action="store_true",
                   help="the card runs under WSL 2, where CUDA's total is the whole card (no driver reserve)")
    p.add_argument("--encoder-len", metavar="N", type=positive_int, default=None,
                   help="encoder-decoder models: the encoder positions each cross-attention layer holds (Whisper: "
                        "fixed at max_source_positions; T5/BART: the input's length)")
    w = p.add_argument_group("weights and release")
    w.add_argument("--weights-bytes", metavar="BYTES", type=parse_bytes_arg,
                   help="the whole checkpoint's bytes (split over -tp × -pp as the engine splits it), e.g. 16060522496 or 14.96GiB")
    add_engine_table_flags(w, "fit_release")
    add_engine_groups(p, "fit")


def _tp_for_sglang(args: argparse.Namespace, given: dict[str, list[str]]) -> int | None:
    """``--tensor-parallel-size N`` is SGLang's spelling too (``server_args.py``:
    ``"--tensor-parallel-size", "--tp-size"``): under ``--engine sglang``, or next to other
    SGLang flags and no other vLLM flag, it is SGLang's TP (moved from ``given``'s vLLM list).

    Raises:
        KvgateError: ``--tensor-parallel-size`` and ``--tp-size`` both given, differently.
    """
    if given["vllm"] != ["-tp"] or not (args.engine == "sglang" or (args.engine is None and given["sglang"])):
        return None
    if args.sglang_tp is not None and args.sglang_tp != args.tp:
        shown = {-1: "auto"}  # -1 is how the converter hands on "auto" (_tp_or_auto)
        raise KvgateError(f"--tensor-parallel-size {shown.get(args.tp, args.tp)} and --tp-size "
                          f"{shown.get(args.sglang_tp, args.sglang_tp)}: SGLang's TP given twice",
                          hint="give one of them")
    given["vllm"] = []
    if "--tp-size" not in given["sglang"]:
        given["sglang"].append("--tp-size")
    return int(args.tp)


@dataclass(frozen=True)
class FitInputs:
    """What ``kvgate fit`` was asked, typed."""

    model: str
    engine: str
    gpu: str | None
    total: int | None
    weights_bytes: int | None
    release: str | None
    vllm: dict[str, Any]
    sglang: dict[str, Any]
    llamacpp: dict[str, Any]
    dtype: str = "auto"
    quantization: str | None = None


def fit_inputs_from_args(args: argparse.Namespace) -> FitInputs:
    """The typed inputs of ``kvgate fit``.

    Raises:
        KvgateError: ``--gpu`` and ``--total`` together.
    """
    if args.gpu is not None and not args.gpu.strip():  # "" is no card: never this machine's GPU instead
        raise KvgateError("--gpu is empty", hint="name a card (kvgate fit --help lists them), or give --total BYTES")
    if args.gpu and args.total:
        raise KvgateError("--gpu and --total name the GPU twice", hint="give one of them")
    given = given_engine_flags(args, "fit")
    shared_tp = _tp_for_sglang(args, given)
    engines = detect_from_flags(given)
    if len(engines) > 1:
        raise KvgateError("flags of two engines: " + "; ".join(f"{', '.join(given[e])} ({e})" for e in engines),
                          hint="give the flags of the engine you will launch")
    if args.engine or engines:
        engine = args.engine or engines[0]
    else:  # no engine named: the one that alone loads the model's file (a GGUF: llama.cpp), else vLLM
        engine = detect_from_file(args.model) or "vllm"
    for e in engines:
        if e != engine:
            raise KvgateError(f"{', '.join(given[e])}: {e} flag(s) under --engine {engine}",
                              hint=f"use {engine}'s own flags (kvgate fit --help)")
    vllm = {
        "gpu_memory_utilization": args.gpu_memory_utilization, "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens,
        "tensor_parallel_size": args.tp, "pipeline_parallel_size": args.pp,
        "decode_context_parallel_size": args.dcp, "kv_cache_dtype": args.kv_cache_dtype,
        "kv_cache_memory_bytes": args.kv_cache_memory_bytes, "enforce_eager": args.enforce_eager,
        "block_size": args.block_size, "flashinfer_sampler": args.flashinfer_sampler,
    }
    sglang = {
        "mem_fraction_static": args.mem_fraction_static, "context_length": args.context_length,
        "max_running_requests": args.max_running_requests,
        "tp_size": shared_tp if shared_tp is not None else 1 if args.sglang_tp is None else args.sglang_tp,
        "kv_cache_dtype": args.kv_cache_dtype, "page_size": 1 if args.page_size is None else args.page_size,
        "chunked_prefill_size": args.chunked_prefill_size, "swa_full_tokens_ratio": args.swa_full_tokens_ratio,
    }
    lc = {k: v for k, v in (("ctx_size", args.ctx_size), ("parallel", args.parallel), ("cache_type_k", args.cache_type_k),
                            ("cache_type_v", args.cache_type_v), ("n_gpu_layers", args.n_gpu_layers),
                            ("flash_attn", args.flash_attn), ("ubatch_size", args.ubatch_size),
                            ("batch_size", args.batch_size), ("fit", args.fit),
                            ("fit_target", None if args.fit_target is None else args.fit_target * 2**20),
                            ("host_memory", args.host_memory)) if v is not None}
    lc["kv_unified"] = bool(args.kv_unified)
    if getattr(args, "no_op_offload", False):
        lc["op_offload"] = False
    if engine == "llama.cpp" and args.kv_cache_dtype.strip().lower() != "auto":  # else sized f16, the flag dropped
        raise KvgateError(f"--kv-cache-dtype {args.kv_cache_dtype} is vLLM's and SGLang's flag: llama.cpp does not read it",
                          hint="llama.cpp's KV types are -ctk / -ctv (e.g. -ctk q8_0 -ctv q8_0); or --engine vllm")
    if engine == "llama.cpp" and args.dtype is not None:
        raise KvgateError("--dtype is vLLM's and SGLang's flag: llama.cpp runs the GGUF's tensor types",
                          hint="leave --dtype out for llama.cpp (its KV types are -ctk / -ctv)")
    return FitInputs(model=args.model, engine=engine, gpu=args.gpu, total=args.total,
                     weights_bytes=args.weights_bytes, release=args.release, vllm=vllm, sglang=sglang, llamacpp=lc,
                     dtype=args.dtype or "auto", quantization=args.quantization)
