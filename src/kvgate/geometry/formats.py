"""KV formats: how one cached K or V row of ``n_heads × head_dim`` values is stored.

Each format is data, not code: values are packed ``block_values`` at a time into
``block_bytes`` bytes (1 value per block for plain dtypes, 32 for ggml's block types),
plus ``scale_bytes_per_head`` bytes of per-(position, head) scale.

=====================  ===========  ==========  =====================================
format                 block        scale/head  source
=====================  ===========  ==========  =====================================
``bf16``, ``fp16``     1 v → 2 B    0
``fp32``               1 v → 4 B    0
``fp8``                1 v → 1 B    0           per-tensor scale (vLLM ``fp8``), negligible
``fp8-f32scale``       1 v → 1 B    4 B         per-token-head f32 scale
``int8-f32scale``      1 v → 1 B    4 B         the write-up's mirror: int8 + f32 scale per
                                                KV head per position
``q8_0``               32 v → 34 B  0           ggml ``block_q8_0``: fp16 d + 32 int8
``q4_0``               32 v → 18 B  0           ggml ``block_q4_0``: fp16 d + 16 B nibbles
``q4_1``               32 v → 20 B  0           ggml ``block_q4_1``: fp16 d, m + 16 B
``q5_0``               32 v → 22 B  0           ggml ``block_q5_0``: fp16 d + 4 B qh + 16 B
``q5_1``               32 v → 24 B  0           ggml ``block_q5_1``: fp16 d, m + 4 B + 16 B
``iq4_nl``             32 v → 18 B  0           ggml ``block_iq4_nl``: fp16 d + 16 B
=====================  ===========  ==========  =====================================

The ggml sizes are ``ggml_type_size`` / ``ggml_blck_size`` from ggml's ``ggml.c`` type
traits; a ggml row must hold a whole number of blocks (``ggml_row_size`` asserts it).
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from kvgate.errors import KvgateError


class FormatError(KvgateError):
    """Unknown KV format, or a row that the format cannot pack."""


@dataclass(frozen=True)
class KVFormat:
    """A storage format for K or V rows.

    Attributes:
        name: the name used on the command line (``--kv-format``).
        block_values: values packed per block (1 for plain dtypes, 32 for ggml blocks).
        block_bytes: bytes per block.
        scale_bytes_per_head: extra bytes per KV head per position (f32 scales).
    """

    name: str
    block_values: int
    block_bytes: int
    scale_bytes_per_head: int = 0

    def row_bytes(self, n_heads: int, head_dim: int) -> int:
        """Bytes of one row of ``n_heads × head_dim`` values (one position, K or V).

        >>> FORMATS["int8-f32scale"].row_bytes(4, 128)   # the write-up: 512 + 4·4
        528
        >>> FORMATS["q4_0"].row_bytes(64, 128)           # 8192 values / 32 × 18
        4608

        Raises:
            FormatError: the row does not hold a whole number of blocks.
        """
        values = n_heads * head_dim
        if values % self.block_values:
            raise FormatError(
                f"KV format {self.name} packs {self.block_values} values per block; a row of "
                f"{n_heads} heads × {head_dim} = {values} values is not a whole number of blocks"
            )
        return values // self.block_values * self.block_bytes + n_heads * self.scale_bytes_per_head

    def vector_bytes(self, values: int) -> int:
        """Bytes of one vector of ``values`` values with one scale (e.g. an MLA latent).

        Raises:
            FormatError: ``values`` is not a whole number of blocks.
        """
        return self.row_bytes(1, values)


FORMATS: dict[str, KVFormat] = {
    f.name: f
    for f in (
        KVFormat("bf16", 1, 2),
        KVFormat("fp16", 1, 2),
        KVFormat("fp32", 1, 4),
        KVFormat("fp8", 1, 1),
        KVFormat("fp8-f32scale", 1, 1, 4),
        KVFormat("int8-f32scale", 1, 1, 4),
        # ggml's block types, sized by gguf-py's own table (ggml.c's type traits)
        *(KVFormat(name, *GGML_QUANT_SIZES[GGMLQuantizationType[name.upper()]])
          for name in ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")),
    )
}

#: a config's model ``dtype`` / ``torch_dtype`` -> the format of that float type
MODEL_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16", "float": "fp32"}

# Common spellings from configs and engines (torch dtypes, vLLM's --kv-cache-dtype, ggml).
_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "f16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "f32": "fp32",
    "float": "fp32",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "float8_e4m3fn": "fp8",
    "int8": "int8-f32scale",
}


def get_format(name: str) -> KVFormat:
    """The :class:`KVFormat` called ``name`` (case-insensitive; torch/vLLM/ggml aliases).

    Raises:
        FormatError: unknown name; the message lists the known formats. An unknown
            format never falls back to a default (llama.cpp's q4_0 fallback, case 7).
    """
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in FORMATS:
        raise FormatError(f"unknown KV format {name!r}", hint=f"one of: {', '.join(FORMATS)}")
    return FORMATS[key]
