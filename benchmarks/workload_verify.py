"""Verify the reference workload on a GPU (issue 5): bytes, reclaim, numerics, speed.

One process, one model build (Qwen3-30B-A3B from the bundled preset, random bf16 weights,
61,064,245,248 B of parameters), then:

1. **bytes**: a contiguous mirror with 1, 4 and 8 slots on the device; Σ tensor nbytes,
   the ``torch.cuda.memory_allocated`` delta and the NVML used delta against the geometry
   ``slots × n_layers × max_seq × (2·kv_heads·head_dim + 8·kv_heads)`` (415,236,096 B per
   slot at 8192), also against ``kvgate.geometry`` when it is importable. The paged pool
   of the reclaim workload is checked the same way.
2. **peak sweep** (a cross-check for the lead's ``kvgate run --concurrency 2,4``):
   contiguous stream runs at 2, 4, 8 streams; the 8-stream peak projected from 2→4 (the
   fit) and from 4 + 4·S (KV only), against the measured 8-stream peak.
3. **reclaim**: 4 streams, prompt 512 + 64 tokens, contiguous and paged in the same
   process; measured reclaim (torch peak allocated, torch peak reserved, NVML peak used)
   against the bound N·S (the whole mirror) and the unwritten-part bound N·S − written.
4. **numerics**: attention over the int8 mirror vs a bf16 reference on random inputs
   (model shapes, 4 × 576), and the whole model's logits with the int8 mirror vs a bf16
   cache (same random model, same tokens).
5. **speed**: decode tokens/s, contiguous vs paged, from the runs of 3 (repeated).

Writes one JSON document to ``--out`` and prints a short table. ``--device cpu --tiny``
runs the same steps on a tiny config on the CPU (for testing the script).

    PYTHONPATH=src python3 benchmarks/workload_verify.py --out $OUT/workload.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import torch  # noqa: E402

from kvgate.atomicio import write_json_atomic  # noqa: E402
from kvgate.units import fmt_mib  # noqa: E402
from kvgate.workload.allocator import MirrorGeometry  # noqa: E402
from kvgate.workload.engine import DTYPES, DecodeLoop  # noqa: E402
from kvgate.workload.mirror import ContiguousMirror, ReferenceCache  # noqa: E402
from kvgate.workload.paged import PagedMirror  # noqa: E402
from kvgate.workload.plan import plan_stream  # noqa: E402
from kvgate.workload.stream import build_model, numerics_check, run_stream  # noqa: E402

TINY = {
    "model_type": "qwen3_moe", "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 64,
    "num_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 211, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
}  # fmt: skip


class NvmlPeak:
    """Peak of NVML ``used`` (= total − free, what an OOM counts) sampled in a thread.

    ``None`` everywhere when NVML is not available (CPU runs).
    """

    def __init__(self, dev: torch.device, interval_s: float) -> None:
        self.interval_s = interval_s
        self.handle = None
        self.how: str | None = None
        self.peak: int | None = None
        self.samples = 0
        self.max_gap_s = 0.0
        if dev.type != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
        except Exception as exc:  # noqa: BLE001 - no NVML: figures are "not available"
            print(f"note: NVML unavailable ({exc}); NVML figures are n/a", file=sys.stderr)
            return
        # The same GPU as torch's: by UUID, else through CUDA_VISIBLE_DEVICES, else by index.
        try:
            uuid = str(torch.cuda.get_device_properties(dev).uuid)
            self.handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
            self.how = "uuid"
        except Exception:  # noqa: BLE001
            vis = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            ids = [x.strip() for x in vis.split(",") if x.strip()]
            index = dev.index or 0
            if ids and all(x.isdigit() for x in ids) and index < len(ids):
                index = int(ids[index])
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.how = f"index {index}"

    def used(self) -> int | None:
        if self.handle is None:
            return None
        m = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
        return int(m.total) - int(m.free)

    def total(self) -> int | None:
        return None if self.handle is None else int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).total)

    def __enter__(self) -> NvmlPeak:
        self.peak, self.samples, self.max_gap_s = self.used(), 0, 0.0
        self._stop = threading.Event()
        if self.handle is not None:
            self._t = threading.Thread(target=self._loop, daemon=True)
            self._t.start()
        return self

    def _loop(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            u = self.used()
            now = time.perf_counter()
            self.max_gap_s = max(self.max_gap_s, now - last)
            last = now
            self.samples += 1
            if u > (self.peak or 0):
                self.peak = u
            time.sleep(self.interval_s)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self.handle is not None:
            self._t.join()
            u = self.used()
            self.peak = max(self.peak or 0, u)


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def allocated(dev: torch.device) -> int | None:
    return int(torch.cuda.memory_allocated(dev)) if dev.type == "cuda" else None


def lead_geometry_slot_bytes(model_ref: str | Path, max_seq: int) -> int | None:
    """S(L) from the core's ``kvgate.geometry`` (independent code), or None if unavailable."""
    try:
        from kvgate.geometry import KVGeometry
        from kvgate.model import load_model

        return int(KVGeometry(load_model(str(model_ref)), "int8-f32scale").slot_bytes(max_seq))
    except Exception as exc:  # noqa: BLE001 - report, don't fail the run
        print(f"note: kvgate.geometry cross-check unavailable: {exc}", file=sys.stderr)
        return None


