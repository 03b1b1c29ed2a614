#!/usr/bin/env python3
"""Writes tests/golden/data/dequant_golden.bin: seeded random GGML blocks and their fp32 values as
decoded by gguf-py (gguf.quants.dequantize), an implementation independent of kiln's. The test
tests/unit/dequant_golden_test.cc decodes the same bytes with kiln::kernels::ref::dequantize_row and
requires bit-identical floats (gguf-py does the arithmetic in fp32 in ggml's order).

Usage: python3 scripts/gen_dequant_golden.py [output]   (deterministic: same bytes on every run)

File format (all little-endian):
  header: 4 bytes magic b"KDQG", u32 version (1), u32 num_records
  record: u32 ggml_type_id (ggml.h enum ggml_type), u32 num_elements, u32 num_bytes,
          num_bytes bytes of raw blocks, then num_elements f32 expected values
"""
import pathlib
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

SEED = 20240601
# Byte offsets of the fp16 scale/min fields inside one block (ggml-common.h). They are overwritten
# with finite values: random bytes would make ~3% of scales inf/NaN and the goldens meaningless.
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
# IQ4_NL / IQ4_XS (added after MXFP4): the fp16 d at byte 0; IQ4_XS's scales_h / scales_l and the
# nibbles stay random, so every 6-bit sub-block scale and every level occurs. TQ1_0 / TQ2_0: d at the
# end; random bytes cover every base-3 byte (and TQ2_0's unused code 3).
LATER_FP16_FIELDS = {T.IQ4_NL: [0], T.IQ4_XS: [0], T.TQ1_0: [52], T.TQ2_0: [64]}
NUM_BLOCKS = {T.IQ4_XS: 3, T.TQ1_0: 3, T.TQ2_0: 3, T.Q2_K: 3, T.Q3_K: 3, T.Q4_K: 3, T.Q5_K: 3, T.Q6_K: 3}  # others: 8 blocks of 32


def quant_record(rng, qtype):
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    num_blocks = NUM_BLOCKS.get(qtype, 8)
    raw = rng.integers(0, 256, size=(num_blocks, type_size), dtype=np.uint8)
    for off in {**FP16_FIELDS, **LATER_FP16_FIELDS}[qtype]:
        scales = (rng.standard_normal(num_blocks) * 0.05).astype(np.float16)
        scales[0] = np.frombuffer(b"\x01\x00", dtype=np.float16)[0]  # smallest subnormal
        scales[1] = -scales[1]
        raw[:, off:off + 2] = scales.view(np.uint8).reshape(num_blocks, 2)
    raw = raw.reshape(-1)
    return raw, dequantize(raw, qtype).reshape(-1), num_blocks * block_size


def mxfp4_record(rng):
    """MXFP4 blocks {u8 e (E8M0); qs[16]}. Exponents stay below 0xFF, which OCP MX defines as NaN (kiln)
    and ggml decodes as 2^127; the first two blocks take the extremes 0 and 252 (the largest whose codes all stay finite), the rest realistic
    weight scales. Every E2M1 code appears, 8 (OCP's -0, ggml's 0) included."""
    num_blocks = 8
    _, type_size = GGML_QUANT_SIZES[T.MXFP4]
    raw = rng.integers(0, 256, size=(num_blocks, type_size), dtype=np.uint8)
    raw[:, 0] = rng.integers(110, 140, size=num_blocks, dtype=np.uint8)
    raw[0, 0], raw[1, 0] = 0, 252
    raw[2, 1:] = np.arange(16, dtype=np.uint8) * 0x11  # codes 0..15 in both nibbles
    raw = raw.reshape(-1)
    return raw, dequantize(raw, T.MXFP4).reshape(-1), num_blocks * 32


def plain_record(rng, qtype):
    n = 96
    specials = {
        T.F32: [0.0, -0.0, np.inf, -np.inf, 1e-45, -3.4e38],
        T.F16: [0.0, -0.0, np.inf, -np.inf, 6e-8, 65504.0],
        T.BF16: [0.0, -0.0, np.inf, -np.inf, 1e-40, 3.0e38],
    }[qtype]
    vals = (rng.standard_normal(n) * 10).astype(np.float32)
    vals[:len(specials)] = np.array(specials, dtype=np.float32)
    if qtype == T.F32:
        raw = vals.view(np.uint8)
    elif qtype == T.F16:
        raw = vals.astype(np.float16).view(np.uint8)
    else:  # bf16: keep the top 16 bits (truncation is fine: any bit pattern is a valid input)
        raw = (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    return raw, dequantize(raw, qtype).reshape(-1), n


def main():
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else \
        pathlib.Path(__file__).resolve().parent.parent / "tests/golden/data/dequant_golden.bin"
    rng = np.random.default_rng(SEED)
    records = []
    for qtype in [T.F32, T.F16, T.BF16]:
        records.append((qtype, *plain_record(rng, qtype)))
    for qtype in FP16_FIELDS:
        records.append((qtype, *quant_record(rng, qtype)))
    records.append((T.MXFP4, *mxfp4_record(rng)))  # after the others: the records above keep their bytes
    for qtype in LATER_FP16_FIELDS:  # types added later, at the end for the same reason
        records.append((qtype, *quant_record(rng, qtype)))
    blob = bytearray(b"KDQG" + struct.pack("<II", 1, len(records)))
    for qtype, raw, values, n in records:
        values = np.ascontiguousarray(values, dtype="<f4")
        assert values.size == n and np.all(np.isfinite(values) | (qtype in (T.F32, T.F16, T.BF16)))
        blob += struct.pack("<III", int(qtype), n, raw.size) + raw.tobytes() + values.tobytes()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(bytes(blob))
    print(f"wrote {out} ({len(blob)} bytes, {len(records)} records)")


if __name__ == "__main__":
    main()
