"""Weight bytes: exact from safetensors headers or GGUF tensor infos, else an estimate.

**safetensors** (https://github.com/huggingface/safetensors, "Format"): 8 bytes
little-endian u64 N, then N bytes of JSON ``{name: {"dtype", "shape", "data_offsets":
[begin, end]}, "__metadata__": {...}}``, then the data. A tensor's bytes are
``end − begin``; kvgate cross-checks them against ``prod(shape) × bits(dtype) / 8``
(the crate's ``Dtype::bitsize``; sub-byte dtypes F4/F6 must fill whole bytes, as the
crate requires) and refuses a mismatch. No tensor data is read. A sharded checkpoint
(``model.safetensors.index.json``) is the sum over the shard files its ``weight_map``
names.

**GGUF**: Σ tensor-info bytes (:func:`kvgate.gguf_model.gguf_weight_bytes`).

**Estimate**: with no weights at hand, parameters are counted from config.json
(embeddings, attention or MLA projections, dense or MoE MLPs, norms) × the config dtype's
bytes, and labelled ``exact: False``. Biases, quantization scales, vision towers and
MTP heads are not counted.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvgate.errors import KvgateError
from kvgate.guarded import MAX_CONFIG_BYTES, check_regular, loads_json, open_regular
from kvgate.model.mixer import mixer_params

# Bits per element, from safetensors' Dtype::bitsize (safetensors/src/tensor.rs).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}

MAX_HEADER_BYTES = 100_000_000  # the crate's own limit (N_MAX_HEADER)

# PyTorch checkpoints are pickles: reading them means running code, so kvgate refuses them.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth")


class WeightsError(KvgateError):
    """Unreadable or inconsistent weight files."""


@dataclass
class WeightBytes:
    """Weight bytes of one model.

    Attributes:
        bytes: total bytes (int).
        exact: True when read from files, False for an estimate from the config.
        source: what was read (file paths or ``config``).
        tensors: number of tensors (exact only).
        params: parameter count (estimate only; exact when all dtypes are whole bytes? no: None).
        by_dtype: bytes per dtype (exact only).
        notes: caveats.
    """

    bytes: int
    exact: bool
    source: str
    tensors: int | None = None
    params: int | None = None
    by_dtype: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "exact": self.exact,
            "kind": "exact" if self.exact else "estimate",
            "source": self.source,
            "tensors": self.tensors,
            "params": self.params,
            "by_dtype": dict(self.by_dtype),
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------- safetensors

def read_safetensors_header(path: str | Path) -> tuple[dict[str, Any], int]:
    """``(header dict, data start offset)`` of a safetensors file; reads only the header.

    Raises:
        WeightsError: missing/short file, header length beyond the file or the limit,
            invalid JSON.
    """
    p = Path(path)
    try:
        size = check_regular(p, what="safetensors file")
        with open_regular(p, what="safetensors file") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise WeightsError(f"{p}: not a safetensors file (shorter than the 8-byte header length)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise WeightsError(
                    f"{p}: header length {n:,} B does not fit the file ({size:,} B): not safetensors, or truncated"
                )
            raw = fh.read(n)
    except OSError as exc:
        raise WeightsError(f"cannot read {p}: {exc.strerror}") from exc
    try:
        header = loads_json(raw, what="safetensors header", where=str(p))  # depth, digits, NaN guarded
    except KvgateError as exc:
        raise WeightsError(exc.message) from exc
    if not isinstance(header, dict):
        raise WeightsError(f"{p}: safetensors header must be a JSON object")
    return header, 8 + n


def tensor_nbytes(name: str, info: Any, where: str = "") -> tuple[str, int]:
    """``(dtype, bytes)`` of one header entry: ``end − begin``, checked against
    ``prod(shape) × bits / 8``.

    Raises:
        WeightsError: unknown dtype (named, never defaulted), malformed entry, sub-byte
            total that is not whole bytes, or offsets that disagree with the shape.
    """
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
        raise WeightsError(f"{where}tensor {name!r}: header entry needs dtype, shape and data_offsets")
    dtype = info["dtype"]
    if dtype not in DTYPE_BITS:
        raise WeightsError(
            f"{where}tensor {name!r} has unknown safetensors dtype {dtype!r}",
            hint=f"known: {', '.join(DTYPE_BITS)}",
        )
    shape, offs = info["shape"], info["data_offsets"]
    if not isinstance(shape, list) or any(not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in shape):
        raise WeightsError(f"{where}tensor {name!r}: bad shape {shape!r}")
    if (not isinstance(offs, list) or len(offs) != 2 or any(not isinstance(o, int) or isinstance(o, bool) for o in offs)
            or offs[0] < 0 or offs[1] < offs[0]):
        raise WeightsError(f"{where}tensor {name!r}: bad data_offsets {offs!r}")
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8:
        raise WeightsError(f"{where}tensor {name!r}: {math.prod(shape)} × {dtype} is not a whole number of bytes")
    nbytes = offs[1] - offs[0]
    if nbytes != bits // 8:
        raise WeightsError(
            f"{where}tensor {name!r}: data_offsets span {nbytes:,} B but shape {shape} × {dtype} is {bits // 8:,} B"
        )
    return dtype, nbytes


def safetensors_file_bytes(path: str | Path) -> WeightBytes:
    """Exact tensor bytes of one ``.safetensors`` file, from its header.

    The format packs tensors without overlap (the crate's ``Metadata::validate``
    requires each tensor to start where the previous one ends), so two tensors whose
    ``data_offsets`` overlap are refused: summing them would count bytes twice.

    Raises:
        WeightsError: see :func:`read_safetensors_header` and :func:`tensor_nbytes`;
            also overlapping tensors, and tensor data beyond the end of the file
            (truncated download).
    """
    p = Path(path)
    header, start = read_safetensors_header(p)
    total, count, end_max = 0, 0, 0
    by: dict[str, int] = {}
    spans: list[tuple[int, int, str]] = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, nb = tensor_nbytes(name, info, f"{p.name}: ")
        total += nb
        count += 1
        by[dtype] = by.get(dtype, 0) + nb
        begin, end = info["data_offsets"]
        spans.append((begin, end, name))
        end_max = max(end_max, end)
    spans.sort()
    prev_end, prev_name = 0, None
    for begin, end, name in spans:
        if begin < prev_end:
            raise WeightsError(
                f"{p}: tensors {prev_name!r} and {name!r} overlap (data_offsets end {prev_end:,} > begin {begin:,}); "
                "safetensors packs tensors without overlap, so the exact bytes cannot be summed",
                hint="the header is corrupt or hand-edited: re-download or re-save the file",
            )
        if end > prev_end:
            prev_end, prev_name = end, name
    size = p.stat().st_size
    if start + end_max > size:
        raise WeightsError(f"{p}: tensors end at byte {start + end_max:,} but the file has {size:,}: truncated")
    return WeightBytes(bytes=total, exact=True, source=str(p), tensors=count, by_dtype=by)


def safetensors_index_bytes(index_path: str | Path) -> WeightBytes:
    """Exact bytes of a sharded checkpoint: the shards its ``weight_map`` names.

    Raises:
        WeightsError: unreadable index, ``weight_map`` missing, not an object, or with
            an entry that is not a shard file name; a shard missing, or a shard's
            header invalid.
    """
    from kvgate.atomicio import read_json

    ip = Path(index_path)
    idx = read_json(ip, what="safetensors index", max_bytes=MAX_CONFIG_BYTES)
    if not isinstance(idx, dict):
        raise WeightsError(f"{ip}: the safetensors index must be a JSON object, got {type(idx).__name__}")
    wm = idx.get("weight_map")
    if wm is None:
        raise WeightsError(f"{ip}: no 'weight_map' in the safetensors index")
    if not isinstance(wm, dict):
        raise WeightsError(
            f"{ip}: 'weight_map' must be an object mapping tensor names to shard files, got {type(wm).__name__}"
        )
    if not wm:
        raise WeightsError(f"{ip}: 'weight_map' in the safetensors index is empty")
    for tname, shard in wm.items():
        if not isinstance(shard, str) or not shard.strip():
            raise WeightsError(
                f"{ip}: weight_map entry {tname!r} must name a shard file (a string), got {shard!r}"
            )
    shards = sorted(set(wm.values()))
    total, count = 0, 0
    by: dict[str, int] = {}
    for s in shards:
        sp = ip.parent / s
        if not sp.exists():
            absent = [t for t in shards if not (ip.parent / t).exists()]
            raise WeightsError(
                f"{ip}: {len(absent)} of the {len(shards)} shards its weight_map names are missing ({s} first): "
                "a partial download", hint="download every shard (huggingface-cli download MODEL), "
                "or pass --weights-bytes")
        wb = safetensors_file_bytes(sp)
        total += wb.bytes
        count += wb.tensors or 0
        for k, v in wb.by_dtype.items():
            by[k] = by.get(k, 0) + v
    notes = []
    meta = idx.get("metadata")
    meta_total = meta.get("total_size") if isinstance(meta, dict) else None
    if isinstance(meta_total, int) and not isinstance(meta_total, bool) and meta_total != total:
        notes.append(f"index metadata total_size {meta_total:,} B differs from the shard headers' {total:,} B")
    return WeightBytes(bytes=total, exact=True, source=f"{ip} ({len(shards)} shards)", tensors=count, by_dtype=by, notes=notes)


# --------------------------------------------------------------------------- shard sets

# ``model-00001-of-00004.safetensors`` (transformers' ``save_pretrained`` sharding,
# ``SAFE_WEIGHTS_NAME`` split by ``huggingface_hub.split_torch_state_dict_into_shards``:
# ``{name}-{i:05d}-of-{n:05d}.safetensors``) and llama.cpp's ``gguf-split``
# (``model-00001-of-00003.gguf``, ``examples/gguf-split``: ``%s-%05d-of-%05d.gguf``).
_SHARD_NAME = re.compile(r"^(?P<stem>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.(?P<ext>safetensors|gguf)$")


def check_shard_set(folder: Path, only: Path | None = None) -> None:
    """Refuse a partial download: files named ``…-0000i-of-0000N.{safetensors,gguf}`` in
    ``folder`` (or the set ``only`` belongs to) with some of the N missing. Summing the
    shards at hand would give "exact" bytes for a fraction of the model.

    Raises:
        WeightsError: naming how many of N are present and the first missing file.
    """
    try:
        names = [q.name for q in folder.iterdir()] if folder.is_dir() else []
    except OSError:
        return
    sets: dict[tuple[str, str, int], set[int]] = {}
    for nm in names:
        m = _SHARD_NAME.match(nm)
        if m:
            sets.setdefault((m["stem"], m["ext"], int(m["n"])), set()).add(int(m["i"]))
    want = _SHARD_NAME.match(only.name) if only is not None else None
    for (stem, ext, n), have in sorted(sets.items()):
        if want is not None and (stem, ext, n) != (want["stem"], want["ext"], int(want["n"])):
            continue
        missing = [i for i in range(1, n + 1) if i not in have]
        if missing and n > 0:
            first = f"{stem}-{missing[0]:05d}-of-{n:05d}.{ext}"
            raise WeightsError(
                f"{folder}: {len(have & set(range(1, n + 1)))} of {n} {ext} shards of {stem!r} are here "
                f"({first} is missing{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}): "
                "a partial download, whose bytes would be a fraction of the model's",
                hint="download every shard (huggingface-cli download MODEL), or pass --weights-bytes")


# --------------------------------------------------------------------------- estimate

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "bf16": 2, "fp16": 2, "fp32": 4, "float8_e4m3fn": 1}


def estimate_params(cfg: dict[str, Any]) -> int:
    """Parameter count of a decoder-only transformer from its config.json (an estimate).

    Counts: token embeddings (+ untied LM head), per layer the attention projections
    (GQA q/k/v/o with head_dim, or MLA q_a/q_b/kv_a/kv_b/o), q/k norms when
    ``qk_norm``-style models (Qwen3) are recognised by model_type, the MLP (gated:
    3·hidden·inter; MoE: experts × 3·hidden·moe_inter + shared experts + router; the
    first ``first_k_dense_replace`` layers and ``mlp_only_layers`` dense), two RMSNorms,
    and the final norm. Linear-attention / Mamba mixers are approximated by their
    in/out projections.

    Raises:
        ConfigError: a needed field (hidden_size, vocab_size, …) is missing.
    """
    from kvgate.model import ConfigError, spec_from_config, text_config
    from kvgate.model.encdec_weights import encdec_params, is_encoder_decoder

    if is_encoder_decoder(cfg):  # both stacks (kvgate.model.encdec_weights)
        return sum(encdec_params(cfg))
    cfg = text_config(cfg)

    def need(key: str) -> int:
        v = cfg.get(key)
        if not isinstance(v, int) or v <= 0:
            raise ConfigError(f"cannot estimate weights: config field {key!r} missing or not a positive integer")
        return v

    hidden, vocab = need("hidden_size"), need("vocab_size")
    spec = spec_from_config(cfg, name="estimate", source="config")
    heads = cfg.get("num_attention_heads") or 0
    tied = cfg.get("tie_word_embeddings")
    if tied is None:  # the config class default: Gemma ties, Llama/Qwen/Mistral classes do not
        tied = str(cfg.get("model_type", "")).startswith("gemma")
    params = vocab * hidden * (1 if tied else 2) + hidden
    n_exp = cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts") or 0
    moe_inter = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0
    inter = cfg.get("intermediate_size") or 0
    dense_first = cfg.get("first_k_dense_replace") or 0
    mlp_only = set(cfg.get("mlp_only_layers") or [])
    step = cfg.get("decoder_sparse_step") or 1
    shared = cfg.get("n_shared_experts") or 0
    shared_inter = cfg.get("shared_expert_intermediate_size") or (shared * moe_inter)
    qk_norm = cfg.get("model_type") in ("qwen3", "qwen3_moe", "qwen3_next", "gemma3", "gemma3_text", "olmo2")
    norms = 4 if str(cfg.get("model_type", "")).startswith(("gemma2", "gemma3")) else 2  # Gemma: pre+post norms
    for i, layer in enumerate(spec.layers):
        params += norms * hidden
        if layer.kind == "mla":
            rope = cfg["qk_rope_head_dim"]
            nope = cfg.get("qk_nope_head_dim") or 0
            vd = cfg.get("v_head_dim") or nope
            rank = cfg["kv_lora_rank"]
            ql = cfg.get("q_lora_rank")
            q = hidden * ql + ql + ql * heads * (nope + rope) if ql else hidden * heads * (nope + rope)
            params += q + hidden * (rank + rope) + rank + rank * heads * (nope + vd) + heads * vd * hidden
        elif layer.kind in ("full", "sliding"):
            hd, vd = layer.head_dim, layer.v_head_dim or layer.head_dim
            gate = 2 if cfg.get("model_type") == "qwen3_next" or cfg.get("attn_output_gate") else 1  # gated q_proj
            params += gate * hidden * heads * hd + hidden * layer.num_kv_heads * (hd + vd) + heads * vd * hidden
            if qk_norm:
                params += 2 * hd
        elif layer.kind == "linear":
            params += mixer_params(cfg, layer, hidden)
        if cfg.get("expert_layer_period"):  # Jamba: MoE iff i % period == offset
            moe = n_exp and i % cfg["expert_layer_period"] == (cfg.get("expert_layer_offset") or 0)
        else:
            moe = n_exp and i >= dense_first and i not in mlp_only and (i + 1) % step == 0
        if moe:
            params += n_exp * 3 * hidden * _at(moe_inter, i) + hidden * n_exp
            if shared_inter:
                params += 3 * hidden * shared_inter
                if cfg.get("shared_expert_intermediate_size"):  # Qwen-MoE shared-expert gate
                    params += hidden
        elif _at(inter, i):
            params += 3 * hidden * _at(inter, i)
    return params


def _at(v: Any, i: int) -> int:
    """Layer ``i``'s value of a field that is one int or a per-layer list (Gemma-3n's
    ``intermediate_size``: ``Gemma3nTextConfig`` keeps one width per layer)."""
    if isinstance(v, list):
        v = v[i] if i < len(v) else 0
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


# Fields :func:`estimate_params` reads: a note lists those a config class filled in.
_ESTIMATE_FIELDS = (
    "hidden_size", "vocab_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "tie_word_embeddings", "moe_intermediate_size", "n_routed_experts", "num_experts", "num_local_experts",
    "n_shared_experts", "shared_expert_intermediate_size", "first_k_dense_replace", "q_lora_rank", "kv_lora_rank",
    "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "num_hidden_layers",
)


def estimate_weight_bytes(cfg: dict[str, Any], dtype: str | None = None, *,
                          defaulted: dict[str, Any] | None = None, raw: dict[str, Any] | None = None) -> WeightBytes:
    """:func:`estimate_params` × bytes of ``dtype`` (default: the config's
    ``torch_dtype``/``dtype``, else bf16). Labelled ``exact=False``.

    A checkpoint with a ``quantization_config`` (in ``raw``, the file as published, or in
    ``cfg``) is priced tensor by tensor as its loader stores it instead
    (:mod:`kvgate.model.quant`: AWQ, GPTQ, FP8, compressed-tensors, MXFP4, NVFP4,
    bitsandbytes), with a note naming the scheme and the unquantized share.

    ``defaulted``: fields the file did not state that transformers' config class filled
    (``ModelSpec.defaulted``); those the estimate reads are listed in a note, with their
    values, so a number built on a class default says so.

    Raises:
        ConfigError: missing fields, or a quantization scheme kvgate has no layout for;
            WeightsError: a dtype kvgate has no size for.
    """
    from kvgate.model import text_config

    tc = text_config(cfg)
    name = str(dtype or tc.get("torch_dtype") or tc.get("dtype") or cfg.get("torch_dtype") or "bfloat16").lower()
    if name not in _DTYPE_BYTES:
        raise WeightsError(f"no byte size known for dtype {name!r}", hint=f"one of: {', '.join(_DTYPE_BYTES)}")
    used = {k: v for k, v in (defaulted or {}).items() if k in _ESTIMATE_FIELDS}
    defaults_note = ("not in the file, filled from transformers' config class defaults: "
                     + ", ".join(f"{k} {v}" for k, v in used.items())) if used else None
    src = raw if raw is not None else cfg
    if src.get("quantization_config") or src.get("compression_config") or tc.get("quantization_config"):
        from kvgate.model.quant import priced

        q = priced(cfg, _DTYPE_BYTES[name], raw=src)
        if q.scheme.method != "none":
            notes = [f"estimate from config.json and its quantization_config ({q.scheme.label}): each tensor priced "
                     f"as the checkpoint stores it; {q.quantized:,} B quantized, {q.unquantized:,} B kept in "
                     f"{name} (embeddings, norms, routers, lm_head, modules_to_not_convert/ignore); vision towers "
                     "and extra heads not counted"]
            if defaults_note:
                notes.append(defaults_note)
            return WeightBytes(bytes=q.total, exact=False, source="config", params=q.params, notes=notes)
    from kvgate.model.encdec_weights import encdec_params, is_encoder_decoder

    if is_encoder_decoder(src):  # the file as published: both stacks' fields (the loaded config is the decoder's)
        enc, dec = encdec_params(src)
        params = enc + dec
        notes = [f"estimate from config.json: an encoder-decoder model counted whole, the encoder's {enc:,} and the "
                 f"decoder's {dec:,} parameters (biases included) × dtype bytes"]
    else:
        params = estimate_params(cfg)
        notes = ["estimate from config.json: parameters × dtype bytes; biases, quantization scales and extra heads "
                 "not counted"]
    if defaults_note:
        notes.append(defaults_note)
    return WeightBytes(bytes=params * _DTYPE_BYTES[name], exact=False, source="config", params=params, notes=notes)


# --------------------------------------------------------------------------- dispatch

def weight_bytes(ref: str | Path) -> WeightBytes:
    """Weight bytes for a file, directory, config or preset.

    ``.safetensors`` file → exact; ``*.safetensors.index.json`` → exact over shards;
    ``.gguf`` → exact from tensor infos; a directory → its index / single safetensors /
    single GGUF, else an estimate from its config.json; a config.json or preset name →
    estimate. PyTorch ``.bin``/``.pt``/``.pth`` checkpoints (pickle) are refused.

    Raises:
        WeightsError / ConfigError / GGUFError: unreadable inputs.
    """
    p = Path(ref)
    if p.is_dir():
        check_shard_set(p)
        for cand in ("model.safetensors.index.json", "model.safetensors"):
            if (p / cand).exists():
                return weight_bytes(p / cand)
        st = sorted(p.glob("*.safetensors"))
        if len(st) == 1:
            return weight_bytes(st[0])
        if len(st) > 1:
            raise WeightsError(f"{p} holds {len(st)} .safetensors files but no model.safetensors.index.json")
        gg = sorted(p.glob("*.gguf"))
        if len(gg) == 1:
            return weight_bytes(gg[0])
        pk = sorted(q for suf in PICKLE_SUFFIXES for q in p.glob(f"*{suf}"))
        if pk and not (p / "config.json").exists():
            raise WeightsError(
                f"{p} holds only PyTorch checkpoints ({pk[0].name}{', …' if len(pk) > 1 else ''}), "
                "which kvgate does not read (pickle), and no config.json",
                hint="give a .safetensors file, a model.safetensors.index.json, a .gguf file, "
                "or the model's config.json (for an estimate)",
            )
    name = p.name.lower()
    if name.endswith(PICKLE_SUFFIXES):
        raise WeightsError(
            f"{p}: PyTorch {p.suffix} checkpoints (pickle) are not read by kvgate",
            hint="give a .safetensors file, a model.safetensors.index.json, a .gguf file, "
            "or the model's config.json (for an estimate)",
        )
    if name.endswith((".safetensors", ".safetensors.index.json", ".gguf")) and not p.exists():
        raise WeightsError(f"weight file not found: {p}")
    if name.endswith(".safetensors"):
        check_shard_set(p.parent, only=p)
        return safetensors_file_bytes(p)
    if name.endswith(".safetensors.index.json"):
        return safetensors_index_bytes(p)
    if name.endswith(".gguf"):
        from kvgate.model.gguf import gguf_weight_bytes, read_gguf

        check_shard_set(p.parent, only=p)
        reader = read_gguf(p)
        if not len(reader.tensors):
            raise WeightsError(f"{p} is a GGUF header without tensor infos: its weights are not available from it",
                               hint="give the loaded size with --weights-bytes (e.g. --weights-bytes 5.03GB), the full .gguf, "
                                    "or the model's safetensors / config.json for an estimate")
        return WeightBytes(bytes=gguf_weight_bytes(reader), exact=True, source=str(p), tensors=len(reader.tensors))
    named = _named_weights(str(ref)) if not p.exists() else None
    if named is not None:
        return named
    from kvgate.model import load_model

    spec = load_model(ref)
    return estimate_weight_bytes(spec.config, defaulted=spec.defaulted, raw=raw_config(ref))


def _named_weights(ref: str) -> WeightBytes | None:
    """Weights of a model given by name (:mod:`kvgate.model.names`): a Hub id's cached
    snapshot (its files, exact), a preset's published checkpoint bytes (exact, with the
    source the preset cites), the Hub's safetensors metadata when ``KVGATE_HUB=1``
    (exact); ``None`` to fall back to the estimate from the config."""
    from kvgate.model import preset_checkpoint
    from kvgate.model.names import cached_snapshot, hub_allowed, hub_weight_bytes, is_hub_id, match_preset

    hub = is_hub_id(ref)
    if hub:
        snap = cached_snapshot(ref)
        if snap is not None:
            has_weights = any(snap.glob("*.safetensors")) or (snap / "model.safetensors.index.json").exists() or \
                any(snap.glob("*.gguf"))
            if has_weights:
                wb = weight_bytes(snap)
                wb.notes.insert(0, f"{ref}: read from the local Hugging Face cache ({snap})")
                return wb
    key = match_preset(ref)
    if key is not None:
        ck = preset_checkpoint(key)
        if ck is not None:
            notes = [f"the published checkpoint's size: {ck.get('source', '')}"]
            if key != ref.strip().lower():
                notes.insert(0, f"{ref!r} read as the preset {key}")
            return WeightBytes(bytes=ck["weight_bytes"], exact=True,
                               source=f"preset {key}: the published {ck.get('hub_id', key)} checkpoint", notes=notes)
        return None
    if hub and hub_allowed():
        total, count, by = hub_weight_bytes(ref)
        return WeightBytes(bytes=total, exact=True, source=f"Hugging Face Hub safetensors metadata: {ref}",
                           tensors=count, by_dtype=by,
                           notes=[f"{ref}: tensor headers read from the Hugging Face Hub (KVGATE_HUB=1); no weights "
                                  "downloaded"])
    return None

def raw_config(ref: str | Path) -> dict[str, Any] | None:
    """The config.json of ``ref`` as published (a model folder's, a .json file, a preset),
    or ``None`` (a GGUF, or nothing readable): the wrapper level that holds
    ``quantization_config`` for multimodal checkpoints."""
    from kvgate.model import preset_config, read_config
    from kvgate.model.names import cached_snapshot, hub_allowed, hub_config, is_hub_id, match_preset

    p = Path(ref)
    try:
        if p.is_dir() and (p / "config.json").exists():
            return read_config(p / "config.json")
        if p.suffix.lower() == ".json" and p.exists():
            cfg = read_config(p)
            return cfg if isinstance(cfg, dict) else None
        if not p.exists():
            snap = cached_snapshot(str(ref)) if is_hub_id(str(ref)) else None
            if snap is not None:
                return read_config(snap / "config.json")
            key = match_preset(str(ref))
            if key is not None:
                return preset_config(key)[1]
            if is_hub_id(str(ref)) and hub_allowed():
                return hub_config(str(ref))
    except KvgateError:
        return None
    return None
