"""What vLLM V1's profile run holds for a multimodal model's encoder, from its code.

``vllm/v1/worker/gpu_model_runner.py`` ``profile_run`` (0.11.0, 0.12.0, 0.19.0) runs the
encoder once on a dummy batch of ``max_items_per_batch`` items of the modality with the most
tokens per item, puts the outputs in ``self.encoder_cache``, and only then runs the language
model's ``_dummy_run`` and ``_dummy_sampler_run``; ``self.encoder_cache.clear()`` comes after
both. So the encoder cache is held through the language model's peak::

    0.11.x  if encoder_output_shape[0] < encoder_budget:
                for output in dummy_encoder_outputs:
                    expanded = output.new_zeros((encoder_budget, encoder_output_shape[-1]))
    0.12.x  if encoder_output_shape[0] < max_mm_tokens_per_item:
                    expanded = output.new_zeros((max_mm_tokens_per_item, encoder_hidden_size))
            self.encoder_cache["tmp"] = dict(enumerate(dummy_encoder_outputs))
    0.13 …  (0.13.0, 0.14.0, 0.16.0, 0.17.0, 0.18.1, 0.19.0: no new_zeros)
            for i, output in enumerate(dummy_encoder_outputs):
                self.encoder_cache[f"tmp_{i}"] = output

In 0.11–0.12 the loop variable ``output`` (the last unexpanded output) also lives on through
``_dummy_run`` (it is rebound only to the sampler's output). ``batched_dummy_mm_inputs`` (the
processor's pixel values, float32, moved to the GPU by ``group_mm_kwargs_by_modality``) is a
local of ``profile_run`` too.

The budget (``vllm/v1/core/encoder_cache_manager.py`` ``compute_mm_encoder_budget``, 0.11.0):
``encoder_budget = max(max_num_encoder_input_tokens, max_tokens_per_mm_item)`` (the scheduler's
``max_num_encoder_input_tokens`` defaults to ``max_num_batched_tokens``), and
``vllm/v1/worker/utils.py`` ``MultiModalBudget.get_max_items``: ``max_items_per_batch =
max(1, min(encoder_budget // max_tokens_per_item, max_num_seqs × max_items_per_prompt))``,
``max_items_per_prompt = max(1, min(limit, max_model_len // max_tokens_per_item))``.

Modelled for the Qwen3-VL family (``qwen3_vl``, ``qwen3_vl_moe``, ``qwen3_5``, ``qwen3_5_moe``:
``vllm/model_executor/models/qwen3_vl.py``, ``qwen3_5.py`` uses its ``Qwen3VLProcessingInfo``):

- image: ``get_image_size_with_most_features`` resizes a 9,999,999² image with the image
  processor's ``smart_resize`` (transformers ``qwen2_vl/image_processing_qwen2_vl.py``,
  factor ``patch_size × spatial_merge_size``, ``size`` = ``{shortest_edge, longest_edge}``);
  tokens = ``grid_t × grid_h × grid_w / merge²`` with one frame padded to ``temporal_patch_size``.
- video, 0.11–0.12: ``_get_max_video_frames(max_model_len)`` grows the frames (from 2) while the
  video's tokens stay ≤ ``max_model_len``, capped at ``_MAX_FRAMES_PER_VIDEO = 24576``; the
  frames are resized together by the video processor's ``smart_resize``
  (``qwen3_vl/video_processing_qwen3_vl.py``: ``t × h × w ≤ longest_edge``); and
  ``get_max_video_tokens`` returns ``int(video_soft_tokens × 12.5)`` ("one video token is
  converted to <{timestamp} seconds> … on average 9.5 tokens"). From 0.13 the soft tokens alone
  (0.13.0) or two frames at ``longest_edge // temporal_patch_size`` (0.19.0): fewer than an image's.
- the encoder's output width: ``out_hidden_size × (1 + len(deepstack_visual_indexes))``
  (``Qwen3_VisionTransformer.out_hidden_size``, "out_hidden_size is enlarged due to deepstack").

The processor's sizes are not in config.json (``preprocessor_config.json``,
``video_preprocessor_config.json``); kvgate takes the Qwen checkpoints' published values
(image ``{"shortest_edge": 65536, "longest_edge": 16777216}``, video ``{"shortest_edge": 4096,
"longest_edge": 25165824}``), which the logs confirm: "Encoder cache will be initialized with a
budget of 153600 tokens, and profiled with 1 video items" (Qwen3-VL-30B-A3B, 0.11 and 0.12:
``int(12288 × 12.5)``) and "… 16384 tokens, … 1 image items" (Qwen3.5-27B, 0.19).

Not modelled: the encoder's own forward peak (its activations on the dummy batch, before the
cache is filled), taken to be below the cache plus the language model's peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

#: the model types whose profile run is modelled (vLLM's Qwen3VLProcessingInfo)
QWEN3_VL_TYPES = frozenset({"qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"})
#: the Qwen3-VL / Qwen3.5 checkpoints' preprocessor_config.json and video_preprocessor_config.json sizes
IMAGE_SIZE = (65536, 16777216)
VIDEO_SIZE = (4096, 25165824)
#: vllm/model_executor/models/qwen3_vl.py, 0.11.0-0.14.0
MAX_FRAMES_PER_VIDEO = 24576
#: bytes of a processor's pixel value (transformers' fast processors normalize in float32)
PIXEL_BYTES = 4


@dataclass(frozen=True)
class EncoderProfile:
    """The encoder's dummy batch in vLLM's profile run and what stays on the GPU through the
    language model's peak.

    Attributes:
        modality: ``image`` or ``video``.
        items: items in the dummy batch.
        max_tokens_per_item: ``max_tokens_by_modality[modality]`` as vLLM computes it.
        budget: the encoder budget vLLM prints.
        out_tokens: encoder output tokens per item.
        out_dim: the encoder's output width.
        patches: patches per item (the encoder's input rows).
        patch_dim: values per patch (``in_channels × temporal_patch_size × patch_size²``).
        held: bytes held by the encoder cache (and, 0.11–0.12, the last unexpanded output).
        pixels: bytes of the pixel values on the GPU (float32).
        source: the rule, as text.
    """

    modality: str
    items: int
    max_tokens_per_item: int
    budget: int
    out_tokens: int
    out_dim: int
    patches: int
    patch_dim: int
    held: int
    pixels: int
    source: str


def image_smart_resize(height: float, width: float, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers ``qwen2_vl/image_processing_qwen2_vl.py`` ``smart_resize``, as written."""
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return int(h_bar), int(w_bar)


def video_smart_resize(num_frames: int, height: float, width: float, temporal_factor: int, factor: int,
                       min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers ``qwen3_vl/video_processing_qwen3_vl.py`` ``smart_resize``, as written."""
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return int(h_bar), int(w_bar)


def _tokens(frames: int, h: int, w: int, patch: int, merge: int, tpatch: int) -> tuple[int, int]:
    """``(patches, tokens)`` of ``_get_vision_info``: frames padded to ``temporal_patch_size``."""
    padded = frames + frames % tpatch
    patches = max(padded // tpatch, 1) * (h // patch) * (w // patch)
    return patches, patches // merge**2


@lru_cache(maxsize=64)
def _video(seq_len: int, patch: int, merge: int, tpatch: int) -> tuple[int, int, int]:
    """0.11–0.12: ``(frames, patches, soft tokens)`` of the dummy video of most features."""
    factor = patch * merge
    ih, iw = image_smart_resize(9999999, 9999999, factor, *IMAGE_SIZE)

    def info(n: int) -> tuple[int, int]:
        h, w = video_smart_resize(n, ih, iw, tpatch, factor, *VIDEO_SIZE)
        return _tokens(n, h, w, patch, merge, tpatch)

    n = 2  # _get_max_video_frames(max_tokens=seq_len, start_num_frames=2); min(…, 24576) stops it there
    while n < MAX_FRAMES_PER_VIDEO and info(n + 1)[1] <= seq_len:
        n += 1
    patches, tokens = info(n)
    return n, patches, tokens


def encoder_profile(config: dict[str, Any], version: tuple[int, ...] | None, *, max_model_len: int,
                    max_num_batched_tokens: int, max_num_seqs: int, dtype_bytes: int) -> EncoderProfile | None:
    """The profile run's encoder batch for a full (not text-only) ``config`` of the Qwen3-VL
    family under V1 ``version`` (module docstring); ``None`` for any other model. A release
    not known: the 0.13+ rule (the smaller cache)."""
    if str(config.get("model_type")) not in QWEN3_VL_TYPES or not isinstance(config.get("vision_config"), dict):
        return None
    vc = config["vision_config"]
    if not isinstance(vc.get("out_hidden_size"), int) or vc["out_hidden_size"] <= 0:
        return None  # no output width: nothing to size
    patch, merge = int(vc.get("patch_size", 16)), int(vc.get("spatial_merge_size", 2))
    tpatch, chans = int(vc.get("temporal_patch_size", 2)), int(vc.get("in_channels", 3))
    out_dim = int(vc["out_hidden_size"]) * (1 + len(vc.get("deepstack_visual_indexes") or []))
    factor = patch * merge
    ih, iw = image_smart_resize(9999999, 9999999, factor, *IMAGE_SIZE)
    img_patches, img_tokens = _tokens(1, ih, iw, patch, merge, tpatch)
    old = version is not None and (0, 11) <= version < (0, 13)
    modality, max_tok, out_tok, patches = "image", img_tokens, img_tokens, img_patches
    src = f"1 image of {ih}x{iw}: {img_tokens:,} tokens"
    if old:
        frames, v_patches, v_soft = _video(max_model_len, patch, merge, tpatch)
        v_max = int(v_soft * 12.5)
        if v_max > img_tokens:
            modality, max_tok, out_tok, patches = "video", v_max, v_soft, v_patches
            src = f"1 video of {frames:,} frames: {v_soft:,} tokens, counted as int({v_soft:,} × 12.5) = {v_max:,}"
    budget = max(max_num_batched_tokens, max_tok)
    per_prompt = max(1, max_model_len // max_tok)
    items = max(1, min(budget // max_tok, max_num_seqs * per_prompt))
    if old and version is not None:
        rows = budget if version < (0, 12) else max_tok
        if out_tok < rows:
            held = (items * rows + out_tok) * out_dim * dtype_bytes
            why = (f"{items} output(s) expanded to {rows:,} rows (new_zeros, {'0.11' if version < (0, 12) else '0.12'}) "
                   f"+ the last unexpanded ({out_tok:,} rows)")
        else:
            held, why = items * out_tok * out_dim * dtype_bytes, f"{items} output(s) of {out_tok:,} rows"
    else:
        held, why = items * out_tok * out_dim * dtype_bytes, f"{items} output(s) of {out_tok:,} rows"
    pd = chans * tpatch * patch * patch
    pixels = items * patches * pd * PIXEL_BYTES
    return EncoderProfile(modality, items, max_tok, budget, out_tok, out_dim, patches, pd, held, pixels,
                          f"encoder cache held through the LM's profile: {src}; budget {budget:,}; {why} × {out_dim:,} "
                          f"× {dtype_bytes} B (vllm/v1/worker/gpu_model_runner.py profile_run)")
