"""Conformance: kvgate's ``contiguous`` bytes against transformers' own ``StaticCache``.

For every config in ``tests/data/configs/`` and every bundled preset, transformers builds
the model on the **meta** device (no memory, no weights), a ``StaticCache(config,
max_cache_len=L)`` is passed to one forward pass of B × 1 tokens (transformers allocates
cache tensors lazily, on the first update), and the bytes of every tensor each cache layer
holds (K, V, indexer keys, conv and recurrent states: shape × element size, as allocated)
are compared, layer by layer, with ``B × KVGeometry(spec, "bf16").layer_bytes(i, L)``.
The model is built in bfloat16, so the cache is in bf16 and kvgate is asked for bf16.

The truth here is transformers' own allocation, not a number kvgate printed. Configs
transformers has no class for (remote code) and the types kvgate refuses are listed in
``NOT_COMPARED`` with the reason; each is checked for the note or the error kvgate gives.

Run as a script for the table in ``benchmarks/RESULTS.md``:
``.venv/bin/python tests/test_conformance_transformers.py``.

Skipped cleanly when torch is not installed.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "tests" / "data" / "configs"
PRESETS = REPO / "src" / "kvgate" / "model" / "presets"

# Not divisible by any window or chunk in the configs, and below the smallest
# max_position_embeddings that matters; two sequences so a batch dimension is checked.
MAX_CACHE_LEN = 10_000
BATCH = 2

# name -> (what kvgate does, a string its note or error must contain)
# "refused": kvgate raises an error containing the string; "remote code": transformers
# 5.24 has no class, kvgate reads the raw JSON and its note names the model type;
# "flat": transformers' composite class ignores the flat file's layer fields (its own
# StaticCache then fails: "Could not find a sliding_window"), kvgate reads them into the
# text class and says so.
NOT_COMPARED: dict[str, tuple[str, str]] = {
    "step-3.7-flash": ("flat", "the config is flat"),
    "deepseek-v4-flash": ("refused", "compressed_sparse_attention"),
    "llama-3.3-nemotron-super-49b-v1": ("refused", "unknown model_type 'nemotron-nas'"),
    "mimo-7b-base": ("refused", "unknown model_type 'mimo'"),
    "kimi-k2-instruct": ("remote code", "kimi_k2"),
    # remote code without a layer pattern: refused here, sized in llama.cpp's layout as its
    # converter maps them (tests/test_llamacpp_config.py)
    "deepseek-moe-16b-base": ("refused", "unknown model_type 'deepseek'"),
    "internlm2-chat-1.8b": ("refused", "unknown model_type 'internlm2'"),
    # encoder-decoder models: compared below with the EncoderDecoderCache generate builds
    "whisper-small": ("encoder-decoder", "encoder-decoder: 12 cross-attention layers"),
    "t5-small": ("encoder-decoder", "encoder-decoder: 6 cross-attention layers"),
    "kobart-summary-v3": ("encoder-decoder", "encoder-decoder: 6 cross-attention layers"),
}


# Remote-code model types transformers runs under its own name for the text model:
# MiniMax-M3's flat ``minimax_m3`` file is ``MiniMaxM3VLTextConfig`` (MiniMaxAI/MiniMax-M3).
TRANSFORMERS_CLASS = {"minimax_m3": "minimax_m3_vl_text"}


def all_configs() -> list[tuple[str, Path]]:
    """(name, path) of every conformance config: test data first, then presets."""
    out = [(p.stem, p) for p in sorted(CONFIGS.glob("*.json"))]
    out += [(f"preset:{p.stem}", p) for p in sorted(PRESETS.glob("*.json"))]
    return out


def _tensors(obj: Any) -> list[Any]:
    """Every tensor of ≥ 2 dimensions an object holds (attributes, lists, dicts); 0/1-D
    bookkeeping such as ``cumulative_length`` is not cache."""
    import torch

    out: list[Any] = []
    seen: set[int] = set()

    def visit(v: Any, depth: int = 0) -> None:
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


def transformers_layer_bytes(raw: dict[str, Any], max_cache_len: int = MAX_CACHE_LEN,
                             batch: int = BATCH) -> tuple[list[int], list[str]]:
    """Per-layer bytes of transformers' ``StaticCache`` after one forward on meta, and the
    cache layer class names. Quantization configs are dropped (they change weights, not
    the cache)."""
    import torch
    import transformers

    cfg_dict = {k: v for k, v in raw.items() if k != "quantization_config"}
    mt = cfg_dict["model_type"]
    if mt not in transformers.CONFIG_MAPPING and isinstance(cfg_dict.get("text_config"), dict):
        # a wrapper transformers does not know: its text model is what runs (and caches)
        cfg_dict = {"torch_dtype": cfg_dict.get("torch_dtype"), **cfg_dict["text_config"]}
        mt = cfg_dict["model_type"]
    config = transformers.CONFIG_MAPPING[TRANSFORMERS_CLASS.get(mt, mt)].from_dict(cfg_dict)
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        try:
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, trust_remote_code=False)
        except ValueError:  # composite configs (Qwen3-VL): the base model takes input_ids too
            model = transformers.AutoModel.from_config(config, dtype=torch.bfloat16, trust_remote_code=False)
    cache = transformers.StaticCache(config=model.config, max_cache_len=max_cache_len)
    ids = torch.zeros((batch, 1), dtype=torch.long, device="meta")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model(input_ids=ids, cache=cache, use_cache=True)
    sizes = [sum(t.numel() * t.element_size() for t in _tensors(layer)) for layer in cache.layers]
    return sizes, [type(layer).__name__ for layer in cache.layers]


def kvgate_layer_bytes(path: Path, max_cache_len: int = MAX_CACHE_LEN, batch: int = BATCH) -> list[int]:
    from kvgate.geometry import KVGeometry
    from kvgate.model import load_model

    g = KVGeometry(load_model(path), "bf16")
    return [batch * g.layer_bytes(i, max_cache_len) for i in range(g.model.num_layers)]


def compare(name: str, path: Path) -> dict[str, Any]:
    """One conformance row: ``status`` exact / off / refused / remote code / error."""
    from kvgate.errors import KvgateError

    row: dict[str, Any] = {"name": name, "model_type": json.loads(path.read_text()).get("model_type")}
    if name in NOT_COMPARED:
        what, needle = NOT_COMPARED[name]
        row.update(status=what, detail=needle)
        return row
    try:
        ours = kvgate_layer_bytes(path)
    except KvgateError as exc:
        row.update(status="kvgate error", detail=exc.message)
        return row
    try:
        theirs, classes = transformers_layer_bytes(json.loads(path.read_text()))
    except Exception as exc:  # noqa: BLE001 - reported in the row
        row.update(status="transformers error", detail=f"{type(exc).__name__}: {str(exc)[:200]}", kvgate=sum(ours))
        return row
    off = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    if len(ours) != len(theirs):
        off.append(-1)
    row.update(status="exact" if not off else "off", kvgate=sum(ours), transformers=sum(theirs), layers=len(theirs),
               off_layers=off[:8], classes=sorted(set(classes)))
    return row


# --------------------------------------------------------------------------- encoder-decoder

# (config, encoder input tokens: None for Whisper, whose encoder length the model fixes)
ENCDEC_CASES = [("whisper-small", None), ("t5-small", 4), ("t5-small", 1000), ("kobart-summary-v3", 37)]
ENCDEC_FIXTURE = REPO / "tests" / "data" / "hf_encdec_cache_bytes.json"


def transformers_encdec_bytes(raw: dict[str, Any], enc_tokens: int | None, max_cache_len: int = MAX_CACHE_LEN,
                              batch: int = BATCH) -> dict[str, Any]:
    """Per-layer bytes of the ``EncoderDecoderCache`` that ``generate(cache_implementation=
    "static")`` builds, on meta: transformers 5.25 ``generation/utils.py``
    ``_prepare_static_cache`` makes ``EncoderDecoderCache(StaticCache(decoder config,
    max_cache_len), StaticCache(decoder config, max_cache_len=encoder_outputs[0].shape[1]))``
    after running the encoder; here the encoder runs on B inputs (Whisper: the
    ``max_source_positions × 2`` mel frames its encoder requires; else ``enc_tokens``
    token ids), then one decoder step of B × 1 tokens fills both caches."""
    import torch
    import transformers

    config = transformers.CONFIG_MAPPING[raw["model_type"]].from_dict(raw)
    auto = transformers.AutoModelForSpeechSeq2Seq if raw["model_type"] == "whisper" else \
        transformers.AutoModelForSeq2SeqLM
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = auto.from_config(config, dtype=torch.bfloat16)
    if raw["model_type"] == "whisper":
        frames = config.max_source_positions * 2
        inputs = {"input_features": torch.zeros((batch, config.num_mel_bins, frames), dtype=torch.bfloat16,
                                                device="meta")}
    else:
        inputs = {"input_ids": torch.zeros((batch, enc_tokens), dtype=torch.long, device="meta")}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        enc = model.get_encoder()(**inputs)
        dec = model.config.get_text_config(decoder=True)
        cache = transformers.EncoderDecoderCache(
            transformers.StaticCache(config=dec, max_cache_len=max_cache_len),
            transformers.StaticCache(config=dec, max_cache_len=enc[0].shape[1]))
        ids = torch.zeros((batch, 1), dtype=torch.long, device="meta")
        model(encoder_outputs=enc, decoder_input_ids=ids, cache=cache, use_cache=True)

    def sizes(c: Any) -> list[int]:
        return [sum(t.numel() * t.element_size() for t in _tensors(layer)) for layer in c.layers]

    return {"encoder_positions": int(enc[0].shape[1]), "self": sizes(cache.self_attention_cache),
            "cross": sizes(cache.cross_attention_cache)}


def kvgate_encdec_bytes(path: Path, enc_tokens: int | None, max_cache_len: int = MAX_CACHE_LEN,
                        batch: int = BATCH) -> dict[str, list[int]]:
    """kvgate's per-layer contiguous bytes, self-attention layers then cross-attention ones."""
    from kvgate.geometry import KVGeometry
    from kvgate.model import load_model
    from kvgate.model.encdec import is_encoder_cross, with_encoder_len

    model = load_model(path)
    if enc_tokens is not None:
        model = with_encoder_len(model, enc_tokens)
    g = KVGeometry(model, "bf16")
    per = [batch * g.layer_bytes(i, max_cache_len) for i in range(model.num_layers)]
    cross = [is_encoder_cross(layer) for layer in model.layers]
    return {"self": [b for b, c in zip(per, cross) if not c], "cross": [b for b, c in zip(per, cross) if c]}


