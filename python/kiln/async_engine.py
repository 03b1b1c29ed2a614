"""kiln.AsyncEngine: asyncio generation (``async for out in engine.generate(...)``), vLLM's
AsyncLLMEngine.generate in shape.

One dispatcher thread per AsyncEngine waits on the engine's output channel with the GIL released and
hands each batch of updates to the event loops that asked for them, one call_soon_threadsafe per loop
and batch (not per token), so thousands of concurrent tasks cost one wake-up per engine step."""
from __future__ import annotations

import asyncio
import threading
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from . import _kiln
from ._core import Core, Message, PromptType
from .llm import LLM
from .outputs import RequestOutput
from .sampling_params import SamplingParams
from .tokenizer import Tokenizer

__all__ = ["AsyncEngine"]

_Route = Tuple[asyncio.AbstractEventLoop, "asyncio.Queue[Tuple[int, Any]]", int]


def _deliver(items: List[Tuple["asyncio.Queue[Tuple[int, Any]]", int, Any]]) -> None:
    for queue, index, out in items:
        queue.put_nowait((index, out))


class AsyncEngine:
    """Asynchronous generation over a kiln engine.

    ``AsyncEngine(model, **engine_options)`` loads a model (the options are LLM's);
    ``AsyncEngine(llm)`` shares an LLM's engine, so offline calls and async tasks batch together.
    Any number of tasks, on any number of event loops, may generate at once. Call ``shutdown()``
    (or use ``async with``) to stop its dispatcher thread.
    """

    def __init__(self, model: Union[str, LLM], **engine_options: Any) -> None:
        if isinstance(model, LLM):
            if engine_options:
                raise TypeError("AsyncEngine(llm) takes no engine options: the LLM's engine is shared")
            self._core: Core = model._core
        else:
            self._core = LLM(model, **engine_options)._core
        self._engine = self._core.engine
        self._channel = self._engine.open_channel()
        self._lock = threading.Lock()
        self._routes: Dict[int, _Route] = {}  # engine request id -> where its outputs go
        self._early: Dict[int, List[Any]] = {}  # outputs that came before their route
        self._dropped: Set[int] = set()  # aborted ids whose last output is still to come
        self._by_request: Dict[str, List[int]] = {}
        self._abort_asked: Set[str] = set()  # abort(rid) before its submission returned
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._dispatch, name="kiln-async-dispatch", daemon=True)
        self._thread.start()

    async def generate(self, prompt: PromptType, sampling_params: Optional[SamplingParams] = None,
                       request_id: Optional[str] = None, *, speculate: bool = True) -> AsyncIterator[RequestOutput]:
        """Yields the prompt's RequestOutput as tokens arrive (cumulative unless
        ``sampling_params.output_kind`` says otherwise); the last one has finished=True. Cancelling
        the task or leaving the loop aborts the request."""
        async for out in self._generate(lambda: self._core.prompt_ids(prompt), sampling_params or SamplingParams(),
                                         request_id, speculate):
            yield out

    async def chat(self, messages: Sequence[Message], sampling_params: Optional[SamplingParams] = None,
                   request_id: Optional[str] = None, *, chat_template: Optional[str] = None,
                   add_generation_prompt: bool = True, tools: Optional[list] = None,
                   chat_template_kwargs: Optional[Dict[str, Any]] = None,
                   speculate: bool = True) -> AsyncIterator[RequestOutput]:
        """generate() for a conversation rendered with the model's chat template (tools and template variables
        passed to it, as LLM.chat does)."""
        async for out in self._generate(lambda: self._core.chat_ids(messages, add_generation_prompt, chat_template,
                                                                    tools, chat_template_kwargs),
                                         sampling_params or SamplingParams(), request_id, speculate):
            yield out

    def abort(self, request_id: str) -> None:
        """Ends a running request early (its generator yields a last output, finish_reason "abort")."""
        with self._lock:
            eids = list(self._by_request.get(request_id, ()))
            if request_id in self._by_request and not eids:  # still being queued: abort when it is
                self._abort_asked.add(request_id)
        for eid in eids:
            self._engine.abort(eid)

    def get_tokenizer(self) -> Tokenizer:
        return Tokenizer(self._core)

    def shutdown(self) -> None:
        """Aborts this engine's running requests (their generators raise kiln.EngineError) and stops
        the dispatcher thread."""
        self._stop.set()
        self._thread.join()
        with self._lock:
            routes = dict(self._routes)
            self._routes.clear()
        by_loop: Dict[asyncio.AbstractEventLoop, list] = {}
        for eid, (loop, queue, _) in routes.items():
            self._engine.abort(eid)
            by_loop.setdefault(loop, []).append((queue, -1, None))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:
                pass
        self._engine.close_channel(self._channel)

    async def __aenter__(self) -> "AsyncEngine":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.shutdown()

    async def _generate(self, prepare: Callable[[], Tuple[Optional[str], List[int]]], params: SamplingParams,
                        request_id: Optional[str], speculate: bool) -> AsyncIterator[RequestOutput]:
        if self._stop.is_set():
            raise _kiln.EngineError("this AsyncEngine was shut down")
        loop = asyncio.get_running_loop()
        queue: "asyncio.Queue[Tuple[int, Any]]" = asyncio.Queue()
        rid = request_id if request_id is not None else self._core.next_request_id()
        with self._lock:
            if rid in self._by_request:
                raise ValueError(f"request id {rid!r} is already running")
            self._by_request[rid] = []

        def submit() -> Tuple[Any, List[int]]:  # off the event loop: tokenizing, and waiting for a step's end
            text, ids = prepare()
            return self._core.submit(self._channel, [(text, ids, params)], [rid], speculate)[0]

        fut = loop.run_in_executor(None, submit)
        try:
            tracker, eids = await asyncio.shield(fut)
        except BaseException:
            with self._lock:
                self._by_request.pop(rid, None)
            fut.add_done_callback(self._abort_submitted)  # cancelled meanwhile: stop what it queued
            raise
        with self._lock:
            self._by_request[rid] = eids
            abort_now = rid in self._abort_asked
            self._abort_asked.discard(rid)
            for i, eid in enumerate(eids):
                self._routes[eid] = (loop, queue, i)
                for out in self._early.pop(eid, ()):
                    queue.put_nowait((i, out))
        live = set(eids)
        try:
            if abort_now:  # abort(rid) came while it was being queued
                await loop.run_in_executor(None, self._abort_all, eids)
            while live:
                index, out = await queue.get()
                batch = [(index, out)]
                while not queue.empty():
                    batch.append(queue.get_nowait())
                for index, out in batch:
                    if index < 0:
                        raise _kiln.EngineError("the AsyncEngine was shut down")
                    tracker.add(index, out)
                    if out.finished:
                        live.discard(out.request_id)
                o = tracker.output(params.output_kind)
                if o is not None:
                    yield o
        finally:
            while not queue.empty():  # finished outputs already delivered need no dropping
                index, out = queue.get_nowait()
                if out is not None and out.finished:
                    live.discard(out.request_id)
            with self._lock:
                self._by_request.pop(rid, None)
                self._abort_asked.discard(rid)
                for eid in eids:
                    self._routes.pop(eid, None)
                for eid in live:  # cancelled or closed early: stop it, drop its last output
                    self._dropped.add(eid)
            if live and not self._stop.is_set():
                try:  # off the event loop: an abort waits for the end of the engine's current step
                    loop.run_in_executor(None, self._abort_all, list(live))
                except RuntimeError:  # the loop is closing
                    self._abort_all(list(live))

    def _abort_all(self, eids: List[int]) -> None:
        for eid in eids:
            self._engine.abort(eid)

    def _abort_submitted(self, fut: "asyncio.Future[Tuple[Any, List[int]]]") -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        eids = fut.result()[1]
        with self._lock:
            for eid in eids:
                self._early.pop(eid, None)
                self._dropped.add(eid)
        for eid in eids:
            self._engine.abort(eid)

    def _dispatch(self) -> None:
        while not self._stop.is_set():
            outs = self._engine.take(self._channel, 0.2)
            if not outs:
                continue
            by_loop: Dict[asyncio.AbstractEventLoop, list] = {}
            with self._lock:
                for out in outs:
                    route = self._routes.get(out.request_id)
                    if route is not None:
                        loop, queue, index = route
                        by_loop.setdefault(loop, []).append((queue, index, out))
                    elif out.request_id in self._dropped:
                        if out.finished:
                            self._dropped.discard(out.request_id)
                    else:  # submitted, its route not yet written
                        self._early.setdefault(out.request_id, []).append(out)
            for loop, items in by_loop.items():
                try:
                    loop.call_soon_threadsafe(_deliver, items)
                except RuntimeError:  # that loop is closed: its generators are gone
                    pass
