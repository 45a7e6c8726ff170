"""The stream test (N sequences decoding together) and the numerics check, on torch.

:func:`build_model` turns a :class:`~kvgate.workload.plan.StreamPlan` into a model on the
device, checking *before any allocation* that parameters + KV mirror fit in free device
memory (``torch.cuda.mem_get_info``). :func:`run_stream` runs one stream test and returns
a JSON-ready dict; every byte figure is an int and names the torch call it comes from:

- ``mirror_bytes_allocated``: Σ ``tensor.nbytes`` of the cache's tensors after prefill;
- ``torch_peak_allocated_bytes`` / ``torch_peak_reserved_bytes``:
  ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` over the run (reset at
  its start, so weights resident before the run are included);
- ``decode_tokens_per_s``: N × tokens / decode wall time (``torch.cuda.synchronize``
  around it).

A CUDA out-of-memory error at any point becomes :class:`WorkloadFailed` (a
``KvgateError``: one ``ERROR:`` line, exit status 2), never a traceback.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from kvgate.errors import KvgateError
from kvgate.options import DEFAULT_PAGE_SIZE as DEFAULT_BLOCK_SIZE  # vLLM's default --block-size
from kvgate.units import fmt_bytes, fmt_human
from kvgate.workload.allocator import MirrorGeometry
from kvgate.workload.attention import attend, causal_mask
from kvgate.workload.engine import (
    DTYPES,
    DecodeLoop,
    generate,
    load_pretrained,
    materialize_random,
    meta_model,
    param_bytes,
)
from kvgate.workload.mirror import ContiguousMirror
from kvgate.workload.paged import PagedMirror
from kvgate.workload.plan import StreamPlan

_OOM = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


class WorkloadFailed(KvgateError):
    """The workload ran and failed (e.g. CUDA out of memory): a failed measurement."""


def _oom(exc: BaseException, what: str) -> WorkloadFailed:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return WorkloadFailed(
        f"CUDA out of memory during {what}: {first}",
        hint="fewer streams, a shorter --max-seq, or the paged layout; this run is a failed measurement",
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _device(plan_device: str) -> torch.device:
    """``--device`` as a usable torch device (a CUDA device gets its index).

    Raises:
        KvgateError: not a torch device string, no CUDA, no such GPU index, or a device
            torch cannot allocate on — one line naming the device, never a traceback.
    """
    try:
        dev = torch.device(plan_device)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise KvgateError(f"--device {plan_device!r} is not a torch device ({_first_line(exc)})",
                          hint="e.g. --device cuda, cuda:0 or cpu") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise KvgateError(f"--device {plan_device}: no CUDA device is available to torch",
                              hint="pass --device cpu (slow; for small configs)")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise KvgateError(f"--device {plan_device}: no such GPU; torch sees {count} CUDA device(s)"
                              + (f" (cuda:0 to cuda:{count - 1})" if count else ""),
                              hint="CUDA_VISIBLE_DEVICES renumbers GPUs from 0")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    if dev.type != "meta":
        try:
            torch.empty(0, device=dev)
        except Exception as exc:  # noqa: BLE001 - any backend failure: report it on one line
            raise KvgateError(f"--device {plan_device} cannot be used by torch: {_first_line(exc)}") from None
    return dev


def check_fit(device: torch.device, *, params: int, mirror: int) -> dict[str, int] | None:
    """Raise unless ``params + mirror`` bytes fit in free memory on ``device``.

    Uses ``torch.cuda.mem_get_info`` (the driver's free/total; the CUDA context already
    counts as used). Activations come on top and are not included. CPU: no check, ``None``.

    Raises:
        KvgateError: parameters + mirror exceed free device memory (with the numbers).
    """
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    need = params + mirror
    if need > free:
        raise KvgateError(
            f"the model does not fit {torch.cuda.get_device_name(device)}: parameters {fmt_bytes(params)} "
            f"({fmt_human(params)}) + KV mirror {fmt_bytes(mirror)} ({fmt_human(mirror)}) = {fmt_bytes(need)} "
            f"({fmt_human(need)}) > free {fmt_bytes(free)} ({fmt_human(free)}) of {fmt_bytes(total)}",
            hint="use a smaller model, fewer streams, a shorter --max-seq, or a larger card",
        )
    return {"free_bytes": int(free), "total_bytes": int(total), "need_bytes": int(need)}


def build_model(plan: StreamPlan, *, mirror_bytes: int | None = None) -> tuple[Any, dict[str, Any]]:
    """The plan's model on its device, after the fit check. Returns ``(model, info)``.

    Raises:
        KvgateError: no CUDA, the model + mirror do not fit, unloadable weights.
        WorkloadFailed: CUDA out of memory while allocating.
    """
    device = _device(plan.device)
    dtype = DTYPES[plan.dtype]
    t0 = time.perf_counter()
    meta = meta_model(plan.config, dtype)
    params = param_bytes(meta)
    fit = check_fit(device, params=params, mirror=plan.admission.mirror_bytes if mirror_bytes is None else mirror_bytes)
    try:
        if plan.weights == "random":
            materialize_random(meta, device, seed=plan.seed)
            model = meta
        else:
            del meta
            model = load_pretrained(plan.weights, device, dtype)
    except _OOM as exc:
        raise _oom(exc, "model build") from None
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    info = {"param_bytes": int(param_bytes(model)), "build_s": time.perf_counter() - t0, "fit": fit}
    return model, info


def make_cache(plan: StreamPlan, device: torch.device, dtype: torch.dtype):
    """The plan's cache: a :class:`ContiguousMirror` or a :class:`PagedMirror`."""
    if plan.layout == "contiguous":
        return ContiguousMirror(plan.geom, slot_cap=plan.slot_cap, device=device, dtype=dtype)
    return PagedMirror(
        plan.geom,
        num_blocks=plan.admission.pool_blocks,
        block_size=plan.block_size,
        slot_cap=plan.slot_cap,
        device=device,
        dtype=dtype,
    )


