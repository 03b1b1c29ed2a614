"""Bad arguments raise Python exceptions that carry the engine's message; none crashes the process or
harms the engine, which still answers afterwards."""
import os
import subprocess
import sys
import tempfile

import pytest

import kiln
from kiln import SamplingParams
from conftest import SMOL, STORIES


def test_bad_model_paths():
    with pytest.raises(FileNotFoundError):
        kiln.LLM("/no/such/model.gguf")
    with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
        f.write(b"GGUF" + b"\xff" * 60)  # version 0xffffffff
        f.flush()
        with pytest.raises(NotImplementedError, match="GGUF version") as e:
            kiln.LLM(f.name)
        assert f.name in str(e.value)
    with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
        f.write(b"GGUF" + (3).to_bytes(4, "little") + (10**6).to_bytes(8, "little") + b"\x00" * 20)  # truncated
        f.flush()
        with pytest.raises(kiln.EngineError) as e:
            kiln.LLM(f.name)
        assert f.name in str(e.value)
    with pytest.raises(TypeError):
        kiln.LLM(1234)


def test_bad_engine_options():
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_option'"):
        kiln.LLM(STORIES, no_such_option=1)
    with pytest.raises(TypeError, match="threads must be an int"):
        kiln.LLM(STORIES, threads="two")
    with pytest.raises(NotImplementedError, match="quantization"):
        kiln.LLM(STORIES, quantization="awq")
    with pytest.raises(ValueError, match="mpirun -np 2"):  # parallel ranks: under mpirun (test_parallel.py)
        kiln.LLM(STORIES, tensor_parallel_size=2)
    with pytest.raises(NotImplementedError, match="dtype"):
        kiln.LLM(STORIES, dtype="bfloat16")
    with pytest.raises(ValueError):
        kiln.LLM(STORIES, isa="sse9")
    with pytest.raises(ValueError):
        kiln.LLM(STORIES, block_size=0)
    with pytest.raises((ValueError, kiln.EngineError, NotImplementedError)):
        kiln.LLM(STORIES, device="tpu")
    with pytest.raises(NotImplementedError, match="speculative_config"):
        kiln.LLM(STORIES, speculative_config={"method": "eagle3"})


@pytest.mark.parametrize("kwargs, match", [
    ({"temperature": -1}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"min_p": 2}, "min_p"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"frequency_penalty": 5}, "frequency_penalty"),
    ({"logprobs": 1000}, "logprobs"),
    ({"n": 0}, "n must be"),
    ({"temperature": "hot"}, "could not convert|must be real number|float"),
])
def test_bad_sampling_params(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


def test_unsupported_sampling_params_are_not_ignored():
    with pytest.raises(NotImplementedError, match="min_tokens"):
        SamplingParams(min_tokens=3)
    with pytest.raises(NotImplementedError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'temprature'"):
        SamplingParams(temprature=0.5)
    SamplingParams(min_tokens=0, best_of=None)  # vLLM's defaults are fine


def test_bad_requests_leave_the_engine_working(stories):
    info = stories.model_info
    with pytest.raises(ValueError, match="context"):
        stories.generate("Once " * (info.max_model_len + 10), SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="context"):
        stories.generate("Once", SamplingParams(max_tokens=info.max_model_len))
    with pytest.raises(ValueError, match="vocabulary"):
        stories.generate({"prompt_token_ids": [1, info.vocab_size + 5]}, SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="no tokens"):
        stories.generate({"prompt_token_ids": []}, SamplingParams(max_tokens=4))
    with pytest.raises(TypeError):
        stories.generate({"prompt_token_ids": "abc"})
    with pytest.raises(TypeError):
        stories.generate(12)
    with pytest.raises(ValueError, match="2 sampling_params for 3 prompts"):
        stories.generate(["a", "b", "c"], [SamplingParams(), SamplingParams()])
    with pytest.raises(TypeError):
        stories.generate("a", {"temperature": 0})
    with pytest.raises(FileNotFoundError, match="chat template"):
        stories.chat([{"role": "user", "content": "hi"}])  # stories260K has none
    with pytest.raises((ValueError, kiln.EngineError)):
        stories.chat([{"role": "user", "content": "hi"}], chat_template="{% for m in messages %}{{ m.content ")
    with pytest.raises(ValueError):
        stories.chat([{"role": "user", "content": [{"type": "image_url"}]}], chat_template="{{ 'x' }}")
    # tools, tool calls in the history and chat_template_kwargs reach the template (docs/tools.md)
    tmpl = ("{{ tools[0].function.name }}|{{ x }}|{% for m in messages %}{{ m.role }}:"
            "{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments.a }}{% else %}{{ m.content }}{% endif %};{% endfor %}")
    history = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                                      "function": {"name": "f", "arguments": '{"a": 5}'}}]},
               {"role": "tool", "tool_call_id": "c", "content": "ok"}]
    [out] = stories.chat(history, SamplingParams(max_tokens=1), tools=[{"type": "function", "function": {"name": "f"}}],
                         chat_template=tmpl, chat_template_kwargs={"x": 7})
    assert out.prompt == "f|7|user:hi;assistant:5;tool:ok;"
    *_, last = stories.stream_chat(history, SamplingParams(max_tokens=1), chat_template=tmpl,
                                   tools=[{"type": "function", "function": {"name": "g"}}], chat_template_kwargs={"x": 8})
    assert last.prompt == "g|8|user:hi;assistant:5;tool:ok;"
    with pytest.raises(TypeError, match="tools"):
        stories.chat([{"role": "user", "content": "hi"}], tools={"type": "function"}, chat_template="x")
    # a failing prompt in a batch queues none of them: the good one generates nothing
    before = stories.stats().generated_tokens_total
    with pytest.raises(ValueError):
        stories.generate(["Once upon a time", {"prompt_token_ids": [10**9]}], SamplingParams(max_tokens=4))
    s = stories.stats()
    assert s.num_running == 0 and s.num_waiting == 0
    assert s.generated_tokens_total == before
    [out] = stories.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=8))
    assert len(out.outputs[0].token_ids) == 8


def test_closed_engine_raises():
    llm = kiln.LLM(STORIES, threads=1)
    tok = llm.get_tokenizer()
    llm.close()
    with pytest.raises(kiln.EngineError, match="closed"):
        llm.generate("Once")
    with pytest.raises(kiln.EngineError, match="closed"):
        tok.encode("Once")
    llm.close()  # twice is fine


def test_interrupt_aborts_the_batch():
    """Ctrl-C during generate raises KeyboardInterrupt and aborts what runs (in a child process)."""
    code = f"""
import os, signal, threading, time, kiln
llm = kiln.LLM({SMOL!r}, threads=2)
p = kiln.SamplingParams(temperature=0, max_tokens=None, ignore_eos=True)
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    llm.generate(["Once upon a time"] * 4, p, use_tqdm=False)
    print("not interrupted")
except KeyboardInterrupt:
    time.sleep(0.2)
    s = llm.stats()
    print("interrupted", s.num_running, s.num_waiting)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "interrupted 0 0", r.stdout + r.stderr
