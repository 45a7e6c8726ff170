"""llama.cpp's reading of a GGUF file's metadata into a :class:`ModelSpec`
(:func:`spec_from_gguf_metadata`; the file itself is read by :mod:`kvgate.model.gguf`).

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

from dataclasses import dataclass, replace
from typing import Any

from kvgate.engines.llamacpp import arch as llamacpp_arch
from kvgate.model.fields import recurrent_layer
from kvgate.model.spec import MAX_LAYERS, ConfigError, LayerSpec, ModelSpec

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


@dataclass(frozen=True)
class _Keys:
    """One architecture's keys of a GGUF's metadata (``{arch}.block_count`` …), read as
    checked integers; :meth:`found` lists the attention/ssm keys for an error's hint."""

    meta: dict[str, Any]
    arch: str

    def key(self, s: str) -> str:
        return f"{self.arch}.{s}"

    def get(self, s: str) -> Any:
        return self.meta.get(self.key(s))

    def integer(self, s: str, default: Any = _MISSING, *, lo: int = 0, hi: int | None = None) -> Any:
        return _int(self.meta, self.key(s), default, lo=lo, hi=hi)

    def per_layer(self, s: str, n: int, default: Any, *, lo: int = 0) -> list[int]:
        return _per_layer(self.meta, self.key(s), n, default, lo=lo)

    def found(self) -> str:
        return _found(self.meta, self.arch)


@dataclass
class _Shape:
    """The attention keys every layer reads: layer count, width, heads, head dims."""

    n: int
    n_embd: int
    heads: list[int]
    kv: list[int]
    key_length: int | None
    value_length: int | None
    key_length_swa: int | None
    value_length_swa: int | None


#: architectures whose layers with head_count_kv 0 and feed_forward_length 0 are the
#: recurrent ones, and whose other KV-less layers are MLP layers in no cache at all
#: (``src/models/nemotron-h.cpp``)
MLP_WITHOUT_KV = frozenset({"nemotron_h", "nemotron_h_moe"})


def _architecture(meta: dict[str, Any]) -> str:
    """``general.architecture``, refused when kvgate does not model its cache."""
    arch = meta.get("general.architecture")
    if arch is None:
        raise ConfigError("GGUF metadata is missing 'general.architecture'")
    if not isinstance(arch, str) or not arch:
        raise ConfigError(f"GGUF key 'general.architecture' must be a non-empty string, got {_describe(arch)}")
    if arch in llamacpp_arch.NOT_MODELLED:
        raise ConfigError(
            f"GGUF architecture {arch!r}: llama.cpp keeps its memory in {llamacpp_arch.NOT_MODELLED[arch]}, "
            "which kvgate does not size yet; it will not guess",
            hint="give the model's config.json (transformers' or vLLM's layout), or --slot-bytes from a measured run",
        )
    return arch


def _shape(g: _Keys) -> _Shape:
    n = g.integer("block_count", lo=1)
    if n > MAX_LAYERS:
        raise ConfigError(
            f"GGUF {g.key('block_count')!r} {n:,} is not a plausible layer count (more than {MAX_LAYERS:,})"
        )
    heads = g.per_layer("attention.head_count", n, 0)
    return _Shape(n=n, n_embd=g.integer("embedding_length", lo=1), heads=heads,
                  kv=g.per_layer("attention.head_count_kv", n, heads),
                  key_length=g.integer("attention.key_length", None, lo=1),
                  value_length=g.integer("attention.value_length", None, lo=1),
                  key_length_swa=g.integer("attention.key_length_swa", None, lo=1),
                  value_length_swa=g.integer("attention.value_length_swa", None, lo=1))


def _bools(key: str, flags: list[Any]) -> list[bool]:
    """A per-layer bool key (``attention.recurrent_layers``, a sliding-window pattern):
    each entry a bool or 0/1."""
    for i, x in enumerate(flags):
        if not (isinstance(x, bool) or (isinstance(x, int) and x in (0, 1))):
            raise ConfigError(f"GGUF key {key!r} entry {i} must be a bool, got {_describe(x)}")
    return [bool(x) for x in flags]


