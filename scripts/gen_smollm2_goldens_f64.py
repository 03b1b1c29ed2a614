#!/usr/bin/env python3
"""SmolLM2-135M-Instruct Q4_1 goldens from a float64 NumPy forward pass (independent of kiln).

The weights are dequantized by the `gguf` package from PyPI (gguf.quants.dequantize, the code HF
transformers uses to load GGUF files) and the Llama forward pass is written out below in float64, so
the only difference from kiln's f32 path is rounding. Run once by hand after
scripts/gen_smollm2_goldens_llamacpp.py (the prompt ids come from its files, i.e. from llama.cpp's
tokenizer); outputs are committed under tests/golden/data/smollm2/:
  python3 scripts/gen_smollm2_goldens_f64.py "$(scripts/default_model)" tests/golden/data/smollm2
writes f64_logits_top5_<name>.txt (teacher-forced top-5 at every prompt position) and
f64_greedy64_<name>.txt (64 argmax continuation ids, ties to the lowest id) for each prompt.

With --q8-activations it instead writes f64q8_logits_top5_<name>.txt, where every weight matmul's
input is first rounded as llama.cpp does (8-bit blocks of 32, scale amax/127 stored as fp16): the
size of that effect is what justifies the tolerance against llama.cpp's own logits. That mode is an
analysis tool: its files are not committed and no test reads them.

Conventions of a llama.cpp GGUF: Q/K rows are stored for interleaved-pair RoPE (pairs (2i, 2i+1)
of each head); hyper-parameters come from the llama.* metadata keys.
"""
import glob
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def field(r, key):
    f = r.fields[key]
    return f.parts[f.data[0]][0]


def q8_round(x):
    """x [n, k] rounded to 8 bits per block of 32 with an fp16 scale (ggml's block_q8_0/q8_1)."""
    b = x.reshape(x.shape[0], -1, 32)
    d = np.abs(b).max(-1, keepdims=True) / 127.0
    q = np.round(b / np.where(d > 0, d, 1.0))
    return (q * d.astype(np.float16).astype(np.float64)).reshape(x.shape)


class Model:
    def __init__(self, path, q8_activations=False):
        self.q8 = q8_activations
        r = GGUFReader(path)
        a = "llama"
        self.n_layer = int(field(r, f"{a}.block_count"))
        self.n_head = int(field(r, f"{a}.attention.head_count"))
        self.n_kv = int(field(r, f"{a}.attention.head_count_kv"))
        self.dim = int(field(r, f"{a}.embedding_length"))
        self.head_dim = self.dim // self.n_head
        self.eps = float(field(r, f"{a}.attention.layer_norm_rms_epsilon"))
        self.theta = float(field(r, f"{a}.rope.freq_base"))
        self.w = {}
        for t in r.tensors:
            shape = [int(x) for x in reversed(list(t.shape))]  # GGUF lists dims innermost first
            self.w[t.name] = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(shape)
        self.out = self.w.get("output.weight", self.w["token_embd.weight"])  # tied embeddings

    def mm(self, x, name):  # x [n, k] @ W[name]^T
        return (q8_round(x) if self.q8 else x) @ self.w[name].T

    def rms(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):  # x [n, heads, head_dim], interleaved pairs
        inv = self.theta ** (-2.0 * np.arange(self.head_dim // 2) / self.head_dim)
        ang = np.outer(pos, inv)
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def forward(self, ids, cache):
        """Logits [len(ids), vocab] of ids appended after the cache (a list of per-layer (k, v))."""
        n, hd, group = len(ids), self.head_dim, self.n_head // self.n_kv
        start = cache[0][0].shape[0] if cache else 0
        pos = np.arange(start, start + n)
        x = self.w["token_embd.weight"][ids]
        for l in range(self.n_layer):
            p = f"blk.{l}."
            h = self.rms(x, self.w[p + "attn_norm.weight"])
            q = self.rope(self.mm(h, p + "attn_q.weight").reshape(n, self.n_head, hd), pos)
            k = self.rope(self.mm(h, p + "attn_k.weight").reshape(n, self.n_kv, hd), pos)
            v = self.mm(h, p + "attn_v.weight").reshape(n, self.n_kv, hd)
            if len(cache) <= l:
                cache.append((np.zeros((0, self.n_kv, hd)), np.zeros((0, self.n_kv, hd))))
            K = np.concatenate([cache[l][0], k])
            V = np.concatenate([cache[l][1], v])
            cache[l] = (K, V)
            mask = np.where(np.arange(K.shape[0])[None, :] <= pos[:, None], 0.0, -np.inf)  # [n, kv_len]
            o = np.empty((n, self.n_head, hd))
            for head in range(self.n_head):
                s = q[:, head] @ K[:, head // group].T / np.sqrt(hd) + mask
                s = np.exp(s - s.max(-1, keepdims=True))
                o[:, head] = (s / s.sum(-1, keepdims=True)) @ V[:, head // group]
            x = x + self.mm(o.reshape(n, -1), p + "attn_output.weight")
            h = self.rms(x, self.w[p + "ffn_norm.weight"])
            g = self.mm(h, p + "ffn_gate.weight")
            u = self.mm(h, p + "ffn_up.weight")
            x = x + self.mm(g / (1.0 + np.exp(-g)) * u, p + "ffn_down.weight")
        x = self.rms(x, self.w["output_norm.weight"])
        return (q8_round(x) if self.q8 else x) @ self.out.T


def prompt_ids(path):
    first = open(path).readline()
    return [int(t) for t in first[first.rindex("[") + 1 : first.rindex("]")].split(",")]


def main():
    args = [a for a in sys.argv[1:] if a != "--q8-activations"]
    q8 = len(args) != len(sys.argv) - 1
    if len(args) != 2:
        sys.exit(__doc__)
    model, out_dir = Model(args[0], q8), args[1]
    prefix = "f64q8" if q8 else "f64"
    for src in sorted(glob.glob(os.path.join(out_dir, "llamacpp_logits_top5_*.txt"))):
        name = os.path.basename(src)[len("llamacpp_logits_top5_") : -len(".txt")]
        ids = prompt_ids(src)
        cache = []
        logits = model.forward(ids, cache)
        with open(os.path.join(out_dir, f"{prefix}_logits_top5_{name}.txt"), "w") as f:
            f.write(f"# SmolLM2-135M-Instruct Q4_1, float64 NumPy reference (gguf dequantize"
                    f"{', activations rounded to 8 bits' if q8 else ''}) teacher-forced "
                    f"logits; input ids = [{', '.join(map(str, ids))}]\n")
            for pos, tok in enumerate(ids):
                order = np.argsort(-logits[pos], kind="stable")[:5]
                f.write(f"{pos} {tok} " + " ".join(f"{i}:{logits[pos, i]:.6f}" for i in order) + "\n")
        if q8:
            continue
        out, last = [], logits[-1]
        for _ in range(64):
            nxt = int(np.argmax(last))
            out.append(nxt)
            last = model.forward([nxt], cache)[-1]
        with open(os.path.join(out_dir, f"f64_greedy64_{name}.txt"), "w") as f:
            f.write(" ".join(map(str, out)) + "\n")
        print(name, len(ids), "prompt tokens ->", out[:16], "...")


if __name__ == "__main__":
    main()
