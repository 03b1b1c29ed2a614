// Tiny random Llama-family checkpoints built in memory, for model tests: every tensor a config
// needs, weight matrices in F32 or BF16 (normal, sd `scale`) or Q8_0 / Q4_0 / Q4_1 (random quants, small fp16
// block scales), norms around 1. Not a trained model: for structural checks (prefill vs decode,
// allocation counts), never for accuracy.
#pragma once

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/numeric.h"
#include "loader/checkpoint.h"
#include "loader/layer_tensors.h"

namespace kiln::test {

using core::DType;
using loader::Checkpoint;
using loader::ModelConfig;

struct RandomCheckpoint {
    Checkpoint ck;
    std::mt19937 rng{42};

    void add(const std::string& name, std::vector<uint64_t> shape, DType dtype = DType::kF32, float scale = 0.2f,
             float offset = 0.0f) {
        uint64_t n = 1;
        for (uint64_t d : shape) n *= d;
        auto buf = std::make_shared<std::vector<uint8_t>>(*core::dtype_bytes(dtype, n));
        std::normal_distribution<float> dist(0.0f, scale);
        if (dtype == DType::kF32) {
            for (uint64_t i = 0; i < n; ++i) {
                float v = offset + dist(rng);
                std::memcpy(buf->data() + 4 * i, &v, 4);
            }
        } else if (dtype == DType::kBF16) {
            for (uint64_t i = 0; i < n; ++i) {
                const uint16_t v = core::f32_to_bf16(offset + dist(rng));
                std::memcpy(buf->data() + 2 * i, &v, 2);
            }
        } else {  // q8_0 / q4_0 / q4_1: random quants, small f16 scales
            const auto& info = core::dtype_info(dtype);
            for (uint8_t& b : *buf) b = uint8_t(rng());
            for (size_t off = 0; off < buf->size(); off += info.block_bytes) {
                uint16_t h = core::f32_to_fp16(dtype == DType::kQ8_0 ? 0.004f : 0.03f);
                std::memcpy(buf->data() + off, &h, 2);
                if (dtype == DType::kQ4_1) {  // the block's minimum: centres the values near 0
                    const uint16_t mn = core::f32_to_fp16(-0.2f);
                    std::memcpy(buf->data() + off + 2, &mn, 2);
                }
            }
        }
        loader::TensorRef t;
        t.name = name;
        t.dtype = dtype;
        t.shape = shape;
        t.data = buf->data();
        t.num_bytes = buf->size();
        ck.tensors.push_back(t);
        ck.owners.push_back(buf);
    }

    // Every tensor of c; `mat` is the dtype of the weight matrices, `emb` of token_embd.
    void build(const ModelConfig& c, DType mat = DType::kF32, DType emb = DType::kF32) {
        ck.path = "random-" + c.arch;
        ck.format = "gguf";
        ck.config = c;
        const uint64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), F = c.intermediate_size;
        add("token_embd.weight", {uint64_t(c.vocab_size), H}, emb, 1.0f);
        add("output_norm.weight", {H}, DType::kF32, 0.1f, 1.0f);
        if (!c.tie_word_embeddings) add("output.weight", {uint64_t(c.vocab_size), H}, mat);
        for (int64_t l = 0; l < c.num_layers; ++l) {
            const std::string p = "blk." + std::to_string(l) + ".";
            add(p + "attn_norm.weight", {H}, DType::kF32, 0.1f, 1.0f);
            add(p + "ffn_norm.weight", {H}, DType::kF32, 0.1f, 1.0f);
            add(p + "attn_q.weight", {Q, H}, mat);
            add(p + "attn_k.weight", {KV, H}, mat);
            add(p + "attn_v.weight", {KV, H}, mat);
            add(p + "attn_output.weight", {H, Q}, mat);
            if (!c.moe()) {
                add(p + "ffn_gate.weight", {F, H}, mat);
                add(p + "ffn_up.weight", {F, H}, mat);
                add(p + "ffn_down.weight", {H, F}, mat);
            }
            if (c.attention_bias) {
                add(p + "attn_q.bias", {Q}, DType::kF32, 0.5f);
                add(p + "attn_k.bias", {KV}, DType::kF32, 0.5f);
                add(p + "attn_v.bias", {KV}, DType::kF32, 0.5f);
            }
            if (c.has_output_bias()) add(p + "attn_output.bias", {H}, DType::kF32, 0.5f);
            if (c.qk_norm) {
                add(p + "attn_q_norm.weight", {uint64_t(c.head_dim)}, DType::kF32, 0.2f, 1.0f);
                add(p + "attn_k_norm.weight", {uint64_t(c.head_dim)}, DType::kF32, 0.2f, 1.0f);
            }
        }
        if (!c.moe()) return;
        // A mixture of experts' tensors (loader::checkpoint_tensors names them): the router in f32
        // with a wide spread (distinct choices per token), the experts and the shared expert in `mat`,
        // the shared expert's gate a vector.
        for (const loader::TensorSpec& t : loader::checkpoint_tensors(c)) {
            if (t.name.find(".ffn_") == std::string::npos || t.name.find("ffn_norm") != std::string::npos) continue;
            const bool router = t.name.find("ffn_gate_inp.") != std::string::npos;
            if (t.matrix) add(t.name, t.shape, router ? DType::kF32 : mat, router ? 1.0f : 0.2f);
            else add(t.name, t.shape, DType::kF32, 0.5f);
        }
    }
};

// 2 layers, hidden 64, 4 heads of 16 (2 KV heads), FFN 96, vocab 97, context 64.
inline ModelConfig tiny_config(const std::string& arch) {
    ModelConfig c;
    c.arch = arch;
    c.vocab_size = 97;
    c.hidden_size = 64;
    c.intermediate_size = 96;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 16;
    c.max_seq_len = 64;
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
    return c;
}

}  // namespace kiln::test