def _recurrent_flags(g: _Keys, sh: _Shape, interval: int | None) -> list[bool]:
    """Which layers are recurrent, for a file with ``ssm.state_size``: its
    ``attention.recurrent_layers`` (read first, ``src/models/qwen3next.cpp``), else the
    full-attention interval, else the layers without KV heads."""
    n, kv = sh.n, sh.kv
    rkey = g.key("attention.recurrent_layers")
    if g.meta.get(rkey) is not None:
        flags = g.meta[rkey]
        if isinstance(flags, (bool, int)) and not isinstance(flags, list):
            flags = [flags] * n  # get_key_or_arr: a scalar applies to every layer
        if not isinstance(flags, list) or len(flags) != n:
            raise ConfigError(f"GGUF {rkey!r} must hold one bool per layer ({n}), got {_describe(flags)}")
        return _bools(rkey, flags)
    if interval is not None:
        return [(i + 1) % interval != 0 for i in range(n)]
    if g.arch in MLP_WITHOUT_KV:
        # src/models/nemotron-h.cpp: recurrent iff head_count_kv and feed_forward_length
        # are both 0 (an MLP / MoE layer has neither KV nor state)
        ff = g.per_layer("feed_forward_length", n, 0)
        return [kv[i] == 0 and ff[i] == 0 for i in range(n)]
    return [kv[i] == 0 for i in range(n)]


def _state(g: _Keys, sh: _Shape) -> tuple[list[bool], LayerSpec | None]:
    """``(recurrent, state)``: which layers keep a recurrent state, and that state's layer
    (KDA, LFM2's short conv, or Mamba / Mamba-2 / gated delta net from the ``ssm.*`` keys)."""
    for key in llamacpp_arch.REQUIRED_KEYS.get(g.arch, ()):
        if g.get(key) is None:
            raise ConfigError(f"GGUF ({g.arch}) is missing {g.key(key)!r}, which llama.cpp requires for its "
                              "recurrent state", hint=f"keys found: {g.found()}")
    ssm_state = g.integer("ssm.state_size", None, lo=1)
    interval = g.integer("full_attention_interval", None, lo=1)
    if interval is None and g.arch in llamacpp_arch.DEFAULT_FULL_ATTENTION_INTERVAL:
        interval = llamacpp_arch.DEFAULT_FULL_ATTENTION_INTERVAL[g.arch]  # e.g. src/models/qwen35.cpp
    recurrent = _recurrent_flags(g, sh, interval) if ssm_state is not None else [False] * sh.n
    l_cache = g.integer("shortconv.l_cache", None, lo=2)
    kda = g.integer("kda.head_dim", None, lo=1)
    without_kv = [x == 0 for x in sh.kv]
    if kda is not None:
        # Kimi-Linear KDA layers (head_count_kv 0; src/models/kimi-linear.cpp), llama_hparams:
        # n_embd_r = 3 × (d_conv − 1) × n_head × kda_head_dim (Q, K, V conv state),
        # n_embd_s = kda_head_dim² × n_head
        d_conv = g.integer("ssm.conv_kernel", 0) or 4
        n_head = sh.heads[0]
        if not n_head:
            raise ConfigError(f"GGUF ({g.arch}) has KDA layers (kda.head_dim {kda}) but "
                              f"{g.key('attention.head_count')!r} of layer 0 is 0 or missing: llama.cpp sizes the KDA "
                              "state by it", hint=f"keys found: {g.found()}")
        return without_kv, recurrent_layer("kda", 3 * n_head * kda, d_conv, kda * kda * n_head, max(1, n_head))
    if l_cache is not None and ssm_state is None:
        # LFM2 (src/models/lfm2.cpp): short-conv layers are the ones with head_count_kv 0;
        # their state is n_embd_r = n_embd × (l_cache − 1) (llama_hparams::n_embd_r), no S
        return without_kv, recurrent_layer("conv", sh.n_embd, l_cache, 0, 1)
    if any(recurrent) or g.arch in llamacpp_arch.ATTENTION_AND_STATE:
        d_conv = g.integer("ssm.conv_kernel", lo=1)
        d_inner = g.integer("ssm.inner_size", lo=1)
        groups = g.integer("ssm.group_count", 0)
        dt_rank = g.integer("ssm.time_step_rank", 0)
        conv_dim = d_inner + 2 * groups * ssm_state
        gated = interval is not None or g.get("attention.recurrent_layers") is not None
        mixer = "gated_delta_net" if gated else ("mamba2" if groups else "mamba")
        heads_tp = dt_rank if groups else d_inner
        return recurrent, recurrent_layer(mixer, conv_dim, d_conv, ssm_state * d_inner, max(1, heads_tp))
    return recurrent, None


