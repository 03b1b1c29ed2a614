"""Shared fixtures of the Python package's tests (run through run_pytest.sh, which checks that the
models, the built package and KILN_BIN are there)."""
import os
import subprocess

import pytest

import kiln

SMOL = os.path.expanduser("~/.cache/kiln/SmolLM2-135M-Instruct.Q4_1.gguf")
STORIES = os.path.join(os.environ.get("KILN_TESTDATA", ""), "models/stories260K/stories260K.bin")
KILN_BIN = os.environ.get("KILN_BIN", "")


@pytest.fixture(scope="module")
def smol():
    with kiln.LLM(SMOL, threads=2, max_model_len=2048) as llm:
        yield llm


@pytest.fixture(scope="module")
def stories():
    with kiln.LLM(STORIES, threads=2) as llm:
        yield llm


def kiln_generate(*args):
    """stdout of `kiln generate` (the C++ command line of this build) with these arguments."""
    assert KILN_BIN, "KILN_BIN is not set"
    r = subprocess.run([KILN_BIN, "generate", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("\n")
    return r.stdout[:-1]  # the newline it ends with
