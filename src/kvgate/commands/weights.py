"""``kvgate weights``: exact weight bytes from safetensors / GGUF headers, or a labelled estimate."""

from __future__ import annotations

from kvgate.model.weights import weight_bytes
from kvgate.output import emit, table
from kvgate.units import fmt_bytes, fmt_gib

NAME = "weights"
HELP = "weight bytes of a model: exact from safetensors/GGUF headers, else an estimate from config.json"
DESCRIPTION = """\
Weight bytes of a model, without reading tensor data.

  MODEL_OR_FILE may be a .safetensors file, a model.safetensors.index.json (sharded),
  a .gguf file, a model directory, a config.json or a bundled preset name. Files give
  exact bytes (safetensors header offsets, cross-checked with shape × dtype; GGUF tensor
  infos). A config or preset gives an ESTIMATE (parameters × dtype bytes), labelled so.

  kvgate weights Qwen3-0.6B/model.safetensors
  kvgate weights qwen3-30b-a3b --json
"""


def add_arguments(p) -> None:
    p.add_argument("model", metavar="MODEL_OR_FILE", help="safetensors file/index, GGUF, model dir, config.json or preset")


def run(args) -> int:
    wb = weight_bytes(args.model)
    label = "exact" if wb.exact else "ESTIMATE"
    rows = [
        ["weights", f"{fmt_bytes(wb.bytes)} ({fmt_gib(wb.bytes)})"],
        ["kind", label],
        ["source", wb.source if wb.source != "config" else f"config.json ({args.model})"],
    ]
    if wb.tensors is not None:
        rows.append(["tensors", f"{wb.tensors:,}"])
    if wb.params is not None:
        rows.append(["parameters", f"{wb.params:,}"])
    for dt, b in sorted(wb.by_dtype.items()):
        rows.append([f"  {dt}", fmt_bytes(b)])
    text = table(rows, align="ll")
    if wb.notes:
        import textwrap

        text += "\n" + "\n".join(textwrap.fill(f"note: {n}", 100, subsequent_indent="      ") for n in wb.notes)
    emit(args.json, wb.to_dict(), text)
    return 0
