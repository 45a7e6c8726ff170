"""Encoder-decoder models (Whisper, T5, BART): the cross-attention cache.

transformers 5.25 ``generation/utils.py``, ``_prepare_static_cache`` (what
``generate(cache_implementation="static")`` builds for ``config.is_encoder_decoder``)::

    cache = StaticCache(config=self.config.get_text_config(decoder=True), max_cache_len=...)
    if self.config.is_encoder_decoder:
        cross_attention_cache_kwargs = {
            "config": self.config.get_text_config(decoder=True),
            "max_cache_len": model_kwargs["encoder_outputs"][0].shape[1], ...}
        cache = EncoderDecoderCache(cache, StaticCache(**cross_attention_cache_kwargs))

So beside the decoder's self-attention layers there is one cross-attention layer per
decoder layer, each holding K and V of the decoder's heads for every **encoder** position:
a fixed amount per sequence that does not grow with the generated text. kvgate lists them
after the self-attention layers as ``cross`` layers with ``encoder_positions``:

- Whisper: the encoder always sees 30 s of audio, ``max_source_positions`` (1,500) positions
  (``WhisperEncoder.forward`` refuses any other mel length);
- T5, BART and the like: the input's length in tokens, given with ``--encoder-len`` (0 until
  then; the commands default it to the slot's ``--max-seq`` and say so).
"""

from __future__ import annotations

from dataclasses import replace

from kvgate.model.spec import ConfigError, LayerSpec, ModelSpec

NOTE = "encoder-decoder:"


def is_encoder_cross(layer: LayerSpec) -> bool:
    """A cross-attention layer to an encoder's positions (not mllama's image positions)."""
    return layer.kind == "cross" and layer.encoder_positions is not None


def add_cross_layers(layers: list[LayerSpec], positions: int, fixed: bool, notes: list[str]) -> list[LayerSpec]:
    """The decoder's ``layers`` followed by one cross-attention layer per decoder layer, of
    the same heads and head size, holding ``positions`` encoder positions (0: the input's
    length, not known yet).

    Raises:
        ConfigError: a decoder layer that is not plain full attention (no such
            encoder-decoder model is known to kvgate).
    """
    odd = sorted({l.kind for l in layers} - {"full"})
    if odd:
        raise ConfigError(f"encoder-decoder model with {', '.join(odd)} decoder layers: kvgate sizes the "
                          "cross-attention cache of full-attention decoders only")
    cross = [replace(l, kind="cross", encoder_positions=positions) for l in layers]
    notes.append(_note(len(cross), positions, fixed))
    return list(layers) + cross


def _note(count: int, positions: int, fixed: bool) -> str:
    head = (f"{NOTE} {count} cross-attention layers (transformers' EncoderDecoderCache, listed after the "
            f"{count} self-attention layers) hold K and V of")
    if fixed:
        return f"{head} the encoder's {positions:,} positions per sequence (max_source_positions, fixed by the model)"
    if positions == 0:
        return f"{head} the encoder's positions: the input's length, not given (--encoder-len N): 0 bytes here"
    return f"{head} {positions:,} encoder positions per sequence (the input's length, --encoder-len)"


def encoder_len_of(model: ModelSpec) -> tuple[int | None, bool]:
    """(encoder positions, fixed by the model) of an encoder-decoder model; ``(None,
    False)`` for any other."""
    cross = [l for l in model.layers if is_encoder_cross(l)]
    if not cross:
        return None, False
    return cross[0].encoder_positions, any(n.startswith(NOTE) and "fixed by the model" in n for n in model.notes)


def with_encoder_len(model: ModelSpec, n: int, *, defaulted: bool = False) -> ModelSpec:
    """``model`` with its cross-attention layers holding ``n`` encoder positions per
    sequence. ``defaulted``: ``n`` was not given by the user (the note says from where).

    Raises:
        ConfigError: ``n`` not an integer in [1, 2^50]; the model is not encoder-decoder;
            its encoder length is fixed by the model (Whisper) and ``n`` differs.
    """
    if not isinstance(n, int) or isinstance(n, bool) or not 0 < n <= 2**50:
        raise ConfigError(f"--encoder-len must be an integer in [1, 2^50], got {n!r}")
    current, fixed = encoder_len_of(model)
    if current is None:
        raise ConfigError(f"{model.name} is not an encoder-decoder model: --encoder-len changes nothing",
                          hint="--encoder-len sizes the cross-attention cache of T5 / BART-style models")
    if fixed:
        if n != current:
            raise ConfigError(f"{model.name}'s encoder always yields {current:,} positions (max_source_positions): "
                              f"--encoder-len {n:,} is not what the model runs",
                              hint="leave --encoder-len out for this model")
        return model
    count = sum(1 for l in model.layers if is_encoder_cross(l))
    note = _note(count, n, False)
    if defaulted:
        note += f" — not given, so the slot's {n:,} positions (the longest input); --encoder-len N for the input's"
    notes = [x for x in model.notes if not x.startswith(NOTE)] + [note]
    layers = [replace(l, encoder_positions=n) if is_encoder_cross(l) else l for l in model.layers]
    return replace(model, layers=layers, notes=notes)


def default_encoder_len(model: ModelSpec, given: int | None, max_seq: int) -> ModelSpec:
    """The commands' rule: ``--encoder-len`` when given; else, for an encoder-decoder model
    whose encoder follows the input, the slot's ``max_seq`` (with a note); else ``model``."""
    if given is not None:
        return with_encoder_len(model, given)
    current, fixed = encoder_len_of(model)
    if current is None or fixed or current:
        return model
    return with_encoder_len(model, max_seq, defaulted=True)
