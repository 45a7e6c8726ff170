"""``kvgate fit``: will this model start under vLLM on this GPU with these flags? The KV
cache pool as an interval, the lines the engine would log, a verdict, and flip points."""

from __future__ import annotations

from typing import Any

from kvgate.commands._fit_args import add_fit_flags, fit_inputs_from_args
from kvgate.errors import EXIT_OK, KvgateError
from kvgate.output import emit

NAME = "fit"
HELP = "will it fit? vLLM's, SGLang's or llama.cpp's KV cache, tokens and concurrency before launch, a verdict, flip points"
DESCRIPTION = """\
Will it fit? Answered before launch, in your engine's own words.

vLLM sizes its KV cache pool per GPU as
  total × --gpu-memory-utilization − (weights + activation peak + non-torch memory)
  [− CUDA graph pool, from vLLM 0.21]
and divides it into blocks. The KV bytes are exact; the other terms are intervals
calibrated on real vLLM startup logs, so the answer is an interval too: the pool, the
"GPU KV cache size: N tokens" and "Maximum concurrency" lines vLLM would print, and
  fits / does not fit (with the error vLLM would stop with) / can't tell (then measure).
Flip points: the largest --max-model-len that fits, the --max-num-seqs beyond which
full-length requests queue, the --gpu-memory-utilization needed.

  kvgate fit llama-3.1-8b --gpu H100 --max-model-len 32k --max-num-seqs 16 --release 0.11.0
  kvgate fit ./Qwen3-8B --gpu L40S -tp 2 --kv-cache-dtype fp8 --json

Weights are exact from a model directory's safetensors headers; from a preset or a
config.json they are estimated (and said so) unless --weights-bytes gives them.
SGLang (its flags select it, or --engine sglang): max_total_num_tokens as an interval
from --mem-fraction-static × free memory − weights (the 0.4 series' rule).
llama.cpp (its flags select it): the KV buffer to the byte, model and compute buffers as
intervals, the largest -c with every layer on the GPU, and the layers to keep on the CPU
otherwise.

  kvgate fit llama-3.1-8b --gpu H100 --context-length 32768 --mem-fraction-static 0.85
  kvgate fit model.gguf --gpu RTX-4090 -c 65536 -np 4 -ctk q8_0 -ctv q8_0 -fa on
"""


def add_arguments(p: Any) -> None:
    add_fit_flags(p)


def run(args: Any) -> int:
    from kvgate.fit import VllmFlags, fit_vllm, gpu_from_total, local_gpu, lookup_gpu, resolve_release, weights_term  # noqa: PLC0415
    from kvgate.fit.render import render_text  # noqa: PLC0415
    from kvgate.fit.widths import is_multimodal  # noqa: PLC0415
    from kvgate.model import load_model  # noqa: PLC0415
    from kvgate.model.weights import weight_bytes  # noqa: PLC0415

    inp = fit_inputs_from_args(args)
    if inp.gpu or inp.total:
        gpu = lookup_gpu(inp.gpu) if inp.gpu else gpu_from_total(inp.total)
    else:
        try:
            gpu = local_gpu(0)
        except KvgateError as exc:
            raise KvgateError(f"no --gpu or --total, and this machine's GPU cannot be read: {exc.message}",
                              hint="give --gpu NAME (e.g. H100, L40S, RTX-4090) or --total BYTES") from exc
    model = load_model(inp.model)
    if inp.engine == "llama.cpp":
        return _llamacpp(args, inp, model, gpu)
    if inp.engine == "vllm":
        flags = VllmFlags(**inp.vllm)
        ranks = flags.tensor_parallel_size * flags.pipeline_parallel_size
    else:
        ranks = inp.sglang["tp_size"]
    if inp.weights_bytes is not None:
        weights = weights_term(inp.weights_bytes, ranks=ranks, exact=True, source=f"--weights-bytes {inp.weights_bytes:,} B")
    else:
        wb = weight_bytes(inp.model)
        src = wb.source if wb.exact else f"estimate from {inp.model}'s config (parameters × dtype)"
        weights = weights_term(wb.bytes, ranks=ranks, exact=wb.exact, source=src)
    mm = is_multimodal(inp.model)
    if inp.engine == "vllm":
        answer = fit_vllm(model, weights, gpu, flags, resolve_release("vllm", inp.release),
                          multimodal=mm)
    else:
        from kvgate.fit.sglang_fit import fit_sglang  # noqa: PLC0415
        from kvgate.fit.sglang_flags import SglangFlags  # noqa: PLC0415

        answer = fit_sglang(model, weights, gpu, SglangFlags(**inp.sglang), resolve_release("sglang", inp.release),
                            multimodal=mm)
    emit(args.json, answer.to_dict(), render_text(answer))
    return EXIT_OK


def _llamacpp(args: Any, inp: Any, model: Any, gpu: Any) -> int:
    from kvgate.fit import resolve_release  # noqa: PLC0415
    from kvgate.fit.llamacpp_fit import LlamaCppFlags, fit_llamacpp  # noqa: PLC0415
    from kvgate.fit.render import render_text  # noqa: PLC0415
    from kvgate.model.weights import weight_bytes  # noqa: PLC0415

    if inp.weights_bytes is not None:
        wb, exact, src = inp.weights_bytes, True, f"--weights-bytes {inp.weights_bytes:,} B"
    else:
        w = weight_bytes(inp.model)
        wb, exact, src = w.bytes, w.exact, (w.source if w.exact else f"estimate from {inp.model}'s config")
    answer = fit_llamacpp(model, wb, exact, src, gpu, LlamaCppFlags(**inp.llamacpp), resolve_release("llama.cpp", inp.release))
    emit(args.json, answer.to_dict(), render_text(answer))
    return EXIT_OK
