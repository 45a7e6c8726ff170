"""Typed options, one frozen dataclass per concern, built once from the command line.

Nothing below :mod:`kvgate.commands` sees an argparse ``Namespace``: the commands build
these types (``kvgate.commands._args``) and the library takes them.

==================  ===========================================================
type                concern
==================  ===========================================================
:class:`EngineOptions`   model, KV formats, TP, engine layout and its options, max_seq,
                         slots — in kvgate's words or the engine's (vLLM, llama.cpp)
:class:`GateOptions`     target slots N, measured n and L0, margin, sensitivity,
                         candidates, kv-quant target, weights policy, record output
:class:`MeasureOptions`  GPU selection, domain, sampling interval, settle, outputs, command
:class:`ReplayOptions`   request trace and the replay's service model (page size, decode
                         rate, speed, Poisson rate, seed)
==================  ===========================================================

llama.cpp's ``-c`` is the whole context of all sequences; kvgate's ``max_seq`` is per
sequence. :func:`llamacpp_max_seq` turns one into the other with llama.cpp's own rule
(``src/llama-context.cpp``, ``llama_context::llama_context``)::

    n_ctx = GGML_PAD(n_ctx, 256)
    unified:  n_ctx_seq = n_ctx                      (one stream shared by n_seq_max)
    else:     n_ctx_seq = GGML_PAD(n_ctx / n_seq_max, 256);  n_ctx = n_ctx_seq · n_seq_max
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from kvgate.errors import KvgateError
from kvgate.gate.verdict import DEFAULT_MARGIN, DEFAULT_SENSITIVITY

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.model import ModelSpec

DEFAULT_KV_FORMAT = "bf16"
DEFAULT_SLOTS_MEASURED = 1
DEFAULT_PAGE_SIZE: int = 16  # the replay's page: vLLM's default --block-size (kvgate.engines.vllm.pool's, held equal by
#                              tests/test_light_start.py; written here so that building a parser loads no geometry)
DEFAULT_DECODE_RATE = 50.0  # tokens/s per live sequence (kvgate.replay.simulate)
LLAMACPP_PAD = 256  # GGML_PAD(n_ctx, 256), src/llama-context.cpp
LLAMACPP_MAX_SEQ = 256  # LLAMA_MAX_SEQ, src/llama-cparams.h


def pad256(n: int) -> int:
    """``GGML_PAD(n, 256)``: n rounded up to a multiple of 256 (llama.cpp's cells; the one
    helper, here so that building a parser loads no geometry; the llama.cpp package uses it)."""
    return -(-n // LLAMACPP_PAD) * LLAMACPP_PAD


def llamacpp_max_seq(ctx_size: int, n_seq: int = 1, unified: bool = False) -> int:
    """Per-sequence max_seq for llama.cpp's ``-c ctx_size -np n_seq [-kvu]``.

    Per-sequence streams: llama.cpp's ``n_ctx_seq`` = pad256(pad256(c) / n_seq) (integer
    division). Unified (``-kvu``): one stream of pad256(c) cells shared by all sequences;
    the share of one sequence is pad256(c) // n_seq, which the llama.cpp layout
    (:class:`kvgate.geometry.LlamaCpp`, ``n_ctx = pad256(L · n_seq)``) turns back into
    exactly pad256(c) cells for n_seq ≤ 256 (LLAMA_MAX_SEQ).

    >>> llamacpp_max_seq(16384, 8)
    2048
    >>> llamacpp_max_seq(10000, 3)      # pad256(10000) = 10240; 10240 // 3 = 3413 → 3584
    3584
    >>> llamacpp_max_seq(10000, 3, unified=True)
    3413

    Raises:
        KvgateError: ``ctx_size`` < 1, ``n_seq`` outside 1..256, or a context smaller than
            one cell per sequence.
    """
    if ctx_size < 1:
        raise KvgateError(f"-c/--ctx-size must be positive here, got {ctx_size}",
                          hint="-c 0 (the model's context) is resolved with the model: EngineOptions.max_seq_for")
    if not 1 <= n_seq <= LLAMACPP_MAX_SEQ:
        raise KvgateError(f"-np/--parallel must be 1..{LLAMACPP_MAX_SEQ} (LLAMA_MAX_SEQ), got {n_seq}")
    n_ctx = pad256(ctx_size)
    if unified:
        return n_ctx // n_seq
    return pad256(n_ctx // n_seq)


@dataclass(frozen=True)
class EngineOptions:
    """Model, KV formats, tensor parallelism and the engine layout: everything that sets
    the KV geometry.

    Attributes:
        model: config.json, model directory, GGUF file or preset name (``None`` where
            the command takes the geometry another way, e.g. ``replay --slot-bytes``).
        kv_format: format of K (``--kv-format``, vLLM ``--kv-cache-dtype``, llama.cpp
            ``-ctk``); ``auto`` is vLLM's "the model's dtype, 16-bit" (see :meth:`formats_for`).
        kv_format_v: format of V when it differs from K (``--kv-format-v``, ``-ctv``);
            ``None`` = same as K.
        tp: tensor-parallel size (``--tp``, vLLM ``--tensor-parallel-size``/``-tp``);
            figures are per rank.
        layout: ``contiguous``, ``vllm`` or ``llama.cpp`` (``--layout``, or inferred from
            the engine flags given).
        layout_options: keyword options of :func:`kvgate.geometry.layout_from_options`
            the user gave (engine defaults for the rest), e.g. ``{"block_size": 32}``.
        max_seq: positions per sequence L (``--max-seq``, ``--max-model-len``, or
            llama.cpp's per-sequence context from ``-c``); ``None`` = not given.
        slots: concurrent sequences (``--slots``, ``--max-num-seqs``, ``-np``); ``None`` =
            not given.
        ctx_size: llama.cpp's ``-c`` as typed (whole context; 0 = the model's), kept for
            :meth:`max_seq_for` and messages; ``None`` when not given.
        engine: whose flags were used (``vllm``, ``llama.cpp``) or ``None``.
        engine_flags: the engine-only flags given, in the user's spelling.
        explicit: the fields above the user gave (under any spelling); the others hold
            defaults. A reader that has a better default of its own (the engine-log gate:
            the KV format and TP the log shows) takes a field only when it is here.
    """

    model: str | None = None
    kv_format: str = DEFAULT_KV_FORMAT
    kv_format_v: str | None = None
    tp: int = 1
    layout: str = "contiguous"
    layout_options: dict[str, Any] = field(default_factory=dict)
    max_seq: int | None = None
    slots: int | None = None
    ctx_size: int | None = None
    engine: str | None = None
    engine_flags: tuple[str, ...] = ()
    explicit: frozenset[str] = frozenset()

    # -- max_seq
    def max_seq_for(self, model: ModelSpec | None = None) -> int | None:
        """Per-sequence max_seq, resolving llama.cpp's ``-c 0`` ("the model's context":
        ``n_ctx_train``, kvgate's ``max_position_embeddings``) with ``model``.

        Raises:
            KvgateError: ``-c 0`` and a model without max_position_embeddings.
        """
        if self.max_seq is not None or self.ctx_size is None:
            return self.max_seq
        ctx = model.max_position_embeddings if model is not None else None
        if not ctx:
            raise KvgateError("-c 0 takes the model's training context, and the model has no max_position_embeddings",
                              hint="give -c N or --max-seq L")
        return llamacpp_max_seq(ctx, int(self.layout_options.get("n_seq") or 1),
                                bool(self.layout_options.get("unified")))

    def ctx_note(self, max_seq: int) -> str | None:
        """What llama.cpp's ``-c`` became per sequence (for the notes), or ``None``."""
        if self.ctx_size is None:
            return None
        n = int(self.layout_options.get("n_seq") or 1)
        if self.layout_options.get("unified"):
            return (f"llama.cpp -c {self.ctx_size} -np {n} -kvu: one unified cache of {pad256(max_seq * n):,} cells; "
                    f"max_seq {max_seq:,} is each sequence's share (one sequence may use up to all of it)")
        return (f"llama.cpp -c {self.ctx_size} -np {n}: {max_seq:,} positions per sequence "
                f"(n_ctx_seq, src/llama-context.cpp)")

    # -- formats
    def formats_for(self, model: ModelSpec | None = None) -> tuple[str, str | None]:
        """``(kv_format, kv_format_v)`` with ``auto`` resolved by the engine's own rule
        (:meth:`kvgate.engines.base.Engine.auto_kv_format`; no engine named: the default
        engine's, vLLM's): the dtype the engine runs the model in, kept in the model's spelling
        when it is the model's own; a float32 (or absent) config dtype is downcast as the
        engine does (vLLM: ``vllm/config/model.py`` ``_resolve_auto_dtype``, bf16 on CUDA cards
        that have it: 2 bytes either way).
        """
        def res(f: str | None) -> str | None:
            if f is None or f.strip().lower() != "auto":
                return f
            from kvgate.engines.registry import DEFAULT_ENGINE, canonical_name, get_engine  # noqa: PLC0415
            from kvgate.fit.dtype import dtype_format  # noqa: PLC0415

            engine = get_engine(self.engine or canonical_name(self.layout) or DEFAULT_ENGINE)
            fmt = engine.auto_kv_format(model)
            dtype = getattr(model, "dtype", None)
            try:
                own = dtype is not None and dtype_format(dtype) == fmt
            except KvgateError:  # a dtype kvgate has no format for
                own = False
            return str(dtype) if own else fmt

        k = res(self.kv_format)
        return k or DEFAULT_KV_FORMAT, res(self.kv_format_v)


