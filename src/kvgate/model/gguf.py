"""Read a GGUF file's metadata (never its tensor data) into a :class:`ModelSpec`.

Uses the ``gguf`` package's ``GGUFReader`` (it memory-maps the file; kvgate only reads
the key/value header and the tensor-info table). The metadata becomes a model as the
engine that loads GGUF files reads it (llama.cpp: :mod:`kvgate.engines.llamacpp.gguf`,
asked through :func:`kvgate.engines.formats.metadata_reader`).
"""

from __future__ import annotations

import sys
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
        return _header_reader_class(gguf)(str(p), "r")
    except (ValueError, IndexError, KeyError, OverflowError, TypeError) as exc:
        raise GGUFError(
            f"{p} is a truncated or corrupt GGUF file ({type(exc).__name__}: {exc})",
            hint="re-download or re-convert the file",
        ) from exc


#: arrays this long are tokenizer tables (tokens, scores, types, merges), never model geometry
LONG_ARRAY = 65_536


def _header_reader_class(gguf: Any) -> Any:
    """``gguf.GGUFReader`` that keeps an array of at least :data:`LONG_ARRAY` elements as one
    view of its bytes instead of one numpy view per element (gguf-py 0.19
    ``GGUFReader._get_field_parts``): a 262,144-token vocabulary took 786,646 views and 16 s
    to open; now the field keeps its element count (``len(field.data)``) and its bytes, and
    :func:`gguf_metadata` never reads its elements. Arrays of arrays take gguf-py's path."""
    base = gguf.GGUFReader
    if not hasattr(base, "_get_field_parts"):  # a gguf-py without the private hook: plain reader
        return base
    vtype = gguf.GGUFValueType
    import numpy as np  # noqa: PLC0415

    class HeaderReader(base):  # type: ignore[misc, valid-type]
        def _get_field_parts(self, orig_offs: int, raw_type: int) -> Any:
            if raw_type != vtype.ARRAY:
                return super()._get_field_parts(orig_offs, raw_type)
            raw_itype = self._get(orig_offs, np.uint32)
            alen = self._get(orig_offs + 4, np.uint64)
            n, itype = int(alen[0]), int(raw_itype[0])
            scalar = self.gguf_scalar_to_np.get(vtype(itype))
            if n < LONG_ARRAY or not (scalar is not None or itype == vtype.STRING):
                return super()._get_field_parts(orig_offs, raw_type)
            start = end = orig_offs + 12
            if scalar is not None:
                end += n * np.dtype(scalar).itemsize
            else:  # strings: a uint64 length, then the bytes
                order = sys.byteorder if self.byte_order == "I" else ("big" if sys.byteorder == "little" else "little")
                buf = memoryview(self.data)
                for _ in range(n):
                    end += 8 + int.from_bytes(buf[end:end + 8], order)
                if end > len(self.data):
                    raise IndexError(f"array of {n} strings runs past the end of the file")
            body = self._get(start, np.uint8, end - start)
            return end - orig_offs, [raw_itype, alen, body], list(range(n)), [vtype.ARRAY, vtype(itype)]

    return HeaderReader


def gguf_metadata(reader: Any) -> dict[str, Any]:
    """All key/value metadata as Python values (arrays as lists; tokenizer arrays skipped)."""
    out: dict[str, Any] = {}
    for name, field in reader.fields.items():
        if name.startswith("tokenizer.ggml.") or name.startswith("GGUF."):
            continue
        if len(field.data) >= LONG_ARRAY and len(field.parts) <= 6:  # kept as bytes: a table, not geometry
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
    from kvgate.engines.formats import metadata_reader  # noqa: PLC0415

    reader = read_gguf(path)
    meta = gguf_metadata(reader)
    spec: ModelSpec = metadata_reader(".gguf")(meta, name=Path(path).stem, source=str(path))
    spec.config["weight_bytes"] = gguf_weight_bytes(reader)
    spec.config["weight_tensors"] = len(reader.tensors)
    tok = reader.fields.get("tokenizer.ggml.tokens")
    if tok is not None:
        spec.config["tokenizer_tokens"] = len(tok.data)
    if reader.tensors:
        spec.config["gguf_tensors"] = gguf_tensor_summary(reader)
    return spec


