"""Weight bytes as the checkpoint stores them, from config.json and its ``quantization_config``.

Without weight files, kvgate lists the model's tensors from its config (:func:`inventory`:
embeddings, attention or MLA projections, dense MLPs or experts, routers, norms, biases,
MTP layers) and prices each one under the checkpoint's quantization scheme
(:func:`scheme_from_config`). Every layout below is the one the loaders create, read at
transformers 5.25 (installed here) and vLLM ``vllm/model_executor/layers/quantization/``:

- **AWQ** (vLLM ``awq.py`` ``AWQLinearMethod.create_weights``; transformers
  ``integrations/awq.py``): ``qweight`` int32 ``[in, out/pack]``, ``qzeros`` int32
  ``[in/g, out/pack]``, ``scales`` in the model dtype ``[in/g, out]``, pack = 32/bits.
- **GPTQ** (vLLM ``gptq.py`` ``GPTQLinearMethod.create_weights``): ``qweight`` int32
  ``[in/pack, out]``, ``g_idx`` int32 ``[in]`` (stored whether or not ``desc_act``),
  ``qzeros`` int32 ``[groups, out/pack]``, ``scales`` ``[groups, out]``; groups = in/g, or
  1 for ``group_size`` −1. ``lm_head`` only when ``"lm_head": true``.
- **FP8** (transformers ``integrations/finegrained_fp8.py`` ``FP8Linear``): weight fp8
  ``[out, in]``; ``weight_block_size [bn, bk]`` → ``weight_scale_inv`` float32 (``ue8m0``:
  1 byte) ``[⌈out/bn⌉, ⌈in/bk⌉]``; no block size → one float32 scale; ``activation_scheme``
  static adds a float32 input scale.
- **compressed-tensors** (transformers ``integrations/compressed_tensors.py``, the
  ``compressed-tensors`` formats): ``pack-quantized`` int4/int8 packed in int32
  (``weight_packed [out, in·bits/32]``, ``weight_shape`` int64[2]), ``int-quantized`` /
  ``naive-quantized`` int8, ``float-quantized`` fp8, ``nvfp4-pack-quantized`` (uint8
  ``[out, in/2]``, fp8 ``weight_scale [out, in/16]``, float32 global scales); scales per
  tensor ``[1]``, channel ``[out, 1]``, group ``[out, in/g]`` or block, in the model dtype;
  ``weight_zero_point`` when not symmetric; ``ignore`` (names, ``re:`` patterns) unquantized.
- **MXFP4** (gpt-oss; transformers ``integrations/mxfp4.py`` ``Mxfp4GptOssExperts``): only
  the experts, uint8 blocks ``[E, out, in/2]`` and e8m0 scales ``[E, out, in/32]`` (one per
  block of 32); expert biases float32 in the module, bf16 in the checkpoint.
- **ModelOpt** (``quant_method`` modelopt, vLLM ``modelopt.py``): NVFP4 uint8 ``[out, in/2]``,
  fp8 ``weight_scale [out, in/16]``, float32 ``weight_scale_2`` and ``input_scale``; FP8
  weight fp8 with float32 ``weight_scale`` and ``input_scale``; ``exclude_modules`` kept.
- **bitsandbytes** (transformers ``integrations/bitsandbytes.py``; bitsandbytes
  ``Params4bit``/``Int8Params``): 4-bit packs two values a byte with one absmax per block
  of 64 (float32, or uint8 plus float32 per 256 blocks with double quantization, and the
  16- and 256-entry code maps); 8-bit int8 with a float32 ``SCB`` per output row. The
  ``lm_head`` stays unquantized (``get_keys_to_not_convert``).

What stays unquantized in every scheme: embeddings, norms, biases, MoE routers (vLLM builds
``ReplicatedLinear(..., quant_config=None)`` for ``mlp.gate`` and ``shared_expert_gate``),
the ``lm_head`` unless the scheme names it, and whatever ``modules_to_not_convert`` /
``ignore`` / ``exclude_modules`` match (transformers ``quantizers_utils.should_convert_module``:
a prefix up to a module boundary, a regex with that boundary, or a suffix).

The result is an **estimate** (``exact: False``): it is exact to the byte for the
checkpoints in ``tests/test_weights_quant.py`` whose published ``model.safetensors.index.json``
``total_size`` it is checked against, but a checkpoint may carry tensors a config does not
announce (vision towers, extra heads), so only the files make it exact.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from kvgate.model.spec import ConfigError

_FLOAT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "bf16": 2, "fp16": 2, "fp32": 4, "half": 2,
                "float": 4}


@dataclass(frozen=True)
class Part:
    """One tensor group of the checkpoint.

    Attributes:
        name: the module's name in the checkpoint, with layer ``i`` and expert 0
            (``model.layers.3.mlp.experts.0.gate_proj``).
        kind: ``linear`` (``in_f`` → ``out_f``, quantizable), ``router`` (a linear no
            scheme quantizes), ``embedding``, ``vector`` (norms, sinks: ``numel``
            elements) or ``other`` (recurrent mixers: ``numel`` parameters).
        experts: copies of this linear (MoE experts), 1 otherwise.
        bias: the linear has a bias of ``out_f`` elements.
        fp32: stored in float32 whatever the model dtype (gpt-oss sinks, DeepSeek's
            ``e_score_correction_bias``).
    """

    name: str
    kind: str
    in_f: int = 0
    out_f: int = 0
    numel: int = 0
    experts: int = 1
    bias: bool = False
    fp32: bool = False
    fused_experts: bool = False


def _int(cfg: dict[str, Any], *keys: str, default: int = 0) -> int:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return default


def inventory(cfg: dict[str, Any], mtp: bool = True) -> list[Part]:
    r"""The tensor groups of a decoder-only checkpoint from its (text) config.

    Attention: GQA ``q/k/v/o_proj`` (biases: Qwen2 and ``attention_bias``), MLA
    (``q_a/q_b/kv_a_proj_with_mqa/kv_b/o_proj`` and their norms); MLP: dense
    ``gate/up/down_proj`` or MoE experts (``mlp.experts.E.*``; Mixtral
    ``block_sparse_moe.experts.E.w1/w2/w3``; gpt-oss fused with biases), routers, shared
    experts; norms; the ``num_nextn_predict_layers`` MTP layers DeepSeek checkpoints carry
    (``mtp``; a checkpoint re-saved through transformers has none: its ``DeepseekV3ForCausalLM``
    drops them, ``_keys_to_ignore_on_load_unexpected = [r"model\.layers\.61.*"]``).

    Raises:
        ConfigError: a needed field is missing.
    """
    from kvgate.model import spec_from_config, text_config
    from kvgate.model.mixer import mixer_params

    full = cfg
    cfg = text_config(cfg)
    hidden, vocab = _int(cfg, "hidden_size"), _int(cfg, "vocab_size")
    if not hidden or not vocab:
        raise ConfigError("cannot list the weights: config field 'hidden_size' or 'vocab_size' missing")
    spec = spec_from_config(full if full is not cfg and "model_type" in full else cfg, name="weights", source="config")
    mt = str(cfg.get("model_type") or "")
    heads = _int(cfg, "num_attention_heads")
    tied = cfg.get("tie_word_embeddings")
    if tied is None:
        tied = mt.startswith("gemma")
    n_exp = _int(cfg, "n_routed_experts", "num_experts", "num_local_experts")
    moe_inter = _int(cfg, "moe_intermediate_size", "intermediate_size")
    inter = _int(cfg, "intermediate_size")
    dense_first = _int(cfg, "first_k_dense_replace")
    mlp_only = set(cfg.get("mlp_only_layers") or [])
    step = _int(cfg, "decoder_sparse_step", default=1)
    shared = _int(cfg, "n_shared_experts")
    shared_inter = _int(cfg, "shared_expert_intermediate_size") or shared * moe_inter
    qk_norm = mt in ("qwen3", "qwen3_moe", "qwen3_next", "gemma3", "gemma3_text", "olmo2")
    norms = 4 if mt.startswith(("gemma2", "gemma3")) else 2
    qkv_bias = mt in ("qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl") or bool(cfg.get("attention_bias"))
    o_bias = bool(cfg.get("attention_bias")) and mt not in ("qwen2", "qwen2_moe")
    mlp_bias = bool(cfg.get("mlp_bias"))
    gpt_oss = mt == "gpt_oss"
    mixtral = mt == "mixtral"

    parts: list[Part] = [Part("model.embed_tokens", "embedding", numel=vocab * hidden)]
    if not tied:
        parts.append(Part("lm_head", "linear", hidden, vocab))
    parts.append(Part("model.norm", "vector", numel=hidden))

    def layer(i: int, kind: str, lspec: Any) -> list[Part]:
        p = f"model.layers.{i}"
        out = [Part(f"{p}.norm{j}", "vector", numel=hidden) for j in range(norms)]
        if kind == "mla":
            rope = _int(cfg, "qk_rope_head_dim")
            nope = _int(cfg, "qk_nope_head_dim")
            vd = _int(cfg, "v_head_dim") or nope
            rank = _int(cfg, "kv_lora_rank")
            ql = _int(cfg, "q_lora_rank")
            a = f"{p}.self_attn"
            if ql:
                out += [Part(f"{a}.q_a_proj", "linear", hidden, ql), Part(f"{a}.q_a_layernorm", "vector", numel=ql),
                        Part(f"{a}.q_b_proj", "linear", ql, heads * (nope + rope))]
            else:
                out.append(Part(f"{a}.q_proj", "linear", hidden, heads * (nope + rope)))
            out += [Part(f"{a}.kv_a_proj_with_mqa", "linear", hidden, rank + rope),
                    Part(f"{a}.kv_a_layernorm", "vector", numel=rank),
                    Part(f"{a}.kv_b_proj", "linear", rank, heads * (nope + vd)),
                    Part(f"{a}.o_proj", "linear", heads * vd, hidden)]
        elif kind in ("full", "sliding"):
            hd, vd = lspec.head_dim, lspec.v_head_dim or lspec.head_dim
            kv = lspec.num_kv_heads
            gate = 2 if mt == "qwen3_next" or cfg.get("attn_output_gate") else 1
            a = f"{p}.self_attn"
            out += [Part(f"{a}.q_proj", "linear", hidden, gate * heads * hd, bias=qkv_bias),
                    Part(f"{a}.k_proj", "linear", hidden, kv * hd, bias=qkv_bias),
                    Part(f"{a}.v_proj", "linear", hidden, kv * vd, bias=qkv_bias),
                    Part(f"{a}.o_proj", "linear", heads * vd, hidden, bias=o_bias or gpt_oss)]
            if qk_norm:
                out += [Part(f"{a}.q_norm", "vector", numel=hd), Part(f"{a}.k_norm", "vector", numel=hd)]
            if gpt_oss:
                out.append(Part(f"{a}.sinks", "vector", numel=heads))  # bf16 in the checkpoint
        elif kind == "linear":
            out.append(Part(f"{p}.mixer", "other", numel=mixer_params(cfg, lspec, hidden)))
        if cfg.get("expert_layer_period"):
            moe = bool(n_exp) and i % cfg["expert_layer_period"] == (cfg.get("expert_layer_offset") or 0)
        else:
            moe = bool(n_exp) and i >= dense_first and i not in mlp_only and (i + 1) % step == 0
        if moe:
            m = f"{p}.block_sparse_moe" if mixtral else f"{p}.mlp"
            router = f"{m}.router" if gpt_oss else f"{m}.gate"
            out.append(Part(router, "router", hidden, n_exp, bias=gpt_oss))
            if cfg.get("topk_method") == "noaux_tc" or mt in ("deepseek_v3", "kimi_k2"):
                out.append(Part(f"{router}.e_score_correction_bias", "vector", numel=n_exp, fp32=True))
            names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
            if gpt_oss:  # fused gate_up [E, 2·inter, hidden] and down, with biases
                out += [Part(f"{m}.experts.gate_up_proj", "linear", hidden, 2 * moe_inter, experts=n_exp, bias=True,
                             fused_experts=True),
                        Part(f"{m}.experts.down_proj", "linear", moe_inter, hidden, experts=n_exp, bias=True,
                             fused_experts=True)]
            else:
                out += [Part(f"{m}.experts.0.{names[0]}", "linear", hidden, moe_inter, experts=n_exp),
                        Part(f"{m}.experts.0.{names[1]}", "linear", hidden, moe_inter, experts=n_exp),
                        Part(f"{m}.experts.0.{names[2]}", "linear", moe_inter, hidden, experts=n_exp)]
            if shared_inter:
                s = f"{m}.shared_experts" if shared and not cfg.get("shared_expert_intermediate_size") else \
                    f"{m}.shared_expert"
                out += [Part(f"{s}.gate_proj", "linear", hidden, shared_inter),
                        Part(f"{s}.up_proj", "linear", hidden, shared_inter),
                        Part(f"{s}.down_proj", "linear", shared_inter, hidden)]
                if cfg.get("shared_expert_intermediate_size"):
                    out.append(Part(f"{m}.shared_expert_gate", "router", hidden, 1))
        elif inter:
            m = f"{p}.mlp"
            out += [Part(f"{m}.gate_proj", "linear", hidden, inter, bias=mlp_bias),
                    Part(f"{m}.up_proj", "linear", hidden, inter, bias=mlp_bias),
                    Part(f"{m}.down_proj", "linear", inter, hidden, bias=mlp_bias)]
        return out

    for i, lspec in enumerate(spec.layers):
        parts += layer(i, lspec.kind, lspec)
    n_mtp = _int(cfg, "num_nextn_predict_layers") if mtp else 0
    if n_mtp and spec.layers:  # DeepSeek-V3's checkpoint: model.layers.61 (eh_proj, enorm/hnorm, its own head)
        n = len(spec.layers)
        for j in range(n_mtp):
            i = n + j
            parts += layer(i, spec.layers[-1].kind, spec.layers[-1])
            p = f"model.layers.{i}"
            parts += [Part(f"{p}.embed_tokens", "embedding", numel=vocab * hidden),
                      Part(f"{p}.enorm", "vector", numel=hidden), Part(f"{p}.hnorm", "vector", numel=hidden),
                      Part(f"{p}.eh_proj", "linear", 2 * hidden, hidden),
                      Part(f"{p}.shared_head.norm", "vector", numel=hidden),
                      Part(f"{p}.shared_head.head", "linear", hidden, vocab)]
    return parts


# --------------------------------------------------------------------------- schemes

def should_convert(name: str, patterns: list[str] | None, substring: bool = False) -> bool:
    """transformers ``quantizers_utils.should_convert_module`` (5.25): a pattern keeps
    ``name`` unquantized when it matches from the start up to a module boundary, as a regex
    with that boundary, or as a suffix; compressed-tensors' ``re:`` prefix is a regex.
    ``substring``: vLLM's AWQ rule instead (``awq.py`` ``is_layer_skipped_awq``:
    ``any(module_name in prefix for module_name in modules_to_not_convert)``), so
    ``"self_attn"`` or ``"layers.0."`` keep those modules unquantized."""
    if not patterns:
        return True
    if substring:
        return not any(isinstance(k, str) and k and k in name for k in patterns)
    boundary = r"(?:(?<=\.)|(?=\.|$))"
    for key in patterns:
        if not isinstance(key, str) or not key:
            continue
        if key.startswith("re:"):
            if re.match(key[3:], name):
                return False
            continue
        try:
            if re.match(rf"(?:{key}){boundary}", name) or name.endswith(key):
                return False
        except re.error:
            if name.endswith(key) or name.startswith(key):
                return False
    return True


@dataclass
class Scheme:
    """How one checkpoint stores its quantized linears.

    Attributes:
        method: ``none``, ``awq``, ``gptq``, ``fp8``, ``compressed-tensors``, ``mxfp4``,
            ``modelopt``, ``bitsandbytes``.
        label: a short description for notes (``AWQ 4-bit, group 128``).
        skip: module patterns left unquantized (``modules_to_not_convert`` and kin).
        lm_head: the lm_head is quantized too.
        experts_only: only MoE experts are quantized (MXFP4).
        groups: compressed-tensors ``(targets, weights args, input args)`` per config group.
    """

    method: str
    label: str
    bits: int = 16
    group: int = 0
    block: tuple[int, int] | None = None
    scale_bytes: int = 4
    static_input: bool = False
    skip: list[str] | None = None
    lm_head: bool = False
    experts_only: bool = False
    fmt: str = ""
    groups: list[tuple[list[str], dict[str, Any], dict[str, Any] | None]] | None = None
    double_quant: bool = False
    algo: str = ""
    #: MoE routers are quantized too (vLLM's online FP8 where the model builds its router with
    #: the quant_config: :mod:`kvgate.engines.vllm.quantization`)
    routers: bool = False


def _ql(v: Any) -> list[str]:
    return [str(x) for x in v] if isinstance(v, list) else []


def scheme_from_config(cfg: dict[str, Any]) -> Scheme:
    """The checkpoint's quantization scheme from ``quantization_config`` (top level or the
    text config; ``compression_config`` is compressed-tensors' older name).

    Raises:
        ConfigError: a ``quant_method`` kvgate has no layout for (named), or bits it
            cannot price.
    """
    from kvgate.model import text_config

    qc = cfg.get("quantization_config") or cfg.get("compression_config") or \
        text_config(cfg).get("quantization_config")
    if not qc:
        return Scheme("none", "unquantized")
    if not isinstance(qc, dict):
        raise ConfigError(f"quantization_config must be an object, got {type(qc).__name__}")
    method = str(qc.get("quant_method") or ("compressed-tensors" if "config_groups" in qc else "")).lower()
    skip = _ql(qc.get("modules_to_not_convert")) + _ql(qc.get("ignore")) + _ql(qc.get("exclude_modules")) + \
        _ql(qc.get("ignored_layers")) + _ql(qc.get("llm_int8_skip_modules"))
    if method == "awq":
        bits, g = int(qc.get("bits") or qc.get("w_bit") or 4), int(qc.get("group_size") or qc.get("q_group_size") or 128)
        if bits not in (2, 3, 4, 8):
            raise ConfigError(f"AWQ bits {bits} is not a width AWQ packs (2, 3, 4, 8)")
        return Scheme("awq", f"AWQ {bits}-bit, group {g}", bits=bits, group=g, skip=skip,
                      fmt="zp" if qc.get("zero_point", True) else "")
    if method in ("gptq", "gptq_marlin"):
        bits, g = int(qc.get("bits") or 4), int(qc.get("group_size") or 128)
        if bits not in (2, 3, 4, 8):
            raise ConfigError(f"GPTQ bits {bits} is not a width GPTQ packs (2, 3, 4, 8)")
        return Scheme("gptq", f"GPTQ {bits}-bit, group {g}{', desc_act' if qc.get('desc_act') else ''}", bits=bits,
                      group=g, skip=skip + _ql(qc.get("modules_not_quantized")), lm_head=bool(qc.get("lm_head")))
    if method in ("fp8", "fbgemm_fp8"):
        blk = qc.get("weight_block_size")
        block = (int(blk[0]), int(blk[1])) if isinstance(blk, list) and len(blk) == 2 else None
        sb = 1 if str(qc.get("scale_fmt") or "") == "ue8m0" else 4
        if method == "fbgemm_fp8":
            return Scheme("fp8", "FP8 per-channel (fbgemm)", bits=8, fmt="channel", skip=skip, scale_bytes=4)
        return Scheme("fp8", f"FP8{f' block {block[0]}×{block[1]}' if block else ' per-tensor'}", bits=8, block=block,
                      scale_bytes=sb, static_input=qc.get("activation_scheme") == "static", skip=skip)
    if method == "mxfp4":
        return Scheme("mxfp4", "MXFP4 experts (4-bit, e8m0 scale per 32)", bits=4, group=32, skip=skip,
                      experts_only=True)
    if method in ("modelopt", "modelopt_fp4", "modelopt_fp8"):
        algo = str(qc.get("quant_algo") or ("NVFP4" if method == "modelopt_fp4" else "FP8")).upper()
        if algo not in ("NVFP4", "FP8"):
            raise ConfigError(f"ModelOpt quant_algo {algo!r}: kvgate prices NVFP4 and FP8")
        return Scheme("modelopt", f"ModelOpt {algo}", bits=4 if algo == "NVFP4" else 8, group=16, skip=skip, algo=algo)
    if method == "bitsandbytes":
        if qc.get("load_in_4bit") or qc.get("_load_in_4bit"):
            dq = bool(qc.get("bnb_4bit_use_double_quant"))
            return Scheme("bitsandbytes", f"bitsandbytes 4-bit{' (double quant)' if dq else ''}", bits=4, group=64,
                          skip=skip or None, double_quant=dq)
        return Scheme("bitsandbytes", "bitsandbytes 8-bit", bits=8, skip=skip or None)
    if method == "compressed-tensors":
        groups = []
        for g in (qc.get("config_groups") or {}).values():
            if isinstance(g, dict) and isinstance(g.get("weights"), dict):
                groups.append((_ql(g.get("targets")) or ["Linear"], g["weights"],
                               g.get("input_activations") if isinstance(g.get("input_activations"), dict) else None))
        if not groups:
            raise ConfigError("compressed-tensors quantization_config has no config_groups with weights")
        w = groups[0][1]
        label = f"compressed-tensors {qc.get('format') or ''} W{w.get('num_bits')} {w.get('type')} {w.get('strategy')}"
        return Scheme("compressed-tensors", " ".join(label.split()), skip=skip, groups=groups,
                      fmt=str(qc.get("format") or ""))
    raise ConfigError(f"quantization_config quant_method {method!r}: kvgate has no weight layout for it",
                      hint="give the model folder (safetensors headers: exact) or --weights-bytes")


def _ct_linear(w: dict[str, Any], inp: dict[str, Any] | None, fmt: str, i: int, o: int, b: int) -> int:
    """Bytes of one compressed-tensors linear (weights args ``w``, format ``fmt``)."""
    bits = int(w.get("num_bits") or 8)
    typ = str(w.get("type") or "int")
    strat = str(w.get("strategy") or "tensor")
    g = int(w.get("group_size") or 0)
    if fmt == "nvfp4-pack-quantized" or (typ == "float" and bits == 4):
        n = o * i // 2 + o * math.ceil(i / (g or 16)) + 4
        return n + (4 if inp else 0)
    if strat == "group" or strat == "tensor_group":
        scales = o * math.ceil(i / g)
    elif strat == "channel":
        scales = o
    elif strat == "block":
        bs = w.get("block_structure") or [128, 128]
        scales = math.ceil(o / int(bs[0])) * math.ceil(i / int(bs[1]))
    else:
        scales = 1
    n = o * i * bits // 8 + scales * b
    if fmt == "pack-quantized" or (typ == "int" and bits < 8 and fmt != "naive-quantized"):
        n += 16  # weight_shape int64[2]
        if w.get("symmetric") is False:
            n += scales * bits // 8 if strat in ("group", "tensor_group") else scales * 4
    elif w.get("symmetric") is False:
        n += scales * (1 if bits == 8 else 4)
    if inp and not inp.get("dynamic", False):
        n += b  # static input_scale
    return n


def _ct_targets(targets: list[str], name: str) -> bool:
    for t in targets:
        if t == "Linear":
            return True
        if t.startswith("re:") and re.match(t[3:], name):
            return True
        if name == t or name.endswith("." + t):
            return True
    return False


def linear_bytes(s: Scheme, part: Part, b: int) -> tuple[int, bool]:
    """``(bytes, quantized)`` of one linear's weight and quantization tensors (one copy; no
    bias) under ``s``; ``b``: the model dtype's bytes."""
    i, o = part.in_f, part.out_f
    plain = i * o * b
    quantizable = part.kind == "linear" or (part.kind == "router" and s.routers)
    if not quantizable or s.method == "none" or not should_convert(part.name, s.skip, s.method == "awq"):
        return plain, False
    if part.name == "lm_head" and not s.lm_head and s.method != "compressed-tensors":
        return plain, False
    expert = ".experts." in part.name
    if s.experts_only and not expert:
        return plain, False
    if s.method == "awq":
        groups = math.ceil(i / s.group) if s.group > 0 else 1
        return i * o * s.bits // 8 + (groups * o * s.bits // 8 if s.fmt else 0) + groups * o * b, True
    if s.method == "gptq":
        groups = math.ceil(i / s.group) if s.group > 0 else 1
        return i * o * s.bits // 8 + i * 4 + groups * o * s.bits // 8 + groups * o * b, True
    if s.method == "fp8":
        if s.block:
            sc = math.ceil(o / s.block[0]) * math.ceil(i / s.block[1]) * s.scale_bytes
        elif s.fmt == "channel":
            sc = o * 4
        else:
            sc = 4
        return i * o + sc + (4 if s.static_input else 0), True
    if s.method == "mxfp4":
        return o * i // 2 + o * (i // 32), True
    if s.method == "modelopt":
        if s.algo == "NVFP4":
            return o * i // 2 + o * math.ceil(i / 16) + 4 + 4, True
        return o * i + 4 + 4, True
    if s.method == "bitsandbytes":
        if part.name == "lm_head":
            return plain, False
        n = i * o
        if s.bits == 8:
            return n + o * 4, True
        blocks = math.ceil(n / 64)
        if s.double_quant:
            return (n + 1) // 2 + blocks + math.ceil(blocks / 256) * 4 + 256 * 4 + 16 * 4 + 4, True
        return (n + 1) // 2 + blocks * 4 + 16 * 4, True
    if s.method == "compressed-tensors":
        for targets, w, inp in s.groups or []:
            if _ct_targets(targets, part.name):
                return _ct_linear(w, inp, s.fmt if s.fmt != "mixed-precision" else str(w.get("format") or ""),
                                  i, o, b), True
        return plain, False
    return plain, False  # pragma: no cover - every method above returns


