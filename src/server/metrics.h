// Prometheus metrics of `kiln serve` (text exposition format 0.0.4): the engine's gauges and
// counters (from kiln::EngineStats at scrape time) plus the server's own request counters and
// latency histograms. Thread-safe: handlers record from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/engine.h"

namespace kiln::server {

// A cumulative histogram with fixed upper bounds (seconds).
class Histogram {
public:
    explicit Histogram(std::vector<double> bounds);
    void observe(double v);
    // The `name_bucket`, `name_sum` and `name_count` lines.
    void render(const std::string& name, const std::string& help, std::string* out) const;

private:
    std::vector<double> bounds_;
    std::vector<int64_t> counts_;  // one per bound, plus +Inf
    double sum_ = 0;
    int64_t count_ = 0;
};

class Metrics {
public:
    Metrics();
    // One finished HTTP request of `endpoint` ("/v1/completions", ...) with `status`.
    void record_request(const std::string& endpoint, int status);
    // A finished generation of n choices: its time to first token (< 0: no token), end-to-end time,
    // tokens (completion_tokens over all choices). TPOT = (e2e - ttft) / (tokens per choice - 1).
    void record_generation(double ttft_s, double e2e_s, int64_t prompt_tokens, int64_t completion_tokens, int n = 1);
    void record_client_abort();
    std::string render(const EngineStats& s, int64_t requests_in_flight) const;

private:
    mutable std::mutex mu_;
    std::map<std::pair<std::string, int>, int64_t> requests_;
    int64_t client_aborts_ = 0;
    int64_t server_prompt_tokens_ = 0, server_completion_tokens_ = 0;
    Histogram ttft_, tpot_, e2e_;
};

}  // namespace kiln::server
