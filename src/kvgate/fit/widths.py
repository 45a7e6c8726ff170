"""The model widths the activation peak of an engine's profile run depends on, per
tensor-parallel rank, from a config.json dict.

Bytes per token of the widest live tensors of one decoder layer's forward pass, in the
model dtype ``b`` (2 for bf16/fp16):

- dense MLP: ``b × (hidden + q + 2·kv + 3·I/tp)``: the residual stream, the QKV
  projection's output (q = heads·head_dim/tp, kv = kv_heads·head_dim/tp), the fused
  gate_up output (2·I/tp) and the activation's output (I/tp)
  (``vllm/model_executor/models/llama.py`` ``LlamaMLP``);
- MoE: ``b × (hidden + q + 2·kv + top_k·(3·N/tp + hidden))``: the fused-MoE workspaces
  ``intermediate_cache1/2/3`` of shapes ``[T, top_k, 2N]``, ``[T·top_k, N]``,
  ``[T, top_k, hidden]`` (``vllm/model_executor/layers/fused_moe/fused_moe.py``
  ``fused_experts_impl``), N the expert intermediate size.

``logits_per_seq`` is the vocabulary: the sampler's dummy run holds
``max_num_seqs × vocab`` logits (fp32) and their sorted copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvgate.errors import KvgateError
from kvgate.model import head_dims, num_kv_heads, text_config

_DTYPE = {"bfloat16": 2, "float16": 2, "half": 2, "bf16": 2, "fp16": 2, "float32": 4, "float": 4, "fp32": 4}


@dataclass(frozen=True)
class Widths:
    """Per-rank widths: ``token_bytes`` (bytes per batched token of the profile run),
    ``vocab`` (logits per sequence), ``moe`` (mixture of experts), ``multimodal`` (a vision
    or audio tower the profile run also exercises: not modelled)."""

    token_bytes: int
    vocab: int
    moe: bool
    multimodal: bool

    def to_dict(self) -> dict[str, Any]:
        return {"token_bytes": self.token_bytes, "vocab": self.vocab, "moe": self.moe, "multimodal": self.multimodal}


_MM_KEYS = ("vision_config", "audio_config", "vision_tower", "mm_vision_tower")


def is_multimodal(ref: str | Path) -> bool:
    """True when the model at ``ref`` (directory, config.json) declares a vision or audio
    tower (``vision_config`` …); bundled presets and GGUF files are text models here.
    ModelSpec keeps only the text config, so this reads the file itself."""
    p = Path(ref)
    cfg = p / "config.json" if p.is_dir() else p
    if cfg.suffix.lower() != ".json" or not cfg.exists():
        from kvgate.model.names import cached_snapshot, is_hub_id  # noqa: PLC0415

        snap = cached_snapshot(str(ref)) if is_hub_id(str(ref)) else None  # a Hub id in the local cache
        if snap is None:
            return False
        cfg = snap / "config.json"
    from kvgate.model import read_config  # noqa: PLC0415

    return any(k in read_config(cfg) for k in _MM_KEYS)


def _first_int(cfg: dict[str, Any], *keys: str) -> int | None:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, list):  # one width per layer (Gemma-3n's intermediate_size): the widest layer
            v = max((x for x in v if isinstance(x, int) and not isinstance(x, bool)), default=None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def model_widths(config: dict[str, Any], tp: int = 1) -> Widths:
    """:class:`Widths` of ``config`` on one of ``tp`` ranks (module docstring).

    Raises:
        KvgateError: a needed field (hidden_size, num_attention_heads, vocab_size,
            intermediate_size or moe_intermediate_size) is missing, named.
    """
    tc = text_config(config)
    hidden = _first_int(tc, "hidden_size", "n_embd", "d_model")
    heads = _first_int(tc, "num_attention_heads", "n_head")
    vocab = _first_int(tc, "vocab_size") or _first_int(config, "vocab_size")
    for name, v in (("hidden_size", hidden), ("num_attention_heads", heads), ("vocab_size", vocab)):
        if v is None:
            raise KvgateError(f"model config has no {name}: the activation peak cannot be sized",
                              hint="give a config.json with it, or measure: kvgate run -- vllm serve ...")
    assert hidden is not None and heads is not None and vocab is not None
    try:
        hd, _ = head_dims(tc)
    except KvgateError:
        hd = hidden // heads
    try:
        kvh = num_kv_heads(tc)
    except KvgateError:
        kvh = heads
    q = heads * hd // tp
    kv = max(1, kvh // tp) * hd
    dtype = str(tc.get("torch_dtype") or tc.get("dtype") or config.get("torch_dtype") or "bfloat16").lower()
    b = _DTYPE.get(dtype, 2)
    topk = _first_int(tc, "num_experts_per_tok", "experts_per_token", "moe_topk", "num_experts_per_token")
    n_experts = _first_int(tc, "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
    if topk and n_experts:
        N = _first_int(tc, "moe_intermediate_size", "expert_intermediate_size", "intermediate_size")
        if N is None:
            raise KvgateError("MoE config has no moe_intermediate_size / intermediate_size")
        per = hidden + q + 2 * kv + topk * (3 * N // tp + hidden)
        moe = True
    else:
        inter = _first_int(tc, "intermediate_size", "ffn_dim", "n_inner")
        if inter is None:
            raise KvgateError("model config has no intermediate_size: the activation peak cannot be sized")
        per = hidden + q + 2 * kv + 3 * inter // tp
        moe = False
    mm = any(k in config for k in _MM_KEYS)
    return Widths(token_bytes=b * per, vocab=vocab, moe=moe, multimodal=mm)
