#!/usr/bin/env python3
"""SmolLM2-135M-Instruct Q4_1 goldens from llama.cpp (an implementation independent of kiln).

Run once by hand, not in CI; the outputs are committed under tests/golden/data/smollm2/:
  python3 -m venv /tmp/llcpp && /tmp/llcpp/bin/pip install llama-cpp-python==0.3.36   # builds llama.cpp
  /tmp/llcpp/bin/python scripts/gen_smollm2_goldens_llamacpp.py "$(scripts/default_model)" tests/golden/data/smollm2

For each prompt it writes
  prompt_<name>.txt       the prompt text, exactly
  llamacpp_logits_top5_<name>.txt  teacher-forced top-5 logits at every prompt position, in the format of
                          testdata/models/stories260K/logits_top5_once_upon_a_time.txt
                          ("POS INPUT_ID ID:LOGIT ..."; the '#' line lists the input ids)
Prompts are tokenized by llama.cpp with special tokens parsed and no BOS added (the model's GGUF has
add_bos_token = false), so the files also pin the tokenization. No greedy continuation is written:
int8 activation rounding makes greedy runs chaotic between implementations (tests/golden/smollm2_test.cc
explains why only logits are compared with llama.cpp).
llama.cpp computes Q4_1 x Q8_1 products with activations quantized to 8 bits per block of 32; kiln
compares with a tolerance that covers that (see tests/golden/smollm2_test.cc); the tight check is
against scripts/gen_smollm2_goldens_f64.py, which reads the prompt ids from these files.
"""
import os
import sys

import numpy as np
from llama_cpp import Llama

PROMPTS = {
    "capital": "The capital of France is",
    "chat": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is the largest planet in the solar system?<|im_end|>\n<|im_start|>assistant\n",
    "code": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
}
TOP = 5


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model_path, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    llm = Llama(model_path=model_path, n_ctx=512, n_batch=512, logits_all=True, n_threads=2, verbose=False)
    for name, text in PROMPTS.items():
        with open(os.path.join(out_dir, f"prompt_{name}.txt"), "w") as f:
            f.write(text)
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        scores = np.array(llm.scores[: len(ids)], dtype=np.float64)  # [len(ids), vocab]
        with open(os.path.join(out_dir, f"llamacpp_logits_top5_{name}.txt"), "w") as f:
            f.write(f"# SmolLM2-135M-Instruct Q4_1, llama.cpp (llama-cpp-python 0.3.36) teacher-forced logits; "
                    f"input ids = [{', '.join(map(str, ids))}]\n")
            for pos, tok in enumerate(ids):
                row = scores[pos]
                order = sorted(range(len(row)), key=lambda i: (-row[i], i))[:TOP]
                f.write(f"{pos} {tok} " + " ".join(f"{i}:{row[i]:.6f}" for i in order) + "\n")
        print(name, len(ids), "prompt tokens")


if __name__ == "__main__":
    main()
