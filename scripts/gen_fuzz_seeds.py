#!/usr/bin/env python3
"""Writes the seed corpus of the GGUF fuzz target (tests/fuzz/gguf_fuzz.cc) into tests/fuzz/corpus/gguf/:
a few small (< 4 KB) valid GGUF files that together cover every metadata value type (nested arrays
included), custom alignment, v2, and tensors of every dtype kiln dequantizes. Files come from
gguf-py's GGUFWriter (an independent writer) except the v2 one, which is assembled by hand.
Deterministic (seeded); re-run after changing it: python3 scripts/gen_fuzz_seeds.py [out_dir]
"""
import pathlib
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES

RNG = np.random.default_rng(7)


def raw_tensor(qtype, rows, cols):
    """Random bytes for a [rows, cols] tensor of a block type (scales may be any fp16, even NaN)."""
    block, size = GGML_QUANT_SIZES[qtype]
    return RNG.integers(0, 256, size=(rows, cols // block * size), dtype=np.uint8)


def write(path, arch, fill):
    w = GGUFWriter(str(path), arch)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def all_types(w):
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -300)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -70000)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**40))
    w.add_float32("t.f32", 1.25)
    w.add_float64("t.f64", -2.5e-300)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo")
    w.add_array("t.strs", ["a", "bb", ""])
    w.add_array("t.i32s", [1, -2, 3])
    w.add_array("t.f32s", [0.5, -1.0])
    w.add_array("t.bools", [True, False])
    w.add_key_value("t.u8s", [1, 2, 3], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("t.nested", [[1, 2], [3]], V.ARRAY)
    w.add_tensor("f32", RNG.standard_normal((2, 4)).astype(np.float32))
    w.add_tensor("f16", RNG.standard_normal(8).astype(np.float16))
    w.add_tensor("bf16", raw_tensor(Q.BF16, 1, 4), raw_dtype=Q.BF16)
    w.add_tensor("q8_0", raw_tensor(Q.Q8_0, 1, 32), raw_dtype=Q.Q8_0)
    w.add_tensor("q4_0", raw_tensor(Q.Q4_0, 2, 32), raw_dtype=Q.Q4_0)
    w.add_tensor("q4_1", raw_tensor(Q.Q4_1, 1, 32), raw_dtype=Q.Q4_1)
    w.add_tensor("q4_k", raw_tensor(Q.Q4_K, 1, 256), raw_dtype=Q.Q4_K)
    w.add_tensor("q6_k", raw_tensor(Q.Q6_K, 1, 256), raw_dtype=Q.Q6_K)


def align64(w):
    w.add_custom_alignment(64)
    w.add_tensor("q5_0", raw_tensor(Q.Q5_0, 1, 64), raw_dtype=Q.Q5_0)
    w.add_tensor("q5_1", raw_tensor(Q.Q5_1, 1, 32), raw_dtype=Q.Q5_1)
    w.add_tensor("q2_k", raw_tensor(Q.Q2_K, 1, 256), raw_dtype=Q.Q2_K)
    w.add_tensor("q3_k", raw_tensor(Q.Q3_K, 1, 256), raw_dtype=Q.Q3_K)
    w.add_tensor("q5_k", raw_tensor(Q.Q5_K, 1, 256), raw_dtype=Q.Q5_K)
    w.add_tensor("i32", np.arange(6, dtype=np.int32).reshape(2, 3))
    w.add_tensor("f32_3d", np.ones((2, 1, 3), dtype=np.float32))


def vocab(w):
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", ["<s>", "a", "b", "ab", "\u0120c"])
    w.add_array("tokenizer.ggml.token_type", [3, 1, 1, 1, 1])
    w.add_array("tokenizer.ggml.merges", ["a b"])
    w.add_uint32("tokenizer.ggml.bos_token_id", 0)
    w.add_bool("tokenizer.ggml.add_bos_token", False)


def v2_by_hand():
    """GGUF v2 (same layout as v3): one kv and one f32 [2, 2] tensor, data aligned to 32."""
    def s(x):
        return struct.pack("<Q", len(x)) + x
    b = b"GGUF" + struct.pack("<IQQ", 2, 1, 1)
    b += s(b"general.architecture") + struct.pack("<I", 8) + s(b"llama")
    b += s(b"w") + struct.pack("<I", 2) + struct.pack("<QQ", 2, 2) + struct.pack("<IQ", 0, 0)
    b += b"\0" * (-len(b) % 32)
    return b + struct.pack("<4f", 1, 2, 3, 4)


def main():
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else \
        pathlib.Path(__file__).resolve().parent.parent / "tests/fuzz/corpus/gguf"
    out.mkdir(parents=True, exist_ok=True)
    write(out / "all_types.gguf", "llama", all_types)
    write(out / "align64.gguf", "qwen2", align64)
    write(out / "vocab.gguf", "gpt2", vocab)
    (out / "v2.gguf").write_bytes(v2_by_hand())
    for p in sorted(out.glob("*.gguf")):
        size = p.stat().st_size
        assert size < 4096, f"{p} is {size} bytes"
        print(f"{p} {size} bytes")


if __name__ == "__main__":
    main()
