#!/usr/bin/env python3
"""Compare kvgate's ``contiguous`` bytes with the cache tensors transformers allocates.

For each config, the model is built from its config.json with random weights (MLP /
expert / vocabulary sizes shrunk: they do not touch the cache; attention and recurrent
dimensions kept exactly), a ``StaticCache(config, max_cache_len=L)`` is filled by one
short forward pass (transformers allocates cache tensors lazily on the first update),
and the bytes of every tensor each cache layer holds are summed and compared, layer by
layer, with ``KVGeometry(spec, <model dtype>, state_format=<model dtype>)`` under the
``contiguous`` layout at L positions × batch.

Usage (from the repository root; the device has torch 2.11 + transformers 5.17):

    PYTHONPATH=src python3 benchmarks/hf_cache_bytes.py --out $OUT/hf_cache_bytes.json

Full size without memory, on the meta device (no weights, no cache data: shapes and
dtypes only), appended to the recorded fixture (existing records untouched; mllama and
wrapped configs, whose layer count is nested, are checked by
tests/test_conformance_transformers.py instead):

    PYTHONPATH=src python3 benchmarks/hf_cache_bytes.py --device meta \
        --models glm-5.2 minimax-m3 falcon-h1-0.5b \
        --append-to tests/data/hf_cache_bytes.json --out /tmp/hf_cache_bytes.json

CPU smoke run (a few layers per model):

    PYTHONPATH=src python3 benchmarks/hf_cache_bytes.py --device cpu --max-layers 8 \
        --max-cache-len 256 --out /tmp/hf_cache_bytes_cpu.json

Tolerant of transformers 4.5x/5.x: ``dtype=``/``torch_dtype=``, StaticCache built from
``config=``, caches with ``.layers`` (keys/values, conv_states/recurrent_states) or the
older per-model list attributes.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

PRESETS = REPO / "src" / "kvgate" / "model" / "presets"
TESTCFG = REPO / "tests" / "data" / "configs"

# name -> (config path, overrides that shrink non-cache parts, minimum layers to keep the pattern)
MODELS = {
    "qwen3-0.6b": (PRESETS / "qwen3-0.6b.json", {}, 1),
    "llama-3.1-8b": (PRESETS / "llama-3.1-8b.json", {"intermediate_size": 512, "vocab_size": 2048}, 1),
    "qwen3-30b-a3b": (PRESETS / "qwen3-30b-a3b.json", {"num_experts": 4, "num_experts_per_tok": 2, "vocab_size": 2048}, 1),
    "gemma-2-9b": (TESTCFG / "gemma-2-9b.json", {"intermediate_size": 512, "vocab_size": 2048, "torch_dtype": "bfloat16"}, 2),
    "gemma-3-1b": (TESTCFG / "gemma-3-1b.json", {"vocab_size": 2048}, 6),
    "gpt-oss-20b": (PRESETS / "gpt-oss-20b.json", {"num_local_experts": 4, "vocab_size": 2048}, 2),
    "deepseek-v3": (PRESETS / "deepseek-v3.json", {"n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1,
                                                    "topk_group": 1, "intermediate_size": 512,
                                                    "moe_intermediate_size": 128, "vocab_size": 2048}, 4),
    "qwen3-next-80b-a3b": (TESTCFG / "qwen3-next-80b-a3b.json", {"num_experts": 4, "num_experts_per_tok": 2,
                                                                  "vocab_size": 2048}, 4),
    "jamba-v0.1": (TESTCFG / "jamba-v0.1.json", {"num_experts": 2, "num_experts_per_tok": 1, "intermediate_size": 512,
                                                  "vocab_size": 2048, "use_mamba_kernels": False}, 8),
    # recorded on the meta device (``--device meta --append-to``): no weights, full size
    "glm-5.2": (TESTCFG / "glm-5.2.json", {}, 8),
    "minimax-m3": (TESTCFG / "minimax-m3.json", {}, 4),
    "falcon-h1-0.5b": (TESTCFG / "falcon-h1-0.5b-reconstructed.json", {}, 1),
}

# Remote-code model types transformers runs under its text model's class (as kvgate reads
# them: kvgate.model.hf.TEXT_CLASS_ALIASES).
TEXT_CLASS = {"minimax_m3": "minimax_m3_vl_text"}


def _layers(cfg: dict) -> int:
    """The layer count, from the top level or the nested text config."""
    return cfg["num_hidden_layers"] if "num_hidden_layers" in cfg else cfg["text_config"]["num_hidden_layers"]


def _reduce(cfg: dict, overrides: dict, max_layers: int | None, min_layers: int) -> dict:
    cfg = copy.deepcopy(cfg)
    cfg.update(overrides)
    cfg.pop("quantization_config", None)
    if "vocab_size" in overrides:  # token ids must stay inside the shrunk vocabulary
        for k in ("pad_token_id", "bos_token_id", "eos_token_id"):
            if k in cfg:
                cfg[k] = 0
    if max_layers:
        n = max(min(cfg["num_hidden_layers"], max_layers), min_layers)
        cfg["num_hidden_layers"] = n
        if isinstance(cfg.get("layer_types"), list):
            cfg["layer_types"] = cfg["layer_types"][:n]
        if "first_k_dense_replace" in cfg:
            cfg["first_k_dense_replace"] = min(cfg["first_k_dense_replace"], 1)
    return cfg


def _tensors(obj, seen=None):
    """Tensors an object holds directly (attributes, lists, tuples, dicts), ≥ 2-D only
    (0/1-D bookkeeping such as ``cumulative_length`` is not cache)."""
    import torch

    seen = set() if seen is None else seen
    out = []

    def visit(v, depth=0):
        if isinstance(v, torch.Tensor):
            if v.dim() >= 2 and id(v) not in seen:
                seen.add(id(v))
                out.append(v)
        elif isinstance(v, (list, tuple)) and depth < 2:
            for x in v:
                visit(x, depth + 1)
        elif isinstance(v, dict) and depth < 2:
            for x in v.values():
                visit(x, depth + 1)

    for v in vars(obj).values():
        visit(v)
    return out


def cache_bytes_per_layer(cache, n_layers: int) -> list[dict]:
    """Per-layer ``{bytes, shapes}`` of a transformers cache object."""
    rows = []
    layers = getattr(cache, "layers", None)
    if isinstance(layers, list) and layers:
        for layer in layers[:n_layers]:
            ts = _tensors(layer)
            rows.append({"bytes": int(sum(t.numel() * t.element_size() for t in ts)),
                         "shapes": [[list(t.shape), str(t.dtype).replace("torch.", "")] for t in ts],
                         "class": type(layer).__name__})
        return rows
    # older model-specific caches: parallel per-layer lists (key_cache, conv_states, ...)
    per = [{"bytes": 0, "shapes": [], "class": type(cache).__name__} for _ in range(n_layers)]
    import torch

    for name, v in vars(cache).items():
        if isinstance(v, (list, tuple)) and len(v) == n_layers:
            for i, t in enumerate(v):
                if isinstance(t, torch.Tensor) and t.dim() >= 2:
                    per[i]["bytes"] += int(t.numel() * t.element_size())
                    per[i]["shapes"].append([name, list(t.shape), str(t.dtype).replace("torch.", "")])
        elif isinstance(v, torch.Tensor) and v.dim() >= 3 and v.shape[0] == n_layers:
            for i in range(n_layers):
                per[i]["bytes"] += int(v[i].numel() * v.element_size())
                per[i]["shapes"].append([name, list(v.shape[1:]), str(v.dtype).replace("torch.", "")])
    return per


def build_model(cfg: dict, device: str, dtype):
    import torch
    import transformers

    model_type = cfg["model_type"]
    if model_type not in transformers.CONFIG_MAPPING and isinstance(cfg.get("text_config"), dict):
        # a wrapper transformers does not know: its text model is what runs (and caches)
        cfg = {"torch_dtype": cfg.get("torch_dtype"), **cfg["text_config"]}
        model_type = cfg["model_type"]
    model_type = TEXT_CLASS.get(model_type, model_type)
    kw = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures", "transformers_version")}
    config = transformers.AutoConfig.for_model(model_type, **kw)
    for attr in ("_attn_implementation",):
        try:
            setattr(config, attr, "eager")
        except Exception:
            pass
    torch.manual_seed(0)
    with torch.device(device):
        try:
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
        except TypeError:
            model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=dtype)
        except ValueError:  # composite configs: the base model takes input_ids too
            model = transformers.AutoModel.from_config(config, dtype=dtype)
    return model.to(device=device, dtype=dtype).eval()


def measure_one(name: str, args) -> dict:
    import torch
    import transformers

    from kvgate.geometry import KVGeometry
    from kvgate.model import spec_from_config

    path, overrides, min_layers = MODELS[name]
    raw = json.loads(path.read_text())
    cfg = _reduce(raw, overrides, args.max_layers, min_layers)
    dtype = getattr(torch, args.dtype)
    rec = {"name": name, "config": str(path.relative_to(REPO)), "layers": _layers(cfg),
           "layers_in_config": _layers(raw), "overrides": overrides, "ok": False}
    t0 = time.time()
    try:
        model = build_model(cfg, args.device, dtype)
        rec["model_class"] = type(model).__name__
        rec["param_bytes"] = int(sum(p.numel() * p.element_size() for p in model.parameters()))
        mc = model.config
        cache = None
        try:
            cache = transformers.StaticCache(config=mc, max_cache_len=args.max_cache_len)
            rec["cache_class"] = "StaticCache"
        except Exception as exc:  # hybrid models on some versions
            rec["static_cache_error"] = f"{type(exc).__name__}: {exc}"
        vocab = cfg.get("vocab_size") or cfg["text_config"]["vocab_size"]
        ids = torch.randint(0, vocab, (args.batch, args.prompt), device=args.device)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
        with torch.no_grad():
            out = None
            if cache is not None:
                try:
                    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
                except Exception as exc:  # the model does not take a StaticCache here
                    rec["static_cache_error"] = f"{type(exc).__name__}: {exc}"
                    cache = None
            if cache is None:
                out = model(input_ids=ids, use_cache=True)
                cache = out.past_key_values
                rec["cache_class"] = type(cache).__name__ + " (model default; attention layers hold only the prompt)"
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
            rec["cuda_allocated_delta_bytes"] = int(torch.cuda.memory_allocated() - before)
        del out
        hf = cache_bytes_per_layer(cache, _layers(cfg))
    except Exception as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
        rec["traceback"] = traceback.format_exc()[-2000:]
        return rec
    spec = spec_from_config(cfg, name=name, source=str(path))
    fmt = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[args.dtype]
    geo = KVGeometry(spec, fmt, state_format=fmt)
    per = []
    for i, row in enumerate(hf):
        kv = args.batch * geo.layer_bytes(i, args.max_cache_len)
        per.append({"layer": i, "kind": spec.layers[i].kind, "hf_bytes": row["bytes"], "kvgate_bytes": kv,
                    "diff_bytes": row["bytes"] - kv, "hf_class": row["class"], "hf_shapes": row["shapes"]})
    rec.update(per_layer=per, hf_total=sum(r["hf_bytes"] for r in per), kvgate_total=sum(r["kvgate_bytes"] for r in per),
               match=all(r["diff_bytes"] == 0 for r in per), ok=True, seconds=round(time.time() - t0, 2))
    del model, cache
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON output path")
    ap.add_argument("--models", nargs="*", default=list(MODELS), help=f"subset of: {', '.join(MODELS)}")
    ap.add_argument("--max-cache-len", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=4, help="tokens in the forward pass that allocates the cache")
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--max-layers", type=int, default=None, help="keep at most N layers (pattern minimum kept)")
    ap.add_argument("--append-to", default=None,
                    help="a recorded fixture: add these models' records to it (same max_cache_len, batch, dtype, "
                         "max_layers; names not yet in it), each with its own basis; existing records untouched")
    args = ap.parse_args(argv)
    import torch
    import transformers

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        ap.error(f"unknown models: {unknown}")
    doc = {
        "schema": "kvgate.hf_cache_bytes/1",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": (torch.cuda.get_device_name(0) if args.device.startswith("cuda")
                   else "meta (shapes and dtypes only, nothing allocated)" if args.device == "meta"
                   else platform.processor() or "cpu"),
        "device_kind": args.device,
        "dtype": args.dtype,
        "max_cache_len": args.max_cache_len,
        "batch": args.batch,
        "max_layers": args.max_layers,
        "models": [],
    }
    base = None
    if args.append_to:
        base = json.loads(Path(args.append_to).read_text())
        for k in ("max_cache_len", "batch", "dtype", "max_layers"):
            if base[k] != doc[k]:
                ap.error(f"--append-to: the fixture's {k} is {base[k]!r}, this run's {doc[k]!r}")
        dup = [m["name"] for m in base["models"] if m["name"] in args.models]
        if dup:
            ap.error(f"--append-to: already recorded (records are never overwritten): {dup}")
    for name in args.models:
        rec = measure_one(name, args)
        if base is not None:
            rec["basis"] = {k: doc[k] for k in ("date", "python", "torch", "transformers", "device", "device_kind")}
        doc["models"].append(rec)
        status = "ok" if rec.get("ok") else "ERROR"
        match = rec.get("match")
        print(f"{name:22s} {status:5s} layers={rec['layers']:3d} hf={rec.get('hf_total')} kvgate={rec.get('kvgate_total')} "
              f"match={match} {rec.get('error', '')}", flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1))
    if base is not None:
        base["models"] += doc["models"]
        Path(args.out).write_text(json.dumps(base, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
