// measure_quant_numerics: per projection, W -> compress_weight -> decompress_weight -> f32 W', then
// weight error sums in double and, with calibration samples X, the output error through the f32
// Linear kernels (X W^T and X (W - W')^T; the difference is formed on the weights, so no
// cancellation between two nearly equal outputs).
#include "quant_tools/quant_numerics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

#include "kernels/ref/dequant.h"
#include "model/cpu_model.h"
#include "ops/linear.h"

namespace kiln::quant_tools {
namespace {

using core::StatusCode;

struct Projection {
    const char* name;  // kiln name after "blk.N."
    LinearInput input;
};
constexpr Projection kProjections[] = {
    {"attn_q.weight", LinearInput::kQkv},      {"attn_k.weight", LinearInput::kQkv},
    {"attn_v.weight", LinearInput::kQkv},      {"attn_output.weight", LinearInput::kAttnOut},
    {"ffn_gate.weight", LinearInput::kGateUp}, {"ffn_up.weight", LinearInput::kGateUp},
    {"ffn_down.weight", LinearInput::kDown}};

struct Job {
    const TensorRef* tensor = nullptr;
    int64_t layer = 0;
    LinearInput input = LinearInput::kQkv;
};

double sqnr_db(double signal, double noise) {
    if (noise == 0) return std::numeric_limits<double>::infinity();
    if (signal == 0) return -std::numeric_limits<double>::infinity();
    return 10.0 * std::log10(signal / noise);
}

// W in the row order kiln quantize writes (HF: Q/K rows rotate-half), so that block scales spanning
// several rows (fp8-block) group the same rows as in a written checkpoint.
core::Result<std::vector<float>> written_order(const TensorRef& t, const ModelConfig& config) {
    const size_t n = size_t(t.num_elements());
    const float* src = reinterpret_cast<const float*>(t.data);
    std::vector<float> w(n);
    const int64_t heads = rope_permute_heads(t.name, config);
    if (heads == 0) {
        std::copy_n(src, n, w.data());
        return w;
    }
    KILN_RETURN_IF_ERROR(loader::permute_rope_rows(t.data, reinterpret_cast<uint8_t*>(w.data()), t.shape[0],
                                           t.shape[1] * sizeof(float), uint64_t(heads), loader::RopeOrder::kRotateHalf));
    return w;
}

// W' as kiln runs it: written with compress_weight, loaded with decompress_weight, decoded to f32.
core::Result<std::vector<float>> round_trip(const loader::QuantScheme& scheme, const std::string& module,
                                            const std::vector<float>& w, int64_t rows, int64_t cols) {
    std::vector<formats::SafetensorsTensorIn> written;
    std::vector<std::shared_ptr<const void>> owners;
    KILN_RETURN_IF_ERROR(loader::compress_weight(scheme, module, w, rows, cols, &written, &owners));
    std::map<std::string, loader::TensorPart> parts;
    for (const formats::SafetensorsTensorIn& t : written) {
        if (!t.name.starts_with(module + "."))
            return core::error(StatusCode::kInternal) << "loader::compress_weight wrote '" << t.name << "'";
        parts[t.name.substr(module.size() + 1)] = {t.dtype, t.shape, static_cast<const uint8_t*>(t.data), t.num_bytes};
    }
    const loader::CompressedConfig config{scheme, {}};
    KILN_ASSIGN_OR_RETURN(TensorRef runtime, loader::decompress_weight(config, module, parts, &owners));
    if (runtime.shape != std::vector<uint64_t>{uint64_t(rows), uint64_t(cols)})
        return core::error(StatusCode::kInternal) << "loader::decompress_weight returned another shape";
    std::vector<float> wq(w.size());
    KILN_RETURN_IF_ERROR(loader::dequantize_tensor_to(runtime, wq.data()));
    return wq;
}

// ||X W^T - X W'^T||_F / ||X W^T||_F with d = W - W' ([rows, cols] each) and x [n, cols].
core::Result<double> output_rel_error(const std::vector<float>& w, const std::vector<float>& d, int64_t rows,
                                      int64_t cols, const std::vector<float>& x, int64_t n, core::ThreadPool& pool) {
    KILN_ASSIGN_OR_RETURN(
        ops::Linear lw, ops::make_linear(kernels::ref::make_weight_view(w.data(), core::DType::kF32, rows, cols), {}));
    KILN_ASSIGN_OR_RETURN(
        ops::Linear ld, ops::make_linear(kernels::ref::make_weight_view(d.data(), core::DType::kF32, rows, cols), {}));
    constexpr int64_t kTile = 64;  // sample rows per call: bounds the [tile, rows] outputs
    std::vector<float> y(size_t(kTile * rows)), e(size_t(kTile * rows));
    std::vector<uint8_t> scratch;
    double signal = 0, noise = 0;
    for (int64_t s = 0; s < n; s += kTile) {
        const int64_t m = std::min(kTile, n - s);
        const float* xs = x.data() + s * cols;
        KILN_RETURN_IF_ERROR(ops::linear(pool, xs, m, lw, nullptr, y.data(), scratch));
        KILN_RETURN_IF_ERROR(ops::linear(pool, xs, m, ld, nullptr, e.data(), scratch));
        for (int64_t i = 0; i < m * rows; ++i) {
            signal += double(y[size_t(i)]) * y[size_t(i)];
            noise += double(e[size_t(i)]) * e[size_t(i)];
        }
    }
    if (signal == 0) return noise == 0 ? 0.0 : std::numeric_limits<double>::infinity();
    return std::sqrt(noise / signal);
}

struct Sums {
    double signal = 0, noise = 0;
};

core::Result<TensorNumerics> measure_one(const Job& job, const ModelConfig& config, const loader::QuantScheme& scheme,
                                         const std::vector<LayerActivations>* acts, core::ThreadPool& pool,
                                         Sums* sums) {
    const TensorRef& t = *job.tensor;
    if (t.dtype != core::DType::kF32 || t.shape.size() != 2)
        return core::error(StatusCode::kInvalidArgument)
               << "'" << t.name << "' is " << core::dtype_name(t.dtype)
               << "; measure_quant_numerics needs an f32 matrix (loader::to_f32_checkpoint)";
    const int64_t rows = int64_t(t.shape[0]), cols = int64_t(t.shape[1]);
    std::string module = loader::gguf_to_hf_name(t.name).value_or(t.name);  // model.layers.N.self_attn.q_proj.weight
    if (module.ends_with(".weight")) module.resize(module.size() - 7);
    KILN_ASSIGN_OR_RETURN(std::vector<float> w, written_order(t, config));
    auto wq = round_trip(scheme, module, w, rows, cols);
    if (!wq.is_ok()) return core::error(wq.status().code()) << t.name << ": " << wq.status().message();

    TensorNumerics r;
    r.name = t.name;
    r.rows = rows;
    r.cols = cols;
    std::vector<float> d(w.size());  // W - W'
    for (size_t i = 0; i < w.size(); ++i) {
        d[i] = w[i] - (*wq)[i];
        sums->signal += double(w[i]) * w[i];
        sums->noise += double(d[i]) * d[i];
        r.max_abs_error = std::max(r.max_abs_error, double(std::fabs(d[i])));
    }
    r.sqnr_db = sqnr_db(sums->signal, sums->noise);
    r.rel_error = sums->signal > 0 ? std::sqrt(sums->noise / sums->signal)
                                   : (sums->noise > 0 ? std::numeric_limits<double>::infinity() : 0.0);
    if (acts) {
        const LayerActivations& a = (*acts)[size_t(job.layer)];
        const size_t k = size_t(job.input);
        if (a.rows[k] > 0) {
            if (a.cols[k] != cols || int64_t(a.x[k].size()) != a.rows[k] * cols)
                return core::error(StatusCode::kInvalidArgument)
                       << t.name << ": calibration inputs have " << a.cols[k] << " columns, the weight " << cols;
            KILN_ASSIGN_OR_RETURN(r.output_rel_error, output_rel_error(w, d, rows, cols, a.x[k], a.rows[k], pool));
        }
    }
    return r;
}

NumericsSummary summarize(const std::vector<TensorNumerics>& tensors, const std::vector<Sums>& sums) {
    NumericsSummary s;
    double weighted_sqnr = 0, signal = 0, noise = 0, weighted_out = 0;
    int64_t out_params = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const TensorNumerics& t = tensors[i];
        const int64_t n = t.rows * t.cols;
        ++s.num_tensors;
        s.num_params += n;
        weighted_sqnr += t.sqnr_db * double(n);
        signal += sums[i].signal;
        noise += sums[i].noise;
        if (s.worst_tensor.empty() || t.sqnr_db < s.worst_sqnr_db) {
            s.worst_sqnr_db = t.sqnr_db;
            s.worst_tensor = t.name;
        }
        if (!std::isnan(t.output_rel_error)) {
            weighted_out += t.output_rel_error * double(n);
            out_params += n;
            if (s.worst_output_tensor.empty() || t.output_rel_error > s.worst_output_rel_error) {
                s.worst_output_rel_error = t.output_rel_error;
                s.worst_output_tensor = t.name;
            }
        }
    }
    if (s.num_params > 0) s.mean_sqnr_db = weighted_sqnr / double(s.num_params);
    s.total_sqnr_db = sqnr_db(signal, noise);
    if (out_params > 0) s.mean_output_rel_error = weighted_out / double(out_params);
    return s;
}

}  // namespace

