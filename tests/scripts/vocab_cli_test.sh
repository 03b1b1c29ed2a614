#!/usr/bin/env bash
# `kiln tokenize --no-special -` must reproduce every .out file in testdata/vocab exactly (llama.cpp's
# tokenizer test vectors): each case is fed on standard input, byte for byte, one process per case.
set -euo pipefail
exec python3 - "$KILN_BIN" "$KILN_TESTDATA/vocab" <<'PY'
import glob, os, subprocess, sys
kiln, vocab_dir = sys.argv[1], sys.argv[2]
sep = "\n__ggml_vocab_test__\n"
failed = passed = 0
for gguf in sorted(glob.glob(os.path.join(vocab_dir, "*.gguf"))):
    with open(gguf + ".inp", "rb") as f:
        inp = f.read().decode("utf-8")
    with open(gguf + ".out", "rb") as f:
        expected = f.read().decode("utf-8").split("\n")
    assert inp.endswith(sep), gguf + ".inp: no trailing separator"
    cases = inp[: -len(sep)].split(sep)
    assert len(cases) <= len(expected), gguf
    name = os.path.basename(gguf)
    ok = 0
    for i, case in enumerate(cases):
        r = subprocess.run([kiln, "tokenize", "-m", gguf, "--no-special", "-"], input=case.encode("utf-8"),
                           capture_output=True)
        got = r.stdout.decode().strip()
        want = expected[i].strip()
        if r.returncode != 0 or got != want:
            failed += 1
            print(f"FAIL {name} case {i} {case!r}\n  want: {want}\n  got:  {got} (exit {r.returncode}) {r.stderr.decode()[:200]}")
        else:
            ok += 1
            passed += 1
    print(f"{name}: {ok}/{len(cases)} cases exact")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed or not passed else 0)
PY
