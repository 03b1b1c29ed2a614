// gptq_calibrate: per layer, the Hessians of its four projection inputs, factored once each; in
// sequential mode the layer's weights are then GPTQ-quantized into the copy the next passes run.
#include "quant_tools/gptq_calibrate.h"

#include <utility>

#include "model/cpu_model.h"

namespace kiln::quant_tools {

core::Result<GptqFactors> gptq_calibrate(const Checkpoint& checkpoint, const std::vector<int32_t>& tokens,
                                         const GptqCalibrateOptions& o, core::ThreadPool* pool) {
    if (tokens.empty()) return core::error(core::StatusCode::kInvalidArgument) << "GPTQ needs calibration text";
    const int64_t num_layers = checkpoint.config.num_layers;
    const std::pair<LinearInput, std::vector<const char*>> inputs[] = {
        {LinearInput::kQkv, {"attn_q", "attn_k", "attn_v"}},
        {LinearInput::kAttnOut, {"attn_output"}},
        {LinearInput::kGateUp, {"ffn_gate", "ffn_up"}},
        {LinearInput::kDown, {"ffn_down"}}};
    CalibrationOptions co = o.calibration;
    co.max_seq_tokens = 0;
    Checkpoint run = checkpoint;  // sequential: the layers done so far hold their GPTQ weights
    std::vector<LayerActivations> acts;
    GptqFactors out;
    for (int64_t l = 0; l < num_layers; ++l) {
        if (l == 0 || o.sequential) {
            co.layer = o.sequential ? l : -1;
            const int64_t passes = o.sequential ? num_layers : 1, pass = o.sequential ? l : 0;
            KILN_ASSIGN_OR_RETURN(acts, collect_activations(run, tokens, pool, co, [&](int64_t d, int64_t t) {
                                      if (o.progress) o.progress("calibrate", pass * t + d, passes * t);
                                  }));
        }
        LayerActivations& a = acts[size_t(l)];
        for (const auto& [input, members] : inputs) {
            const size_t k = size_t(input);
            if (a.rows[k] == 0)
                return core::error(core::StatusCode::kInvalidArgument) << "GPTQ: no calibration rows for layer " << l;
            const int64_t cols = a.cols[k];
            const std::vector<double> h = quant::gptq_hessian(a.x[k], a.rows[k], cols, pool);  // [in, in]
            KILN_ASSIGN_OR_RETURN(quant::GptqFactor f, quant::gptq_factor(h, cols));
            auto factor = std::make_shared<const quant::GptqFactor>(std::move(f));
            a.x[k] = std::vector<float>();  // the samples are done with
            for (const char* member : members) {
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