@pytest.mark.parametrize("name,enc_tokens", ENCDEC_CASES, ids=[f"{n}-{e}" for n, e in ENCDEC_CASES])
def test_encoder_decoder_equals_transformers_encoder_decoder_cache(name: str, enc_tokens: int | None) -> None:
    pytest.importorskip("torch")
    path = CONFIGS / f"{name}.json"
    theirs = transformers_encdec_bytes(json.loads(path.read_text()), enc_tokens)
    assert kvgate_encdec_bytes(path, enc_tokens) == {"self": theirs["self"], "cross": theirs["cross"]}


@pytest.mark.parametrize("name,enc_tokens", ENCDEC_CASES, ids=[f"{n}-{e}" for n, e in ENCDEC_CASES])
def test_encoder_decoder_equals_recorded_transformers_bytes(name: str, enc_tokens: int | None) -> None:
    """The same comparison against transformers' bytes recorded on the meta device (torch
    2.13 CPU, transformers 5.25; this file run as a script with ``--record-encdec``), so it
    runs where torch is not installed."""
    rec = json.loads(ENCDEC_FIXTURE.read_text())["records"][f"{name}:{enc_tokens}"]
    assert (rec["max_cache_len"], rec["batch"]) == (MAX_CACHE_LEN, BATCH)
    assert kvgate_encdec_bytes(CONFIGS / f"{name}.json", enc_tokens) == {"self": rec["self"], "cross": rec["cross"]}