def step_bytes(geom: MirrorGeometry, dev: torch.device, nvml: NvmlPeak, pool_blocks: int, block_size: int) -> dict[str, Any]:
    """Allocate the mirror for 1, 4, 8 slots (one append each) and compare with geometry."""
    rows = []
    for n in (1, 4, 8):
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        k = torch.randn(n, 1, geom.kv_heads, geom.head_dim, device=dev, dtype=torch.bfloat16)
        v = torch.randn_like(k)
        sync(dev)
        a0, u0 = allocated(dev), nvml.used()
        m = ContiguousMirror(geom, slot_cap=8, device=dev)
        m.begin(list(range(n)), [0] * n, 1)  # first append: the slots are allocated now
        for layer in range(geom.n_layers):
            m.write(layer, k, v)
        sync(dev)
        a1, u1 = allocated(dev), nvml.used()
        nbytes = m.allocated_bytes()
        for s in range(n):
            m.release(s)
        sync(dev)
        a2 = allocated(dev)
        expected = n * geom.n_layers * geom.max_seq * (2 * geom.kv_heads * geom.head_dim + 8 * geom.kv_heads)
        rows.append(
            {
                "slots": n,
                "expected_bytes": expected,
                "nbytes_sum": nbytes,
                "nbytes_match": nbytes == expected,
                "torch_allocated_delta": None if a0 is None else a1 - a0,
                "torch_allocated_after_release_delta": None if a0 is None else a2 - a0,
                "nvml_used_delta": None if u0 is None else u1 - u0,
            }
        )
        del m, k, v
    # The paged pool of the reclaim workload.
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    a0 = allocated(dev)
    p = PagedMirror(geom, num_blocks=pool_blocks, block_size=block_size, device=dev)
    p.begin([0], [0], 1)
    sync(dev)
    pool = {
        "pool_blocks": pool_blocks,
        "block_size": block_size,
        "expected_bytes": pool_blocks * geom.n_layers * block_size * geom.position_bytes,
        "nbytes_sum": p.allocated_bytes(),
        "torch_allocated_delta": None if a0 is None else allocated(dev) - a0,
    }
    pool["nbytes_match"] = pool["nbytes_sum"] == pool["expected_bytes"]
    del p
    return {"contiguous": rows, "paged_pool": pool}


def measured_run(plan, model, info, dev: torch.device, nvml: NvmlPeak) -> dict[str, Any]:
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    sync(dev)
    before = nvml.used()
    with nvml:
        r = run_stream(plan, model=model, model_info=info)
    r["nvml_used_before_bytes"] = before
    r["nvml_peak_used_bytes"] = nvml.peak
    r["nvml_samples"] = nvml.samples
    r["nvml_max_gap_s"] = nvml.max_gap_s if nvml.handle is not None else None
    return r


def pick(r: dict[str, Any]) -> dict[str, Any]:
    keys = ("layout", "streams", "mirror_bytes_allocated", "mirror_bytes_expected", "mirror_bytes_match",
            "torch_peak_allocated_bytes", "torch_peak_reserved_bytes", "nvml_peak_used_bytes", "nvml_used_before_bytes",
            "nvml_max_gap_s", "prefill_s", "decode_s", "decode_tokens_per_s", "prefill_tokens_per_s", "logits_finite")  # fmt: skip
    return {k: r.get(k) for k in keys}


