"""Models by the names users type: presets in any case and punctuation, Hugging Face Hub
ids through the local cache (and the Hub itself when allowed), and a "did you mean" when
nothing matches.

**Preset names.** ``Llama-3.1-70B-Instruct``, ``meta-llama/Meta-Llama-3.1-70B``,
``LLAMA_3.1_70B`` all mean the preset ``llama-3.1-70b``: the name is lower-cased, its
organisation and the usual suffixes (``-Instruct``, ``-Chat``, ``-hf``, ``-Base``) and a
leading ``Meta-`` dropped, and compared with ``-``/``_``/spaces removed. A match that was
not the exact key is reported in a note (the preset's config is the base model's; an
Instruct checkpoint has the same shapes).

**Hub ids** (``Qwen/Qwen3-32B``), offline: the local Hugging Face cache, laid out as
huggingface_hub writes it (``$HF_HUB_CACHE`` or ``$HF_HOME/hub`` or
``~/.cache/huggingface/hub``; ``models--Qwen--Qwen3-32B/snapshots/<rev>/config.json``,
found with ``huggingface_hub.try_to_load_from_cache``). The snapshot folder is then read
as any model folder (its safetensors headers give exact weights).

**Hub ids, online** — only when ``KVGATE_HUB=1`` (kvgate never reaches the network on its
own): ``huggingface_hub.hf_hub_download`` for config.json and
``huggingface_hub.get_safetensors_metadata`` for the tensors' dtypes, shapes and
offsets (the headers, not the weights; as hf-mem does). The answer says which source was
used.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvgate.errors import KvgateError
from kvgate.model.spec import ConfigError

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
_SUFFIXES = ("-instruct", "-chat", "-hf", "-base", "-it")
HUB_ENV = "KVGATE_HUB"


def _squeeze(name: str) -> str:
    s = name.strip().lower()
    if "/" in s:
        s = s.rsplit("/", 1)[1]
    s = re.sub(r"[\s_]+", "-", s)
    changed = True
    while changed:
        changed = False
        for suf in _SUFFIXES:
            if s.endswith(suf):
                s, changed = s[: -len(suf)], True
    s = s.removeprefix("meta-")
    return s.replace("-", "")


def match_preset(name: str) -> str | None:
    """The preset ``name`` means, case- and punctuation-insensitively (module doc), or ``None``."""
    from kvgate.model import preset_names

    names = preset_names()
    key = name.strip().lower()
    if key in names:
        return key
    want = _squeeze(name)
    hits = [p for p in names if _squeeze(p) == want]
    return hits[0] if len(hits) == 1 else None


def shipped_configs() -> list[Path]:
    """The published configs that ship with a checkout (``tests/data/configs/*.json``), or
    none in an installed package."""
    root = Path(__file__).resolve().parents[3] / "tests" / "data" / "configs"
    try:
        return sorted(root.glob("*.json")) if root.is_dir() else []
    except OSError:
        return []


def _rel(p: Path) -> str:
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


#: words in a checkpoint's name that say its weights are quantized
_QUANT_WORD = re.compile(r"(?<![a-z])(fp8|fp4|nvfp4|mxfp4|awq|gptq|int4|int8|w4a16|w8a8|bnb|4bit|8bit|gguf)(?![a-z])")


#: how many shipped configs the hint names (the nearest by name); `ls` gives the rest
_NEAREST = 6


def unknown_model_error(name: str) -> ConfigError:
    """``model config not found`` with what kvgate does know: a "did you mean" among the
    presets and shipped configs, the presets, and where the shipped configs are."""
    from kvgate.model import preset_names

    presets = preset_names()
    shipped = shipped_configs()
    pool = {p: p for p in presets}
    pool.update({c.stem: _rel(c) for c in shipped})
    want = _squeeze(name)
    squeezed = {_squeeze(k): k for k in pool}
    close = difflib.get_close_matches(want, list(squeezed), n=3, cutoff=0.6)
    mean = [pool[squeezed[c]] for c in close]
    msg = f"model config not found: {name}" if "/" in name or name.endswith(".json") else \
        f"no model file or preset named {name!r}"
    if mean:
        msg += f" (did you mean {' or '.join(mean)}?)"
        quant = _QUANT_WORD.findall(name.lower())
        if quant and not any(q in m.lower() for q in quant for m in mean):
            msg += (f"; {name} names a {quant[0].upper()} checkpoint and these do not: their weights are "
                    "another size (give its config.json or --weights-bytes)")
    hint = f"give a model folder, a config.json, a .gguf or a preset ({', '.join(presets)})"
    if _HUB_ID.match(name.strip()):
        hint += (f"; {name} is not in the local Hugging Face cache ({_rel(hub_cache_dir())}): "
                 f"`huggingface-cli download {name} config.json`, or set {HUB_ENV}=1 to ask the Hub")
    if shipped:
        folder = _rel(shipped[0].parent)
        stems = {_squeeze(c.stem): c.stem for c in shipped}
        near = [stems[k] for k in difflib.get_close_matches(want, list(stems), n=_NEAREST, cutoff=0.0)]
        more = len(shipped) - len(near)
        hint += (f"; {len(shipped)} published configs ship in {folder}/ (give the file), the nearest: "
                 f"{', '.join(near)}" + (f" (`ls {folder}/` for the other {more})" if more else ""))
    return ConfigError(msg, hint=hint)


# --------------------------------------------------------------------------- the Hub

def hub_cache_dir() -> Path:
    """The Hugging Face Hub cache as huggingface_hub finds it at call time
    (``huggingface_hub.constants``: ``HF_HUB_CACHE``, else ``HF_HOME``/hub, else
    ``~/.cache/huggingface/hub``)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def is_hub_id(ref: str) -> bool:
    """``ref`` is shaped as a Hub repo id and is not a path on disk."""
    return bool(_HUB_ID.match(ref.strip())) and not Path(ref).exists()


def cached_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot folder of ``repo_id`` holding its config.json, or ``None``
    (``huggingface_hub.try_to_load_from_cache``; no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - a transformers dependency
        return None
    try:
        hit = try_to_load_from_cache(repo_id, "config.json", cache_dir=str(hub_cache_dir()))
    except Exception:  # noqa: BLE001 - an id huggingface_hub refuses: not in the cache
        return None
    return Path(hit).parent if isinstance(hit, str) else None


def hub_allowed() -> bool:
    """The user allowed kvgate to ask the Hub (``KVGATE_HUB=1``) and did not set
    ``HF_HUB_OFFLINE``."""
    return os.environ.get(HUB_ENV) == "1" and os.environ.get("HF_HUB_OFFLINE", "0") in ("", "0")


@dataclass
class HubModel:
    """A model read from the Hub: its config.json and its tensors' bytes."""

    repo_id: str
    config: dict[str, Any]
    weight_bytes: int | None
    tensors: int | None
    by_dtype: dict[str, int]
    source: str


def hub_config(repo_id: str) -> dict[str, Any]:
    """config.json of ``repo_id`` from the Hub (``hf_hub_download``).

    Raises:
        KvgateError: the Hub cannot be reached or has no such file.
    """
    from huggingface_hub import hf_hub_download

    from kvgate.model import read_config

    try:
        path = hf_hub_download(repo_id, "config.json", cache_dir=str(hub_cache_dir()))
    except Exception as exc:  # noqa: BLE001 - network, auth, missing repo: one message
        raise KvgateError(f"{repo_id}: config.json not available from the Hugging Face Hub: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''}",
                          hint="check the id and the network (a gated repo needs HF_TOKEN), or give a local folder"
                          ) from exc
    return read_config(Path(path))


def hub_weight_bytes(repo_id: str) -> tuple[int, int, dict[str, int]]:
    """``(bytes, tensors, bytes per dtype)`` of ``repo_id``'s safetensors from the Hub's
    metadata (``huggingface_hub.get_safetensors_metadata``: each shard's header; no
    weights downloaded). Bytes per tensor are ``data_offsets`` end − begin.

    Raises:
        KvgateError: the Hub cannot be reached, or the repo has no safetensors.
    """
    from huggingface_hub import get_safetensors_metadata

    try:
        meta = get_safetensors_metadata(repo_id)
    except Exception as exc:  # noqa: BLE001
        raise KvgateError(f"{repo_id}: safetensors metadata not available from the Hugging Face Hub: "
                          f"{type(exc).__name__}", hint="give a local folder, or --weights-bytes") from exc
    total = count = 0
    by: dict[str, int] = {}
    for fmeta in meta.files_metadata.values():
        for info in fmeta.tensors.values():
            begin, end = info.data_offsets
            total += end - begin
            count += 1
            by[info.dtype] = by.get(info.dtype, 0) + end - begin
    return total, count, by
