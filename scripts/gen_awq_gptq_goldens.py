#!/usr/bin/env python3
"""AutoAWQ (GEMM) and GPTQ (AutoGPTQ) checkpoints packed by those tools' own code, and reference logits.

Issue 34: kiln loads the quantized checkpoints people publish. AutoAWQ and AutoGPTQ are archived and
need CUDA to install, so this script imports just their packing and dequantizing modules from the
published packages, unpacked (no install):

    pip download --no-deps autoawq==0.2.9 auto-gptq==0.7.1 -d /tmp/dl
    tar xzf /tmp/dl/autoawq-0.2.9.tar.gz -C /tmp/dl
    python3 -m zipfile -e /tmp/dl/auto_gptq-0.7.1-*.whl /tmp/dl/agptq
    /tmp/lcvenv/bin/python scripts/gen_awq_gptq_goldens.py /tmp/dl/autoawq-0.2.9 /tmp/dl/agptq [OUT_DIR]

(/tmp/lcvenv as in scripts/gen_published_quant.py, whose tiny bfloat16 Llama this starts from.)
Each projection is quantized round-to-nearest per group with the tool's formulas (AutoAWQ's
pseudo_quantize_tensor: asymmetric, scale = (max - min) / 15, zero = -round(min / scale); AutoGPTQ's
Quantizer: symmetric zero 2^(bits-1), scale = 2 amax / (2^bits - 1), or asymmetric like AWQ's), packed
by WQLinear_GEMM.from_linear (AutoAWQ) and QuantLinear.pack (auto_gptq qlinear_cuda), and saved with
the quantization_config each tool writes. The reference weights are the tools' own dequantization in
float32: AutoAWQ's dequantize_gemm, and auto_gptq QuantLinear.forward's CPU path on an identity
input with float32 scales. OUT_DIR (default tests/golden/data/published) gets one folder per checkpoint
in the layout gen_published_quant.py writes (config.json, model.safetensors, golden.json, logits.f32).
"""
import importlib.util
import json
import os
import sys
import types

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_llama_goldens as base  # noqa: E402

# name -> (tool, bits, group_size, symmetric, desc_act)
CHECKPOINTS = {
    "awq-gemm-g32": ("awq", 4, 32, False, False),
    "gptq-w4-g32": ("gptq", 4, 32, True, False),
    "gptq-w4-asym-g64": ("gptq", 4, 64, False, False),
    "gptq-w4-g32-desc-act": ("gptq", 4, 32, True, True),
    "gptq-w8-g32": ("gptq", 8, 32, True, False),
}
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def load_module(name, path, stubs=()):
    for s in stubs:
        sys.modules.setdefault(s, types.ModuleType(s))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def awq_modules(src):
    # gemm.py imports awq.utils.module.try_import, awq.utils.utils.get_best_device and
    # awq.utils.packing_utils.dequantize_gemm; the first two are stubbed, the last is the real file.
    packing = load_module("awq.utils.packing_utils", os.path.join(src, "awq/utils/packing_utils.py"),
                          stubs=("awq", "awq.utils"))
    sys.modules["awq.utils.packing_utils"] = packing
    sys.modules["awq.utils.module"] = types.SimpleNamespace(try_import=lambda *a, **k: (None, "stub"))
    sys.modules["awq.utils.utils"] = types.SimpleNamespace(get_best_device=lambda: "cpu")
    sys.modules["awq.modules"] = types.ModuleType("awq.modules")
    sys.modules["awq.modules.triton"] = types.ModuleType("awq.modules.triton")
    gemm = load_module("awq.modules.linear.gemm", os.path.join(src, "awq/modules/linear/gemm.py"))
    return gemm, packing


def gptq_module(src):
    return load_module("qlinear_cuda", os.path.join(src, "auto_gptq/nn_modules/qlinear/qlinear_cuda.py"))


