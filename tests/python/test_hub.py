"""Model names as vLLM scripts write them ("org/name") load from the local Hugging Face cache
(HF_HUB_CACHE), never from the network: refs/main picks the snapshot, a folder with config.json is
the model, else its one GGUF file; a name that is not cached says where it looked."""
import os

import pytest

import kiln
from kiln import SamplingParams
from kiln._hub import resolve_model
from conftest import SMOL


def make_snapshot(cache, name, files, ref="abc123"):
    repo = cache / ("models--" + name.replace("/", "--"))
    snap = repo / "snapshots" / ref
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(ref)
    for fname, target in files.items():
        if target is None:
            (snap / fname).write_text("{}")
        else:
            os.symlink(target, snap / fname)
    return snap


def test_gguf_snapshot_loads(tmp_path, monkeypatch, smol):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    make_snapshot(tmp_path, "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", {"smollm2.q4_1.gguf": SMOL})
    p = SamplingParams(temperature=0, max_tokens=12)
    with kiln.LLM("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", threads=2) as llm:
        assert llm.model_info.path.endswith("snapshots/abc123/smollm2.q4_1.gguf")
        [a] = llm.generate("The capital of France is", p)
    [b] = smol.generate("The capital of France is", p)
    assert a.outputs[0].token_ids == b.outputs[0].token_ids


def test_resolution_rules(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    folder = make_snapshot(tmp_path, "org/hf-model", {"config.json": None, "model.safetensors": None})
    assert resolve_model("org/hf-model") == str(folder)
    make_snapshot(tmp_path, "org/two-ggufs", {"a.gguf": SMOL, "b.gguf": SMOL})
    with pytest.raises(ValueError, match="2 GGUF files"):
        resolve_model("org/two-ggufs")
    make_snapshot(tmp_path, "org/empty", {"README.md": None})
    with pytest.raises(FileNotFoundError, match="no config.json and no GGUF"):
        resolve_model("org/empty")
    with pytest.raises(FileNotFoundError, match="does not download"):
        kiln.LLM("org/not-cached")
    # an existing path wins, and other strings go to the engine as paths
    assert resolve_model(SMOL) == SMOL
    with pytest.raises(FileNotFoundError):
        kiln.LLM("/no/such/org/model.gguf")
