// Metrics and report of `kiln bench serve`: mean, median and p99 of latency samples, with
// percentiles by linear interpolation between closest ranks (numpy.percentile's default, which
// `vllm bench serve` uses, so figures from the two tools are computed the same way), the JSON
// fields of the report and its text table (vllm's layout).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench_serve_client.h"

namespace kiln::tools {

struct LatencySummary {
    double mean = 0, median = 0, p99 = 0;  // 0 when there are no samples
};

// The p-th percentile (p in [0, 100]) of `sorted` (ascending); 0 for an empty vector.
double percentile(const std::vector<double>& sorted, double p);

// Mean, p50 and p99 of `samples` (any order).
LatencySummary summarize_latencies(std::vector<double> samples);

// Adds to `j`: completed, failed, requests, duration_s, total_{input,output}_tokens,
// request_throughput, output_throughput, total_token_throughput, and {mean,median,p99}_{ttft,tpot,
// itl,e2el}_ms over the successful requests `done` (TPOT only over requests with > 1 output token).
void add_serving_metrics(const std::vector<RequestResult>& done, int64_t failed, double wall_s,
                         nlohmann::ordered_json& j);

// The report as a text table on stdout; `j` holds the metrics plus url, endpoint, model and load.
void print_serving_table(const nlohmann::ordered_json& j);

}  // namespace kiln::tools
