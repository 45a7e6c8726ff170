"""llama.cpp as kvgate asks it (:class:`kvgate.engines.base.Engine`): its KV cells layout,
its startup-log reader and its ``kvgate fit``. Light: the rules load on first use."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvgate.engines.base import EngineBase
from kvgate.engines.formats import suffixes_of

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.engines.pool import EnginePool
    from kvgate.geometry.base import Layout


@dataclass(frozen=True)
class LlamaCppEngine(EngineBase):
    """llama.cpp (``llama-server``)."""

    def layout_factory(self) -> Callable[..., Layout]:
        factory: Callable[..., Layout] = self.module("pool").LlamaCpp
        return factory

    def render_fit(self, answer: Any, *, sources: bool = False) -> str:
        from kvgate.fit.render import render_llamacpp  # noqa: PLC0415

        return render_llamacpp(answer, sources=sources)

    def slot_words(self, max_seq: int, slots: int) -> tuple[str, str]:
        s = "s" if slots != 1 else ""
        return f"one sequence of {max_seq:,} cells (-c / -np)", f"{slots} sequence{s} (-np {slots})"

    def read_pool(self, lines: Sequence[Any]) -> EnginePool:
        from kvgate.engines.pool import _from_llamacpp  # noqa: PLC0415

        pool: EnginePool = _from_llamacpp(self.module("log").parse_llamacpp(lines))
        return pool

    def load_model(self, ref: Any) -> Any:
        """A config of a remote-code type llama.cpp's converter supports is read in llama.cpp's
        layout (:func:`kvgate.engines.llamacpp.config.load_for_llamacpp`); anything else as
        :func:`kvgate.model.load_model` reads it."""
        from kvgate.engines.llamacpp.config import load_for_llamacpp  # noqa: PLC0415

        return load_for_llamacpp(ref) or super().load_model(ref)

    def fit(self, inputs: Any, model: Any, gpu: Any) -> Any:
        from kvgate.engines.llamacpp.fit import build_flags, fit_llamacpp  # noqa: PLC0415
        from kvgate.fit.release import resolve_release  # noqa: PLC0415
        from kvgate.model.weights import weight_bytes  # noqa: PLC0415

        if inputs.weights_bytes is not None:
            wb, exact, src = inputs.weights_bytes, True, f"--weights-bytes {inputs.weights_bytes:,} B"
        else:
            w = weight_bytes(inputs.model)
            wb, exact, src = w.bytes, w.exact, (w.source if w.exact else f"estimate from {inputs.model}'s config")
        from kvgate.engines.llamacpp.fit import default_slots  # noqa: PLC0415

        lc = dict(inputs.llamacpp)
        release = resolve_release(self.name, inputs.release)
        auto = "parallel" not in lc and default_slots(release)[0] > 1
        if auto:  # llama-server's -np auto: 4 slots sharing one unified KV cache
            lc["parallel"], lc["kv_unified"] = default_slots(release)
        flags = build_flags(lc, ngl_given="n_gpu_layers" in lc)
        answer = fit_llamacpp(model, wb, exact, src, gpu, flags, release)
        if auto:
            answer.notes.append(f"-np not given: llama-server runs {flags.parallel} slots sharing one unified KV cache "
                                "of -c cells (tools/server/server.cpp: n_parallel auto → 4, kv_unified = true)")
        params: int | None = None if inputs.weights_bytes is not None else getattr(w, "params", None)
        if inputs.weights_bytes is None and not exact and params:
            per = w.bytes / params
            dtype = {2: "bf16", 4: "f32", 1: "8-bit"}.get(round(per), f"{per:g} B a parameter")
            answer.notes.append(f"no GGUF: the weights are taken as {dtype} ({params:,} parameters × {per:g} B, "
                                "the config's dtype); a quantized GGUF (Q8_0, Q4_K_M) is 2-4× smaller: give the "
                                ".gguf file or --weights-bytes")
        elif inputs.weights_bytes is None and w.source.startswith("preset "):
            answer.notes.append(f"no GGUF: the weights are taken as bf16, the published safetensors checkpoint's "
                                f"{w.bytes:,} B ({w.source.split(': ', 1)[-1]}); a quantized GGUF (Q8_0, Q4_K_M) is "
                                "2-4× smaller: give the .gguf file or --weights-bytes")
        return answer


ENGINE = LlamaCppEngine(
    name="llama.cpp", display="llama.cpp", package="kvgate.engines.llamacpp", aliases=("llamacpp", "llama-cpp"),
    flags_title="llama.cpp flags", launcher="llama.cpp (llama-server, llama-cli)", pool_per_rank=False,
    log_markers=("llama_context:", "llama_kv_cache", "print_info:", "llm_load_print_meta:", "llama_model_loader:",
                 "llama_new_context_with_model"),
    pool_line_hint="look for 'llama_kv_cache: size = …'",
    releases=(("b7000", "llamacpp_fit.ALL_ROWS_UP_TO: logits of every ubatch token"),
              ("b11312", "llamacpp_fit: the graph reserve read at 0c1e57098bba (build b11312, vendored "
                         "by llama-cpp-python 0.3.36)")),
    oldest_release=("b2227", "tests/data/fit_logs: the oldest llama.cpp log (build b2227)"), dist="llama_cpp_python",
    release_is_build=True,
    words={"quant": "-ctk {q} -ctv {q}", "len": "-c (per sequence)", "seqs": "-np", "offload": "KV on the host",
           "tp": "more GPUs", "record_len": "-c per sequence", "kv_dtype_flag": "-ctk/-ctv"},
    file_suffixes=suffixes_of("llama.cpp"),
    layout_flags=frozenset({"n_seq", "unified", "swa_full", "n_ubatch", "flash_attn", "n_batch"}),
    tier_on_lru_curve=False, fit_lists_term_sources=True,
)
