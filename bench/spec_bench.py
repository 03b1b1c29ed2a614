"""Speculative decoding side by side with llama.cpp's examples: n-gram prompt lookup against
`llama-lookup`, or (--draft-model D) a draft model against `llama-speculative-simple --spec-type
draft-simple`.

For each prompt of bench/data/spec_prompts.jsonl (passages to copy, quote or lightly edit), at batch 1:
  kiln:      `kiln bench offline --prompts P --chat --stop-at-eos --spec ngram --reps R`, which runs the
             request without drafts and with them in the same engine and reports both decode speeds
             (1000 / TPOT), the acceptance rate and whether the greedy outputs are identical;
  llama.cpp: `llama-lookup` on the same GGUF with the same chat-rendered prompt (Jinja template from the
             file, rendered by jinja2), greedy, `--spec-draft-n-max 0` (no drafts) and K; its own
             "decoded N tokens in S seconds" figure.
The runs alternate kiln / llama.cpp per prompt. Prints one row per prompt and the totals (decode tokens
over decode seconds). Needs `pip install gguf jinja2` and a llama.cpp build (LLAMA_BIN_DIR, with
llama-lookup; docs/speculative.md says how it was built). Not a test: figures depend on the machine.

With --draft-model D, kiln runs `--draft-model D` and llama.cpp `llama-speculative-simple -md D`
(the baseline without drafts stays `llama-lookup --spec-draft-n-max 0`).

usage: python3 bench/spec_bench.py [-m MODEL] [--draft-model D] [--threads 2] [--num-draft 5] [--reps 3]
                                   [--max-tokens 256]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

from bench_common import ROOT, default_kiln


def chat_prompt(model, text):
    import gguf
    import jinja2
    reader = gguf.GGUFReader(model)
    field = reader.fields["tokenizer.chat_template"]
    template = bytes(field.parts[field.data[0]]).decode()
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=[{"role": "user", "content": text}], add_generation_prompt=True)


def kiln_run(kiln, model, prompt_line, args):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(prompt_line)
        path = f.name
    try:
        out = subprocess.run(
            [kiln, "bench", "offline", "-m", model, "-t", str(args.threads), "--prompts", path, "--chat",
             "--stop-at-eos", "--output-len", str(args.max_tokens), "--requests", "1", "--max-seqs", "1",
             *(["--draft-model", args.draft_model] if args.draft_model else ["--spec", "ngram"]),
             "--num-draft", str(args.num_draft), "--reps", str(args.reps), "--json"],
            check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    j = json.loads(out)
    return j


def llama_run(bin_dir, model, prompt_file, args, k):
    if k > 0 and args.draft_model:
        cmd = [os.path.join(bin_dir, "llama-speculative-simple"), "-md", args.draft_model, "--spec-type",
               "draft-simple"]
    else:
        cmd = [os.path.join(bin_dir, "llama-lookup")]
    out = subprocess.run(
        cmd + ["-m", model, "-f", prompt_file, "-n", str(args.max_tokens), "-t", str(args.threads), "--temp", "0",
               "--spec-draft-n-max", str(k)],
        check=True, capture_output=True, text=True)
    text = out.stdout + out.stderr
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", text)
    acc = re.search(r"accept\s+=\s+([\d.]+)%", text)
    return int(m.group(1)), float(m.group(2)), float(acc.group(1)) if acc else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("--draft-model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--num-draft", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--prompts", default=os.path.join(ROOT, "bench", "data", "spec_prompts.jsonl"))
    args = ap.parse_args()
    model = args.model or subprocess.run(["bash", os.path.join(ROOT, "scripts", "default_model")], check=True,
                                         capture_output=True, text=True).stdout.strip()
    kiln = default_kiln()
    bin_dir = os.environ.get("LLAMA_BIN_DIR", "/tmp/lcpbuild/bin")
    have_llama = os.path.exists(os.path.join(bin_dir, "llama-lookup"))
    if not have_llama:
        print(f"no llama-lookup in {bin_dir}: kiln only", file=sys.stderr)
    lines = [l for l in open(args.prompts) if l.strip()]
    method = "draft" if args.draft_model else "ngram"
    print(f"model {model}, {method} {args.draft_model or ''}, {args.threads} threads, batch 1, "
          f"up to {args.num_draft} drafts, greedy")
    print(f"| prompt | kiln tok/s off | kiln tok/s {method} | speed-up | accepted | same | "
          f"llama.cpp tok/s off | llama.cpp tok/s {method} | speed-up | accepted |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    tot = {"k0": [0, 0.0], "k1": [0, 0.0], "l0": [0, 0.0], "l1": [0, 0.0]}
    for i, line in enumerate(lines):
        text = json.loads(line)["prompt"]
        j = kiln_run(kiln, model, line, args)
        n = round(j["output_tokens_per_s"] * j["seconds"])  # tokens of the request
        k_off = 1000.0 / j["without_spec_tpot_ms_mean"]
        k_on = 1000.0 / j["tpot_ms_mean"]
        tot["k0"][0] += n - 1
        tot["k0"][1] += (n - 1) / k_off
        tot["k1"][0] += n - 1
        tot["k1"][1] += (n - 1) / k_on
        row = (f"| {i} | {k_off:.0f} | {k_on:.0f} | {k_on / k_off:.2f}x | {100 * j['spec_acceptance_rate']:.0f}% | "
               f"{'yes' if j['spec_outputs_identical'] else 'NO'} |")
        if have_llama:
            with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
                f.write(chat_prompt(model, text))
                pf = f.name
            try:
                best = {}
                for k in (0, args.num_draft):  # median of reps each
                    runs = sorted((llama_run(bin_dir, model, pf, args, k) for _ in range(args.reps)),
                                  key=lambda r: r[0] / r[1])
                    best[k] = runs[len(runs) // 2]
            finally:
                os.unlink(pf)
            (n0, s0, _), (n1, s1, a1) = best[0], best[args.num_draft]
            tot["l0"][0] += n0
            tot["l0"][1] += s0
            tot["l1"][0] += n1
            tot["l1"][1] += s1
            row += f" {n0 / s0:.0f} | {n1 / s1:.0f} | {(n1 / s1) / (n0 / s0):.2f}x | {a1:.0f}% |"
        else:
            row += " - | - | - | - |"
        print(row, flush=True)
    rate = {k: (v[0] / v[1] if v[1] else 0.0) for k, v in tot.items()}
    line = f"| all | {rate['k0']:.0f} | {rate['k1']:.0f} | {rate['k1'] / rate['k0']:.2f}x | | |"
    if have_llama:
        line += f" {rate['l0']:.0f} | {rate['l1']:.0f} | {rate['l1'] / rate['l0']:.2f}x | |"
    print(line)


if __name__ == "__main__":
    main()
