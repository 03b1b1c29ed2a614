// collect_activations: one CpuModel (reference fp32 activations) over the calibration tokens in
// chunks, with a linear-input hook that copies the sampled rows.
#include "quant_tools/calibration.h"

#include <algorithm>
#include <cmath>

#include "model/cpu_model.h"

namespace kiln::quant_tools {

core::Result<std::vector<LayerActivations>> collect_activations(const Checkpoint& checkpoint,
                                                                const std::vector<int32_t>& tokens,
                                                                core::ThreadPool* pool,
                                                                const CalibrationOptions& options,
                                                                const std::function<void(int64_t, int64_t)>& progress) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<CpuModel> model, CpuModel::create(checkpoint, pool));
    return collect_activations(*model, tokens, options, progress);
}

core::Result<std::vector<LayerActivations>> collect_activations(CpuModel& m, const std::vector<int32_t>& tokens,
                                                                const CalibrationOptions& options,
                                                                const std::function<void(int64_t, int64_t)>& progress) {
    CpuModel* model = &m;
    if (tokens.empty()) return core::error(core::StatusCode::kInvalidArgument) << "no calibration tokens";
    if (options.max_samples <= 0 || options.chunk_tokens <= 0 || options.max_seq_tokens < 0)
        return core::error(core::StatusCode::kInvalidArgument)
               << "max_samples and chunk_tokens must be > 0, max_seq_tokens >= 0";
    if (options.resume && options.layer < 0)
        return core::error(core::StatusCode::kInvalidArgument) << "resuming needs one calibration layer";
    if (options.layer < -1 || options.layer >= model->config().num_layers)
        return core::error(core::StatusCode::kInvalidArgument)
               << "calibration layer " << options.layer << " is not a layer of the model";
    const int64_t total = int64_t(tokens.size());
    const int64_t chunk = std::min<int64_t>(options.chunk_tokens, model->config().max_seq_len);
    const int64_t stride = std::max<int64_t>(1, (total + options.max_samples - 1) / options.max_samples);
    std::vector<LayerActivations> acts(size_t(model->config().num_layers));
    // Whole sequences: num_seqs chunks at an even stride over the num_chunks chunks, the first
    // seq_len tokens of each (so at most max_seq_tokens rows in all).
    const int64_t num_chunks = (total + chunk - 1) / chunk;
    const int64_t num_seqs =
        options.max_seq_tokens == 0 ? 0 : std::clamp<int64_t>(options.max_seq_tokens / chunk, 1, num_chunks);
    const int64_t seq_len = std::min(chunk, options.max_seq_tokens);
    int64_t next_seq = 0;     // the next of the num_seqs sequences to keep
    int64_t keep_rows = 0;    // rows of the current chunk kept as a sequence (0: none)
    int64_t chunk_start = 0;  // global index of the current chunk's first token
    // The inputs are all it keeps: no output layer, and no layer after the one kept.
    model->set_last_layer(options.layer >= 0 ? options.layer : model->config().num_layers - 1);
    model->set_resume(0, nullptr, nullptr);
    struct Reset {  // the hooks below point into this call's locals
        CpuModel* m;
        ~Reset() {
            m->set_linear_input_hook({});
            m->set_expert_input_hook({});
            m->set_resume(0, nullptr, nullptr);
            m->set_last_layer(-1);
        }
    } reset{model};
    model->set_linear_input_hook(
        [&](int64_t layer, LinearInput which, std::span<const float> x, int64_t rows, int64_t cols) {
            if (options.layer >= 0 && layer != options.layer) return;
            LayerActivations& a = acts[size_t(layer)];
            const size_t k = size_t(which);
            a.cols[k] = cols;
            std::vector<float>& m = a.abs_max[k];
            if (m.empty()) m.assign(size_t(cols), 0.0f);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t j = 0; j < cols; ++j)
                    m[size_t(j)] = std::max(m[size_t(j)], std::fabs(x[size_t(r * cols + j)]));
            // Rows whose global index is a multiple of the stride.
            for (int64_t r = (stride - chunk_start % stride) % stride; r < rows; r += stride) {
                a.x[k].insert(a.x[k].end(), x.begin() + r * cols, x.begin() + (r + 1) * cols);
                ++a.rows[k];
            }
            if (which == LinearInput::kQkv && keep_rows > 0) {
                a.qkv_seq.insert(a.qkv_seq.end(), x.begin(), x.begin() + keep_rows * cols);
                a.seq_lens.push_back(keep_rows);
            }
        });
    model->set_expert_input_hook([&](int64_t layer, int64_t expert, LinearInput which, std::span<const float> x,
                                     int64_t rows, int64_t cols) {
        if (options.layer >= 0 && layer != options.layer) return;
        LayerActivations& a = acts[size_t(layer)];
        if (a.experts.empty()) a.experts.resize(size_t(model->config().num_experts + 1));
        LayerActivations::ExpertSample& s = a.experts[size_t(expert + 1)][which == LinearInput::kDown ? 1 : 0];
        s.cols = cols;
        for (int64_t r = 0; r < rows; ++r, ++s.seen) {
            if (s.seen % s.stride != 0) continue;
            s.x.insert(s.x.end(), x.begin() + r * cols, x.begin() + (r + 1) * cols);
            if (++s.rows <= 2 * options.max_samples) continue;
            // Keep every other sampled row (those at multiples of twice the stride), and go on at that stride.
            for (int64_t i = 0; i < s.rows / 2 + s.rows % 2; ++i)
                std::copy_n(s.x.begin() + 2 * i * cols, cols, s.x.begin() + i * cols);
            s.rows = s.rows / 2 + s.rows % 2;
            s.x.resize(size_t(s.rows * cols));
            s.stride *= 2;
        }
    });
    for (; chunk_start < total; chunk_start += chunk) {
        const int64_t n = std::min(chunk, total - chunk_start);
        keep_rows = 0;
        if (next_seq < num_seqs && chunk_start / chunk == next_seq * num_chunks / num_seqs) {
            keep_rows = std::min(n, seq_len);
            ++next_seq;
        }
        KvCache cache(model->config(), n);
        std::vector<int32_t> part(tokens.begin() + chunk_start, tokens.begin() + chunk_start + n);
        if (options.resume) {  // this layer alone, from the chunk's stream (or the embeddings)
            const size_t c = size_t(chunk_start / chunk), want = size_t(n * model->config().hidden_size);
            if (options.resume->size() <= c) options.resume->resize(c + 1);
            std::vector<float>& s = (*options.resume)[c];
            if (s.empty() && options.layer > 0)
                return core::error(core::StatusCode::kInvalidArgument)
                       << "no residual stream to resume layer " << options.layer << " from";
            if (s.empty()) {  // layer 0 from the embeddings: the stream leaving it still comes back
                s.assign(want, 0.0f);
                model->set_resume(0, nullptr, s.data());
            } else {
                if (s.size() != want) return core::error(core::StatusCode::kInvalidArgument) << "a resumed stream's size";
                model->set_resume(options.layer, s.data(), s.data());
            }
        }
        KILN_ASSIGN_OR_RETURN(std::vector<float> logits, model->forward(part, cache, false));
        (void)logits;
        if (progress) progress(std::min(total, chunk_start + n), total);
    }
    return acts;
}

}  // namespace kiln::quant_tools
