"""SGLang as kvgate asks it (:class:`kvgate.engines.base.Engine`): its token pool layout,
its startup-log reader and its ``kvgate fit``. Light: the rules load on first use."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvgate.engines.base import EngineBase

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.engines.pool import EnginePool
    from kvgate.geometry.base import Layout


@dataclass(frozen=True)
class SglangEngine(EngineBase):
    """SGLang (``python -m sglang.launch_server``)."""

    def layout_factory(self) -> Callable[..., Layout]:
        factory: Callable[..., Layout] = self.module("pool").SGLang
        return factory

    def render_fit(self, answer: Any, *, sources: bool = False) -> str:
        from kvgate.fit.render import render_sglang  # noqa: PLC0415

        return render_sglang(answer, sources=sources)

    def slot_words(self, max_seq: int, slots: int) -> tuple[str, str]:
        s = "s" if slots != 1 else ""
        return f"one sequence at --context-length {max_seq:,}", f"{slots} sequence{s} (--max-running-requests {slots})"

    def host_pool_tokens(self, device_tokens: int, bytes_per_token: int, *, ratio: float | None,
                         size_gb: float) -> int:
        """HiCache's host pool in tokens per rank (:func:`kvgate.engines.sglang.cache.host_pool_tokens`)."""
        tokens: int = self.module("cache").host_pool_tokens(device_tokens, bytes_per_token, ratio=ratio,
                                                            size_gb=size_gb)
        return tokens

    def read_pool(self, lines: Sequence[Any]) -> EnginePool:
        from kvgate.engines.pool import _from_sglang  # noqa: PLC0415

        pool: EnginePool = _from_sglang(self.module("log").parse_sglang(lines))
        return pool

    def cache_geometry(self, geo: Any) -> Any:
        """Tokens of SGLang's own pool (DSA rows and indexer keys: :func:`kvgate.engines.sglang.cache.pool_geometry`)."""
        return self.module("cache").pool_geometry(geo)

    def fit(self, inputs: Any, model: Any, gpu: Any) -> Any:
        from kvgate.engines.sglang.fit import fit_sglang  # noqa: PLC0415
        from kvgate.engines.sglang.flags import build_flags  # noqa: PLC0415
        from kvgate.engines.vllm.engine import weights_for_fit  # noqa: PLC0415
        from kvgate.fit.release import resolve_release  # noqa: PLC0415
        from kvgate.fit.widths import is_multimodal  # noqa: PLC0415

        flags = build_flags(inputs.sglang)  # bad values named before any work
        weights = weights_for_fit(inputs, flags.tp_size, model, gpu, self.name)
        mm = is_multimodal(inputs.model)
        return fit_sglang(model, weights, gpu, flags, resolve_release(self.name, inputs.release), multimodal=mm,
                          dtype=inputs.dtype)


ENGINE = SglangEngine(
    name="sglang", display="SGLang", package="kvgate.engines.sglang", flags_title="SGLang flags",
    launcher="SGLang (python -m sglang.launch_server)", tp_option=("sglang", "tp_size"), tp_flag="--tp-size",
    log_markers=("KV Cache is allocated", "max_total_num_tokens", "mem_fraction_static", "sglang.launch_server"),
    pool_line_hint="look for 'KV Cache is allocated. #tokens: …'",
    releases=(("0.5.4", "sglang_memfrac.HEURISTIC_FROM: --mem-fraction-static's default"),
              ("0.5.9", "sglang_fit: GlmMoeDsaForCausalLM a DeepSeek sparse attention model"),
              ("0.5.17", "engines/sglang/pool.py CELL_USES_DSA_ROW: the DSA row counted per token")),
    oldest_release=("0.4.0", "sglang_memfrac.tp_table: the 0.4 series' --mem-fraction-static table"),
    dist="sglang",
    # fp8: SGLang's choices have no plain fp8 (server_args.py)
    words={"quant": "--kv-cache-dtype {q}", "len": "--context-length", "seqs": "--max-running-requests",
           "offload": "host KV cache (HiCache)", "tp": "--tp-size {t}", "record_len": "--context-length",
           "kv_dtype_flag": "--kv-cache-dtype", "fp8": "fp8_e4m3"},
)
