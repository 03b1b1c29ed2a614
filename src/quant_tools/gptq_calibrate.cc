// gptq_calibrate: per layer, the Hessians of its projection inputs (four; in a mixture of experts two
// per expert, over the tokens routed to it), factored once each; in sequential mode the layer's
// weights are then GPTQ-quantized into the copy the next passes run.
#include "quant_tools/gptq_calibrate.h"

#include <utility>

#include "model/cpu_model.h"

namespace kiln::quant_tools {

core::Result<GptqFactors> gptq_calibrate(const Checkpoint& checkpoint, const std::vector<int32_t>& tokens,
                                         const GptqCalibrateOptions& o, core::ThreadPool* pool) {
    if (tokens.empty()) return core::error(core::StatusCode::kInvalidArgument) << "GPTQ needs calibration text";
    const ModelConfig& c = checkpoint.config;
    const int64_t num_layers = c.num_layers;
    std::vector<std::pair<LinearInput, std::vector<std::string>>> inputs = {
        {LinearInput::kQkv, {"attn_q", "attn_k", "attn_v"}}, {LinearInput::kAttnOut, {"attn_output"}}};
    if (!c.moe()) {
        inputs.push_back({LinearInput::kGateUp, {"ffn_gate", "ffn_up"}});
        inputs.push_back({LinearInput::kDown, {"ffn_down"}});
    } else if (c.shared_expert_intermediate_size > 0) {  // the shared expert reads the layer's MLP input
        inputs.push_back({LinearInput::kGateUp, {"ffn_gate_shexp", "ffn_up_shexp"}});
    }
    CalibrationOptions co = o.calibration;
    co.max_seq_tokens = 0;
    Checkpoint run = checkpoint;  // sequential: the layers done so far hold their GPTQ weights
    std::vector<LayerActivations> acts;
    // Sequential: per calibration chunk, the residual stream entering layer l (the earlier layers
    // quantized), carried from layer to layer so that each layer runs twice in all (once to
    // collect its inputs, once quantized to move the stream on), not once per later layer.
    std::vector<std::vector<float>> streams;
    GptqFactors out;
    for (int64_t l = 0; l < num_layers; ++l) {
        if (l == 0 || o.sequential) {
            co.layer = o.sequential ? l : -1;
            const int64_t passes = o.sequential ? num_layers : 1, pass = o.sequential ? l : 0;
            auto progress = [&](int64_t d, int64_t t) {
                if (o.progress) o.progress("calibrate", pass * t + d, passes * t);
            };
            if (o.sequential) {
                KILN_ASSIGN_OR_RETURN(std::unique_ptr<CpuModel> model, CpuModel::create(run, pool));
                if (l > 0) {  // the streams through layer l - 1, which now holds its GPTQ weights
                    CalibrationOptions move_on = co;
                    move_on.layer = l - 1;
                    move_on.max_samples = 1;
                    move_on.resume = &streams;
                    KILN_RETURN_IF_ERROR(collect_activations(*model, tokens, move_on).status());
                }
                std::vector<std::vector<float>> entering = streams;  // this pass moves its copy past layer l
                co.resume = &entering;
                KILN_ASSIGN_OR_RETURN(acts, collect_activations(*model, tokens, co, progress));
                co.resume = nullptr;
            } else {
                KILN_ASSIGN_OR_RETURN(acts, collect_activations(run, tokens, pool, co, progress));
            }
        }
        LayerActivations& a = acts[size_t(l)];
        // Each input's sample and the weights that read it: the layer's inputs, then (MoE) each
        // expert's gate/up and down inputs, the shared expert's down input.
        struct Sample {
            std::vector<float>* x;
            int64_t rows, cols;
            std::vector<std::string> members;
            bool expert;  // too few rows: no factor (the writer rounds it to nearest)
        };
        std::vector<Sample> samples;
        for (const auto& [input, members] : inputs) {
            const size_t k = size_t(input);
            samples.push_back({&a.x[k], a.rows[k], a.cols[k], members, false});
        }
        if (c.moe()) {
            a.experts.resize(size_t(c.num_experts + 1));
            if (c.shared_expert_intermediate_size > 0) {
                auto& s = a.experts[0][1];
                samples.push_back({&s.x, s.rows, s.cols, {"ffn_down_shexp"}, false});
            }
            for (int64_t e = 0; e < c.num_experts; ++e) {
                const std::string id = std::to_string(e);
                auto& gu = a.experts[size_t(e + 1)][0];
                auto& dn = a.experts[size_t(e + 1)][1];
                samples.push_back({&gu.x, gu.rows, gu.cols, {"ffn_gate." + id, "ffn_up." + id}, true});
                samples.push_back({&dn.x, dn.rows, dn.cols, {"ffn_down." + id}, true});
            }
        }
        for (const Sample& smp : samples) {
            if (smp.expert && smp.rows < o.min_expert_rows) continue;
            if (smp.rows == 0)
                return core::error(core::StatusCode::kInvalidArgument) << "GPTQ: no calibration rows for layer " << l;
            const int64_t cols = smp.cols;
            const std::vector<double> h = quant::gptq_hessian(*smp.x, smp.rows, cols, pool);  // [in, in]
            KILN_ASSIGN_OR_RETURN(quant::GptqFactor f, quant::gptq_factor(h, cols, 0.01, o.act_order));
            auto factor = std::make_shared<const quant::GptqFactor>(std::move(f));
            *smp.x = std::vector<float>();  // the samples are done with
            for (const std::string& member : smp.members) {
                const std::string name = "blk." + std::to_string(l) + "." + member + ".weight";
                out[name] = factor;
                if (!o.sequential || l + 1 == num_layers || (o.skipped && o.skipped(name))) continue;
                TensorRef* t = nullptr;
                for (TensorRef& r : run.tensors)
                    if (r.name == name) t = &r;
                if (t == nullptr || t->dtype != core::DType::kF32 || t->num_elements() % uint64_t(cols) != 0)
                    return core::error(core::StatusCode::kInvalidArgument) << "GPTQ: no f32 weight '" << name << "'";
                const int64_t rows = int64_t(t->num_elements()) / cols;
                const std::span<const float> w(reinterpret_cast<const float*>(t->data), size_t(rows * cols));
                KILN_ASSIGN_OR_RETURN(quant::Int4Matrix q,
                                      quant::gptq_quantize_int4(w, rows, cols, *factor, o.gptq, pool));
                auto deq = std::make_shared<std::vector<float>>(quant::dequantize(q));
                t->data = reinterpret_cast<const uint8_t*>(deq->data());
                run.owners.push_back(deq);
            }
        }
        if (o.progress) o.progress("gptq", l + 1, num_layers);
    }
    return out;
}

}  // namespace kiln::quant_tools