def _sliding(g: _Keys, n_main: int, recurrent: list[bool],
             notes: list[str]) -> tuple[int | None, list[bool], bool]:
    """``(window, sliding flags of the main layers, chunked)`` by llama.cpp's
    per-architecture rules (:func:`kvgate.engines.llamacpp.arch.swa_flags`)."""
    meta_window = g.integer("attention.sliding_window", None)
    pkey = g.key("attention.sliding_window_pattern")
    pattern = g.meta.get(pkey)
    if isinstance(pattern, list):
        _bools(pkey, pattern)
        if len(pattern) != len(recurrent):
            raise ConfigError(f"GGUF {pkey!r} has {len(pattern)} entries for {len(recurrent)} layers")
    elif pattern is not None:
        pattern = _check_int(pkey, pattern, 0, None)
    known = g.arch in llamacpp_arch.ARCH_NAMES
    if not known:
        notes.append(f"{g.arch!r} is not an architecture of llama.cpp at commit "
                     f"{llamacpp_arch.PINNED_COMMIT[:12]}: sized from the file's keys with the generic rules")
    try:
        window, flags, chunked, swa_notes = llamacpp_arch.swa_flags(
            g.arch, meta_window, pattern, n_main, recurrent, None if known else llamacpp_arch.FROM_THE_FILE)
    except ValueError as e:
        raise ConfigError(f"GGUF ({g.arch}): {e}", hint=f"keys found: {g.found()}") from None
    notes.extend(swa_notes)
    return window, flags, chunked


def _mla(g: _Keys, key_length: int | None, notes: list[str]) -> tuple[bool, int, int]:
    """``(is_mla, kv_lora_rank, rope dims)``: llama.cpp caches the MLA latent only when the
    file has both ``key_length_mla`` and ``value_length_mla`` (``llama_hparams::is_mla``)."""
    rank = g.integer("attention.kv_lora_rank", 0)
    k_mla = g.integer("attention.key_length_mla", None, lo=1)
    v_mla = g.integer("attention.value_length_mla", None, lo=1)
    is_mla = bool(rank) and k_mla is not None and v_mla is not None
    if rank and not is_mla:
        why = "its converter writes none" if g.arch == "minicpm3" else "converted before llama.cpp stored them"
        notes.append(f"{g.arch}: no attention.key_length_mla / value_length_mla ({why}): llama.cpp caches full "
                     "per-head K and V, not the MLA latent")
    rope = g.integer("rope.dimension_count", lo=0) if is_mla and key_length is None else 0
    return is_mla, rank, rope


