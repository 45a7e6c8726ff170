"""Model file formats that one engine alone reads, and that engine's reader of a file's metadata.

A GGUF is llama.cpp's: its key/value header means what ``src/llama-model.cpp`` reads from it
(:func:`kvgate.engines.llamacpp.gguf.spec_from_gguf_metadata`). This table sits below the
registry and the :class:`~kvgate.engines.base.Engine` interface, so :mod:`kvgate.model.gguf`
asks it without importing them (the registry imports :mod:`kvgate.model`, never the other way).
The engine's ``file_suffixes`` are read from here; a new file-format engine adds its line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: file suffix -> the engine that alone loads such files
FILE_FORMATS: dict[str, str] = {".gguf": "llama.cpp"}


def suffixes_of(engine: str) -> tuple[str, ...]:
    """The file suffixes ``engine`` alone loads (``llama.cpp``: ``(".gguf",)``)."""
    return tuple(s for s, e in FILE_FORMATS.items() if e == engine)


def metadata_reader(suffix: str) -> Callable[..., Any]:
    """``reader(meta, *, name, source) -> ModelSpec`` for files ending in ``suffix``.

    Raises:
        KeyError: no engine loads such files.
    """
    if FILE_FORMATS[suffix.lower()] == "llama.cpp":
        from kvgate.engines.llamacpp.gguf import spec_from_gguf_metadata  # noqa: PLC0415

        return spec_from_gguf_metadata
    raise KeyError(suffix)  # pragma: no cover - a format in the table without its reader