def diff(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


@torch.inference_mode()
def model_numerics(model, geom: MirrorGeometry, dev: torch.device, dtype: torch.dtype, streams: int, prompt: int, tokens: int, seed: int) -> dict[str, Any]:
    """Same model, same tokens: logits with the int8 mirror vs with a bf16 cache."""
    loop = DecodeLoop(model)
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    ids = torch.randint(0, int(model.config.vocab_size), (streams, prompt + tokens), generator=gen, device=dev)
    seqs = list(range(streams))
    res = {}
    for name, cache in (("int8", ContiguousMirror(geom, device=dev, dtype=dtype)), ("bf16", ReferenceCache(geom, device=dev, dtype=dtype))):
        outs = [loop.forward(ids[:, :prompt], seqs, [0] * streams, cache)]
        for t in range(prompt, prompt + tokens):  # teacher-forced: both see the same tokens
            outs.append(loop.forward(ids[:, t : t + 1], seqs, [t] * streams, cache))
        res[name] = torch.stack(outs, 1)  # [N, tokens+1, vocab] f32
        del cache
    a, b = res["int8"], res["bf16"]
    return {
        "streams": streams,
        "prompt": prompt,
        "tokens": tokens,
        "logits_rel_err": float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b)),
        "argmax_agreement": float((a.argmax(-1) == b.argmax(-1)).float().mean()),
        "finite": bool(torch.isfinite(a).all() and torch.isfinite(b).all()),
    }


def project_2_4_to_8(sweep: dict[int, dict[str, Any]], slot: int) -> dict[str, Any]:
    """8-stream peak from the 2- and 4-stream peaks: a linear fit (marginal bytes per
    sequence = (P4 − P2) / 2, so P8 = P4 + 4·that) and KV only (P8 = P4 + 4·S)."""
    proj = {}
    for key in ("torch_peak_allocated_bytes", "torch_peak_reserved_bytes", "nvml_peak_used_bytes"):
        p2, p4, p8 = sweep[2][key], sweep[4][key], sweep[8][key]
        if None in (p2, p4, p8):
            continue
        per_seq = (p4 - p2) // 2
        fit8, kv8 = p4 + 4 * per_seq, p4 + 4 * slot
        proj[key] = {
            "p2": p2, "p4": p4, "measured_p8": p8,
            "fit_per_seq_bytes": per_seq, "fit_overhead_per_seq_bytes": per_seq - slot,
            "fit_projection_p8": fit8, "fit_error": (fit8 - p8) / p8,
            "kv_only_projection_p8": kv8, "kv_only_error": (kv8 - p8) / p8,
        }  # fmt: skip
    return proj