@dataclass(frozen=True)
class GateOptions:
    """The gate's target and thresholds, and where the record goes.

    Attributes:
        slots_target: target concurrent slots N.
        slots_measured: slots n allocated at the measured peak.
        max_seq_measured: max_seq L0 at the measured peak (``None`` = the target's L).
        margin: safety margin m as a share of total (0 ≤ m < 1).
        sensitivity: flag threshold of N·S / headroom (> 0).
        candidates: names from :data:`kvgate.gate.verdict.CANDIDATES`.
        quant_to: target KV format of the ``kv-quant`` candidate.
        weights_policy: ``fixed`` or ``half-free`` (:mod:`kvgate.gate.weights_policy`).
        weights_max_bytes: ``half-free``: resident weights at most (``None`` = policy cap).
        weights_delta_bytes: what-if: resident weights heavier by this many bytes.
        out: record file (.json) or directory (``None`` = ``./kvgate-records``).
        no_record: write no record.
        force: overwrite an existing record.
    """

    slots_target: int
    slots_measured: int = DEFAULT_SLOTS_MEASURED
    max_seq_measured: int | None = None
    margin: Fraction = DEFAULT_MARGIN
    sensitivity: Fraction = DEFAULT_SENSITIVITY
    candidates: tuple[str, ...] = ("paging", "tiering")
    quant_to: str = "fp8"
    weights_policy: str = "fixed"
    weights_max_bytes: int | None = None
    weights_delta_bytes: int = 0
    out: str | None = None
    no_record: bool = False
    force: bool = False

    def __post_init__(self) -> None:
        if not (0 <= self.margin < 1):
            raise KvgateError(f"--margin must be at least 0% and below 100%, got {float(self.margin * 100):g}%")
        if self.sensitivity <= 0:
            raise KvgateError(f"--sensitivity must be positive, got {float(self.sensitivity * 100):g}%")
        if self.slots_target < 0 or self.slots_measured < 0:
            raise KvgateError("slot counts must not be negative")
        if self.weights_max_bytes is not None and self.weights_policy != "half-free":
            raise KvgateError("--weights-max applies to --weights-policy half-free only")


