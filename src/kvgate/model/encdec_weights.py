"""Parameters of an encoder-decoder model counted whole: the encoder and the decoder (the
decoder-only estimate of :func:`kvgate.model.weights.estimate_params` sees one stack).

Each family as its transformers module builds it (``modeling_*.py``; every ``nn.Linear``
with its bias where the module gives one, every ``nn.LayerNorm`` weight + bias, T5's
``T5LayerNorm`` a weight only), the output projection tied to the token embeddings where
the config ties them:

- **Whisper** (``modeling_whisper.py``): encoder ``conv1`` (``num_mel_bins → d_model``,
  kernel 3, bias), ``conv2`` (``d_model → d_model``, kernel 3, bias), ``embed_positions``
  ``max_source_positions × d_model``; per layer q, v, out with bias and k without
  (``WhisperAttention``: ``k_proj`` ``bias=False``), two LayerNorms, ``fc1``/``fc2`` with
  bias; a final LayerNorm. Decoder: ``embed_tokens``, ``embed_positions``
  ``max_target_positions × d_model``, per layer self- and cross-attention as above, three
  LayerNorms, ``fc1``/``fc2``; a final LayerNorm; ``proj_out`` tied. whisper-small:
  241,734,912 parameters.
- **T5** (``modeling_t5.py``): ``shared`` embeddings; per block q, k, v, o of ``d_model ×
  num_heads·d_kv`` without bias, one ``T5LayerNorm`` per sub-layer, the feed-forward
  ``wi``/``wo`` (``feed_forward_proj`` ``gated-*``: ``wi_0``, ``wi_1``, ``wo``); the first
  block of each stack has ``relative_attention_bias`` (``relative_attention_num_buckets ×
  num_heads``); a final norm per stack; decoder blocks add cross-attention and its norm;
  ``num_decoder_layers`` defaults to ``num_layers``; ``lm_head`` tied unless
  ``tie_word_embeddings`` is false. t5-small: 60,506,624.
- **BART** (``modeling_bart.py``): ``shared`` embeddings; each stack
  ``embed_positions`` ``(max_position_embeddings + 2) × d_model``
  (``BartLearnedPositionalEmbedding`` offset 2), ``layernorm_embedding``; per layer
  attention projections all with bias, LayerNorms, ``fc1``/``fc2``; decoder layers add
  cross-attention. bart-base: 139,420,416.
"""

from __future__ import annotations

from typing import Any

from kvgate.model.spec import ConfigError

FAMILIES = ("whisper", "t5", "bart")


def _need(cfg: dict[str, Any], *keys: str) -> int:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    raise ConfigError(f"cannot estimate an encoder-decoder model's weights: config field {keys[0]!r} missing or "
                      "not a positive integer")


def is_encoder_decoder(cfg: dict[str, Any]) -> bool:
    """Whether the config declares an encoder-decoder model."""
    return bool(cfg.get("is_encoder_decoder"))


def encdec_params(cfg: dict[str, Any]) -> tuple[int, int]:
    """``(encoder, decoder)`` parameters of an encoder-decoder config (module docstring);
    the decoder's share holds the token embeddings (and an untied output head).

    Raises:
        ConfigError: a family kvgate does not count, or a missing field.
    """
    mt = str(cfg.get("model_type") or "")
    if mt == "whisper":
        return _whisper(cfg)
    if mt in ("t5", "mt5", "umt5"):
        return _t5(cfg)
    if mt in ("bart", "mbart"):
        return _bart(cfg)
    raise ConfigError(f"cannot estimate the weights of encoder-decoder model_type {mt!r}: kvgate counts the encoder "
                      f"and decoder of {', '.join(FAMILIES)}",
                      hint="give the checkpoint's bytes with --weights-bytes, or point at the model's folder")


def _attn(d: int, biases: int) -> int:
    return 4 * d * d + biases * d


def _whisper(cfg: dict[str, Any]) -> tuple[int, int]:
    d = _need(cfg, "d_model")
    mel, src, tgt, vocab = (_need(cfg, "num_mel_bins"), _need(cfg, "max_source_positions"),
                            _need(cfg, "max_target_positions"), _need(cfg, "vocab_size"))
    e_ffn, d_ffn = _need(cfg, "encoder_ffn_dim"), _need(cfg, "decoder_ffn_dim")
    e_n, d_n = _need(cfg, "encoder_layers"), _need(cfg, "decoder_layers")
    attn = _attn(d, 3)  # q, v, out with bias; k without
    ln = 2 * d

    def ffn(f: int) -> int:
        return d * f + f + f * d + d

    enc = (mel * d * 3 + d) + (d * d * 3 + d) + src * d + e_n * (attn + ln + ffn(e_ffn) + ln) + ln
    dec = vocab * d + tgt * d + d_n * (2 * attn + 3 * ln + ffn(d_ffn)) + ln
    if cfg.get("tie_word_embeddings") is False:
        dec += vocab * d
    return enc, dec


def _t5(cfg: dict[str, Any]) -> tuple[int, int]:
    d, ff, kv, heads, vocab = (_need(cfg, "d_model"), _need(cfg, "d_ff"), _need(cfg, "d_kv"),
                               _need(cfg, "num_heads"), _need(cfg, "vocab_size"))
    e_n = _need(cfg, "num_layers")
    d_n = cfg.get("num_decoder_layers") or e_n
    inner = heads * kv
    attn = 4 * d * inner
    gated = str(cfg.get("feed_forward_proj") or "relu").startswith("gated")
    mlp = (3 if gated else 2) * d * ff
    rel = (cfg.get("relative_attention_num_buckets") or 32) * heads
    enc = e_n * (attn + d + mlp + d) + rel + d
    dec = vocab * d + d_n * (2 * attn + 3 * d + mlp) + rel + d
    if cfg.get("tie_word_embeddings") is False:  # T5Config defaults to tied; v1.1 and mT5 untie
        dec += vocab * d
    return enc, dec


def _bart(cfg: dict[str, Any]) -> tuple[int, int]:
    d, vocab, pos = _need(cfg, "d_model"), _need(cfg, "vocab_size"), _need(cfg, "max_position_embeddings")
    e_ffn, d_ffn = _need(cfg, "encoder_ffn_dim"), _need(cfg, "decoder_ffn_dim")
    e_n, d_n = _need(cfg, "encoder_layers"), _need(cfg, "decoder_layers")
    attn = _attn(d, 4)
    ln = 2 * d

    def ffn(f: int) -> int:
        return d * f + f + f * d + d

    positions = (pos + 2) * d
    final = ln if cfg.get("add_final_layer_norm") else 0  # mBART's per-stack layer_norm
    enc = positions + ln + e_n * (attn + ln + ffn(e_ffn) + ln) + final
    dec = vocab * d + positions + ln + d_n * (2 * attn + 3 * ln + ffn(d_ffn)) + final
    if cfg.get("tie_word_embeddings") is False:
        dec += vocab * d
    return enc, dec
