"""vLLM as kvgate asks it (:class:`kvgate.engines.base.Engine`): its pool layout, its
startup-log reader and its ``kvgate fit``. Light: the rules load on first use."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvgate.engines.base import EngineBase

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.engines.pool import EnginePool
    from kvgate.fit.interval import Term
    from kvgate.geometry.base import Layout


def weights_for_fit(inputs: Any, ranks: int, model: Any = None, gpu: Any = None, engine: str = "vllm") -> Term:
    """The weights term of ``kvgate fit`` (vLLM's and SGLang's): ``--weights-bytes``, else
    the model's own bytes (exact from safetensors headers, else a labelled estimate),
    scaled by ``--dtype`` when it casts an unquantized checkpoint at load
    (:func:`kvgate.fit.dtype.weight_ratio`), split over ``ranks``."""
    from kvgate.engines.vllm.budget import weights_term  # noqa: PLC0415
    from kvgate.model.weights import weight_bytes  # noqa: PLC0415

    plain = False
    online = None
    if engine == "vllm" and inputs.weights_bytes is None and model is not None:
        from kvgate.engines.vllm.quantization import online_quantization  # noqa: PLC0415
        from kvgate.model.weights import raw_config  # noqa: PLC0415

        # the file as published: a wrapper holds quantization_config above its text config
        online = online_quantization(getattr(inputs, "quantization", None),
                                     raw_config(inputs.model) or model.config or {})
    if inputs.weights_bytes is not None:
        b, exact, src = inputs.weights_bytes, True, f"--weights-bytes {inputs.weights_bytes:,} B"
    elif online == "fp8":
        # vLLM quantizes the checkpoint while loading (kvgate.engines.vllm.quantization): the
        # loaded bytes follow from the config, whatever the checkpoint's files hold
        from kvgate.engines.registry import resolve_dtype  # noqa: PLC0415
        from kvgate.engines.vllm.quantization import online_fp8_weight_bytes  # noqa: PLC0415

        cfg = model.config or {}
        dt = getattr(inputs, "dtype", "auto")
        run = resolve_dtype(dt, cfg, engine, getattr(gpu, "name", None))[0] if dt != "auto" else None
        b, exact = online_fp8_weight_bytes(cfg, run).bytes, False
        src = f"estimate from {inputs.model}'s config under vLLM's online FP8 (--quantization fp8)"
    else:
        wb = weight_bytes(inputs.model)
        b, exact = wb.bytes, wb.exact
        quant = any("quantization_config" in n for n in (wb.notes or []))
        how = "and its quantization_config" if quant else "(parameters × dtype)"
        src = wb.source if wb.exact else f"estimate from {inputs.model}'s config {how}"
        if engine == "vllm" and not exact and not quant and model is not None:
            # vLLM's loader allocates parameters × dtype (kvgate.engines.vllm.budget.WEIGHTS_ESTIMATE_PLAIN)
            from kvgate.engines.vllm.budget import plain_estimate  # noqa: PLC0415
            from kvgate.fit.widths import is_multimodal  # noqa: PLC0415

            plain = plain_estimate(model.config or {}, multimodal=is_multimodal(inputs.model))
    if getattr(inputs, "dtype", "auto") != "auto" and model is not None and online is None:
        from kvgate.engines.registry import resolve_dtype  # noqa: PLC0415
        from kvgate.fit.dtype import weight_ratio  # noqa: PLC0415

        cfg = model.config or {}
        ratio = weight_ratio(cfg, resolve_dtype(inputs.dtype, cfg, engine, getattr(gpu, "name", None))[0])
        if ratio is not None:
            b, src = b * ratio[0] // ratio[1], f"{src}, × {ratio[0]}/{ratio[1]} (--dtype {inputs.dtype})"
    return weights_term(b, ranks=ranks, exact=exact, source=src, plain=plain)


@dataclass(frozen=True)
class VllmEngine(EngineBase):
    """vLLM (V1 engine)."""

    def layout_factory(self) -> Callable[..., Layout]:
        factory: Callable[..., Layout] = self.module("pool").VLLM
        return factory

    @property
    def pool_report(self) -> Callable[..., dict[str, Any]]:
        """vLLM's pool from its available KV memory (:func:`kvgate.engines.vllm.pool_report.vllm_kv_cache_report`)."""
        report: Callable[..., dict[str, Any]] = self.module("pool_report").vllm_kv_cache_report
        return report

    def render_fit(self, answer: Any, *, sources: bool = False) -> str:
        from kvgate.fit.render import render_vllm  # noqa: PLC0415

        return render_vllm(answer, sources=sources)

    def slot_words(self, max_seq: int, slots: int) -> tuple[str, str]:
        s = "s" if slots != 1 else ""
        return f"one sequence at --max-model-len {max_seq:,}", f"{slots} sequence{s} (--max-num-seqs {slots})"

    def check_parallel(self, model: Any, tp: int, pp: int, dcp: int) -> None:
        self.module("fit").check_parallel(model, tp, pp, dcp)

    def read_pool(self, lines: Sequence[Any]) -> EnginePool:
        from kvgate.engines.pool import _from_vllm  # noqa: PLC0415

        pool: EnginePool = _from_vllm(self.module("log").parse_vllm(lines))
        return pool

    def fit(self, inputs: Any, model: Any, gpu: Any) -> Any:
        from kvgate.engines.vllm.cross import check_encoder_decoder  # noqa: PLC0415
        from kvgate.engines.vllm.fit import fit_vllm  # noqa: PLC0415
        from kvgate.engines.vllm.flags import build_flags  # noqa: PLC0415
        from kvgate.engines.vllm.quantization import check_quantization  # noqa: PLC0415
        from kvgate.fit.release import resolve_release  # noqa: PLC0415
        from kvgate.fit.widths import is_multimodal  # noqa: PLC0415

        flags = build_flags(inputs.vllm)
        release = resolve_release(self.name, inputs.release)
        check_encoder_decoder(model, release)
        qnote = check_quantization(getattr(inputs, "quantization", None), model.config or {},
                                   inputs.weights_bytes is not None)
        weights = weights_for_fit(inputs, flags.tensor_parallel_size * flags.pipeline_parallel_size, model, gpu,
                                  self.name)
        mm = is_multimodal(inputs.model)
        answer = fit_vllm(model, weights, gpu, flags, release, multimodal=mm, dtype=inputs.dtype,
                          ref=str(inputs.model))
        if qnote:
            answer.notes.append(qnote)
        return answer


