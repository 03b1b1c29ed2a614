#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the shapes of gpu_bench's prefill attention (issue "CUDA
backend": kiln's prefill attention is judged against it): causal, one sequence of T tokens,
llama-3-8b heads (32 query heads over 8 KV heads, head_dim 128), bf16 and f16. TFLOP/s count the
useful causal work, 4 * heads * dim * T (T + 1) / 2, as gpu_bench does. Median of 20 CUDA-event
timed runs after 3 warm-ups. JSON lines on stdout, a table on stderr. Runs on the device machine
(scripts/device-check); exits 2 without torch or a GPU."""
import json
import sys


def main():
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("sdpa_bench: no torch", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("sdpa_bench: no CUDA device", file=sys.stderr)
        return 2
    heads, kv_heads, dim = 32, 8, 128
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}", file=sys.stderr)
    for dtype in (torch.bfloat16, torch.float16):
        for T in (512, 2048):
            q = torch.randn(1, heads, T, dim, device="cuda", dtype=dtype)
            k = torch.randn(1, kv_heads, T, dim, device="cuda", dtype=dtype)
            v = torch.randn(1, kv_heads, T, dim, device="cuda", dtype=dtype)
            try:
                run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                run()
                how = "enable_gqa"
            except TypeError:  # torch < 2.5: repeat the K/V heads
                k2 = k.repeat_interleave(heads // kv_heads, dim=1)
                v2 = v.repeat_interleave(heads // kv_heads, dim=1)
                run = lambda: F.scaled_dot_product_attention(q, k2, v2, is_causal=True)
                how = "repeated kv"
            for _ in range(3):
                run()
            times = []
            for _ in range(20):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                run()
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b))
            ms = sorted(times)[len(times) // 2]
            flops = 4.0 * heads * dim * T * (T + 1) / 2.0
            name = f"sdpa_{str(dtype).split('.')[-1]}/32x8x128/causal/T:{T}"
            print(json.dumps({"bench": name, "ms": ms, "tflops": flops / (ms * 1e9), "gqa": how}))
            print(f"| {name:<44} | {ms:9.4f} | {flops / (ms * 1e9):7.2f} TFLOP/s | {how}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
