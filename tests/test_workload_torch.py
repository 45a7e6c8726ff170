"""Reference workload on torch CPU with tiny configs: bytes, layouts, decode loop, failures.

Skipped where torch or transformers is missing (CI's core job); the byte figures are
computed here from the config independently of :mod:`kvgate.workload.allocator`.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from kvgate.errors import KvgateError  # noqa: E402
from kvgate.workload.allocator import MirrorGeometry  # noqa: E402
from kvgate.workload.engine import DecodeLoop, materialize_random, meta_model, param_bytes  # noqa: E402
from kvgate.workload.mirror import ContiguousMirror, ReferenceCache, dequantize, quantize  # noqa: E402
from kvgate.workload.paged import PagedMirror  # noqa: E402
from kvgate.workload.plan import plan_stream  # noqa: E402

TINY = {
    "qwen3": dict(model_type="qwen3", hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=97,
                  max_position_embeddings=512, tie_word_embeddings=True),
    "qwen3_moe": dict(model_type="qwen3_moe", hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                      num_experts=8, num_experts_per_tok=2, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=32, vocab_size=97, max_position_embeddings=512),
}  # fmt: skip


def expected_slot_bytes(cfg: dict, max_seq: int) -> int:
    """Independent: layers × max_seq × (int8 K row + int8 V row + f32 scale per kv head for K and V)."""
    kv, hd = cfg["num_key_value_heads"], cfg["head_dim"]
    return cfg["num_hidden_layers"] * max_seq * (kv * hd * 1 * 2 + kv * 4 * 2)


def _model(kind: str, seed: int = 1):
    m = meta_model(TINY[kind], torch.float32)
    materialize_random(m, "cpu", seed=seed)
    return m


# -- quantization
def test_quantize_absmax_per_position_and_head():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 2, 32, generator=g) * torch.tensor([1.0, 100.0])[None, None, :, None]
    x[0, 0, 0] = 0.0
    q, s = quantize(x)
    assert q.dtype == torch.int8 and q.shape == (3, 5, 2, 32)
    assert s.dtype == torch.float32 and s.shape == (3, 5, 2)
    assert int(q.abs().max()) == 127 and int(q.min()) >= -127
    assert torch.equal(s, x.abs().amax(-1) / 127)
    err = (dequantize(q, s, torch.float32) - x).abs()
    assert bool((err <= s[..., None] / 2 + 1e-6).all())  # rounding: at most half a step
    assert float(s[0, 0, 0]) == 0.0 and bool((dequantize(q, s, torch.float32)[0, 0, 0] == 0).all())


# -- bytes
@pytest.mark.parametrize("slots", [1, 3, 4])
def test_contiguous_bytes_equal_geometry_and_are_lazy(slots):
    cfg = TINY["qwen3_moe"]
    g = MirrorGeometry.from_config(cfg, 48)
    m = ContiguousMirror(g, slot_cap=4)
    assert m.allocated_bytes() == 0  # nothing before the first append
    m.begin(list(range(slots)), [0] * slots, 1)
    assert m.allocated_bytes() == slots * expected_slot_bytes(cfg, 48) == slots * 3 * 48 * (2 * 64 + 16)
    # Layout per layer: [slots, max_seq, kv_heads, head_dim] int8 and [slots, max_seq, kv_heads] f32.
    assert torch.stack([m.k[0][s] for s in range(slots)]).shape == (slots, 48, 2, 32)
    assert m.k[2][0].dtype == torch.int8 and m.vs[1][0].dtype == torch.float32
    assert m.ks[0][0].shape == (48, 2)
    m.begin([0], [1], 1)  # a later append does not allocate again
    assert m.allocated_bytes() == slots * expected_slot_bytes(cfg, 48)
    m.release(0)
    assert m.allocated_bytes() == (slots - 1) * expected_slot_bytes(cfg, 48)


def test_source_slot_geometry_on_meta_device():
    # The real model's shapes without memory: 48 layers × 8192 × 1056 = 415,236,096 B.
    g = MirrorGeometry(48, 4, 128, 8192)
    m = ContiguousMirror(g, device="meta")
    m.begin(["a", "b"], [0, 0], 1)
    assert m.allocated_bytes() == 2 * 415_236_096


def test_slot_cap_error_before_allocation():
    g = MirrorGeometry(2, 2, 8, 16)
    m = ContiguousMirror(g, slot_cap=2)
    m.begin([0, 1], [0, 0], 1)
    with pytest.raises(KvgateError, match="slot cap reached: 2 of 2"):
        m.begin([0, 1, 2], [1, 1, 0], 1)
    assert m.allocated_bytes() == 2 * 2 * 16 * (2 * 16 + 16)


def test_paged_pool_bytes_and_block_release():
    g = MirrorGeometry(3, 2, 32, 64)
    p = PagedMirror(g, num_blocks=10, block_size=4)
    assert p.allocated_bytes() == 0
    p.begin([0, 1], [0, 0], 6)  # 2 blocks each
    assert p.allocated_bytes() == 10 * 3 * 4 * (2 * 64 + 16)
    assert p.k[0].shape == (10, 4, 2, 32) and p.ks[0].shape == (10, 4, 2)
    assert p.tables.table(0) == [0, 1] and p.tables.table(1) == [2, 3]
    p.release(0)
    assert p.blocks.free_count == 8
    with pytest.raises(KvgateError, match="all 10 blocks in use"):
        p.begin([1, 5], [6, 0], 40)


def test_paged_reads_equal_contiguous_with_ragged_lengths():
    g = MirrorGeometry(2, 2, 16, 40)
    gen = torch.Generator().manual_seed(3)
    c = ContiguousMirror(g, dtype=torch.float32)
    p = PagedMirror(g, num_blocks=16, block_size=4, dtype=torch.float32)
    # Sequence 1 starts 7 positions later than 0 (ragged), then both append 3 and 1.
    for seqs, starts, n in (([0], [0], 7), ([0, 1], [7, 0], 3), ([1, 0], [3, 10], 1)):
        k = torch.randn(len(seqs), n, 2, 16, generator=gen)
        v = torch.randn(len(seqs), n, 2, 16, generator=gen)
        for cache in (c, p):
            cache.begin(seqs, starts, n)
            for layer in range(2):
                cache.write(layer, k, v)
        for layer in range(2):
            kc, vc = c.read(layer)
            kp, vp = p.read(layer)
            assert kc.shape == kp.shape == (len(seqs), max(starts) + n, 2, 16)
            # Compare only each sequence's own positions.
            for i, s0 in enumerate(starts):
                assert torch.equal(kc[i, : s0 + n], kp[i, : s0 + n]) and torch.equal(vc[i, : s0 + n], vp[i, : s0 + n])


# -- decode loop
@pytest.mark.parametrize("kind", ["qwen3", "qwen3_moe"])
def test_decode_loop_matches_transformers_forward(kind):
    m = _model(kind)
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = m(ids).logits.float()  # transformers' own forward, no cache
    g = MirrorGeometry.from_config(TINY[kind], 32)
    loop = DecodeLoop(m)
    for cache, tol in (
        (ReferenceCache(g, dtype=torch.float32), 1e-5),
        (ContiguousMirror(g, dtype=torch.float32), 3e-2),
        (PagedMirror(g, num_blocks=6, block_size=4, dtype=torch.float32), 3e-2),
    ):
        outs = [loop.forward(ids[:, :5], [0, 1], [0, 0], cache)]
        for t in range(5, 9):
            outs.append(loop.forward(ids[:, t : t + 1], [0, 1], [t, t], cache))
        got = torch.stack(outs, 1)  # logits for positions 4..8
        want = ref[:, 4:9]
        rel = float((got - want).norm() / want.norm())
        assert rel < tol, (cache.layout, rel)


def test_random_weights_build_param_bytes_and_tied_embeddings():
    m = meta_model(TINY["qwen3"], torch.bfloat16)
    before = param_bytes(m)
    materialize_random(m, "cpu")
    assert param_bytes(m) == before
    assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
    assert bool((m.model.norm.weight == 1).all())
    assert bool(torch.isfinite(m.model.rotary_emb.inv_freq).all())


def test_preset_param_bytes_on_meta():
    from kvgate.workload.config import load_config

    _, cfg = load_config("qwen3-30b-a3b")
    assert param_bytes(meta_model(cfg)) == 61_064_245_248  # H200 measurement, shared/cases


# -- the stream test
@pytest.fixture()
def tiny_moe_config(tmp_path):
    p = tmp_path / "tiny-moe.json"
    p.write_text(json.dumps(TINY["qwen3_moe"]))
    return p


@pytest.mark.parametrize("layout", ["contiguous", "paged"])
def test_run_stream_cpu(tiny_moe_config, layout):
    from kvgate.workload.stream import run_stream

    plan = plan_stream(model=str(tiny_moe_config), streams=3, max_seq=64, prompt=10, tokens=3, layout=layout,
                       block_size=4, device="cpu", dtype="fp32")  # fmt: skip
    r = run_stream(plan)
    per_pos = 2 * 2 * 32 + 8 * 2
    if layout == "contiguous":
        assert r["mirror_bytes_allocated"] == 3 * expected_slot_bytes(TINY["qwen3_moe"], 64)
    else:
        assert r["mirror_bytes_allocated"] == 3 * 4 * 3 * 4 * per_pos  # 3 seqs × ceil(13/4) blocks
    assert r["mirror_bytes_match"] and r["logits_finite"]
    assert r["decode_tokens_per_s"] > 0 and r["torch_peak_allocated_bytes"] is None
    json.dumps(r)


def test_cli_stream_json(tiny_moe_config, capsys):
    from kvgate.cli import main

    rc = main(["workload", "stream", "--model", str(tiny_moe_config), "--streams", "2", "--max-seq", "32",
               "--prompt", "4", "--tokens", "2", "--device", "cpu", "--json"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["mirror_bytes_allocated"] == 2 * expected_slot_bytes(TINY["qwen3_moe"], 32)


def test_oom_becomes_failed_measurement(tiny_moe_config, monkeypatch, capsys):
    import kvgate.workload.stream as stream
    from kvgate.cli import main

    def boom(*a, **k):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")

    monkeypatch.setattr(stream, "generate", boom)
    rc = main(["workload", "stream", "--model", str(tiny_moe_config), "--streams", "2", "--max-seq", "32",
               "--prompt", "4", "--tokens", "2", "--device", "cpu"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2
    assert "ERROR: CUDA out of memory during the contiguous stream test (2 streams): CUDA out of memory. Tried to allocate 2.00 GiB" in err
    assert "Traceback" not in err and "more detail" not in err


def test_fit_check_message(monkeypatch):
    import kvgate.workload.stream as stream

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10 * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "FakeGPU")
    with pytest.raises(KvgateError, match=r"does not fit FakeGPU: parameters 61,064,245,248 B .* > free 10,737,418,240 B"):
        stream.check_fit(torch.device("cuda", 0), params=61_064_245_248, mirror=1_660_944_384)


def test_weights_from_directory(tmp_path):
    from kvgate.workload.stream import run_stream

    m = _model("qwen3")
    m.save_pretrained(tmp_path / "tiny")
    plan = plan_stream(model=None, streams=2, max_seq=32, prompt=4, tokens=2, weights=str(tmp_path / "tiny"),
                       device="cpu", dtype="fp32")  # fmt: skip
    r = run_stream(plan)
    assert r["param_bytes"] == param_bytes(m) and r["mirror_bytes_match"]


def test_numerics_check_cpu():
    from kvgate.workload.stream import numerics_check

    r = numerics_check(heads=8, kv_heads=2, head_dim=64, length=40, batch=2, block_size=16, device="cpu")
    assert 0 < r["rel_err_vs_bf16_ref"] < 0.05
    assert r["paged_vs_contiguous_max_abs"] == 0.0


@pytest.mark.parametrize("layout", ["contiguous", "paged"])
def test_decode_loop_ragged_batch(layout):
    # Two sequences prefilled separately to different lengths, then decoded together.
    m = _model("qwen3")
    ids = torch.randint(0, 97, (2, 8), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        ref_a = m(ids[:1, :6]).logits[0, -1].float()  # seq "a": positions 0..5
        ref_b = m(ids[1:, :4]).logits[0, -1].float()  # seq "b": positions 0..3
    g = MirrorGeometry.from_config(TINY["qwen3"], 16)
    cache = (ContiguousMirror(g, dtype=torch.float32) if layout == "contiguous"
             else PagedMirror(g, num_blocks=8, block_size=4, dtype=torch.float32))  # fmt: skip
    loop = DecodeLoop(m)
    loop.forward(ids[:1, :5], ["a"], [0], cache)
    loop.forward(ids[1:, :3], ["b"], [0], cache)
    step = torch.stack([ids[0, 5], ids[1, 3]])[:, None]  # [2, 1]
    got = loop.forward(step, ["a", "b"], [5, 3], cache)
    for row, ref in ((got[0], ref_a), (got[1], ref_b)):
        assert float((row - ref).norm() / ref.norm()) < 3e-2
    cache.release("a")
    cache.release("b")
    assert (cache.allocated_bytes() == 0) if layout == "contiguous" else (cache.blocks.free_count == 8)


@pytest.mark.parametrize("device, fragment", [
    ("bogus", "ERROR: --device 'bogus' is not a torch device"),
    ("cuda:7", "ERROR: --device cuda:7: no such GPU; torch sees 1 CUDA device(s) (cuda:0 to cuda:0)"),
])  # fmt: skip
def test_bad_device_is_one_error_line(tiny_moe_config, monkeypatch, capsys, device, fragment):
    from kvgate.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a one-GPU machine
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    rc = main(["workload", "stream", "--model", str(tiny_moe_config), "--streams", "2", "--max-seq", "32",
               "--prompt", "4", "--tokens", "2", "--device", device])  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 2
    assert fragment in captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert len([ln for ln in captured.err.splitlines() if ln.startswith("ERROR:")]) == 1


def test_cpu_run_says_not_available_for_torch_peaks(tiny_moe_config, capsys):
    from kvgate.cli import main

    rc = main(["workload", "stream", "--model", str(tiny_moe_config), "--streams", "2", "--max-seq", "32",
               "--prompt", "4", "--tokens", "2", "--device", "cpu"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "torch peak allocated         not available" in out
    assert "torch peak reserved          not available" in out
    assert "n/a" not in out
