#!/usr/bin/env bash
# kiln convert through the command line, checked by independent readers: stories260K .bin -> GGUF
# -> safetensors -> GGUF. The tensors are read back with gguf-py and the safetensors package and
# compared bit for bit with the float32 arrays parsed from the llama2.c file by numpy (HF Q/K
# permutation applied with HF's own formula for the safetensors step). Needs KILN_BIN, KILN_TESTDATA.
set -euo pipefail
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
model="$KILN_TESTDATA/models/stories260K"
"$KILN_BIN" convert "$model/stories260K.bin" "$tmp/a.gguf" --to gguf --tokenizer "$model/tok512.bin" --quiet
"$KILN_BIN" convert "$tmp/a.gguf" "$tmp/hf" --to safetensors --quiet
"$KILN_BIN" convert "$tmp/hf" "$tmp/b.gguf" --to gguf --quiet
# The tokenizer survives both hops.
a=$("$KILN_BIN" tokenize -m "$tmp/a.gguf" "Once upon a time")
b=$("$KILN_BIN" tokenize -m "$tmp/b.gguf" "Once upon a time")
c=$("$KILN_BIN" tokenize -m "$tmp/hf" "Once upon a time")
[ "$a" = "$b" ] && [ "$a" = "$c" ] || { echo "tokenizer changed: '$a' vs '$b' vs '$c'"; exit 1; }
exec python3 - "$model/stories260K.bin" "$tmp" <<'PY'
import json, sys
import numpy as np
import gguf
from safetensors.numpy import load_file

bin_path, tmp = sys.argv[1], sys.argv[2]
raw = open(bin_path, "rb").read()
dim, hidden, layers, heads, kv_heads, vocab, seq = np.frombuffer(raw[:28], dtype=np.int32)
vocab = abs(int(vocab))
head_dim = dim // heads
f = np.frombuffer(raw[28:], dtype=np.float32)
pos = 0
def take(*shape):
    global pos
    n = int(np.prod(shape)); a = f[pos:pos + n].reshape(shape); pos += n; return a
emb = take(vocab, dim); att_norm = take(layers, dim)
wq = take(layers, dim, dim); wk = take(layers, kv_heads * head_dim, dim); wv = take(layers, kv_heads * head_dim, dim)
wo = take(layers, dim, dim); ffn_norm = take(layers, dim)
w1 = take(layers, hidden, dim); w2 = take(layers, dim, hidden); w3 = take(layers, hidden, dim)
final_norm = take(dim)
want = {"token_embd.weight": emb, "output_norm.weight": final_norm}
for l in range(layers):
    for name, arr in [("attn_norm", att_norm), ("attn_q", wq), ("attn_k", wk), ("attn_v", wv), ("attn_output", wo),
                      ("ffn_norm", ffn_norm), ("ffn_gate", w1), ("ffn_down", w2), ("ffn_up", w3)]:
        want[f"blk.{l}.{name}.weight"] = arr[l]

def check(path):
    r = gguf.GGUFReader(path)
    got = {t.name: np.array(t.data).reshape([int(x) for x in reversed(t.shape)]) for t in r.tensors}
    assert set(got) == set(want), (path, sorted(set(got) ^ set(want)))
    for k, v in want.items():
        assert got[k].dtype == np.float32 and got[k].shape == v.shape, (path, k, got[k].shape, v.shape)
        assert got[k].tobytes() == v.tobytes(), (path, k, "bytes differ")
    print(f"{path}: {len(want)} tensors bit-identical to the .bin")

def hf_permute(w, n_heads):  # transformers convert_llama_weights_to_hf.py
    d1, d2 = w.shape
    return w.reshape(n_heads, d1 // n_heads // 2, 2, d2).transpose(0, 2, 1, 3).reshape(d1, d2)

check(tmp + "/a.gguf")
st = load_file(tmp + "/hf/model.safetensors")
for l in range(layers):
    assert st[f"model.layers.{l}.self_attn.q_proj.weight"].tobytes() == hf_permute(wq[l], heads).tobytes()
    assert st[f"model.layers.{l}.self_attn.k_proj.weight"].tobytes() == hf_permute(wk[l], kv_heads).tobytes()
    assert st[f"model.layers.{l}.mlp.gate_proj.weight"].tobytes() == w1[l].tobytes()
assert st["model.embed_tokens.weight"].tobytes() == emb.tobytes()
cfg = json.load(open(tmp + "/hf/config.json"))
assert cfg["num_key_value_heads"] == kv_heads and cfg["intermediate_size"] == hidden and cfg["tie_word_embeddings"]
print("safetensors: HF names, HF-permuted Q/K, config.json as expected")
check(tmp + "/b.gguf")
print("3 passed, 0 failed")
PY
