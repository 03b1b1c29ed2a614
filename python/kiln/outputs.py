"""RequestOutput / CompletionOutput / Logprob, shaped like vLLM's, and the accumulation of the engine's
per-step updates into them (one _Tracker per prompt, its n choices being n engine requests)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

from . import _kiln
from .sampling_params import RequestOutputKind

__all__ = ["Logprob", "CompletionOutput", "RequestOutput"]


@dataclass
class Logprob:
    """A token's log-probability (of the model's raw logits), its rank (1 = most likely; None when it
    was not among the requested alternatives) and its text."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    """One completion of a prompt (vLLM's fields). ``finish_reason`` is "stop" (EOS, a stop string or
    token), "length" (max_tokens or the context's end), "abort", or None while it runs. ``stop_reason``
    is always None: the engine does not say which stop string matched."""

    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[Dict[int, Logprob]]]
    finish_reason: Optional[str] = None
    stop_reason: Optional[object] = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """The outputs of one prompt (vLLM's fields; ``prompt_logprobs`` and ``metrics`` are always None)."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput]
    finished: bool
    prompt_logprobs: None = None
    num_cached_tokens: int = 0
    metrics: None = None
    ttft_seconds: Optional[float] = field(default=None, repr=False)  # kiln: time to the first token


class _Choice:
    __slots__ = ("ids", "text", "logprobs", "cum", "finish", "sent_ids", "sent_text", "sent_logprobs")

    def __init__(self, with_logprobs: bool) -> None:
        self.ids: List[int] = []
        self.text: List[str] = []
        self.logprobs: Optional[List[Dict[int, Logprob]]] = [] if with_logprobs else None
        self.cum = 0.0
        self.finish: Optional[str] = None
        self.sent_ids = self.sent_text = self.sent_logprobs = 0


class _Tracker:
    """Collects the updates of one prompt's n engine requests."""

    def __init__(self, request_id: str, prompt: Optional[str], prompt_ids: List[int], n: int,
                 with_logprobs: bool, token_text: Callable[[int], str]) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_ids = prompt_ids
        self.choices = [_Choice(with_logprobs) for _ in range(n)]
        self.num_finished = 0
        self.cached = 0
        self.ttft: Optional[float] = None
        self.error: Optional[str] = None
        self._token_text = token_text

    @property
    def finished(self) -> bool:
        return self.num_finished == len(self.choices)

    def add(self, index: int, out: "_kiln.Output") -> None:
        c = self.choices[index]
        ids = out.token_ids
        if ids:
            c.ids.extend(ids)
            c.text.append(out.text.decode("utf-8", "replace"))
            if self.ttft is None:
                self.ttft = out.ttft_seconds
        if c.logprobs is not None:
            for tl in out.logprobs:
                entry: Dict[int, Logprob] = {}
                rank = None
                for r, (tid, lp) in enumerate(tl.top, 1):
                    entry[tid] = Logprob(lp, r, self._token_text(tid))
                    if tid == tl.token_id:
                        rank = r
                if tl.token_id not in entry:
                    entry[tl.token_id] = Logprob(tl.logprob, rank, self._token_text(tl.token_id))
                c.logprobs.append(entry)
                c.cum += tl.logprob
        if out.finished:
            if out.finish_reason == "error" and self.error is None:
                self.error = out.error or "the engine failed this request"
            c.finish = out.finish_reason
            self.cached = max(self.cached, out.cached_tokens)
            self.num_finished += 1

    def output(self, kind: RequestOutputKind = RequestOutputKind.CUMULATIVE) -> Optional[RequestOutput]:
        """The RequestOutput as of now (None: nothing to report for this kind); raises kiln.EngineError
        when the engine failed one of its requests."""
        if self.error:
            raise _kiln.EngineError(f"request {self.request_id}: {self.error}")
        if kind == RequestOutputKind.FINAL_ONLY and not self.finished:
            return None
        outs = []
        for i, c in enumerate(self.choices):
            if kind == RequestOutputKind.DELTA:
                ids, text = c.ids[c.sent_ids:], "".join(c.text[c.sent_text:])
                lps = None if c.logprobs is None else c.logprobs[c.sent_logprobs:]
                c.sent_ids, c.sent_text = len(c.ids), len(c.text)
                c.sent_logprobs = 0 if c.logprobs is None else len(c.logprobs)
            else:
                ids, text = list(c.ids), "".join(c.text)
                lps = None if c.logprobs is None else list(c.logprobs)
            cum = None if c.logprobs is None else c.cum
            outs.append(CompletionOutput(i, text, ids, cum, lps, c.finish, None))
        return RequestOutput(self.request_id, self.prompt, self.prompt_ids, outs, self.finished,
                             num_cached_tokens=self.cached, ttft_seconds=self.ttft)
