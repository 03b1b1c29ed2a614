"""Many submitters at once: 32 Python threads, 32 asyncio tasks, and both together on one engine, each
getting exactly its sequential answer (kiln is batch-invariant on the CPU, so the tokens cannot
depend on who else ran); cancelling tasks and aborting requests leaves nothing running."""
import asyncio
import threading

import kiln
from kiln import SamplingParams

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben", "One day, a bird", "The sun was"]


def params(i):
    # half greedy, half sampled with a seed of their own, varied lengths
    if i % 2:
        return SamplingParams(temperature=0.8, top_p=0.9, seed=1000 + i, max_tokens=20 + i % 7)
    return SamplingParams(temperature=0, max_tokens=20 + i % 7)


def job(i):
    return PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS)), params(i)


def sequential(llm, n):
    return [llm.generate(*job(i))[0].outputs[0].token_ids for i in range(n)]


def assert_idle(llm):
    """Nothing runs or waits in the engine (aborts take effect at the end of a step: wait up to 2.5 s)."""
    for _ in range(50):
        s = llm.stats()
        if s.num_running == 0 and s.num_waiting == 0:
            break
        threading.Event().wait(0.05)
    assert s.num_running == 0 and s.num_waiting == 0


def test_32_threads_equal_sequential(stories):
    want = sequential(stories, 32)
    got = [None] * 32
    errors = []
    start = threading.Barrier(32)

    def run(i):
        try:
            start.wait()
            got[i] = stories.generate(*job(i), use_tqdm=False)[0].outputs[0].token_ids
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert got == want


def test_32_async_tasks_equal_sequential(stories):
    want = sequential(stories, 32)

    async def main():
        engine = kiln.AsyncEngine(stories)
        try:
            async def one(i):
                last = None
                async for out in engine.generate(*job(i)):
                    last = out
                assert last.finished
                return last.outputs[0].token_ids
            return await asyncio.gather(*(one(i) for i in range(32)))
        finally:
            engine.shutdown()

    assert asyncio.run(main()) == want


def test_threads_and_tasks_together(stories):
    want = sequential(stories, 16)
    thread_got = [None] * 8

    def run(i):
        thread_got[i] = stories.generate(*job(i), use_tqdm=False)[0].outputs[0].token_ids

    async def main():
        engine = kiln.AsyncEngine(stories)
        try:
            async def one(i):
                outs = [o async for o in engine.generate(*job(i))]
                return outs[-1].outputs[0].token_ids
            threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            got = await asyncio.gather(*(one(i) for i in range(8, 16)))
            for t in threads:
                t.join()
            return got
        finally:
            engine.shutdown()

    assert thread_got + asyncio.run(main()) == want


def test_async_chat_and_delta(smol):
    msgs = [{"role": "user", "content": "Say hello."}]
    p = SamplingParams(temperature=0, max_tokens=12)
    [want] = smol.chat(msgs, p)

    async def main():
        async with kiln.AsyncEngine(smol) as engine:
            full = [o async for o in engine.chat(msgs, p)]
            d = SamplingParams(temperature=0, max_tokens=12, output_kind=kiln.RequestOutputKind.DELTA)
            deltas = [o async for o in engine.chat(msgs, d)]
            return full[-1], deltas

    last, deltas = asyncio.run(main())
    assert last.outputs[0].text == want.outputs[0].text
    assert "".join(o.outputs[0].text for o in deltas) == want.outputs[0].text


def test_cancel_and_abort_leave_nothing_running(smol):
    async def main():
        engine = kiln.AsyncEngine(smol)
        try:
            long = SamplingParams(temperature=0, max_tokens=None, ignore_eos=True)

            async def consume(rid):
                last = None
                async for last in engine.generate("Once upon a time", long, request_id=rid):
                    pass
                return last

            tasks = [asyncio.create_task(consume(f"r{i}")) for i in range(6)]
            await asyncio.sleep(0.3)
            for t in tasks[:3]:
                t.cancel()
            engine.abort("r3")
            engine.abort("r4")
            # r6: leave the generator early; r5: cancelled after that
            agen = engine.generate("The sun was", long, request_id="r6")
            await agen.__anext__()
            await agen.aclose()
            tasks[5].cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            assert all(isinstance(r, asyncio.CancelledError) for i, r in enumerate(results) if i in (0, 1, 2, 5))
            for r in results[3:5]:  # aborted: the generator ended with an "abort" output, long before the context
                assert r.finished and r.outputs[0].finish_reason == "abort", r
                assert len(r.outputs[0].token_ids) < 1000
            # the same request id may be used again once it ended
            outs = [o async for o in engine.generate("The sun was", SamplingParams(max_tokens=3), request_id="r3")]
            assert outs[-1].finished
        finally:
            engine.shutdown()

    asyncio.run(main())
    assert_idle(smol)


def test_abort_while_queueing_and_shutdown(smol):
    async def main():
        engine = kiln.AsyncEngine(smol)
        long = SamplingParams(temperature=0, max_tokens=None, ignore_eos=True)
        agen = engine.generate("Once upon a time", long, request_id="early")
        first = asyncio.ensure_future(agen.__anext__())
        await asyncio.sleep(0)  # the generator runs up to its submission, then the abort comes
        engine.abort("early")
        outs = [await first] + [o async for o in agen]
        assert outs[-1].finished and outs[-1].outputs[0].finish_reason == "abort"
        assert len(outs[-1].outputs[0].token_ids) < 1000
        # shutdown ends running generators with an error and leaves nothing running
        task = asyncio.ensure_future(consume_all(engine.generate("The sun was", long)))
        await asyncio.sleep(0.3)
        engine.shutdown()
        try:
            await task
            raise AssertionError("the generator did not end with an error")
        except kiln.EngineError as e:
            assert "shut down" in str(e)

    async def consume_all(agen):
        async for _ in agen:
            pass

    asyncio.run(main())
    assert_idle(smol)


def test_aborted_generator_reports_abort(smol):
    async def main():
        async with kiln.AsyncEngine(smol) as engine:
            long = SamplingParams(temperature=0, max_tokens=None, ignore_eos=True)
            last = None
            async for out in engine.generate("Once upon a time", long, request_id="x"):
                last = out
                if len(out.outputs[0].token_ids) >= 5:
                    engine.abort("x")
            return last

    last = asyncio.run(main())
    assert last.finished and last.outputs[0].finish_reason == "abort"
