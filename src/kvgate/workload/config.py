"""Model configs for the reference workload: a bundled preset, a config.json, or a directory.

Plain Python, no torch: the CLI resolves and validates the config (and the mirror's
geometry) before torch is imported, so bad input fails fast and ``--help`` never needs torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvgate.atomicio import read_json
from kvgate.errors import KvgateError
from kvgate.model import preset_config

# model_type values whose decoder layers the decode loop in :mod:`kvgate.workload.engine`
# knows how to drive (q/k/v/o projections, optional q_norm/k_norm, full attention).
SUPPORTED_MODEL_TYPES = ("qwen3", "qwen3_moe", "llama", "qwen2")


def load_config(ref: str | Path) -> tuple[str, dict[str, Any]]:
    """``(name, config dict)`` for a preset name, a config.json path or a model directory.

    Raises:
        KvgateError: no such preset or file, unreadable JSON.
    """
    p = Path(ref)
    if p.is_dir():
        return p.resolve().name, read_json(p / "config.json", what="model config")
    if p.exists() or p.suffix.lower() == ".json" or "/" in str(ref):
        cfg = read_json(p, what="model config")
        return (p.parent.name if p.name == "config.json" else p.stem), cfg
    return preset_config(str(ref))


def check_supported(cfg: dict[str, Any]) -> str:
    """The config's ``model_type`` if the decode loop supports it.

    Raises:
        KvgateError: another model type, or sliding-window attention switched on (the
            mirror allocates and attends over full length only).
    """
    mt = cfg.get("model_type")
    if mt not in SUPPORTED_MODEL_TYPES:
        raise KvgateError(
            f"the reference workload does not support model_type {mt!r}",
            hint=f"supported: {', '.join(SUPPORTED_MODEL_TYPES)} (e.g. --model qwen3-30b-a3b or qwen3-0.6b)",
        )
    if cfg.get("use_sliding_window"):
        raise KvgateError(
            "the reference workload attends over full length; this config has use_sliding_window=true",
            hint="use a config with full attention in every layer",
        )
    return mt