def failure_paths(dev: torch.device, model, info, plan, model_ref, args) -> dict[str, Any]:
    """Bad input and a forced OOM: each must be a one-line KvgateError, not a traceback.

    - does not fit: Qwen1.5-72B (144,575,840,256 B of bf16 parameters) with one 32768-position
      slot (44 GB); checked on the meta device against ``torch.cuda.mem_get_info``, so
      ``torch_allocated_delta`` must be 0;
    - slot cap: 9 streams with the default cap 8;
    - max_seq past ``max_position_embeddings``: a warning;
    - CUDA OOM during a run: ``set_per_process_memory_fraction`` leaves 64 MiB above what
      is reserved, then a stream run must fail as ``WorkloadFailed``.
    """
    from kvgate.errors import KvgateError

    def error_of(fn) -> dict[str, Any]:
        try:
            fn()
        except KvgateError as exc:
            return {"error": exc.message, "hint": exc.hint, "type": type(exc).__name__, "exit_code": exc.exit_code}
        return {"error": None}

    res: dict[str, Any] = {}
    a0 = allocated(dev)
    big = lambda: build_model(plan_stream(model="qwen1.5-72b", streams=1, max_seq=32768, prompt=16, tokens=1, device=str(dev)))  # noqa: E731
    res["does_not_fit"] = error_of(big) if dev.type == "cuda" else {"error": None, "note": "cpu: no fit check"}
    res["does_not_fit"]["torch_allocated_delta"] = None if a0 is None else allocated(dev) - a0
    res["slot_cap"] = error_of(lambda: plan_stream(model=str(model_ref), streams=9, max_seq=args.max_seq, prompt=16, tokens=1))
    res["max_seq_warning"] = plan_stream(model=str(model_ref), streams=1, max_seq=50_000, prompt=16, tokens=1).warnings
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(dev).total_memory
        frac = (torch.cuda.memory_reserved(dev) + 64 * 2**20) / total
        torch.cuda.set_per_process_memory_fraction(frac, dev)
        try:
            res["oom"] = error_of(lambda: run_stream(plan(args.streams, "contiguous"), model=model, model_info=info))
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, dev)
            torch.cuda.empty_cache()
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON output path")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a tiny config (for testing the script on CPU)")
    ap.add_argument("--model", default="qwen3-30b-a3b")
    ap.add_argument("--max-seq", type=int, default=8192)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--sweep", default="2,4,8", help="contiguous stream counts for the peak cross-check ('' to skip)")
    ap.add_argument("--repeats", type=int, default=2, help="contiguous/paged pairs for the speed figure")
    ap.add_argument("--nvml-interval", type=float, default=0.001, help="NVML sampling interval, seconds")
    ap.add_argument("--force", action="store_true", help="overwrite --out")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    model_ref: str | Path = args.model
    if args.tiny:
        tiny = Path(args.out).with_suffix(".tiny-config.json")
        tiny.parent.mkdir(parents=True, exist_ok=True)
        tiny.write_text(json.dumps(TINY))
        model_ref = tiny
        if args.max_seq == 8192:
            args.max_seq, args.prompt, args.tokens = 256, 32, 8
    dev = torch.device(args.device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    dtype_name = "bf16"
    nvml = NvmlPeak(dev, args.nvml_interval)

    def plan(streams: int, layout: str, prompt: int | None = None, tokens: int | None = None):
        return plan_stream(model=str(model_ref), streams=streams, max_seq=args.max_seq,
                           prompt=args.prompt if prompt is None else prompt,
                           tokens=args.tokens if tokens is None else tokens, layout=layout,
                           slot_cap=max(8, streams), device=str(dev), dtype=dtype_name)  # fmt: skip

    main_plan = plan(args.streams, "contiguous")
    geom = main_plan.geom
    out: dict[str, Any] = {
        "schema": "kvgate.workload-verify/1",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "argv": sys.argv,
        "model": str(model_ref),
        "max_seq": args.max_seq,
        "kv_format": "int8-f32scale",
        "geometry": main_plan.to_dict()["geometry"],
        "env": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "device": str(dev),
            "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
            "device_total_bytes": int(torch.cuda.get_device_properties(dev).total_memory) if dev.type == "cuda" else None,
            "cuda": torch.version.cuda,
            "nvml_total_bytes": nvml.total(),
            "nvml_handle_by": nvml.how,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        },
    }
    s = geom.slot_bytes
    out["slot_bytes"] = {
        "workload_formula": s,
        "kvgate_geometry": lead_geometry_slot_bytes(model_ref, args.max_seq),
        "source_case": 415_236_096 if not args.tiny and args.model == "qwen3-30b-a3b" and args.max_seq == 8192 else None,
    }

    # 1. bytes (before the model exists: cleaner NVML deltas)
    paged_plan = plan(args.streams, "paged")
    t = time.perf_counter()
    out["bytes"] = step_bytes(geom, dev, nvml, paged_plan.admission.pool_blocks, paged_plan.block_size)
    out["bytes"]["seconds"] = time.perf_counter() - t
    print(f"[{time.perf_counter() - t_start:6.1f}s] bytes done", file=sys.stderr)

    # model
    model, info = build_model(main_plan)
    out["model_build"] = {"param_bytes": info["param_bytes"], "build_s": info["build_s"], "fit": info["fit"]}
    print(f"[{time.perf_counter() - t_start:6.1f}s] model built ({info['build_s']:.1f} s)", file=sys.stderr)

    # warm-up: kernels, cuBLAS handles, expert kernels, for both layouts
    for layout in ("contiguous", "paged"):
        run_stream(plan(1, layout, prompt=16, tokens=2), model=model, model_info=info)

    # 3 + 5. reclaim and speed: contiguous/paged pairs
    runs: dict[str, list[dict[str, Any]]] = {"contiguous": [], "paged": []}
    for _ in range(max(1, args.repeats)):
        for layout in ("contiguous", "paged"):
            runs[layout].append(measured_run(plan(args.streams, layout), model, info, dev, nvml))
    print(f"[{time.perf_counter() - t_start:6.1f}s] reclaim runs done", file=sys.stderr)
    c, p = runs["contiguous"][0], runs["paged"][0]
    bound_whole = args.streams * s
    bound_unwritten = bound_whole - main_plan.admission.written_bytes
    reclaim = {
        "streams": args.streams,
        "prompt": args.prompt,
        "tokens": args.tokens,
        "contiguous": pick(c),
        "paged": pick(p),
        "bound_whole_mirror_bytes": bound_whole,
        "bound_unwritten_bytes": bound_unwritten,
        "expected_kv_difference_bytes": c["mirror_bytes_allocated"] - p["mirror_bytes_allocated"],
    }
    for key in ("torch_peak_allocated_bytes", "torch_peak_reserved_bytes", "nvml_peak_used_bytes"):
        m = diff(c[key], p[key])
        name = key.replace("_bytes", "").replace("_peak", "")
        reclaim[f"measured_reclaim_{name}_bytes"] = m
        reclaim[f"ratio_{name}_to_bound_whole"] = None if m is None else m / bound_whole
        reclaim[f"ratio_{name}_to_bound_unwritten"] = None if m is None else m / bound_unwritten
    reclaim["paged_peak_lower"] = (
        None if c["torch_peak_allocated_bytes"] is None else p["torch_peak_allocated_bytes"] < c["torch_peak_allocated_bytes"]
    )
    out["reclaim"] = reclaim
    out["runs"] = {k: [pick(r) for r in v] for k, v in runs.items()}
    speed = {}
    for layout, rs in runs.items():
        tps = [r["decode_tokens_per_s"] for r in rs if r["decode_tokens_per_s"]]
        speed[layout] = {"decode_tokens_per_s": tps, "mean": sum(tps) / len(tps) if tps else None}
    speed["paged_over_contiguous"] = (
        speed["paged"]["mean"] / speed["contiguous"]["mean"] if speed["paged"]["mean"] and speed["contiguous"]["mean"] else None
    )
    out["speed"] = speed

    # 2. peak sweep (contiguous)
    sweep_ns = [int(x) for x in args.sweep.split(",") if x.strip()]
    if sweep_ns:
        sweep = {}
        for n in sweep_ns:
            if n == args.streams:
                sweep[n] = pick(runs["contiguous"][-1])
            else:
                sweep[n] = pick(measured_run(plan(n, "contiguous"), model, info, dev, nvml))
        out["sweep"] = {"runs": {str(n): v for n, v in sweep.items()}}
        if {2, 4, 8} <= set(sweep):
            out["sweep"]["projection_2_4_to_8"] = project_2_4_to_8(sweep, s)
        print(f"[{time.perf_counter() - t_start:6.1f}s] sweep done", file=sys.stderr)

    # 4. numerics
    heads = int(main_plan.config["num_attention_heads"])
    out["numerics"] = {
        "attention": numerics_check(heads=heads, kv_heads=geom.kv_heads, head_dim=geom.head_dim,
                                    length=args.prompt + args.tokens, batch=args.streams, device=str(dev), dtype=dtype_name),
        "model": model_numerics(model, MirrorGeometry(geom.n_layers, geom.kv_heads, geom.head_dim, args.prompt + args.tokens),
                                dev, DTYPES[dtype_name], streams=2, prompt=min(128, args.prompt), tokens=8, seed=7),
    }  # fmt: skip
    # 6. failure paths: a model that does not fit (meta + mem_get_info only), a CUDA OOM
    # during a run (forced with a per-process memory fraction), a max_seq warning.
    out["failures"] = failure_paths(dev, model, info, plan, model_ref, args)
    print(f"[{time.perf_counter() - t_start:6.1f}s] failure paths done", file=sys.stderr)
    out["seconds_total"] = time.perf_counter() - t_start
    write_json_atomic(args.out, out, force=args.force)
    print(render(out))
    print(f"wrote {args.out} ({out['seconds_total']:.1f} s)")
    ok = all(r["nbytes_match"] for r in out["bytes"]["contiguous"]) and out["bytes"]["paged_pool"]["nbytes_match"]
    return 0 if ok else 1


