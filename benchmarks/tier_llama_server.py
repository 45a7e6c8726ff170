"""Benchmark (not CI): the ``llama.cpp`` cache model (kvgate.engines.llamacpp.cache) against a real
llama-server with ``--cache-ram``, on CPU, serving the Mooncake conversation trace as prompts.

1. A tiny, complete Llama GGUF (random f32 weights, 4 layers, 2 KV heads of 64, f16 KV:
   2,048 B per token) with a vocabulary large enough that every hash id of the excerpt
   gets its own first token, written with the ``gguf`` package.
2. The requests of the first ``--conversations`` multi-request conversations (at most
   ``--requests``; :func:`scaled_trace`) of ``../shared/traces/mooncake_conversation_trace.jsonl``
   (Apache-2.0, Qin et al., FAST 2025), each hash id turned into the same block of
   ``--block-tokens`` tokens (its own first token, then seeded random tokens), each prompt
   cut to ceil(input_length × block / 512) tokens (the trace's blocks, scaled to CPU size:
   ceil(ceil(L·b/512) / b) = ceil(L / 512), so every request keeps its block count).
3. For each ``--cache-ram`` setting: start llama-server (127.0.0.1, ``-np 1``), send the
   prompts one at a time as token arrays (``/completion``, ``n_predict 1``), read
   ``timings.cache_n`` and ``timings.prompt_ms``; replay the same prompts through
   :class:`kvgate.engines.llamacpp.cache.LlamaCppServer` and compare request by request.
4. The predicted TTFT gain of the host tier (its added hit tokens × the measured prefill
   time per token of the ``--cache-ram 0`` run) against the measured one (Σ prompt_ms of
   ``--cache-ram 0`` minus that of the run with the cache).

Writes ``benchmarks/results/tier_llama_server.json``. Run:
``python benchmarks/tier_llama_server.py --server /path/to/llama-server``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvgate.engines.llamacpp.cache import LlamaCppServer, Prompt  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from llama_server_live import free_port, stop, wait_ready, write_tiny_llama  # noqa: E402

from kvgate.tier.stream import load_hashed_trace  # noqa: E402
from kvgate.tier.traces import HashedTrace  # noqa: E402

CFG = dict(n_layer=4, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, n_ctx_train=16384)
BYTES_PER_TOKEN = CFG["n_layer"] * 2 * CFG["n_head_kv"] * CFG["head_dim"] * 2  # K + V, f16
N_SPECIAL = 3 + 256  # <unk> <s> </s> and the byte tokens


def write_gguf(path: Path, n_words: int, seed: int = 0) -> None:
    """A loadable Llama GGUF (:func:`llama_server_live.write_tiny_llama`) whose vocabulary
    has ``n_words`` plain tokens ``w0 .. w{n-1}`` after the specials and byte tokens, no BOS."""
    write_tiny_llama(path, seed, cfg=CFG, words=[(f"w{i}", -1.0, 1) for i in range(n_words)], add_bos=False,
                     name="kvgate-tier-tiny")


def scaled_trace(src: Path, n: int, block: int, conversations: int | None = None) -> HashedTrace:
    """The first ``n`` requests with blocks of ``block`` tokens (module docstring); with
    ``conversations`` G, the requests (in file order, at most ``n``) of the first G
    conversations that have two requests or more, a conversation being the requests that
    share their first two hash ids (the first ~500 requests of the trace alone hold few
    follow-up turns: their reuse is the shared first block only)."""
    t = load_hashed_trace(src, limit=None if conversations else n)
    if conversations:
        keys = [tuple(t.request_ids(i)[:2].tolist()) for i in range(t.n_requests)]
        count: dict[tuple, int] = {}
        for k in keys:
            count[k] = count.get(k, 0) + 1
        chosen: dict[tuple, None] = {}
        for k in keys:
            if count[k] >= 2 and k not in chosen and len(chosen) < conversations:
                chosen[k] = None
        idx = [i for i in range(t.n_requests) if keys[i] in chosen][:n]
    else:
        idx = list(range(t.n_requests))
    scale = t.block_tokens // block
    reqs = [(int(-(-int(t.input_length[i]) // scale)), t.request_ids(i).tolist()) for i in idx]
    what = f"{len(idx)} requests of the first {conversations} multi-request conversations" if conversations \
        else f"first {len(idx)} requests"
    return HashedTrace.from_lists(reqs, block, source=f"{src} ({what}, block {block})", format=t.format)


def token_prompts(t: HashedTrace, n_words: int, seed: int = 0) -> list[list[int]]:
    """Each request's token ids: block of id h = [first token of h] + seeded random tokens."""
    uniq = {int(h): k for k, h in enumerate(np.unique(t.ids))}
    if len(uniq) > n_words:
        raise SystemExit(f"{len(uniq)} distinct ids need more than {n_words} words")
    rng = np.random.default_rng(seed)
    blocks = {h: [N_SPECIAL + k] + (N_SPECIAL + rng.integers(0, n_words, t.block_tokens - 1)).tolist()
              for h, k in uniq.items()}  # fmt: skip
    out = []
    for i in range(t.n_requests):
        toks: list[int] = []
        for h in t.request_ids(i).tolist():
            toks += blocks[int(h)]
        out.append(toks[: int(t.input_length[i])])
    return out


