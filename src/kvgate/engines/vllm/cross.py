"""vLLM's cross-attention cache of encoder-decoder models (V1, from the Whisper support of
0.11: ``vllm/v1/kv_cache_interface.py``)::

    @dataclass(frozen=True)
    class CrossAttentionSpec(AttentionSpec):
        def max_memory_usage_bytes(self, vllm_config: VllmConfig) -> int:
            # For cross-attention, we need to cache encoder states
            # Get encoder length (e.g., 1500 for Whisper).
            max_encoder_len = vllm_config.scheduler_config.max_num_encoder_input_tokens
            return cdiv(max_encoder_len, self.block_size) * self.page_size_bytes

A cross-attention layer's page is an ``AttentionSpec`` page (``2 × block × kv_heads ×
head_size × dtype``) and one request holds ``cdiv(encoder length, block)`` of them whatever
its decoder length; ``UniformTypeKVCacheSpecs.is_uniform_type`` keeps ``CrossAttentionSpec``
apart from ``FullAttentionSpec``, so the cross layers form their own KV cache group beside
the decoder's self-attention group (the grouping of :mod:`kvgate.engines.vllm.groups`). The
encoder length is Whisper's ``max_source_positions`` (1,500), the scheduler's
``max_num_encoder_input_tokens`` for it.

The V1 scheduler serves Whisper only (``vllm/v1/core/sched/scheduler.py`` as vLLM PR #23664,
"[v1] Add cross-attention KV cache support for encoder-decoder models", added it)::

    assert ("whisper" in self.vllm_config.model_config.model.lower()), (
        "Whisper is the only supported encoder-decoder model.")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kvgate.errors import KvgateError
from kvgate.geometry.specs import AttentionKV, CrossAttention, GeometryError, LayerKind

WHISPER_ONLY = "AssertionError: Whisper is the only supported encoder-decoder model."


@dataclass(frozen=True, kw_only=True)
class VllmCrossAttention(AttentionKV):
    """A cross-attention layer as vLLM pages it (``CrossAttentionSpec``): K and V rows of the
    decoder's heads per encoder position, ``encoder_positions`` of them per request."""

    kind: ClassVar[str] = "cross"
    encoder_positions: int


def vllm_cross(spec: LayerKind) -> LayerKind:
    """``spec`` as vLLM's layout holds it: an encoder's cross-attention layer becomes
    :class:`VllmCrossAttention`; any other spec is returned as is (mllama's image
    cross-attention stays unmodelled).

    Raises:
        GeometryError: an encoder-decoder cross layer whose encoder length is not known.
    """
    if not isinstance(spec, CrossAttention) or spec.encoder_positions is None:
        return spec
    if spec.encoder_positions <= 0:
        raise GeometryError("vllm layout: the cross-attention cache holds the encoder's positions, and the encoder "
                            "length is not given", hint="--encoder-len N")
    return VllmCrossAttention(num_kv_heads=spec.num_kv_heads, head_dim=spec.head_dim, v_head_dim=spec.v_head_dim,
                              encoder_positions=spec.encoder_positions)


#: the first release whose cross-attention paging kvgate models (V1 ``CrossAttentionSpec``)
CROSS_FROM = (0, 11, 0)


def check_encoder_decoder(model: Any, release: Any) -> None:
    """Refuse an encoder-decoder model vLLM does not serve as modelled here: any but
    Whisper (the V1 scheduler's assertion, module docstring), or a release before
    :data:`CROSS_FROM`.

    Raises:
        KvgateError: quoting the reason.
    """
    from kvgate.model.encdec import encoder_len_of  # noqa: PLC0415

    if encoder_len_of(model)[0] is None:
        return
    cfg = model.config or {}
    whisper = cfg.get("model_type") == "whisper" or any("Whisper" in str(a) for a in cfg.get("architectures") or [])
    if not whisper:
        raise KvgateError(f"{model.name}: vLLM's V1 engine serves Whisper only among encoder-decoder models: "
                          f"{WHISPER_ONLY}",
                          hint="kvgate geometry MODEL --encoder-len N sizes its cache as transformers builds it")
    if not release.at_least(*CROSS_FROM):
        raise KvgateError(f"vLLM {release.text}: kvgate models the cross-attention cache from vLLM "
                          f"{'.'.join(map(str, CROSS_FROM))} (V1 CrossAttentionSpec); earlier engines are not modelled",
                          hint=f"--release {'.'.join(map(str, CROSS_FROM))} or later")
