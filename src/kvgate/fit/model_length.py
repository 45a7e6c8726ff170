"""The model length as each engine derives it from ``config.json``, and the refusal of a
longer one, with the engine's own message.

**vLLM** (``vllm/config/model.py`` ``_get_and_verify_max_len``, read in the wheels of
0.11.0, 0.12.0 and 0.24.0; the keys in ``transformers_utils/model_arch_config_convertor.py``
``derive_max_model_len_and_key`` at 0.24.0), on the text config:

- the smallest of ``max_position_embeddings``, ``n_positions``, ``max_seq_len``,
  ``seq_length``, ``model_max_length``, ``max_target_positions``, ``max_sequence_length``,
  ``max_seq_length``, ``seq_len``; ``model_max_length``, when set, replaces it; none of
  them: 2048;
- ``rope_scaling`` (``type`` read as ``rope_type``, ``su`` as ``longrope``, ``mrope`` as
  ``default``: ``transformers_utils/config.py`` ``patch_rope_scaling_dict``), unless the
  ``model_type`` contains ``gemma3``: for a ``rope_type`` other than ``su``, ``longrope``,
  ``llama3``, the length × ``factor`` (1.0 when absent), with ``yarn`` starting from
  ``original_max_position_embeddings``: a YaRN factor 4 on 32,768 gives 131,072;
- ``--max-model-len`` not given: that length; from 0.12.0 a ``longrope`` model starts at
  the config's top-level ``original_max_position_embeddings`` instead ("to avoid
  performance degradation for shorter sequences");
- given above it (and above ``model_max_length``): ``ValueError: User-specified
  max_model_len (L) is greater than the derived max_model_len (KEY=N or
  model_max_length=M in model's config.json). To allow overriding this maximum, set the
  env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. …``, unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``
  is ``1`` or ``true`` (``vllm/envs.py``). A tokenizer's ``model_max_length``
  (``tokenizer_config.json``) also lowers it: not read here.

**SGLang** (``python/sglang/srt/utils/hf_transformers_utils.py`` ``get_context_length``
and ``configs/model_config.py`` ``ModelConfig._derive_context_length``, wheel 0.5.4):

- the first of ``max_sequence_length``, ``seq_length``, ``max_seq_len``,
  ``model_max_length``, ``max_position_embeddings`` present, × the ``rope_scaling``
  ``factor`` unless ``rope_scaling`` has ``original_max_position_embeddings`` or is
  ``llama3`` (then × 1); none: 2048. So the same YaRN block leaves SGLang at 32,768;
- ``--context-length`` above it: ``ValueError: Warning: User-specified context_length (L)
  is greater than the derived context_length (N). …``, unless
  ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` is true (``environ.py`` ``EnvBool``:
  ``true``, ``1``, ``yes``, ``y``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvgate.fit.release import Release

VLLM_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
             "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
SGLANG_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")
#: vLLM starts a longrope model at original_max_position_embeddings from this release on
LONGROPE_DEFAULT_FROM = (0, 12)
VLLM_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
SGLANG_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
_VLLM_WARNING = ("VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative "
                 "position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model uses "
                 "absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA array "
                 "out-of-bounds error.")


@dataclass(frozen=True)
class ModelLength:
    """An engine's length for one config.

    ``limit``: the largest length it accepts without its env override; ``default``: the
    length it runs at when none is given; ``printed``: ``limit`` as the engine's message
    prints it (vLLM prints a float after a RoPE factor: ``131072.0``); ``key``: the config
    field it names; ``how``: the rule, in words; ``allow_longer``: the env override is set.
    """

    limit: int
    default: int
    printed: str
    key: str | None
    how: str
    allow_longer: bool = False


def _text(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    for k in ("text_config", "llm_config", "language_config"):
        sub = cfg.get(k)
        if isinstance(sub, dict) and "num_hidden_layers" not in cfg:
            return sub
    return cfg


def _num(v: Any) -> int | float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def _ropes(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The RoPE dicts of a config, ``rope_type`` read as vLLM patches it: ``rope_scaling``
    (transformers 4), else ``rope_parameters`` (transformers 5, which moves ``rope_scaling``
    there; one dict, or one per layer type as Gemma 4 has)."""
    rs = cfg.get("rope_scaling")
    if isinstance(rs, dict) and rs:
        found = [rs]
    else:
        rp = cfg.get("rope_parameters")
        if not isinstance(rp, dict) or not rp:
            return []
        nested = all(isinstance(v, dict) for v in rp.values())
        found = [v for v in rp.values() if isinstance(v, dict)] if nested else [rp]
    out = []
    for r in found:
        r = dict(r)
        if "rope_type" not in r and "type" in r:
            r["rope_type"] = r["type"]
        rt = r.get("rope_type")
        r["rope_type"] = {"su": "longrope", "mrope": "default"}.get(rt, rt) if isinstance(rt, str) else "default"
        out.append(r)
    return out


