"""kiln for Python: the kiln inference engine with vLLM's offline API.

    from kiln import LLM, SamplingParams
    llm = LLM("SmolLM2-135M-Instruct.Q4_1.gguf")
    for out in llm.generate(["The capital of France is"], SamplingParams(temperature=0, max_tokens=16)):
        print(out.outputs[0].text)

LLM (generate, chat, stream), SamplingParams, RequestOutput / CompletionOutput / Logprob,
AsyncEngine (asyncio), Tokenizer, serve (the OpenAI-compatible server in-process). docs/python.md
has the whole API and what differs from vLLM.
"""
from ._kiln import EngineError
from .async_engine import AsyncEngine
from .llm import LLM
from .outputs import CompletionOutput, Logprob, RequestOutput
from .sampling_params import GuidedDecodingParams, RequestOutputKind, SamplingParams, StructuredOutputsParams
from .server import Server, serve
from .tokenizer import Tokenizer

__version__ = "0.1.0"
__all__ = ["LLM", "SamplingParams", "StructuredOutputsParams", "GuidedDecodingParams", "RequestOutput", "CompletionOutput", "Logprob", "RequestOutputKind",
           "AsyncEngine", "Tokenizer", "serve", "Server", "EngineError", "__version__"]