def render(o: dict[str, Any]) -> str:
    def m(n: int | None) -> str:
        return "n/a" if n is None else f"{n:,} B ({fmt_mib(n, 1)})"

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:+.3f}%"

    lines = [f"workload verify: {o['model']} @ {o['max_seq']} on {o['env']['device_name']} "
             f"(torch {o['env']['torch']}, transformers {o['env']['transformers']})",
             f"slot bytes: formula {o['slot_bytes']['workload_formula']:,} | kvgate.geometry "
             f"{o['slot_bytes']['kvgate_geometry']} | source {o['slot_bytes']['source_case']}",
             "1. bytes (slots: expected | Σ nbytes | torch alloc Δ | NVML Δ | after release)"]  # fmt: skip
    for r in o["bytes"]["contiguous"]:
        lines.append(f"   {r['slots']}: {r['expected_bytes']:,} | {r['nbytes_sum']:,} {'OK' if r['nbytes_match'] else 'MISMATCH'} | "
                     f"{r['torch_allocated_delta']} | {r['nvml_used_delta']} | {r['torch_allocated_after_release_delta']}")  # fmt: skip
    pp = o["bytes"]["paged_pool"]
    lines.append(f"   paged pool {pp['pool_blocks']} blocks: {pp['expected_bytes']:,} | {pp['nbytes_sum']:,} {'OK' if pp['nbytes_match'] else 'MISMATCH'}")
    if o.get("sweep", {}).get("projection_2_4_to_8"):
        lines.append("2. peak 2,4 -> 8 (contiguous): measured | fit (err) | KV-only (err)")
        for key, v in o["sweep"]["projection_2_4_to_8"].items():
            lines.append(f"   {key}: {m(v['measured_p8'])} | {m(v['fit_projection_p8'])} ({pct(v['fit_error'])}) | "
                         f"{m(v['kv_only_projection_p8'])} ({pct(v['kv_only_error'])})")  # fmt: skip
    r = o["reclaim"]
    lines.append(f"3. reclaim, {r['streams']} streams, {r['prompt']} + {r['tokens']}: bound N·S {m(r['bound_whole_mirror_bytes'])}, "
                 f"unwritten {m(r['bound_unwritten_bytes'])}")  # fmt: skip
    for name, key in (("torch_allocated", "torch_peak_allocated_bytes"), ("torch_reserved", "torch_peak_reserved_bytes"),
                      ("nvml_used", "nvml_peak_used_bytes")):  # fmt: skip
        ratio = r[f"ratio_{name}_to_bound_whole"]
        lines.append(f"   {name}: contiguous {m(r['contiguous'][key])} paged {m(r['paged'][key])} "
                     f"reclaim {m(r[f'measured_reclaim_{name}_bytes'])} ratio/N·S {'n/a' if ratio is None else f'{ratio:.4f}'}")  # fmt: skip
    n = o["numerics"]
    lines.append(f"4. numerics: attention rel err vs bf16 {n['attention']['rel_err_vs_bf16_ref']:.3e} (paged "
                 f"{n['attention']['rel_err_paged_vs_bf16_ref']:.3e}); model logits rel err {n['model']['logits_rel_err']:.3e}, "
                 f"argmax agreement {n['model']['argmax_agreement']:.3f}")  # fmt: skip
    sp = o["speed"]
    lines.append(f"5. decode tokens/s: contiguous {sp['contiguous']['mean']:.1f} paged {sp['paged']['mean']:.1f} "
                 f"(paged/contiguous {sp['paged_over_contiguous']:.3f})")  # fmt: skip
    f = o.get("failures", {})
    for key in ("does_not_fit", "slot_cap", "oom"):
        if key in f:
            lines.append(f"6. {key}: {f[key].get('error') or f[key].get('note') or 'NO ERROR'}")
    if f.get("max_seq_warning"):
        lines.append(f"6. max_seq warning: {f['max_seq_warning'][0]}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