@dataclass(frozen=True)
class MeasureOptions:
    """How to measure a workload (``kvgate measure``, ``kvgate run``).

    Attributes:
        command: the workload, argv (after ``--``).
        gpus: GPU index, comma list or ``all`` (``--gpu``; ``all``: every GPU shown, the
            one with the least headroom among those the command used gates).
        domain: ``gpu`` (NVML total − free) or ``host`` (system RAM, the command's RSS).
        interval_s: sampling interval in seconds (``None`` = the domain's default).
        settle_s: idle sampling before the command starts, seconds (``None`` = the
            runner's default).
        kill_leftovers: stop processes the command leaves running (else report them).
        out: measurement JSON path (``None`` = a time-stamped default).
        plot: PNG path, or ``None``.
        force: overwrite existing outputs.
    """

    command: tuple[str, ...] = ()
    gpus: str = "all"
    domain: str = "gpu"
    interval_s: float | None = None
    settle_s: float | None = None
    kill_leftovers: bool = False
    out: str | None = None
    plot: str | None = None
    force: bool = False


@dataclass(frozen=True)
class ReplayOptions:
    """A request trace and the replay's service model (:mod:`kvgate.replay.simulate`).

    Attributes:
        trace: CSV or JSONL trace file.
        page_size: positions per paged block of the replay (``--page-size``; default the
            vLLM ``--block-size`` when one was given, else 16).
        decode_rate: tokens/s each live sequence generates.
        speed: arrival-time speed-up.
        rate: Poisson arrivals per second instead of the trace's timestamps (``None``).
        seed: seed of ``rate`` arrivals.
        time_unit: unit of the trace's timestamps (``s``, ``ms``, ``us``, ``ns``), or
            ``None`` to take it from the format or the data
            (:func:`kvgate.replay.timeunits.detect_time_unit`).
    """

    trace: str
    page_size: int = DEFAULT_PAGE_SIZE
    decode_rate: float = DEFAULT_DECODE_RATE
    speed: float = 1.0
    rate: float | None = None
    seed: int = 0
    time_unit: str | None = None

    def __post_init__(self) -> None:
        for name in ("page_size", "decode_rate", "speed"):
            v = getattr(self, name)
            if not v > 0:
                raise KvgateError(f"--{name.replace('_', '-')} must be positive, got {v}")
        if self.rate is not None and not self.rate > 0:
            raise KvgateError(f"--rate must be positive, got {self.rate}")