def env_true(name: str, values: tuple[str, ...]) -> bool:
    """The env var ``name`` set to one of ``values`` (case-insensitive)."""
    return os.environ.get(name, "").strip().lower() in values


def vllm_length(config: Mapping[str, Any], release: Release, env: bool | None = None) -> ModelLength:
    """vLLM's derived ``max_model_len`` for ``config`` (module docstring). ``env``: whether
    ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set (``None``: read this process's environment)."""
    top = config
    cfg = _text(config)
    derived: int | float = float("inf")
    key: str | None = None
    for k in VLLM_KEYS:
        v = _num(cfg.get(k))
        if v is not None:
            if v < derived:
                key = k
            derived = min(derived, v)
    mml = _num(cfg.get("model_max_length"))
    if mml:
        key, derived = "model_max_length", mml
    how = f"{key}={derived}" if key else "no length field in the config: vLLM assumes 2048"
    if derived == float("inf"):
        derived = 2048
    ropes = _ropes(cfg)
    mt = str(top.get("model_type") or cfg.get("model_type") or "")
    longrope = any(r["rope_type"] == "longrope" for r in ropes)
    if ropes and "gemma3" not in mt:
        factor: float = 1.0
        for r in ropes:
            if r["rope_type"] in ("longrope", "llama3"):
                continue
            f = r.get("factor", factor)
            factor = f if _num(f) is not None else 1.0
            if r["rope_type"] == "yarn" and _num(r.get("original_max_position_embeddings")):
                derived = r["original_max_position_embeddings"]
                how = f"rope_scaling yarn: original_max_position_embeddings {derived:,}"
        if factor != 1.0:
            how += f" × rope_scaling factor {factor:g}"
        # vLLM multiplies (a float) whenever RoPE parameters are present; a "default" type
        # with no factor (transformers 5 writes one for every model) is shown unmultiplied,
        # as releases before rope_parameters printed it (issue #8793: "=32768")
        if any(r["rope_type"] not in ("longrope", "llama3") and "factor" in r for r in ropes):
            derived = derived * float(factor)
    limit = int(derived)
    default = limit
    if longrope and release.at_least(*LONGROPE_DEFAULT_FROM):
        orig = _num(cfg.get("original_max_position_embeddings"))
        if orig:
            default = int(orig)
            how += f"; longrope: vLLM {'.'.join(map(str, LONGROPE_DEFAULT_FROM))}+ starts at " \
                   f"original_max_position_embeddings {default:,} when --max-model-len is not given"
    allow = env_true(VLLM_ENV, ("1", "true")) if env is None else env
    return ModelLength(limit=limit, default=default, printed=str(derived), key=key, how=how, allow_longer=allow)


def vllm_refusal(length: ModelLength, config: Mapping[str, Any], L: int) -> str | None:
    """vLLM's error for ``--max-model-len L`` (``None``: accepted, or the override is set)."""
    if L <= length.limit or length.allow_longer:
        return None
    mml = _num(_text(config).get("model_max_length"))
    if mml is not None and L <= mml:
        return None
    return (f"ValueError: User-specified max_model_len ({L}) is greater than the derived max_model_len "
            f"({length.key}={length.printed} or model_max_length={mml} in model's config.json). To allow overriding "
            f"this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. {_VLLM_WARNING}")


def sglang_length(config: Mapping[str, Any], env: bool | None = None) -> ModelLength:
    """SGLang's derived ``context_len`` for ``config`` (module docstring). ``env``: whether
    ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` is set (``None``: read the environment)."""
    cfg = _text(config)
    ropes = _ropes(cfg)
    rs = ropes[0] if len(ropes) == 1 else None
    factor: float = 1
    if rs is not None:
        factor = _num(rs.get("factor", 1)) or 1
        if "original_max_position_embeddings" in rs or rs.get("rope_type") == "llama3":
            factor = 1
    allow = env_true(SGLANG_ENV, ("true", "1", "yes", "y")) if env is None else env
    for k in SGLANG_KEYS:
        v = cfg.get(k)
        if v is not None and _num(v) is not None:
            n = int(factor * v)
            how = f"{k}={v}" + (f" × rope_scaling factor {factor:g}" if factor != 1 else "")
            return ModelLength(limit=n, default=n, printed=str(n), key=k, how=how, allow_longer=allow)
    return ModelLength(limit=2048, default=2048, printed="2048", key=None,
                       how="no length field in the config: SGLang assumes 2048", allow_longer=allow)


def sglang_refusal(length: ModelLength, L: int) -> str | None:
    """SGLang's error for ``--context-length L`` (``None``: accepted, or the override is set)."""
    if L <= length.limit or length.allow_longer:
        return None
    return (f"ValueError: Warning: User-specified context_length ({L}) is greater than the derived context_length "
            f"({length.limit}). This may lead to incorrect model outputs or CUDA errors. Note that the derived "
            "context_length may differ from max_position_embeddings in the model's config. To allow overriding this "
            "maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")
