"""Model names as vLLM scripts write them ("org/name") resolved in the local Hugging Face cache, the
way transformers finds a model offline: $HF_HUB_CACHE, else $HF_HOME/hub, else
~/.cache/huggingface/hub, folder models--org--name, the snapshot refs/main names (else the newest).
kiln never downloads; a name that is not there is a FileNotFoundError saying where it looked."""
from __future__ import annotations

import os
import re
from typing import List, Optional

_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_cache() -> str:
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub")


def _snapshot(repo_dir: str) -> Optional[str]:
    snaps = os.path.join(repo_dir, "snapshots")
    ref = os.path.join(repo_dir, "refs", "main")
    if os.path.isfile(ref):
        with open(ref) as f:
            path = os.path.join(snaps, f.read().strip())
        if os.path.isdir(path):
            return path
    if not os.path.isdir(snaps):
        return None
    found: List[str] = [os.path.join(snaps, d) for d in os.listdir(snaps) if os.path.isdir(os.path.join(snaps, d))]
    return max(found, key=os.path.getmtime) if found else None


def resolve_model(model: str) -> str:
    """`model` itself when it exists; else, for "org/name", the cached snapshot (its folder when it
    holds config.json, else its one GGUF file)."""
    path = os.path.expanduser(model)
    if os.path.exists(path) or not _NAME.match(model):
        return path  # the engine reports a missing path with its own message
    repo = os.path.join(hub_cache(), "models--" + model.replace("/", "--"))
    snap = _snapshot(repo)
    if snap is None:
        raise FileNotFoundError(f"'{model}' is neither a file or folder nor in the Hugging Face cache ({repo}); "
                                "kiln does not download models: fetch it first (e.g. huggingface-cli download)")
    if os.path.isfile(os.path.join(snap, "config.json")):
        return snap
    ggufs = sorted(f for f in os.listdir(snap) if f.endswith(".gguf"))
    if len(ggufs) == 1:
        return os.path.join(snap, ggufs[0])
    if ggufs:
        raise ValueError(f"'{model}' holds {len(ggufs)} GGUF files ({', '.join(ggufs)}): pass the one to load as a path")
    raise FileNotFoundError(f"'{model}' in the Hugging Face cache ({snap}) has no config.json and no GGUF file")
