// StopChecker implementation. See stop_checker.h for the rules (vLLM stop-string semantics).
#include "sampling/stop_checker.h"

#include <algorithm>
#include <utility>

namespace kiln::sampling {
namespace {

// Bytes at the end of s that form an incomplete (so far valid-looking) UTF-8 sequence: 0..3.
size_t incomplete_utf8_tail(std::string_view s) {
    size_t n = s.size();
    for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
        unsigned char c = static_cast<unsigned char>(s[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
        size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return need > back ? back : 0;
    }
    return 0;  // ASCII end, complete sequence, or garbage: nothing worth waiting for
}

}  // namespace

StopChecker::StopChecker(std::vector<std::string> stop_strings, std::vector<int32_t> stop_ids,
                         std::vector<int32_t> eos_ids, bool ignore_eos)
    : stop_ids_(std::move(stop_ids)), eos_ids_(std::move(eos_ids)), ignore_eos_(ignore_eos) {
    // Keep indices stable for stop_idx; an empty string would match everywhere, so it never matches.
    stop_strings_ = std::move(stop_strings);
}

StopChecker::StopChecker(const SamplingParams& params, std::vector<int32_t> eos_ids)
    : StopChecker(params.stop_strings, params.stop_ids, std::move(eos_ids), params.ignore_eos) {}

bool StopChecker::is_stop_token(int32_t id) const {
    if (std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) return true;
    return !ignore_eos_ && std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

StopChecker::Output StopChecker::append(std::string_view piece) {
    Output out;
    if (stopped_) return out;
    held_.append(piece);

    // The held part before this piece contains no complete stop string, so any match ends in the piece.
    size_t best_start = std::string::npos, best_end = std::string::npos;
    for (size_t i = 0; i < stop_strings_.size(); ++i) {
        const std::string& s = stop_strings_[i];
        if (s.empty()) continue;
        size_t pos = held_.find(s);
        if (pos == std::string::npos) continue;
        size_t end = pos + s.size();
        if (end < best_end || (end == best_end && pos < best_start)) {
            best_start = pos;
            best_end = end;
            out.stop_idx = int32_t(i);
        }
    }
    if (out.stop_idx >= 0) {
        out.text = held_.substr(0, best_start);
        out.stopped = true;
        stopped_ = true;
        held_.clear();
        return out;
    }

    // Hold back the longest suffix that is a proper prefix of some stop string.
    size_t hold = 0;
    for (const std::string& s : stop_strings_) {
        size_t max_len = std::min(s.size() - (s.empty() ? 0 : 1), held_.size());
        for (size_t len = max_len; len > hold; --len) {
            if (std::string_view(held_).substr(held_.size() - len) == std::string_view(s).substr(0, len)) {
                hold = len;
                break;
            }
        }
    }
    hold = std::max(hold, incomplete_utf8_tail(held_));
    out.text = held_.substr(0, held_.size() - hold);
    held_.erase(0, held_.size() - hold);
    return out;
}

std::string StopChecker::finish() {
    std::string rest;
    rest.swap(held_);
    if (stopped_) rest.clear();
    stopped_ = true;
    return rest;
}

}  // namespace kiln::sampling