#: ggml types that are not block-quantized (``ggml_is_quantized`` is false for them)
_PLAIN_TYPES = frozenset({"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"})
#: ``ggml/src/ggml-cuda/common.cuh`` ``MATRIX_ROW_PADDING`` (llama.cpp 0c1e57098bba)
CUDA_MATRIX_ROW_PADDING = 512
#: ``ggml-cuda.cu`` ``ggml_backend_cuda_buffer_type_get_alignment``: 128 B
CUDA_ALIGNMENT = 128


def cuda_alloc_bytes(type_name: str, ne: list[int], nbytes: int) -> int:
    """Bytes a tensor takes in a CUDA model buffer at llama.cpp 0c1e57098bba: ``ggml-cuda.cu``
    ``ggml_backend_cuda_buffer_type_get_alloc_size`` pads a quantized tensor whose row
    ``ne[0]`` is not a multiple of ``MATRIX_ROW_PADDING`` (512) by ``ggml_row_size(type,
    512 - ne0 % 512)``, and ``ggml-alloc.c`` ``ggml_backend_alloc_ctx_tensors_from_buft_impl``
    rounds each tensor up to the buffer type's alignment (``GGML_PAD(size, 128)``)."""
    size = nbytes
    ne0 = int(ne[0]) if ne else 0
    if type_name not in _PLAIN_TYPES and ne0 % CUDA_MATRIX_ROW_PADDING:
        import gguf  # noqa: PLC0415

        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
        size += (CUDA_MATRIX_ROW_PADDING - ne0 % CUDA_MATRIX_ROW_PADDING) // block * type_size
    return -(-size // CUDA_ALIGNMENT) * CUDA_ALIGNMENT


def gguf_tensor_summary(reader: Any) -> dict[str, Any]:
    """The tensor-info table grouped as llama.cpp places it (``src/llama-model.cpp``
    ``load_tensors``): ``layer_bytes`` (``blk.N.*`` bytes per layer N), ``token_embd`` and
    ``output`` (``{"bytes", "shape", "cuda_bytes"}``, shape as ggml's ``ne``: ``[n_embd,
    n_vocab]``; no ``output`` when the head is tied to ``token_embd``), ``other_bytes``
    (output_norm …); ``layer_cuda_bytes`` / ``other_cuda_bytes`` the same in a CUDA buffer
    (:func:`cuda_alloc_bytes`: row padding and 128 B alignment); ``layer_max_cuda_bytes`` /
    ``layer_attn_max_cuda_bytes`` the largest tensor of each layer (of its ``attn`` tensors),
    CUDA-sized: what one op-offloaded matmul copies onto the GPU. Bytes are ``ggml_nbytes``
    (:func:`gguf_weight_bytes`); no tensor data is read."""
    layers: dict[int, int] = {}
    cuda: dict[int, int] = {}
    big: dict[int, int] = {}
    big_attn: dict[int, int] = {}
    out: dict[str, Any] = {"layer_bytes": layers, "other_bytes": 0, "layer_cuda_bytes": cuda, "other_cuda_bytes": 0,
                           "layer_max_cuda_bytes": big, "layer_attn_max_cuda_bytes": big_attn}
    for t in reader.tensors:
        name, nb = str(t.name), int(t.n_bytes)
        shape = [int(x) for x in t.shape]
        try:
            cb = cuda_alloc_bytes(str(t.tensor_type.name), shape, nb)
        except (AttributeError, KeyError, ImportError):
            cb = -(-nb // CUDA_ALIGNMENT) * CUDA_ALIGNMENT
        if name.startswith("blk."):
            i = int(name.split(".")[1])
            layers[i] = layers.get(i, 0) + nb
            cuda[i] = cuda.get(i, 0) + cb
            big[i] = max(big.get(i, 0), cb)
            if ".attn_" in name:
                big_attn[i] = max(big_attn.get(i, 0), cb)
        elif name in ("token_embd.weight", "output.weight"):
            out[name.split(".")[0]] = {"bytes": nb, "shape": shape, "cuda_bytes": cb}
        else:
            out["other_bytes"] += nb
            out["other_cuda_bytes"] += cb
    return out


