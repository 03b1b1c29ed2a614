// Scalar reference transformer ops (see transformer.h). Dots accumulate in fp32 in index order.
#include "kernels/ref/transformer.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/numeric.h"
#include "kernels/ref/dequant.h"
#include "kernels/ref/kv_quant.h"

namespace kiln::kernels::ref {

WeightView make_weight_view(const void* data, core::DType dtype, int64_t rows, int64_t cols) {
    auto bytes = core::dtype_bytes(dtype, uint64_t(cols));
    KILN_CHECK(bytes.has_value() && rows >= 0) << "bad weight view: " << core::dtype_name(dtype) << " cols " << cols;
    return WeightView{data, dtype, rows, cols, size_t(*bytes)};
}

bool weight_view_supported(const WeightView& w) {
    return dequant_supported(w.dtype) || (w.dtype == core::DType::kI8 && w.row_scale != nullptr);
}

void weight_row(const WeightView& w, int64_t row_idx, float* dst) {
    KILN_CHECK(row_idx >= 0 && row_idx < w.rows) << "row " << row_idx << " of " << w.rows;
    const uint8_t* src = static_cast<const uint8_t*>(w.data) + size_t(row_idx) * w.row_bytes;
    if (w.dtype == core::DType::kI8) {
        KILN_CHECK(w.row_scale != nullptr) << "I8 weights without row scales";
        const float s = w.row_scale[row_idx];
        for (int64_t j = 0; j < w.cols; ++j) dst[j] = float(int8_t(src[j])) * s;
        return;
    }
    core::Status st = dequantize_row(w.dtype, src, dst, w.cols);
    KILN_CHECK(st.is_ok()) << st.to_string();
}

void rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const float scale = 1.0f / std::sqrt(ss / float(n) + eps);
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

void matmul_tile(const float* x, const WeightView& w, const float* bias, float* y, int64_t m, int64_t m_begin,
                 int64_t m_end, int64_t n_begin, int64_t n_end) {
    (void)m;
    const int64_t k = w.cols, n = w.rows;
    thread_local std::vector<float> row;  // [K]: one dequantized row of W at a time
    if (int64_t(row.size()) < k) row.resize(size_t(k));
    for (int64_t j = n_begin; j < n_end; ++j) {
        weight_row(w, j, row.data());
        for (int64_t i = m_begin; i < m_end; ++i) {
            const float* xi = x + i * k;
            float acc = 0.0f;
            for (int64_t p = 0; p < k; ++p) acc += xi[p] * row[size_t(p)];
            y[i * n + j] = bias ? acc + bias[j] : acc;
        }
    }
}

void matmul(const float* x, const WeightView& w, const float* bias, float* y, int64_t m) {
    matmul_tile(x, w, bias, y, m, 0, m, 0, w.rows);
}

std::vector<double> rope_inv_freqs(int64_t head_dim, const RopeParams& p) {
    constexpr double kPi = 3.14159265358979323846;
    KILN_CHECK(p.freq_factors.empty() || int64_t(p.freq_factors.size()) == head_dim / 2) << "freq_factors size";
    std::vector<double> inv(size_t(head_dim / 2));
    // YaRN's ramp: dimension d's correction for `rotations` turns over the original context.
    const double dim = double(head_dim), orig = double(p.original_max_position_embeddings);
    auto correction_dim = [&](double rotations) {
        return dim * std::log(orig / (rotations * 2.0 * kPi)) / (2.0 * std::log(p.theta));
    };
    double ramp_lo = 0, ramp_hi = 0;
    if (p.scaling == RopeScalingKind::kYarn) {
        ramp_lo = correction_dim(p.beta_fast), ramp_hi = correction_dim(p.beta_slow);
        if (p.truncate) ramp_lo = std::floor(ramp_lo), ramp_hi = std::ceil(ramp_hi);
        ramp_lo = std::max(ramp_lo, 0.0), ramp_hi = std::min(ramp_hi, dim - 1);
        if (ramp_lo == ramp_hi) ramp_hi += 0.001;  // as transformers: no singularity
    }
    for (int64_t i = 0; i < head_dim / 2; ++i) {
        double f = 1.0 / std::pow(p.theta, double(2 * i) / double(head_dim));
        if (p.scaling == RopeScalingKind::kYarn) {
            const double ramp = std::clamp((double(i) - ramp_lo) / (ramp_hi - ramp_lo), 0.0, 1.0);
            const double extrapolate = 1.0 - ramp;  // 1: theta's frequency, 0: divided by factor
            f = f / p.factor * (1.0 - extrapolate) + f * extrapolate;
        } else if (p.scaling == RopeScalingKind::kLinear) {
            f /= p.factor;
        } else if (p.scaling == RopeScalingKind::kLlama3) {
            const double old_len = double(p.original_max_position_embeddings);
            const double low_freq_wavelen = old_len / p.low_freq_factor;
            const double high_freq_wavelen = old_len / p.high_freq_factor;
            const double wavelen = 2.0 * kPi / f;
            if (wavelen > low_freq_wavelen) {
                f = f / p.factor;
            } else if (wavelen >= high_freq_wavelen) {  // medium band: interpolate
                const double smooth =
                    (old_len / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
                f = (1.0 - smooth) * f / p.factor + smooth * f;
            }
        }
        if (!p.freq_factors.empty()) f /= p.freq_factors[size_t(i)];
        inv[size_t(i)] = f;
    }
    return inv;
}

void rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim, const int32_t* positions,
          std::span<const double> inv_freq) {
    KILN_CHECK(int64_t(inv_freq.size()) == head_dim / 2) << "inv_freq size";
    for (int64_t t = 0; t < num_tokens; ++t) {
        for (int64_t i = 0; i < head_dim / 2; ++i) {
            const double angle = double(positions[t]) * inv_freq[size_t(i)];
            const float c = float(std::cos(angle)), s = float(std::sin(angle));
            for (int64_t h = 0; h < num_heads; ++h) {
                float* v = x + (t * num_heads + h) * head_dim + 2 * i;
                const float a = v[0], b = v[1];
                v[0] = a * c - b * s;
                v[1] = a * s + b * c;
            }
        }
    }
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void softmax(float* x, int64_t n) {
    if (n <= 0) return;
    float mx = x[0];
    for (int64_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void attention_rows(const float* q, const KvSpan& kv, const AttentionShape& s, float* out, int64_t row_begin,
                    int64_t row_end, float* scores) {
    const int64_t hd = s.head_dim, group = s.num_heads / s.num_kv_heads;
    const int64_t row_bytes = kv_row_bytes(kv.dtype, s.num_kv_heads, hd);
    const int64_t first_pos = kv.kv_len - s.num_tokens;
    const float scale = 1.0f / std::sqrt(float(hd));
    auto elem = [&](const void* base, int64_t j, int64_t kvh, int64_t d) {  // element d of head kvh, token j
        return kv_load(kv.dtype, static_cast<const uint8_t*>(base) + kv_row(kv, j) * row_bytes, s.num_kv_heads, hd,
                       kvh, d);
    };
    for (int64_t row = row_begin; row < row_end; ++row) {
        const int64_t t = row / s.num_heads, h = row % s.num_heads, kvh = h / group;
        const int64_t pos = first_pos + t;
        const int64_t j_begin = s.window > 0 ? std::max<int64_t>(0, pos - s.window + 1) : 0;
        const int64_t len = pos + 1 - j_begin;
        const float* qv = q + row * hd;  // [head_dim]
        for (int64_t j = j_begin; j <= pos; ++j) {
            float dot = 0.0f;
            for (int64_t d = 0; d < hd; ++d) dot += qv[d] * elem(kv.k, j, kvh, d);
            scores[j - j_begin] = s.softcap > 0 ? softcap_score(dot * scale, s.softcap) : dot * scale;
        }
        softmax(scores, len);
        float* o = out + row * hd;  // [head_dim]
        for (int64_t d = 0; d < hd; ++d) o[d] = 0.0f;
        for (int64_t j = j_begin; j <= pos; ++j) {
            const float p = scores[j - j_begin];
            for (int64_t d = 0; d < hd; ++d) o[d] += p * elem(kv.v, j, kvh, d);
        }
    }
}

void attention(const float* q, const KvSpan& kv, const AttentionShape& s, float* out) {
    std::vector<float> scores(size_t(std::max<int64_t>(1, kv.kv_len)));
    attention_rows(q, kv, s, out, 0, s.num_tokens * s.num_heads, scores.data());
}

}  // namespace kiln::kernels::ref
