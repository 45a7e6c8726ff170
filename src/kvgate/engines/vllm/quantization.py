"""vLLM's ``--quantization`` (``-q``) as ``kvgate fit`` takes it.

vLLM (``vllm/config/model.py`` ``ModelConfig._verify_quantization``, read at commit
0052a5b8, the 0.11 series; the same check since 0.4)::

    # a method may take over the checkpoint's (override_quantization_method)
    ...
    if self.quantization is None:
        self.quantization = quant_method
    elif self.quantization != quant_method:
        raise ValueError(
            "Quantization method specified in the model config "
            f"({quant_method}) does not match the quantization "
            f"method specified in the `quantization` argument "
            f"({self.quantization}).")

The overrides that take the user's value (``gptq_marlin.py`` / ``awq_marlin.py``
``override_quantization_method``: ``is_valid_user_quant = user_quant is None or user_quant
== "marlin" or user_quant == "gptq_marlin"`` (``"awq_marlin"``)): a GPTQ checkpoint runs
with ``gptq``, ``gptq_marlin`` or ``marlin``, an AWQ one with ``awq``, ``awq_marlin`` or
``marlin``; any other checkpoint only with its own ``quant_method``.

What it changes:

- on a quantized checkpoint, nothing that kvgate sizes: the weights are priced from the
  checkpoint's ``quantization_config`` (or read from its files) either way;
- on an unquantized checkpoint, vLLM quantizes the weights while loading them. ``fp8`` is
  modelled (:func:`online_fp8_weight_bytes`, below); any other method (``bitsandbytes``:
  four bits, ...) is not — kvgate's weights would be the checkpoint's, so it refuses unless
  ``--weights-bytes`` gives the loaded size;
- never the KV cache: its dtype is ``--kv-cache-dtype`` (``auto``: the model's dtype).

**Online FP8** (``--quantization fp8`` on a checkpoint without ``quantization_config``), read
at vLLM 0.22.1 (PyPI sdist; the same classes, scales and ``qwen3_moe.py`` router at 0.19.0),
``vllm/model_executor/layers/quantization/fp8.py``:
``model_loader/weight_utils.py`` ``get_quant_config`` builds ``Fp8Config()`` (no config file:
``is_checkpoint_fp8_serialized=False``, ``activation_scheme="dynamic"``, no ``ignored_layers``,
no ``weight_block_size``), and ``Fp8Config.get_quant_method`` gives::

    if isinstance(layer, LinearBase):
        ...
        if not self.is_checkpoint_fp8_serialized:
            online_method = Fp8OnlineLinearMethod(self)
    elif isinstance(layer, RoutedExperts):
        ...
            moe_quant_method = Fp8OnlineMoEMethod(self, layer)

- every linear layer (``LinearBase``: QKV, output, dense and shared-expert MLPs, MLA
  projections) is created on the meta device in the model dtype and, after loading,
  ``Fp8OnlineLinearMethod.process_weights_after_loading`` keeps
  ``qweight, weight_scale = ops.scaled_fp8_quant(layer.weight, scale=None)``: the weight in
  one byte an element and one float32 scale per layer (per tensor; ``input_scale = None``);
- the routed experts (``Fp8OnlineMoEMethod``): ``w13``/``w2`` as ``torch.empty_like(...,
  dtype=fp8_dtype)``, one byte an element, and ``w13_scale``/``w2_scale`` float32 of
  ``num_experts`` each;
- what is not a ``LinearBase`` or ``RoutedExperts`` keeps the model dtype: the embedding
  and the ``lm_head`` (``ParallelLMHead`` is a ``VocabParallelEmbedding``), norms, biases;
- the MoE router is a ``LinearBase`` quantized only where the model passes its
  ``quant_config`` to it: ``qwen3_moe.py`` (``self.gate = ReplicatedLinear(...,
  quant_config=quant_config)``) and ``gemma4.py`` (``Gemma4Router(config,
  quant_config=quant_config)``); ``qwen2_moe``, ``qwen3_next``, ``mixtral``, ``gpt_oss``,
  ``llama4``, ``olmoe``, ``granitemoe``, ``phimoe``, ``minimax_m2`` pass ``quant_config=None``
  (:data:`ROUTER_QUANTIZED`).

kvgate prices that on its config inventory (:func:`kvgate.model.quant.priced`): each linear
at in × out bytes plus a 4-byte scale. vLLM fuses q/k/v and gate/up into one layer with one
scale, so kvgate counts a few scales more (4 B each: ≤ 12 KiB on a 48-layer MoE of 128
experts). Not counted: linear layers inside a recurrent mixer (kvgate prices its parameters
whole, in the model dtype) and vision towers (not in the inventory), so those models are
over-estimated; the rotary cache and vocabulary padding, as for any estimate (the
estimate's band, :data:`kvgate.engines.vllm.budget.WEIGHTS_ESTIMATE`, holds them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvgate.errors import KvgateError

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.model.weights import WeightBytes

#: model types whose vLLM model file builds the MoE router with the model's ``quant_config``
#: (0.22.1: ``qwen3_moe.py``, ``gemma4.py``): online FP8 quantizes it (module docstring)
ROUTER_QUANTIZED = frozenset({"qwen3_moe", "gemma4", "gemma4_text"})

#: a checkpoint's ``quant_method`` → the ``--quantization`` values vLLM runs it with
_ACCEPTS = {"gptq": ("gptq", "gptq_marlin", "marlin"), "awq": ("awq", "awq_marlin", "marlin")}


def checkpoint_method(config: dict[str, Any]) -> str | None:
    """The checkpoint's ``quantization_config.quant_method`` (lower case), ``None`` if none."""
    for c in (config, config.get("text_config") or {}):
        q = c.get("quantization_config") if isinstance(c, dict) else None
        if isinstance(q, dict) and q.get("quant_method"):
            return str(q["quant_method"]).lower()
    return None


