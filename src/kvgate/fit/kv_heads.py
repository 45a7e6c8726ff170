"""KV heads under tensor parallelism: how many each rank keeps, and how many ranks keep a
copy of each, so a hand check of the KV bytes per GPU adds up.

Both engines split the KV heads over the tensor-parallel ranks and, when there are fewer
heads than ranks, give every rank one whole head, copied:

- vLLM ``vllm/model_executor/layers/linear.py`` ``QKVParallelLinear.__init__``::

      if tp_size >= self.total_num_kv_heads:
          self.num_kv_heads = 1
          self.num_kv_head_replicas = divide(tp_size, self.total_num_kv_heads)
      else:
          self.num_kv_heads = divide(self.total_num_kv_heads, tp_size)
          self.num_kv_head_replicas = 1

  and the cache side, ``vllm/config/model.py`` ``ModelConfig.get_num_kv_heads``: "We will
  replicate the KV heads in the case where the number of KV heads is smaller than the
  tensor parallel size so each GPU has at least one KV head":
  ``max(1, total_num_kv_heads // tensor_parallel_size)``; an MLA model has one (the
  latent), whole on every rank.
- SGLang ``python/sglang/srt/layers/linear.py`` ``QKVParallelLinear`` (the same lines) and
  ``python/sglang/srt/configs/model_config.py`` ``ModelConfig.get_num_kv_heads`` (the same
  ``max(1, total_num_kv_heads // tensor_parallel_size)``, "adapted from" vLLM's).

A split where neither divides the other (12 heads on 8 ranks) is refused by both
(``divide`` asserts); :func:`kvgate.geometry.specs.kv_heads_per_rank` refuses it too, so a
geometry that exists here has a whole number of copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvgate.geometry.specs import HeadRows, MLAAttention


@dataclass(frozen=True)
class KvHeadSplit:
    """The KV heads of one model on ``tp`` ranks, where a rank keeps more than its
    ``1/tp`` share: ``heads`` in the model (0 for MLA), ``per_rank`` each rank keeps,
    ``copies`` ranks holding each head (``tp`` for MLA's latent), and
    ``rank_bytes_per_token`` the KV bytes one token costs one rank (the layout's)."""

    tp: int
    heads: int
    per_rank: int
    copies: int
    rank_bytes_per_token: int
    mla: bool

    def to_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "kv_heads": self.heads, "kv_heads_per_rank": self.per_rank, "copies": self.copies,
                "rank_bytes_per_token": self.rank_bytes_per_token, "mla": self.mla}

    def sentence(self, tp_flag: str) -> str:
        """What a reader checking the KV bytes by hand needs: the copies and the bytes per
        token on one GPU."""
        b = f"{self.rank_bytes_per_token:,} B of KV per token on each GPU"
        if self.mla:
            return (f"KV heads: the MLA latent is one KV head, kept whole on each of the {self.tp} GPUs "
                    f"({tp_flag} {self.tp} does not split it): {b}")
        return (f"KV heads replicated: the model has {self.heads} KV head{'s' if self.heads != 1 else ''}, "
                f"{tp_flag} {self.tp} has more ranks, so each GPU keeps {self.per_rank} and each head is "
                f"copied on {self.copies} GPUs: {b}, {self.copies}× an even 1/{self.tp} share")


def kv_head_split(geometry: Any) -> KvHeadSplit | None:
    """The :class:`KvHeadSplit` of a :class:`kvgate.geometry.KVGeometry` (per rank at its
    ``tp``), or ``None`` where every rank keeps its even share (``tp`` 1, or heads that
    ``tp`` divides). Layers with fewer heads than ranks (the fewest heads of any attention
    layer) or an MLA latent make a split."""
    tp = geometry.tp
    if tp <= 1:
        return None
    heads = [s.num_kv_heads for s in geometry.specs if isinstance(s, HeadRows) and s.num_kv_heads > 0]
    per_token = geometry.bytes_per_token()
    few = min(heads, default=0)
    if heads and few < tp:
        return KvHeadSplit(tp=tp, heads=few, per_rank=1, copies=tp // few, rank_bytes_per_token=per_token,
                           mla=False)
    if not heads and any(isinstance(s, MLAAttention) for s in geometry.specs):
        return KvHeadSplit(tp=tp, heads=0, per_rank=1, copies=tp, rank_bytes_per_token=per_token, mla=True)
    return None
