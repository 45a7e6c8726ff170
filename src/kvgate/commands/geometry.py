"""``kvgate geometry MODEL``: KV bytes per token, per slot, for N slots, per layer."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kvgate.commands._args import add_engine_flags, engine_options_from_args
from kvgate.commands._types import nonneg_int, positive_int
from kvgate.output import emit, table
from kvgate.units import fmt_bytes, fmt_human, fmt_mib

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.geometry import KVGeometry

NAME = "geometry"
HELP = "KV bytes per token, per slot at --max-seq, and for --slots (per layer with --by-layer)"
DESCRIPTION = """\
KV-cache bytes of a model: per token, per slot of --max-seq positions, and for --slots
slots, per tensor-parallel rank with --tp.

  kvgate geometry qwen3-30b-a3b --max-seq 8192 --kv-format int8-f32scale --slots 8
  kvgate geometry ./Llama-3.1-8B/config.json --max-seq 131072 --tp 2 --by-layer
  kvgate geometry ./Qwen3-8B --max-model-len 32768 --max-num-seqs 16 --kv-cache-dtype fp8
      (vLLM's flags)
  kvgate geometry model.gguf -c 65536 -np 8 -ctk q8_0 -ctv q8_0   (llama.cpp's)

MODEL is a config.json path, a model directory, a GGUF file or a bundled preset
(kvgate geometry list).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_engine_flags(p, model="positional",
                     max_seq_help="positions per slot (default: the model's max_position_embeddings; vLLM "
                                  "--max-model-len; llama.cpp -c, whole context / -np)",
                     slots_help="concurrent slots (default 1; vLLM --max-num-seqs; llama.cpp -np)")
    p.add_argument("--by-layer", action="store_true", help="per-layer breakdown")
    p.add_argument("--images", type=nonneg_int, default=None, metavar="N",
                   help="images per sequence held by cross-attention layers (Llama-3.2-Vision mllama: "
                        "tiles x (patches + 1) positions each); default 0, text only")
    p.add_argument("--encoder-len", type=positive_int, default=None, metavar="N",
                   help="encoder-decoder models (T5, BART): the input's length in tokens, held by each "
                        "cross-attention layer; default --max-seq (Whisper: fixed at 1,500 by the model)")
    p.add_argument("--kv-available", default=None,
                   help="with --layout vllm: vLLM's 'Available KV cache memory' (per rank); prints the "
                        "'GPU KV cache size' and 'Maximum concurrency' lines vLLM logs")


def _slot_words(layout: str, max_seq: int, slots: int) -> tuple[str, str]:
    """The labels of one sequence and of N, in the layout's words: the engine's flags for
    vLLM (``--max-model-len``, ``--max-num-seqs``), SGLang (``--context-length``) and
    llama.cpp (``-c`` / ``-np``: one sequence's cells); slots for the contiguous layout."""
    from kvgate.engines.registry import ENGINES, get_engine  # noqa: PLC0415

    if layout in ENGINES:
        return get_engine(layout).slot_words(max_seq, slots)
    s = "s" if slots != 1 else ""
    return f"one slot at max_seq {max_seq:,}", f"{slots} slot{s}"


def geometry_report(geo: KVGeometry, max_seq: int, slots: int, by_layer: bool) -> dict[str, Any]:
    """The figures ``kvgate geometry`` prints, as a dict of ints."""
    slot = geo.slot_bytes(max_seq)
    out: dict[str, Any] = {
        **geo.describe(),
        "summary": geo.model.summary(),
        "max_seq": max_seq,
        "slots": slots,
        "bytes_per_token": geo.bytes_per_token(),
        "state_bytes": geo.state_bytes(),
        "slot_bytes": slot,
        "slots_bytes": slots * slot,
        # what one more position costs at max_seq (sliding windows full); contiguous only,
        # paged layouts move in whole blocks
        "marginal_bytes_at_max_seq": (slot - geo.slot_bytes(max_seq - 1) if max_seq > 1 else slot)
        if geo.layout.name == "contiguous" else None,
        "notes": list(geo.model.notes) + list(getattr(geo.layout, "notes", [])),
    }
    if by_layer:
        out["by_layer"] = geo.by_layer(max_seq)
    return out


def _both(n: int) -> str:
    """``3,168 MiB = 3.09 GiB``; one figure when the two would say the same."""
    mib, human = fmt_mib(n), fmt_human(n)
    return mib if human.endswith("MiB") or human.endswith(" B") or human.endswith("KiB") else f"{mib} = {human}"


def run(args: argparse.Namespace) -> int:
    if args.model == "list":
        from kvgate.model import preset_names

        emit(args.json, {"presets": preset_names()}, "\n".join(preset_names()))
        return 0
    engine = engine_options_from_args(args)
    from kvgate.engines.registry import load_model_for

    model = load_model_for(args.model, engine.layout)
    if args.images is not None:
        from kvgate.model.layer_types import with_images

        model = with_images(model, args.images)
    max_seq = engine.max_seq_for(model) or model.max_position_embeddings
    if not max_seq:
        from kvgate.errors import KvgateError

        arch = (model.config or {}).get("gguf_architecture")
        where = f"GGUF has no {arch}.context_length" if arch else "config has no max_position_embeddings"
        raise KvgateError(f"the {where}; give --max-seq (or llama.cpp's -c, vLLM's --max-model-len)")
    from kvgate.model.encdec import default_encoder_len, encoder_len_of

    model = default_encoder_len(model, args.encoder_len, max_seq)
    if model.max_position_embeddings and max_seq > model.max_position_embeddings:
        model.notes.append(f"max_seq {max_seq:,} is beyond the model's max_position_embeddings "
                           f"{model.max_position_embeddings:,}")
    ctx_note = engine.ctx_note(max_seq)
    if ctx_note:
        model.notes.append(ctx_note)
    slots = engine.slots if engine.slots is not None else 1
    from kvgate.session import engine_geometry

    geo = engine_geometry(engine, model)
    stage = getattr(geo.layout, "stage_note", lambda: None)()  # vLLM -pp: one stage's rank
    if stage:
        model.notes.append(stage)
    rep = geometry_report(geo, max_seq, slots, args.by_layer)
    per = " per rank" if engine.tp > 1 or stage else ""
    one, many = _slot_words(geo.layout.name, max_seq, slots)
    rows = [
        ["bytes per token" + per, fmt_bytes(rep["bytes_per_token"]), fmt_human(rep["bytes_per_token"])],
        [one + per, fmt_bytes(rep["slot_bytes"]), _both(rep["slot_bytes"])],
        [many + per, fmt_bytes(rep["slots_bytes"]), _both(rep["slots_bytes"])],
    ]
    if geo.layout.name == "contiguous" and rep["marginal_bytes_at_max_seq"] != rep["bytes_per_token"]:
        rows.insert(1, [f"bytes per token at max_seq (windows full){per}", fmt_bytes(rep["marginal_bytes_at_max_seq"]),
                        fmt_human(rep["marginal_bytes_at_max_seq"])])
    if callable(getattr(geo.layout, "cache_bytes", None)):  # an engine's whole cache (llama.cpp's)
        rep["engine_cache_bytes"] = geo.layout.cache_bytes(geo, max_seq)
        rows.append([f"llama.cpp whole cache (n_seq {geo.layout.n_seq}{', unified' if geo.layout.unified else ''})" + per,
                     fmt_bytes(rep["engine_cache_bytes"]), fmt_human(rep["engine_cache_bytes"])])
    enc_len, _ = encoder_len_of(model)
    if enc_len is not None:
        rep["encoder_len"] = enc_len
    if rep["state_bytes"]:
        label = f"cross-attention to {enc_len:,} encoder positions" if enc_len else "fixed state"
        rows.insert(1, [label + " per sequence" + per, fmt_bytes(rep["state_bytes"]), fmt_human(rep["state_bytes"])])
    text = [
        f"model   {model.name} ({model.source}): {rep['summary']}",
        f"KV      {geo.fmt_k.name}" + (f" / V {geo.fmt_v.name}" if geo.fmt_v.name != geo.fmt_k.name else "")
        + f", layout {geo.layout.name}, tp {engine.tp}",
        "",
        table(rows, align="lrr"),
    ]
    if args.by_layer:
        lrows = [[r["layer"], r["kind"], r["kv_heads_per_rank"], r["head_dim"], r["window"] or "", r["positions"],
                  f"{r['position_bytes']:,}", f"{r['bytes']:,}"] for r in rep["by_layer"]]
        text += ["", table(lrows, header=["layer", "kind", "kv heads", "head_dim", "window", "positions",
                                          "B/position", "bytes"], align="rlrrrrrr")]
    if args.kv_available:
        from kvgate.engines.registry import ENGINES, get_engine
        from kvgate.errors import KvgateError
        from kvgate.units import parse_bytes

        pool_report = getattr(get_engine(engine.layout), "pool_report", None) if engine.layout in ENGINES else None
        if pool_report is None:
            raise KvgateError("--kv-available needs --layout vllm")
        vr = pool_report(geo, parse_bytes(args.kv_available, allow_zero=True), max_seq)
        rep[engine.layout] = {k: v for k, v in vr.items() if k != "log_lines"}
        lay = geo.layout
        applied = f"vLLM {lay.version}" if getattr(lay, "version", None) else "vLLM ≥ 0.20.1"
        newer = lay.prints_concurrency_tokens()  # type: ignore[attr-defined]
        other = vr["gpu_kv_cache_tokens_blocks"] if newer else vr["gpu_kv_cache_tokens_concurrency"]
        other_label = "vLLM ≤ 0.20.0" if newer else "vLLM ≥ 0.20.1"
        lines = [line for line in vr["log_lines"] if line]
        text += ["", f"vLLM with {fmt_mib(parse_bytes(args.kv_available, allow_zero=True))} available for KV: "
                 f"{vr['num_blocks']:,} blocks"]
        if lines:
            same = other == vr["gpu_kv_cache_tokens"]
            text.append(f"  {lines[0]}   ({applied}{f'; {other_label} prints the same' if same else ''})")
            text += [f"  {line}" for line in lines[1:]]
            if not same and other is not None:
                text.append(f"  GPU KV cache size: {other:,} tokens   ({other_label}: the token line's other rule)")
        conc = vr.get("max_concurrency")
        if conc is not None and conc < 1:
            text.append(f"  WARNING: one request of {max_seq:,} tokens needs more KV than is available "
                        f"(concurrency {conc:.2f}x): vLLM refuses to start (lower --max-model-len or give it more memory)")
    if rep["notes"]:
        text += ["", "notes"] + [f"  - {n}" for n in rep["notes"]]
    emit(args.json, rep, "\n".join(text))
    return 0