core::Result<NumericsReport> measure_quant_numerics(const Checkpoint& checkpoint, const loader::QuantScheme& scheme,
                                                    const std::vector<LayerActivations>* activations,
                                                    core::ThreadPool* pool) {
    const ModelConfig& c = checkpoint.config;
    if (activations && int64_t(activations->size()) != c.num_layers)
        return core::error(StatusCode::kInvalidArgument)
               << "calibration activations cover " << activations->size() << " layers; the model has " << c.num_layers;
    std::vector<Job> jobs;
    for (int64_t l = 0; l < c.num_layers; ++l)
        for (const Projection& p : kProjections) {
            const TensorRef* t = checkpoint.find("blk." + std::to_string(l) + "." + p.name);
            if (t) jobs.push_back({t, l, p.input});
        }
    if (jobs.empty())
        return core::error(StatusCode::kInvalidArgument) << checkpoint.path << ": no projection weights to measure";

    std::unique_ptr<core::ThreadPool> own_pool;
    if (!pool) {
        own_pool = std::make_unique<core::ThreadPool>(1);
        pool = own_pool.get();
    }
    NumericsReport report;
    report.scheme = scheme;
    report.tensors.resize(jobs.size());
    std::vector<Sums> sums(jobs.size());
    std::vector<core::Status> status(jobs.size());
    // One tensor per task; the Linear calls inside run serially on their thread (nested parallel_for).
    pool->parallel_for(int64_t(jobs.size()), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            auto r = measure_one(jobs[size_t(i)], c, scheme, activations, *pool, &sums[size_t(i)]);
            if (r.is_ok())
                report.tensors[size_t(i)] = std::move(*r);
            else
                status[size_t(i)] = r.status();
        }
    });
    for (const core::Status& st : status)
        if (!st.is_ok()) return st;
    report.summary = summarize(report.tensors, sums);
    return report;
}

}  // namespace kiln::quant_tools
