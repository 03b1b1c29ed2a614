"""Engine options from keyword arguments: kiln's own names (those of include/kiln/engine.h's
EngineOptions) and the vLLM names a vLLM script passes to LLM(...). A vLLM option kiln cannot honour
raises NotImplementedError; an unknown name raises TypeError, as a Python call would."""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple

from . import _kiln
from ._hub import resolve_model

# kiln's names: EngineOptions fields (docs/python.md lists them with their meaning).
_KILN = {
    "tokenizer": str, "threads": int, "isa": str, "f32_activations": bool, "mmap_weights": bool,
    "kv_cache_bytes": int, "block_size": int, "kv_cache_dtype": str, "max_batch_tokens": int, "max_seqs": int,
    "prefix_cache": bool, "kv_prefault": bool, "max_model_len": int, "speculative": str, "draft_model": str,
    "num_draft": int, "spec_ngram_min": int, "spec_ngram_max": int, "spec_max_batch": int, "device": str,
    "gpu_memory_utilization": float, "tensor_parallel": int, "pipeline_parallel": int, "pipeline_batches": int,
    "expert_parallel": int, "collective_timeout": float,
}
# vLLM's names for the same things.
_ALIASES = {
    "max_num_seqs": "max_seqs",
    "max_num_batched_tokens": "max_batch_tokens",
    "enable_prefix_caching": "prefix_cache",
    "tensor_parallel_size": "tensor_parallel",
    "pipeline_parallel_size": "pipeline_parallel",
}
# vLLM options that change nothing here (kiln has no such mechanism to configure).
_IGNORED = {"trust_remote_code", "enforce_eager", "disable_log_stats", "swap_space", "revision",
            "tokenizer_revision", "tokenizer_mode", "download_dir", "load_format", "disable_custom_all_reduce",
            "max_seq_len_to_capture", "compilation_config", "distributed_executor_backend"}
# vLLM options honoured only at one value (name -> the values accepted).
_ONLY = {"quantization": (None,),
         "cpu_offload_gb": (0,), "enable_lora": (False,), "skip_tokenizer_init": (False,)}


def engine_options(model: str, kwargs: Dict[str, Any]) -> Tuple["_kiln.EngineOptions", Optional[int]]:
    """The EngineOptions for `model` and kwargs, and the global seed (vLLM's LLM(seed=...))."""
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be a path (GGUF file, Hugging Face folder or llama2.c .bin) or a name in "
                        f"the local Hugging Face cache, got {model!r}")
    o = _kiln.EngineOptions()
    o.model = resolve_model(os.fspath(model))
    seed = None
    for name, value in kwargs.items():
        if name in _IGNORED:
            continue
        if name in _ONLY:
            if value not in _ONLY[name]:
                raise NotImplementedError(f"kiln does not support {name}={value!r} (only {_ONLY[name][0]!r})")
            continue
        if name == "seed":
            seed = None if value is None else int(value)
            continue
        if name == "dtype":
            if value in ("auto", None):
                continue
            if value in ("float32", "float", "fp32"):
                o.f32_activations = True
                continue
            raise NotImplementedError(f"kiln picks the weights' dtype from the file: dtype={value!r} (use 'auto' "
                                      "or 'float32' for f32 activations)")
        if name == "kv_cache_dtype" and value == "auto":
            continue
        if name == "speculative_config":
            _speculative(o, value)
            continue
        key = _ALIASES.get(name, name)
        if key not in _KILN:
            raise TypeError(f"LLM() got an unexpected keyword argument '{name}'")
        kind = _KILN[key]
        if value is None:
            continue
        if kind is bool and not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {value!r}")
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name} must be an int, got {value!r}")
        if kind is float and not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, got {value!r}")
        if kind is str:
            if not isinstance(value, (str, os.PathLike)):
                raise TypeError(f"{name} must be a string, got {value!r}")
            value = os.fspath(value)
            if key in ("tokenizer", "draft_model"):
                value = os.path.expanduser(value)
        try:
            setattr(o, key, value)
        except (TypeError, OverflowError) as e:
            raise ValueError(f"{name}: {e}") from None
    return o, seed


def _speculative(o: "_kiln.EngineOptions", cfg: Any) -> None:
    """vLLM's speculative_config dict: {"method": "ngram", "num_speculative_tokens": k,
    "prompt_lookup_min": a, "prompt_lookup_max": b} or {"model": path, "num_speculative_tokens": k}."""
    if cfg is None:
        return
    if not isinstance(cfg, dict):
        raise TypeError(f"speculative_config must be a dict, got {cfg!r}")
    cfg = dict(cfg)
    method = cfg.pop("method", None)
    model = cfg.pop("model", None)
    if method == "ngram" or (method is None and model in ("ngram", "[ngram]")):
        o.speculative = "ngram"
    elif model:
        o.speculative = "draft"
        o.draft_model = resolve_model(os.fspath(model))
    else:
        raise NotImplementedError(f"speculative_config: kiln speculates with method 'ngram' or a draft 'model', "
                                  f"got method={method!r}")
    if "num_speculative_tokens" in cfg:
        o.num_draft = int(cfg.pop("num_speculative_tokens"))
    if "prompt_lookup_min" in cfg:
        o.spec_ngram_min = int(cfg.pop("prompt_lookup_min"))
    if "prompt_lookup_max" in cfg:
        o.spec_ngram_max = int(cfg.pop("prompt_lookup_max"))
    if cfg:
        raise NotImplementedError(f"speculative_config: kiln does not implement {sorted(cfg)}")
