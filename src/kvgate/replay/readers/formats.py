"""The public LLM request traces kvgate recognizes, and the columns of any other trace.

Each :class:`TraceFormat` is recognized from its column names (after
:func:`~kvgate.replay.readers.base.norm_column`) and says which columns hold the arrival
time, prompt and output tokens, the unit of a numeric time column, and the data set's
attribution. Column names and units were read from each data set's own repository:

=================  ==========================================================  ==========
format             columns (as published)                                      time
=================  ==========================================================  ==========
``azure``          ``TIMESTAMP, ContextTokens, GeneratedTokens``               date-times
                   (Azure/AzurePublicDataset: 2023 ``AzureLLMInferenceTrace_*``
                   naive with 7 fraction digits; 2024 ``*_1week`` with
                   ``+00:00``)
``mooncake``       ``timestamp, input_length, output_length, hash_ids``        ms since
                   (kvcache-ai/Mooncake ``FAST25-release/traces/*.jsonl``)      the first
``qwen-bailian``   ``chat_id, parent_chat_id, timestamp, input_length,         s since
                   output_length, type, turn, hash_ids``                       the start
                   (alibaba-edu/qwen-bailian-usagetraces-anon README)
``burstgpt``       ``Timestamp, Model, Request tokens, Response tokens,        s from 0:00
                   Total tokens, Log Type`` (HPMLL/BurstGPT README, ``data/``)  day one
=================  ==========================================================  ==========

Mooncake and Qwen-Bailian share ``timestamp``/``input_length``/``output_length`` but not
the unit (milliseconds against seconds): the Bailian columns ``chat_id``,
``parent_chat_id`` and ``turn`` tell them apart. Any other file is read by the generic
column names below and its time unit is detected (:mod:`kvgate.replay.timeunits`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvgate.replay.readers.base import norm_column

# Generic column names, normalized, in priority order.
ARRIVAL_COLUMNS = (
    "timestamp", "arrivaltime", "arrivaltimes", "arrivals", "arrival", "arrivaltimestamp",
    "time", "times", "ts", "t", "starttime", "requesttime", "createdat", "created",
)  # fmt: skip
PROMPT_COLUMNS = (
    "prompttokens", "inputtokens", "inputlen", "inputlength", "contexttokens",
    "promptlen", "promptlength", "numprompttokens", "numinputtokens", "prompttokencount",
    "inputtokencount", "requesttokens", "prompt", "input",
)  # fmt: skip
OUTPUT_COLUMNS = (
    "outputtokens", "completiontokens", "outputlen", "outputlength", "generatedtokens",
    "numoutputtokens", "numgeneratedtokens", "outputtokencount", "completiontokencount",
    "responsetokens", "decodetokens", "generated", "output", "completion",
)  # fmt: skip

AZURE_ATTRIBUTION = (
    'Azure LLM inference trace 2023 (CC-BY 4.0): Patel et al., "Splitwise: Efficient '
    'generative LLM inference using phase splitting", ISCA 2024'
)
AZURE_2024_ATTRIBUTION = (
    'Azure LLM inference trace 2024 (CC-BY 4.0): Stojkovic et al., "DynamoLLM: Designing LLM '
    'inference clusters for performance and energy efficiency", HPCA 2025'
)
MOONCAKE_ATTRIBUTION = (
    'Mooncake trace (kvcache-ai/Mooncake, FAST25-release): Qin et al., "Mooncake: Trading more '
    'storage for less computation", FAST 2025'
)
BAILIAN_ATTRIBUTION = 'Qwen-Bailian usage trace (Apache-2.0): Wang et al., "KVCache cache in the wild", USENIX ATC 2025'
BURSTGPT_ATTRIBUTION = (
    'BurstGPT trace (HPMLL/BurstGPT): Wang et al., "BurstGPT: A real-world workload dataset to '
    'optimize LLM serving systems", arXiv:2401.17644'
)


@dataclass(frozen=True)
class TraceFormat:
    """A published trace layout.

    Attributes:
        name: short name (``"mooncake"``), shown in :meth:`Trace.describe`.
        title: the data set's name.
        columns: normalized column names that must all be present to recognize it.
        time, prompt, output: normalized names of the three columns used.
        time_unit: unit of a numeric time column (``"s"``, ``"ms"``), ``None`` when the
            format's times are date-times.
        attribution: the citation its licence or authors ask for.
        absent: normalized names whose presence rules the format out.
    """

    name: str
    title: str
    columns: tuple[str, ...]
    time: str
    prompt: str
    output: str
    time_unit: str | None
    attribution: str
    absent: tuple[str, ...] = ()

    def matches(self, normed: set[str]) -> bool:
        """Whether a file with these normalized column names has this format."""
        return all(c in normed for c in self.columns) and not any(c in normed for c in self.absent)


AZURE = TraceFormat(
    "azure",
    "Azure LLM inference trace",
    ("timestamp", "contexttokens", "generatedtokens"),
    "timestamp",
    "contexttokens",
    "generatedtokens",
    None,
    AZURE_ATTRIBUTION,
)
QWEN_BAILIAN = TraceFormat(
    "qwen-bailian",
    "Qwen-Bailian usage trace",
    ("chatid", "parentchatid", "turn", "timestamp", "inputlength", "outputlength"),
    "timestamp",
    "inputlength",
    "outputlength",
    "s",
    BAILIAN_ATTRIBUTION,
)
MOONCAKE = TraceFormat(
    "mooncake",
    "Mooncake trace",
    ("timestamp", "inputlength", "outputlength", "hashids"),
    "timestamp",
    "inputlength",
    "outputlength",
    "ms",
    MOONCAKE_ATTRIBUTION,
    absent=("chatid", "parentchatid", "turn"),
)
BURSTGPT = TraceFormat(
    "burstgpt",
    "BurstGPT",
    ("timestamp", "model", "requesttokens", "responsetokens", "logtype"),
    "timestamp",
    "requesttokens",
    "responsetokens",
    "s",
    BURSTGPT_ATTRIBUTION,
)
FORMATS: tuple[TraceFormat, ...] = (QWEN_BAILIAN, MOONCAKE, BURSTGPT, AZURE)
"""Recognized formats, most specific first."""  # fmt: skip


def detect_format(columns: list[str]) -> TraceFormat | None:
    """The first of :data:`FORMATS` whose columns ``columns`` (as spelled) has, or ``None``."""
    normed = {norm_column(c) for c in columns}
    for f in FORMATS:
        if f.matches(normed):
            return f
    return None


def azure_attribution(first_time: object) -> str:
    """The 2024 attribution when the first timestamp carries a UTC offset (the 2024
    files' ``2024-05-10 00:00:00.009930+00:00``), else the 2023 one."""
    s = str(first_time).strip()
    return (
        AZURE_2024_ATTRIBUTION if (s.endswith("Z") or s[-6:-5] in ("+", "-") and s[-3:-2] == ":") else AZURE_ATTRIBUTION
    )
