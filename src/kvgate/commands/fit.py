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

    if isinstance(getattr(args, "gpu", None), str) and args.gpu.strip().lower() == "list":
        from kvgate.fit.gpus import GPU_TABLE, gpu_table_text  # noqa: PLC0415

        emit(args.json, {"gpus": [{"name": n, "nvml_total_mib": mib, "aliases": list(a), "source": src}
                                  for n, (a, mib, src) in GPU_TABLE.items()]}, gpu_table_text())
        return EXIT_OK
    if getattr(args, "gpu", None) is not None and not args.gpu.strip():
        raise KvgateError("--gpu is empty", hint="--gpu NAME (--gpu list shows the table), or --total BYTES")
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
    key = "tensor_parallel_size" if inp.engine == "vllm" else "tp_size"
    opts = inp.vllm if inp.engine == "vllm" else inp.sglang
    auto = opts[key] == -1  # --tensor-parallel-size auto / --tp-size auto: kvgate.fit.tp_table
    if auto:
        opts = {**opts, key: 1}
    if inp.engine == "vllm":
        flags = VllmFlags(**opts)
    else:
        from kvgate.fit.sglang_flags import SglangFlags  # noqa: PLC0415

        sflags = SglangFlags(**opts)  # bad values named before any work
    wb = None if inp.weights_bytes is not None else weight_bytes(inp.model)
    mm = is_multimodal(inp.model)
    release = resolve_release(inp.engine, inp.release)
    ratio = None
    if inp.dtype != "auto":
        from kvgate.fit.dtype import resolve_dtype, weight_ratio  # noqa: PLC0415

        ratio = weight_ratio(model.config or {}, resolve_dtype(inp.dtype, model.config or {}, inp.engine, gpu.name)[0])

    def answer_at(tp: int) -> Any:
        from dataclasses import replace  # noqa: PLC0415

        ranks = tp * flags.pipeline_parallel_size if inp.engine == "vllm" else tp
        if wb is None:
            assert inp.weights_bytes is not None
            b, exact, src = inp.weights_bytes, True, f"--weights-bytes {inp.weights_bytes:,} B"
        else:
            b, exact = wb.bytes, wb.exact
            src = wb.source if wb.exact else f"estimate from {inp.model}'s config (parameters × dtype)"
        if ratio is not None:  # --dtype casts an unquantized checkpoint at load (kvgate.fit.dtype)
            b, src = b * ratio[0] // ratio[1], f"{src}, × {ratio[0]}/{ratio[1]} (--dtype {inp.dtype})"
        weights = weights_term(b, ranks=ranks, exact=exact, source=src)
        if inp.engine == "vllm":
            return fit_vllm(model, weights, gpu, replace(flags, tensor_parallel_size=tp), release, multimodal=mm,
                            dtype=inp.dtype)
        from kvgate.fit.sglang_fit import fit_sglang  # noqa: PLC0415

        return fit_sglang(model, weights, gpu, replace(sflags, tp_size=tp), release, multimodal=mm, dtype=inp.dtype)

    from kvgate.fit.tp_table import TP_SIZES, render_rows, smallest_fitting, tp_note, tp_rows  # noqa: PLC0415

    flag = "-tp" if inp.engine == "vllm" else "--tp-size"
    rows = None
    if auto:
        rows = tp_rows(answer_at)
        best = smallest_fitting(rows)
        answer = answer_at(best or next((r.tp for r in rows if r.fits != "refused"), 1))
        answer.notes.insert(0, f"{flag} auto: " + (f"the smallest tensor parallel size that fits is {best}; shown at "
                                                   f"{best} (table below)" if best else
                                                   "no size of the table fits (table below)"))
    else:
        given_tp = opts[key]
        answer = answer_at(given_tp)
        if answer.fits == "no" and given_tp < TP_SIZES[-1]:
            rows = tp_rows(answer_at, [t for t in TP_SIZES if t > given_tp])
            note = tp_note(rows, flag, given_tp)
            if note:
                answer.notes.insert(0, note)
    doc = answer.to_dict()
    text = render_text(answer)
    if rows is not None:
        doc["tp_table"] = [r.to_dict() for r in rows]
        text = text.rstrip("\n") + f"\n\nby tensor parallel size ({flag}; per GPU, the other flags held):\n" + \
            render_rows(rows, flag) + "\n"
    emit(args.json, doc, text)
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
    answer = fit_llamacpp(model, wb, exact, src, gpu, LlamaCppFlags(**inp.llamacpp, ngl_given="n_gpu_layers" in inp.llamacpp), resolve_release("llama.cpp", inp.release))
    if inp.weights_bytes is None and not exact and getattr(w, "params", None):
        per = w.bytes / w.params
        dtype = {2: "bf16", 4: "f32", 1: "8-bit"}.get(round(per), f"{per:g} B a parameter")
        answer.notes.append(f"no GGUF: the weights are taken as {dtype} ({w.params:,} parameters × {per:g} B, the "
                            "config's dtype); a quantized GGUF (Q8_0, Q4_K_M) is 2-4× smaller: give the .gguf file "
                            "or --weights-bytes")
    emit(args.json, answer.to_dict(), render_text(answer))
    return EXIT_OK
