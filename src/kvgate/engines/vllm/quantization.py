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
- on an unquantized checkpoint, vLLM quantizes the weights while loading them (``fp8``:
  the linear layers in one byte; ``bitsandbytes``: four bits): not modelled — kvgate's
  weights would be the checkpoint's, so it refuses unless ``--weights-bytes`` gives the
  loaded size;
- never the KV cache: its dtype is ``--kv-cache-dtype`` (``auto``: the model's dtype).
"""

from __future__ import annotations

from typing import Any

from kvgate.errors import KvgateError

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
    if not weights_given:
        raise KvgateError(f"--quantization {given} on an unquantized checkpoint: vLLM quantizes the weights while "
                          "loading them, and kvgate does not model the loaded size",
                          hint="give the loaded weights with --weights-bytes (vLLM's log: 'Model loading took X GiB'), "
                               "or leave --quantization out")
    return (f"--quantization {q}: vLLM quantizes the weights while loading (the size is --weights-bytes's); the KV "
            "cache's dtype is --kv-cache-dtype's")
