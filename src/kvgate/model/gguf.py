"""Read a GGUF file's metadata (never its tensor data) into a :class:`ModelSpec`.

Uses the ``gguf`` package's ``GGUFReader`` (it memory-maps the file; kvgate only reads
the key/value header and the tensor-info table). The metadata becomes a model as the
engine that loads GGUF files reads it (llama.cpp: :mod:`kvgate.engines.llamacpp.gguf`,
asked through :func:`kvgate.engines.registry.engine_of_file_format`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvgate.errors import KvgateError
from kvgate.model.spec import ModelSpec

GGUF_MAGIC = b"GGUF"


class GGUFError(KvgateError):
    """A file that is not a readable GGUF (bad magic, truncated, unsupported version)."""


def read_gguf(path: str | Path) -> Any:
    """Open ``path`` with ``gguf.GGUFReader`` (metadata and tensor infos only).

    Raises:
        GGUFError: not a GGUF file, truncated, or the ``gguf`` package is missing.
    """
    p = Path(path)
    from kvgate.guarded import open_regular  # noqa: PLC0415

    try:
        with open_regular(p, what="GGUF file") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise GGUFError(f"cannot read {p}: {exc.strerror}") from exc
    if head != GGUF_MAGIC:
        raise GGUFError(f"{p} is not a GGUF file (magic {head!r}, expected b'GGUF')")
    try:
        import gguf  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - dependency
        raise GGUFError("reading GGUF needs the 'gguf' package", hint="pip install gguf") from exc
    try:
        return gguf.GGUFReader(str(p), "r")
    except (ValueError, IndexError, KeyError, OverflowError, TypeError) as exc:
        raise GGUFError(
            f"{p} is a truncated or corrupt GGUF file ({type(exc).__name__}: {exc})",
            hint="re-download or re-convert the file",
        ) from exc


def gguf_metadata(reader: Any) -> dict[str, Any]:
    """All key/value metadata as Python values (arrays as lists; tokenizer arrays skipped)."""
    out: dict[str, Any] = {}
    for name, field in reader.fields.items():
        if name.startswith("tokenizer.ggml.") or name.startswith("GGUF."):
            continue
        try:
            v = field.contents()
        except Exception as e:  # undecodable text (bad UTF-8) or an exotic type: never dropped silently
            descriptive = name.startswith("general.") and name != "general.architecture"  # name, author …
            if not descriptive:
                raise GGUFError(f"GGUF key {name!r} cannot be decoded ({type(e).__name__}: {e})"[:300]) from None
            continue
        if hasattr(v, "tolist"):
            v = v.tolist()
        out[name] = v
    return out


def gguf_weight_bytes(reader: Any) -> int:
    """Σ tensor bytes from the tensor-info table (``ggml_nbytes``: elements / block
    size × type size, gguf-py ``GGML_QUANT_SIZES``); tensor data is not read."""
    return int(sum(int(t.n_bytes) for t in reader.tensors))


def load_gguf(path: Path) -> ModelSpec:
    """:class:`ModelSpec` of a GGUF file; ``spec.config['weight_bytes']`` holds the exact
    tensor bytes from the tensor-info table.

    Raises:
        GGUFError: not GGUF / truncated. ConfigError: metadata kvgate cannot use.
    """
    from kvgate.engines.registry import engine_of_file_format  # noqa: PLC0415

    reader = read_gguf(path)
    meta = gguf_metadata(reader)
    spec: ModelSpec = engine_of_file_format(".gguf").model_from_metadata(meta, name=Path(path).stem, source=str(path))
    spec.config["weight_bytes"] = gguf_weight_bytes(reader)
    spec.config["weight_tensors"] = len(reader.tensors)
    tok = reader.fields.get("tokenizer.ggml.tokens")
    if tok is not None:
        spec.config["tokenizer_tokens"] = len(tok.data)
    if reader.tensors:
        spec.config["gguf_tensors"] = gguf_tensor_summary(reader)
    return spec


def gguf_tensor_summary(reader: Any) -> dict[str, Any]:
    """The tensor-info table grouped as llama.cpp places it (``src/llama-model.cpp``
    ``load_tensors``): ``layer_bytes`` (``blk.N.*`` bytes per layer N), ``token_embd`` and
    ``output`` (``{"bytes", "shape"}``, shape as ggml's ``ne``: ``[n_embd, n_vocab]``; no
    ``output`` when the head is tied to ``token_embd``), ``other_bytes`` (output_norm …).
    Bytes are ``ggml_nbytes`` (:func:`gguf_weight_bytes`); no tensor data is read."""
    layers: dict[int, int] = {}
    out: dict[str, Any] = {"layer_bytes": layers, "other_bytes": 0}
    for t in reader.tensors:
        name, nb = str(t.name), int(t.n_bytes)
        if name.startswith("blk."):
            i = int(name.split(".")[1])
            layers[i] = layers.get(i, 0) + nb
        elif name in ("token_embd.weight", "output.weight"):
            out[name.split(".")[0]] = {"bytes": nb, "shape": [int(x) for x in t.shape]}
        else:
            out["other_bytes"] += nb
    return out


