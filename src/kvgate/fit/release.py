"""Which engine release the answer is for: given, read from the installed engine, or the
newest one modelled (and said so)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata

from kvgate.errors import KvgateError

#: Each engine's releases whose rules the code models, with where: the newest of them is
#: the default when the engine is neither installed nor given (:data:`NEWEST`).
#: ``tests/test_fit_round2.py`` checks that no release threshold in the engine's modules
#: is newer than its entry here.
MODELLED: dict[str, tuple[tuple[str, str], ...]] = {
    "vllm": (("0.21.0", "vllm_flags.CUDAGRAPH_ESTIMATE_FROM: the CUDA graph pool estimate on by default"),
             ("0.24.0", "tests/data/fit_logs: the v0.24.0 startup log inside its interval")),
    "sglang": (("0.5.4", "sglang_memfrac.HEURISTIC_FROM: --mem-fraction-static's default"),
               ("0.5.9", "sglang_fit: GlmMoeDsaForCausalLM a DeepSeek sparse attention model"),
               ("0.5.17", "geometry/sglang.py CELL_USES_DSA_ROW: the DSA row counted per token")),
    "llama.cpp": (("b7000", "llamacpp_fit.ALL_ROWS_UP_TO: logits of every ubatch token"),
                  ("b11312", "llamacpp_fit: the graph reserve read at 0c1e57098bba (build b11312, vendored "
                             "by llama-cpp-python 0.3.36)")),
}
_DIST = {"vllm": "vllm", "sglang": "sglang", "llama.cpp": "llama_cpp_python"}


@dataclass(frozen=True)
class Release:
    """An engine release: ``text`` as given/found, ``version`` as a tuple of ints, and
    ``how`` it was chosen (``given``, ``installed``, ``newest modelled``)."""

    engine: str
    text: str
    version: tuple[int, ...]
    how: str

    def at_least(self, *v: int) -> bool:
        """True when this release is ``v`` or later."""
        return self.version >= v

    def to_dict(self) -> dict[str, str]:
        return {"engine": self.engine, "release": self.text, "how": self.how}


def parse_version(text: str) -> tuple[int, ...]:
    """``"0.6.5"``, ``"v0.24.0"``, ``"0.15.2rc1.dev93+g11a4c9d30"`` → ints of the leading
    dotted numbers; ``"b4343"`` (llama.cpp build) → ``(4343,)``.

    Raises:
        KvgateError: no leading number.
    """
    t = text.strip().lower().lstrip("v")
    m = re.match(r"b?(\d+(?:\.\d+)*)", t)
    if not m:
        raise KvgateError(f"cannot read an engine release from {text!r}", hint="e.g. 0.11.0 (vLLM), b4343 (llama.cpp)")
    return tuple(int(x) for x in m.group(1).split("."))


def resolve_release(engine: str, given: str | None) -> Release:
    """The release to model: ``given``, else the installed engine's package version,
    else :data:`NEWEST`."""
    if given:
        return Release(engine, given, parse_version(given), "given")
    try:
        v = metadata.version(_DIST[engine])
        return Release(engine, v, parse_version(v), "installed")
    except (metadata.PackageNotFoundError, KeyError, KvgateError):
        pass
    return Release(engine, NEWEST[engine], parse_version(NEWEST[engine]), "newest modelled (not installed, not given)")


def _newest(engine: str) -> str:
    return max((r for r, _ in MODELLED[engine]), key=parse_version)


#: newest release of each engine whose rules are modelled here (from :data:`MODELLED`)
NEWEST = {e: _newest(e) for e in MODELLED}