def _post(base: str, body: dict) -> dict:
    req = urllib.request.Request(base + "/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=120) as r:  # noqa: S310 - loopback
        return json.loads(r.read())


def serve_all(server: Path, gguf_path: Path, prompts: list[list[int]], ctx: int, cache_ram: int, log: Path) -> list[dict]:
    """Start llama-server with ``--cache-ram cache_ram`` and send every prompt; the timings."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [str(server), "-m", str(gguf_path), "-c", str(ctx), "-np", "1", "--cache-ram", str(cache_ram),
           "--host", "127.0.0.1", "--port", str(port), "-t", "2", "-tb", "2", "--no-warmup"]  # fmt: skip
    with log.open("w") as lf:
        proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT)  # noqa: S603 - our binary, loopback
        try:
            try:
                wait_ready(base, proc)
            except RuntimeError as exc:
                raise SystemExit(f"{exc}; see {log}") from None
            out = []
            for p in prompts:
                r = _post(base, {"prompt": p, "n_predict": 1, "cache_prompt": True, "temperature": 0.0})
                tm = r["timings"]
                out.append({"cache_n": tm["cache_n"], "prompt_n": tm["prompt_n"], "prompt_ms": tm["prompt_ms"]})
            return out
        finally:
            stop(proc)


def marginal_ms_per_token(prompt_n: list[int], prompt_ms: list[float]) -> tuple[float, float]:
    """``(ms per request, ms per prefilled token)``: least squares of a run's per-request prompt
    time on its prefilled tokens, the first request left out (a cold start: ``--no-warmup``).
    The slope, not Σ ms ÷ Σ tokens, is what a hit saves: the per-request part is paid anyway."""
    slope, fixed = np.polyfit(np.asarray(prompt_n[1:], dtype=float), np.asarray(prompt_ms[1:], dtype=float), 1)
    return float(fixed), float(slope)


def ttft_gains(runs: dict, prompt_lengths: list[int]) -> None:
    """Predicted and measured TTFT gains of each ``--cache-ram`` run against the ``0`` run, in
    place: predicted = the tokens the host tier adds × the marginal ms per token of the ``0``
    run (and, for comparison, × its average ms per token)."""
    base = runs.get(0)
    if not base:
        return
    served0 = base["per_request"]["served"]
    n0 = [length - c for length, c in zip(prompt_lengths, served0)]
    fixed, slope = marginal_ms_per_token(n0, base["per_request"]["prompt_ms"])
    avg = base["prompt_ms"] / max(base["prompt_n"], 1)
    base["prefill_fit"] = {"ms_per_request": fixed, "ms_per_token": slope, "average_ms_per_token": avg}
    for ram, r in runs.items():
        added = r["predicted_cache_n"] - base["predicted_cache_n"]
        r["predicted_ttft_gain_ms"] = added * slope
        r["predicted_ttft_gain_at_average_ms"] = added * avg
        r["measured_ttft_gain_ms"] = base["prompt_ms"] - r["prompt_ms"]
        print(f"--cache-ram {ram:>3}: host tier adds {added:,} tokens: predicted gain {r['predicted_ttft_gain_ms']:.0f} ms "
              f"(at the average rate {r['predicted_ttft_gain_at_average_ms']:.0f}), measured {r['measured_ttft_gain_ms']:.0f} ms")


def reanalyse(path: Path, trace: Path) -> None:
    """Recompute the TTFT gains of a recorded result (``--reanalyse FILE``) with the marginal rate;
    the prompts are rebuilt from the trace exactly as the run built them."""
    rec = json.loads(path.read_text())
    t = scaled_trace(trace, rec["requests_arg"] if "requests_arg" in rec else 400, rec["block_tokens"],
                     rec["conversations"] or None)
    lengths = [len(q) for q in token_prompts(t, int(len(np.unique(t.ids)) + 64))]
    runs = {int(k): v for k, v in rec["runs"].items()}
    ttft_gains(runs, lengths)
    rec["runs"] = {str(k): v for k, v in runs.items()}
    path.write_text(json.dumps(rec, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", type=Path, help="the llama-server binary (required unless --reanalyse)")
    ap.add_argument("--reanalyse", type=Path, default=None, help="recompute a recorded result's TTFT gains")
    ap.add_argument("--trace", type=Path, default=ROOT.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--conversations", type=int, default=60)
    ap.add_argument("--block-tokens", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=16384)
    ap.add_argument("--cache-ram", default="0,1,2,4,8,-1", help="MiB settings to run, 0 first")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    a = ap.parse_args()
    if a.reanalyse:
        reanalyse(a.reanalyse, a.trace)
        return 0
    if a.server is None:
        ap.error("--server is required")
    a.out.mkdir(parents=True, exist_ok=True)
    t = scaled_trace(a.trace, a.requests, a.block_tokens, a.conversations or None)
    n_words = int(len(np.unique(t.ids)) + 64)
    gguf_path = Path("/tmp/kvgate_tier_tiny_llama.gguf")  # not committed (about 10 MB)
    write_gguf(gguf_path, n_words)
    prompts = token_prompts(t, n_words)
    pr = [Prompt(tuple(t.request_ids(i).tolist()), int(t.input_length[i])) for i in range(t.n_requests)]
    from kvgate.engines.llamacpp.pool import PINNED_COMMIT

    commit = PINNED_COMMIT
    runs = {}
    for ram in [int(x) for x in a.cache_ram.split(",")]:
        served = serve_all(a.server, gguf_path, prompts, a.ctx, ram, a.out / f"tier_llama_server_{ram}.log")
        model = LlamaCppServer(a.block_tokens, n_slots=1, n_ctx=a.ctx, cache_ram_bytes=None if ram < 0 else ram * 2**20,
                               bytes_per_token=BYTES_PER_TOKEN, n_layer=CFG["n_layer"], n_stream=1)  # fmt: skip
        predicted = [model.serve(p) for p in pr]
        got = [s["cache_n"] for s in served]
        diff = [i for i, (x, y) in enumerate(zip(predicted, got)) if x != y]
        runs[ram] = {"cache_ram_mib": ram, "predicted_cache_n": int(sum(predicted)), "served_cache_n": int(sum(got)),
                     "requests_differing": len(diff), "first_differing": diff[:10],
                     "prompt_ms": float(sum(s["prompt_ms"] for s in served)),
                     "prompt_n": int(sum(s["prompt_n"] for s in served)),
                     "bos_or_extra_tokens": int(sum(s["prompt_n"] + s["cache_n"] for s in served) - sum(map(len, prompts))),
                     "per_request": {"predicted": predicted, "served": got,
                                     "prompt_ms": [s["prompt_ms"] for s in served]}}  # fmt: skip
        print(f"--cache-ram {ram:>3} MiB: predicted {sum(predicted):,} cached tokens, served {sum(got):,} "
              f"({len(diff)} requests differ); prompt {runs[ram]['prompt_ms']:.0f} ms for {runs[ram]['prompt_n']:,} tokens",
              flush=True)  # fmt: skip
    ttft_gains(runs, [len(q) for q in prompts])
    total_prompt = int(t.input_length.sum())
    rec = {"trace": t.source, "requests": t.n_requests, "conversations": a.conversations, "block_tokens": a.block_tokens, "ctx": a.ctx,
           "prompt_tokens": total_prompt, "bytes_per_token": BYTES_PER_TOKEN, "server": str(a.server),
           "commit": commit, "runs": {str(k): v for k, v in runs.items()}}  # fmt: skip
    (a.out / "tier_llama_server.json").write_text(json.dumps(rec, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
