"""SGLang's refusals at start that do not depend on memory, with the message SGLang stops with.

- **TP and the attention heads.** SGLang splits the query heads over ``--tp-size`` ranks
  and asserts it while building the model, before any memory is profiled; the attention
  classes of its models (``python/sglang/srt/models/llama.py`` ``LlamaAttention``,
  ``qwen2.py``, ``qwen3.py``; wheel 0.5.4) run::

      assert self.total_num_heads % tp_size == 0
      if self.total_num_kv_heads >= tp_size:
          assert self.total_num_kv_heads % tp_size == 0
      else:
          assert tp_size % self.total_num_kv_heads == 0

  A failed ``assert`` stops the server with a bare ``AssertionError`` (no text). MLA models
  (DeepSeek) split the heads through ``divide`` (``distributed/utils.py``
  ``ensure_divisibility``: ``"{} is not divisible by {}"``): the same rule on the heads.
- **Context length** above the model's (:mod:`kvgate.fit.model_length`,
  ``ModelConfig._derive_context_length``): a verdict, not a refusal of the input.
"""

from __future__ import annotations

from kvgate.errors import KvgateError
from kvgate.model import ModelSpec


def check_sglang_tp(model: ModelSpec, tp: int) -> None:
    """Refuse ``--tp-size tp`` where SGLang's model classes assert (module docstring).

    Raises:
        KvgateError: the heads do not split over ``tp`` ranks, quoting SGLang's assertion.
    """
    cfg = model.config or {}
    heads = cfg.get("num_attention_heads")
    if not isinstance(heads, int) or isinstance(heads, bool) or heads <= 0 or tp <= 1:
        return
    mla = any(l.kind == "mla" for l in model.layers)
    if heads % tp:
        why = (f'AssertionError: {heads} is not divisible by {tp}' if mla else
               "AssertionError (assert self.total_num_heads % tp_size == 0, the model's attention class)")
        raise KvgateError(f"--tp-size {tp}: SGLang stops while building the model: the {heads} attention heads do not "
                          f"split over {tp} ranks: {why}",
                          hint=f"a --tp-size that divides {heads}: {', '.join(str(d) for d in _divisors(heads))}")
    kv = cfg.get("num_key_value_heads")
    if mla or not isinstance(kv, int) or isinstance(kv, bool) or kv <= 0:
        return
    if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
        test = "self.total_num_kv_heads % tp_size == 0" if kv >= tp else "tp_size % self.total_num_kv_heads == 0"
        raise KvgateError(f"--tp-size {tp}: SGLang stops while building the model: its {kv} KV heads neither divide "
                          f"by {tp} nor divide it: AssertionError (assert {test})",
                          hint="a --tp-size that divides the KV heads, or a multiple of them that divides the "
                               f"{heads} attention heads")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, min(n, 64) + 1) if n % d == 0][:8]


def check_sglang_encoder_decoder(model: ModelSpec) -> None:
    """Refuse an encoder-decoder model: kvgate has no model of SGLang's cache for the
    cross-attention to an encoder (its token pool here holds decoder tokens only).

    Raises:
        KvgateError: the model has encoder cross-attention layers.
    """
    from kvgate.model.encdec import encoder_len_of  # noqa: PLC0415

    if encoder_len_of(model)[0] is not None:
        raise KvgateError(f"{model.name} is an encoder-decoder model: kvgate does not model SGLang's cache for its "
                          "cross-attention layers",
                          hint="--engine vllm (Whisper), or kvgate geometry MODEL --encoder-len N for the cache "
                               "transformers builds")
