"""The Python package under mpirun (docs/parallel.md, docs/python.md): `mpirun -np 2 python script.py`
with tensor_parallel_size / pipeline_parallel_size (vLLM's names) gives the greedy text one process
gives; ranks 1.. never return from LLM(...) and exit with rank 0."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import STORIES

SCRIPT = r"""
import json, sys
import kiln
llm = kiln.LLM(sys.argv[1], threads=1, **json.loads(sys.argv[2]))
outs = llm.generate(["Once upon a time", "The dog", "Lily and Ben"],
                    kiln.SamplingParams(temperature=0, max_tokens=32), use_tqdm=False)
print(json.dumps([o.outputs[0].text for o in outs]))
"""


def run_ranks(np, options):
    mpirun = shutil.which("mpirun")
    assert mpirun, "no mpirun (scripts/setup installs openmpi-bin)"
    r = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(np),
                        sys.executable, "-c", SCRIPT, STORIES, json.dumps(options)],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none"))
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("[")]
    assert len(lines) == 1, r.stdout  # rank 0 alone prints: the others left inside LLM(...)
    return json.loads(lines[0])


@pytest.fixture(scope="module")
def alone():
    return run_ranks(1, {})


@pytest.mark.parametrize("np,options", [(2, {"tensor_parallel_size": 2}), (2, {"pipeline_parallel_size": 2}),
                                        (2, {"pipeline_parallel": 2, "pipeline_batches": 1}),
                                        (4, {"tensor_parallel_size": 2, "pipeline_parallel_size": 2})])
def test_ranks_give_one_process_text(alone, np, options):
    assert all(alone)
    assert run_ranks(np, options) == alone


def test_bad_rank_count_is_an_error():
    mpirun = shutil.which("mpirun")
    r = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, "-c", SCRIPT,
                        STORIES, json.dumps({"tensor_parallel_size": 3})], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "needs 3 ranks" in r.stderr
