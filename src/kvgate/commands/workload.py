"""``kvgate workload``: the reference workload (the source's int8 KV mirror on PyTorch).

Thin: arguments → :mod:`kvgate.workload.plan` (no torch) → :mod:`kvgate.workload.stream`
(torch, imported only when a subcommand runs, so ``--help`` works without it).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kvgate.commands._types import count
from kvgate.errors import KvgateError
from kvgate.output import emit, table
from kvgate.units import fmt_bytes, fmt_mib

NAME = "workload"
HELP = "reference workload: the int8 KV mirror (and a paged twin) on PyTorch + transformers (needs kvgate[gpu])"
DESCRIPTION = """\
The source engine's KV mirror made real, on PyTorch + transformers (pip install kvgate[gpu]):
int8 K/V + one f32 scale per KV head per position, slots allocated lazily on a sequence's
first append, a slot cap; and a paged twin (blocks of 16 positions, block tables).

  kvgate workload stream --model qwen3-30b-a3b --streams 4 --max-seq 8192 \\
      --prompt 512 --tokens 64 --layout contiguous
  kvgate run --concurrency 2,4 -- kvgate workload stream --streams {n} ...
  kvgate workload check --model qwen3-30b-a3b       int8 attention vs a bf16 reference

`stream` prints decode tokens/s, the mirror bytes allocated (sum of tensor nbytes; equals
kvgate geometry for int8-f32scale) and torch's peak (torch.cuda.max_memory_allocated /
max_memory_reserved). It exits non-zero on failure (CUDA OOM included).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from kvgate.workload.allocator import DEFAULT_BLOCK_SIZE, DEFAULT_SLOT_CAP  # noqa: PLC0415

    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of text")
    sub = p.add_subparsers(dest="workload_command", metavar="SUBCOMMAND")

    s = sub.add_parser(
        "stream",
        help="N sequences decoding together (the source's stream test)",
        description="Prefill N random prompts together, then decode --tokens steps in one batch.",
    )
    s.add_argument("--model", help="bundled preset (qwen3-30b-a3b, qwen3-0.6b, ...), config.json or model directory")
    s.add_argument("--streams", type=count(1), default=4, help="concurrent sequences N (default 4)")
    s.add_argument("--max-seq", type=count(1), default=8192, help="positions per contiguous slot, L (default 8192)")
    s.add_argument("--prompt", type=count(1), default=512, help="prompt length per stream (default 512)")
    s.add_argument("--tokens", type=count(0), default=64, help="decode steps per stream (default 64)")
    s.add_argument("--layout", choices=("contiguous", "paged"), default="contiguous", help="KV layout (default contiguous)")
    s.add_argument("--slot-cap", type=count(1), default=DEFAULT_SLOT_CAP, help=f"most slots / sequences (default {DEFAULT_SLOT_CAP})")
    s.add_argument("--page-size", "--block-size", dest="block_size", type=count(1), default=DEFAULT_BLOCK_SIZE,
                   help=f"paged: positions per page (default {DEFAULT_BLOCK_SIZE})")
    s.add_argument("--pool-blocks", type=count(1), help="paged: blocks in the pool (default: what the run writes)")
    s.add_argument("--weights", default="random", help="'random' (default) or a local model directory")
    s.add_argument("--device", default="cuda", help="torch device (default cuda)")
    s.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16", help="compute dtype (default bf16)")
    s.add_argument("--seed", type=count(0, 2**32 - 1), default=0, help="seed for random weights and prompts")
    s.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")

    c = sub.add_parser(
        "check",
        help="numerics: int8 mirror attention vs a bf16 reference on random inputs",
        description="‖out − ref‖/‖ref‖ of attention over the int8 mirror (contiguous and paged) on random q, k, v.",
    )
    c.add_argument("--model", default="qwen3-30b-a3b", help="take heads / kv_heads / head_dim from this model (default qwen3-30b-a3b)")
    c.add_argument("--length", type=count(1), default=576, help="positions (default 576 = 512 + 64)")
    c.add_argument("--batch", type=count(1), default=4, help="sequences (default 4)")
    c.add_argument("--page-size", "--block-size", dest="block_size", type=count(1), default=DEFAULT_BLOCK_SIZE,
                   help=f"paged: positions per page (default {DEFAULT_BLOCK_SIZE})")
    c.add_argument("--device", default="cuda")
    c.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    c.add_argument("--seed", type=count(0, 2**32 - 1), default=0)
    c.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    p.set_defaults(_parser=p)


def _need_torch() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise KvgateError(f"the reference workload needs torch and transformers ({exc})", hint="pip install 'kvgate[gpu]'") from None


