"""Test helper: write a GGUF file (metadata + tiny tensors) from an HF config.json dict,
with the keys llama.cpp's ``convert_hf_to_gguf.py`` writes for these architectures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

ARCH = {
    "llama": "llama", "mistral": "llama", "mixtral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
    "qwen3_moe": "qwen3moe", "deepseek_v3": "deepseek2", "deepseek_v2": "deepseek2",
    "gpt_oss": "gpt-oss", "gemma2": "gemma2", "gemma3_text": "gemma3", "gemma3": "gemma3",
    "qwen3_next": "qwen3next", "jamba": "jamba", "mamba2": "mamba2",
    "kimi_k2": "deepseek2", "falcon_mamba": "mamba", "mamba": "mamba",
    "qwen3_5_text": "qwen35", "qwen3_5_moe_text": "qwen35moe", "gemma4_text": "gemma4",
    "llama4_text": "llama4", "nemotron_h": "nemotron_h",
    "lfm2": "lfm2", "kimi_linear": "kimi-linear", "deepseek_v32": "deepseek32", "glm_moe_dsa": "glm-dsa",
    "mimo_v2_flash": "mimo2", "minimax_m2": "minimax-m2", "gpt2": "gpt2", "nemotron-nas": "deci",
    "phi3": "phi3", "falcon_h1": "falcon-h1", "qwen3_vl_text": "qwen3vl", "qwen3_vl_moe_text": "qwen3vlmoe",
}


def arch_of(cfg: dict[str, Any]) -> str:
    """llama.cpp's architecture name for a config (Nemotron-H with experts is its own)."""
    if cfg["model_type"] == "nemotron_h" and "num_experts_per_tok" in cfg:
        return "nemotron_h_moe"  # conversion/nemotron.py NemotronHModel.__init__
    return ARCH[cfg["model_type"]]
MLA_TYPES = ("deepseek_v3", "deepseek_v2", "kimi_k2", "deepseek_v32", "glm_moe_dsa")
# Qwen3-Next / Qwen3.5: conversion/qwen.py (_QwenMtpMixin) appends the MTP block to
# block_count and writes nextn_predict_layers (Qwen3-Next's config does not carry
# mtp_num_hidden_layers; the converter's default is 1)
QWEN_LINEAR = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")


def n_mtp(cfg: dict[str, Any]) -> int:
    """MTP / nextn layers the converter appends (DeepSeek: ``num_nextn_predict_layers``)."""
    if cfg["model_type"] in QWEN_LINEAR:
        return int(cfg.get("mtp_num_hidden_layers") or 1)
    if cfg["model_type"] == "mimo_v2_flash":
        return 3  # conversion/mimo.py MimoV2Model._n_nextn: 3 MTP layers, not in the config
    return int(cfg.get("num_nextn_predict_layers") or 0)

# tiny tensors written into every test GGUF: (name, shape, dtype)
TINY_TENSORS = [("token_embd.weight", (4, 32), np.float32), ("output_norm.weight", (32,), np.float16)]
TINY_TENSOR_BYTES = 4 * 32 * 4 + 32 * 2


def write_gguf(cfg: dict[str, Any], path: Path) -> Path:
    """The KV metadata plus :data:`TINY_TENSORS` (for kvgate's reader; llama.cpp cannot
    load it)."""
    import gguf

    cfg = _text(cfg)
    cfg = _normalize(cfg)
    w = gguf.GGUFWriter(str(path), arch_of(cfg))
    _add_kv_metadata(w, cfg)
    for name, shape, dt in TINY_TENSORS:
        w.add_tensor(name, np.ones(shape, dtype=dt))
    return _finish(w, path)


