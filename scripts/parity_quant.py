#!/usr/bin/env python3
"""Issue 34's parity table: kiln's quantizers against llmcompressor's recipes on the same model and text.

Same base model (SmolLM2-135M-Instruct, dequantized from kiln's Q4_1 GGUF to BF16), same calibration
token windows, same evaluation (`kiln perplexity -c 512` on wiki.test.raw from byte 400000, 4335 scored
tokens). For every row it runs kiln's `quantize` and then llmcompressor's equivalent recipe right after
it (so that both see about the same machine load), times each end to end (wall clock, process start to
checkpoint written), evaluates every checkpoint with the same kiln perplexity command, and prints a
markdown table.

Run by hand with llmcompressor's environment (it pins torch and transformers; keep it out of the
project's one):

    python3 -m venv --system-site-packages /tmp/lcvenv
    /tmp/lcvenv/bin/pip install llmcompressor==0.14.0.1
    cp build/cpu-release/bin/kiln /tmp/parity/kiln      # a copy, so that a rebuild does not disturb it
    /tmp/lcvenv/bin/python scripts/parity_quant.py [--work /tmp/parity] [--kiln /tmp/parity/kiln]
        [--gguf ~/.cache/kiln/SmolLM2-135M-Instruct.Q4_1.gguf] [--wiki shared/testdata/eval/wiki.test.raw]
        [--calib-tokens 4096] [--threads 2] [--only GROUP,...] [--table-only]

Everything goes under WORK: base/ (the BF16 model with its tokenizer), calib.txt, eval.txt, calib_ids.json,
ck/<name>/ (one checkpoint per tool and recipe), logs/<name>.log, results/<name>.json (per checkpoint:
command, seconds, perplexity; checkpoints with one are not redone, so the script resumes, and several runs
with different --only lists may share WORK), results.json (all of them), and
results.md (the table). --only runs (and tabulates) these row groups in this order (default: all, ORDER):
gptq-g32 awq-sym-g32 awq-asym-g32 gptq-g64 awq-sym-g64 awq-asym-g64 fp8 int8-sq int8 rtn-g32 rtn-g64
awq-gptq-g32 awq-gptq-g64 gptq-asym-g32 gptq-asym-g64; --table-only prints the table from results.json.

Calibration, like for like. `kiln quantize --calib FILE --calib-tokens N` tokenizes FILE (SmolLM2 adds no
BOS), keeps the first N tokens and runs them as consecutive 512-token chunks, each a fresh context
(src/quant_tools/calibration.cc). llmcompressor gets exactly those windows as its samples: the same
token ids (kiln's tokenizer, `kiln tokenize`), N / 512 samples of 512 tokens, max_seq_length 512.
N = 4096 (8 samples) by default because kiln's GPTQ builds its Hessians from at most 4096 token rows
(QuantizeOptions::gptq_samples, taken at an even stride over all tokens): at N = 4096 both tools'
Hessians see the same rows. (kiln's AWQ scale search samples 512 of the rows, plus 4 whole
512-token sequences for its attention-block loss; llmcompressor's AWQ uses every row.)

llmcompressor runs in float32 (the BF16 weights widened exactly), as kiln computes in f32, so its
scales are saved as float32.

CPU workarounds for llmcompressor (no GPU): its pipelines and AWQ pin their caches with
`Tensor.pin_memory`, which needs CUDA; it is replaced with the identity (the only patch needed).

Settings where the tools differ (left at each tool's defaults unless named in the row):
  - INT4 symmetric grids: kiln scale = amax / 7, codes -7..7; llmcompressor scale = amax / 7.5,
    codes -8..7 (compressed-tensors calculate_qparams).
  - GPTQ: llmcompressor's default actorder is "static", an alias of "weight" (activation ordering ON);
    rows name it explicitly: actorder=None (off) and "weight" (on), against kiln's --act-order off and on
    (the same static groups: scales from the original weights, then the sweep in decreasing diag H).
    Both damp 0.01 * mean(diag H). llmcompressor computes the group scales once from the original
    weights (min-max observer) before the GPTQ sweep; kiln, as gptq.py does, from the current
    (already error-updated) weights at each group's first column. kiln quantizes layer by layer with
    the earlier layers already quantized (like llmcompressor's sequential pipeline) but re-runs the
    model from the embeddings for each layer.
  - AWQ: llmcompressor duo_scaling=True (scales from activations and weights), n_grid 20, loss on
    the parent module's output (self_attn for q/k/v, mlp for gate/up, down_proj itself), no weight
    clipping search. kiln: activation-only scales, q/k/v by the attention block's output, the other
    groups by their own outputs, then AutoAWQ's clipping search. Both skip v->o under GQA.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EVAL_START = 400000  # bytes
CALIB_BYTES = 200000
CTX = 512
SCORED = 4335  # 17 windows of 512 tokens, the second half (255 tokens) of each scored

# Row groups: (row label, [(checkpoint name, tool, spec)]). kiln specs are `kiln quantize` arguments;
# llmcompressor specs are dicts read by lc_quantize. Rows run in this order, kiln then llmcompressor.


def int4(group, symmetric, actorder=None):
    w = dict(num_bits=4, type="int", symmetric=symmetric, strategy="group", group_size=group)
    return {"group_0": {"targets": ["Linear"], "weights": w}}


def rows():
    """Row groups by name, each a list of (row label, [(checkpoint name, tool, spec)])."""
    out = {}
    for g in (32, 64):
        for sym, zp in (("sym", "--no-zero-point"), ("asym", "--zero-point")):
            kind = "gptq-g" if sym == "sym" else "gptq-asym-g"
            out[f"{kind}{g}"] = [
                (f"GPTQ W4 {sym} g{g}, act-order off", [
                    (f"kiln-gptq-{sym}-g{g}", "kiln", ["--format", f"gptq-w4-g{g}", zp, "CALIB"]),
                    (f"lc-gptq-{sym}-g{g}", "lc", dict(kind="gptq", groups=int4(g, sym == "sym"), actorder=None)),
                ]),
                (f"GPTQ W4 {sym} g{g}, act-order on", [
                    (f"kiln-gptq-{sym}-actorder-g{g}", "kiln",
                     ["--format", f"gptq-w4-g{g}", zp, "--act-order", "CALIB"]),
                    (f"lc-gptq-{sym}-actorder-g{g}", "lc",
                     dict(kind="gptq", groups=int4(g, sym == "sym"), actorder="weight")),
                ]),
            ]
        out[f"awq-sym-g{g}"] = [(f"AWQ W4 sym g{g}", [
            (f"kiln-awq-sym-g{g}", "kiln", ["--format", f"awq-w4-g{g}", "--no-zero-point", "CALIB"]),
            (f"lc-awq-sym-g{g}", "lc", dict(kind="awq", groups=int4(g, True))),
        ])]
        out[f"awq-asym-g{g}"] = [(f"AWQ W4 asym g{g}", [
            (f"kiln-awq-asym-g{g}", "kiln", ["--format", f"awq-w4-g{g}", "--zero-point", "CALIB"]),
            (f"lc-awq-asym-g{g}", "lc", dict(kind="awq", groups=int4(g, False))),
        ])]
        out[f"awq-gptq-g{g}"] = [(f"kiln AWQ+GPTQ W4 asym g{g} vs lc AWQ asym", [
            (f"kiln-awq-gptq-asym-g{g}", "kiln", ["--format", f"awq-gptq-w4-g{g}", "--zero-point", "CALIB"]),
            (f"lc-awq-asym-g{g}", "lc", dict(kind="awq", groups=int4(g, False))),
        ])]
        out[f"rtn-g{g}"] = [(f"RTN W4 sym g{g}", [
            (f"kiln-rtn-sym-g{g}", "kiln", ["--format", f"w4-g{g}", "--no-zero-point"]),
            (f"lc-rtn-sym-g{g}", "lc", dict(kind="rtn", groups=int4(g, True))),
        ])]
    out["fp8"] = [("FP8 dynamic", [
        ("kiln-fp8", "kiln", ["--format", "fp8"]),
        ("lc-fp8-dynamic", "lc", dict(kind="rtn", scheme="FP8_DYNAMIC")),
    ])]
    out["int8-sq"] = [("W8A8 SmoothQuant 0.5", [
        ("kiln-int8-sq0.5", "kiln", ["--format", "int8", "--smoothquant", "0.5", "CALIB"]),
        ("lc-w8a8-sq0.5", "lc", dict(kind="smoothquant", scheme="W8A8", strength=0.5)),
    ])]
    out["int8"] = [("W8A8 (no smoothing)", [
        ("kiln-int8", "kiln", ["--format", "int8"]),
        ("lc-w8a8", "lc", dict(kind="rtn", scheme="W8A8")),
    ])]
    return out


# The default order (--only picks groups and their order): the priorities.
ORDER = ["gptq-g32", "awq-sym-g32", "awq-asym-g32", "gptq-g64", "awq-sym-g64", "awq-asym-g64", "fp8", "int8-sq",
         "int8", "rtn-g32", "rtn-g64", "awq-gptq-g32", "awq-gptq-g64", "gptq-asym-g32", "gptq-asym-g64"]


# ---------------------------------------------------------------------------------------------
# llmcompressor side (runs in a child process: `parity_quant.py --lc-job SPEC_JSON OUT`)


def lc_quantize(spec, base, calib_ids_path, out):
    import torch
    torch.Tensor.pin_memory = lambda self, *a, **k: self  # CPU: the pipelines pin their caches (needs CUDA)
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.gptq import GPTQModifier
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform import AWQModifier, SmoothQuantModifier
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(base)
    q = {"ignore": ["lm_head"]}
    if "groups" in spec:
        q["config_groups"] = spec["groups"]
    else:
        q.update(targets=["Linear"], scheme=spec["scheme"])
    kind = spec["kind"]
    if kind == "gptq":
        recipe = [GPTQModifier(actorder=spec["actorder"], **q)]
    elif kind == "awq":
        recipe = [AWQModifier(), QuantizationModifier(**q)]
    elif kind == "smoothquant":
        recipe = [SmoothQuantModifier(smoothing_strength=spec["strength"]), QuantizationModifier(**q)]
    else:
        recipe = [QuantizationModifier(**q)]
    extra = {}
    if kind != "rtn":
        ids = json.load(open(calib_ids_path))
        ds = Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(s) for s in ids]})
        extra = dict(dataset=ds, num_calibration_samples=len(ids), max_seq_length=CTX, shuffle_calibration_samples=False)
    t0 = time.time()
    oneshot(model=model, recipe=recipe, tokenizer=tok, **extra)
    model.save_pretrained(out, save_compressed=True)
    print(f"oneshot+save seconds: {time.time() - t0:.1f}")


# ---------------------------------------------------------------------------------------------
# driver


def run(cmd, log, **kw):
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        t0 = time.time()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, **kw)
        return r.returncode, time.time() - t0


def kiln_tokens(kiln, model, data):
    out = subprocess.run([kiln, "tokenize", "-m", model, "-"], input=data, capture_output=True, check=True).stdout
    return [int(t) for t in out.split()]


def prepare(a):
    base = os.path.join(a.work, "base")
    if not os.path.exists(os.path.join(base, "model.safetensors")):
        subprocess.run([a.kiln, "convert", a.gguf, base, "--to", "safetensors", "--dtype", "bf16", "--dequantize",
                        "--quiet"], check=True)
    if not os.path.exists(os.path.join(base, "tokenizer.json")):
        # kiln convert writes no tokenizer; transformers builds one from the GGUF's (kiln reads it back
        # with the same ids as the GGUF's own: checked below on the calibration text).
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(os.path.dirname(a.gguf), gguf_file=os.path.basename(a.gguf))
        tok.save_pretrained(base)
    raw = open(a.wiki, "rb").read()
    calib = os.path.join(a.work, "calib.txt")
    ev = os.path.join(a.work, "eval.txt")
    ids_path = os.path.join(a.work, "calib_ids.json")
    if all(os.path.exists(f) for f in (calib, ev, ids_path)):  # made by an earlier run
        windows = json.load(open(ids_path))
        if sum(map(len, windows)) == a.calib_tokens:
            return base, calib, len(windows)
    open(calib, "wb").write(raw[:CALIB_BYTES])
    ids = kiln_tokens(a.kiln, base, raw[:CALIB_BYTES])
    if ids != kiln_tokens(a.kiln, a.gguf, raw[:CALIB_BYTES]):
        sys.exit("the base folder's tokenizer.json does not encode like the GGUF")
    ids = ids[:a.calib_tokens]
    windows = [ids[i:i + CTX] for i in range(0, len(ids), CTX)]  # kiln's calibration chunks
    json.dump(windows, open(ids_path, "w"))
    # eval.txt: from byte EVAL_START, the shortest cut in 1000-byte steps whose token count gives
    # 17 windows of 512 (kiln perplexity uses floor(tokens / 512) windows).
    need = SCORED // (CTX // 2 - 1)
    n = 30000
    while len(kiln_tokens(a.kiln, base, raw[EVAL_START:EVAL_START + n])) < need * CTX:
        n += 1000
    text = raw[EVAL_START:EVAL_START + n]
    while True:  # whole UTF-8 characters
        try:
            text.decode("utf-8")
            break
        except UnicodeDecodeError:
            text = text[:-1]
    assert len(kiln_tokens(a.kiln, base, text)) // CTX == need
    open(ev, "wb").write(text)
    return base, calib, len(windows)


def perplexity(a, model, log):
    cmd = [a.kiln, "perplexity", "-m", model, "-f", os.path.join(a.work, "eval.txt"), "-c", str(CTX), "-t",
           str(a.threads)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    open(log, "a").write("$ " + " ".join(cmd) + "\n" + r.stdout + r.stderr[-2000:])
    if r.returncode != 0:
        return None, None
    ppl = float(re.search(r"ppl = ([0-9.]+)", r.stdout).group(1))
    scored = int(re.search(r"tokens scored = (\d+)", r.stdout).group(1))
    return ppl, scored


def ensure_tokenizer(base, out):
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if not os.path.exists(os.path.join(out, f)):
            shutil.copy(os.path.join(base, f), out)


def load_results(work):
    """results.json, updated by results/<name>.json (one file per checkpoint, so that several drivers
    with different --only lists can share WORK)."""
    rpath = os.path.join(work, "results.json")
    results = json.load(open(rpath)) if os.path.exists(rpath) else {}
    d = os.path.join(work, "results")
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        results[f[:-len(".json")]] = json.load(open(os.path.join(d, f)))
    return results


def save_result(work, name, entry):
    os.makedirs(os.path.join(work, "results"), exist_ok=True)
    json.dump(entry, open(os.path.join(work, "results", name + ".json"), "w"), indent=1)
    json.dump(load_results(work), open(os.path.join(work, "results.json"), "w"), indent=1)


def do_one(a, base, calib, name, tool, spec):
    if load_results(a.work).get(name, {}).get("ppl"):
        return
    claim = os.path.join(a.work, "ck", name + ".claim")  # another driver is on it
    try:
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    out = os.path.join(a.work, "ck", name)
    log = os.path.join(a.work, "logs", name + ".log")
    shutil.rmtree(out, ignore_errors=True)
    if tool == "kiln":
        args = []
        for s in spec:
            args += ["--calib", calib, "--calib-tokens", str(a.calib_tokens)] if s == "CALIB" else [s]
        cmd = [a.kiln, "quantize", base, out] + args + ["-t", str(a.threads), "--quiet"]
        rc, secs = run(cmd, log)
    else:
        cmd = [sys.executable, os.path.abspath(__file__), "--lc-job", json.dumps(spec), out, "--work", a.work]
        rc, secs = run(cmd, log, env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)))
    entry = {"tool": tool, "command": " ".join(cmd), "seconds": round(secs, 1), "rc": rc}
    if rc == 0:
        ensure_tokenizer(base, out)
        entry["ppl"], entry["scored"] = perplexity(a, out, log)
    save_result(a.work, name, entry)
    os.remove(claim)
    print(f"{name}: rc {rc}, {secs:.0f} s, ppl {entry.get('ppl')}", flush=True)


def table(a, results, n_samples):
    all_rows = rows()
    lines = ["| row | kiln | ppl | time (s) | llmcompressor | ppl | time (s) | kiln vs lc |",
             "|---|---|---|---|---|---|---|---|"]
    b = results.get("base", {})
    lines.append(f"| BF16 base | | {b.get('ppl', '')} | | | | | |")
    fmt = lambda e, k: (f"{e[k]:.4f}" if k == "ppl" else f"{e[k]:.0f}") if e and e.get(k) is not None else "n/a"
    for group in a.only or ORDER:
        for label, items in all_rows[group]:
            kilns = [(n, s) for n, t, s in items if t == "kiln"]
            lcs = [(n, s) for n, t, s in items if t == "lc"]
            kn, _ = kilns[0]
            ke = results.get(kn)
            for ln, _ in lcs:
                le = results.get(ln)
                rel = "n/a"
                if ke and le and ke.get("ppl") and le.get("ppl"):
                    rel = f"{100 * (ke['ppl'] / le['ppl'] - 1):+.2f}%"
                lines.append(f"| {label} | {kn} | {fmt(ke, 'ppl')} | {fmt(ke, 'seconds')} | {ln} | {fmt(le, 'ppl')} "
                             f"| {fmt(le, 'seconds')} | {rel} |")
    lines.append("")
    lines.append(f"Calibration: {n_samples} windows of {CTX} tokens (--calib-tokens {a.calib_tokens}); evaluation: "
                 f"`kiln perplexity -c {CTX} -t {a.threads}` on eval.txt ({SCORED} scored tokens). kiln vs lc: "
                 "relative perplexity difference (negative: kiln better).")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", default="/tmp/parity")
    p.add_argument("--kiln", default="/tmp/parity/kiln")
    p.add_argument("--gguf", default=os.path.expanduser("~/.cache/kiln/SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--wiki", default=os.path.join(ROOT, "../shared/testdata/eval/wiki.test.raw"))
    p.add_argument("--calib-tokens", type=int, default=4096)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", type=lambda s: s.split(","), default=None)
    p.add_argument("--table-only", action="store_true")
    p.add_argument("--lc-job", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.lc_job:
        return lc_quantize(json.loads(a.lc_job[0]), os.path.join(a.work, "base"),
                           os.path.join(a.work, "calib_ids.json"), a.lc_job[1])
    os.makedirs(os.path.join(a.work, "ck"), exist_ok=True)
    os.makedirs(os.path.join(a.work, "logs"), exist_ok=True)
    results = load_results(a.work)
    if a.table_only:
        n = len(json.load(open(os.path.join(a.work, "calib_ids.json"))))
        print(table(a, results, n))
        return
    base, calib, n_samples = prepare(a)
    if "base" not in results:
        ppl, scored = perplexity(a, base, os.path.join(a.work, "logs", "base.log"))
        assert scored == SCORED, scored
        save_result(a.work, "base", {"tool": "base", "ppl": ppl, "scored": scored})
    all_rows = rows()
    for group in a.only or ORDER:
        for _, items in all_rows[group]:
            for name, tool, spec in items:
                do_one(a, base, calib, name, tool, spec)
    md = table(a, load_results(a.work), n_samples)
    open(os.path.join(a.work, "results.md"), "w").write(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
