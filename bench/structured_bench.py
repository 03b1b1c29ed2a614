"""Structured output (JSON schema) cost in kiln, next to xgrammar's compile and mask times.

Measures, for one "typical" schema (20 properties, objects nested 3 deep, strings with maxLength,
integers with ranges, enums, booleans, arrays with maxItems; every property required):
  1. kiln's per-output-token overhead of the grammar at batch 1 and 16: time per generated token of
     a constrained run vs a plain run of the same prompts and seeds, the plain one with ignore_eos and
     each request's max_tokens = the tokens its constrained twin generated (same count, same batch
     shape; prefill in both). The pairs alternate their order (grammar then plain, plain then grammar:
     on the Intel VM the first run of a fixed-order pair came out ~3% slower with the grammar's own time
     at 0.2%); a plain run that goes first takes the lengths of the pair before's constrained run
     (other seeds: the same shape, near the same count; times are per generated token). Same seeds within
     a pair; three regimes: "cold", a new schema each pair (compiled by an untimed 1-token request: the per-state
     mask cache starts empty, as for a schema's first requests); "seen", a schema used before by an
     untimed run with other seeds, each pair with new seeds (new texts meet states not seen yet, as a
     server's later requests do); "warm", the masks of every state the pairs meet cached beforehand
     (the same seeds run untimed first). Besides wall time, the engine's grammar_seconds (mask fill
     and apply, matcher steps) per token: the grammar's own cost, free of the wall's run-to-run noise.
  2. kiln's first-request cost of a schema never seen (unique "description" text, ignored by the
     converter; kiln caches by schema text), a max_tokens=1 request (compile) and a whole output
     (compile + masks made on first use), each minus the same request again with the schema cached.
  3. xgrammar (needs torch, transformers, gguf): GrammarCompiler(max_threads=2, fresh per trial)
     .compile_json_schema(schema, any_whitespace=False), and GrammarMatcher.fill_next_token_bitmask
     time per token over a valid instance of the schema tokenized by the HF tokenizer (which
     transformers builds from the GGUF; checked to match kiln's ids), accept_token after each fill.
     kiln's own mask time per token is not reachable from Python.

usage: PYTHONPATH=build/cpu-release/python python3 bench/structured_bench.py [--reps 3] [--threads 2]
(not a test: figures depend on the machine and on other load; -h lists the options)
"""
import argparse
import copy
import importlib.metadata
import json
import os
import statistics
import time

from kiln import LLM, SamplingParams, StructuredOutputsParams

MODEL = os.path.expanduser("~/.cache/kiln/SmolLM2-135M-Instruct.Q4_1.gguf")
S = {"type": "string"}


def obj(props):
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


# 20 properties: 7 at the top, 4 + 3 under "owner" / "owner.contact", 4 + 2 under "metrics" / "metrics.limits".
SCHEMA = obj({
    "id": {"type": "integer", "minimum": 1, "maximum": 999999},
    "name": dict(S, maxLength=40),
    "status": {"enum": ["active", "suspended", "deleted"]}, "verified": {"type": "boolean"},
    "tags": {"type": "array", "items": dict(S, maxLength=16), "maxItems": 4},
    "owner": obj({
        "username": dict(S, maxLength=24),
        "age": {"type": "integer", "minimum": 0, "maximum": 120}, "role": {"enum": ["admin", "editor", "viewer"]},
        "contact": obj({"email": dict(S, maxLength=40), "phone": dict(S, maxLength=20),
                        "opt_in": {"type": "boolean"}}),
    }),
    "metrics": obj({
        "score": {"type": "integer", "minimum": 0, "maximum": 100}, "level": {"enum": ["bronze", "silver", "gold"]},
        "history": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 1000}, "maxItems": 5},
        "limits": obj({"quota": {"type": "integer", "minimum": 1, "maximum": 10000},
                       "unit": {"enum": ["MB", "GB", "TB"]}}),
    }),
})
INSTANCE = {"id": 4821, "name": "Maria Gonzalez", "status": "active", "verified": True,
            "tags": ["premium", "beta-tester"],
            "owner": {"username": "mgonzalez", "age": 34, "role": "editor",
                      "contact": {"email": "maria.gonzalez@example.com", "phone": "+1-555-0142", "opt_in": False}},
            "metrics": {"score": 87, "level": "gold", "history": [12, 40, 87],
                        "limits": {"quota": 500, "unit": "GB"}}}
