#!/usr/bin/env python3
"""Writes the seed corpus of the safetensors fuzz target (tests/fuzz/corpus/safetensors/).

Small (< 4 KB) files: valid ones written by the reference `safetensors` package when it is
installed (else by hand with the same layout), plus hand-made near-misses that reach each check of
the reader: overlaps, holes, byte-count mismatches, unknown dtypes, huge shapes, bad metadata.
Usage: scripts/gen_safetensors_seeds.py [OUT_DIR]
"""
import json
import os
import struct
import sys


def raw(header, data=b"", pad=True):
    """A file image: u64 LE header length, JSON header (space-padded to 8 like HF), data."""
    h = json.dumps(header, separators=(",", ":")).encode() if not isinstance(header, bytes) else header
    if pad:
        h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def seeds():
    out = {}
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.25)
    out["valid_f32"] = raw({"__metadata__": {"format": "pt"}, "w": entry("F32", [2, 2], 0, 16)}, f32)
    out["valid_mixed"] = raw(
        {
            "a": entry("F32", [2], 0, 8),
            "b": entry("F16", [3], 8, 14),
            "c": entry("BF16", [1], 14, 16),
            "d": entry("I64", [1], 16, 24),
            "e": entry("U8", [], 24, 25),
            "f": entry("F8_E4M3", [2], 25, 27),
            "g": entry("BOOL", [0], 27, 27),
        },
        bytes(range(27)),
    )
    out["empty_header"] = raw({})
    out["metadata_only"] = raw({"__metadata__": {"k": "v", "format": "np"}})
    out["overlap"] = raw({"x": entry("F32", [2], 0, 8), "y": entry("F32", [2], 4, 12)}, bytes(12))
    out["hole"] = raw({"x": entry("F32", [1], 0, 4), "y": entry("F32", [1], 8, 12)}, bytes(12))
    out["mismatch"] = raw({"w": entry("F16", [2, 3], 0, 8)}, bytes(16))
    out["past_end"] = raw({"w": entry("F32", [4], 0, 16)}, bytes(8))
    out["unknown_dtype"] = raw({"w": entry("Q4", [2], 0, 1)}, bytes(1))
    out["huge_shape"] = raw({"h": entry("F32", [4294967296, 4294967296, 2], 0, 8)}, bytes(8))
    out["bad_metadata"] = raw({"__metadata__": {"k": 1}})
    out["not_object"] = raw(b"[1,2,3]")
    out["truncated_json"] = raw(b'{"w":{"dtype":"F32","sha')
    out["header_too_long"] = struct.pack("<Q", 1 << 40) + b"{}"
    out["dup_key"] = raw(b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                         b'"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\x01")
    try:  # the reference writer, when available
        import numpy as np
        from safetensors.numpy import save
        out["reference_writer"] = save(
            {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "y": np.array([1, -1], dtype=np.int8)},
            metadata={"format": "np"},
        )
    except ImportError:
        pass
    return out


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "fuzz", "corpus", "safetensors")
    os.makedirs(out_dir, exist_ok=True)
    for name, data in seeds().items():
        assert len(data) < 4096, name
        with open(os.path.join(out_dir, name + ".safetensors"), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds())} seeds to {out_dir}")


if __name__ == "__main__":
    main()
