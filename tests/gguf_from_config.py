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
}

# tiny tensors written into every test GGUF: (name, shape, dtype)
TINY_TENSORS = [("token_embd.weight", (4, 32), np.float32), ("output_norm.weight", (32,), np.float16)]
TINY_TENSOR_BYTES = 4 * 32 * 4 + 32 * 2


def write_gguf(cfg: dict[str, Any], path: Path) -> Path:
    import gguf

    if "text_config" in cfg and "num_hidden_layers" not in cfg:
        cfg = cfg["text_config"]
    arch = ARCH[cfg["model_type"]]
    w = gguf.GGUFWriter(str(path), arch)
    n = cfg["num_hidden_layers"]
    w.add_block_count(n)
    w.add_embedding_length(cfg["hidden_size"])
    w.add_context_length(cfg.get("max_position_embeddings") or 4096)
    if cfg.get("num_attention_heads"):
        w.add_head_count(cfg["num_attention_heads"])
    if cfg["model_type"] in ("deepseek_v3", "deepseek_v2"):
        w.add_head_count_kv(1)
        w.add_kv_lora_rank(cfg["kv_lora_rank"])
        w.add_rope_dimension_count(cfg["qk_rope_head_dim"])
        w.add_key_length(cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"])
        w.add_value_length(cfg["kv_lora_rank"])
        # today's convert_hf_to_gguf.py also writes the per-head sizes (llama_hparams::is_mla)
        w.add_key_length_mla(cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"])
        w.add_value_length_mla(cfg["v_head_dim"])
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
    elif cfg["model_type"] == "qwen3_next":
        w.add_head_count_kv(cfg["num_key_value_heads"])
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
        w.add_full_attention_interval(cfg["full_attention_interval"])
        w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
        w.add_ssm_state_size(cfg["linear_key_head_dim"])
        w.add_ssm_group_count(cfg["linear_num_key_heads"])
        w.add_ssm_time_step_rank(cfg["linear_num_value_heads"])
        w.add_ssm_inner_size(cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"])
    else:
        w.add_head_count_kv(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
        hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        w.add_key_length(hd)
        w.add_value_length(hd)
    if cfg.get("sliding_window") and cfg.get("use_sliding_window", True) is not False:
        w.add_sliding_window(cfg["sliding_window"])
        if cfg.get("layer_types"):
            w.add_sliding_window_pattern([t == "sliding_attention" for t in cfg["layer_types"]])
        elif cfg.get("sliding_window_pattern"):
            w.add_sliding_window_pattern(cfg["sliding_window_pattern"])
    for name, shape, dt in TINY_TENSORS:
        w.add_tensor(name, np.ones(shape, dtype=dt))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