def _head_dims(sh: _Shape) -> tuple[int | None, int | None]:
    """``(K, V)`` head dims: ``key_length``, else ``n_embd / n_head`` (``None``: only an
    error if an attention layer needs it). llama.cpp's V default is ``n_embd / n_head()``,
    not the key length (``src/llama-model.cpp`` ``load_hparams``: "hparams.n_embd_head_v =
    hparams.n_embd / hparams.n_head();" then the optional value_length): MiniCPM3's
    converter writes key_length 96 and no value_length, so its V is 2560 / 40 = 64."""
    h0 = max(sh.heads)
    if sh.key_length is not None:
        hd_k: int | None = sh.key_length
    elif h0 and sh.n_embd % h0 == 0:
        hd_k = sh.n_embd // h0
    else:
        hd_k = None
    h = sh.heads[0] if sh.heads else 0
    hd_v = sh.value_length or (sh.n_embd // h if h and sh.n_embd % h == 0 else hd_k)
    return hd_k, hd_v


def _attention_layer(g: _Keys, sh: _Shape, i: int, dims: tuple[int | None, int | None], sliding: bool,
                     window: int | None, chunked: bool, state: LayerSpec | None) -> LayerSpec:
    """Layer ``i``, an attention layer (with ``falcon-h1``'s Mamba-2 state beside its K/V)."""
    kv, heads = sh.kv[i], sh.heads[i]
    if heads == 0:
        raise ConfigError(
            f"GGUF {g.key('attention.head_count')!r} is missing or 0, but layer {i} is an attention layer "
            f"(head_count_kv {kv})", hint=f"keys found: {g.found()}")
    if heads % kv:
        # llama.cpp: n_gqa = n_head / n_head_kv (src/llama-hparams.cpp); the attention graph
        # broadcasts each KV head over a whole group of query heads
        raise ConfigError(
            f"GGUF {g.key('attention.head_count_kv')!r} {kv} does not divide {g.key('attention.head_count')!r} "
            f"{heads} (layer {i}): each KV head serves a whole group of query heads", hint=f"keys found: {g.found()}")
    hd_k, hd_v = dims
    if hd_k is None:
        raise ConfigError(
            f"GGUF {g.key('embedding_length')!r} {sh.n_embd:,} is not divisible by "
            f"{g.key('attention.head_count')!r} {max(sh.heads):,}, and there is no "
            f"{g.key('attention.key_length')!r} to give the head dim", hint=f"keys found: {g.found()}")
    hk, hv = hd_k, hd_v or hd_k
    if sliding and sh.key_length_swa:
        hk, hv = sh.key_length_swa, sh.value_length_swa or sh.key_length_swa
    att = LayerSpec(kind="sliding" if sliding else "full", num_kv_heads=kv, head_dim=hk, v_head_dim=hv,
                    window=window if sliding else None, chunked=chunked and sliding)
    if state is not None and g.arch in llamacpp_arch.ATTENTION_AND_STATE:
        # the layer's own Mamba-2 state beside its K/V (as the config reader's Falcon-H1
        # "hybrid" layer: kvgate.model.layer_types)
        att = replace(att, conv_dim=state.conv_dim, conv_kernel=state.conv_kernel, ssm_values=state.ssm_values,
                      state_values=state.state_values, state_heads=state.state_heads, mixer=state.mixer)
    return att


def _no_kv_notes(g: _Keys, no_kv: list[int], n_main: int, notes: list[str]) -> None:
    """Refuse a file where no layer has a cache; say which layers hold 0 bytes."""
    if no_kv and len(no_kv) == n_main:  # no layer attends or keeps a state: a 0-byte "cache" is no answer
        raise ConfigError(
            f"GGUF {g.key('attention.head_count_kv')!r} is 0 for every one of the {n_main} layers and no layer keeps "
            "a recurrent state: no layer has a KV cache, so this is not a model llama.cpp runs (its attention "
            "reshapes K and V to 0 heads)",
            hint=f"check the file's head_count_kv; keys found: {g.found()}",
        )
    if no_kv:
        mlp = g.arch in MLP_WITHOUT_KV
        pad = "" if mlp else \
            " with flash attention on (llama.cpp with -fa off still gives each a V of the widest layer's width)"
        kind = "MLP layer(s) with neither KV nor state" if mlp else "layer(s) with head_count_kv 0 and no recurrent state"
        notes.append(f"{len(no_kv)} {kind} (first: {no_kv[0]}): 0 bytes each{pad}")


def _shared_tail(g: _Keys, layers: list[LayerSpec], nextn: int, notes: list[str]) -> list[LayerSpec]:
    """The last ``attention.shared_kv_layers`` main layers reuse earlier layers' KV (Gemma-3n's
    count hard-coded in llama.cpp); embedding and diffusion models keep no cache at all."""
    n = len(layers)
    shared = g.integer("attention.shared_kv_layers", 0, lo=0, hi=n - 1)
    if g.arch in llamacpp_arch.KV_FROM_START:
        shared = max(0, n - nextn - llamacpp_arch.KV_FROM_START[g.arch])  # hard-coded in llama.cpp
    shared = min(shared, n - nextn)
    if shared:
        # the shared layers are the last `shared` of the main layers; MTP layers stay as they are
        end = n - nextn
        layers = layers[: end - shared] + [LayerSpec(kind="shared") for _ in range(shared)] + layers[end:]
        notes.append(f"the last {shared} layers share earlier layers' KV: 0 bytes each")
    if g.arch in llamacpp_arch.NO_MEMORY:
        # llama_model::create_memory: res = nullptr (embedding / diffusion models)
        layers = [LayerSpec(kind="shared") for _ in range(n)]
        notes.append(f"llama.cpp keeps no KV cache for {g.arch} (llama_model::create_memory returns no memory): "
                     "0 bytes")
    return layers


def spec_from_gguf_metadata(meta: dict[str, Any], *, name: str, source: str) -> ModelSpec:
    """Build a :class:`ModelSpec` from GGUF metadata (see module docstring for the rules).

    Every numeric key kvgate uses is checked to be an integer (not bool/str/float) in
    range; ``block_count`` must be in ``[1, MAX_LAYERS]`` (the config.json cap).

    Raises:
        ConfigError: a needed key is missing or has the wrong type or range (the message
            names the key), or the layer pattern cannot be read (the message lists the
            architecture's attention/ssm keys that were found).
    """
    arch = _architecture(meta)
    g = _Keys(meta, arch)
    sh = _shape(g)
    n = sh.n
    notes: list[str] = []
    recurrent, state = _state(g, sh)
    nextn = g.integer("nextn_predict_layers", 0, lo=0, hi=n - 1)
    window, flags, chunked = _sliding(g, n - nextn, recurrent, notes)
    sliding = flags + [False] * nextn
    is_mla, rank, rope = _mla(g, sh.key_length, notes)
    index_dims = _indexer_dims(meta, arch, n, n - nextn) if is_mla else [0] * n
    dims = _head_dims(sh)
    layers: list[LayerSpec] = []
    no_kv: list[int] = []
    for i in range(n):
        if i >= n - nextn:
            layers.append(LayerSpec(kind="shared"))  # MTP head: filtered out of the main cache
        elif recurrent[i]:
            layers.append(state)  # type: ignore[arg-type]
        elif is_mla:
            width = sh.key_length * sh.kv[i] if sh.key_length is not None else rank + rope
            layers.append(LayerSpec(kind="mla", latent_dim=width, index_dim=index_dims[i]))
        elif sh.kv[i] == 0:
            # an MLP layer: in no cache at all; else zero-width K and V, still in llama.cpp's
            # cache (kvgate.geometry.specs.NoCache.zero_width)
            layers.append(LayerSpec(kind="shared") if arch in MLP_WITHOUT_KV else
                          LayerSpec(kind="shared", head_dim=dims[0] or 0, v_head_dim=dims[1] or 0))
            no_kv.append(i)
        else:
            layers.append(_attention_layer(g, sh, i, dims, sliding[i], window, chunked, state))
    _no_kv_notes(g, no_kv, n - nextn, notes)
    if nextn:
        notes.append(f"the last {nextn} layer(s) are multi-token-prediction (nextn) heads: llama.cpp keeps them "
                     "out of the main context's cache")
    layers = _shared_tail(g, layers, nextn, notes)
    return ModelSpec(
        name=name,
        source=source,
        layers=layers,
        max_position_embeddings=g.integer("context_length", None, lo=1),
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