ENGINE = VllmEngine(
    name="vllm", display="vLLM", package="kvgate.engines.vllm", flags_title="vLLM flags",
    launcher="vLLM (vllm serve)", pipeline_stages=True, tp_option=("vllm", "tensor_parallel_size"), tp_flag="-tp",
    log_markers=("GPU KV cache size", "Available KV cache memory", "V1 LLM engine", "# GPU blocks",
                 "Maximum concurrency for", "V0 LLM engine", "Initializing an LLM engine", "kv_cache_size="),
    pool_line_hint="look for 'Available KV cache memory' / 'GPU KV cache size'",
    releases=(("0.20.0", "vllm_flags.CUDAGRAPH_ESTIMATE_FROM: the CUDA graph pool estimate on by default"),
              ("0.24.0", "tests/data/fit_logs: the v0.24.0 startup log inside its interval")),
    oldest_release=("0.4.0", "tests/data/fit_logs: the oldest vLLM startup log (0.4 series); vllm_flags' V0 defaults"),
    dist="vllm",
    words={"quant": "--kv-cache-dtype {q}", "len": "--max-model-len", "seqs": "--max-num-seqs",
           "offload": "CPU KV offload", "tp": "-tp {t}", "record_len": "--max-model-len",
           "kv_dtype_flag": "--kv-cache-dtype"},
    layout_flags=frozenset({
        "block_size", "max_num_batched_tokens", "disable_hybrid_kv_cache_manager", "kernel_block_alignment",
        "state_format", "mamba_cache_mode", "num_speculative_blocks",
        # kvgate.options.EngineOptions (vLLM's --enable-prefix-caching, --speculative-config,
        # --mamba-ssm-dtype, --mamba-cache-dtype, kvgate's --vllm-version)
        "enable_prefix_caching", "speculative_config", "version", "ssm_format", "conv_format",
        "pipeline_parallel_size", "pp_layer_partition", "decode_context_parallel_size",
        "prefill_context_parallel_size"}),
)
