"""The tiny random-weight Llama that the published-checkpoint goldens start from, and how their
reference logits are written; shared by scripts/gen_published_quant.py (llmcompressor) and
scripts/gen_modelopt_quant.py (NVIDIA ModelOpt). Needs torch and transformers only.

CONFIG: hidden 128 (rows of 128 are whole groups of 32, 64, 128 and NVFP4's 16), 2 layers, GQA 4 / 2,
vocab 256, tied embeddings. base_model(): seeded, projections ~N(0, 0.08), norms in [0.5, 1.5], then
bfloat16 as published models are. write_goldens(): golden.json (three random prompts, logits shapes,
16 greedy ids of the last prompt, tool versions) and logits.f32 (float32 logits of every prompt at
every position), the files tests/golden/published_quant_test.cc reads.
"""
import json
import os

import torch
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig

VOCAB = 256
CONFIG = dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=32, max_position_embeddings=128, rms_norm_eps=1e-5, bos_token_id=1,
              eos_token_id=2, pad_token_id=0, tie_word_embeddings=True, rope_theta=10000.0)


def calibration_ids():
    """16 x 32 random token ids (seed 7): the calibration samples of every tool."""
    g = torch.Generator().manual_seed(7)
    return torch.randint(3, VOCAB, (16, 32), generator=g)


def base_model():
    torch.manual_seed(0)
    cfg = LlamaConfig(**CONFIG)
    cfg._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    with torch.no_grad():  # larger weights than the init's 0.02, so that logits spread
        for name, p in model.named_parameters():
            if name.endswith("proj.weight"):
                p.normal_(0.0, 0.08)
            elif name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return model.to(torch.bfloat16)


def reference_from_state(dense):
    """transformers' Llama of CONFIG in float32 with the given weights (lm_head tied)."""
    torch.manual_seed(0)
    lcfg = LlamaConfig(**CONFIG)
    lcfg._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(lcfg, torch_dtype=torch.float32)
    missing, unexpected = model.load_state_dict(dense, strict=False)
    assert not unexpected, unexpected
    assert all(m == "lm_head.weight" for m in missing), missing
    model.tie_weights()
    return model.eval()


def reference_from_saved(path, dequantize):
    """reference_from_state over path/model.safetensors: each module with a "weight_scale" part (a
    quantized Linear) becomes M.weight = dequantize(parts) (float32; parts: its saved tensors by part
    name), every other tensor is widened to float32 as it is."""
    from safetensors.torch import load_file
    modules = {}
    for key, t in load_file(os.path.join(path, "model.safetensors")).items():
        mod, part = key.rsplit(".", 1)
        modules.setdefault(mod, {})[part] = t
    dense = {}
    for mod, parts in modules.items():
        if "weight_scale" in parts:
            dense[f"{mod}.weight"] = dequantize(parts).float()
        else:
            for part, t in parts.items():
                dense[f"{mod}.{part}"] = t.float()
    return reference_from_state(dense)


def write_goldens(model, path, seed, tools):
    """golden.json and logits.f32 of `model` in `path`: three random prompts, 16 greedy tokens.
    tools: the quantizing tools' versions (transformers' and torch's are added)."""
    g = torch.Generator().manual_seed(seed)
    prompts = [[1] + torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in (4, 9, 13)]
    blobs, shapes = [], []
    with torch.no_grad():
        for p in prompts:
            logits = model(torch.tensor([p])).logits[0].float().numpy()
            blobs.append(logits.astype("<f4").tobytes())
            shapes.append(list(logits.shape))
        ids = list(prompts[-1])
        greedy = []
        for _ in range(16):
            nxt = int(torch.argmax(model(torch.tensor([ids])).logits[0, -1]))
            greedy.append(nxt)
            ids.append(nxt)
    with open(os.path.join(path, "logits.f32"), "wb") as f:
        f.write(b"".join(blobs))
    meta = {"prompts": prompts, "logits_shapes": shapes, "greedy_prompt": len(prompts) - 1, "greedy": greedy,
            "tools": {**tools, "transformers": transformers.__version__, "torch": torch.__version__}}
    with open(os.path.join(path, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)
