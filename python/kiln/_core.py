"""The engine under LLM, AsyncEngine and serve: a loaded _kiln.Engine, prompt and chat preparation,
and the submission of one prompt's n choices to an output channel."""
from __future__ import annotations

import functools
import json
import itertools
import random
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _kiln
from ._options import engine_options
from .outputs import _Tracker
from .sampling_params import SamplingParams

PromptType = Union[str, Mapping[str, Any]]
Message = Mapping[str, Any]


def _content_text(content: Any) -> str:
    """A message's content as text: a string, None, or OpenAI content parts of type "text"."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        parts = []
        for p in content:
            if not isinstance(p, Mapping) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                raise ValueError(f"message content parts must be {{'type': 'text', 'text': str}}, got {p!r}")
            parts.append(p["text"])
        return "".join(parts)
    raise ValueError(f"message content must be a string or a list of text parts, got {type(content).__name__}")


class Core:
    def __init__(self, model: str, kwargs: Dict[str, Any]) -> None:
        options, self.seed = engine_options(model, kwargs)
        if _kiln.parallel_rank(options) != 0:
            # `mpirun -np N python script.py` with tensor / pipeline / expert parallelism: ranks 1.. follow
            # rank 0's steps here and end the process when its engine goes away (as vLLM's workers,
            # they never run the rest of the script).
            _kiln.run_worker(options)
            raise SystemExit(0)
        self.max_seqs = options.max_seqs
        self.engine = _kiln.Engine(options)
        # per instance: a cache on the class would keep every engine alive through its keys
        self.token_text = functools.lru_cache(maxsize=65536)(self._token_text)
        self.info = self.engine.model_info
        self._seeds = random.Random(self.seed) if self.seed is not None else None
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def next_request_id(self) -> str:
        return str(next(self._ids))

    def _token_text(self, token_id: int) -> str:
        return self.engine.token_bytes(token_id).decode("utf-8", "replace")

    def prompt_ids(self, prompt: PromptType) -> Tuple[Optional[str], List[int]]:
        """(text, token ids) of a prompt: a string (tokenized with the model's BOS rule), or vLLM's
        {"prompt": str} / {"prompt_token_ids": [int, ...]}."""
        if isinstance(prompt, str):
            return prompt, self.engine.tokenize(prompt)
        if isinstance(prompt, Mapping):
            if "prompt_token_ids" in prompt:
                ids = prompt["prompt_token_ids"]
                if isinstance(ids, (str, bytes)) or not all(isinstance(t, int) for t in ids):
                    raise TypeError("prompt_token_ids must be a list of ints")
                return prompt.get("prompt"), list(ids)
            if isinstance(prompt.get("prompt"), str):
                return prompt["prompt"], self.engine.tokenize(prompt["prompt"])
        raise TypeError(f"a prompt is a string, {{'prompt': str}} or {{'prompt_token_ids': [int]}}, got {prompt!r}")

    def render_chat(self, messages: Sequence[Message], add_generation_prompt: bool = True,
                    chat_template: Optional[str] = None, tools: Optional[Sequence[Mapping]] = None,
                    chat_template_kwargs: Optional[Mapping[str, Any]] = None) -> str:
        """The conversation in the chat template, as `kiln serve` renders it: text content parts joined,
        tool calls (arguments as JSON text or objects), tool results and the other message keys passed on;
        `tools` and `chat_template_kwargs` given to the template (docs/tools.md)."""
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise TypeError("messages must be a list of {'role': ..., 'content': ...} dicts")
        msgs = []
        for m in messages:
            if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
                raise ValueError(f"each message needs a string 'role', got {m!r}")
            msg = {k: v for k, v in m.items() if v is not None and k != "content"}
            if m.get("content") is not None or m.get("role") != "assistant":
                msg = {"role": m["role"], "content": _content_text(m.get("content")), **msg}
            msgs.append(msg)
        if tools is not None and (isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence)):
            raise TypeError("tools must be a list of {'type': 'function', 'function': {...}} dicts")
        if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, Mapping):
            raise TypeError("chat_template_kwargs must be a dict")
        try:
            messages_json = json.dumps(msgs)
            tools_json = json.dumps(list(tools)) if tools else ""
            kwargs_json = json.dumps(dict(chat_template_kwargs)) if chat_template_kwargs else ""
        except (TypeError, ValueError) as e:
            raise TypeError(f"messages, tools and chat_template_kwargs must be JSON data: {e}") from e
        return self.engine.apply_chat_template_json(messages_json, tools_json, kwargs_json, add_generation_prompt,
                                                    chat_template or "")

    def chat_ids(self, messages: Sequence[Message], add_generation_prompt: bool = True,
                 chat_template: Optional[str] = None, tools: Optional[Sequence[Mapping]] = None,
                 chat_template_kwargs: Optional[Mapping[str, Any]] = None) -> Tuple[str, List[int]]:
        """The rendered conversation and its ids (tokenized as HF's apply_chat_template: no BOS/EOS
        added, special tokens parsed), as `kiln serve` and `kiln generate --chat` do."""
        text = self.render_chat(messages, add_generation_prompt, chat_template, tools, chat_template_kwargs)
        return text, self.engine.tokenize(text, False, True)

    def submit(self, channel: int, prompts: Sequence[Tuple[Optional[str], List[int], SamplingParams]],
               request_ids: Optional[Sequence[Optional[str]]] = None,
               speculate: bool = True) -> List[Tuple[_Tracker, List[int]]]:
        """Queues the n choices of each (text, ids, params) on `channel`, all in one engine step:
        [(its tracker, its engine request ids)]. Choice i is seeded seed + i; without a seed, the
        seed comes from LLM(seed=...) when one was given."""
        batch = []
        trackers = []
        for k, (text, ids, params) in enumerate(prompts):
            native = params._native()
            if params.max_tokens is None:  # to EOS or the context's end
                native.max_tokens = max(0, self.info.max_model_len - len(ids))
            if not native.has_seed and self._seeds is not None:
                with self._lock:
                    native.seed, native.has_seed = self._seeds.getrandbits(64), True
            rid = request_ids[k] if request_ids and request_ids[k] is not None else self.next_request_id()
            trackers.append(_Tracker(rid, text, ids, params.n, params.logprobs is not None, self.token_text))
            batch.append((ids, native))
            for i in range(1, params.n):
                choice = native
                if native.has_seed:
                    choice = _kiln.NativeSamplingParams(native)
                    choice.seed = (native.seed + i) % (1 << 64)
                batch.append((ids, choice))
        eids = self.engine.submit(channel, batch, speculate)
        out, at = [], 0
        for t in trackers:
            n = len(t.choices)
            out.append((t, eids[at:at + n]))
            at += n
        return out
