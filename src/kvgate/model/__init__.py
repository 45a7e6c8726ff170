"""Model description: the KV-relevant shape of a model (:class:`ModelSpec`) from a
config.json, a model directory, a GGUF file (metadata only), or a bundled preset; and
weight bytes (safetensors headers, GGUF tensor infos, or a labelled estimate).

Modules: ``spec`` (LayerSpec, ModelSpec), ``fields`` (config field readers),
``config`` (layer-kind detectors, ``spec_from_config``), ``gguf`` (GGUF metadata),
``weights`` (weight bytes), ``presets/`` (bundled configs).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from kvgate.atomicio import read_json
from kvgate.errors import KvgateError
from kvgate.guarded import MAX_CONFIG_BYTES
from kvgate.model.config import spec_from_config
from kvgate.model.fields import head_dims, num_kv_heads, text_config
from kvgate.model.spec import LAYER_KINDS, MAX_LAYERS, ConfigError, LayerSpec, ModelSpec

__all__ = [
    "LAYER_KINDS", "MAX_LAYERS", "ConfigError", "LayerSpec", "ModelSpec", "FILE_LOADERS", "head_dims",
    "load_model", "load_preset", "num_kv_heads", "preset_config", "preset_names", "spec_from_config", "text_config",
]

def preset_names() -> list[str]:
    """Names of the bundled preset configs (``src/kvgate/model/presets/*.json``)."""
    return sorted(p.name[:-5] for p in resources.files("kvgate.model.presets").iterdir() if p.name.endswith(".json"))


def preset_config(name: str) -> tuple[str, dict[str, Any]]:
    """``(key, config dict)`` of a bundled preset by name (case-insensitive).

    Raises:
        ConfigError: no such preset (the message lists them).
    """
    key = name.strip().lower()
    if key not in preset_names():
        raise ConfigError(f"no model file or preset named {name!r}", hint=f"presets: {', '.join(preset_names())}")
    return key, json.loads(resources.files("kvgate.model.presets").joinpath(f"{key}.json").read_text(encoding="utf-8"))


def load_preset(name: str) -> ModelSpec:
    """A bundled preset by name (case-insensitive) as a :class:`ModelSpec`.

    Raises:
        ConfigError: no such preset (the message lists them).
    """
    key, cfg = preset_config(name)
    return spec_from_config(cfg, name=key, source=f"preset:{key}")


def read_config(path: Path) -> dict:
    """A config.json as a dict. Published configs may hold ``Infinity`` (Mamba-2's
    ``time_step_limit``), which transformers reads (Python's ``json`` does); kvgate's
    strict reader refuses it, so such a file is re-read with Python's defaults.

    Raises:
        KvgateError: missing, unreadable, or malformed file (from :func:`read_json`).
    """
    try:
        return read_json(path, what="model config", max_bytes=MAX_CONFIG_BYTES)
    except KvgateError as exc:
        if "is not a JSON number" not in exc.message:
            raise
    return read_json(path, what="model config", allow_nan=True, max_bytes=MAX_CONFIG_BYTES)  # NaN kept, depth and digits still guarded


def _load_gguf(path: Path) -> ModelSpec:
    """A GGUF's metadata as a :class:`ModelSpec` (:func:`kvgate.model.gguf.load_gguf`; gguf-py
    loads only when a GGUF is read)."""
    from kvgate.model.gguf import load_gguf  # noqa: PLC0415

    return load_gguf(path)


# Loaders for other file types by suffix (e.g. ".gguf"); model/gguf.py imports model/spec.py,
# never this package, so the two do not import each other.
FILE_LOADERS: dict[str, Callable[[Path], ModelSpec]] = {".gguf": _load_gguf}


def load_model(ref: str | Path) -> ModelSpec:
    """Load a model from a config.json path, a model directory, a registered file type
    (e.g. ``.gguf``), or a bundled preset name.

    Raises:
        ConfigError / KvgateError: missing file, unparsable JSON, missing fields.
    """

    p = Path(ref)
    if p.is_dir():
        cfg_path = p / "config.json"
        if not cfg_path.exists():
            raise ConfigError(f"model directory {p} has no config.json")
        return spec_from_config(read_config(cfg_path), name=p.resolve().name, source=str(cfg_path))
    if p.suffix.lower() in FILE_LOADERS:
        if not p.exists():
            raise ConfigError(f"model file not found: {p}")
        return FILE_LOADERS[p.suffix.lower()](p)
    if p.suffix.lower() in (".bin", ".pt", ".pth") and p.exists():  # never read whole as a "config"
        raise ConfigError(f"{p} is a PyTorch checkpoint (pickle), not a model config: kvgate does not read it",
                          hint="give the model's directory or its config.json (or a .safetensors / .gguf file)")
    if p.exists() or p.suffix.lower() == ".json" or "/" in str(ref):
        cfg = read_config(p)
        name = p.parent.name if p.name == "config.json" else p.stem
        return spec_from_config(cfg, name=name, source=str(p))
    return load_preset(str(ref))
