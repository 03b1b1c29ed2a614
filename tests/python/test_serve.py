"""kiln.serve in-process: the OpenAI-compatible server over an LLM's engine, checked with the official
openai client (plain and streaming) against LLM.chat / LLM.generate on the same engine, behind an API
key; Python calls run while it serves; stop() ends it and the engine stays usable."""
import threading

import pytest
from openai import OpenAI, AuthenticationError

import kiln
from kiln import SamplingParams


def test_serve_round_trip(smol):
    srv = kiln.serve(smol, port=0, api_key="k1", served_model_name="smol", block=False)
    try:
        assert srv.running and srv.port > 0
        client = OpenAI(base_url=srv.url + "/v1", api_key="k1")
        assert [m.id for m in client.models.list().data] == ["smol"]
        msgs = [{"role": "user", "content": "Name a color."}]
        [want] = smol.chat(msgs, SamplingParams(temperature=0, max_tokens=16))
        r = client.chat.completions.create(model="smol", messages=msgs, temperature=0, max_tokens=16)
        assert r.choices[0].message.content == want.outputs[0].text
        chunks = client.chat.completions.create(model="smol", messages=msgs, temperature=0, max_tokens=16,
                                                stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want.outputs[0].text
        [comp] = smol.generate("The capital of France is", SamplingParams(temperature=0, max_tokens=10))
        done = []
        t = threading.Thread(target=lambda: done.append(
            smol.generate("The capital of France is", SamplingParams(temperature=0, max_tokens=10))))
        t.start()  # the Python API and the server share the engine at once
        r = client.completions.create(model="smol", prompt="The capital of France is", temperature=0, max_tokens=10)
        t.join()
        assert r.choices[0].text == comp.outputs[0].text == done[0][0].outputs[0].text
        with pytest.raises(AuthenticationError):
            OpenAI(base_url=srv.url + "/v1", api_key="wrong").models.list()
        with pytest.raises(kiln.EngineError, match="server"):
            smol.close()  # refused while a server uses the engine
    finally:
        srv.stop()
    assert not srv.running
    assert srv.wait(1.0)
    [again] = smol.generate("The capital of France is", SamplingParams(temperature=0, max_tokens=10))
    assert again.outputs[0].text == comp.outputs[0].text


def test_serve_bad_arguments(smol):
    with pytest.raises(ValueError, match="port"):
        kiln.serve(smol, port=70000, block=False)
    with pytest.raises(ValueError, match="api_key"):
        kiln.serve(smol, port=0, api_key="", block=False)
    with pytest.raises(TypeError):
        kiln.serve(smol, port=0, threads=2, block=False)
    with pytest.raises((ValueError, kiln.EngineError)):
        kiln.serve(smol, port=0, chat_template="{% if %}", block=False)
    with pytest.raises(kiln.EngineError):  # cannot bind
        kiln.serve(smol, host="203.0.113.7", port=0, block=False)
