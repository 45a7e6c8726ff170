"""Read a GGUF file's metadata (never its tensor data) into a :class:`ModelSpec`.

Uses the ``gguf`` package's ``GGUFReader`` (it memory-maps the file; kvgate only reads
the key/value header and the tensor-info table). Keys are architecture-prefixed
(``{arch}.block_count``, ``{arch}.attention.head_count_kv`` …, as in gguf-py's
``constants.Keys``); layer kinds follow llama.cpp's own rules (``src/llama-model.cpp``
``load_hparams``, ``src/llama-hparams.cpp``):

- ``head_count_kv``: a scalar, or one value per layer (0 = a recurrent layer: Jamba,
  Granite-4, Nemotron-H).
- ``key_length`` / ``value_length``: head dims (default ``embedding_length / head_count``);
  ``key_length_swa`` / ``value_length_swa`` for sliding layers when they differ (Gemma-4).
- ``attention.kv_lora_rank`` + ``rope.dimension_count``: MLA latent (DeepSeek-V2/V3,
  Kimi-K2); K row only, no V.
- ``attention.sliding_window`` with ``attention.sliding_window_pattern`` (an int N:
  layer il slides iff ``il % N < N − 1``, llama.cpp ``set_swa_pattern``; or one bool
  per layer, true = sliding), else the pattern llama.cpp hard-codes for the
  architecture (:data:`ARCH_SWA_PATTERN`).
- ``ssm.conv_kernel``, ``ssm.inner_size``, ``ssm.state_size``, ``ssm.group_count``,
  ``ssm.time_step_rank``: recurrent state (``n_embd_r`` = (d_conv − 1)·(d_inner +
  2·n_group·d_state), ``n_embd_s`` = d_state·d_inner); ``full_attention_interval``
  (Qwen3-Next: layer il is attention iff (il + 1) % interval == 0).
- ``attention.shared_kv_layers``: the last K layers reuse KV (Gemma-3n): 0 bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvgate.errors import KvgateError
from kvgate.model import FILE_LOADERS, ConfigError, LayerSpec, ModelSpec

# llama.cpp's hard-coded SWA patterns (llama-model.cpp: hparams.set_swa_pattern(N)).
ARCH_SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2, "cohere2": 4, "gemma3n": 5}

GGUF_MAGIC = b"GGUF"


class GGUFError(KvgateError):
    """A file that is not a readable GGUF (bad magic, truncated, unsupported version)."""


def read_gguf(path: str | Path) -> Any:
    """Open ``path`` with ``gguf.GGUFReader`` (metadata and tensor infos only).

    Raises:
        GGUFError: not a GGUF file, truncated, or the ``gguf`` package is missing.
    """
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise GGUFError(f"cannot read {p}: {exc.strerror}") from exc
    if head != GGUF_MAGIC:
        raise GGUFError(f"{p} is not a GGUF file (magic {head!r}, expected b'GGUF')")
    try:
        import gguf  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - dependency
        raise GGUFError("reading GGUF needs the 'gguf' package", hint="pip install gguf") from exc
    try:
        return gguf.GGUFReader(str(p), "r")
    except (ValueError, IndexError, KeyError, OverflowError, TypeError) as exc:
        raise GGUFError(
            f"{p} is a truncated or corrupt GGUF file ({type(exc).__name__}: {exc})",
            hint="re-download or re-convert the file",
        ) from exc


def gguf_metadata(reader: Any) -> dict[str, Any]:
    """All key/value metadata as Python values (arrays as lists; tokenizer arrays skipped)."""
    out: dict[str, Any] = {}
    for name, field in reader.fields.items():
        if name.startswith("tokenizer.ggml.") or name.startswith("GGUF."):
            continue
        try:
            v = field.contents()
        except Exception:  # pragma: no cover - exotic field types
            continue
        if hasattr(v, "tolist"):
            v = v.tolist()
        out[name] = v
    return out


def gguf_weight_bytes(reader: Any) -> int:
    """Σ tensor bytes from the tensor-info table (``ggml_nbytes``: elements / block
    size × type size, gguf-py ``GGML_QUANT_SIZES``); tensor data is not read."""
    return int(sum(int(t.n_bytes) for t in reader.tensors))


def _uint(meta: dict[str, Any], key: str, default: Any = ConfigError) -> Any:
    v = meta.get(key)
    if v is None:
        if default is ConfigError:
            raise ConfigError(f"GGUF metadata is missing {key!r}")
        return default
    return v


def _per_layer(v: Any, n: int, key: str) -> list[int]:
    if isinstance(v, list):
        if len(v) != n:
            raise ConfigError(f"GGUF {key!r} has {len(v)} entries for {n} layers")
        return [int(x) for x in v]
    return [int(v)] * n


def _found(meta: dict[str, Any], arch: str) -> str:
    keys = [k for k in meta if k.startswith(arch + ".") and any(s in k for s in ("attention", "ssm", "interval", "block_count"))]
    return ", ".join(f"{k}={meta[k] if not isinstance(meta[k], list) else f'[{len(meta[k])} entries]'}" for k in sorted(keys)) or "none"


def spec_from_gguf_metadata(meta: dict[str, Any], *, name: str, source: str) -> ModelSpec:
    """Build a :class:`ModelSpec` from GGUF metadata (see module docstring for the rules).

    Raises:
        ConfigError: a needed key is missing, or the layer pattern cannot be read (the
            message lists the architecture's attention/ssm keys that were found).
    """
    arch = _uint(meta, "general.architecture")
    k = lambda s: f"{arch}.{s}"  # noqa: E731
    n = int(_uint(meta, k("block_count")))
    n_embd = int(_uint(meta, k("embedding_length")))
    heads = _per_layer(_uint(meta, k("attention.head_count"), 0), n, "head_count")
    kv = _per_layer(_uint(meta, k("attention.head_count_kv"), heads if any(heads) else 0), n, "head_count_kv")
    h0 = max(heads) if heads else 0
    hd_k = meta.get(k("attention.key_length")) or (n_embd // h0 if h0 else 0)
    hd_v = meta.get(k("attention.value_length")) or hd_k
    notes: list[str] = []

    # recurrent layers
    ssm_state = meta.get(k("ssm.state_size"))
    interval = meta.get(k("full_attention_interval"))
    recurrent = [False] * n
    if ssm_state is not None:
        if interval is not None:
            recurrent = [(i + 1) % int(interval) != 0 for i in range(n)]
        else:
            recurrent = [kv[i] == 0 for i in range(n)]
    state: LayerSpec | None = None
    if any(recurrent):
        d_conv = int(_uint(meta, k("ssm.conv_kernel")))
        d_inner = int(_uint(meta, k("ssm.inner_size")))
        d_state = int(ssm_state)
        groups = int(meta.get(k("ssm.group_count")) or 0)
        dt_rank = int(meta.get(k("ssm.time_step_rank")) or 0)
        conv_dim = d_inner + 2 * groups * d_state
        mixer = "gated_delta_net" if interval is not None else ("mamba2" if groups else "mamba")
        heads_tp = dt_rank if groups else d_inner
        state = LayerSpec(
            kind="linear", state_values=conv_dim * (d_conv - 1) + d_state * d_inner, state_heads=max(1, heads_tp),
            conv_dim=conv_dim, conv_kernel=d_conv, ssm_values=d_state * d_inner, mixer=mixer,
        )

    # sliding layers
    window = meta.get(k("attention.sliding_window"))
    sliding = [False] * n
    if window:
        pattern = meta.get(k("attention.sliding_window_pattern"))
        if pattern is None:
            pattern = ARCH_SWA_PATTERN.get(arch)
        if pattern is None:
            raise ConfigError(
                f"GGUF ({arch}) has attention.sliding_window {window} but no sliding_window_pattern, "
                "and llama.cpp has no built-in pattern for this architecture",
                hint=f"keys found: {_found(meta, arch)}",
            )
        if isinstance(pattern, list):
            sliding = [bool(x) for x in _per_layer(pattern, n, "sliding_window_pattern")]
        else:
            p = int(pattern)
            sliding = [p == 0 or (i % p) < (p - 1) for i in range(n)]

    rank = meta.get(k("attention.kv_lora_rank"))
    layers: list[LayerSpec] = []
    for i in range(n):
        if recurrent[i]:
            layers.append(state)  # type: ignore[arg-type]
        elif rank:
            rope = int(_uint(meta, k("rope.dimension_count")))
            layers.append(LayerSpec(kind="mla", latent_dim=int(rank) + rope))
        elif kv[i] == 0:
            raise ConfigError(
                f"GGUF layer {i} has head_count_kv 0 but no recurrent (ssm) keys",
                hint=f"keys found: {_found(meta, arch)}",
            )
        else:
            kind = "sliding" if sliding[i] else "full"
            hk, hv = hd_k, hd_v
            if sliding[i] and meta.get(k("attention.key_length_swa")):
                hk = meta[k("attention.key_length_swa")]
                hv = meta.get(k("attention.value_length_swa")) or hk
            layers.append(LayerSpec(kind=kind, num_kv_heads=kv[i], head_dim=int(hk), v_head_dim=int(hv),
                                    window=int(window) if sliding[i] else None))
    shared = int(meta.get(k("attention.shared_kv_layers")) or 0)
    if shared:
        if not 0 <= shared < n:
            raise ConfigError(f"GGUF attention.shared_kv_layers {shared} out of range for {n} layers")
        layers = layers[: n - shared] + [LayerSpec(kind="shared") for _ in range(shared)]
        notes.append(f"the last {shared} layers share earlier layers' KV: 0 bytes each")
    ctx = meta.get(k("context_length"))
    return ModelSpec(
        name=name,
        source=source,
        layers=layers,
        max_position_embeddings=int(ctx) if ctx else None,
        dtype=None,
        model_type=str(arch),
        config={"gguf_architecture": arch, **{kk: v for kk, v in meta.items() if kk.startswith(arch + ".")}},
        notes=notes,
    )


def load_gguf(path: Path) -> ModelSpec:
    """:class:`ModelSpec` of a GGUF file; ``spec.config['weight_bytes']`` holds the exact
    tensor bytes from the tensor-info table.

    Raises:
        GGUFError: not GGUF / truncated. ConfigError: metadata kvgate cannot use.
    """
    reader = read_gguf(path)
    meta = gguf_metadata(reader)
    spec = spec_from_gguf_metadata(meta, name=Path(path).stem, source=str(path))
    spec.config["weight_bytes"] = gguf_weight_bytes(reader)
    spec.config["weight_tensors"] = len(reader.tensors)
    return spec


FILE_LOADERS.setdefault(".gguf", load_gguf)