def run(args: Any) -> int:
    cmd = getattr(args, "workload_command", None)
    if cmd is None:
        args._parser.print_help()
        return 2
    if cmd == "check":
        return _run_check(args)
    return _run_stream(args)


def _run_stream(args: Any) -> int:
    from kvgate.workload.plan import plan_stream

    plan = plan_stream(
        model=args.model,
        streams=args.streams,
        max_seq=args.max_seq,
        prompt=args.prompt,
        tokens=args.tokens,
        layout=args.layout,
        slot_cap=args.slot_cap,
        block_size=args.block_size,
        pool_blocks=args.pool_blocks,
        weights=args.weights,
        device=args.device,
        dtype=args.dtype,
        seed=args.seed,
    )
    for w in plan.warnings:
        print(f"WARNING: {w}", file=sys.stderr)
    _need_torch()
    from kvgate.workload.stream import run_stream

    r = run_stream(plan)
    emit(args.json, r, render_stream(r))
    return 0 if r["logits_finite"] else 1


def render_stream(r: dict[str, Any]) -> str:
    """Text report of one stream run (``r`` from :func:`kvgate.workload.stream.run_stream`)."""

    def b(n: int | None) -> str:
        return "not available" if n is None else f"{fmt_bytes(n)}  ({fmt_mib(n, 1)})"

    g = r["geometry"]
    if r["layout"] == "contiguous":
        how = f"{r['streams']} slots × {fmt_bytes(g['slot_bytes'])}"
    else:
        how = f"{r['pool_blocks']} blocks × {fmt_bytes(g['block_bytes'])}"
    rows = [
        ("parameters", b(r["param_bytes"])),
        ("mirror allocated (Σ nbytes)", b(r["mirror_bytes_allocated"])),
        ("mirror expected (geometry)", f"{b(r['mirror_bytes_expected'])} = {how}"),
        ("torch peak allocated", b(r["torch_peak_allocated_bytes"])),
        ("torch peak reserved", b(r["torch_peak_reserved_bytes"])),
        ("prefill", f"{r['streams'] * r['prompt']:,} tokens in {r['prefill_s']:.3f} s"),
        ("decode", f"{r['streams'] * r['tokens']:,} tokens in {r['decode_s']:.3f} s"),
        ("decode tokens/s", "not available" if r["decode_tokens_per_s"] is None else f"{r['decode_tokens_per_s']:.1f}"),
    ]
    head = (
        f"kvgate workload stream: {r['model']} ({r['model_type']}), {r['layout']}, {r['streams']} streams, "
        f"max_seq {r['max_seq']}, prompt {r['prompt']} + {r['tokens']} tokens, weights {r['weights']}, "
        f"{r['device_name']} ({r['dtype']}, torch {r['torch_version']}, transformers {r['transformers_version']})"
    )
    lines = [head, table(rows, align="ll")]
    lines.append(
        f"mirror bytes {'==' if r['mirror_bytes_match'] else '!='} geometry "
        f"(int8-f32scale: 2·kv_dim + 8·kv_heads = {g['position_bytes']} B per position per layer)"
    )
    if not r["logits_finite"]:
        lines.append("FAILED: non-finite logits")
    return "\n".join(lines)


def _run_check(args: Any) -> int:
    from kvgate.workload.allocator import MirrorGeometry
    from kvgate.workload.config import load_config

    for what, value in (("--length", args.length), ("--batch", args.batch), ("--block-size", args.block_size)):
        if value <= 0:
            raise KvgateError(f"{what} must be a positive integer, got {value}")
    name, cfg = load_config(args.model)
    if isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    g = MirrorGeometry.from_config(cfg, args.length)
    heads = cfg["num_attention_heads"]
    _need_torch()
    from kvgate.workload.stream import numerics_check

    r = numerics_check(
        heads=heads,
        kv_heads=g.kv_heads,
        head_dim=g.head_dim,
        length=args.length,
        batch=args.batch,
        block_size=args.block_size,
        device=args.device,
        dtype=args.dtype,
        seed=args.seed,
    )
    r["model"] = name
    rows = [(k, f"{v:.3e}" if isinstance(v, float) else str(v)) for k, v in r.items() if k not in ("shape",)]
    s = r["shape"]
    text = (
        f"kvgate workload check: {name} shapes (heads {s['heads']}, kv_heads {s['kv_heads']}, head_dim {s['head_dim']}), "
        f"{s['batch']} × {s['length']} positions, {r['dtype']} on {r['device']}\n" + table(rows, align="ll")
    )
    emit(args.json, r, text)
    return 0
