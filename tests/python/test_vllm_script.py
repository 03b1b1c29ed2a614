"""python/examples/offline_inference.py, vLLM's basic offline example with only its import line changed,
runs on kiln and prints what LLM.generate gives for the same prompts and parameters."""
import os
import re
import subprocess
import sys

from kiln import LLM, SamplingParams
from conftest import SMOL

SCRIPT = os.path.join(os.path.dirname(__file__), "../../python/examples/offline_inference.py")


def test_only_the_import_line_names_kiln():
    lines = [ln for ln in open(SCRIPT).read().splitlines() if "kiln" in ln and not ln.startswith("#")]
    assert lines == ["from kiln import LLM, SamplingParams"]


def test_vllm_example_runs(smol):
    r = subprocess.run([sys.executable, SCRIPT, SMOL], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    pairs = re.findall(r"Prompt:    (.*)\nOutput:    (.*)\n", r.stdout)
    assert len(pairs) == 4, r.stdout
    prompts = [eval(p) for p, _ in pairs]  # noqa: S307 (repr() of strings printed by the script)
    outs = smol.generate(prompts, SamplingParams(temperature=0.8, top_p=0.95, seed=0))
    assert [eval(t) for _, t in pairs] == [o.outputs[0].text for o in outs]  # noqa: S307
