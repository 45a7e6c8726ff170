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
Will it fit? Before launch, kvgate fit answers in your engine's words: the KV cache pool
vLLM would make, the "GPU KV cache size" and "Maximum concurrency" lines it would print,
whether it starts (with the error it would stop with if not), and where the answer flips
in vLLM's own flags. Flags are `vllm serve`'s, with its defaults for the release
(--max-model-len 32k is 32,000 and 32K is 32,768, as vLLM reads them). The KV bytes are
exact; the other terms (weights, the profile run's activation peak, non-torch memory, the
CUDA graph pool) are intervals calibrated on real vLLM startup logs:

  KV cache pool = total × --gpu-memory-utilization
                  − (weights + activation peak + non-torch memory) [− CUDA graph pool, 0.21+]

When the interval straddles the line the answer is "can't tell", with how to measure
(kvgate run -- vllm serve ..., or kvgate import-log on its log). The GPU comes from
--gpu NAME (a table of common cards), --total BYTES, or this machine through NVML;
weights are exact from a model directory's safetensors headers, estimated from a preset
or config (and said so), or given with --weights-bytes.

  kvgate fit llama-3.1-8b --gpu H100 --max-model-len 32768 --max-num-seqs 16 --release 0.11.0

SGLang's flags select SGLang (max_total_num_tokens from --mem-fraction-static, 0.4 rule):
  kvgate fit llama-3.1-8b --gpu H200 --context-length 32768 --mem-fraction-static 0.85
llama.cpp's flags select llama.cpp (the KV buffer to the byte, -c as the whole context
split over -np, the largest -c with every layer on the GPU, the layers to keep on the CPU
otherwise):
  kvgate fit model.gguf --gpu RTX-4090 -c 32768 -np 4 -ctk q8_0 -ctv q8_0 -fa on

--json carries engine, release, kv_pool_bytes, tokens, max_concurrency (each {low, high}),
fits (yes/no/unknown), terms (name, low, high, source) and flip_points. Each engine flag's
default per release and what it changes: kvgate help engine-flags. From a startup log
instead (what if another GPU, length, TP or KV dtype): kvgate import-log LOG --gpu ...
"""


def add_arguments(p: Any) -> None:
    add_fit_flags(p)
    p.usage = "%(prog)s MODEL [--gpu NAME | --total BYTES] [the engine's flags: vLLM's, SGLang's or llama.cpp's]"
    for g in p._action_groups:  # one pointer per engine to the flags' defaults per release
        for title, engine in (("vLLM", "vllm"), ("SGLang", "sglang"), ("llama.cpp", "llama.cpp")):
            if (g.title or "").startswith(title + " flags"):
                g.description = f"defaults per release and what each changes: kvgate help engine-flags {engine}"


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
    if inp.engine == "llama.cpp":
        from kvgate.model.llamacpp_config import load_model_for_layout  # noqa: PLC0415

        return _llamacpp(args, inp, load_model_for_layout(inp.model, "llama.cpp"), gpu)
    model = load_model(inp.model)
    if inp.engine == "llama.cpp":
        return _llamacpp(args, inp, model, gpu)
    if inp.engine == "vllm":
        flags = VllmFlags(**inp.vllm)
        ranks = flags.tensor_parallel_size * flags.pipeline_parallel_size
    else:
        from kvgate.fit.sglang_flags import SglangFlags  # noqa: PLC0415

        sflags = SglangFlags(**inp.sglang)  # bad values named before any work
        ranks = sflags.tp_size
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

        answer = fit_sglang(model, weights, gpu, sflags, resolve_release("sglang", inp.release),
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
        try:
            w = weight_bytes(inp.model)
        except KvgateError as exc:
            if not str(model.source).endswith(".json") or "gguf_architecture" not in (model.config or {}):
                raise
            # a remote-code config read as llama.cpp's converter maps it: no transformers class to count with
            raise KvgateError(f"the weights of {model.name} cannot be estimated from its config ({exc.message})",
                              hint="give the .gguf file, or --weights-bytes N (the GGUF's size)") from exc
        wb, exact, src = w.bytes, w.exact, (w.source if w.exact else f"estimate from {inp.model}'s config")
    answer = fit_llamacpp(model, wb, exact, src, gpu, LlamaCppFlags(**inp.llamacpp, ngl_given="n_gpu_layers" in inp.llamacpp), resolve_release("llama.cpp", inp.release))
    if inp.weights_bytes is None and not exact and getattr(w, "params", None):
        per = w.bytes / w.params
        dtype = {2: "bf16", 4: "f32", 1: "8-bit"}.get(round(per), f"{per:g} B a parameter")
        answer.notes.append(f"no GGUF: the weights are taken as {dtype} ({w.params:,} parameters × {per:g} B, the "
                            "config's dtype); a quantized GGUF (Q8_0, Q4_K_M) is 2-4× smaller: give the .gguf file "
                            "or --weights-bytes")
    emit(args.json, answer.to_dict(), render_text(answer))
    return EXIT_OK