def run_stream(plan: StreamPlan, *, model: Any = None, model_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the stream test: prefill ``streams`` random prompts together, then ``tokens``
    greedy decode steps in one batch. Builds the model unless one is given.

    Returns:
        the plan's dict plus measured figures (see the module docstring).

    Raises:
        KvgateError: see :func:`build_model`; WorkloadFailed on CUDA OOM during the run.
    """
    device = _device(plan.device)
    dtype = DTYPES[plan.dtype]
    if model is None:
        model, model_info = build_model(plan)
    else:
        check_fit(device, params=0, mirror=plan.admission.mirror_bytes)
    cuda = device.type == "cuda"
    loop = DecodeLoop(model)
    vocab = int(model.config.vocab_size)
    gen = torch.Generator(device=device)
    gen.manual_seed(plan.seed + 1)
    n, p = plan.streams, plan.prompt
    cache = None
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base_alloc = torch.cuda.memory_allocated(device)
        base_reserved = torch.cuda.memory_reserved(device)
    try:
        prompts = torch.randint(0, vocab, (n, p), generator=gen, device=device)
        cache = make_cache(plan, device, dtype)
        res = generate(loop, cache, prompts, plan.tokens)
    except _OOM as exc:
        del cache
        if cuda:
            torch.cuda.empty_cache()
        raise _oom(exc, f"the {plan.layout} stream test ({n} streams)") from None
    out = plan.to_dict()
    out.update(
        {
            "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
            "torch_version": torch.__version__,
            "transformers_version": _tf_version(),
            "param_bytes": (model_info or {}).get("param_bytes", int(param_bytes(model))),
            "build_s": (model_info or {}).get("build_s"),
            "mirror_bytes_allocated": res["mirror_bytes"],
            "mirror_bytes_match": res["mirror_bytes"] == plan.admission.mirror_bytes,
            "torch_baseline_allocated_bytes": int(base_alloc) if cuda else None,
            "torch_baseline_reserved_bytes": int(base_reserved) if cuda else None,
            "torch_peak_allocated_bytes": int(torch.cuda.max_memory_allocated(device)) if cuda else None,
            "torch_peak_reserved_bytes": int(torch.cuda.max_memory_reserved(device)) if cuda else None,
            "prefill_s": res["prefill_s"],
            "decode_s": res["decode_s"],
            "prefill_tokens_per_s": n * p / res["prefill_s"] if res["prefill_s"] > 0 else None,
            "decode_tokens_per_s": n * plan.tokens / res["decode_s"] if res["decode_s"] > 0 and plan.tokens else None,
            "logits_finite": res["finite"],
            "warnings": list(plan.warnings) + ([] if res["finite"] else ["non-finite logits (random weights?)"]),
        }
    )
    return out


def _tf_version() -> str | None:
    try:
        import transformers

        return transformers.__version__
    except ImportError:  # pragma: no cover
        return None


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in f32 (Frobenius norms over all elements)."""
    o, r = out.float(), ref.float()
    return float(torch.linalg.vector_norm(o - r) / torch.linalg.vector_norm(r))


@torch.inference_mode()
def numerics_check(
    *,
    heads: int,
    kv_heads: int,
    head_dim: int,
    length: int = 576,
    batch: int = 4,
    block_size: int = DEFAULT_BLOCK_SIZE,
    device: str = "cuda",
    dtype: str = "bf16",
    seed: int = 0,
) -> dict[str, Any]:
    """Attention over the int8 mirror vs a reference on random inputs.

    q ``[batch, length, heads, head_dim]``, k, v ``[batch, length, kv_heads, head_dim]``
    drawn N(0, 1) in ``dtype``; causal attention over all ``length`` positions. The K/V go
    through the contiguous mirror and through the paged twin (quantize, store, read,
    dequantize); outputs are compared with attention on the unquantized K/V in ``dtype``
    (the bf16 reference) and in f32.

    Returns:
        rel errors ‖out − ref‖/‖ref‖, the K/V round-trip errors, and the max abs
        difference between paged and contiguous outputs (same format: expected 0).

    Raises:
        KvgateError: a NaN or infinite error (the check failed).
    """
    dev = _device(device)
    dt = DTYPES[dtype]
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    q = torch.randn((batch, length, heads, head_dim), generator=gen, device=dev).to(dt)
    k = torch.randn((batch, length, kv_heads, head_dim), generator=gen, device=dev).to(dt)
    v = torch.randn((batch, length, kv_heads, head_dim), generator=gen, device=dev).to(dt)
    mask = causal_mask([0] * batch, length, length, dev)
    scale = head_dim**-0.5
    ref = attend(q, k, v, mask, scale)  # bf16 reference
    ref32 = attend(q.float(), k.float(), v.float(), mask, scale)
    geom = MirrorGeometry(n_layers=1, kv_heads=kv_heads, head_dim=head_dim, max_seq=length)
    seqs = list(range(batch))
    caches = {
        "contiguous": ContiguousMirror(geom, slot_cap=batch, device=dev, dtype=dt),
        "paged": PagedMirror(
            geom, num_blocks=batch * -(-length // block_size), block_size=block_size, slot_cap=batch, device=dev, dtype=dt
        ),
    }
    outs, kv_err = {}, {}
    for name, c in caches.items():
        c.begin(seqs, [0] * batch, length)
        c.write(0, k, v)
        kc, vc = c.read(0)
        kv_err[name] = (_rel(kc, k), _rel(vc, v))
        outs[name] = attend(q, kc, vc, mask, scale)
    result = {
        "shape": {"batch": batch, "length": length, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim},
        "dtype": dtype,
        "device": str(dev),
        "seed": seed,
        "rel_err_vs_bf16_ref": _rel(outs["contiguous"], ref),
        "rel_err_vs_fp32_ref": _rel(outs["contiguous"], ref32),
        "rel_err_paged_vs_bf16_ref": _rel(outs["paged"], ref),
        "bf16_ref_rel_err_vs_fp32": _rel(ref, ref32),
        "k_roundtrip_rel_err": kv_err["contiguous"][0],
        "v_roundtrip_rel_err": kv_err["contiguous"][1],
        "paged_vs_contiguous_max_abs": float((outs["paged"].float() - outs["contiguous"].float()).abs().max()),
    }
    bad = [key for key, val in result.items() if isinstance(val, float) and not torch.isfinite(torch.tensor(val))]
    if bad:
        raise KvgateError(f"numerics check failed: non-finite {', '.join(bad)}")
    return result
