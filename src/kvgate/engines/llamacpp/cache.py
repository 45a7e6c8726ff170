"""llama-server's prompt reuse: per-slot longest common prefix on the device and the host
``--cache-ram`` prompt cache, replayed over a hashed trace.

Read from llama.cpp at commit 0c1e57098bba (vendored by llama-cpp-python 0.3.36, the
commit :data:`kvgate.engines.llamacpp.pool.PINNED_COMMIT` names), ``tools/server/``:

- ``server_context::get_available_slot`` (server-context.cpp): with
  ``slot_prompt_similarity`` (``--slot-prompt-similarity``, default 0.1) the idle slot
  with the largest ``f_sim = lcp / len(new)`` above it (strictly, first wins ties); its
  old prompt goes to the prompt cache when ``f_keep = lcp / len(slot) < 0.5``. Otherwise
  the least recently used slot (``t_last_used <=``: the last of equals; never-used
  slots are −1) and its old prompt always goes to the cache. Then ``prompt_save``
  (below) and ``prompt_load`` of the new prompt, then ``update``.
- ``server_prompt_cache::alloc`` (server-task.cpp): skip a prompt already wholly held
  by a cached one or larger than the limit; drop cached prompts wholly contained in the
  new one; drop the oldest while ``size + new > limit``; append.
- ``server_prompt_cache::load``: among cached prompts with ``f_keep ≥ 0.25``, the first
  whose ``f_keep`` and ``f_sim`` both beat the slot's own (strictly) is restored into
  the slot and removed from the cache.
- ``server_prompt_cache::update``: drop the oldest while over the byte limit, then while
  over ``max(n_ctx, limit / size_per_token)`` tokens.
- after a task is launched, with ``--cache-idle-slots`` (default on, needs
  ``--cache-ram``) every idle slot is saved to the cache (and cleared under ``-kvu``).
- the served hit (``n_past``, reported as ``timings.cache_n``): the slot's prompt's
  common prefix with the new one; when it is the whole new prompt one token is
  re-evaluated (``n_past--``), and a one-token match with nothing new is reset to 0 (the
  ``pos_min_thold`` test of a model without sliding windows).
- the size of a saved prompt: ``llama_state_seq_get_size`` =
  ``llama_kv_cache::state_write`` (src/llama-kv-cache.cpp): 4 B (stream count) + 4 B per
  stream (cell count) + for the slot's n cells: 12 B each (pos, n_seq_id, seq_id), 8 B
  (v_trans, n_layer), 24 B per layer (K and V type + row size) and the K and V rows
  (n × bytes per token), see :func:`state_bytes`.

Requests are served one at a time in file order (each finishes before the next starts,
as the trace replay of ``benchmarks/tier_llama_server.py`` sends them) with
``n_predict = 1`` (the sampled token is never decoded, so a slot holds the prompt only).
Prompts are a trace's blocks: two prompts share tokens exactly as far as they share
leading hash ids (distinct ids differ at their first token), capped by both lengths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvgate.engines.llamacpp.prompt import Prompt, _State
from kvgate.tier import progress
from kvgate.tier.traces import HashedTrace

_F = np.float32  # the server compares C++ floats


def common_prefix(a: Prompt, b: Prompt, block_tokens: int) -> int:
    """Tokens two prompts share from the start (``server_tokens::get_common_prefix`` on
    the prompts the trace stands for)."""
    j = 0
    for x, y in zip(a.ids, b.ids):
        if x != y:
            break
        j += 1
    return min(j * block_tokens, a.n_tokens, b.n_tokens)


def state_bytes(n_tokens: int, bytes_per_token: int, n_layer: int, n_stream: int = 1) -> int:
    """``llama_state_seq_get_size`` of one slot holding ``n_tokens`` cells (module
    docstring: ``llama_kv_cache::state_write`` at the pinned commit; a model without M-RoPE
    cell extensions, one KV cache)."""
    head = 4 + 4 * n_stream
    if n_tokens == 0:
        return head
    return head + 8 + 24 * n_layer + n_tokens * (12 + bytes_per_token)


@dataclass
class LlamaCppServer:
    """The slots and the host prompt cache of one llama-server (module docstring).

    Args:
        block_tokens: tokens per trace block.
        n_slots: ``-np``.
        n_ctx: the whole context ``-c`` (the prompt cache's token limit).
        cache_ram_bytes: ``--cache-ram`` in bytes (MiB × 2^20); 0 disables the cache;
            ``None`` is ``--cache-ram -1`` (no limit).
        bytes_per_token, n_layer, n_stream: of :func:`state_bytes` (``n_stream`` = ``-np``
            unless ``-kvu``, then 1).
        slot_prompt_similarity: ``--slot-prompt-similarity`` (``-sps``), default 0.1.
        cache_idle_slots: ``--cache-idle-slots`` (default on; off without a cache).
        kv_unified: ``-kvu``.
    """

    block_tokens: int
    n_slots: int = 1
    n_ctx: int = 0
    cache_ram_bytes: int | None = 8192 * 2**20
    bytes_per_token: int = 0
    n_layer: int = 0
    n_stream: int = 1
    slot_prompt_similarity: float = 0.1
    cache_idle_slots: bool = True
    kv_unified: bool = False
    slots: list[Prompt | None] = field(init=False)
    last_used: list[int] = field(init=False)
    states: list[_State] = field(default_factory=list)
    saved_tokens: int = 0
    _clock: int = 0

    def __post_init__(self) -> None:
        self.slots = [None] * self.n_slots
        self.last_used = [-1] * self.n_slots

    @property
    def cache_enabled(self) -> bool:
        """``--cache-ram`` not 0."""
        return self.cache_ram_bytes != 0

    @property
    def _limit(self) -> int:
        return 0 if self.cache_ram_bytes is None else self.cache_ram_bytes

    def _lcp(self, a: Prompt, b: Prompt) -> int:
        return common_prefix(a, b, self.block_tokens)

    def _size(self, p: Prompt) -> int:
        return state_bytes(p.n_tokens, self.bytes_per_token, self.n_layer, self.n_stream)

    def cache_bytes(self) -> int:
        """Bytes the host prompt cache holds now."""
        return sum(s.size for s in self.states)

    # server_prompt_cache::alloc
    def _save(self, prompt: Prompt | None) -> bool:
        if prompt is None or prompt.n_tokens == 0:
            return False
        for s in self.states:
            if self._lcp(s.prompt, prompt) == prompt.n_tokens:
                return False
        new = self._size(prompt)
        limit = self._limit
        if limit > 0 and new > limit:
            return False
        self.states = [s for s in self.states if self._lcp(s.prompt, prompt) != s.prompt.n_tokens]
        if limit > 0:
            while self.states and self.cache_bytes() + new > limit:
                self.states.pop(0)
        self.states.append(_State(prompt, new))
        self.saved_tokens += prompt.n_tokens
        return True

    # server_prompt_cache::load
    def _load(self, slot: int, new: Prompt) -> None:
        cur = self.slots[slot]
        lcp = self._lcp(cur, new) if cur is not None else 0
        n_cur = cur.n_tokens if cur is not None else 0
        f_keep_best = _F(lcp) / _F(n_cur) if n_cur > 0 else _F(-1.0)
        f_sim_best = _F(lcp) / _F(new.n_tokens)
        best = None
        for k, s in enumerate(self.states):
            lc = self._lcp(s.prompt, new)
            f_keep = _F(lc) / _F(s.prompt.n_tokens)
            f_sim = _F(lc) / _F(new.n_tokens)
            if f_keep < _F(0.25):
                continue
            if f_keep_best < f_keep and f_sim_best < f_sim:
                f_keep_best, f_sim_best, best = f_keep, f_sim, k
        if best is not None:
            self.slots[slot] = self.states.pop(best).prompt

    # server_prompt_cache::update
    def _update(self) -> None:
        limit = self._limit
        if limit > 0:
            while self.states and self.cache_bytes() > limit:
                self.states.pop(0)
        n_tok = sum(s.prompt.n_tokens for s in self.states)
        size_per_token = max(_F(1.0), _F(self.cache_bytes()) / _F(max(1, n_tok)))
        limit_tokens_cur = max(self.n_ctx, int(_F(limit) / size_per_token)) if limit > 0 else self.n_ctx
        if self.n_ctx > 0:
            while self.states and sum(s.prompt.n_tokens for s in self.states) > limit_tokens_cur:
                self.states.pop(0)

    def _pick_slot(self, new: Prompt) -> tuple[int, bool]:
        ret, update = None, False
        if self.slot_prompt_similarity != 0.0:
            f_sim_best = _F(0.0)
            for i, p in enumerate(self.slots):
                if p is None or p.n_tokens == 0:
                    continue
                lcp = self._lcp(p, new)
                f_sim = _F(lcp) / _F(new.n_tokens)
                if f_sim > f_sim_best and f_sim > _F(self.slot_prompt_similarity):
                    f_sim_best, ret = f_sim, i
            if ret is not None:
                held = self.slots[ret]
                assert held is not None
                if (f_sim_best * _F(new.n_tokens)) / _F(held.n_tokens) < _F(0.5):
                    update = True
        if ret is None:
            t_last = -1
            for i in range(self.n_slots):
                if ret is None or self.last_used[i] <= t_last:
                    t_last, ret = self.last_used[i], i
            update = True
        assert ret is not None  # n_slots >= 1 and no slot is busy between requests
        return ret, update

    def serve(self, new: Prompt) -> int:
        """Serve one request; returns its cached tokens (``timings.cache_n``)."""
        if new.n_tokens == 0:
            return 0
        slot, update = self._pick_slot(new)
        if update and self.cache_enabled:
            self._save(self.slots[slot])
            self._load(slot, new)
            self._update()
        if self.cache_idle_slots and self.cache_enabled:
            for i in range(self.n_slots):
                if i != slot:
                    if self._save(self.slots[i]):
                        self._update()
                    if self.kv_unified:
                        self.slots[i] = None
        cur = self.slots[slot]
        n_past = self._lcp(cur, new) if cur is not None else 0
        has_new = n_past < new.n_tokens
        if 0 < n_past and not has_new and n_past - 1 <= 0:
            n_past = 0  # pos_min (0) >= pos_min_thold (pos_next - 1 = 0): no checkpoint, reset
        if n_past == new.n_tokens and n_past > 0:
            n_past -= 1
        self.slots[slot] = new
        self._clock += 1
        self.last_used[slot] = self._clock
        return n_past


def prompts(trace: HashedTrace) -> list[Prompt]:
    """The trace's requests as :class:`Prompt` objects, in file order."""
    ids = trace.ids.tolist()
    off = trace.offsets.tolist()
    return [Prompt(tuple(ids[off[i] : off[i + 1]]), int(trace.input_length[i])) for i in range(trace.n_requests)]


def replay(trace: HashedTrace, server: LlamaCppServer, *, compiled: bool | None = None) -> np.ndarray:
    """Each request's cached tokens (int64 ``[n]``) served by ``server``; on a fresh server
    compiled (:mod:`kvgate.engines.llamacpp.cache_fast`) when numba imports, unless
    ``compiled`` is False."""
    from kvgate.tier import kernel

    fresh = server._clock == 0 and not server.states and all(p is None for p in server.slots)
    if compiled is not False and kernel.HAVE_NUMBA and fresh:
        from kvgate.engines.llamacpp import cache_fast

        return cache_fast.replay_compiled(trace, server)
    return np.array([server.serve(p) for p in prompts(trace)], dtype=np.int64)


DEFAULT_CACHE_RAM_MIB = 8192  # common_params.cache_ram_mib (common/common.h, pinned commit)


def tier_server(trace: HashedTrace, out: dict[str, Any], settings: Any, *, bytes_per_token: int,
                host_bytes: int | None, need: float, prompt: int) -> tuple[int, int, int, int | None, str]:
    """``kvgate tier --cache-model llama.cpp``: llama-server's slots alone (``--cache-ram 0``)
    and with its host prompt cache. Sets ``out["device"]`` and ``out["host"]``; returns
    (device hits, device + host hits, tokens saved on the host, the ``--cache-ram`` from
    which the host adds ``need`` tokens, its basis). ``settings``: the server's
    (:class:`kvgate.tier.analysis.LlamaCppSettings`); ``host_bytes`` ``None``: llama-server's
    default ``--cache-ram``, negative: no limit."""
    from kvgate.tier.gate import first_capacity_reaching  # noqa: PLC0415
    from kvgate.units import MiB  # noqa: PLC0415

    B, s = trace.block_tokens, settings
    ram = DEFAULT_CACHE_RAM_MIB * MiB if host_bytes is None else (None if host_bytes < 0 else host_bytes)

    def share(part: int) -> float | None:
        return part / prompt if prompt else None

    def server(cache_ram: int | None) -> LlamaCppServer:
        return LlamaCppServer(B, n_slots=s.n_slots, n_ctx=s.n_ctx, cache_ram_bytes=cache_ram,
                              bytes_per_token=bytes_per_token, n_layer=s.n_layer,
                              n_stream=1 if s.kv_unified else s.n_slots,
                              slot_prompt_similarity=s.slot_prompt_similarity,
                              cache_idle_slots=s.cache_idle_slots, kv_unified=s.kv_unified)  # fmt: skip

    progress.stage("llama-server: slots alone (--cache-ram 0)")
    dev = int(replay(trace, server(0)).sum())
    out["device"] = {"slots": s.n_slots, "n_ctx": s.n_ctx, "hit_tokens": dev, "hit_share": share(dev)}
    tiered = server(ram)
    progress.stage("llama-server: slots and the --cache-ram prompt cache")
    per = replay(trace, tiered)
    both = int(per.sum())
    stored = tiered.saved_tokens
    out["host"] = {"capacity_bytes": ram, "cache_ram_mib": None if ram is None else ram / MiB,
                   "hit_tokens": both, "hit_share": share(both), "added_hit_tokens": both - dev,
                   "added_hit_share": share(both - dev), "stored_tokens": stored,
                   "per_request_cache_n_sum": both}  # fmt: skip
    # host capacity boundary on a doubling grid of --cache-ram (MiB), each one replay
    added_at = []
    progress.stage("llama-server: the --cache-ram boundary (1, 2, 4, ... MiB)", 21, "replays")
    for k, mib in enumerate(2**k for k in range(0, 21)):
        progress.advance(k)
        a = int(replay(trace, server(mib * MiB)).sum()) - dev
        added_at.append((mib * MiB, a))
        if a >= need and a > 0:
            break
    return dev, both, stored, first_capacity_reaching(added_at, need), "llama.cpp replays at --cache-ram 1, 2, 4, ... MiB"
