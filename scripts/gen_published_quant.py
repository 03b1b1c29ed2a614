#!/usr/bin/env python3
"""Quantized checkpoints as llmcompressor writes them (compressed-tensors), and their reference logits.

Issue 34: kiln must load what people publish. This script makes a tiny random-weight Llama with
transformers (`from_config`, bfloat16, as published models are), quantizes it with llmcompressor's
`oneshot` under each scheme below, and saves it compressed (`save_compressed=True`), exactly as a user
of llmcompressor would. The reference for each checkpoint is compressed-tensors' own decompression
(its compressor's `decompress`, the code vLLM and transformers run) applied to the saved tensors with
the scales widened to float32 first and NVFP4 unpacked into float32 (decompressing in bfloat16 would
round every weight to 8 bits),
then a float32 eager forward pass of transformers' Llama over those weights.

Run by hand (llmcompressor pins torch and transformers; keep it out of the project's environment):

    python3 -m venv --system-site-packages /tmp/lcvenv
    /tmp/lcvenv/bin/pip install llmcompressor==0.14.0.1
    /tmp/lcvenv/bin/python scripts/gen_published_quant.py [OUT_DIR]

OUT_DIR defaults to tests/golden/data/published. Per scheme it writes OUT_DIR/<name>/:
  config.json, model.safetensors   llmcompressor's output (quantization_config as it writes it)
  golden.json                       prompts (token ids), logits shapes, 16 greedy ids of the last
                                    prompt, the tool versions
  logits.f32                        float32 logits of every prompt at every position [len, vocab]
tests/golden/published_quant_test.cc loads each folder with kiln and compares.
"""
import json
import os
import sys
import tempfile

import numpy as np
import torch

import compressed_tensors
import llmcompressor
from compressed_tensors.compressors import BaseCompressor
from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
from compressed_tensors.quantization.lifecycle.forward import dequantize
from compressed_tensors.quantization import QuantizationScheme
from datasets import Dataset
from llmcompressor import oneshot
from llmcompressor.modifiers.gptq import GPTQModifier
from llmcompressor.modifiers.quantization import QuantizationModifier
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_llama_goldens import VOCAB, base_model, calibration_ids, reference_from_saved, write_goldens  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ints(bits, symmetric, group, strategy="group", actorder=None):
    w = dict(num_bits=bits, type="int", symmetric=symmetric, strategy=strategy)
    if group:
        w["group_size"] = group
    if actorder:
        w["actorder"] = actorder
    return w


def group(weights, acts=None):
    g = {"targets": ["Linear"], "weights": weights}
    if acts:
        g["input_activations"] = acts
    return {"group_0": g}


# name -> (modifier kind, preset name or config_groups, needs calibration data)
SCHEMES = {
    # pack-quantized INT4, weight-only, round to nearest
    "w4a16-g32": ("rtn", group(ints(4, True, 32))),
    "w4a16-g128": ("rtn", "W4A16"),
    "w4a16-asym-g64": ("rtn", group(ints(4, False, 64))),
    # GPTQ with activation ordering (groups stay contiguous in this llmcompressor: "weight" order)
    "w4a16-gptq-actorder-g32": ("gptq", group(ints(4, True, 32, actorder="weight"))),
    "w4a16-gptq-asym-g128": ("gptq", "W4A16_ASYM"),
    # pack-quantized INT8, weight-only: groups of 32 (the W8A16 preset's 128 are whole rows here) and per channel
    "w8a16-g32": ("rtn", group(ints(8, True, 32))),
    "w8a16-channel": ("rtn", group(ints(8, True, None, strategy="channel"))),
    "w8a16-asym-g32": ("rtn", group(ints(8, False, 32))),
    # 3-bit fields straddle int32 words in the dense packing
    "w3a16-g32": ("rtn", group(ints(3, True, 32))),
    # int-quantized W8A8: dynamic per-token activations, and static per-tensor ones (calibrated)
    "w8a8-dynamic": ("rtn", "W8A8"),
    "w8a8-static": ("calib", group(ints(8, True, None, strategy="channel"),
                                   dict(num_bits=8, type="int", symmetric=True, strategy="tensor", dynamic=False))),
    # float-quantized FP8
    "fp8-dynamic": ("rtn", "FP8_DYNAMIC"),
    "fp8-static": ("calib", "FP8"),
    "fp8-block": ("rtn", "FP8_BLOCK"),
    # FP4
    "nvfp4": ("calib", "NVFP4"),
    "nvfp4a16": ("rtn", "NVFP4A16"),
    "mxfp4a16": ("rtn", "MXFP4A16"),
}


