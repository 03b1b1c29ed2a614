"""kiln.LLM against the C++ command line and against itself: greedy and seeded sampled text equal to
`kiln generate` (prompt and chat), n choices, logprobs, stop strings, streaming (cumulative, delta,
early exit), token-id prompts and the tokenizer."""
import math

import kiln
from kiln import SamplingParams, RequestOutputKind
from conftest import SMOL, kiln_generate

PROMPT = "The capital of France is"


def test_greedy_equals_kiln_generate(smol):
    want = kiln_generate("-m", SMOL, "-p", PROMPT, "-n", "40", "-t", "2", "--ignore-eos")
    # kiln generate keeps special tokens in its text (an ignored EOS among them)
    [out] = smol.generate(PROMPT, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True,
                                                 skip_special_tokens=False))
    c = out.outputs[0]
    assert c.text == want
    assert len(c.token_ids) == 40 and c.finish_reason == "length"
    assert out.finished and out.prompt == PROMPT
    assert out.prompt_token_ids == smol.get_tokenizer().encode(PROMPT)
    assert smol.get_tokenizer().decode(c.token_ids) == c.text


def test_seeded_sampling_equals_kiln_generate(smol):
    want = kiln_generate("-m", SMOL, "-p", PROMPT, "-n", "32", "-t", "2", "--temp", "0.9", "--top-p", "0.95",
                         "--top-k", "40", "--seed", "77")
    p = SamplingParams(temperature=0.9, top_p=0.95, top_k=40, seed=77, max_tokens=32)
    [out] = smol.generate(PROMPT, p)
    assert out.outputs[0].text == want
    [again] = smol.generate([PROMPT], p)
    assert again.outputs[0].token_ids == out.outputs[0].token_ids


def test_chat_equals_kiln_generate_chat(smol):
    q = "What is the capital of France? Answer in one word."
    want = kiln_generate("-m", SMOL, "--chat", "-p", q, "-n", "24", "-t", "2")
    [out] = smol.chat([{"role": "user", "content": q}], SamplingParams(temperature=0, max_tokens=24))
    assert out.outputs[0].text == want
    assert "<|im_start|>user" in out.prompt and out.prompt.endswith("<|im_start|>assistant\n")
    tok = smol.get_tokenizer()
    assert out.prompt == tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                                 add_generation_prompt=True)
    assert out.prompt_token_ids == tok.apply_chat_template([{"role": "user", "content": q}],
                                                           add_generation_prompt=True)
    # content as OpenAI text parts renders the same
    [parts] = smol.chat([{"role": "user", "content": [{"type": "text", "text": q}]}],
                        SamplingParams(temperature=0, max_tokens=24))
    assert parts.outputs[0].text == want


def test_batch_of_prompts_in_order_and_equal_alone(smol):
    prompts = [PROMPT, "Once upon a time", {"prompt": "def fib(n):"}, "1, 2, 3, 4,"]
    p = SamplingParams(temperature=0, max_tokens=12)
    outs = smol.generate(prompts, p)
    assert [o.prompt for o in outs] == [PROMPT, "Once upon a time", "def fib(n):", "1, 2, 3, 4,"]
    for prompt, o in zip(prompts, outs):
        [alone] = smol.generate(prompt, p)
        assert alone.outputs[0].token_ids == o.outputs[0].token_ids
    # per-prompt params
    outs = smol.generate(prompts[:2], [SamplingParams(temperature=0, max_tokens=3),
                                       SamplingParams(temperature=0, max_tokens=5)])
    assert [len(o.outputs[0].token_ids) for o in outs] == [3, 5]


def test_token_id_prompts(smol):
    ids = smol.get_tokenizer().encode(PROMPT)
    [a] = smol.generate({"prompt_token_ids": ids}, SamplingParams(temperature=0, max_tokens=8))
    [b] = smol.generate(PROMPT, SamplingParams(temperature=0, max_tokens=8))
    assert a.prompt is None and a.prompt_token_ids == ids
    assert a.outputs[0].token_ids == b.outputs[0].token_ids


def test_n_choices_are_seed_plus_i(smol):
    p = SamplingParams(n=3, temperature=1.0, seed=5, max_tokens=16)
    [out] = smol.generate(PROMPT, p)
    assert [c.index for c in out.outputs] == [0, 1, 2]
    for i, c in enumerate(out.outputs):
        [alone] = smol.generate(PROMPT, SamplingParams(temperature=1.0, seed=5 + i, max_tokens=16))
        assert alone.outputs[0].token_ids == c.token_ids
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1


