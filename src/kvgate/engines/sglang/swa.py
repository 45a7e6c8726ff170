"""SGLang's hybrid sliding-window pool (``SWAKVPool``): which models get it in which
release, how ``--swa-full-tokens-ratio`` splits the KV budget into a full pool and a
sliding-window pool, and the lines SGLang prints for them.

Read from the sglang wheels on PyPI (``sglang/srt/``) at 0.4.8, 0.4.9, 0.4.10, 0.5.1,
0.5.2, 0.5.5, 0.5.7, 0.5.8, 0.5.9, 0.5.10, 0.5.11, 0.5.12 and 0.5.17 (releases between two
read ones follow the older):

- **The pool** (``mem_cache/memory_pool.py`` ``SWAKVPool`` up to 0.5.7,
  ``mem_cache/swa_memory_pool.py`` from 0.5.8): two ``MHATokenToKVPool``\\ s, built in this
  order, each printing its own ``KV Cache is allocated. #tokens: N, K size: …, V size: …``::

      self.swa_kv_pool = token_to_kv_pool_class(size=size_swa, dtype=dtype,
                                                layer_num=self.swa_layer_nums, **kwargs)
      self.full_kv_pool = token_to_kv_pool_class(size=size, dtype=dtype,
                                                 layer_num=self.full_layer_nums, **kwargs)
      logger.info(f"SWAKVPool mem usage: {self.mem_usage:.2f} GB, swa size: "
                  f"{self.size_swa}, full size: {self.size}")

  Each holds ``size + page_size`` rows per layer (:func:`kvgate.engines.sglang.pool.pool_bytes`);
  ``max_total_num_tokens`` (what the scheduler prints) is the full pool's size.
- **``--swa-full-tokens-ratio``** (``server_args.py``): ``swa_full_tokens_ratio: float =
  0.8`` at every release read (0.4.10 … 0.5.17), "The ratio of SWA layer KV tokens / full
  layer KV tokens, regardless of the number of swa:full layers".
- **Which models** (two pools, else one ``MHATokenToKVPool`` with every layer at full length):

  * before 0.4.10: none (0.4.9 defines ``SWAKVPool`` but ``model_runner.py`` never sets
    ``is_hybrid`` for a sliding window);
  * 0.4.10 … 0.5.5 (``model_runner.py`` ``__init__``; 0.5.6 not read, taken as 0.5.5): a
    model whose SGLang class has ``get_attention_sliding_window_size`` or whose config has
    ``attention_chunk_size``, "``not any("Llama4" in arch …)``", unless ``server_args.py``
    sets ``disable_hybrid_swa_memory``: from 0.5.1 for ``Gemma2ForCausalLM``,
    ``Gemma3ForCausalLM``, ``Gemma3ForConditionalGeneration``, ``Gemma3nForCausalLM``,
    ``Gemma3nForConditionalGeneration`` ("Disable hybrid SWA memory for {model_arch} as it
    is not yet supported."), from 0.5.2 ``GptOssForCausalLM``, from 0.5.5
    ``Olmo2ForCausalLM``. So Gemma 2/3/3n at 0.4.10 only.
  * 0.5.7 (``configs/model_config.py`` ``is_hybrid_model``): ``MiMoV2FlashForCausalLM``
    only (Llama 4 with ``--hybrid-kvcache-ratio``, not modelled).
  * from 0.5.8 (``configs/model_config.py`` ``is_hybrid_swa_model``): the listed
    architectures: ``Llama4ForConditionalGeneration``, ``GptOssForCausalLM`` (not with the
    ``trtllm_mha`` backend, SGLang's default for it on Blackwell: "Disable hybrid SWA memory
    for GPT-OSS model with trtllm_mha attention backend."), ``MiMoV2FlashForCausalLM``; from
    0.5.9 ``Step3p5ForCausalLM``; from 0.5.11 ``Gemma4ForCausalLM``,
    ``Gemma4ForConditionalGeneration``; from 0.5.12 ``LagunaForCausalLM``.
- **The split**, with ``F``/``S`` the bytes one token takes in a full/sliding layer on one
  rank, ``nf``/``ns`` those layers' counts, ``r`` the ratio, ``page`` the page size:

  * 0.4.10 … 0.5.8 (``set_num_token_hybrid`` / ``set_num_tokens_hybrid_swa``): the pool is
    first sized as if every layer were full, ``max = rest // cell`` (cell: every layer's
    full row; 0.5.7–0.5.8 add ``S × ns`` for MiMo-V2-Flash), rounded to a page, then
    ``full = int(max × (nf + ns) / (r × ns + nf))``, ``swa = int(full × r)``, both rounded
    down to a page from 0.5.7 (not at 0.5.5);
  * 0.5.9 … 0.5.10 (``model_runner_kv_cache_mixin.py``): ``max = rest // (F nf + S ns)``
    rounded to a page, ``full = int(max × (F nf + S ns) / (F nf + r S ns))``,
    ``swa = int(full × r)``, both rounded down to a page;
  * from 0.5.11 (``model_executor/pool_configurator.py`` ``HybridSWAPoolConfigurator``):
    ``full = (rest // (F nf + r S ns))`` rounded down to a page, ``swa = int(full × r)``
    rounded down to a page. 0.5.17 adds: "SWA pool ({swa_tokens} tokens) cannot hold even
    one request: …" (a ``ValueError``) when ``sliding_window_size + page_size >= swa``.

  The line ``Use sliding window memory pool. full_layer_tokens=F, swa_layer_tokens=S``
  comes from the same function. Checked on real logs: ``tests/data/logs/
  sglang_mimo-v2-flash_tp4_swa-pools.log`` (sglang#15464, both pools 1,496,958 tokens) and
  ``sglang_mimo-v2-flash_tp4_swa-ratio.log`` (sglang#18039, 375,360 full and 300,288 SWA
  tokens at ``--page-size 64``).

Not modelled: ``--disable-hybrid-swa-memory`` given by hand, hierarchical cache (MiMo and
Step-3.5 reset the ratio and drop the hybrid pool), 0.5.17's ``SWAChunkCapPoolConfigurator``
(only with ``--disable-radix-cache`` and ``--max-running-requests``), DeepSeek-V4's pools,
and Llama 4's own split before 0.5.9 (``hybrid_kvcache_ratio``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvgate.errors import KvgateError
from kvgate.model.spec import ModelSpec

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.engines.sglang.flags import SglangSettings

#: ``server_args.py``: ``swa_full_tokens_ratio: float = 0.8`` (0.4.10 … 0.5.17)
DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8
SWA_POOL_FROM = (0, 4, 10)
#: the architectures ``server_args.py`` turns the hybrid pool off for, from the release given
_DISABLED: tuple[tuple[tuple[int, ...], frozenset[str]], ...] = (
    ((0, 5, 1), frozenset({"Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration",
                           "Gemma3nForCausalLM", "Gemma3nForConditionalGeneration"})),
    ((0, 5, 2), frozenset({"GptOssForCausalLM"})),
    ((0, 5, 5), frozenset({"Olmo2ForCausalLM"})),
)
#: SGLang model classes with ``get_attention_sliding_window_size`` (0.4.10 … 0.5.6), from the release given
_WINDOW_CLASSES: tuple[tuple[tuple[int, ...], frozenset[str]], ...] = (
    ((0, 4, 10), frozenset({"Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration",
                            "Gemma3nForCausalLM", "Gemma3nForConditionalGeneration"})),
    ((0, 5, 2), frozenset({"GptOssForCausalLM"})),
    ((0, 5, 5), frozenset({"Olmo2ForCausalLM"})),
)
#: ``is_hybrid_swa_model``'s list (from 0.5.9), from the release given
_HYBRID_SWA_ARCHS: tuple[tuple[tuple[int, ...], frozenset[str]], ...] = (
    ((0, 5, 8), frozenset({"Llama4ForConditionalGeneration", "GptOssForCausalLM", "MiMoV2FlashForCausalLM"})),
    ((0, 5, 9), frozenset({"Step3p5ForCausalLM"})),
    ((0, 5, 11), frozenset({"Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"})),
    ((0, 5, 12), frozenset({"LagunaForCausalLM"})),
)
BY_LIST_FROM = (0, 5, 8)
MIMO_ONLY = (0, 5, 7)  # is_hybrid_model: MiMo-V2-Flash alone
BYTES_RULE_FROM = (0, 5, 9)
CONFIGURATOR_FROM = (0, 5, 11)
PAGE_ALIGNED_FROM = (0, 5, 7)
ONE_REQUEST_CHECK_FROM = (0, 5, 17)
MIMO_EXTRA_CELL = ((0, 5, 7), (0, 5, 9))  # 0.5.7 ≤ v < 0.5.9: S × ns added to the cell


def _union(table: tuple[tuple[tuple[int, ...], frozenset[str]], ...], v: tuple[int, ...]) -> frozenset[str]:
    out: set[str] = set()
    for since, names in table:
        if v >= since:
            out |= names
    return frozenset(out)


def architectures(model: ModelSpec) -> list[str]:
    """The config's ``architectures``: the (text) config's, else the outer ``config.json``'s
    that ``model`` was read from (a multimodal config keeps them outside ``text_config``)."""
    archs = (model.config or {}).get("architectures")
    if not archs:
        path = Path(model.source)
        path = path / "config.json" if path.is_dir() else path
        try:
            outer = json.loads(path.read_text()) if path.suffix == ".json" and path.is_file() else {}
        except (OSError, ValueError):
            outer = {}
        archs = outer.get("architectures") if isinstance(outer, dict) else None
    return [a for a in (archs or []) if isinstance(a, str)]


def two_pools_why(model: ModelSpec, version: tuple[int, ...], gpu_blackwell: bool | None = None) -> str | None:
    """Why SGLang ``version`` builds an ``SWAKVPool`` for ``model`` (the module docstring's
    rule), or ``None`` when it builds one pool with every layer at full length."""
    kinds = model.kinds()
    if not kinds.get("sliding") or version < SWA_POOL_FROM:
        return None
    archs = architectures(model)
    if version >= BY_LIST_FROM:
        listed = _union(_HYBRID_SWA_ARCHS, version)
        hit = [a for a in archs if a in listed]
        if not hit:
            return None
        if hit[0] == "GptOssForCausalLM" and gpu_blackwell:
            return None  # trtllm_mha on SM100: "Disable hybrid SWA memory for GPT-OSS model with trtllm_mha …"
        return f"{hit[0]} is in is_hybrid_swa_model's list (configs/model_config.py)"
    if version >= MIMO_ONLY:
        return ("MiMoV2FlashForCausalLM: configs/model_config.py is_hybrid_model" if "MiMoV2FlashForCausalLM" in archs
                else None)
    if any("Llama4" in a for a in archs):
        return None
    disabled = _union(_DISABLED, version)
    if archs and archs[0] in disabled:
        return None
    if any(a in _union(_WINDOW_CLASSES, version) for a in archs):
        return f"{archs[0]}'s SGLang class has a sliding window (model_runner.py is_hybrid)"
    if (model.config or {}).get("attention_chunk_size"):
        return f"{archs[0] if archs else 'the model'} has attention_chunk_size (model_runner.py is_hybrid)"
    return None


@dataclass(frozen=True)
class SwaSplit:
    """What SGLang's hybrid pool does with a KV budget, per rank.

    Attributes:
        full_k: K bytes one token takes in one full-attention layer; ``full_v`` its V.
        swa_k: the same in one sliding-window layer; ``swa_v`` its V.
        full_layers: full-attention layers (``nf``).
        swa_layers: sliding-window layers (``ns``).
        ratio: ``--swa-full-tokens-ratio``.
        version: the SGLang release whose rule applies.
        first_cell: the cell the budget is divided by first (rules before 0.5.11).
        window: the sliding window (for 0.5.17's one-request check), ``None`` if unknown.
    """

    full_k: int
    full_v: int
    swa_k: int
    swa_v: int
    full_layers: int
    swa_layers: int
    ratio: float
    version: tuple[int, ...]
    first_cell: int
    window: int | None = None

    @property
    def full_row(self) -> int:
        """K + V of one token in one full-attention layer (``F``)."""
        return self.full_k + self.full_v

    @property
    def swa_row(self) -> int:
        """K + V of one token in one sliding-window layer (``S``)."""
        return self.swa_k + self.swa_v

    @property
    def rule(self) -> str:
        """``configurator`` (from 0.5.11), ``bytes`` (0.5.9–0.5.10), ``layers`` (before)."""
        if self.version >= CONFIGURATOR_FROM:
            return "configurator"
        return "bytes" if self.version >= BYTES_RULE_FROM else "layers"

    def tokens(self, rest: int, page: int) -> tuple[int, int]:
        """``(full_tokens, swa_tokens)`` SGLang sizes from ``rest`` bytes (module docstring)."""
        rest = max(0, rest)
        nf, ns, r = self.full_layers, self.swa_layers, self.ratio
        f_b, s_b = self.full_row * nf, self.swa_row * ns

        def align(x: int) -> int:
            return x // page * page

        if self.rule == "configurator":
            full = align(int(rest // (f_b + r * s_b)))
            return full, align(int(full * r))
        first = align(rest // self.first_cell) if self.first_cell else 0
        if self.rule == "bytes":
            full = int(first * (f_b + s_b) / (f_b + r * s_b))
            swa = int(full * r)
            return align(full), align(swa)
        full = int(first * (nf + ns) / (r * ns + nf))
        swa = int(full * r)
        if self.version >= PAGE_ALIGNED_FROM:
            return align(full), align(swa)
        return full, swa

    def bytes_per_full_token(self) -> float:
        """The budget bytes one more full-pool token costs (both pools grow with it)."""
        return self.full_row * self.full_layers + self.ratio * self.swa_row * self.swa_layers

    def pool_bytes(self, full: int, swa: int, page: int) -> tuple[int, int]:
        """``(full_pool, swa_pool)`` bytes: ``size + page`` rows per layer of each pool."""
        return (full + page) * self.full_row * self.full_layers, (swa + page) * self.swa_row * self.swa_layers

    def one_request_error(self, swa: int, page: int) -> str | None:
        """0.5.17's refusal when the SWA pool cannot hold the window plus a page."""
        if self.version < ONE_REQUEST_CHECK_FROM or self.window is None or self.window + page < swa:
            return None
        return (f"ValueError: SWA pool ({swa} tokens) cannot hold even one request: the prefill admission floor is "
                f"sliding_window_size ({self.window}) + page_size ({page}). Increase --swa-full-tokens-ratio or "
                "the total KV budget.")


def swa_split(geo: Any, model: ModelSpec, version: tuple[int, ...], ratio: float) -> SwaSplit:
    """The split of ``geo`` (an SGLang-laid-out geometry of ``model``): each layer's own
    row (its K and V bytes per token, as its pool stores it), and the first cell of the
    release's rule.

    Raises:
        KvgateError: full or sliding layers whose rows differ among themselves (SGLang
            keeps one row per pool).
    """
    specs = geo.engine_specs
    rows: dict[str, set[tuple[int, int]]] = {"full": set(), "sliding": set()}
    for i, layer in enumerate(model.layers):
        if layer.kind in rows:
            rows[layer.kind].add((specs[i].k_bytes(geo.fmt_k, geo.tp), specs[i].v_bytes(geo.fmt_v, geo.tp)))
    if len(rows["full"]) > 1 or len(rows["sliding"]) != 1:
        raise KvgateError(f"{model.name}: SGLang's SWA pool keeps one row per pool, and these layers have "
                          f"{len(rows['full'])} full and {len(rows['sliding'])} sliding rows: not modelled")
    nf = sum(1 for l in model.layers if l.kind == "full")
    ns = sum(1 for l in model.layers if l.kind == "sliding")
    fk, fv = next(iter(rows["full"])) if rows["full"] else (0, 0)
    sk, sv = next(iter(rows["sliding"]))
    archs = architectures(model)
    if version >= BYTES_RULE_FROM:
        first = (fk + fv) * nf + (sk + sv) * ns
    else:  # every layer's full row; 0.5.7–0.5.8 add the SWA layers again for MiMo-V2-Flash
        first = ((fk + fv) if nf else (sk + sv)) * (nf + ns)
        if "MiMoV2FlashForCausalLM" in archs and MIMO_EXTRA_CELL[0] <= version < MIMO_EXTRA_CELL[1]:
            first += (sk + sv) * ns
    cfg = model.config or {}
    w = cfg.get("sliding_window") or cfg.get("attention_chunk_size")  # SGLang's sliding_window_size
    return SwaSplit(full_k=fk, full_v=fv, swa_k=sk, swa_v=sv, full_layers=nf, swa_layers=ns, ratio=float(ratio),
                    version=version, first_cell=first, window=w if isinstance(w, int) and not isinstance(w, bool) else None)


def swa_log_lines(split: SwaSplit, full: int, swa: int, page: int) -> list[str]:
    """The lines SGLang prints for the hybrid pool (``GB`` = 2^30 B), in its order."""
    gb = 2**30
    f_b, s_b = split.pool_bytes(full, swa, page)
    f_half = (full + page) * split.full_layers  # rows × layers of each pool, × its K or V bytes
    s_half = (swa + page) * split.swa_layers
    lines = [f"Use sliding window memory pool. full_layer_tokens={full}, swa_layer_tokens={swa}"]
    lines.append(_alloc_line(swa, s_half, split.swa_k, split.swa_v))
    lines.append(_alloc_line(full, f_half, split.full_k, split.full_v))
    lines.append(f"SWAKVPool mem usage: {(f_b + s_b) / gb:.2f} GB, swa size: {swa}, full size: {full}")
    return lines


def _alloc_line(tokens: int, rows_layers: int, k: int, v: int) -> str:
    gb = 2**30
    return (f"KV Cache is allocated. #tokens: {tokens}, K size: {rows_layers * k / gb:.2f} GB, "
            f"V size: {rows_layers * v / gb:.2f} GB")


def swa_plan(geo: Any, model: ModelSpec, release: Any, gpu_name: str | None,
             ratio: float | None) -> tuple[SwaSplit | None, str | None]:
    """The hybrid pool SGLang ``release`` builds for ``model`` (``None`` for one pool) and
    the note that says so: why two pools, or why a model with sliding layers gets one."""
    from kvgate.engines.sglang.flags import is_blackwell  # noqa: PLC0415

    v = tuple(release.version)
    why = two_pools_why(model, v, is_blackwell(gpu_name))
    if why is None:
        if not model.kinds().get("sliding"):
            return None, (f"--swa-full-tokens-ratio {ratio}: no effect, {model.name} has no sliding-window layers"
                          if ratio is not None else None)
        return None, (f"SGLang {release.text} keeps every layer at full length for this model (one pool, no "
                      f"SWAKVPool: {_one_pool_why(model, v, is_blackwell(gpu_name))})")
    r = DEFAULT_SWA_FULL_TOKENS_RATIO if ratio is None else ratio
    split = swa_split(geo, model, v, r)
    return split, (f"SGLang {release.text} builds two pools (SWAKVPool, {split.rule} rule; {why}): "
                   f"{split.full_layers} full-attention layers hold max_total_num_tokens, {split.swa_layers} "
                   f"sliding-window layers {r:g} × as many (--swa-full-tokens-ratio)")


def _one_pool_why(model: ModelSpec, v: tuple[int, ...], blackwell: bool | None) -> str:
    archs = architectures(model)
    arch = archs[0] if archs else "this architecture"
    if v >= BY_LIST_FROM and arch == "GptOssForCausalLM" and blackwell:
        return ('server_args.py: the trtllm_mha backend (its default on compute capability 10): "Disable hybrid '
                'SWA memory for GPT-OSS model with trtllm_mha attention backend."')
    if v < SWA_POOL_FROM:
        return "no hybrid pool before 0.4.10"
    if v < BY_LIST_FROM and arch in _union(_DISABLED, v):
        return f'server_args.py: "Disable hybrid SWA memory for {arch} as it is not yet supported."'
    if v >= BY_LIST_FROM:
        return f"{arch} is not in configs/model_config.py is_hybrid_swa_model's list"
    if v >= MIMO_ONLY:
        return "configs/model_config.py is_hybrid_model takes MiMoV2FlashForCausalLM alone"
    return f"{arch}'s SGLang class has no get_attention_sliding_window_size"


def swa_settings(settings: SglangSettings, split: SwaSplit | None, given: float | None) -> SglangSettings:
    """``settings`` with the ratio in force (and, when defaulted, why)."""
    from dataclasses import replace  # noqa: PLC0415

    if split is None:
        return settings
    d = dict(settings.defaults)
    if given is None:
        d["swa_full_tokens_ratio"] = "SGLang's default (server_args.py)"
    return replace(settings, swa_full_tokens_ratio=split.ratio, defaults=d)
