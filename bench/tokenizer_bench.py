#!/usr/bin/env python3
"""Tokenizer speed: kiln vs HF tokenizers, encoding all of eval/wiki.test.raw (1.29 MB, as one
string, CRLF kept; and again line by line, HF through encode_batch) with the Llama-3 tokenizer.json,
both on one core, best of N runs. Prints JSON.

kiln's time is the encode time `kiln tokenize --stats` reports (loading tokenizer.json and
printing are excluded); HF's is Tokenizer.encode(text, add_special_tokens=False) with
RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false. Both processes are pinned to the same CPU.
The ids are compared as well. Use an optimized kiln build (cpu-release) for meaningful numbers.

Usage: bench/tokenizer_bench.py [--kiln BIN] [--testdata DIR] [--runs 3] [--cpu 0]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"  # before tokenizers is imported
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from bench_common import ROOT, default_kiln  # noqa: E402 (bench/ is on sys.path)


def bench_kiln(kiln, model, path, runs, cpu, per_line=False):
    best, ids, load_s = None, None, None
    extra = ["--each-line"] if per_line else []
    for _ in range(runs):
        with open(path, "rb") as f:
            res = subprocess.run(["taskset", "-c", str(cpu), kiln, "tokenize", "-m", model, "--no-special", "--stats"]
                                 + extra + ["-"], stdin=f, capture_output=True, check=True)
        m = re.search(r"load ([0-9.]+) s, encode ([0-9.]+) s", res.stderr.decode())
        if not m:
            raise RuntimeError("no --stats line from kiln: " + res.stderr.decode())
        load_s, enc = float(m.group(1)), float(m.group(2))
        best = enc if best is None else min(best, enc)
        ids = [int(x) for x in res.stdout.split()]
    return best, load_s, ids


def bench_hf(model_json, text, runs, cpu, per_line=False):
    """Whole text as one string, or (per_line) each line through encode_batch on one thread."""
    os.sched_setaffinity(0, {cpu})
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(model_json)
    lines = text.split("\n")
    best, ids = None, None
    for _ in range(runs):
        t0 = time.perf_counter()
        if per_line:
            enc = tok.encode_batch(lines, add_special_tokens=False)
        else:
            enc = [tok.encode(text, add_special_tokens=False)]
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
        ids = [i for e in enc for i in e.ids]
    return best, ids, tokenizers.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=default_kiln())
    ap.add_argument("--testdata", default=os.environ.get("KILN_TESTDATA", os.path.join(ROOT, "..", "shared", "testdata")))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=0)
    args = ap.parse_args()
    path = os.path.join(args.testdata, "eval", "wiki.test.raw")
    model_dir = os.path.join(args.testdata, "tokenizers", "llama3")
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    n_bytes = len(text.encode("utf-8"))
    kiln_s, kiln_load_s, kiln_ids = bench_kiln(args.kiln, model_dir, path, args.runs, args.cpu)
    hf_s, hf_ids, hf_version = bench_hf(os.path.join(model_dir, "tokenizer.json"), text, args.runs, args.cpu)
    kiln_line_s, _, kiln_line_ids = bench_kiln(args.kiln, model_dir, path, args.runs, args.cpu, per_line=True)
    hf_line_s, hf_line_ids, _ = bench_hf(os.path.join(model_dir, "tokenizer.json"), text, args.runs, args.cpu, True)
    out = {
        "benchmark": "tokenizer_encode_wikitext2_test_llama3",
        "text_bytes": n_bytes,
        "tokens": len(hf_ids),
        "runs": args.runs,
        "cpu": args.cpu,
        "kiln": {"bin": args.kiln, "encode_s_best": round(kiln_s, 6), "load_s": round(kiln_load_s, 6),
                 "mb_per_s": round(n_bytes / kiln_s / 1e6, 2), "tokens_per_s": round(len(kiln_ids) / kiln_s)},
        "hf_tokenizers": {"version": hf_version, "encode_s_best": round(hf_s, 6),
                          "mb_per_s": round(n_bytes / hf_s / 1e6, 2), "tokens_per_s": round(len(hf_ids) / hf_s)},
        "kiln_speedup_vs_hf": round(hf_s / kiln_s, 2),
        "per_line": {"kiln_encode_s_best": round(kiln_line_s, 6), "hf_encode_batch_s_best": round(hf_line_s, 6),
                     "kiln_speedup_vs_hf": round(hf_line_s / kiln_line_s, 2)},
        "ids_identical": kiln_ids == hf_ids and kiln_line_ids == hf_line_ids,
    }
    if "cpu-debug" in args.kiln:
        out["warning"] = "kiln is a debug build: figures are not representative"
    print(json.dumps(out, indent=2))
    return 0 if out["ids_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