@dataclass
class QuantBytes:
    """The priced inventory: total bytes and the split the notes show."""

    total: int
    quantized: int
    unquantized: int
    params: int
    scheme: Scheme


def priced(cfg: dict[str, Any], dtype_bytes: int, raw: dict[str, Any] | None = None,
           scheme: Scheme | None = None) -> QuantBytes:
    """Σ bytes of :func:`inventory` of ``cfg`` under :func:`scheme_from_config` of ``raw``
    (the file as published: a wrapper's ``quantization_config`` sits above its text
    config; default ``cfg``) (module doc), or under ``scheme`` when given (a quantization
    the engine applies while loading an unquantized checkpoint).

    Raises:
        ConfigError: missing fields, or a scheme kvgate cannot price.
    """
    s = scheme if scheme is not None else scheme_from_config(raw if raw is not None else cfg)
    b = dtype_bytes
    # AutoAWQ and AutoGPTQ cast the whole model to float16 before saving (``model.half()``):
    # vectors other checkpoints keep in float32 are float16 there.
    keep_fp32 = s.method not in ("awq", "gptq")
    total = quant = params = 0
    # AWQ, GPTQ and bitsandbytes checkpoints are written by transformers' model classes, which
    # have no MTP layers (inventory's doc)
    for p in inventory(cfg, mtp=s.method not in ("awq", "gptq", "bitsandbytes")):
        if p.kind in ("embedding", "vector", "other"):
            params += p.numel
            total += p.numel * (4 if p.fp32 and keep_fp32 else b)
            continue
        params += p.experts * (p.in_f * p.out_f + (p.out_f if p.bias else 0))
        nb, q = linear_bytes(s, p, b) if p.kind in ("linear", "router") else (p.in_f * p.out_f * b, False)
        nb += p.out_f * b if p.bias else 0
        total += p.experts * nb
        if q:
            quant += p.experts * nb
    return QuantBytes(total=total, quantized=quant, unquantized=total - quant, params=params, scheme=s)


def dtype_bytes(cfg: dict[str, Any], given: str | None = None) -> int:
    """Bytes of the model dtype (``given``, else the config's ``torch_dtype`` / ``dtype``,
    else bf16).

    Raises:
        ConfigError: a dtype with no known size.
    """
    from kvgate.model import text_config

    tc = text_config(cfg)
    name = str(given or tc.get("torch_dtype") or tc.get("dtype") or cfg.get("torch_dtype") or cfg.get("dtype")
               or "bfloat16").lower().removeprefix("torch.")
    if name not in _FLOAT_BYTES:
        raise ConfigError(f"no byte size known for dtype {name!r}", hint=f"one of: {', '.join(_FLOAT_BYTES)}")
    return _FLOAT_BYTES[name]
