#!/usr/bin/env python3
"""Tiny random-weight models of every architecture kiln runs (the Llama family, Gemma 2 / 3, Phi-3 and the
mixtures of experts), built by Hugging Face
transformers (AutoModelForCausalLM.from_config: the reference modeling code, an implementation
independent of kiln), and their logits. Run once by hand with torch + transformers installed (they
are not test dependencies):

    python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install torch transformers
    /tmp/refenv/bin/python scripts/gen_family_goldens.py [OUT_DIR]

OUT_DIR defaults to tests/golden/data/families. New families go at the end of FAMILIES (each
family's seed and prompts follow from its position). For each family it writes OUT_DIR/<name>/:
  config.json, model.safetensors   save_pretrained of the seeded random model, float32
  golden.json                       the prompts (token ids), the shape of each prompt's logits in
                                    logits.f32, and 32 greedy continuation ids of the last prompt
  logits.f32                        teacher-forced logits of every prompt at every position,
                                    float32 little-endian, prompts one after the other, [len, vocab]
The forward pass is float32 with eager attention. Greedy decoding is argmax of each step's logits
(torch.argmax: the first maximum, i.e. the lowest id on ties), one token at a time without a cache.
tests/golden/families_test.cc compares kiln with these files, from the folders and from their GGUF
conversions. Deterministic: the same files on every run with the same torch / transformers.
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 256
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, bos_token_id=1,
              eos_token_id=2, pad_token_id=0)
# name -> (model_type, extra config). Each differs from plain Llama in what its family adds.
FAMILIES = {
    "llama": ("llama", dict(tie_word_embeddings=False, rope_theta=10000.0)),
    # Llama 3.1 / 3.2's frequency scaling (rope_type llama3), with an original context short enough
    # that the scaled and unscaled bands both occur at head_dim 8.
    "llama3-rope": ("llama", dict(tie_word_embeddings=True, rope_theta=500000.0,
                                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
    # A sliding window shorter than the prompts, so that it matters.
    "mistral": ("mistral", dict(tie_word_embeddings=False, sliding_window=8, head_dim=8)),
    "qwen2": ("qwen2", dict(tie_word_embeddings=True, rope_theta=1000000.0)),  # q/k/v biases
    "qwen3": ("qwen3", dict(tie_word_embeddings=True, head_dim=8, rope_theta=1000000.0)),  # q/k RMSNorm
    # Gemma 3 text: GeGLU, (1 + w) norms before and after each block, q/k norms, embeddings times
    # sqrt(hidden), a query_pre_attn_scalar other than head_dim, a sliding layer (window shorter than
    # the prompts, base 10000) then a global one (base 1e6, linear scaling), head_dim * heads != hidden.
    "gemma3": ("gemma3_text", dict(tie_word_embeddings=True, head_dim=16, query_pre_attn_scalar=12, sliding_window=8,
                                   layer_types=["sliding_attention", "full_attention"],
                                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                    "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                       "rope_theta": 1000000.0}})),
    # Phi-3: fused qkv_proj / gate_up_proj; LongRoPE's short factors with the attention factor
    # transformers derives (max / original = 2), within the original context of 64.
    "phi3": ("phi3", dict(tie_word_embeddings=False, rope_theta=10000.0, original_max_position_embeddings=64,
                          rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.3, 2.1, 3.7],
                                        "long_factor": [1.5, 4.0, 9.0, 17.0]})),
    # ... and its long factors: with an original context of 1 every prompt longer than one token is
    # "long" for transformers, and position 0 rotates by angle 0 under either table, so kiln's
    # per-position choice gives the same; an explicit attention_factor.
    "phi3-long": ("phi3", dict(tie_word_embeddings=False, rope_theta=10000.0, original_max_position_embeddings=1,
                               sliding_window=12,
                               rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.3, 2.1, 3.7],
                                             "long_factor": [1.5, 4.0, 9.0, 17.0], "attention_factor": 1.25})),
    # Gemma 2: Gemma 3's blocks without q/k norms or a local RoPE base, with soft-capping of the
    # attention scores and the final logits small enough to bend them.
    "gemma2": ("gemma2", dict(tie_word_embeddings=True, head_dim=16, query_pre_attn_scalar=12, sliding_window=8,
                              attn_logit_softcapping=3.0, final_logit_softcapping=5.0, rope_theta=10000.0)),
    # Mixtures of experts (extra keys override COMMON's). Mixtral: top-2 of 4, the chosen softmax
    # weights renormalized, each expert's width intermediate_size.
    "mixtral": ("mixtral", dict(tie_word_embeddings=False, intermediate_size=32, num_local_experts=4,
                                num_experts_per_tok=2, rope_theta=1000000.0)),
    # Qwen2-MoE: q/k/v biases, experts of moe_intermediate_size, a shared expert behind its sigmoid
    # gate, norm_topk_prob off (the softmax weights as they are).
    "qwen2-moe": ("qwen2_moe", dict(tie_word_embeddings=False, num_experts=4, num_experts_per_tok=2,
                                    moe_intermediate_size=16, shared_expert_intermediate_size=24,
                                    norm_topk_prob=False, rope_theta=1000000.0)),
    # Qwen3-MoE: per-head q/k norms, top-3 of 8 renormalized.
    "qwen3-moe": ("qwen3_moe", dict(tie_word_embeddings=True, head_dim=8, num_experts=8, num_experts_per_tok=3,
                                    moe_intermediate_size=16, norm_topk_prob=True, rope_theta=1000000.0)),
    # OLMoE: q/k RMSNorm over the whole projection (all heads at once), top-2 of 4 not renormalized.
    "olmoe": ("olmoe", dict(tie_word_embeddings=False, intermediate_size=16, num_experts=4, num_experts_per_tok=2,
                            norm_topk_prob=False)),
    # gpt-oss: attention sinks, a sliding layer (window shorter than the prompts) then a full one,
    # YaRN RoPE (factor 4 over an original context of 16, ramp ends not rounded), biased q/k/v/o,
    # router and experts (input-major, gate and up interleaved), the clamped SwiGLU with a limit low
    # enough that the clamps act.
    "gpt-oss": ("gpt_oss", dict(tie_word_embeddings=False, head_dim=8, intermediate_size=32, num_local_experts=4,
                                num_experts_per_tok=2, sliding_window=8, layer_types=["sliding_attention",
                                                                                      "full_attention"],
                                swiglu_limit=1.0, attention_bias=True,
                                rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0,
                                                 "original_max_position_embeddings": 16, "beta_fast": 32.0,
                                                 "beta_slow": 1.0, "truncate": False})),
}
PROMPT_LENS = [1, 7, 19]
GREEDY = 32


def build(model_type, extra, seed):
    cfg = AutoConfig.for_model(model_type, **{**COMMON, **extra})
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    # from_config's init is small (std 0.02) and leaves norms at 1 and biases at 0: give every tensor
    # seeded values of a size that makes logits differ clearly, so that a wrong op shows.
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5))
    return model.eval()


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "golden", "data", "families")
    rng = np.random.default_rng(20261204)
    for i, (name, (model_type, extra)) in enumerate(FAMILIES.items()):
        d = os.path.join(out_dir, name)
        os.makedirs(d, exist_ok=True)
        model = build(model_type, extra, 1000 + i)
        model.save_pretrained(d, safe_serialization=True)
        prompts = [rng.integers(3, VOCAB, size=n).tolist() for n in PROMPT_LENS]
        blobs = []
        with torch.no_grad():
            for ids in prompts:
                logits = model(torch.tensor([ids])).logits[0].float().numpy()  # [len, vocab]
                blobs.append(np.ascontiguousarray(logits, dtype="<f4"))
            seq = list(prompts[-1])
            greedy = []
            for _ in range(GREEDY):
                nxt = int(torch.argmax(model(torch.tensor([seq])).logits[0, -1]))
                greedy.append(nxt)
                seq.append(nxt)
        with open(os.path.join(d, "logits.f32"), "wb") as f:
            for b in blobs:
                f.write(b.tobytes())
        golden = {
            "source": f"transformers {transformers.__version__}, torch {torch.__version__}, float32, eager",
            "model_type": model_type, "prompts": prompts, "logits_shapes": [list(b.shape) for b in blobs],
            "greedy_prompt": len(prompts) - 1, "greedy": greedy,
        }
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1)
            f.write("\n")
        for extra_file in ("generation_config.json",):
            p = os.path.join(d, extra_file)
            if os.path.exists(p):
                os.remove(p)  # not needed by the test; keeps the folder to what it reads
        print(f"{name}: {model_type}, {sum(p.numel() for p in model.parameters())} parameters -> {d}")


if __name__ == "__main__":
    main()
