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
                  − (weights + activation peak + non-torch memory) [− CUDA graph pool, 0.20+]

When the interval straddles the line the answer is "can't tell", with how to measure
(kvgate run -- vllm serve ..., or kvgate import-log on its log). The GPU comes from
--gpu NAME (a table of common cards), --total BYTES, or this machine through NVML;
weights are exact from a model directory's safetensors headers, a Hub id in the local
Hugging Face cache (the Hub itself with KVGATE_HUB=1) or a preset's published checkpoint,
estimated from a config and its quantization_config (and said so), or given with
--weights-bytes. A CAN'T TELL names the term that decides it and the flag that narrows it.

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
    from kvgate.commands._args import add_sources_flag  # noqa: PLC0415

    add_fit_flags(p)
    add_sources_flag(p)
    p.usage = "%(prog)s MODEL [--gpu NAME | --total BYTES] [vLLM's, SGLang's or llama.cpp's flags]"
    from kvgate.engines.registry import engine_of_flag_group  # noqa: PLC0415

    for g in p._action_groups:  # one pointer per engine to the flags' defaults per release
        engine = engine_of_flag_group(g.title or "")
        if engine is not None:
            g.description = f"defaults per release and what each changes: kvgate help engine-flags {engine}"


def run(args: Any) -> int:
    from kvgate.engines.registry import get_engine  # noqa: PLC0415
    from kvgate.fit import gpu_from_total, local_gpu, lookup_gpu  # noqa: PLC0415
    from kvgate.fit.render import render_text  # noqa: PLC0415

    if isinstance(getattr(args, "gpu", None), str) and args.gpu.strip().lower() == "list":
        from kvgate.fit.gpus import GPU_TABLE, gpu_table_text  # noqa: PLC0415

        if getattr(args, "total", None) is not None or getattr(args, "cuda_total", None) is not None:
            raise KvgateError("--gpu list lists the cards; --total / --cuda-total name a GPU and are not used with it",
                              hint="kvgate fit --gpu list, or kvgate fit MODEL --total BYTES")

        def _reserve(name: str) -> dict[str, object] | None:
            g = lookup_gpu(name)
            return None if g.reserve is None else {**g.reserve[0].to_dict(), "source": g.reserve[1]}

        emit(args.json, {"gpus": [{"name": n, "nvml_total_mib": mib, "aliases": list(a), "source": src,
                                   "driver_reserve_bytes": _reserve(n)}
                                  for n, (a, mib, src) in GPU_TABLE.items()]}, gpu_table_text())
        return EXIT_OK
    if args.model is None:  # optional only for --gpu list
        raise KvgateError("the following arguments are required: MODEL",
                          hint="kvgate fit MODEL --gpu NAME (kvgate fit --gpu list shows the cards)")
    if getattr(args, "gpu", None) is not None and not args.gpu.strip():
        raise KvgateError("--gpu is empty", hint="--gpu NAME (--gpu list shows the table), or --total BYTES")
    inp = fit_inputs_from_args(args)
    cuda_total = getattr(args, "cuda_total", None)
    if cuda_total is not None:
        from kvgate.fit.gpus import gpu_from_cuda_total  # noqa: PLC0415

        if inp.gpu or inp.total or getattr(args, "wsl", False):
            raise KvgateError("--cuda-total is the GPU already: not with --gpu, --total or --wsl",
                              hint="--cuda-total as the engine's log prints it, or --gpu NAME / --total BYTES (with --wsl under WSL 2)")
        gpu = gpu_from_cuda_total(cuda_total)
    elif inp.gpu or inp.total:
        gpu = lookup_gpu(inp.gpu) if inp.gpu else gpu_from_total(inp.total)
    else:
        try:
            gpu = local_gpu(0)
        except KvgateError as exc:
            raise KvgateError(f"no --gpu or --total, and this machine's GPU cannot be read: {exc.message}",
                              hint="give --gpu NAME (e.g. H100, L40S, RTX-4090) or --total BYTES") from exc
    if getattr(args, "wsl", False) and cuda_total is None:
        from kvgate.fit.gpus import wsl_gpu  # noqa: PLC0415

        gpu = wsl_gpu(gpu)
    engine = get_engine(inp.engine)
    model = engine.load_model(inp.model)  # once: the engine's fit takes it
    if getattr(args, "encoder_len", None) is not None:  # the cross-attention layers' encoder positions
        from kvgate.model.encdec import with_encoder_len  # noqa: PLC0415

        model = with_encoder_len(model, args.encoder_len)
    from kvgate.fit.narrow import add_deciding_term  # noqa: PLC0415
    from kvgate.fit.tp_table import fit_over_tp, render_rows  # noqa: PLC0415

    answer, rows = fit_over_tp(engine, inp, model, gpu)
    add_deciding_term(answer)
    doc = answer.to_dict()
    text = render_text(answer, sources=args.sources)
    if rows is not None:
        doc["tp_table"] = [r.to_dict() for r in rows]
        text = text.rstrip("\n") + f"\n\nby tensor parallel size ({engine.tp_flag}; per GPU, the other flags " \
            "held):\n" + render_rows(rows, engine.tp_flag) + "\n"
    emit(args.json, doc, text)
    return EXIT_OK
