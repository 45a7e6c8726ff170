"""The flags of ``kvgate fit``, spelled as each engine spells them, and the typed inputs
built from them (nothing below ``commands/`` sees the Namespace)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvgate.commands._types import nonneg_int, positive_int, real
from kvgate.errors import KvgateError

ENGINES = ("vllm", "sglang", "llama.cpp")


def _human_int(flag: str, allow_auto: bool = False) -> Any:
    def parse(text: str) -> int | None:
        from kvgate.fit.humanint import human_readable_int  # noqa: PLC0415

        try:
            v = human_readable_int(text, flag=flag, allow_auto=allow_auto)
            return -1 if v is None else v  # auto / -1
        except KvgateError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None
    return parse


def _yes_no(flag: str) -> Callable[[str], bool]:
    """``yes``/``no`` (also on/off, true/false, 1/0) as a bool."""
    def parse(text: str) -> bool:
        t = text.strip().lower()
        if t in ("yes", "on", "true", "1"):
            return True
        if t in ("no", "off", "false", "0"):
            return False
        raise argparse.ArgumentTypeError(f"{flag} takes yes or no, got {text!r}")
    return parse


def _fraction(text: str) -> float:
    """A share in (0, 1] (``--gpu-memory-utilization``, ``--mem-fraction-static``)."""
    return _unit_fraction(text)


def _llamacpp_int(convert: Callable[[str], int]) -> Callable[[str], int]:
    """``convert`` (:mod:`kvgate.commands._types`) with llama.cpp's rule said on a bad value:
    its flags take plain numbers, no ``k`` suffix."""
    def parse(text: str) -> int:
        try:
            return convert(text)
        except argparse.ArgumentTypeError as exc:
            if not str(exc).startswith(("not a number", "must be a whole number")):
                raise
            raise argparse.ArgumentTypeError(f"{exc} (llama.cpp takes plain numbers)") from None
    return parse


_unit_fraction = real(0.0, 1.0, open_min=True)


def _tp_or_auto(convert: Callable[[str], int | None]) -> Callable[[str], int | None]:
    """A TP size, or ``auto`` (-1): the table over TP 1, 2, 4, 8 (:mod:`kvgate.fit.tp_table`)."""
    def parse(text: str) -> int | None:
        return -1 if text.strip().lower() == "auto" else convert(text)
    return parse


_count = _llamacpp_int(nonneg_int)
_positive_count = _llamacpp_int(positive_int)  # -np, -ub, -b


def _bytes(text: str) -> int:
    from kvgate.units import parse_bytes  # noqa: PLC0415

    try:
        return parse_bytes(text)
    except KvgateError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def add_fit_flags(p: argparse.ArgumentParser) -> None:
    """MODEL, ``--engine``, the GPU, weights, release, and vLLM's memory flags."""
    p.add_argument("model", metavar="MODEL", nargs="?", help="model directory (exact weights from its safetensors), .gguf file, "
                   "Hub id in the local cache, config.json (weights ESTIMATED from it), or preset name "
                   "(the published checkpoint's exact bytes)")
    p.add_argument("--engine", choices=ENGINES, default=None,
                   help="the engine you will launch (default: the one whose flags are given, else vllm)")
    g = p.add_argument_group("the GPU (one of; default: this machine's GPU 0 through NVML)")
    g.add_argument("--gpu", metavar="NAME", nargs="?", const="list",
                   help="a card by name: H100, H100-NVL, H200, B200, A100-80GB, A100-40GB, L40S, L4, A10, A6000, "
                        "RTX-3090, RTX-4090, RTX-5090, MI300X, ...; --gpu alone or --gpu list: the table")
    g.add_argument("--total", metavar="BYTES", type=_bytes, help="the card's memory as nvidia-smi prints it, e.g. 81559MiB "
                   "(the driver reserve, 424-621 MiB, is taken off)")
    g.add_argument("--cuda-total", metavar="BYTES", default=None,
                   help="the CUDA total as the engine's log prints it (vLLM: total_gpu_memory (79.19GiB), "
                        "'Free memory on device (x/79.19 GiB)'): nothing taken off")
    g.add_argument("--wsl", action="store_true",
                   help="the card runs under WSL 2, where CUDA's total is the whole card (no driver reserve)")
    p.add_argument("--encoder-len", metavar="N", type=positive_int, default=None,
                   help="encoder-decoder models: the encoder positions each cross-attention layer holds (Whisper: "
                        "fixed at max_source_positions; T5/BART: the input's length)")
    w = p.add_argument_group("weights and release")
    w.add_argument("--weights-bytes", metavar="BYTES", type=_bytes,
                   help="the whole checkpoint's bytes (split over -tp × -pp as the engine splits it), e.g. 16060522496 or 14.96GiB")
    w.add_argument("--release", "--vllm-version", dest="release", metavar="X.Y.Z",
                   help="engine release whose rules apply (default: the installed engine, else the newest modelled)")
    v = p.add_argument_group("vLLM flags (vllm serve's spellings and defaults)")
    v.add_argument("--gpu-memory-utilization", metavar="U", type=_fraction, default=None, help="share of the GPU vLLM takes (default 0.9; 0.92 from 0.20.0)")
    v.add_argument("--max-model-len", metavar="L", type=_human_int("--max-model-len", allow_auto=True), default=None,
                   help="tokens per request; 32k = 32,000 and 32K = 32,768 as vLLM reads them; auto = the largest that "
                        "fits (default: the model's)")
    v.add_argument("--max-num-seqs", metavar="N", type=_human_int("--max-num-seqs"), default=None,
                   help="sequences per step (default 256, or 1024 on ≥ 70 GiB GPUs other than A100, V1)")
    v.add_argument("--max-num-batched-tokens", metavar="N", type=_human_int("--max-num-batched-tokens"), default=None,
                   help="tokens per step: sizes the profile run's activation peak (default by release and GPU)")
    v.add_argument("--tensor-parallel-size", "-tp", dest="tp", metavar="N", type=_tp_or_auto(_human_int("-tp")), default=1,
                   help="GPUs per model replica; auto: a table of TP 1, 2, 4, 8 (SGLang spells it so too)")
    v.add_argument("--pipeline-parallel-size", "-pp", dest="pp", metavar="N", type=_human_int("-pp"), default=1, help="pipeline stages")
    v.add_argument("--decode-context-parallel-size", "-dcp", dest="dcp", metavar="N", type=_human_int("-dcp"), default=1,
                   help="ranks of the -tp group sharing one request's tokens")
    v.add_argument("--kv-cache-dtype", metavar="DTYPE", default="auto",
                   help="vLLM and SGLang: auto (the model's dtype), fp8, fp8_e4m3, fp8_e5m2")
    v.add_argument("--kv-cache-memory-bytes", metavar="BYTES", type=_human_int("--kv-cache-memory-bytes"), default=None,
                   help="KV cache size per GPU, bypassing --gpu-memory-utilization")
    v.add_argument("--dtype", metavar="DTYPE", default=None, type=str.lower,
                   choices=("auto", "half", "float16", "bfloat16", "float", "float32"),
                   help="vLLM and SGLang: the dtype the model runs in (default auto: the config's); "
                        "--kv-cache-dtype auto and the loaded weights follow it")
    v.add_argument("--quantization", "-q", metavar="METHOD", default=None,
                   help="the checkpoint's method (awq, gptq, fp8, ...; vLLM stops on another); on an unquantized "
                        "checkpoint it needs --weights-bytes (the loaded size)")
    v.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    v.add_argument("--flashinfer-sampler", metavar="yes|no", default=None, type=_yes_no("--flashinfer-sampler"),
                   help="V1 samples with FlashInfer (its log: 'Using FlashInfer for top-p & top-k sampling') or not; "
                        "default: the release's rule")
    v.add_argument("--block-size", metavar="N", type=_human_int("--block-size"), default=None, help="tokens per KV block (default 16)")
    s = p.add_argument_group("SGLang flags (sglang.launch_server's spellings and defaults)")
    s.add_argument("--mem-fraction-static", metavar="F", type=_fraction, default=None,
                   help="share of free memory for weights + KV pool (default by TP: 0.88 … 0.79)")
    s.add_argument("--context-length", metavar="L", type=_count, default=None,
                   help="tokens per request (default: the model's)")
    s.add_argument("--max-running-requests", metavar="N", type=_count, default=None,
                   help="requests running at once")
    s.add_argument("--tp-size", "--tp", dest="sglang_tp", metavar="N", type=_tp_or_auto(_count), default=None,
                   help="tensor parallel size; auto: a table of TP 1, 2, 4, 8")
    s.add_argument("--page-size", metavar="N", type=_count, default=None, help="tokens per page (default 1)")
    lc = p.add_argument_group("llama.cpp flags (llama-server's spellings and defaults)")
    lc.add_argument("-c", "--ctx-size", dest="ctx_size", metavar="N", type=_count, default=None,
                    help="WHOLE context of all sequences (each gets -c / -np, padded to 256); default: the model's")
    lc.add_argument("-np", "--parallel", dest="parallel", metavar="N", type=_positive_count, default=None,
                    help="parallel sequences (default 1)")
    lc.add_argument("-ctk", "--cache-type-k", dest="cache_type_k", metavar="TYPE", default=None, help="K type (default f16)")
    lc.add_argument("-ctv", "--cache-type-v", dest="cache_type_v", metavar="TYPE", default=None, help="V type (default f16)")
    lc.add_argument("-ngl", "--n-gpu-layers", "--gpu-layers", dest="n_gpu_layers", metavar="N", type=_count, default=None,
                    help="layers on the GPU (default 999: all)")
    lc.add_argument("-fa", "--flash-attn", dest="flash_attn", nargs="?", const="on", choices=("on", "off", "auto"),
                    default=None, help="flash attention (default auto)")
    lc.add_argument("-ub", "--ubatch-size", dest="ubatch_size", metavar="N", type=_positive_count, default=None,
                    help="physical batch (default 512)")
    lc.add_argument("-b", "--batch-size", dest="batch_size", metavar="N", type=_positive_count, default=None,
                    help="logical batch (default 2048)")
    lc.add_argument("-fit", "--fit", dest="fit", choices=("on", "off"), default=None,
                    help="llama.cpp's --fit: move layers to the CPU / shrink an unset -c to fit (default on from ~b7400)")
    lc.add_argument("-fitt", "--fit-target", dest="fit_target", metavar="MiB", type=_count, default=None,
                    help="free memory --fit leaves on the GPU, MiB (default 1024)")
    lc.add_argument("--host-memory", dest="host_memory", metavar="BYTES", type=_bytes, default=None,
                    help="host RAM for the layers and KV off the GPU (default: this machine's)")
    lc.add_argument("-kvu", "--kv-unified", dest="kv_unified", action="store_true", help="one KV cache for all sequences")
    lc.add_argument("--no-op-offload", dest="no_op_offload", action="store_true",
                    help="CPU layers' ops stay on the CPU (no weight copies in the GPU's compute buffer)")
    s.add_argument("--chunked-prefill-size", metavar="N", type=_count, default=None,
                   help="prefill chunk (does not change the pool)")
    s.add_argument("--swa-full-tokens-ratio", metavar="R", type=_fraction, default=None,
                   help="hybrid sliding-window models: SWA tokens per full-layer token (default 0.8)")


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
    given = {
        "vllm": [f for f, v in (("--gpu-memory-utilization", args.gpu_memory_utilization),
                                ("--max-model-len", args.max_model_len), ("--max-num-seqs", args.max_num_seqs),
                                ("--max-num-batched-tokens", args.max_num_batched_tokens),
                                ("-tp", args.tp if args.tp != 1 else None), ("-pp", args.pp if args.pp != 1 else None),
                                ("-dcp", args.dcp if args.dcp != 1 else None),
                                ("--kv-cache-memory-bytes", args.kv_cache_memory_bytes),
                                ("--enforce-eager", args.enforce_eager or None), ("--block-size", args.block_size),
                                ("--flashinfer-sampler", args.flashinfer_sampler),
                                ("--quantization", args.quantization))
                 if v is not None],
        "sglang": [f for f, v in (("--mem-fraction-static", args.mem_fraction_static),
                                  ("--context-length", args.context_length),
                                  ("--max-running-requests", args.max_running_requests), ("--tp-size", args.sglang_tp),
                                  ("--page-size", args.page_size), ("--chunked-prefill-size", args.chunked_prefill_size),
                                  ("--swa-full-tokens-ratio", args.swa_full_tokens_ratio))
                   if v is not None],
    }
    given["llama.cpp"] = [f for f, v in (("-c", args.ctx_size), ("-np", args.parallel), ("-ctk", args.cache_type_k),
                                         ("-ctv", args.cache_type_v), ("-ngl", args.n_gpu_layers),
                                         ("-fa", args.flash_attn), ("-ub", args.ubatch_size), ("-b", args.batch_size),
                                         ("-kvu", args.kv_unified or None), ("-fit", args.fit),
                                         ("-fitt", args.fit_target), ("--host-memory", args.host_memory),
                                         ("--no-op-offload", getattr(args, "no_op_offload", False) or None)) if v is not None]
    shared_tp = _tp_for_sglang(args, given)
    engines = [e for e, fl in given.items() if fl]
    if len(engines) > 1:
        raise KvgateError("flags of two engines: " + "; ".join(f"{', '.join(given[e])} ({e})" for e in engines),
                          hint="give the flags of the engine you will launch")
    engine = args.engine or (engines[0] if engines else "vllm")
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
