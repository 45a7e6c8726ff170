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
- Sliding layers: ``attention.sliding_window`` and ``attention.sliding_window_pattern``
  as each architecture's own code reads them (:mod:`kvgate.engines.llamacpp.arch`: which
  architectures use them at all, default and forced windows and patterns, chunked
  Llama-4); an architecture llama.cpp does not have is read from the keys alone, with a
  note.
- DeepSeek sparse attention (``deepseek32``, ``glm-dsa``): indexer keys of
  ``attention.indexer.key_length`` beside the MLA latent, in the K cache's type.
- Architectures whose cache kvgate does not model
  (:data:`kvgate.engines.llamacpp.arch.NOT_MODELLED`, e.g. ``deepseek4``, ``rwkv7``) are
  refused, naming the cache.
- Embedding and diffusion architectures (:data:`kvgate.engines.llamacpp.arch.NO_MEMORY`:
  BERT family, ``gemma-embedding``, ``modern-bert``, ``dream``, ``llada`` …): llama.cpp
  creates no memory for them, so every layer holds 0 bytes.
- ``falcon-h1`` (:data:`kvgate.engines.llamacpp.arch.ATTENTION_AND_STATE`): every layer is an
  attention layer (``head_count_kv``, ``key_length``/``value_length``) that also keeps a
  Mamba-2 state from the ``ssm.*`` keys (``src/models/falcon-h1.cpp``, ``llama_memory_hybrid``).
- ``ssm.conv_kernel``, ``ssm.inner_size``, ``ssm.state_size``, ``ssm.group_count``,
  ``ssm.time_step_rank``: recurrent state (``n_embd_r`` = (d_conv − 1)·(d_inner +
  2·n_group·d_state), ``n_embd_s`` = d_state·d_inner); ``full_attention_interval``
  (Qwen3-Next: layer il is attention iff (il + 1) % interval == 0), or, where the
  converter wrote it, ``attention.recurrent_layers`` (one bool per layer, true =
  recurrent; llama.cpp reads it first: ``src/models/qwen3next.cpp``).
- ``shortconv.l_cache`` (LFM2): the layers with ``head_count_kv`` 0 are short-conv
  layers holding ``embedding_length × (l_cache − 1)`` values of state (``n_embd_r``).
- ``attention.shared_kv_layers``: the last K layers reuse KV: 0 bytes (Gemma-3n: all
  but the first 20, hard-coded in ``src/models/gemma3n.cpp``).
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

from dataclasses import replace
from pathlib import Path
from typing import Any

from kvgate.engines.llamacpp import arch as llamacpp_arch
from kvgate.errors import KvgateError
from kvgate.model.fields import recurrent_layer
from kvgate.model.spec import MAX_LAYERS, ConfigError, LayerSpec, ModelSpec

# llama.cpp's hard-coded SWA patterns (llama-model.cpp: hparams.set_swa_pattern(N)).

GGUF_MAGIC = b"GGUF"


class GGUFError(KvgateError):
    """A file that is not a readable GGUF (bad magic, truncated, unsupported version)."""


