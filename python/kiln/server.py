"""kiln.serve: the OpenAI-compatible HTTP server of `kiln serve` (docs/server.md), started in-process
over a model path or an existing LLM (whose engine it then shares with the Python API)."""
from __future__ import annotations

from typing import Any, Optional, Union

from . import _kiln
from .llm import LLM

__all__ = ["serve", "Server"]


class Server:
    """A running server (``kiln.serve(..., block=False)``): ``url``, ``port``, ``stop()``, ``wait()``."""

    def __init__(self, llm: LLM, native: "_kiln.Server", host: str) -> None:
        self.llm = llm
        self._native = native
        self.host = host

    @property
    def port(self) -> int:
        return self._native.port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._native.running

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until the server stops (or `timeout` seconds); True when it has. Ctrl-C interrupts."""
        while timeout is None or timeout > 0:
            step = 0.2 if timeout is None else min(0.2, timeout)
            if self._native.wait(step):
                return True
            if timeout is not None:
                timeout -= step
        return not self._native.running

    def stop(self) -> None:
        """Stops listening and aborts the requests it runs (the engine stays loaded)."""
        self._native.stop()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<kiln.Server {self.url} {'running' if self.running else 'stopped'}>"


def serve(model: Union[str, LLM], *, host: str = "127.0.0.1", port: int = 8000, api_key: Optional[str] = None,
          served_model_name: Optional[str] = None, chat_template: Optional[str] = None, max_queue: int = 256,
          log_json: bool = False, block: bool = True, **engine_options: Any) -> Server:
    """Serves `model` (a path, loaded with **engine_options as LLM does, or an LLM) over kiln's
    OpenAI-compatible API: /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics, the
    playground at / and the dashboard at /dashboard.

    port=0 picks a free port (see ``Server.port``). chat_template is a Jinja string that replaces the
    model's. With block=True (the default) it serves until Ctrl-C and returns the stopped Server;
    with block=False it returns the running Server at once.
    """
    if isinstance(model, LLM):
        if engine_options:
            raise TypeError("serve(llm) takes no engine options: the LLM's engine is used as it is")
        llm = model
    else:
        llm = LLM(model, **engine_options)
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an integer in [0, 65535], got {port!r}")
    if api_key == "":
        raise ValueError("api_key is empty (None serves without authentication)")
    if not isinstance(max_queue, int) or max_queue < 0:
        raise ValueError(f"max_queue must be an integer >= 0, got {max_queue!r}")
    o = _kiln.ServerOptions()
    o.host = host
    o.port = port
    o.api_key = api_key or ""
    o.max_queue = max_queue
    o.max_seqs = llm._core.max_seqs  # the queue limit and HTTP threads are sized from it
    o.served_model_name = served_model_name or ""
    o.log_json = bool(log_json)
    if chat_template:  # a broken template is an error now, not one per request
        llm._core.render_chat([{"role": "user", "content": "hi"}], True, chat_template)
        o.chat_template = chat_template
    srv = Server(llm, _kiln.Server(llm._core.engine, o), host)
    if not block:
        return srv
    try:
        srv.wait()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
    return srv