NAMES = ["Maria Gonzalez", "Wei Chen", "Aisha Bello", "Lars Nilsson", "Priya Patel", "Tom Becker", "Yuki Sato",
         "Omar Haddad", "Elena Rossi", "Jamal Carter", "Sofia Novak", "Diego Ramos", "Hana Kim", "Ivan Petrov",
         "Zoe Martin", "Kofi Mensah"]


def schema_with(description):
    s = copy.deepcopy(SCHEMA)
    s["description"] = description
    return s


def cpu_model():
    with open("/proc/cpuinfo") as f:
        return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "unknown")


def loadavg():  # other work on the machine shows in the timings
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def stats(xs):
    return min(xs), statistics.median(xs)


def timed(fn, *a, **kw):
    t0 = time.perf_counter()
    r = fn(*a, **kw)
    return time.perf_counter() - t0, r


def overhead_runs(llm, prompts, reps, max_tokens, regime):
    """Per-token seconds of the grammar and plain runs, per repetition, and run facts."""
    def grammar_params(spec, seed):
        return [SamplingParams(temperature=0.7, seed=seed + i, max_tokens=max_tokens, structured_outputs=spec)
                for i in range(len(prompts))]

    def gen(params):  # wall seconds, outputs, forward seconds, process CPU seconds (all threads), grammar seconds
        s0, c0 = llm.stats(), time.process_time()
        t, outs = timed(llm.generate, prompts, params, use_tqdm=False)
        s1 = llm.stats()
        return (t, outs, s1.forward_seconds - s0.forward_seconds, time.process_time() - c0,
                s1.grammar_seconds - s0.grammar_seconds)

    # A schema text of its own per regime and batch: kiln caches compiled grammars by schema text.
    spec = StructuredOutputsParams(json=schema_with(f"{regime} {len(prompts)} {time.time_ns()}"))
    if regime == "warm":
        gen(grammar_params(spec, 1000))  # untimed: caches the masks of every state the runs meet
    elif regime == "seen":
        gen(grammar_params(spec, 50000))  # untimed: the schema used before, on other texts
    g, p, gf, pf, gc, pc, gg, toks, unfinished, invalid = [], [], [], [], [], [], [], [], 0, 0
    lens = None  # the last constrained run's output lengths
    for r in range(reps):
        if regime == "cold":  # a schema never seen, compiled by an untimed 1-token request: its mask cache is empty
            spec = StructuredOutputsParams(json=schema_with(f"cold {r} {time.time_ns()}"))
            llm.generate(prompts[:1], SamplingParams(max_tokens=1, structured_outputs=spec), use_tqdm=False)
        seed = 1000 if regime == "warm" else 2000 + 100 * r

        def plain_run(lengths):
            params = [SamplingParams(temperature=0.7, seed=seed + i, max_tokens=n, ignore_eos=True)
                      for i, n in enumerate(lengths)]
            tp, pouts, fp, cp, _ = gen(params)
            n = sum(len(o.outputs[0].token_ids) for o in pouts)
            assert n == sum(lengths), "plain run generated a different count"
            return tp / n, fp / n, cp / n

        plain_first = r % 2 == 1 and lens is not None
        if plain_first:
            tp, fp, cp = plain_run(lens)
        tg, outs, fg, cg, sg = gen(grammar_params(spec, seed))
        lens = [len(o.outputs[0].token_ids) for o in outs]
        for o in outs:
            unfinished += o.outputs[0].finish_reason != "stop"
            try:
                json.loads(o.outputs[0].text)
            except ValueError:
                invalid += 1
        if not plain_first:
            tp, fp, cp = plain_run(lens)
        n = sum(lens)
        for xs, v in ((g, tg / n), (p, tp), (gf, fg / n), (pf, fp), (gc, cg / n), (pc, cp), (gg, sg / n)):
            xs.append(v)
        toks.append(n)
    return dict(g=g, p=p, gf=gf, pf=pf, gc=gc, pc=pc, gg=gg, toks=toks, unfinished=unfinished, invalid=invalid)


def compile_runs(llm, prompt, trials, max_tokens):
    """(best, median) of new-schema minus cached-schema seconds, for 1-token requests and whole outputs."""
    llm.generate([prompt], SamplingParams(max_tokens=1), use_tqdm=False)  # prefix-cache the prompt
    new, cached, lens = {1: [], max_tokens: []}, {1: [], max_tokens: []}, []
    for k in range(trials):
        for n in new:
            spec = StructuredOutputsParams(json=schema_with(f"trial {k} {n} {time.time_ns()}"))
            sp = SamplingParams(temperature=0.7, seed=1000, max_tokens=n, structured_outputs=spec)
            t_new, outs = timed(llm.generate, [prompt], sp, use_tqdm=False)
            new[n].append(t_new), cached[n].append(timed(llm.generate, [prompt], sp, use_tqdm=False)[0])
        lens.append(len(outs[0].outputs[0].token_ids))
    diff = {n: (min(new[n]) - min(cached[n]), statistics.median(new[n]) - statistics.median(cached[n])) for n in new}
    return diff[1], diff[max_tokens], statistics.median(lens)


