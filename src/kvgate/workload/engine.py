"""A transformers causal LM driven by a minimal decode loop over its layer modules.

**Why a decode loop and not a ``transformers.Cache`` subclass.** The Cache API moved a
lot across 4.x → 5.x (``DynamicLayer``/``StaticLayer`` objects, ``past_key_values`` being
renamed ``cache`` in 5.x with a deprecation window, ``update()`` signatures and
mask-creation hooks that differ between 5.17 on the device and the latest release here).
A Cache subclass must also return full-precision K/V to transformers' attention, so the
int8 storage would be hidden behind an API we do not control. The loop below instead
calls each decoder layer's submodules itself, which have stayed the same in every 5.x
Qwen3 / Qwen3-MoE / Llama release: ``embed_tokens``, ``rotary_emb(x, position_ids)``,
``input_layernorm``, ``self_attn.{q,k,v,o}_proj`` (+ ``q_norm``/``k_norm`` on Qwen3),
``post_attention_layernorm``, ``mlp`` (dense, or the MoE block with transformers' own
expert kernels), ``norm``, ``lm_head``. The cache (:mod:`~kvgate.workload.mirror` or
:mod:`~kvgate.workload.paged`) is then the only KV storage, and every K/V byte is ours to
count. ``tests/test_workload_torch.py`` checks the loop against transformers' own forward.

**Fast random weights.** The model is built on the ``meta`` device (no memory, seconds
even for 30B-A3B), its parameter bytes are known before anything is allocated (for the
fit check), then ``to_empty(device)`` allocates it once and parameters are filled in
place: norms with 1, biases with 0, everything else ``normal_(0, initializer_range)``.
Non-persistent buffers (rotary ``inv_freq``) are rebuilt, since ``to_empty`` leaves them
uninitialized.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import torch

from kvgate.errors import KvgateError
from kvgate.workload.attention import attend, causal_mask

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def hf_config(cfg: dict[str, Any]):
    """A transformers ``PretrainedConfig`` from a config dict (by its ``model_type``)."""
    import transformers

    d = dict(cfg)
    mt = d.pop("model_type", None)
    if mt is None:
        raise KvgateError("model config lacks 'model_type'")
    try:
        return transformers.AutoConfig.for_model(mt, **d)
    except (ValueError, KeyError) as exc:
        raise KvgateError(f"transformers {transformers.__version__} cannot build model_type {mt!r}: {exc}") from exc


def _from_config(config, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    params = inspect.signature(AutoModelForCausalLM.from_config).parameters
    kw = {"dtype": dtype} if "dtype" in params or "kwargs" in params else {"torch_dtype": dtype}
    try:
        return AutoModelForCausalLM.from_config(config, **kw)
    except TypeError:
        return AutoModelForCausalLM.from_config(config, torch_dtype=dtype)


def meta_model(cfg: dict[str, Any], dtype: torch.dtype = torch.bfloat16):
    """The model on the ``meta`` device: structure and parameter shapes, no memory."""
    config = hf_config(cfg)
    with torch.device("meta"):
        model = _from_config(config, dtype)
    return model.eval()


def param_bytes(model) -> int:
    """Σ bytes of the model's parameters (tied parameters counted once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _rebuild_rotary(model, device: torch.device) -> None:
    inner = model.model
    rot = inner.rotary_emb
    with torch.device("cpu"):
        fresh = type(rot)(config=model.config)
    inner.rotary_emb = fresh.to(device)


@torch.no_grad()
def materialize_random(model, device: str | torch.device, *, seed: int = 0) -> None:
    """Allocate ``model`` (built on meta) on ``device`` and fill random weights in place.

    Norm weights 1, 1-D non-norm parameters (biases) 0, others ``N(0, initializer_range)``.
    """
    device = torch.device(device)
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    model.to_empty(device=device)
    if tied:
        model.tie_weights()
    std = float(getattr(model.config, "initializer_range", 0.02) or 0.02)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    norm_params = {id(p) for m in model.modules() if "norm" in type(m).__name__.lower() for p in m.parameters(recurse=False)}
    for p in model.parameters():
        if id(p) in norm_params:
            p.fill_(1.0)
        elif p.dim() == 1:
            p.zero_()
        else:
            p.normal_(0.0, std, generator=gen)
    _rebuild_rotary(model, device)


