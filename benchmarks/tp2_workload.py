"""A real two-rank ``torch.distributed`` workload for ``kvgate run --gpu all`` (issue 11).

Each rank is one process on its own GPU (NCCL backend). Every rank holds a bf16 "weight"
shard of ``--weights-gib`` and a per-rank "KV cache" of ``--kv-gib × (1 + rank)``, so the
two GPUs peak at different figures (rank 1 holds ``--kv-gib`` more than rank 0) and the
gate must pick the worse one. The ranks then run ``--steps`` NCCL all-reduces of a
``--comm-mib`` buffer and check the sum (rank r contributes r + 1, so every element must be
``world × (world + 1) / 2``), then hold for ``--hold-s`` and exit.

Run it (two GPUs; keep NVLink multicast off, as the device machine requires):

    NCCL_NVLS_ENABLE=0 kvgate run --gpu all --model llama-3.1-8b --max-seq 8192 --slots 8 \\
        -- torchrun --standalone --nproc-per-node 2 benchmarks/tp2_workload.py

Each rank prints one JSON line: rank, GPU, the bytes it allocated and torch's own peak.
Expected NVML ``total − free`` per GPU: the CUDA context + NCCL buffers + weights + KV of
that rank; the difference between the two GPUs' peaks is close to ``--kv-gib`` GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

GiB, MiB = 2**30, 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="two-rank NCCL workload for kvgate run --gpu all")
    ap.add_argument("--weights-gib", type=float, default=8.0)
    ap.add_argument("--kv-gib", type=float, default=4.0, help="rank r holds kv-gib × (1 + r)")
    ap.add_argument("--comm-mib", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--hold-s", type=float, default=1.0)
    a = ap.parse_args(argv)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast on a shared host
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    t0 = time.monotonic()
    w_bytes = int(a.weights_gib * GiB) // 2 * 2
    kv_bytes = int(a.kv_gib * GiB * (1 + rank)) // 2 * 2
    weights = torch.empty(w_bytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    kv = torch.empty(kv_bytes // 2, dtype=torch.bfloat16, device="cuda").zero_()
    buf = torch.empty(a.comm_mib * MiB // 4, dtype=torch.float32, device="cuda")
    expect = world * (world + 1) / 2
    for _ in range(a.steps):
        buf.fill_(rank + 1)
        dist.all_reduce(buf)
        kv[: buf.numel()].copy_(buf[: kv.numel()].to(torch.bfloat16))
    torch.cuda.synchronize()
    ok = bool(torch.all(buf == expect).item())
    dist.barrier()
    time.sleep(a.hold_s)
    out = {"rank": rank, "world": world, "gpu": local, "weights_bytes": w_bytes, "kv_bytes": kv_bytes,
           "comm_bytes": buf.numel() * 4, "allreduce_ok": ok, "allreduce_value": float(buf[0].item()),
           "torch_max_allocated_bytes": torch.cuda.max_memory_allocated(),
           "torch_max_reserved_bytes": torch.cuda.max_memory_reserved(), "seconds": round(time.monotonic() - t0, 2)}
    print(json.dumps(out), flush=True)
    del weights, kv, buf
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