def xgrammar_part(model, kiln_tok, vocab_size, trials, walks):
    try:
        import xgrammar as xgr
        from transformers import AutoTokenizer
    except ImportError as e:
        return None, f"xgrammar part skipped: {e}"
    t_tok, tok = timed(AutoTokenizer.from_pretrained, os.path.dirname(os.path.realpath(model)),
                       gguf_file=os.path.basename(os.path.realpath(model)))
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab_size)
    text = json.dumps(INSTANCE)  # (", ", ": "): xgrammar's separators with any_whitespace=False
    ids = tok.encode(text, add_special_tokens=False)
    same = ids == kiln_tok.encode(text, add_special_tokens=False)
    comp = []
    for k in range(trials):  # a fresh compiler (empty cache) and a new schema text each trial
        t, compiled = timed(xgr.GrammarCompiler(info, max_threads=2).compile_json_schema,
                            json.dumps(schema_with(f"trial {k} {time.time_ns()}")), any_whitespace=False)
        comp.append(t)
    mask, per_tok = xgr.allocate_token_bitmask(1, info.vocab_size), []
    for _ in range(walks):
        m, spent = xgr.GrammarMatcher(compiled), 0.0
        for t in ids + [tok.eos_token_id]:
            t0 = time.perf_counter()
            m.fill_next_token_bitmask(mask)
            spent += time.perf_counter() - t0
            if not m.accept_token(t):
                raise RuntimeError(f"xgrammar rejected token {t} ({tok.decode([t])!r})")
        assert m.is_terminated()
        per_tok.append(spent / (len(ids) + 1))
    return dict(comp=comp, mask=per_tok, n=len(ids) + 1, same=same, t_tok=t_tok), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--compile-trials", type=int, default=7)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--batches", default="1,16", help="batch sizes of part 1 (comma-separated)")
    ap.add_argument("--regimes", default="cold,seen,warm", help="mask regimes of part 1 (comma-separated)")
    ap.add_argument("--parts", default="1,2,3", help="which parts to run (comma-separated)")
    ap.add_argument("--kv-gb", type=float, default=1.0, help="KV cache budget in GiB (default 1)")
    ap.add_argument("--lazy-kv", action="store_true",
                    help="commit the KV cache on first use, not at start (kv_prefault=False): on a VM whose memory "
                         "the host backs lazily, runs that first use new KV memory then pay for it")
    args, t_start = ap.parse_args(), time.perf_counter()
    print(f"CPU: {cpu_model()} ({os.cpu_count()} logical CPUs); kiln threads={args.threads}; load average {loadavg()}")
    t_load, llm = timed(LLM, args.model, threads=args.threads, max_seqs=16, kv_cache_bytes=int(args.kv_gb * (1 << 30)),
                        kv_prefault=not args.lazy_kv)
    print(f"model: {os.path.basename(args.model)} (kiln load {t_load:.2f} s, KV {args.kv_gb:g} GiB "
          f"{'lazy' if args.lazy_kv else 'prefaulted'}); schema: 20 properties, depth 3, "
          f"{len(json.dumps(SCHEMA))} chars")
    tk = llm.get_tokenizer()
    prompts = [tk.apply_chat_template([{"role": "user", "content":
               f"Write a JSON user record for {n}: id, name, status, verified, tags, owner (username, age, role, "
               f"contact with email, phone, opt_in) and metrics (score, level, history, limits with quota and unit)."}],
               tokenize=False, add_generation_prompt=True) for n in NAMES]

    print(f"\n1. kiln per-output-token overhead: wall ms/token, best / median of {args.reps} pairs, "
          "their order alternating (same seeds within a pair).\n   masks cold: a new schema each pair (compiled before, untimed); seen: the "
          "schema used before on other texts, new seeds each pair;\n   warm: the masks of every state met cached "
          "by an untimed run with the same seeds. cpu ovh: the same from process CPU time\n   (all threads; less "
          "hurt by other load), median. grammar: the engine's grammar_seconds per token, median, and as a share of\n"
          "   the plain run's median time per token (the grammar's own added time, without the wall's noise). fwd +: "
          "the constrained run's\n   forward_seconds per token over the plain run's, medians. rest = wall minus the "
          "engine's forward_seconds, per token, median\n   (scheduling, masks, sampling, Python). Per-pair: each "
          "pair's wall overhead.")
    print(f"{'batch':>5} {'masks':>5} {'tok/run':>7} {'plain ms/tok':>13} {'grammar ms/tok':>14} {'ovh best':>8}"
          f" {'ovh med':>8} {'cpu ovh':>8} {'grammar ms/tok':>15} {'fwd +':>7} {'rest plain/gram':>15}  per-pair overhead")
    parts = set(args.parts.split(","))
    if "1" in parts:  # every prompt prefilled once, untimed: no pair pays prefill its twin gets from the cache
        llm.generate(prompts, SamplingParams(max_tokens=1), use_tqdm=False)
    for b in [int(x) for x in args.batches.split(",")] if "1" in parts else []:
        for regime in args.regimes.split(","):
            t0 = time.perf_counter()
            r = overhead_runs(llm, prompts[:b], args.reps, args.max_tokens, regime)
            (pb, pm), (gb, gm) = stats(r["p"]), stats(r["g"])
            med = lambda xs: statistics.median(xs) * 1e3
            rest_p = med([a - f for a, f in zip(r["p"], r["pf"])])
            rest_g = med([a - f for a, f in zip(r["g"], r["gf"])])
            print(f"{b:>5} {regime:>5} {statistics.median(r['toks']):>7.0f} "
                  f"{pb*1e3:>5.2f} / {pm*1e3:<5.2f} {gb*1e3:>6.2f} / {gm*1e3:<5.2f} {100*(gb-pb)/pb:>7.1f}% "
                  f"{100*(gm-pm)/pm:>7.1f}% {100*(med(r['gc'])-med(r['pc']))/med(r['pc']):>7.1f}% "
                  f"{med(r['gg']):>7.3f} ({100*med(r['gg'])/med(r['p']):>4.1f}%) "
                  f"{100*(med(r['gf'])-med(r['pf']))/med(r['pf']):>6.1f}% "
                  f"{rest_p:>6.2f} / {rest_g:<6.2f} "
                  + " ".join(f"{100*(g-p)/p:.0f}%" for g, p in zip(r["g"], r["p"]))
                  + f" ({time.perf_counter()-t0:.0f} s"
                  + (f", {r['unfinished']} not ended by EOS" if r["unfinished"] else "")
                  + (f", {r['invalid']} not JSON" if r["invalid"] else "") + ")")

    if "2" not in parts and "3" not in parts:
        print(f"\ntotal {time.perf_counter()-t_start:.0f} s; load average {loadavg()}")
        return
    t0 = time.perf_counter()
    one, whole, n = compile_runs(llm, prompts[0], args.compile_trials, args.max_tokens)
    print(f"\n2. kiln first-request cost of a new schema, batch 1, {args.compile_trials} trials: time with a new "
          "schema minus time of the same request with it cached\n   (best = min - min, median = median - median). "
          f"max_tokens=1 (compile): best {one[0]*1e3:.1f} ms, median {one[1]*1e3:.1f} ms;\n   whole output ({n:.0f} "
          f"tokens: compile + masks computed on first use): best {whole[0]*1e3:.1f} ms, median {whole[1]*1e3:.1f} ms"
          f" ({time.perf_counter()-t0:.0f} s)")

    t0 = time.perf_counter()
    x, why = xgrammar_part(args.model, tk, tk.vocab_size, args.compile_trials, max(args.reps, 5))
    if x is None:
        print(f"\n3. {why}")
    else:
        (xb, xm), (mb, mm) = stats(x["comp"]), stats(x["mask"])
        print(f"\n3. xgrammar {importlib.metadata.version('xgrammar')} (HF tokenizer from the GGUF via transformers, "
              f"{x['t_tok']:.1f} s; same ids as kiln on the instance: {'yes' if x['same'] else 'NO'})")
        print(f"   compile_json_schema(any_whitespace=False), fresh compiler, max_threads=2: "
              f"best {xb*1e3:.1f} ms, median {xm*1e3:.1f} ms ({len(x['comp'])} trials)")
        print(f"   fill_next_token_bitmask over a {x['n']}-token walk (instance + EOS): "
              f"best {mb*1e6:.1f} us/token, median {mm*1e6:.1f} us/token ({len(x['mask'])} walks; "
              f"{time.perf_counter()-t0:.0f} s)")
    print("\n4. kiln's mask time per token is not reachable from Python: see the end-to-end overhead in 1."
          f"\ntotal {time.perf_counter()-t_start:.0f} s; load average {loadavg()}")


if __name__ == "__main__":
    main()