def test_whisper_small_cross_attention_bytes_are_the_encoder_length_times_kv() -> None:
    """12 layers × 12 heads × 64 × 1,500 encoder positions × K,V × 2 B × 2 sequences."""
    rec = json.loads(ENCDEC_FIXTURE.read_text())["records"]["whisper-small:None"]
    assert rec["encoder_positions"] == 1500
    assert sum(rec["cross"]) == 12 * 12 * 64 * 1500 * 2 * 2 * 2 == 110_592_000


def record_encdec() -> None:
    """Write ``ENCDEC_FIXTURE`` from transformers (needs torch)."""
    import platform

    import torch
    import transformers

    records = {}
    for name, enc_tokens in ENCDEC_CASES:
        rec = transformers_encdec_bytes(json.loads((CONFIGS / f"{name}.json").read_text()), enc_tokens)
        records[f"{name}:{enc_tokens}"] = {"max_cache_len": MAX_CACHE_LEN, "batch": BATCH,
                                           "encoder_input_tokens": enc_tokens, **rec}
    basis = {"torch": torch.__version__, "transformers": transformers.__version__, "device": "meta",
             "python": platform.python_version(), "dtype": "bfloat16",
             "made_by": "tests/test_conformance_transformers.py --record-encdec"}
    ENCDEC_FIXTURE.write_text(json.dumps({"basis": basis, "records": records}, indent=1) + "\n")


# --------------------------------------------------------------------------- tests

CASES = [(n, p) for n, p in all_configs() if n not in NOT_COMPARED]


@pytest.mark.parametrize("name,path", CASES, ids=[n for n, _ in CASES])
def test_contiguous_equals_transformers_static_cache(name: str, path: Path) -> None:
    pytest.importorskip("torch")
    theirs, classes = transformers_layer_bytes(json.loads(path.read_text()))
    ours = kvgate_layer_bytes(path)
    assert len(ours) == len(theirs)
    assert [(i, c, b) for i, (c, b) in enumerate(zip(classes, ours))] == \
        [(i, c, b) for i, (c, b) in enumerate(zip(classes, theirs))]


@pytest.mark.parametrize("name", sorted(NOT_COMPARED))
def test_not_compared_configs_say_why(name: str) -> None:
    from kvgate.errors import KvgateError
    from kvgate.model import load_model

    what, needle = NOT_COMPARED[name]
    path = CONFIGS / f"{name}.json"
    if what == "refused":
        with pytest.raises(KvgateError) as e:
            load_model(path)
        assert needle in e.value.message
    else:
        spec = load_model(path)
        assert any(needle in n for n in spec.notes), spec.notes
        if what == "remote code":
            assert any("not in transformers" in n for n in spec.notes)


def test_config_count() -> None:
    """At least 30 published configs (beside the presets) are checked or explained."""
    assert len(list(CONFIGS.glob("*.json"))) >= 30


if __name__ == "__main__":  # the conformance table
    if sys.argv[1:] == ["--record-encdec"]:
        record_encdec()
        sys.exit(0)
    names = sys.argv[1:]
    rows = [compare(n, p) for n, p in all_configs() if not names or n in names]
    for r in rows:
        print(json.dumps(r), flush=True)
