// Pearson's chi-square goodness-of-fit test for the sampling tests: observed counts against exact
// probabilities, bins with an expected count below 5 merged into one.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

namespace kiln::test {

struct ChiSquare {
    double statistic = 0;
    int dof = 0;
    double p_value = 1;  // upper tail; Wilson-Hilferty's normal approximation of the chi-square law
};

// probs: exact probability of each outcome (summing to 1); counts: how often each was observed
// (an outcome missing from probs counts against the fit in the merged bin).
inline ChiSquare chi_square(const std::map<int32_t, double>& probs, const std::map<int32_t, int64_t>& counts) {
    int64_t n = 0;
    for (const auto& [id, c] : counts) n += c;
    double stat = 0, rest_expected = 0;
    int64_t rest_observed = 0;
    int bins = 0;
    for (const auto& [id, p] : probs) {
        const double e = p * double(n);
        const auto it = counts.find(id);
        const int64_t o = it == counts.end() ? 0 : it->second;
        if (e < 5) {
            rest_expected += e;
            rest_observed += o;
            continue;
        }
        stat += (double(o) - e) * (double(o) - e) / e;
        ++bins;
    }
    for (const auto& [id, c] : counts)
        if (!probs.count(id)) rest_observed += c;
    if (rest_expected > 0 || rest_observed > 0) {
        const double e = std::max(rest_expected, 1e-9);
        stat += (double(rest_observed) - e) * (double(rest_observed) - e) / e;
        ++bins;
    }
    ChiSquare r;
    r.statistic = stat;
    r.dof = std::max(1, bins - 1);
    const double k = r.dof;
    const double z = (std::cbrt(stat / k) - (1 - 2 / (9 * k))) / std::sqrt(2 / (9 * k));
    r.p_value = 0.5 * std::erfc(z / std::sqrt(2.0));
    return r;
}

}  // namespace kiln::test
