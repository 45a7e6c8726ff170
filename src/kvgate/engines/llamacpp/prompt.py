"""The prompts and saved states of llama-server's prompt cache, as :mod:`kvgate.engines.llamacpp.cache`
(the Python model) and :mod:`kvgate.engines.llamacpp.cache_fast` (the compiled one) both hold them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prompt:
    """A prompt as trace blocks: ``ids`` (hash ids) cut to ``n_tokens`` tokens."""

    ids: tuple[int, ...]
    n_tokens: int


@dataclass
class _State:
    prompt: Prompt
    size: int
