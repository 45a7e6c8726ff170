"""llama.cpp's per-architecture memory rules that a GGUF's keys alone do not give.

Read at llama.cpp commit ``0c1e57098bba43ac29e6e3b677cdceebdd22334f``, each architecture's
``load_arch_hparams`` in ``src/models/<arch>.cpp`` and ``llama_model::create_memory``
(``src/llama-model.cpp``):

- **Which architectures use sliding windows, and how** (:data:`SWA_RULES`). An
  architecture not listed there runs every layer at full attention in llama.cpp, whatever
  ``attention.sliding_window`` says: ``src/models/phi3.cpp`` reads the key and then sets
  ``swa_type = LLAMA_SWA_TYPE_NONE``, ``n_swa = 0`` ("Phi SWA is currently disabled");
  Llama (Mistral, Mixtral), Qwen2/3, PhiMoE and the rest never read it. Audited over every
  ``src/models/*.cpp`` at the pinned commit: the files that set ``swa_type`` /
  ``set_swa_pattern`` / ``load_swa_pattern`` are exactly the keys of :data:`SWA_RULES`, plus
  phi3 (which turns it off), ``gemma-embedding`` and ``modern-bert`` (no memory at all:
  ``create_memory`` returns ``nullptr``), and ``deepseek4`` / ``dots3note`` (not modelled).
- **The same rules for a config.json** sized in llama.cpp's layout
  (:func:`arch_for_config`, :func:`config_swa`): the architecture the converter writes
  (:mod:`kvgate.engines.llamacpp.convert`), then the rule above.
- **Patterns** (``load_swa_pattern`` / ``llama_hparams::set_swa_pattern``): a bool array
  ``attention.sliding_window_pattern`` wins; else an int N from the file or the
  architecture's default: layer il slides iff ``il % N < N − 1`` or, for "dense first"
  architectures, ``il % N != 0``; N = 0 means every layer.
- **Windows the code fixes**: Gemma-2 defaults to 4,096 when the file has none;
  SmallThinker forces 4,096 and Llama-4 forces 8,192 (chunked), whatever the file says;
  EXAONE-4 has sliding layers only in its 64-layer model.
- **Caches kvgate does not model** (:data:`NOT_MODELLED`): refused with the cache named,
  never sized by a guess.

:data:`ARCH_NAMES` is llama.cpp's ``LLM_ARCH_NAMES`` at that commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PINNED_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"

# src/llama-arch.cpp LLM_ARCH_NAMES
ARCH_NAMES = frozenset("""
clip llama llama4 deci falcon grok gpt2 gptj gptneox mpt baichuan starcoder refact bert modern-bert nomic-bert
nomic-bert-moe neo-bert jina-bert-v2 jina-bert-v3 eurobert bloom stablelm qwen qwen2 qwen2moe qwen2vl qwen3 qwen3moe
qwen3next qwen3vl qwen3vlmoe qwen35 qwen35moe qwen4exp phi2 phi3 phimoe plamo plamo2 plamo3 codeshell orion internlm2
minicpm minicpm3 gemma gemma2 gemma3 gemma3n gemma4 gemma4-assistant gemma-embedding starcoder2 mamba mamba2 maple
jamba falcon-h1 xverse command-r cohere2 cohere2moe dbrx olmo olmo2 olmoe muse-glimmer openelm arctic deepseek
deepseek2 deepseek2-ocr deepseek32 deepseek4 chatglm glm4 glm4moe glm-dsa bitnet t5 t5encoder jais jais2 nemotron
nemotron_h nemotron_h_moe exaone exaone4 exaone-moe rwkv6 rwkv6qwen2 rwkv7 arwkv7 granite granitemoe granitehybrid
graniteswitch granite_swa chameleon wavtokenizer-dec plm bailingmoe bailingmoe2 bailingmoe3 dots1 dots3note arcee
afmoe laguna ernie4_5 ernie4_5-moe hunyuan-moe hunyuan-dense hunyuan_vl hy_v3 hy_v4 smollm3 gpt-oss lfm2 lfm2moe
dream smallthinker llada llada-moe seed_oss grovemoe apertus minimax-01 hrm_text minimax-m2 minimax-m3 cogvlm rnd1
pangu-embedded mistral3 eagle3 dflash mistral4 paddleocr mimo2 step35 spark2_5 llama-embed maincoder kimi-linear
kimi-k3 glm5-next talkie mellum nanbeige qwen3tts pockettts
""".split())


@dataclass(frozen=True)
class SwaRule:
    """How one architecture's ``load_arch_hparams`` sets its sliding layers.

    Attributes:
        pattern: default int pattern for ``load_swa_pattern`` (``None``: the file must
            hold a bool array, ``ml.get_arr(..., required)``).
        dense_first: ``set_swa_pattern(n, dense_first=true)``: layer il slides iff
            ``il % n != 0``.
        needs_window: SWA only when the file has ``attention.sliding_window`` > 0 (else
            every layer is full).
        default_window: window when the file has none (Gemma-2: 4,096).
        forced_window: window the code sets whatever the file says.
        chunked: chunked-local attention (Llama-4) rather than a sliding window.
        only_layers: SWA only for a model of this many layers (EXAONE-4: 64).
        all_attention: every non-recurrent layer slides (LFM2).
    """

    pattern: int | None
    dense_first: bool = False
    needs_window: bool = False
    default_window: int | None = None
    forced_window: int | None = None
    chunked: bool = False
    only_layers: int | None = None
    all_attention: bool = False


SWA_RULES: dict[str, SwaRule] = {
    "gemma2": SwaRule(2, default_window=4096),
    "gemma3": SwaRule(6, needs_window=True),
    "gemma3n": SwaRule(5),
    "gemma4": SwaRule(None),
    "gemma4-assistant": SwaRule(None),
    "gpt-oss": SwaRule(2),
    "cohere2": SwaRule(4),
    "cohere2moe": SwaRule(4, dense_first=True),
    "olmo2": SwaRule(4, needs_window=True),
    "afmoe": SwaRule(4, needs_window=True),
    "mellum": SwaRule(4, needs_window=True),
    "plamo3": SwaRule(8, needs_window=True),
    "muse-glimmer": SwaRule(4),
    "exaone-moe": SwaRule(4),
    "exaone4": SwaRule(4, default_window=4096, only_layers=64),
    "smallthinker": SwaRule(4, dense_first=True, needs_window=True, forced_window=4096),
    "laguna": SwaRule(4, dense_first=True, needs_window=True),
    "llama4": SwaRule(4, forced_window=8192, chunked=True),
    "granite_swa": SwaRule(None),
    "maple": SwaRule(None),
    "spark2_5": SwaRule(None),
    "step35": SwaRule(None),
    "mimo2": SwaRule(None),
    "lfm2": SwaRule(None, needs_window=True, all_attention=True),
    "lfm2moe": SwaRule(None, needs_window=True, all_attention=True),
    # src/models/dflash.cpp: optional SWA, a bool array required when the window is > 0
    "dflash": SwaRule(None, needs_window=True),
}

# Gemma-3n: only the first 20 layers own KV; the rest reuse it (src/models/gemma3n.cpp
# hparams.n_layer_kv_from_start = 20, hard-coded)
KV_FROM_START = {"gemma3n": 20}

# GLM-5.2 default indexer layers (src/models/glm-dsa.cpp GLM_5_2_DEFAULT_INDEXER_TYPES),
# used when the file has no attention.indexer.types and n_ctx_train ≥ 1,048,576
GLM_5_2_INDEXER_FULL = [True, True] + [i % 4 == 0 for i in range(76)]

# keys each recurrent architecture's load_arch_hparams reads as required (ml.get_key without
# `false`): without them llama.cpp refuses the file, so kvgate does too, never sizing 0
_SSM = ("ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank")
REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "mamba": _SSM, "jamba": _SSM,
    "mamba2": _SSM + ("ssm.group_count",), "granitehybrid": _SSM + ("ssm.group_count",),
    "nemotron_h": _SSM + ("ssm.group_count",), "nemotron_h_moe": _SSM + ("ssm.group_count",),
    "qwen3next": _SSM + ("ssm.group_count",), "qwen35": _SSM + ("ssm.group_count",),
    "qwen35moe": _SSM + ("ssm.group_count",),
    "lfm2": ("shortconv.l_cache",), "lfm2moe": ("shortconv.l_cache",),
    "kimi-linear": ("kda.head_dim", "ssm.conv_kernel"),
    "falcon-h1": _SSM + ("ssm.group_count",),  # src/models/falcon-h1.cpp
}

# Falcon-H1 (src/models/falcon-h1.cpp: is_recr_impl all true; llama_model::create_memory:
# llama_memory_hybrid with filter_attn and filter_recr both "every layer"): each layer keeps
# attention K/V cells *and* a Mamba-2 state (n_embd_r + n_embd_s, f32)
ATTENTION_AND_STATE = frozenset({"falcon-h1"})

# Qwen3-Next / Qwen3.5: without attention.recurrent_layers, full_attention_interval with a
# default of 4 (src/models/qwen3next.cpp, qwen35.cpp, qwen35moe.cpp)
DEFAULT_FULL_ATTENTION_INTERVAL = {"qwen3next": 4, "qwen35": 4, "qwen35moe": 4}

# architectures whose llama.cpp memory kvgate does not model (the cache class named)
NOT_MODELLED = {
    "deepseek4": "llama_kv_cache_dsv4 (compressed attention)",
    "minimax-m3": "llama_kv_cache_msa (sparse-attention indexer cache)",
    "kimi-k3": "llama_memory_hybrid_idx (KDA + MLA + indexer)",
    "glm5-next": "llama_memory_hybrid_idx (KDA + MLA + indexer)",
    "hy_v4": "llama_kv_cache_dsa with shared indexer layers",
    "dots3note": "MLA with sliding layers and an indexer",
    "qwen4exp": "hybrid memory with an indexer and PLE history",
    "hrm_text": "cache slots aliased across H/L cycles",
    "rwkv6": "RWKV token-shift and WKV state", "rwkv6qwen2": "RWKV token-shift and WKV state",
    "rwkv7": "RWKV token-shift and WKV state", "arwkv7": "RWKV token-shift and WKV state",
    "plamo2": "hybrid Mamba state with PLaMo-2's own sizes",
    "bailingmoe3": "hybrid linear attention with its own state sizes",
    # src/models/minimax-01.cpp: lightning-attention layers (attention.recurrent_layers, else
    # every layer but each 8th) keep n_embd_head_la² × n_head of recurrent state
    "minimax-01": "llama_memory_hybrid with lightning-attention state (n_embd_head_la² × n_head)",
}

# llama_model::create_memory returns nullptr for these (embedding and diffusion models): no
# KV cache and no recurrent state at all, whatever the attention keys say
NO_MEMORY = frozenset("""
bert jina-bert-v2 jina-bert-v3 nomic-bert nomic-bert-moe neo-bert eurobert wavtokenizer-dec modern-bert
gemma-embedding dream llada llada-moe rnd1
""".split())


# an architecture llama.cpp does not have: the file's window and pattern, nothing assumed
FROM_THE_FILE = SwaRule(None, needs_window=True)


def swa_flags(arch: str, meta_window: int | None, pattern: object, n_main: int, recurrent: list[bool],
              rule: SwaRule | None = None) -> tuple[int, list[bool], bool, list[str]]:
    """Sliding layers for ``arch`` as llama.cpp sets them.

    Args:
        arch: GGUF ``general.architecture``.
        meta_window: the file's ``attention.sliding_window`` (``None`` when absent).
        pattern: the file's ``attention.sliding_window_pattern`` (bool list, int or ``None``).
        n_main: ``n_layer()``: layers of the main model (without MTP / nextn layers).
        recurrent: per layer, whether it is recurrent (LFM2's rule needs it).
        rule: the rule to apply instead of ``arch``'s (e.g. :data:`FROM_THE_FILE`).

    Returns:
        ``(window, sliding per layer (length n_main), chunked, notes)``; window 0 and no
        sliding layer when llama.cpp runs the architecture at full attention.

    Raises:
        ValueError: the file lacks what llama.cpp requires (the message names the key).
    """
    notes: list[str] = []
    rule = rule or SWA_RULES.get(arch)
    full = (0, [False] * n_main, False, notes)
    if rule is None:
        if meta_window:
            notes.append(f"llama.cpp runs {arch} at full attention on every layer: its attention.sliding_window "
                         f"{meta_window:,} is not used (src/models/{arch}.cpp)")
        return full
    if rule.only_layers is not None and n_main != rule.only_layers:
        return full
    if rule.needs_window and not meta_window:
        return full
    if arch == "llama4" and meta_window == 0:
        return full
    window = rule.forced_window or meta_window or rule.default_window
    if not window:
        raise ValueError("attention.sliding_window is missing or 0, and llama.cpp requires it for this architecture")
    if rule.forced_window and meta_window and meta_window != rule.forced_window:
        notes.append(f"{arch}: llama.cpp uses a window of {rule.forced_window:,} whatever the file says "
                     f"({meta_window:,})")
    if rule.all_attention:
        return window, [not r for r in recurrent[:n_main]], False, notes
    if isinstance(pattern, list):
        if len(pattern) < n_main:
            raise ValueError(f"attention.sliding_window_pattern has {len(pattern)} entries for {n_main} layers")
        flags = [bool(x) for x in pattern[:n_main]]
    else:
        n = pattern if isinstance(pattern, int) else rule.pattern
        if n is None:
            raise ValueError(f"attention.sliding_window {window} but no attention.sliding_window_pattern "
                             "(one bool per layer, or an int), which this architecture needs")
        if rule.dense_first:
            flags = [n == 0 or i % n != 0 for i in range(n_main)]
        else:
            flags = [n == 0 or i % n < n - 1 for i in range(n_main)]
    return window, flags, rule.chunked, notes


# config.json model_type -> llama.cpp architecture, for configs without an ``architectures``
# list (a nested text config); the class names of ``architectures`` come first
# (kvgate.engines.llamacpp.convert, read from the converter)
MODEL_TYPES = {
    "llama": "llama", "mistral": "llama", "mixtral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
    "qwen3_moe": "qwen3moe", "phi3": "phi3", "phimoe": "phimoe", "gemma2": "gemma2", "gemma3_text": "gemma3",
    "gemma3n_text": "gemma3n", "gemma4_text": "gemma4", "gpt_oss": "gpt-oss", "llama4_text": "llama4",
    "qwen3_vl_text": "qwen3vl", "qwen3_vl_moe_text": "qwen3vlmoe", "qwen3_5_text": "qwen35",
    "qwen3_5_moe_text": "qwen35moe", "qwen3_next": "qwen3next", "falcon_h1": "falcon-h1", "cohere2": "cohere2",
    "exaone4": "exaone4", "olmo2": "olmo2", "mimo_v2_flash": "mimo2", "step3p5": "step35", "lfm2": "lfm2",
}


def arch_for_config(config: dict[str, Any], model_type: str | None) -> str | None:
    """The llama.cpp architecture ``convert_hf_to_gguf.py`` writes for a config.json:
    its first ``architectures`` class the converter registers, else its ``model_type``
    (:data:`MODEL_TYPES`); ``None`` when neither is known."""
    from kvgate.engines.llamacpp.convert import HF_ARCHITECTURES

    archs = config.get("architectures")
    for a in archs if isinstance(archs, list) else []:
        if isinstance(a, str) and a in HF_ARCHITECTURES:
            return HF_ARCHITECTURES[a]
    return MODEL_TYPES.get(model_type) if isinstance(model_type, str) else None  # a list or dict names no type


@dataclass(frozen=True)
class ConfigSwa:
    """What llama.cpp makes of a config's sliding layers (:func:`config_swa`).

    Attributes:
        full: every sliding layer runs at full attention (``n_swa = 0``).
        window: the window llama.cpp forces on every sliding layer, or ``None`` (the
            config's).
        notes: what was changed and why.
    """

    full: bool = False
    window: int | None = None
    notes: tuple[str, ...] = ()


def config_swa(arch: str | None, n_layers: int, windows: set[int]) -> ConfigSwa:
    """llama.cpp's rule (:data:`SWA_RULES`) for a config whose sliding layers have the
    windows ``windows`` (empty: none), for the architecture ``arch`` the converter writes.

    An architecture llama.cpp does not window (Phi-3, Llama/Mistral, Qwen2/3, …) or a rule
    that applies only to another layer count (EXAONE-4: 64) gives ``full``; a forced window
    (SmallThinker 4,096, Llama-4 8,192) replaces the config's. Otherwise (and for an
    architecture not known here) the config's windows stand.
    """
    if not windows:
        return ConfigSwa()
    w = ", ".join(f"{x:,}" for x in sorted(windows))
    if arch is None or arch not in ARCH_NAMES or arch in NOT_MODELLED:
        return ConfigSwa()
    rule = SWA_RULES.get(arch)
    if rule is None:
        return ConfigSwa(full=True, notes=(
            f"llama.cpp runs {arch} at full attention on every layer: the config's sliding_window {w} is not used "
            f"(src/models/{arch.replace('_', '-')}.cpp at {PINNED_COMMIT[:12]})",))
    if rule.only_layers is not None and n_layers != rule.only_layers:
        return ConfigSwa(full=True, notes=(
            f"llama.cpp windows {arch} only in its {rule.only_layers}-layer model: this one ({n_layers} layers) runs "
            f"at full attention (src/models/{arch}.cpp)",))
    if rule.forced_window and windows != {rule.forced_window}:
        return ConfigSwa(window=rule.forced_window, notes=(
            f"{arch}: llama.cpp uses a window of {rule.forced_window:,} whatever the config says ({w})",))
    return ConfigSwa()
