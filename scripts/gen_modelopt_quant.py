#!/usr/bin/env python3
"""Quantized checkpoints as NVIDIA ModelOpt exports them (Hugging Face format), and their reference logits.

The ModelOpt counterpart of scripts/gen_published_quant.py (llmcompressor): the same tiny random-weight
Llama (scripts/tiny_llama_goldens.py, bfloat16), quantized with ModelOpt's post-training
quantization (`mtq.quantize` with the FP8_DEFAULT_CFG / NVFP4_DEFAULT_CFG presets, "max" calibration over
the same 16 x 32 random token ids, seed 7) and written with `export_hf_checkpoint`, exactly as a user of
ModelOpt (or its hf_ptq.py example) would. ModelOpt excludes lm_head (tied here, so not saved) and the
embeddings; every other Linear is quantized, weights and (static, per-tensor) input activations.

The reference for each checkpoint is ModelOpt's own dequantization of the SAVED tensors, in float32:
  FP8    FP8QTensor.dequantize:   w = float(weight [e4m3]) * weight_scale            (per tensor)
  NVFP4  NVFP4QTensor.dequantize: w = e2m1(nibble) * (float(weight_scale [e4m3]) * weight_scale_2),
         one weight_scale per 16 consecutive input columns; byte j of a row holds column 2j in its
         low nibble and column 2j+1 in its high nibble (modelopt/torch/quantization/qtensor/
         nvfp4_tensor.py); each is checked against that formula written out here.
then a float32 eager forward pass of transformers' Llama over those weights (activations are not
quantized in the reference, as in gen_published_quant.py; input_scale is not used).

ModelOpt runs on CPU as is (no monkeypatch): "max" calibration only records amax, and the export's
probe forward runs with every quantizer disabled. (A forward pass of the NVFP4-quantized model itself
would need CUDA: its dynamic block fake-quant asserts amax.is_cuda. Nothing here runs one.)

Run by hand (keep ModelOpt out of the project's environment; it uses the torch and transformers found):

    python3 -m venv --system-site-packages /tmp/movenv
    /tmp/movenv/bin/pip install nvidia-modelopt==0.47.0
    /tmp/movenv/bin/python scripts/gen_modelopt_quant.py [OUT_DIR [NAME ...]]

OUT_DIR defaults to tests/golden/data/published. Per scheme it writes OUT_DIR/<name>/:
  config.json, model.safetensors,   ModelOpt's output (config.json carries its quantization_config,
  hf_quant_config.json              "quant_method": "modelopt")
  golden.json                       prompts (token ids), logits shapes, 16 greedy ids of the last
                                    prompt, the tool versions
  logits.f32                        float32 logits of every prompt at every position [len, vocab]
"""
import json
import os
import sys
import tempfile

import torch

import modelopt
import modelopt.torch.quantization as mtq
from modelopt.torch.export import export_hf_checkpoint
from modelopt.torch.quantization.qtensor import FP8QTensor, NVFP4QTensor
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_llama_goldens import base_model, calibration_ids, reference_from_saved, write_goldens  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> ModelOpt preset; golden seeds are 200 + index (gen_published_quant.py uses 100 + index)
SCHEMES = {
    "modelopt-fp8": mtq.FP8_DEFAULT_CFG,      # FP8 E4M3, per-tensor weight and static input scales
    "modelopt-nvfp4": mtq.NVFP4_DEFAULT_CFG,  # NVFP4: E2M1 in groups of 16, E4M3 group scales, FP32 global
}

# E2M1 value of each 4-bit code: bit 3 is the sign, bits 0-2 index the magnitude.
E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float32)


def quantize(name, base, out):
    # Loaded back from disk, as a user would (the export also wants config.architectures).
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)
    ids = calibration_ids()

    def forward_loop(m):  # one sample at a time, as llmcompressor's calibration does
        with torch.no_grad():
            for row in ids:
                m(input_ids=row[None], attention_mask=torch.ones_like(row)[None])

    model = mtq.quantize(model, SCHEMES[name], forward_loop)
    export_hf_checkpoint(model, export_dir=out)


def dequantize_fp8(parts):
    q, scale = parts["weight"], parts["weight_scale"].float()
    assert q.dtype == torch.float8_e4m3fn and scale.dim() == 0, (q.dtype, scale.shape)
    w = FP8QTensor(q.shape, torch.float32, q).dequantize(dtype=torch.float32, scale=scale)
    assert torch.equal(w, q.float() * scale)
    return w


def dequantize_nvfp4(parts, group):
    packed, scale, scale_2 = parts["weight"], parts["weight_scale"], parts["weight_scale_2"].float()
    rows, half = packed.shape
    cols = half * 2
    assert packed.dtype == torch.uint8 and scale.dtype == torch.float8_e4m3fn, (packed.dtype, scale.dtype)
    assert scale.shape == (rows, cols // group) and scale_2.dim() == 0, (scale.shape, scale_2.shape)
    w = NVFP4QTensor(torch.Size([rows, cols]), torch.float32, packed).dequantize(
        dtype=torch.float32, scale=scale, double_scale=scale_2, block_sizes={-1: group})
    # The same, written out: even column in the low nibble, odd column in the high one.
    codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).reshape(rows, cols).long()
    mine = (E2M1[codes].view(rows, -1, group) * (scale.float() * scale_2).unsqueeze(-1)).view(rows, cols)
    assert torch.equal(w, mine)
    return w


def reference_model(path):
    """transformers' Llama in float32 with each quantized Linear's weight dequantized from the saved
    tensors by ModelOpt's own FP8QTensor / NVFP4QTensor.dequantize, in float32."""
    cfg = json.load(open(os.path.join(path, "config.json")))
    qc = cfg["quantization_config"]
    assert qc["quant_method"] == "modelopt", qc
    algo = qc["quant_algo"]
    group = None
    if algo == "NVFP4":
        group = next(iter(qc["config_groups"].values()))["weights"]["group_size"]

    def dequantize(parts):
        assert set(parts) <= {"weight", "weight_scale", "weight_scale_2", "input_scale"}, sorted(parts)
        if algo == "FP8":
            return dequantize_fp8(parts)
        if algo == "NVFP4":
            return dequantize_nvfp4(parts, group)
        raise ValueError(algo)

    return reference_from_saved(path, dequantize)


def goldens(path, seed):
    write_goldens(reference_model(path), path, seed, {"nvidia-modelopt": modelopt.__version__})


KEEP = ("config.json", "model.safetensors", "hf_quant_config.json")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/golden/data/published")
    only = set(sys.argv[2:])
    base = tempfile.mkdtemp(prefix="kiln_modelopt_base_")  # the bfloat16 model every scheme starts from
    base_model().save_pretrained(base)
    for i, name in enumerate(SCHEMES):
        if only and name not in only:
            continue
        path = os.path.join(out_dir, name)
        os.makedirs(path, exist_ok=True)
        for old in os.listdir(path):  # a fresh export: no stale files of an earlier run
            os.remove(os.path.join(path, old))
        quantize(name, base, path)
        for extra in os.listdir(path):  # keep what kiln reads; the rest (generation_config.json) is not
            if extra not in KEEP:
                os.remove(os.path.join(path, extra))
        goldens(path, 200 + i)
        print(name, "->", path, os.path.getsize(os.path.join(path, "model.safetensors")), "bytes")


if __name__ == "__main__":
    main()