def write_loadable_gguf(cfg: dict[str, Any], path: Path, *, n_vocab: int = 128) -> Path:
    """Metadata only (no tensors), complete enough for llama.cpp to build the model from
    it with ``llama_model_init_from_user`` (as its ``tests/test-llama-archs.cpp`` does):
    the KV keys of :func:`write_gguf` plus feed-forward, norm, MoE and rope keys and a
    ``test`` vocabulary of ``n_vocab`` tokens. llama.cpp creates every weight at full
    size itself; with ``no_alloc`` none is allocated (``benchmarks/llamacpp_conformance.py``)."""
    import gguf

    cfg = _text(cfg)
    cfg = _normalize(cfg)
    w = gguf.GGUFWriter(str(path), arch_of(cfg))
    _add_kv_metadata(w, cfg)
    n = cfg["num_hidden_layers"]
    ff = cfg.get("intermediate_size") or 4 * cfg["hidden_size"]
    if cfg["model_type"] not in ("nemotron_h", "nemotron-nas"):  # (per layer, in the KV metadata)
        w.add_feed_forward_length(ff)
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps") or 1e-6)
    w.add_layer_norm_eps(cfg.get("layer_norm_epsilon") or cfg.get("rms_norm_eps") or 1e-5)
    n_exp = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    if n_exp:
        w.add_expert_count(n_exp)
        w.add_expert_used_count(cfg.get("num_experts_per_tok") or cfg.get("experts_per_token")
                                or cfg.get("num_experts_per_token") or cfg.get("top_k_experts") or 2)
        w.add_expert_feed_forward_length(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or ff)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if cfg.get("scoring_func") == "sigmoid"
                                 else gguf.ExpertGatingFuncType.SOFTMAX)
        n_shared = cfg.get("n_shared_experts", cfg.get("num_shared_experts"))
        if n_shared is not None:
            w.add_expert_shared_count(n_shared)
        shexp = cfg.get("shared_expert_intermediate_size") or cfg.get("moe_shared_expert_intermediate_size")
        if shexp:
            w.add_expert_shared_feed_forward_length(shexp)
    if cfg["model_type"] == "llama4_text":  # conversion/llama.py Llama4Model
        w.add_interleave_moe_layer_step(cfg.get("interleave_moe_layer_step") or 1)
    if cfg["model_type"] in MLA_TYPES + ("kimi_linear",):
        w.add_leading_dense_block_count(cfg.get("first_k_dense_replace") or 0)
        if cfg.get("q_lora_rank"):
            w.add_q_lora_rank(cfg["q_lora_rank"])
        w.add_expert_weights_scale(float(cfg.get("routed_scaling_factor") or 1.0))
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("test")
    w.add_token_list([f"tok_{i}" for i in range(n_vocab)])
    w.add_token_scores([0.0] * n_vocab)
    del n
    return _finish(w, path)


def _finish(w: Any, path: Path) -> Path:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# GPT-2's names for the standard fields (transformers' GPT2Config attribute_map)
ALIASES = {"n_layer": "num_hidden_layers", "n_embd": "hidden_size", "n_head": "num_attention_heads",
           "n_positions": "max_position_embeddings"}


def _text(cfg: dict[str, Any]) -> dict[str, Any]:
    """The text config of a wrapper config (Qwen3-VL keeps its deepstack layer count in
    ``vision_config.deepstack_visual_indexes``: conversion/qwen.py Qwen3VLTextModel)."""
    if "text_config" in cfg and "num_hidden_layers" not in cfg:
        deep = len((cfg.get("vision_config") or {}).get("deepstack_visual_indexes") or [])
        return {**cfg["text_config"], **({"_n_deepstack_layers": deep} if deep else {})}
    return cfg


def _normalize(cfg: dict[str, Any]) -> dict[str, Any]:
    return {**cfg, **{ALIASES[k]: v for k, v in cfg.items() if k in ALIASES and ALIASES[k] not in cfg}}


