"""Measure, on a GPU, the peak torch memory of vLLM V1's dummy sampler step as
kvgate.engines.vllm.budget.v1_logits_rule models it (bytes per logit, ``b + 36`` for PyTorch's
top-k/top-p sort path), by running the same tensor operations that vLLM 0.11's
``Sampler.forward`` -> ``TopKTopPSampler.forward_native`` -> ``apply_top_k_top_p`` and
``random_sample`` perform (``vllm/v1/sample/``, read in the 0.11.0 sdist), with
top_k = V - 1 and top_p = 0.9 as ``_dummy_sampler_run`` sets them.

    python benchmarks/v1_sampler_peak.py            # on a CUDA machine; prints JSON lines

Each line: rows, vocab, the peak over the allocation before the bf16 logits (the logits
included), bytes per logit; and PyTorch's sort alone on an fp32 tensor, its input included.
Results (H200, torch 2.11.0+cu130, 2026-12-01) in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import json
import sys

import torch


def sampler_peak(rows: int, vocab: int, dtype: torch.dtype = torch.bfloat16) -> dict[str, float]:
    torch.cuda.empty_cache()
    dev = torch.device("cuda")
    base = torch.cuda.memory_allocated()
    logits_model = torch.rand(rows, vocab, device=dev, dtype=dtype)  # compute_logits output
    torch.cuda.reset_peak_memory_stats()
    logits = logits_model.to(torch.float32)  # Sampler.forward: fp32 copy
    k = torch.full((rows,), vocab - 1, device=dev)
    p = torch.full((rows,), 0.9, device=dev)
    logits.div_(torch.full((rows,), 0.5, device=dev).unsqueeze(1))  # temperature, in place
    # apply_top_k_top_p (PyTorch path)
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    top_k_mask = logits_sort.size(1) - k.to(torch.long)
    top_k_mask = logits_sort.gather(1, top_k_mask.unsqueeze(dim=1))
    top_k_mask = logits_sort < top_k_mask
    logits_sort.masked_fill_(top_k_mask, -float("inf"))
    probs_sort = logits_sort.softmax(dim=-1)
    probs_sum = torch.cumsum(probs_sort, dim=-1, out=probs_sort)
    top_p_mask = probs_sum <= 1 - p.unsqueeze(dim=1)
    top_p_mask[:, -1] = False
    logits_sort.masked_fill_(top_p_mask, -float("inf"))
    out = logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)
    del logits_sort, logits_idx, top_k_mask, probs_sort, probs_sum, top_p_mask
    # random_sample
    probs = out.softmax(dim=-1, dtype=torch.float32)
    q = torch.empty_like(probs)
    q.exponential_()
    probs.div_(q).argmax(dim=-1)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    # PyTorch's sort alone, on a fresh fp32 tensor (its input counted)
    del logits, out, probs, q
    torch.cuda.empty_cache()
    base2 = torch.cuda.memory_allocated()
    x = torch.rand(rows, vocab, device=dev)
    torch.cuda.reset_peak_memory_stats()
    x.sort(dim=-1)
    torch.cuda.synchronize()
    sort_peak = torch.cuda.max_memory_allocated() - base2
    n = rows * vocab
    return {"rows": rows, "vocab": vocab, "torch": torch.__version__, "peak_bytes": peak,
            "bytes_per_logit": round(peak / n, 3), "sort_bytes_per_logit": round(sort_peak / n, 3),
            "model_dtype_bytes": logits_model.element_size()}


def main() -> int:
    for rows, vocab in ((256, 201_088), (1024, 201_088), (256, 128_256), (1024, 151_936), (64, 128_256)):
        print(json.dumps(sampler_peak(rows, vocab)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
