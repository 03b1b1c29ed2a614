// Prometheus text rendering of the serving metrics (see metrics.h).
#include "server/metrics.h"

#include <cstdio>

namespace kiln::server {
namespace {

std::string num(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}

void metric(std::string* out, const char* name, const char* type, const char* help, double v) {
    *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + num(v) +
            "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++count_;
}

void Histogram::render(const std::string& name, const std::string& help, std::string* out) const {
    *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    int64_t cum = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
        cum += counts_[i];
        *out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
    }
    cum += counts_.back();
    *out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
    *out += name + "_sum " + num(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      tpot_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1}),
      e2e_({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}) {}

void Metrics::record_request(const std::string& endpoint, int status) {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_[{endpoint, status}];
}

void Metrics::record_generation(double ttft_s, double e2e_s, int64_t prompt_tokens, int64_t completion_tokens, int n) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ttft_s >= 0) ttft_.observe(ttft_s);
    const double per_choice = double(completion_tokens) / double(n > 0 ? n : 1);
    if (ttft_s >= 0 && per_choice > 1) tpot_.observe((e2e_s - ttft_s) / (per_choice - 1));
    e2e_.observe(e2e_s);
    server_prompt_tokens_ += prompt_tokens;
    server_completion_tokens_ += completion_tokens;
}

void Metrics::record_client_abort() {
    std::lock_guard<std::mutex> lock(mu_);
    ++client_aborts_;
}

std::string Metrics::render(const EngineStats& s, int64_t requests_in_flight) const {
    std::string out;
    metric(&out, "kiln_requests_running", "gauge", "Requests in the engine's running batch.", double(s.num_running));
    metric(&out, "kiln_requests_waiting", "gauge", "Requests queued in the engine.", double(s.num_waiting));
    metric(&out, "kiln_kv_blocks_used", "gauge", "KV cache blocks in use.", s.kv_blocks_in_use);
    metric(&out, "kiln_kv_blocks_total", "gauge", "KV cache blocks in the pool.", s.kv_blocks_total);
    metric(&out, "kiln_kv_blocks_peak", "gauge", "Most KV cache blocks in use at once.", s.peak_kv_blocks_in_use);
    metric(&out, "kiln_prefix_cache_hit_rate", "gauge",
           "Prompt tokens served by the prefix cache / prompt tokens looked up.",
           s.prefix_query_tokens > 0 ? double(s.prefix_hit_tokens) / double(s.prefix_query_tokens) : 0.0);
    metric(&out, "kiln_prompt_tokens_total", "counter", "Prompt tokens the engine accepted.",
           double(s.prompt_tokens_total));
    metric(&out, "kiln_generation_tokens_total", "counter", "Tokens the engine generated.",
           double(s.generated_tokens_total));
    metric(&out, "kiln_preemptions_total", "counter", "Requests preempted (recomputed later).",
           double(s.num_preemptions));
    metric(&out, "kiln_engine_steps_total", "counter", "Engine steps.", double(s.num_steps));
    metric(&out, "kiln_spec_draft_tokens_total", "counter", "Speculative draft tokens verified.",
           double(s.spec_draft_tokens));
    metric(&out, "kiln_spec_accepted_tokens_total", "counter", "Speculative draft tokens accepted.",
           double(s.spec_accepted_tokens));
    metric(&out, "kiln_spec_verify_steps_total", "counter",
           "Sequence-steps that verified a draft (each emits its accepted drafts plus one token).",
           double(s.spec_verify_steps));
    metric(&out, "kiln_grammar_seconds_total", "counter",
           "Seconds the engine spent on structured output's token masks and matchers.", s.grammar_seconds);
    metric(&out, "kiln_server_requests_in_flight", "gauge", "Engine requests the server is waiting on.",
           double(requests_in_flight));
    std::lock_guard<std::mutex> lock(mu_);
    out +=
        "# HELP kiln_http_requests_total HTTP requests by endpoint and status.\n"
        "# TYPE kiln_http_requests_total counter\n";
    for (const auto& [k, v] : requests_)
        out += "kiln_http_requests_total{endpoint=\"" + k.first + "\",status=\"" + std::to_string(k.second) + "\"} " +
               std::to_string(v) + "\n";
    metric(&out, "kiln_client_aborts_total", "counter", "Streams ended by the client before they finished.",
           double(client_aborts_));
    metric(&out, "kiln_server_prompt_tokens_total", "counter", "Prompt tokens of finished server requests.",
           double(server_prompt_tokens_));
    metric(&out, "kiln_server_completion_tokens_total", "counter", "Tokens returned by finished server requests.",
           double(server_completion_tokens_));
    ttft_.render("kiln_time_to_first_token_seconds", "Time from request to first token.", &out);
    tpot_.render("kiln_time_per_output_token_seconds", "Time per output token after the first.", &out);
    e2e_.render("kiln_e2e_request_latency_seconds", "Time from request to its last token.", &out);
    return out;
}

}  // namespace kiln::server
