"""Read a GGUF file's metadata (never its tensor data) into a :class:`ModelSpec`.

Uses the ``gguf`` package's ``GGUFReader`` (it memory-maps the file; kvgate only reads
the key/value header and the tensor-info table). Keys are architecture-prefixed
(``{arch}.block_count``, ``{arch}.attention.head_count_kv`` …, as in gguf-py's
``constants.Keys``); layer kinds follow llama.cpp's own rules (``src/llama-model.cpp``
``load_hparams``, ``src/llama-hparams.cpp``):

- ``head_count_kv``: a scalar, or one value per layer (0 = a recurrent layer: Jamba,
  Granite-4; Nemotron-H: 0 with ``feed_forward_length`` 0, else an MLP layer with
  neither KV nor state, ``src/models/nemotron-h.cpp``).
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
  (Qwen3-Next: layer il is attention iff (il + 1) % interval == 0), or, where the
  converter wrote it, ``attention.recurrent_layers`` (one bool per layer, true =
  recurrent; llama.cpp reads it first: ``src/models/qwen3next.cpp``).
- ``llama4``: chunked attention, n_swa hard-coded to 8,192 on 3 of every 4 layers
  (``src/models/llama4.cpp``), unless the file has ``attention.sliding_window`` = 0.
- ``shortconv.l_cache`` (LFM2): the layers with ``head_count_kv`` 0 are short-conv
  layers holding ``embedding_length × (l_cache − 1)`` values of state (``n_embd_r``).
- ``attention.shared_kv_layers``: the last K layers reuse KV (Gemma-3n): 0 bytes.
- MLA (``deepseek2`` and kin): llama.cpp caches the latent (K only, ``key_length ×
  head_count_kv`` = kv_lora_rank + rope, no V) only when the file has both
  ``attention.key_length_mla`` and ``attention.value_length_mla``
  (``llama_hparams::is_mla``, read by ``load_arch_hparams`` in ``src/models/deepseek2.cpp``).
  A GGUF converted before those keys existed gets a full per-head cache: K
  ``head_count_kv × key_length`` (16 × 192 for DeepSeek-V2-Lite) and V
  ``head_count_kv × value_length`` (16 × 128).
- A layer whose ``head_count_kv`` entry is 0 and that is not recurrent has zero-width K
  and V tensors (0 bytes; ``llama_kv_cache`` still counts it as a layer).
- ``nextn_predict_layers`` N: the last N of ``block_count`` layers are
  multi-token-prediction heads; the main context's cache filters them out
  (``il < n_layer()`` in ``llama_model::create_memory``), so they hold 0 bytes there.

Rules read at llama.cpp commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f (2026-10-01).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvgate.errors import KvgateError
from kvgate.model import FILE_LOADERS, MAX_LAYERS, ConfigError, LayerSpec, ModelSpec

# llama.cpp's hard-coded SWA patterns (llama-model.cpp: hparams.set_swa_pattern(N)).
ARCH_SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2, "cohere2": 4, "gemma3n": 5, "llama4": 4}
LLAMA4_CHUNK = 8192  # src/models/llama4.cpp: hparams.n_swa = 8192 (chunked), whatever the file says

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


_MISSING = object()


def _describe(v: Any) -> str:
    return f"{v!r} ({type(v).__name__})"


def _check_int(key: str, v: Any, lo: int, hi: int | None, where: str = "") -> int:
    """``v`` as an int in ``[lo, hi]``; bools, strings and floats are refused."""
    if not isinstance(v, int) or isinstance(v, bool):
        raise ConfigError(f"GGUF key {key!r}{where} must be an integer, got {_describe(v)}")
    if v < lo or (hi is not None and v > hi):
        rng = f"in [{lo:,}, {hi:,}]" if hi is not None else f"≥ {lo:,}"
        raise ConfigError(f"GGUF key {key!r}{where} must be an integer {rng}, got {v:,}")
    return v


def _int(meta: dict[str, Any], key: str, default: Any = _MISSING, *, lo: int = 0, hi: int | None = None) -> Any:
    """The integer at ``key`` checked against ``[lo, hi]``; ``default`` when absent
    (a missing key with no default is an error naming it)."""
    v = meta.get(key)
    if v is None:
        if default is _MISSING:
            raise ConfigError(f"GGUF metadata is missing {key!r}")
        return default
    return _check_int(key, v, lo, hi)


def _per_layer(meta: dict[str, Any], key: str, n: int, default: Any, *, lo: int = 0) -> list[int]:
    """A scalar or one-value-per-layer integer key as a list of ``n`` ints."""
    v = meta.get(key)
    if v is None:
        return list(default) if isinstance(default, list) else [default] * n
    if isinstance(v, list):
        if len(v) != n:
            raise ConfigError(f"GGUF {key!r} has {len(v)} entries for {n} layers")
        return [_check_int(key, x, lo, None, f" entry {i}") for i, x in enumerate(v)]
    return [_check_int(key, v, lo, None)] * n


def _found(meta: dict[str, Any], arch: str) -> str:
    keys = [k for k in meta if k.startswith(arch + ".") and any(s in k for s in ("attention", "ssm", "interval", "block_count"))]
    return ", ".join(f"{k}={meta[k] if not isinstance(meta[k], list) else f'[{len(meta[k])} entries]'}" for k in sorted(keys)) or "none"


def spec_from_gguf_metadata(meta: dict[str, Any], *, name: str, source: str) -> ModelSpec:
    """Build a :class:`ModelSpec` from GGUF metadata (see module docstring for the rules).

    Every numeric key kvgate uses is checked to be an integer (not bool/str/float) in
    range; ``block_count`` must be in ``[1, MAX_LAYERS]`` (the config.json cap).

    Raises:
        ConfigError: a needed key is missing or has the wrong type or range (the message
            names the key), or the layer pattern cannot be read (the message lists the
            architecture's attention/ssm keys that were found).
    """
    arch = meta.get("general.architecture")
    if arch is None:
        raise ConfigError("GGUF metadata is missing 'general.architecture'")
    if not isinstance(arch, str) or not arch:
        raise ConfigError(f"GGUF key 'general.architecture' must be a non-empty string, got {_describe(arch)}")
    k = lambda s: f"{arch}.{s}"  # noqa: E731
    n = _int(meta, k("block_count"), lo=1)
    if n > MAX_LAYERS:
        raise ConfigError(
            f"GGUF {k('block_count')!r} {n:,} is not a plausible layer count (more than {MAX_LAYERS:,})"
        )
    n_embd = _int(meta, k("embedding_length"), lo=1)
    heads = _per_layer(meta, k("attention.head_count"), n, 0)
    kv = _per_layer(meta, k("attention.head_count_kv"), n, heads)
    key_length = _int(meta, k("attention.key_length"), None, lo=1)
    value_length = _int(meta, k("attention.value_length"), None, lo=1)
    key_length_swa = _int(meta, k("attention.key_length_swa"), None, lo=1)
    value_length_swa = _int(meta, k("attention.value_length_swa"), None, lo=1)
    notes: list[str] = []

    # recurrent layers
    ssm_state = _int(meta, k("ssm.state_size"), None, lo=1)
    interval = _int(meta, k("full_attention_interval"), None, lo=1)
    recurrent = [False] * n
    rkey = k("attention.recurrent_layers")
    if ssm_state is not None:
        if meta.get(rkey) is not None:
            flags = meta[rkey]
            if not isinstance(flags, list) or len(flags) != n:
                raise ConfigError(f"GGUF {rkey!r} must hold one bool per layer ({n}), got {_describe(flags)}")
            for i, x in enumerate(flags):
                if not (isinstance(x, bool) or (isinstance(x, int) and x in (0, 1))):
                    raise ConfigError(f"GGUF key {rkey!r} entry {i} must be a bool, got {_describe(x)}")
            recurrent = [bool(x) for x in flags]
        elif interval is not None:
            recurrent = [(i + 1) % interval != 0 for i in range(n)]
        elif arch in ("nemotron_h", "nemotron_h_moe"):
            # src/models/nemotron-h.cpp: recurrent iff head_count_kv and feed_forward_length
            # are both 0 (an MLP / MoE layer has neither KV nor state)
            ff = _per_layer(meta, k("feed_forward_length"), n, 0)
            recurrent = [kv[i] == 0 and ff[i] == 0 for i in range(n)]
        else:
            recurrent = [kv[i] == 0 for i in range(n)]
    l_cache = _int(meta, k("shortconv.l_cache"), None, lo=2)
    state: LayerSpec | None = None
    if l_cache is not None and ssm_state is None:
        # LFM2 (src/models/lfm2.cpp): short-conv layers are the ones with head_count_kv 0;
        # their state is n_embd_r = n_embd × (l_cache − 1) (llama_hparams::n_embd_r), no S
        recurrent = [kv[i] == 0 for i in range(n)]
        state = LayerSpec(kind="linear", state_values=n_embd * (l_cache - 1), state_heads=1, conv_dim=n_embd,
                          conv_kernel=l_cache, ssm_values=0, mixer="conv")
    elif any(recurrent):
        d_conv = _int(meta, k("ssm.conv_kernel"), lo=1)
        d_inner = _int(meta, k("ssm.inner_size"), lo=1)
        d_state = ssm_state
        groups = _int(meta, k("ssm.group_count"), 0)
        dt_rank = _int(meta, k("ssm.time_step_rank"), 0)
        conv_dim = d_inner + 2 * groups * d_state
        mixer = "gated_delta_net" if interval is not None or meta.get(rkey) is not None else ("mamba2" if groups else "mamba")
        heads_tp = dt_rank if groups else d_inner
        state = LayerSpec(
            kind="linear", state_values=conv_dim * (d_conv - 1) + d_state * d_inner, state_heads=max(1, heads_tp),
            conv_dim=conv_dim, conv_kernel=d_conv, ssm_values=d_state * d_inner, mixer=mixer,
        )

    # sliding layers
    window = _int(meta, k("attention.sliding_window"), 0)
    chunked = False
    if arch == "llama4" and meta.get(k("attention.sliding_window")) != 0:
        # src/models/llama4.cpp: unless the file says sliding_window = 0 (all full, MobileLLM),
        # chunked attention with n_swa hard-coded to 8192, pattern 4 (3 chunked, 1 full)
        window, chunked = LLAMA4_CHUNK, True
        notes.append(f"llama4: chunked attention of {LLAMA4_CHUNK:,} tokens on 3 of every 4 layers "
                     "(llama.cpp's built-in rule)")
    sliding = [False] * n
    if window:
        pkey = k("attention.sliding_window_pattern")
        pattern = meta.get(pkey)
        if pattern is None:
            pattern = ARCH_SWA_PATTERN.get(arch)
        if pattern is None:
            raise ConfigError(
                f"GGUF ({arch}) has attention.sliding_window {window} but no sliding_window_pattern, "
                "and llama.cpp has no built-in pattern for this architecture",
                hint=f"keys found: {_found(meta, arch)}",
            )
        if isinstance(pattern, list):
            if len(pattern) != n:
                raise ConfigError(f"GGUF {pkey!r} has {len(pattern)} entries for {n} layers")
            for i, x in enumerate(pattern):
                if not (isinstance(x, bool) or (isinstance(x, int) and x in (0, 1))):
                    raise ConfigError(f"GGUF key {pkey!r} entry {i} must be a bool, got {_describe(x)}")
            sliding = [bool(x) for x in pattern]
        else:
            p = _check_int(pkey, pattern, 0, None)
            sliding = [p == 0 or (i % p) < (p - 1) for i in range(n)]

    rank = _int(meta, k("attention.kv_lora_rank"), 0)
    k_mla = _int(meta, k("attention.key_length_mla"), None, lo=1)
    v_mla = _int(meta, k("attention.value_length_mla"), None, lo=1)
    is_mla = bool(rank) and k_mla is not None and v_mla is not None
    if rank and not is_mla:
        notes.append(f"{arch}: no attention.key_length_mla / value_length_mla (converted before llama.cpp "
                     "stored them): llama.cpp caches full per-head K and V, not the MLA latent")
    rope = _int(meta, k("rope.dimension_count"), lo=0) if is_mla and key_length is None else 0
    nextn = _int(meta, k("nextn_predict_layers"), 0, lo=0, hi=n)
    h0 = max(heads)
    if key_length is not None:
        hd_k = key_length
    elif h0 and n_embd % h0 == 0:
        hd_k = n_embd // h0
    else:
        hd_k = None  # only an error if an attention layer needs it (below)
    layers: list[LayerSpec] = []
    no_kv: list[int] = []
    for i in range(n):
        if i >= n - nextn:
            layers.append(LayerSpec(kind="shared"))  # MTP head: filtered out of the main cache
        elif recurrent[i]:
            layers.append(state)  # type: ignore[arg-type]
        elif is_mla:
            width = key_length * kv[i] if key_length is not None else rank + rope
            layers.append(LayerSpec(kind="mla", latent_dim=width))
        elif kv[i] == 0:
            layers.append(LayerSpec(kind="shared"))  # zero-width K and V: 0 bytes
            no_kv.append(i)
        else:
            if heads[i] == 0:
                raise ConfigError(
                    f"GGUF {k('attention.head_count')!r} is missing or 0, but layer {i} is an attention layer "
                    f"(head_count_kv {kv[i]})",
                    hint=f"keys found: {_found(meta, arch)}",
                )
            if hd_k is None:
                raise ConfigError(
                    f"GGUF {k('embedding_length')!r} {n_embd:,} is not divisible by {k('attention.head_count')!r} "
                    f"{h0:,}, and there is no {k('attention.key_length')!r} to give the head dim",
                    hint=f"keys found: {_found(meta, arch)}",
                )
            kind = "sliding" if sliding[i] else "full"
            hk, hv = hd_k, value_length or hd_k
            if sliding[i] and key_length_swa:
                hk = key_length_swa
                hv = value_length_swa or hk
            layers.append(LayerSpec(kind=kind, num_kv_heads=kv[i], head_dim=hk, v_head_dim=hv,
                                    window=window if sliding[i] else None, chunked=chunked and sliding[i]))
    if no_kv:
        notes.append(f"{len(no_kv)} layer(s) with head_count_kv 0 and no recurrent state (first: {no_kv[0]}): "
                     "0 bytes each")
    if nextn:
        notes.append(f"the last {nextn} layer(s) are multi-token-prediction (nextn) heads: llama.cpp keeps them "
                     "out of the main context's cache")
    shared = _int(meta, k("attention.shared_kv_layers"), 0, lo=0, hi=n - 1)
    if shared:
        layers = layers[: n - shared] + [LayerSpec(kind="shared") for _ in range(shared)]
        notes.append(f"the last {shared} layers share earlier layers' KV: 0 bytes each")
    ctx = _int(meta, k("context_length"), None, lo=1)
    return ModelSpec(
        name=name,
        source=source,
        layers=layers,
        max_position_embeddings=ctx,
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