def load_pretrained(directory: str | Path, device: str | torch.device, dtype: torch.dtype):
    """Load weights and config from a local model directory (no network) onto ``device``.

    Raises:
        KvgateError: the directory has no loadable checkpoint.
    """
    from transformers import AutoModelForCausalLM

    d = Path(directory)
    if not (d / "config.json").exists():
        raise KvgateError(f"weights directory {d} has no config.json", hint="pass --weights random or a HF model directory")
    try:
        model = AutoModelForCausalLM.from_pretrained(str(d), dtype=dtype, local_files_only=True, device_map=str(device))
    except (ImportError, ValueError, TypeError):
        model = AutoModelForCausalLM.from_pretrained(str(d), dtype=dtype, local_files_only=True).to(device)
    except OSError as exc:
        raise KvgateError(f"cannot load weights from {d}: {exc}") from exc
    return model.eval()


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, transformers' ``rotate_half`` convention.

    x: ``[N, T, heads, head_dim]``; cos, sin: ``[N, T, head_dim]``.
    """
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.unsqueeze(2) + rot * sin.unsqueeze(2)


class DecodeLoop:
    """Forward passes of a transformers causal LM with K/V kept in a kvgate cache.

    Args:
        model: a ``*ForCausalLM`` of a supported type (see
            :data:`kvgate.workload.config.SUPPORTED_MODEL_TYPES`), in eval mode.
    """

    def __init__(self, model) -> None:
        self.model = model
        self.inner = model.model
        self.layers = list(self.inner.layers)
        first = self.layers[0].self_attn
        self.head_dim = int(first.head_dim)
        self.scale = float(getattr(first, "scaling", self.head_dim**-0.5))

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, seqs: Sequence[Hashable], starts: Sequence[int], cache) -> torch.Tensor:
        """Run ``input_ids`` (``[N, T]``, token ``t`` of row ``i`` at position
        ``starts[i] + t``) through the model, writing K/V to ``cache``.

        Returns:
            logits of the last position, ``[N, vocab]`` f32 (the LM head runs on the last
            position only, so a 2,048-token prefill does not materialize 2,048 × vocab).
        """
        n, t = input_ids.shape
        hd = self.head_dim
        cache.begin(seqs, starts, t)
        device = input_ids.device
        pos = torch.tensor(list(starts), dtype=torch.long, device=device)[:, None] + torch.arange(t, device=device)
        h = self.inner.embed_tokens(input_ids)  # [N, T, hidden]
        cos, sin = self.inner.rotary_emb(h, pos)  # [N, T, head_dim]
        mask = causal_mask(starts, t, cache.step.length, device)  # [N, 1, T, L]
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(n, t, -1, hd)  # [N, T, heads, head_dim]
            k = attn.k_proj(x).view(n, t, -1, hd)  # [N, T, kv_heads, head_dim]
            v = attn.v_proj(x).view(n, t, -1, hd)
            if getattr(attn, "q_norm", None) is not None:
                q, k = attn.q_norm(q), attn.k_norm(k)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
            cache.write(i, k, v)
            kc, vc = cache.read(i)  # [N, L, kv_heads, head_dim] dequantized
            o = attend(q, kc, vc, mask, self.scale)  # [N, T, heads, head_dim]
            del kc, vc
            h = h + attn.o_proj(o.reshape(n, t, -1))
            m = layer.mlp(layer.post_attention_layernorm(h))
            h = h + (m[0] if isinstance(m, tuple) else m)
        h = self.inner.norm(h[:, -1:])
        return self.model.lm_head(h)[:, 0].float()  # [N, vocab]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def generate(
    loop: DecodeLoop,
    cache,
    prompts: torch.Tensor,
    tokens: int,
    *,
    release: bool = True,
) -> dict[str, Any]:
    """Prefill ``prompts`` (``[N, P]``) together, then ``tokens`` greedy decode steps, all
    N sequences in one batch (the source's stream test).

    Writes ``P + tokens`` positions per sequence. Returns timings (seconds), the mirror's
    allocated bytes after the prefill (all slots / the pool are allocated by then), the
    generated ids ``[N, tokens]`` and whether every logit was finite.
    """
    n, p = prompts.shape
    device = prompts.device
    seqs = list(range(n))
    sync(device)
    t0 = time.perf_counter()
    logits = loop.forward(prompts, seqs, [0] * n, cache)
    nxt = logits.argmax(-1)
    finite = bool(torch.isfinite(logits).all())
    sync(device)
    t1 = time.perf_counter()
    mirror_bytes = cache.allocated_bytes()
    out = []
    for step in range(tokens):
        out.append(nxt)
        logits = loop.forward(nxt[:, None], seqs, [p + step] * n, cache)
        nxt = logits.argmax(-1)
    if tokens:
        finite = finite and bool(torch.isfinite(logits).all())
    sync(device)
    t2 = time.perf_counter()
    mirror_bytes = max(mirror_bytes, cache.allocated_bytes())
    if release:
        for s in seqs:
            cache.release(s)
    return {
        "prefill_s": t1 - t0,
        "decode_s": t2 - t1,
        "mirror_bytes": int(mirror_bytes),
        "generated": torch.stack(out, 1) if out else prompts[:, :0],
        "finite": finite,
    }
