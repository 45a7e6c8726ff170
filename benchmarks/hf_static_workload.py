"""A real transformers workload for ``kvgate run``: a bundled preset with random bf16
weights built directly on the GPU, ``generate`` into a ``StaticCache``.

Issue 3's workload: Qwen3-30B-A3B (``src/kvgate/model/presets/qwen3-30b-a3b.json``,
61,064,245,248 bytes of bf16 parameters, fits an H200), StaticCache of 8192 positions,
prompt 512 tokens, 32 new tokens, ``--streams n`` sequences. Run it under kvgate:

    kvgate run --model qwen3-30b-a3b --max-seq 8192 --slots-measured 4 --slots 8 \\
        --concurrency 2,4 -- python benchmarks/hf_static_workload.py --streams {n}

The StaticCache reserves max_cache_len positions per sequence up front (a "contiguous
slot", DESIGN.md §2): per sequence, layers × 2 (K, V) × kv_heads × head_dim × 2 bytes ×
8192 = 48 × 2 × 4 × 128 × 2 × 8192 = 805,306,368 B for this model. The script prints the
bytes of the cache tensors it actually allocated, to compare with kvgate's S(L).

CPU check with a small model: ``--preset qwen3-0.6b --layers 2 --max-cache-len 256
--prompt-len 16 --new-tokens 4 --device cpu``. Needs torch and transformers (not kvgate's
core). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

PRESETS = Path(__file__).resolve().parents[1] / "src" / "kvgate" / "model" / "presets"


def load_config(preset: str, layers: int | None):
    """A transformers config from a kvgate preset name or a config.json path."""
    from transformers import AutoConfig

    path = Path(preset)
    if not path.is_file():
        path = PRESETS / f"{preset}.json"
    d = json.loads(path.read_text())
    if layers is not None:
        d["num_hidden_layers"] = layers
        if "max_window_layers" in d:
            d["max_window_layers"] = min(d["max_window_layers"], layers)
    d.pop("architectures", None)
    d.pop("transformers_version", None)
    return AutoConfig.for_model(d.pop("model_type"), **d)


def build_model(cfg, device: str):
    """The model with random weights (the model's own init), created directly on ``device``."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        except TypeError:  # transformers 4.x
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    return model.eval()


def static_cache(cfg, max_cache_len: int, batch: int, device: str):
    """A ``StaticCache`` of ``max_cache_len`` positions (transformers 5 API, 4.x fallback)."""
    import torch
    from transformers import StaticCache

    try:
        return StaticCache(config=cfg, max_cache_len=max_cache_len)
    except TypeError:  # transformers 4.x
        return StaticCache(config=cfg, max_batch_size=batch, max_cache_len=max_cache_len, device=device,
                           dtype=torch.bfloat16)


def cache_tensor_bytes(cache) -> int:
    """Bytes of every K/V tensor the cache holds (5.x ``layers[i].keys/values``; 4.x lists)."""
    tensors = []
    for layer in getattr(cache, "layers", []) or []:
        tensors += [getattr(layer, "keys", None), getattr(layer, "values", None)]
    tensors += list(getattr(cache, "key_cache", []) or []) + list(getattr(cache, "value_cache", []) or [])
    seen, total = set(), 0
    for t in tensors:
        if t is None or not hasattr(t, "numel") or id(t) in seen:
            continue
        seen.add(id(t))
        total += t.numel() * t.element_size()
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="qwen3-30b-a3b", help="kvgate preset name or a config.json path")
    ap.add_argument("--streams", type=int, required=True, help="concurrent sequences (batch size)")
    ap.add_argument("--max-cache-len", type=int, default=8192)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--layers", type=int, default=None, help="override num_hidden_layers (small CPU checks)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    import torch

    torch.manual_seed(a.seed)
    t0 = time.monotonic()
    cfg = load_config(a.preset, a.layers)
    model = build_model(cfg, a.device)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    t_build = time.monotonic() - t0
    ids = torch.randint(0, cfg.vocab_size, (a.streams, a.prompt_len), device=a.device)
    mask = torch.ones_like(ids)
    cache = static_cache(cfg, a.max_cache_len, a.streams, a.device)
    t1 = time.monotonic()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, past_key_values=cache, max_new_tokens=a.new_tokens,
                             min_new_tokens=a.new_tokens, do_sample=False, pad_token_id=0)
    if a.device.startswith("cuda"):
        torch.cuda.synchronize()
    t_gen = time.monotonic() - t1
    n_layers, kv_heads = cfg.num_hidden_layers, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    expected = n_layers * 2 * kv_heads * head_dim * 2 * a.max_cache_len * a.streams
    result = {
        "preset": a.preset, "streams": a.streams, "max_cache_len": a.max_cache_len, "prompt_len": a.prompt_len,
        "new_tokens": int(out.shape[1] - ids.shape[1]), "param_bytes": param_bytes,
        "cache_tensor_bytes": cache_tensor_bytes(cache), "cache_bytes_formula": expected,
        "build_s": round(t_build, 2), "generate_s": round(t_gen, 2),
    }
    if a.device.startswith("cuda"):
        result["torch_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        result["torch_max_reserved_bytes"] = torch.cuda.max_memory_reserved()
    print(f"param bytes {param_bytes:,}; cache tensors {result['cache_tensor_bytes']:,} B "
          f"(formula {expected:,} B); build {t_build:.1f} s, generate {t_gen:.1f} s")
    print(json.dumps(result))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
