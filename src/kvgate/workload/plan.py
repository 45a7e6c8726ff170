"""The stream test's plan: everything checked before torch is imported or memory touched.

Plain Python. :func:`plan_stream` resolves the model config, the mirror geometry and the
admission (slots, blocks, bytes) and collects warnings; :mod:`kvgate.workload.stream`
then checks the plan against the card (``torch.cuda.mem_get_info``) and runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvgate.errors import KvgateError
from kvgate.workload.allocator import DEFAULT_BLOCK_SIZE, DEFAULT_SLOT_CAP, Admission, MirrorGeometry, admit
from kvgate.workload.config import check_supported, load_config

LAYOUTS = ("contiguous", "paged")


@dataclass
class StreamPlan:
    """A checked stream-test request (see :func:`plan_stream`)."""

    model: str
    config: dict[str, Any]
    geom: MirrorGeometry
    admission: Admission
    layout: str
    prompt: int
    tokens: int
    slot_cap: int
    block_size: int
    weights: str  # "random" or a directory
    device: str
    dtype: str
    seed: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def streams(self) -> int:
        return self.admission.streams

    def to_dict(self) -> dict[str, Any]:
        """The plan's inputs and expected bytes (JSON-ready; ints are bytes)."""
        g = self.geom
        return {
            "model": self.model,
            "model_type": self.config.get("model_type"),
            "layout": self.layout,
            "streams": self.streams,
            "max_seq": g.max_seq,
            "prompt": self.prompt,
            "tokens": self.tokens,
            "positions": self.admission.positions,
            "slot_cap": self.slot_cap,
            "block_size": self.block_size,
            "pool_blocks": self.admission.pool_blocks if self.layout == "paged" else None,
            "weights": self.weights,
            "device": self.device,
            "dtype": self.dtype,
            "seed": self.seed,
            "kv_format": g.geometry.fmt_k.name,
            "geometry": {
                "n_layers": g.n_layers,
                "kv_heads": g.kv_heads,
                "head_dim": g.head_dim,
                "position_bytes": g.position_bytes,
                "slot_bytes": g.slot_bytes,
                "block_bytes": g.block_bytes(self.block_size),
            },
            "mirror_bytes_expected": self.admission.mirror_bytes,
            "contiguous_bytes_expected": self.admission.contiguous_bytes,
            "written_bytes": self.admission.written_bytes,
        }


def plan_stream(
    *,
    model: str | None,
    streams: int,
    max_seq: int,
    prompt: int,
    tokens: int,
    layout: str = "contiguous",
    slot_cap: int = DEFAULT_SLOT_CAP,
    block_size: int = DEFAULT_BLOCK_SIZE,
    pool_blocks: int | None = None,
    weights: str = "random",
    device: str = "cuda",
    dtype: str = "bf16",
    seed: int = 0,
) -> StreamPlan:
    """Resolve and check a stream test. ``weights`` is ``random`` or a model directory
    (whose ``config.json`` then defines the model; ``model`` may be omitted).

    Warns (in ``plan.warnings``) when ``max_seq`` exceeds ``max_position_embeddings``.

    Raises:
        KvgateError: unknown model / layout / dtype, unsupported model type, a sequence
            longer than ``max_seq``, more streams than the slot cap, a pool too small.
    """
    warnings: list[str] = []
    if layout not in LAYOUTS:
        raise KvgateError(f"unknown layout {layout!r}", hint="use contiguous or paged")
    if dtype not in ("bf16", "fp16", "fp32"):
        raise KvgateError(f"unknown dtype {dtype!r}", hint="use bf16, fp16 or fp32")
    if weights != "random":
        wdir = Path(weights)
        if not wdir.is_dir():
            raise KvgateError(f"--weights must be 'random' or a model directory; {weights!r} is neither")
        name, cfg = load_config(wdir)
        if model is not None:
            warnings.append(f"--weights {weights}: the model is defined by {wdir / 'config.json'}; --model {model} is only a label")
            name = model
    else:
        if model is None:
            raise KvgateError("--model is required with --weights random", hint="e.g. --model qwen3-30b-a3b")
        name, cfg = load_config(model)
    if isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    check_supported(cfg)
    if isinstance(max_seq, bool) or not isinstance(max_seq, int) or max_seq <= 0:
        raise KvgateError(f"max_seq must be a positive integer, got {max_seq!r}")
    geom = MirrorGeometry.from_config(cfg, max_seq)
    mpe = cfg.get("max_position_embeddings")
    if isinstance(mpe, int) and max_seq > mpe:
        warnings.append(
            f"max_seq {max_seq} exceeds the model's max_position_embeddings {mpe}; "
            "positions past it are outside what the model was trained on (the bytes are still exact)"
        )
    adm = admit(
        geom,
        layout=layout,
        streams=streams,
        prompt=prompt,
        tokens=tokens,
        slot_cap=slot_cap,
        block_size=block_size,
        pool_blocks=pool_blocks,
    )
    return StreamPlan(
        model=name,
        config=cfg,
        geom=geom,
        admission=adm,
        layout=layout,
        prompt=prompt,
        tokens=tokens,
        slot_cap=slot_cap,
        block_size=block_size,
        weights=weights,
        device=device,
        dtype=dtype,
        seed=seed,
        warnings=warnings,
    )
