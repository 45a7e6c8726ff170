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
    "load_model", "load_preset", "num_kv_heads", "preset_checkpoint", "preset_config", "preset_names", "spec_from_config", "text_config",
]

def preset_names() -> list[str]:
    """Names of the bundled preset configs (``src/kvgate/model/presets/*.json``)."""
    return sorted(p.name[:-5] for p in resources.files("kvgate.model.presets").iterdir() if p.name.endswith(".json"))


def preset_config(name: str) -> tuple[str, dict[str, Any]]:
    """``(key, config dict)`` of a bundled preset by name (case-insensitive).

    Raises:
        ConfigError: no such preset (the message lists them).
    """
    key = resolve_preset_name(name)
    cfg = json.loads(resources.files("kvgate.model.presets").joinpath(f"{key}.json").read_text(encoding="utf-8"))
    cfg.pop(CHECKPOINT_KEY, None)
    return key, cfg


#: a preset's own key (not a config field): the published checkpoint's exact weight bytes
#: (its ``model.safetensors.index.json`` ``metadata.total_size``) with the Hub id and source
CHECKPOINT_KEY = "kvgate_checkpoint"


def preset_checkpoint(name: str) -> dict[str, Any] | None:
    """The preset's ``kvgate_checkpoint`` entry (``weight_bytes``, ``hub_id``, ``source``),
    or ``None`` when the preset carries none.

    Raises:
        ConfigError: no such preset.
    """
    key = resolve_preset_name(name)
    raw = json.loads(resources.files("kvgate.model.presets").joinpath(f"{key}.json").read_text(encoding="utf-8"))
    entry = raw.get(CHECKPOINT_KEY)
    return entry if isinstance(entry, dict) and isinstance(entry.get("weight_bytes"), int) else None


def resolve_preset_name(name: str) -> str:
    """The preset key ``name`` means (case-insensitive; see :mod:`kvgate.model.names`).

    Raises:
        ConfigError: no such preset (the message lists them).
    """
    key = name.strip().lower()
    if key in preset_names():
        return key
    from kvgate.model.names import unknown_model_error

    raise unknown_model_error(name)


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
            raise ConfigError(f"model directory {p} has no config.json",
                              hint="give the folder that holds config.json, the config.json itself, a .gguf or a preset")
        return spec_from_config(read_config(cfg_path), name=p.resolve().name, source=str(cfg_path))
    if p.suffix.lower() in FILE_LOADERS:
        if not p.exists():
            raise ConfigError(f"model file not found: {p}")
        return FILE_LOADERS[p.suffix.lower()](p)
    if p.suffix.lower() in (".bin", ".pt", ".pth") and p.exists():  # never read whole as a "config"
        raise ConfigError(f"{p} is a PyTorch checkpoint (pickle), not a model config: kvgate does not read it",
                          hint="give the model's directory or its config.json (or a .safetensors / .gguf file)")
    if p.exists() or p.suffix.lower() == ".json":
        cfg = read_config(p)
        name = p.parent.name if p.name == "config.json" else p.stem
        return spec_from_config(cfg, name=name, source=str(p))
    return load_by_name(str(ref))


def load_by_name(ref: str) -> ModelSpec:
    """A model by the name a user typed (:mod:`kvgate.model.names`): a Hub id in the local
    Hugging Face cache, a preset in any case and punctuation (with a note when the name was
    not the preset's key), the Hub itself when ``KVGATE_HUB=1``.

    Raises:
        ConfigError: none of these (the message has a "did you mean" and the hint lists
            the presets and the shipped configs).
    """
    from kvgate.model.names import (
        cached_snapshot,
        hub_allowed,
        hub_config,
        is_hub_id,
        match_preset,
        unknown_model_error,
    )

    hub = is_hub_id(ref)
    if hub:
        snap = cached_snapshot(ref)
        if snap is not None:
            spec = spec_from_config(read_config(snap / "config.json"), name=ref,
                                    source=f"local Hugging Face cache: {snap / 'config.json'}")
            spec.notes.insert(0, f"{ref}: read from the local Hugging Face cache ({snap})")
            return spec
    key = match_preset(ref)
    if key is not None:
        spec = load_preset(key)
        if key != ref.strip().lower():
            spec.notes.insert(0, f"{ref!r} read as the preset {key} (names compared without case, organisation, "
                                 "punctuation and -Instruct/-Chat/-hf suffixes; the shapes are the same)")
        return spec
    if hub and hub_allowed():
        spec = spec_from_config(hub_config(ref), name=ref, source=f"Hugging Face Hub: {ref}/config.json")
        spec.notes.insert(0, f"{ref}: config.json read from the Hugging Face Hub (KVGATE_HUB=1)")
        return spec
    raise unknown_model_error(ref)