def check_quantization(given: str | None, config: dict[str, Any], weights_given: bool) -> str | None:
    """Check ``--quantization given`` against the checkpoint (module docstring).

    Returns:
        a note for the answer, or ``None`` when no ``--quantization`` was given.

    Raises:
        KvgateError: the value vLLM stops with (a method other than the checkpoint's), or
            online quantization of an unquantized checkpoint without ``--weights-bytes``.
    """
    if given is None:
        return None
    q = given.strip().lower()
    method = checkpoint_method(config)
    if method is not None:
        if q not in _ACCEPTS.get(method, (method,)):
            raise KvgateError(f"--quantization {given}: vLLM stops: ValueError: Quantization method specified in the "
                              f"model config ({method}) does not match the quantization method specified in the "
                              f"`quantization` argument ({q}).",
                              hint=f"leave --quantization out (vLLM reads {method} from the checkpoint)")
        return (f"--quantization {q}: the checkpoint's own {method} weights, priced from its quantization_config; "
                "the KV cache's dtype is --kv-cache-dtype's")
    if q == "fp8" and not weights_given:
        return ("--quantization fp8 on an unquantized checkpoint: vLLM quantizes the linear layers and experts to FP8 "
                "while loading (one byte a weight, a float32 scale a tensor); embeddings, lm_head and norms stay in "
                "the model dtype (vllm/model_executor/layers/quantization/fp8.py, 0.22.1); the KV cache's dtype is "
                "--kv-cache-dtype's")
    if not weights_given:
        raise KvgateError(f"--quantization {given} on an unquantized checkpoint: vLLM quantizes the weights while "
                          "loading them, and kvgate does not model the loaded size",
                          hint="give the loaded weights with --weights-bytes (vLLM's log: 'Model loading took X GiB'), "
                               "or leave --quantization out")
    return (f"--quantization {q}: vLLM quantizes the weights while loading (the size is --weights-bytes's); the KV "
            "cache's dtype is --kv-cache-dtype's")


def online_quantization(given: str | None, config: dict[str, Any]) -> str | None:
    """The method vLLM applies while loading: ``"fp8"`` for ``--quantization fp8`` on a
    checkpoint without ``quantization_config``; ``None`` otherwise (the checkpoint's own
    weights, or a method kvgate does not model)."""
    if given is None or checkpoint_method(config) is not None:
        return None
    return "fp8" if given.strip().lower() == "fp8" else None


def online_fp8_weight_bytes(config: dict[str, Any], dtype: str | None = None) -> WeightBytes:
    """The bytes vLLM holds after loading an unquantized checkpoint with ``--quantization
    fp8`` (module docstring), from ``config``; ``dtype``: the model dtype vLLM runs in
    (default the config's). An estimate (``exact=False``).

    Raises:
        ConfigError: missing fields; a dtype with no known size.
    """
    from kvgate.model import text_config  # noqa: PLC0415
    from kvgate.model.quant import Scheme, dtype_bytes, priced  # noqa: PLC0415
    from kvgate.model.weights import WeightBytes  # noqa: PLC0415

    mt = str(text_config(config).get("model_type") or config.get("model_type") or "")
    scheme = Scheme("fp8", "vLLM online FP8 (--quantization fp8): per-tensor", bits=8, scale_bytes=4,
                    routers=mt in ROUTER_QUANTIZED)
    b = dtype_bytes(config, dtype)
    q = priced(config, b, scheme=scheme)
    note = (f"estimate from config.json under vLLM's online FP8 (--quantization fp8): {q.quantized:,} B of linear "
            f"layers and experts in FP8 with float32 per-tensor scales, {q.unquantized:,} B kept in the model dtype "
            f"(embeddings, lm_head, norms{'' if scheme.routers else ', routers'}); vision towers not counted")
    return WeightBytes(bytes=q.total, exact=False, source="config", params=q.params, notes=[note])