def calibration():
    ids = calibration_ids().tolist()
    return Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * 32 for _ in ids]})


def tokenizer():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", pad_token="t0", bos_token="t1",
                                   eos_token="t2")


def quantize(name, base, out):
    kind, scheme = SCHEMES[name]
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)
    args = {"targets": ["Linear"], "ignore": ["lm_head"]}
    if isinstance(scheme, str):
        args["scheme"] = scheme
    else:
        args = {"config_groups": scheme, "ignore": ["lm_head"]}
    modifier = GPTQModifier(**args) if kind == "gptq" else QuantizationModifier(**args)
    extra = {}
    if kind in ("gptq", "calib"):
        extra = dict(dataset=calibration(), num_calibration_samples=16, max_seq_length=32)
    oneshot(model=model, recipe=modifier, pipeline="basic" if kind == "calib" else "independent", **extra)
    model.save_pretrained(out, save_compressed=True)


def reference_model(path):
    """transformers' Llama in float32 with each quantized Linear's weight from compressed-tensors'
    decompression of the saved tensors (scales widened to float32)."""
    cfg = json.load(open(os.path.join(path, "config.json")))
    qc = cfg["quantization_config"]
    assert len(qc["config_groups"]) == 1
    scheme = QuantizationScheme(**next(iter(qc["config_groups"].values())))
    compressor = BaseCompressor.load_from_registry(qc["format"])

    def decompress(parts):
        sd = {k: (v.float() if k in ("weight_scale", "weight_global_scale") and v.dtype != torch.uint8 else v)
              for k, v in parts.items()}
        if sd["weight_scale"].dtype == torch.float8_e4m3fn:
            sd["weight_scale"] = sd["weight_scale"].float()
        if qc["format"] == "nvfp4-pack-quantized":
            # Its compressor unpacks into bfloat16 (rounding every product to 8 bits): the same
            # helpers, in float32.
            rows, half = sd["weight_packed"].shape
            fp4 = unpack_fp4_from_uint8(sd["weight_packed"], rows, half * 2, dtype=torch.float32)
            return dequantize(x_q=fp4, scale=sd["weight_scale"], args=scheme.weights,
                              global_scale=sd["weight_global_scale"], dtype=torch.float32)
        return compressor.decompress(sd, scheme)["weight"]

    return reference_from_saved(path, decompress)


def goldens(path, seed):
    write_goldens(reference_model(path), path, seed,
                  {"llmcompressor": llmcompressor.__version__, "compressed-tensors": compressed_tensors.__version__})


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/golden/data/published")
    only = set(sys.argv[2:])
    torch.Tensor.pin_memory = lambda self, *a, **k: self  # the pipelines pin their caches (needs CUDA)
    base = tempfile.mkdtemp(prefix="kiln_quant_base_")  # the bfloat16 model every scheme starts from
    base_model().save_pretrained(base)
    tokenizer().save_pretrained(base)  # oneshot wants one beside a dataset, though ours is token ids
    for i, name in enumerate(SCHEMES):
        if only and name not in only:
            continue
        path = os.path.join(out_dir, name)
        os.makedirs(path, exist_ok=True)
        quantize(name, base, path)
        for extra in os.listdir(path):  # keep the weights and the config; the rest is not read
            if extra not in ("config.json", "model.safetensors"):
                os.remove(os.path.join(path, extra))
        goldens(path, 100 + i)
        print(name, "->", path, os.path.getsize(os.path.join(path, "model.safetensors")), "bytes")


if __name__ == "__main__":
    main()
