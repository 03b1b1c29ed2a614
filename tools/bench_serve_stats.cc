// Percentiles, metrics and the text report of `kiln bench serve` (see bench_serve_stats.h).
#include "bench_serve_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace kiln::tools {

double percentile(const std::vector<double>& sorted, double p) {
    if (sorted.empty()) return 0;
    const double pos = std::clamp(p, 0.0, 100.0) / 100.0 * double(sorted.size() - 1);
    const size_t lo = size_t(std::floor(pos));
    const size_t hi = std::min(lo + 1, sorted.size() - 1);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - double(lo));
}

LatencySummary summarize_latencies(std::vector<double> samples) {
    LatencySummary s;
    if (samples.empty()) return s;
    std::sort(samples.begin(), samples.end());
    double sum = 0;
    for (double x : samples) sum += x;
    s.mean = sum / double(samples.size());
    s.median = percentile(samples, 50);
    s.p99 = percentile(samples, 99);
    return s;
}

void add_serving_metrics(const std::vector<RequestResult>& done, int64_t failed, double wall_s,
                         nlohmann::ordered_json& j) {
    std::vector<double> ttft, tpot, itl, e2el;
    int64_t in_tokens = 0, out_tokens = 0;
    for (const RequestResult& r : done) {
        in_tokens += r.prompt_tokens;
        out_tokens += r.output_tokens;
        ttft.push_back(r.ttft_ms);
        e2el.push_back(r.e2e_ms);
        if (r.output_tokens > 1) tpot.push_back((r.e2e_ms - r.ttft_ms) / double(r.output_tokens - 1));
        itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    }
    const int64_t completed = int64_t(done.size());
    const double wall = wall_s > 0 ? wall_s : 1e-9;
    j["requests"] = completed + failed;
    j["completed"] = completed;
    j["failed"] = failed;
    j["duration_s"] = wall_s;
    j["total_input_tokens"] = in_tokens;
    j["total_output_tokens"] = out_tokens;
    j["request_throughput"] = double(completed) / wall;
    j["output_throughput"] = double(out_tokens) / wall;
    j["total_token_throughput"] = double(in_tokens + out_tokens) / wall;
    const std::pair<const char*, std::vector<double>*> series[] = {
        {"ttft", &ttft}, {"tpot", &tpot}, {"itl", &itl}, {"e2el", &e2el}};
    for (const auto& [name, v] : series) {
        const LatencySummary s = summarize_latencies(std::move(*v));
        j[std::string("mean_") + name + "_ms"] = s.mean;
        j[std::string("median_") + name + "_ms"] = s.median;
        j[std::string("p99_") + name + "_ms"] = s.p99;
    }
}

void print_serving_table(const nlohmann::ordered_json& j) {
    constexpr int kWidth = 50;
    auto line = [](const std::string& name, const std::string& v) {
        std::printf("%-40s %s\n", name.c_str(), v.c_str());
    };
    auto num = [&](const std::string& name, const std::string& key) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.2f", j.at(key).get<double>());
        line(name, buf);
    };
    auto count = [&](const std::string& name, const char* key) {
        line(name, std::to_string(j.at(key).get<int64_t>()));
    };
    auto rule = [](const std::string& title) {
        const size_t left = (kWidth - title.size()) / 2, right = kWidth - title.size() - left;
        std::printf("%s%s%s\n", std::string(left, '-').c_str(), title.c_str(), std::string(right, '-').c_str());
    };
    std::printf("============ Serving Benchmark Result ============\n");
    line("Endpoint:", j.at("url").get<std::string>() + j.at("endpoint").get<std::string>());
    line("Model:", j.at("model").get<std::string>());
    line("Load:", j.at("load").get<std::string>());
    count("Successful requests:", "completed");
    count("Failed requests:", "failed");
    num("Benchmark duration (s):", "duration_s");
    count("Total input tokens:", "total_input_tokens");
    count("Total generated tokens:", "total_output_tokens");
    num("Request throughput (req/s):", "request_throughput");
    num("Output token throughput (tok/s):", "output_throughput");
    num("Total token throughput (tok/s):", "total_token_throughput");
    const struct {
        const char *title, *key, *label;
    } groups[] = {{"Time to First Token", "ttft", "TTFT"},
                  {"Time per Output Token (excl. 1st token)", "tpot", "TPOT"},
                  {"Inter-token Latency", "itl", "ITL"},
                  {"End-to-end Latency", "e2el", "E2EL"}};
    const struct { const char *key, *name; } stats[] = {{"mean", "Mean"}, {"median", "Median"}, {"p99", "P99"}};
    for (const auto& g : groups) {
        rule(g.title);
        for (const auto& s : stats)
            num(std::string(s.name) + " " + g.label + " (ms):", std::string(s.key) + "_" + g.key + "_ms");
    }
    std::printf("%s\n", std::string(kWidth, '=').c_str());
}

}  // namespace kiln::tools