def rtn_params(w, bits, group, symmetric):
    """Per (output, group) scale and zero over w [out, in], the tools' round-to-nearest formulas."""
    out, inp = w.shape
    g = w.reshape(out, inp // group, group)
    maxq = 2 ** bits - 1
    if symmetric:
        amax = g.abs().amax(dim=2)
        scale = (2 * amax / maxq).clamp(min=1e-8)
        zero = torch.full_like(scale, (maxq + 1) // 2)
    else:
        mx, mn = g.amax(dim=2).clamp(min=0), g.amin(dim=2).clamp(max=0)
        scale = ((mx - mn) / maxq).clamp(min=1e-8)
        zero = (-torch.round(mn / scale)).clamp(0, maxq)
    return scale, zero  # [out, groups]


def main():
    awq_src, gptq_src = sys.argv[1], sys.argv[2]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out_dir = sys.argv[3] if len(sys.argv) > 3 else os.path.join(root, "tests/golden/data/published")
    gemm, packing = awq_modules(awq_src)
    qlinear = gptq_module(gptq_src)
    model = base.base_model().float()  # the bfloat16 model's values, in float32
    sd = model.state_dict()
    for ci, (name, (tool, bits, group, symmetric, desc_act)) in enumerate(CHECKPOINTS.items()):
        torch.manual_seed(1000 + ci)
        tensors, dense = {}, {}
        for key, t in sd.items():
            if key == "lm_head.weight":
                continue
            mod = key.rsplit(".", 1)[0]
            if not (key.endswith(".weight") and mod.rsplit(".", 1)[-1] in LINEARS):
                tensors[key] = t.to(torch.float16).contiguous()
                dense[key] = t.to(torch.float16).float()
                continue
            w = t.to(torch.float16).float()  # the tools work on fp16 models
            out, inp = w.shape
            lin = torch.nn.Linear(inp, out, bias=False)
            lin.weight.data = w.clone()
            scale, zero = rtn_params(w, bits, group, symmetric)
            if tool == "awq":
                q = gemm.WQLinear_GEMM.from_linear(lin, bits, group, scales=scale.t().contiguous().half(),
                                                   zeros=zero.t().contiguous())
                tensors[mod + ".qweight"], tensors[mod + ".qzeros"] = q.qweight, q.qzeros
                tensors[mod + ".scales"] = q.scales
                ref = packing.dequantize_gemm(q.qweight, q.qzeros, q.scales.float(), bits, group)  # [in, out]
                dense[key] = ref.t().float()
            else:
                g_idx = torch.arange(inp, dtype=torch.int32) // group
                if desc_act:  # GPTQ's act-order: columns assigned to groups in a permuted order
                    perm = torch.randperm(inp)
                    g_idx = torch.empty(inp, dtype=torch.int32)
                    g_idx[perm] = torch.arange(inp, dtype=torch.int32) // group
                    # the scales of a group come from the columns assigned to it
                    cols = [torch.nonzero(g_idx == k).flatten() for k in range(inp // group)]
                    wg = torch.stack([w[:, c] for c in cols], dim=1).reshape(out, -1)
                    scale, zero = rtn_params(wg, bits, group, symmetric)
                q = qlinear.QuantLinear(bits, group, inp, out, False)
                q.pack(lin, scale.half(), zero, g_idx=g_idx)  # [out, groups], as its quantizer gives them
                tensors[mod + ".qweight"], tensors[mod + ".qzeros"] = q.qweight, q.qzeros
                tensors[mod + ".scales"], tensors[mod + ".g_idx"] = q.scales.half(), q.g_idx.to(torch.int32)
                q.scales = q.scales.float()  # its CPU dequantization then runs in float32
                with torch.no_grad():
                    dense[key] = q(torch.eye(inp)).t().float()  # forward(I) = W^T
        path = os.path.join(out_dir, name)
        os.makedirs(path, exist_ok=True)
        save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(path, "model.safetensors"),
                  metadata={"format": "pt"})
        cfg = model.config.to_dict()
        cfg["torch_dtype"] = "float16"
        if tool == "awq":
            cfg["quantization_config"] = {"quant_method": "awq", "bits": bits, "group_size": group,
                                          "zero_point": True, "version": "gemm", "modules_to_not_convert": None}
        else:
            cfg["quantization_config"] = {"quant_method": "gptq", "bits": bits, "group_size": group,
                                          "desc_act": desc_act, "sym": symmetric, "true_sequential": True,
                                          "checkpoint_format": "gptq"}
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        ref = base.reference_from_state(dense)
        base.write_goldens(ref, path, 200 + ci, {"autoawq": "0.2.9 (gemm.py, packing_utils.py)",
                                                 "auto-gptq": "0.7.1 (qlinear_cuda.py)"})
        print(name, "->", path, os.path.getsize(os.path.join(path, "model.safetensors")), "bytes")


if __name__ == "__main__":
    main()
