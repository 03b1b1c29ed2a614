"""kiln.LLM: vLLM's offline API (generate, chat) over one kiln engine, plus a streaming iterator."""
from __future__ import annotations

import sys
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import _kiln
from ._core import Core, Message, PromptType
from .outputs import RequestOutput, _Tracker
from .sampling_params import SamplingParams
from .tokenizer import Tokenizer

__all__ = ["LLM"]

_POLL_S = 0.2  # how often a waiting call looks at Python's signals (Ctrl-C); outputs wake it at once


def _progress(total: int, enabled: bool, desc: str):
    """A tqdm bar when tqdm is installed, asked for, and there is more than one prompt; else None."""
    if not enabled or total < 2:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, file=sys.stderr)


def _params_list(sampling_params, n: int) -> List[SamplingParams]:
    if sampling_params is None:
        return [SamplingParams()] * n
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * n
    params = list(sampling_params)
    if len(params) != n:
        raise ValueError(f"{len(params)} sampling_params for {n} prompts: give one, or one per prompt")
    for p in params:
        if not isinstance(p, SamplingParams):
            raise TypeError(f"sampling_params must be kiln.SamplingParams, got {type(p).__name__}")
    return params


class LLM:
    """A model loaded into a kiln engine, for offline generation (vLLM's ``LLM``).

    Args:
        model: a GGUF file, a Hugging Face folder (safetensors) or a llama2.c ``.bin``.
        tokenizer: a tokenizer file or folder instead of the checkpoint's own.
        seed: requests without a seed of their own draw one from a generator seeded with this
            (reproducible runs); None = random.
        **engine_options: kiln's engine options -- ``threads``, ``isa``, ``device`` ("cpu", "cuda"),
            ``max_model_len``, ``max_seqs``, ``max_batch_tokens``, ``kv_cache_bytes``,
            ``kv_cache_dtype``, ``block_size``, ``prefix_cache``, ``mmap_weights``,
            ``f32_activations``, ``speculative`` ("ngram", "draft", "layers:N"), ``draft_model``,
            ``num_draft``, ``spec_ngram_min``/``max``, ``spec_max_batch``,
            ``gpu_memory_utilization`` -- and vLLM's names for them (``max_num_seqs``,
            ``max_num_batched_tokens``, ``enable_prefix_caching``, ``speculative_config``, ...).
            Options kiln cannot honour raise NotImplementedError; unknown names raise TypeError.

    The engine batches every request it holds (continuous batching over a paged KV cache with
    prefix caching). The GIL is released while it works: any number of threads may call generate
    at once, and their requests share the batch. Errors raise: ValueError (bad parameters),
    FileNotFoundError, NotImplementedError (unsupported), MemoryError, kiln.EngineError (others).
    """

    def __init__(self, model: str, *, tokenizer: Optional[str] = None, seed: Optional[int] = None,
                 **engine_options: Any) -> None:
        kwargs = dict(engine_options)
        if tokenizer is not None:
            kwargs["tokenizer"] = tokenizer
        kwargs["seed"] = seed
        self._core = Core(model, kwargs)

    # --- generation -------------------------------------------------------------------------------

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None, *,
                 use_tqdm: bool = True, speculate: bool = True) -> List[RequestOutput]:
        """Completes each prompt; returns one finished RequestOutput per prompt, in order.

        prompts: a string, ``{"prompt": str}``, ``{"prompt_token_ids": [int, ...]}``, or a list of
        them. sampling_params: one for all prompts or one per prompt (default: SamplingParams()).
        speculate=False runs these requests without speculative drafts (when the engine has them).
        """
        if isinstance(prompts, (str, Mapping)):
            prompts = [prompts]
        prepared = [self._core.prompt_ids(p) for p in prompts]
        return self._run(prepared, _params_list(sampling_params, len(prepared)), use_tqdm, speculate)

    def chat(self, messages: Union[Sequence[Message], Sequence[Sequence[Message]]],
             sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None, *,
             use_tqdm: bool = True, chat_template: Optional[str] = None, add_generation_prompt: bool = True,
             continue_final_message: bool = False, tools: Optional[list] = None,
             chat_template_kwargs: Optional[Dict[str, Any]] = None, speculate: bool = True) -> List[RequestOutput]:
        """Answers a conversation (a list of {"role", "content"} dicts) or a list of conversations,
        rendered with the model's chat template (or `chat_template`, a Jinja string) with `tools` and
        `chat_template_kwargs` passed to it, as vLLM's LLM.chat does (the reply is not parsed for calls:
        `kiln serve` does that); returns one RequestOutput per conversation, whose ``prompt`` is the
        rendered text."""
        if continue_final_message:
            raise NotImplementedError("kiln's chat does not implement continue_final_message")
        convs = [messages] if messages and isinstance(messages[0], Mapping) else list(messages)
        prepared = [self._core.chat_ids(c, add_generation_prompt, chat_template, tools, chat_template_kwargs)
                    for c in convs]
        return self._run(prepared, _params_list(sampling_params, len(prepared)), use_tqdm, speculate)

    def stream(self, prompt: PromptType, sampling_params: Optional[SamplingParams] = None, *,
               speculate: bool = True) -> Iterator[RequestOutput]:
        """Yields the prompt's RequestOutput as tokens arrive (what each holds follows
        ``sampling_params.output_kind``: cumulative by default); the last one has finished=True.
        Leaving the loop early aborts the request."""
        text, ids = self._core.prompt_ids(prompt)
        params = sampling_params or SamplingParams()
        yield from self._stream(text, ids, params, speculate)

    def stream_chat(self, messages: Sequence[Message], sampling_params: Optional[SamplingParams] = None, *,
                    chat_template: Optional[str] = None, add_generation_prompt: bool = True,
                    tools: Optional[list] = None, chat_template_kwargs: Optional[Dict[str, Any]] = None,
                    speculate: bool = True) -> Iterator[RequestOutput]:
        """stream() for a conversation, rendered as chat() renders it."""
        text, ids = self._core.chat_ids(messages, add_generation_prompt, chat_template, tools, chat_template_kwargs)
        yield from self._stream(text, ids, sampling_params or SamplingParams(), speculate)

    # --- the rest ---------------------------------------------------------------------------------

    def get_tokenizer(self) -> Tokenizer:
        """The model's tokenizer (encode, decode, apply_chat_template)."""
        return Tokenizer(self._core)

    @property
    def model_info(self) -> "_kiln.ModelInfo":
        """What was loaded: name, arch, path, vocab_size, max_model_len, threads, isa, device, ..."""
        return self._core.info

    def stats(self) -> "_kiln.EngineStats":
        """The engine's counters (running / waiting requests, KV blocks, tokens, steps)."""
        return self._core.engine.stats()

    def close(self) -> None:
        """Aborts what still runs and frees the model (also when the LLM is garbage collected); calls in
        flight on other threads end first (their requests finish with "abort"), later calls raise
        kiln.EngineError. Refused while kiln.serve serves it."""
        self._core.engine.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        i = self._core.info
        return f"LLM(model={i.path!r}, arch={i.arch!r}, max_model_len={i.max_model_len}, device={i.device!r})"

    # --- internals --------------------------------------------------------------------------------

    def _run(self, prepared: List[Tuple[Optional[str], List[int]]], params: List[SamplingParams], use_tqdm: bool,
             speculate: bool) -> List[RequestOutput]:
        engine = self._core.engine
        channel = engine.open_channel()
        owner: Dict[int, Tuple[_Tracker, int]] = {}
        trackers: List[_Tracker] = []
        remaining = 0
        bar = _progress(len(prepared), use_tqdm, "kiln: prompts")
        try:
            submitted = self._core.submit(channel, [(t, ids, p) for (t, ids), p in zip(prepared, params)],
                                          speculate=speculate)
            for tracker, eids in submitted:
                trackers.append(tracker)
                for i, eid in enumerate(eids):
                    owner[eid] = (tracker, i)
                remaining += len(eids)
            while remaining:
                for out in engine.take(channel, _POLL_S, True):  # woken per finished request only
                    tracker, i = owner[out.request_id]
                    tracker.add(i, out)
                    if out.finished:
                        remaining -= 1
                        owner.pop(out.request_id)
                        if bar is not None and tracker.finished:
                            bar.update(1)
        finally:
            for eid in owner:  # an exception or Ctrl-C: nothing keeps running
                engine.abort(eid)
            engine.close_channel(channel)
            if bar is not None:
                bar.close()
        return [t.output() for t in trackers]

    def _stream(self, text: Optional[str], ids: List[int], params: SamplingParams,
                speculate: bool) -> Iterator[RequestOutput]:
        engine = self._core.engine
        channel = engine.open_channel()
        pending: Dict[int, int] = {}
        try:
            [(tracker, eids)] = self._core.submit(channel, [(text, ids, params)], speculate=speculate)
            pending = {eid: i for i, eid in enumerate(eids)}
            while pending:
                outs = engine.take(channel, _POLL_S)
                if not outs:
                    continue
                for out in outs:
                    tracker.add(pending[out.request_id], out)
                    if out.finished:
                        pending.pop(out.request_id)
                o = tracker.output(params.output_kind)
                if o is not None:
                    yield o
        finally:
            for eid in pending:
                engine.abort(eid)
            engine.close_channel(channel)