def _add_mla(w: Any, cfg: dict[str, Any]) -> None:
    """The MLA keys conversion/deepseek.py writes: the latent as one KV head of
    kv_lora_rank + rope, and (today's converter) the per-head sizes (llama_hparams::is_mla)."""
    w.add_kv_lora_rank(cfg["kv_lora_rank"])
    w.add_rope_dimension_count(cfg["qk_rope_head_dim"])
    w.add_key_length(cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"])
    w.add_value_length(cfg["kv_lora_rank"])
    w.add_key_length_mla(cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"])
    w.add_value_length_mla(cfg["v_head_dim"])


def _add_kv_metadata(w: Any, cfg: dict[str, Any]) -> None:
    n = cfg["num_hidden_layers"]
    mtp = n_mtp(cfg)
    w.add_block_count(n + mtp)
    if mtp:
        w.add_nextn_predict_layers(mtp)
    w.add_embedding_length(cfg["hidden_size"])
    w.add_context_length(cfg.get("max_position_embeddings") or 4096)
    if cfg.get("num_attention_heads") and cfg["model_type"] != "nemotron-nas":
        w.add_head_count(cfg["num_attention_heads"])
    if cfg["model_type"] in MLA_TYPES:
        w.add_head_count_kv(1)
        _add_mla(w, cfg)
        if cfg.get("index_head_dim"):
            # conversion/deepseek.py DeepseekV32Model, conversion/glm.py GlmMoeDsaModel
            w.add_uint32(f"{w.arch}.attention.indexer.head_count", cfg["index_n_heads"])
            w.add_uint32(f"{w.arch}.attention.indexer.key_length", cfg["index_head_dim"])
            w.add_uint32(f"{w.arch}.attention.indexer.top_k", cfg["index_topk"])
    elif cfg["model_type"] == "jamba":
        kv = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
        per = [kv if i % cfg["attn_layer_period"] == cfg["attn_layer_offset"] else 0 for i in range(n)]
        w.add_head_count_kv(per)
        d_inner = cfg["mamba_expand"] * cfg["hidden_size"]
        w.add_ssm_conv_kernel(cfg["mamba_d_conv"])
        w.add_ssm_inner_size(d_inner)
        w.add_ssm_state_size(cfg["mamba_d_state"])
        w.add_ssm_time_step_rank(cfg.get("mamba_dt_rank") or -(-cfg["hidden_size"] // 16))
    elif cfg["model_type"] == "mamba2":
        w.add_head_count_kv(0)
        w.add_ssm_conv_kernel(cfg["conv_kernel"])
        w.add_ssm_inner_size(cfg["num_heads"] * cfg["head_dim"])
        w.add_ssm_state_size(cfg["state_size"])
        w.add_ssm_group_count(cfg["n_groups"])
        w.add_ssm_time_step_rank(cfg["num_heads"])
    elif cfg["model_type"] == "gemma4_text":
        # conversion/gemma.py Gemma4Model: per-layer KV heads, full/SWA head dims, a bool
        # pattern, the shared-KV tail
        swa = [t == "sliding_attention" for t in cfg["layer_types"]]
        kv_full = cfg.get("num_global_key_value_heads") or cfg["num_key_value_heads"]
        w.add_head_count_kv([cfg["num_key_value_heads"] if s else kv_full for s in swa])
        hd_full = cfg.get("global_head_dim") or cfg["head_dim"]
        w.add_key_length(hd_full)
        w.add_value_length(hd_full)
        w.add_key_length_swa(cfg["head_dim"])
        w.add_value_length_swa(cfg["head_dim"])
        w.add_sliding_window(cfg["sliding_window"])
        w.add_sliding_window_pattern(swa)
        w.add_shared_kv_layers(cfg.get("num_kv_shared_layers") or 0)
        w.add_embedding_length_per_layer_input(cfg.get("hidden_size_per_layer_input") or 0)
        w.add_rope_dimension_count(hd_full)
        w.add_rope_dimension_count_swa(cfg["head_dim"])
        return
    elif cfg["model_type"] == "kimi_linear":
        # conversion/kimi_linear.py: KV heads 1 on the (1-based) full_attn_layers, 0 on KDA
        # layers; MLA keys as DeepSeek's
        la = cfg["linear_attn_config"]
        w.add_head_count_kv([1 if i + 1 in la["full_attn_layers"] else 0 for i in range(n)])
        w.add_ssm_conv_kernel(la["short_conv_kernel_size"])
        w.add_uint32(f"{w.arch}.kda.head_dim", la["head_dim"])
        _add_mla(w, cfg)
    elif cfg["model_type"] == "nemotron-nas":
        # conversion/llama.py DeciModel (Llama-Nemotron): per-layer heads, KV heads (0 for a
        # no-op or linear attention block) and FFN sizes (0 for a no-op FFN)
        h = cfg["num_attention_heads"]
        heads, kv, ffs = [], [], []
        for b in cfg["block_configs"]:
            a, f = b["attention"], b["ffn"]
            kv.append(h // a["n_heads_in_group"] if a["n_heads_in_group"] else 0)
            heads.append(h if a["n_heads_in_group"] or a["replace_with_linear"] else 0)
            size = int(2 * f["ffn_mult"] * cfg["hidden_size"] / 3) if f.get("ffn_mult") else 0
            ffs.append(-(-size // 256) * 256)
        w.add_head_count(heads)
        w.add_head_count_kv(kv)
        w.add_feed_forward_length(ffs)
        w.add_key_length(cfg["hidden_size"] // h)
        w.add_value_length(cfg["hidden_size"] // h)
        return
    elif cfg["model_type"] == "mimo_v2_flash":
        # conversion/mimo.py MimoV2Model: per-layer KV heads and a bool pattern (1 = SWA),
        # both extended over the MTP layers as SWA
        hybrid = [bool(x) for x in cfg["hybrid_layer_pattern"]] + [True] * mtp
        w.add_head_count_kv([cfg["swa_num_key_value_heads"] if x else cfg["num_key_value_heads"] for x in hybrid])
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["v_head_dim"])
        w.add_sliding_window(cfg["sliding_window"])
        w.add_sliding_window_pattern(hybrid)
        w.add_rope_dimension_count(int(cfg["head_dim"] * cfg.get("partial_rotary_factor", 1.0)))
        return
    elif cfg["model_type"] == "lfm2":
        # conversion/lfm2.py LFM2Model: KV heads 0 on the short-conv layers
        w.add_head_count_kv([cfg["num_key_value_heads"] if t != "conv" else 0 for t in cfg["layer_types"]])
        w.add_shortconv_l_cache(cfg["conv_L_cache"])
    elif cfg["model_type"] == "nemotron_h":
        # conversion/nemotron.py NemotronHModel (GraniteHybrid, Mamba2): per-layer KV heads
        # ("*" attention) and feed-forward lengths ("-" MLP, "E" MoE); the rest Mamba-2
        pat = cfg["hybrid_override_pattern"]
        mlp = "E" if "num_experts_per_tok" in cfg else "-"
        ff_layer = cfg.get("moe_intermediate_size") if mlp == "E" else cfg["intermediate_size"]
        w.add_head_count_kv([cfg["num_key_value_heads"] if c == "*" else 0 for c in pat])
        w.add_feed_forward_length([ff_layer if c == mlp else 0 for c in pat])
        hd = cfg.get("head_dim") or cfg["attention_head_dim"]
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_ssm_conv_kernel(cfg["conv_kernel"])
        w.add_ssm_inner_size(cfg["mamba_num_heads"] * cfg["mamba_head_dim"])
        w.add_ssm_state_size(cfg["ssm_state_size"])
        w.add_ssm_group_count(cfg["n_groups"])
        w.add_ssm_time_step_rank(cfg["mamba_num_heads"])
    elif cfg["model_type"] == "falcon_h1":
        # conversion/falcon_h1.py FalconH1Model (over Mamba2Model): attention keys and the
        # Mamba-2 keys, every layer both
        w.add_head_count_kv(cfg["num_key_value_heads"])
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
        d_inner = cfg["mamba_d_ssm"]  # find_hparam(["mamba_d_ssm"]): required by the converter
        w.add_ssm_conv_kernel(cfg.get("mamba_d_conv") or 4)
        w.add_ssm_inner_size(d_inner)
        w.add_ssm_state_size(cfg.get("mamba_d_state") or 128)
        w.add_ssm_time_step_rank(d_inner // (cfg.get("mamba_d_head") or 64))
        w.add_ssm_group_count(cfg.get("mamba_n_groups") or 1)
    elif cfg["model_type"] in ("falcon_mamba", "mamba"):
        # conversion/mamba.py MambaModel
        w.add_head_count(0)
        w.add_ssm_conv_kernel(cfg.get("conv_kernel") or 4)
        w.add_ssm_inner_size(cfg.get("intermediate_size") or 2 * cfg["hidden_size"])
        w.add_ssm_state_size(cfg.get("state_size") or 16)
        w.add_ssm_time_step_rank(cfg.get("time_step_rank") or -(-cfg["hidden_size"] // 16))
    elif cfg["model_type"] in QWEN_LINEAR:
        w.add_head_count_kv(cfg["num_key_value_heads"])
        if cfg.get("layer_types"):
            import gguf

            # gguf-py's add_recurrent_layers (newer than the PyPI package): one bool per layer
            w.add_key_value(f"{w.arch}.attention.recurrent_layers",
                            [t == "linear_attention" for t in cfg["layer_types"]] + [False] * mtp,
                            gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.BOOL)
        if cfg["model_type"] != "qwen3_next":
            # conversion/qwen.py _Qwen35MRopeMixin: the sections, padded to 4 (default [11, 11, 10, 0])
            rp = cfg.get("rope_parameters") or {}
            sec = list(rp.get("mrope_section") or [11, 11, 10])
            w.add_rope_dimension_sections((sec + [0, 0, 0, 0])[:4])
            w.add_rope_dimension_count(int(cfg["head_dim"] * rp.get("partial_rotary_factor", 0.25)))
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
        w.add_full_attention_interval(cfg["full_attention_interval"])
        w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
        w.add_ssm_state_size(cfg["linear_key_head_dim"])
        w.add_ssm_group_count(cfg["linear_num_key_heads"])
        w.add_ssm_time_step_rank(cfg["linear_num_value_heads"])
        w.add_ssm_inner_size(cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"])
    else:
        if cfg["model_type"] in ("qwen3_vl_text", "qwen3_vl_moe_text"):
            # conversion/qwen.py Qwen3VLTextModel: the M-RoPE sections (required by
            # src/models/qwen3vl.cpp), padded to 4; the deepstack layer count
            rp = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
            sec = list(rp.get("mrope_section") or [24, 20, 20])
            w.add_rope_dimension_sections((sec + [0, 0, 0, 0])[:4])
            w.add_uint32(f"{w.arch}.n_deepstack_layers", int(cfg.get("_n_deepstack_layers") or 0))
        w.add_head_count_kv(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
        # convert_hf_to_gguf.py (conversion/gemma.py): hparams.get("head_dim", 256)
        default_hd = 256 if cfg["model_type"] in ("gemma2", "gemma3", "gemma3_text") else None
        hd = cfg.get("head_dim") or default_hd or cfg["hidden_size"] // cfg["num_attention_heads"]
        w.add_key_length(hd)
        w.add_value_length(hd)
    # the converter writes sliding_window only for architectures llama.cpp runs with SWA
    # (conversion/gemma.py, gpt_oss.py, qwen.py for use_sliding_window …; not llama.py)
    # (llama4: conversion/llama.py writes none; llama.cpp hard-codes chunked 8192, pattern 4)
    swa_arch = cfg["model_type"] not in ("llama", "mistral", "mixtral", "qwen3", "qwen3_moe", "qwen2", "llama4_text",
                                         "nemotron_h", "lfm2", "kimi_linear")
    if swa_arch and cfg.get("sliding_window") and cfg.get("use_sliding_window", True) is not False:
        w.add_sliding_window(cfg["sliding_window"])
        if cfg.get("layer_types"):
            w.add_sliding_window_pattern([t == "sliding_attention" for t in cfg["layer_types"]])
        elif cfg.get("sliding_window_pattern"):
            w.add_sliding_window_pattern(cfg["sliding_window_pattern"])


def loadable_copy(src: Path, dst: Path, *, n_vocab: int = 128) -> Path:
    """A metadata-only GGUF's keys, copied unchanged, plus a ``test`` vocabulary where the
    file has none, so llama.cpp can build the model from it (see
    :func:`write_loadable_gguf`)."""
    import gguf

    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), vtype, sub_type=sub)
    if "tokenizer.ggml.tokens" not in r.fields:
        if f"{arch}.vocab_size" not in r.fields:
            w.add_vocab_size(n_vocab)
        w.add_tokenizer_model("test")
        w.add_token_list([f"tok_{i}" for i in range(n_vocab)])
        w.add_token_scores([0.0] * n_vocab)
    return _finish(w, dst)