def test_logprobs(smol):
    [out] = smol.generate(PROMPT, SamplingParams(temperature=0, max_tokens=10, logprobs=3))
    c = out.outputs[0]
    assert len(c.logprobs) == len(c.token_ids) == 10
    total = 0.0
    for tid, entry in zip(c.token_ids, c.logprobs):
        assert tid in entry and entry[tid].rank == 1  # greedy: the most likely token
        ranks = sorted(lp.rank for lp in entry.values())
        assert ranks == [1, 2, 3]
        assert all(lp.logprob <= 0 for lp in entry.values())
        assert entry[tid].decoded_token == smol.get_tokenizer().decode([tid])
        total += entry[tid].logprob
    assert math.isclose(c.cumulative_logprob, total, rel_tol=1e-6, abs_tol=1e-6)
    [plain] = smol.generate(PROMPT, SamplingParams(temperature=0, max_tokens=10))
    assert plain.outputs[0].logprobs is None and plain.outputs[0].cumulative_logprob is None


def test_eos_and_the_context_end(smol, stories):
    # A short answer (a raw-text prompt's greedy continuation reaches EOS or not on a near-tie that
    # last-bit changes in the kernels flip).
    question = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    [eos] = smol.chat(question, SamplingParams(temperature=0, max_tokens=None))
    assert eos.outputs[0].finish_reason == "stop" and 0 < len(eos.outputs[0].token_ids) < 100
    [ctx] = stories.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))
    c = ctx.outputs[0]
    assert c.finish_reason == "length"
    assert len(ctx.prompt_token_ids) + len(c.token_ids) == stories.model_info.max_model_len


def test_skip_special_tokens(smol):
    tok = smol.get_tokenizer()
    [start] = tok.encode("<|im_start|>", add_special_tokens=False)
    # <|im_start|> forced at every step: its text is left out by default (vLLM), kept on request
    force = {start: 100.0}
    p_skip = SamplingParams(temperature=0, max_tokens=6, logit_bias=force)
    p_keep = SamplingParams(temperature=0, max_tokens=6, logit_bias=force, skip_special_tokens=False)
    [skip], [keep] = smol.generate(PROMPT, p_skip), smol.generate(PROMPT, p_keep)
    assert skip.outputs[0].token_ids == keep.outputs[0].token_ids == [start] * 6
    assert keep.outputs[0].text == "<|im_start|>" * 6 and skip.outputs[0].text == ""
    ids = tok.encode("Hi<|im_start|>there", add_special_tokens=False)
    assert tok.decode(ids) == "Hi<|im_start|>there"
    assert tok.decode(ids, skip_special_tokens=True) == "Hithere"


def test_stop_strings(smol):
    [full] = smol.generate(PROMPT, SamplingParams(temperature=0, max_tokens=40))
    text = full.outputs[0].text
    word = text.split()[2]
    [stopped] = smol.generate(PROMPT, SamplingParams(temperature=0, max_tokens=40, stop=[word]))
    assert stopped.outputs[0].text == text[:text.index(word)]
    assert stopped.outputs[0].finish_reason == "stop"


def test_stream_cumulative_delta_and_early_exit(smol):
    p = SamplingParams(temperature=0, max_tokens=30)
    [full] = smol.generate(PROMPT, p)
    seen = list(smol.stream(PROMPT, p))
    assert seen[-1].finished and not any(o.finished for o in seen[:-1])
    assert seen[-1].outputs[0].text == full.outputs[0].text
    for a, b in zip(seen, seen[1:]):
        assert b.outputs[0].text.startswith(a.outputs[0].text)
    d = SamplingParams(temperature=0, max_tokens=30, output_kind=RequestOutputKind.DELTA)
    deltas = list(smol.stream(PROMPT, d))
    assert "".join(o.outputs[0].text for o in deltas) == full.outputs[0].text
    assert sum((o.outputs[0].token_ids for o in deltas), []) == full.outputs[0].token_ids
    final = list(smol.stream(PROMPT, SamplingParams(temperature=0, max_tokens=30,
                                                    output_kind=RequestOutputKind.FINAL_ONLY)))
    assert len(final) == 1 and final[0].outputs[0].text == full.outputs[0].text
    # leaving the loop early aborts the request: nothing keeps running
    for o in smol.stream(PROMPT, SamplingParams(temperature=0, max_tokens=None, ignore_eos=True)):
        if len(o.outputs[0].token_ids) >= 3:
            break
    stats = smol.stats()
    assert stats.num_running == 0 and stats.num_waiting == 0


def test_global_seed_makes_runs_reproducible():
    p = SamplingParams(temperature=1.0, max_tokens=12)
    runs = []
    for _ in range(2):
        with kiln.LLM(SMOL, threads=2, seed=123) as llm:
            runs.append([o.outputs[0].token_ids for o in llm.generate([PROMPT, PROMPT], p)])
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[0][1]  # each request draws its own seed


def test_tokenizer(smol):
    tok = smol.get_tokenizer()
    ids = tok.encode("Hello world, <|im_start|> again")
    assert tok.decode(ids) == "Hello world, <|im_start|> again"
    assert tok.convert_ids_to_tokens(tok.eos_token_id) == "<|im_end|>"
    assert tok.vocab_size == smol.model_info.vocab_size == 49152
    assert tok.chat_template and "im_start" in tok.chat_template