def read_gguf(path: str | Path) -> Any:
    """Open ``path`` with ``gguf.GGUFReader`` (metadata and tensor infos only).

    Raises:
        GGUFError: not a GGUF file, truncated, or the ``gguf`` package is missing.
    """
    p = Path(path)
    from kvgate.guarded import open_regular  # noqa: PLC0415

    try:
        with open_regular(p, what="GGUF file") as fh:
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
        except Exception as e:  # undecodable text (bad UTF-8) or an exotic type: never dropped silently
            descriptive = name.startswith("general.") and name != "general.architecture"  # name, author …
            if not descriptive:
                raise GGUFError(f"GGUF key {name!r} cannot be decoded ({type(e).__name__}: {e})"[:300]) from None
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
    if arch in llamacpp_arch.NOT_MODELLED:
        raise ConfigError(
            f"GGUF architecture {arch!r}: llama.cpp keeps its memory in {llamacpp_arch.NOT_MODELLED[arch]}, "
            "which kvgate does not size yet; it will not guess",
            hint="give the model's config.json (transformers' or vLLM's layout), or --slot-bytes from a measured run",
        )
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

    for key in llamacpp_arch.REQUIRED_KEYS.get(arch, ()):
        if meta.get(k(key)) is None:
            raise ConfigError(f"GGUF ({arch}) is missing {k(key)!r}, which llama.cpp requires for its recurrent state",
                              hint=f"keys found: {_found(meta, arch)}")
    # recurrent layers
    ssm_state = _int(meta, k("ssm.state_size"), None, lo=1)
    interval = _int(meta, k("full_attention_interval"), None, lo=1)
    if interval is None and arch in llamacpp_arch.DEFAULT_FULL_ATTENTION_INTERVAL:
        interval = llamacpp_arch.DEFAULT_FULL_ATTENTION_INTERVAL[arch]  # e.g. src/models/qwen35.cpp
    recurrent = [False] * n
    rkey = k("attention.recurrent_layers")
    if ssm_state is not None:
        if meta.get(rkey) is not None:
            flags = meta[rkey]
            if isinstance(flags, (bool, int)) and not isinstance(flags, list):
                flags = [flags] * n  # get_key_or_arr: a scalar applies to every layer
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
    kda = _int(meta, k("kda.head_dim"), None, lo=1)
    state: LayerSpec | None = None
    if kda is not None:
        # Kimi-Linear KDA layers (head_count_kv 0; src/models/kimi-linear.cpp), llama_hparams:
        # n_embd_r = 3 × (d_conv − 1) × n_head × kda_head_dim (Q, K, V conv state),
        # n_embd_s = kda_head_dim² × n_head
        recurrent = [kv[i] == 0 for i in range(n)]
        d_conv = _int(meta, k("ssm.conv_kernel"), 0) or 4
        n_head = heads[0]
        if not n_head:
            raise ConfigError(f"GGUF ({arch}) has KDA layers (kda.head_dim {kda}) but {k('attention.head_count')!r} "
                              "of layer 0 is 0 or missing: llama.cpp sizes the KDA state by it",
                              hint=f"keys found: {_found(meta, arch)}")
        state = recurrent_layer("kda", 3 * n_head * kda, d_conv, kda * kda * n_head, max(1, n_head))
    elif l_cache is not None and ssm_state is None:
        # LFM2 (src/models/lfm2.cpp): short-conv layers are the ones with head_count_kv 0;
        # their state is n_embd_r = n_embd × (l_cache − 1) (llama_hparams::n_embd_r), no S
        recurrent = [kv[i] == 0 for i in range(n)]
        state = recurrent_layer("conv", n_embd, l_cache, 0, 1)
    elif any(recurrent) or arch in llamacpp_arch.ATTENTION_AND_STATE:
        d_conv = _int(meta, k("ssm.conv_kernel"), lo=1)
        d_inner = _int(meta, k("ssm.inner_size"), lo=1)
        d_state = ssm_state
        groups = _int(meta, k("ssm.group_count"), 0)
        dt_rank = _int(meta, k("ssm.time_step_rank"), 0)
        conv_dim = d_inner + 2 * groups * d_state
        mixer = "gated_delta_net" if interval is not None or meta.get(rkey) is not None else ("mamba2" if groups else "mamba")
        heads_tp = dt_rank if groups else d_inner
        state = recurrent_layer(mixer, conv_dim, d_conv, d_state * d_inner, max(1, heads_tp))

    # sliding layers (kvgate.engines.llamacpp.arch: llama.cpp's per-architecture rules)
    nextn = _int(meta, k("nextn_predict_layers"), 0, lo=0, hi=n - 1)
    window_key = k("attention.sliding_window")
    meta_window = _int(meta, window_key, None)
    pkey = k("attention.sliding_window_pattern")
    pattern = meta.get(pkey)
    if isinstance(pattern, list):
        for i, x in enumerate(pattern):
            if not (isinstance(x, bool) or (isinstance(x, int) and x in (0, 1))):
                raise ConfigError(f"GGUF key {pkey!r} entry {i} must be a bool, got {_describe(x)}")
        if len(pattern) != n:
            raise ConfigError(f"GGUF {pkey!r} has {len(pattern)} entries for {n} layers")
    elif pattern is not None:
        pattern = _check_int(pkey, pattern, 0, None)
    known = arch in llamacpp_arch.ARCH_NAMES
    if not known:
        notes.append(f"{arch!r} is not an architecture of llama.cpp at commit {llamacpp_arch.PINNED_COMMIT[:12]}: "
                     "sized from the file's keys with the generic rules")
    try:
        window, flags, chunked, swa_notes = llamacpp_arch.swa_flags(
            arch, meta_window, pattern, n - nextn, recurrent, None if known else llamacpp_arch.FROM_THE_FILE)
    except ValueError as e:
        raise ConfigError(f"GGUF ({arch}): {e}", hint=f"keys found: {_found(meta, arch)}") from None
    notes.extend(swa_notes)
    sliding = flags + [False] * nextn

    rank = _int(meta, k("attention.kv_lora_rank"), 0)
    k_mla = _int(meta, k("attention.key_length_mla"), None, lo=1)
    v_mla = _int(meta, k("attention.value_length_mla"), None, lo=1)
    is_mla = bool(rank) and k_mla is not None and v_mla is not None
    if rank and not is_mla:
        why = "its converter writes none" if arch == "minicpm3" else "converted before llama.cpp stored them"
        notes.append(f"{arch}: no attention.key_length_mla / value_length_mla ({why}): llama.cpp caches full "
                     "per-head K and V, not the MLA latent")
    rope = _int(meta, k("rope.dimension_count"), lo=0) if is_mla and key_length is None else 0
    index_dims = _indexer_dims(meta, arch, n, n - nextn) if is_mla else [0] * n
    h0 = max(heads)
    if key_length is not None:
        hd_k = key_length
    elif h0 and n_embd % h0 == 0:
        hd_k = n_embd // h0
    else:
        hd_k = None  # only an error if an attention layer needs it (below)
    # llama.cpp's V default is n_embd / n_head(), not the key length (src/llama-model.cpp
    # load_hparams: "hparams.n_embd_head_v = hparams.n_embd / hparams.n_head();" then the
    # optional value_length): MiniCPM3's converter writes key_length 96 and no value_length,
    # so its V is 2560 / 40 = 64
    hd_v = value_length or (n_embd // heads[0] if heads and heads[0] and n_embd % heads[0] == 0 else hd_k)
    layers: list[LayerSpec] = []
    no_kv: list[int] = []
    for i in range(n):
        if i >= n - nextn:
            layers.append(LayerSpec(kind="shared"))  # MTP head: filtered out of the main cache
        elif recurrent[i]:
            layers.append(state)  # type: ignore[arg-type]
        elif is_mla:
            width = key_length * kv[i] if key_length is not None else rank + rope
            layers.append(LayerSpec(kind="mla", latent_dim=width, index_dim=index_dims[i]))
        elif kv[i] == 0:
            if arch in ("nemotron_h", "nemotron_h_moe"):
                layers.append(LayerSpec(kind="shared"))  # an MLP layer: in no cache at all
            else:
                # zero-width K and V, still in llama.cpp's cache (kvgate.geometry.specs.NoCache.zero_width)
                layers.append(LayerSpec(kind="shared", head_dim=hd_k or 0, v_head_dim=hd_v or 0))
            no_kv.append(i)
        else:
            if heads[i] == 0:
                raise ConfigError(
                    f"GGUF {k('attention.head_count')!r} is missing or 0, but layer {i} is an attention layer "
                    f"(head_count_kv {kv[i]})",
                    hint=f"keys found: {_found(meta, arch)}",
                )
            if heads[i] % kv[i]:
                # llama.cpp: n_gqa = n_head / n_head_kv (src/llama-hparams.cpp); the attention graph
                # broadcasts each KV head over a whole group of query heads
                raise ConfigError(
                    f"GGUF {k('attention.head_count_kv')!r} {kv[i]} does not divide {k('attention.head_count')!r} "
                    f"{heads[i]} (layer {i}): each KV head serves a whole group of query heads",
                    hint=f"keys found: {_found(meta, arch)}",
                )
            if hd_k is None:
                raise ConfigError(
                    f"GGUF {k('embedding_length')!r} {n_embd:,} is not divisible by {k('attention.head_count')!r} "
                    f"{h0:,}, and there is no {k('attention.key_length')!r} to give the head dim",
                    hint=f"keys found: {_found(meta, arch)}",
                )
            kind = "sliding" if sliding[i] else "full"
            hk, hv = hd_k, hd_v or hd_k
            if sliding[i] and key_length_swa:
                hk = key_length_swa
                hv = value_length_swa or hk
            att = LayerSpec(kind=kind, num_kv_heads=kv[i], head_dim=hk, v_head_dim=hv,
                            window=window if sliding[i] else None, chunked=chunked and sliding[i])
            if state is not None and arch in llamacpp_arch.ATTENTION_AND_STATE:
                # the layer's own Mamba-2 state beside its K/V (as the config reader's Falcon-H1
                # "hybrid" layer: kvgate.model.layer_types)
                att = replace(att, conv_dim=state.conv_dim, conv_kernel=state.conv_kernel,
                              ssm_values=state.ssm_values, state_values=state.state_values,
                              state_heads=state.state_heads, mixer=state.mixer)
            layers.append(att)
    if no_kv and len(no_kv) == n - nextn:  # no layer attends or keeps a state: a 0-byte "cache" is no answer
        raise ConfigError(
            f"GGUF {k('attention.head_count_kv')!r} is 0 for every one of the {n - nextn} layers and no layer keeps a "
            "recurrent state: no layer has a KV cache, so this is not a model llama.cpp runs (its attention "
            "reshapes K and V to 0 heads)",
            hint=f"check the file's head_count_kv; keys found: {_found(meta, arch)}",
        )
    if no_kv:
        pad = "" if arch in ("nemotron_h", "nemotron_h_moe") else \
            " with flash attention on (llama.cpp with -fa off still gives each a V of the widest layer's width)"
        kind = "MLP layer(s) with neither KV nor state" if pad == "" else \
            "layer(s) with head_count_kv 0 and no recurrent state"
        notes.append(f"{len(no_kv)} {kind} (first: {no_kv[0]}): 0 bytes each{pad}")
    if nextn:
        notes.append(f"the last {nextn} layer(s) are multi-token-prediction (nextn) heads: llama.cpp keeps them "
                     "out of the main context's cache")
    shared = _int(meta, k("attention.shared_kv_layers"), 0, lo=0, hi=n - 1)
    if arch in llamacpp_arch.KV_FROM_START:
        shared = max(0, n - nextn - llamacpp_arch.KV_FROM_START[arch])  # hard-coded in llama.cpp
    shared = min(shared, n - nextn)
    if shared:
        # the shared layers are the last `shared` of the main layers; MTP layers stay as they are
        end = n - nextn
        layers = layers[: end - shared] + [LayerSpec(kind="shared") for _ in range(shared)] + layers[end:]
        notes.append(f"the last {shared} layers share earlier layers' KV: 0 bytes each")
    if arch in llamacpp_arch.NO_MEMORY:
        # llama_model::create_memory: res = nullptr (embedding / diffusion models)
        layers = [LayerSpec(kind="shared") for _ in range(n)]
        notes.append(f"llama.cpp keeps no KV cache for {arch} (llama_model::create_memory returns no memory): "
                     "0 bytes")
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


def _indexer_dims(meta: dict[str, Any], arch: str, n: int, n_main: int) -> list[int]:
    """Per layer, the DeepSeek sparse-attention indexer key width llama.cpp caches next to
    the MLA latent (``llama_kv_cache_dsa``: one key head of ``attention.indexer.key_length``
    per cell, in the K cache's type), 0 where there is none.

    ``deepseek32``: every main layer. ``glm-dsa``: the layers of ``attention.indexer.types``
    (1 = own indexer); without that key, every layer for GLM-5/5.1 (``context_length`` below
    1,048,576) or GLM-5.2's built-in table (``src/models/glm-dsa.cpp``).
    """
    if arch not in ("deepseek32", "glm-dsa"):
        return [0] * n
    key = f"{arch}.attention.indexer.key_length"
    dim = _int(meta, key, lo=1)
    full = [True] * n_main
    if arch == "glm-dsa":
        tkey = f"{arch}.attention.indexer.types"
        types = meta.get(tkey)
        if types is not None:
            types = types if isinstance(types, list) else [types] * n_main
            if len(types) < n_main:
                raise ConfigError(f"GGUF {tkey!r} has {len(types)} entries for {n_main} layers")
            full = [bool(_check_int(tkey, t, 0, 1)) for t in types[:n_main]]
        elif (_int(meta, f"{arch}.context_length", 0) or 0) >= 1_048_576:
            full = (llamacpp_arch.GLM_5_2_INDEXER_FULL + [False] * n_main)[:n_main]
    return [dim if f else 0 for f in full] + [0] * (n - n_main)


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
    tok = reader.fields.get("tokenizer.ggml.tokens")
    if tok is not None:
        spec.config["tokenizer_tokens"] = len(tok.data)
    if reader.tensors:
        spec.config["gguf_tensors"] = gguf_tensor_summary(reader)
    return spec


#: ggml types that are not block-quantized (``ggml_is_quantized`` is false for them)
_PLAIN_TYPES = frozenset({"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"})
#: ``ggml/src/ggml-cuda/common.cuh`` ``MATRIX_ROW_PADDING`` (llama.cpp 0c1e57098bba)
CUDA_MATRIX_ROW_PADDING = 512
#: ``ggml-cuda.cu`` ``ggml_backend_cuda_buffer_type_get_alignment``: 128 B
CUDA_ALIGNMENT = 128


def cuda_alloc_bytes(type_name: str, ne: list[int], nbytes: int) -> int:
    """Bytes a tensor takes in a CUDA model buffer at llama.cpp 0c1e57098bba: ``ggml-cuda.cu``
    ``ggml_backend_cuda_buffer_type_get_alloc_size`` pads a quantized tensor whose row
    ``ne[0]`` is not a multiple of ``MATRIX_ROW_PADDING`` (512) by ``ggml_row_size(type,
    512 - ne0 % 512)``, and ``ggml-alloc.c`` ``ggml_backend_alloc_ctx_tensors_from_buft_impl``
    rounds each tensor up to the buffer type's alignment (``GGML_PAD(size, 128)``)."""
    size = nbytes
    ne0 = int(ne[0]) if ne else 0
    if type_name not in _PLAIN_TYPES and ne0 % CUDA_MATRIX_ROW_PADDING:
        import gguf  # noqa: PLC0415

        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
        size += (CUDA_MATRIX_ROW_PADDING - ne0 % CUDA_MATRIX_ROW_PADDING) // block * type_size
    return -(-size // CUDA_ALIGNMENT) * CUDA_ALIGNMENT


def gguf_tensor_summary(reader: Any) -> dict[str, Any]:
    """The tensor-info table grouped as llama.cpp places it (``src/llama-model.cpp``
    ``load_tensors``): ``layer_bytes`` (``blk.N.*`` bytes per layer N), ``token_embd`` and
    ``output`` (``{"bytes", "shape", "cuda_bytes"}``, shape as ggml's ``ne``: ``[n_embd,
    n_vocab]``; no ``output`` when the head is tied to ``token_embd``), ``other_bytes``
    (output_norm …); ``layer_cuda_bytes`` / ``other_cuda_bytes`` the same in a CUDA buffer
    (:func:`cuda_alloc_bytes`: row padding and 128 B alignment). Bytes are ``ggml_nbytes``
    (:func:`gguf_weight_bytes`); no tensor data is read."""
    layers: dict[int, int] = {}
    cuda: dict[int, int] = {}
    out: dict[str, Any] = {"layer_bytes": layers, "other_bytes": 0, "layer_cuda_bytes": cuda, "other_cuda_bytes": 0}
    for t in reader.tensors:
        name, nb = str(t.name), int(t.n_bytes)
        shape = [int(x) for x in t.shape]
        try:
            cb = cuda_alloc_bytes(str(t.tensor_type.name), shape, nb)
        except (AttributeError, KeyError, ImportError):
            cb = -(-nb // CUDA_ALIGNMENT) * CUDA_ALIGNMENT
        if name.startswith("blk."):
            i = int(name.split(".")[1])
            layers[i] = layers.get(i, 0) + nb
            cuda[i] = cuda.get(i, 0) + cb
        elif name in ("token_embd.weight", "output.weight"):
            out[name.split(".")[0]] = {"bytes": nb, "shape": shape, "cuda_bytes": cb}
        else:
            out["other_bytes"] += nb
            out["other_cuda_bytes"] += cb
    return out


