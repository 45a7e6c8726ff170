"""An engine-log decision record in the engine's words.

A record made from an engine's startup log (``kvgate gate --engine-log``; its
measurement's sampler is ``engine-log``) gates N sequences of L tokens in the engine's
KV cache pool: T is the pool per GPU, P = 0 (the pool is empty at start). Its table,
boundaries and recheck say sequences, the engine's flags and the KV cache pool, never
slots or a card; the write-up's boundaries that do not apply to a pool (resident
weights: the pool is what is left after them) are left out. The flags are the engines'
own spellings (vLLM ``--max-num-seqs`` / ``--max-model-len``; SGLang
``--max-running-requests`` / ``--context-length``; llama.cpp ``-np`` / ``-c``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kvgate.engines.registry import DEFAULT_ENGINE, ENGINES, get_engine


class _RecordWords(Mapping[str, tuple[str, str]]):
    """engine name -> its flag for the requests at once and for the length per request
    (the engine's ``words``: ``seqs``, ``record_len``)."""

    def __getitem__(self, name: str) -> tuple[str, str]:
        if name not in ENGINES:
            raise KeyError(name)
        words = get_engine(name).words
        return words["seqs"], words["record_len"]

    def __iter__(self) -> Iterator[str]:
        return iter(ENGINES)

    def __len__(self) -> int:
        return len(ENGINES)


#: each engine's flag for the requests at once and for the length per request
RECORD_ENGINE_WORDS: Mapping[str, tuple[str, str]] = _RecordWords()


def engine_of_layout(sampler: str | None, layout_name: str | None) -> str | None:
    """The engine of a record whose measurement's sampler is ``engine-log`` (by its layout's
    name; ``vllm`` when the layout names none), else ``None`` (a measured record)."""
    if sampler != "engine-log":
        return None
    return layout_name if layout_name in RECORD_ENGINE_WORDS else DEFAULT_ENGINE


def engine_of(rec: dict[str, Any]) -> str | None:
    """The engine of an engine-log record dict (``None`` for any other record)."""
    sampler = ((rec.get("measurement") or {}).get("basis") or {}).get("sampler")
    return engine_of_layout(sampler, ((rec.get("geometry") or {}).get("layout") or {}).get("name"))


def table_quantity(key: str, engine: str, *, sequences: int, length: int) -> str:
    """A decision table row's label (``key`` one of ``slot``, ``all_slots``, ``headroom``,
    ``peak``, ``target``) in ``engine``'s words, for ``sequences`` N of ``length`` L tokens.

    >>> table_quantity("all_slots", "vllm", sequences=32, length=8192)
    'all 32 sequences N·S (--max-num-seqs 32)'
    """
    seqs, flag = RECORD_ENGINE_WORDS[engine]
    n, L = sequences, length
    return {"slot": f"one sequence S({L}) ({flag} {L:,})",
            "all_slots": f"all {n} sequences N·S ({seqs} {n})",
            "headroom": "KV cache pool H = T − P",
            "peak": "KV cache pool used at start P (0 sequences)",
            "target": f"{n} sequences at full length"}[key]
