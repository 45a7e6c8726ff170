"""Models by the names users type (kvgate.model.names): presets in any case and punctuation,
Hub ids through a local Hugging Face cache (a fake one under tmp) or the Hub (monkeypatched),
"did you mean" and the shipped configs in the hint; presets' exact checkpoint bytes in fit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.test_weights import write_st

from kvgate.cli import main
from kvgate.model import ConfigError, load_model
from kvgate.model.weights import weight_bytes

PRESETS = Path(__file__).parents[1] / "src" / "kvgate" / "model" / "presets"


def fake_cache(root: Path, repo: str, files: dict[str, object]) -> Path:
    """A Hugging Face hub cache as huggingface_hub lays it out: refs/main → snapshots/<rev>/."""
    rev = "0123456789abcdef0123456789abcdef01234567"
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    snap = repo_dir / "snapshots" / rev
    snap.mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(rev)
    for name, content in files.items():
        if isinstance(content, Path):
            shutil.copy(content, snap / name)
        else:
            (snap / name).write_text(json.dumps(content))
    return snap


@pytest.mark.parametrize("typed", ["Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B-Instruct",
                                   "LLAMA_3.1_70B", "llama-3.1-70b"])
def test_preset_names_as_typed(typed, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache: the preset answers
    spec = load_model(typed)
    assert spec.name == "llama-3.1-70b"
    if typed != "llama-3.1-70b":
        assert "read as the preset llama-3.1-70b" in spec.notes[0]
    wb = weight_bytes(typed)
    assert wb.exact and wb.bytes == 141_107_412_992


def test_unknown_name_says_did_you_mean_and_lists_shipped_configs(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ConfigError) as e:
        load_model("lama-3.1-70b")
    assert e.value.message.startswith("no model file or preset named 'lama-3.1-70b'")
    assert "did you mean llama-3.1-70b" in e.value.message
    assert "tests/data/configs" in e.value.hint and "llama-3.1-405b" in e.value.hint
    # the hint names the nearest few shipped configs, not all of them, and says how to see the rest
    shown = e.value.hint.split("the nearest: ")[1].split(" (`ls ")[0].split(", ")
    assert len(shown) == 6 and "whisper-small" not in shown and "`ls tests/data/configs/` for the other" in e.value.hint


def test_hub_id_not_cached_is_refused_with_the_cache_and_the_switch(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("KVGATE_HUB", raising=False)
    assert main(["weights", "Qwen/Qwen2.5-14B-Instruct-AWQ"]) == 2
    err = capsys.readouterr().err
    assert "ERROR: model config not found: Qwen/Qwen2.5-14B-Instruct-AWQ" in err
    assert "KVGATE_HUB=1" in err and "huggingface-cli download" in err


def test_hub_id_from_the_local_cache_is_exact(monkeypatch, tmp_path):
    cache = tmp_path / "hub"
    snap = fake_cache(cache, "Qwen/Qwen3-0.6B", {"config.json": PRESETS / "qwen3-0.6b.json"})
    write_st(snap / "model.safetensors", {"w": ("BF16", [4, 8], 64), "b": ("F32", [4], 16)})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    spec = load_model("Qwen/Qwen3-0.6B")
    assert spec.name == "Qwen/Qwen3-0.6B" and "local Hugging Face cache" in spec.notes[0]
    wb = weight_bytes("Qwen/Qwen3-0.6B")
    assert wb.exact and wb.bytes == 80 and "local Hugging Face cache" in wb.notes[0]


def test_cached_config_only_is_an_estimate_and_a_partial_download_is_refused(monkeypatch, tmp_path):
    cache = tmp_path / "hub"
    snap = fake_cache(cache, "org/partial", {"config.json": PRESETS / "qwen3-0.6b.json"})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert not weight_bytes("org/partial").exact  # config.json only: the estimate
    write_st(snap / "model-00001-of-00002.safetensors", {"w": ("BF16", [4], 8)})
    from kvgate.model.weights import WeightsError
    with pytest.raises(WeightsError) as e:
        weight_bytes("org/partial")
    assert "1 of 2" in e.value.message


def test_hub_metadata_when_allowed(monkeypatch, tmp_path):
    """KVGATE_HUB=1: config.json and the safetensors headers from the Hub (monkeypatched)."""
    import types

    import huggingface_hub

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("KVGATE_HUB", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    cfg_path = tmp_path / "downloaded-config.json"
    shutil.copy(PRESETS / "qwen3-0.6b.json", cfg_path)
    calls = []

    def fake_download(repo_id, filename, **kw):
        calls.append((repo_id, filename))
        return str(cfg_path)

    def tensor(dtype, begin, end):
        return types.SimpleNamespace(dtype=dtype, data_offsets=(begin, end))

    def fake_meta(repo_id, **kw):
        calls.append((repo_id, "metadata"))
        files = {"model-00001-of-00002.safetensors": types.SimpleNamespace(tensors={"a": tensor("BF16", 0, 100)}),
                 "model-00002-of-00002.safetensors": types.SimpleNamespace(tensors={"b": tensor("F32", 0, 28),
                                                                                   "c": tensor("BF16", 28, 40)})}
        return types.SimpleNamespace(files_metadata=files)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", fake_meta)
    spec = load_model("someorg/SomeModel-1B")
    assert "Hugging Face Hub" in spec.source
    wb = weight_bytes("someorg/SomeModel-1B")
    assert wb.exact and wb.bytes == 140 and wb.tensors == 3 and wb.by_dtype == {"BF16": 112, "F32": 28}
    assert "Hugging Face Hub safetensors metadata" in wb.source
    assert ("someorg/SomeModel-1B", "metadata") in calls


def test_fit_on_a_preset_uses_the_published_checkpoint(capsys):
    # issue 29: `fit llama-3.1-70b -tp 2` said CAN'T TELL from a ±15% weights band
    assert main(["fit", "llama-3.1-70b", "-tp", "2", "--gpu", "H100", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    w = next(t for t in d["terms"] if t["name"] == "weights")
    assert w["low"] == 141_107_412_992 // 2 and "published" in w["source"]
    assert d["fits"] == "no"


def test_cant_tell_names_the_deciding_term_and_the_flag(capsys):
    # DeepSeek-R1's FP8 config carries no checkpoint size: its weights are an estimate (±15%, a
    # quantized config), 68-92 GiB a rank at TP 8 against an H100's 72.7 GiB. (An unquantized
    # text model's estimate, qwen1.5-72b's before, is parameters × dtype +0-2%, as vLLM allocates
    # them: it no longer straddles.)
    cfg = str(Path(__file__).parent.parent / "examples" / "configs" / "deepseek-r1.json")
    assert main(["fit", cfg, "-tp", "8", "--gpu", "H100", "--max-model-len", "4096"]) == 0
    out = capsys.readouterr().out
    assert "verdict: CAN'T TELL" in out
    assert "the term that decides it is weights" in out and "--weights-bytes" in out and "model folder" in out
    ours = out.split("the term that decides it")[1].split("measure it:")[0]
    assert max(len(line) for line in ("  the term that decides it" + ours).splitlines()) <= 100


def test_did_you_mean_warns_when_the_name_says_quantized_and_the_suggestion_does_not(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ConfigError) as e:
        load_model("Qwen/Qwen3-32B-FP8")
    assert "did you mean qwen3-32b" in e.value.message and "names a FP8 checkpoint" in e.value.message
    with pytest.raises(ConfigError) as e:
        load_model("lama-3.1-70b")
    assert "checkpoint" not in e.value.message


def test_cant_tell_for_another_reason_names_no_budget_term(capsys):
    # Qwen3.5-9B has a vision tower: CAN'T TELL for the encoder's unmodelled forward peak, while
    # even the pool's low end holds 145 requests of 8,192 tokens, so no budget term decides it
    cfg = str(Path(__file__).parent / "data" / "configs" / "qwen3.5-9b.json")
    assert main(["fit", cfg, "--gpu", "H100", "--max-model-len", "8192", "--release", "0.20.0", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] == "unknown" and d["max_concurrency"]["low"] >= 1
    assert main(["fit", cfg, "--gpu", "H100", "--max-model-len", "8192", "--release", "0.20.0"]) == 0
    out = capsys.readouterr().out
    assert "CAN'T TELL: a multimodal model" in out and "the term that decides it" not in out
