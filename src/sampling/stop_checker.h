// StopChecker: decides, per generated token, whether a request stops, and what streamed text may be
// sent to the client now.
// - Stop strings (vLLM / OpenAI `stop`): text pieces from the incremental detokenizer are appended;
//   text is emitted only once it can no longer be the start of a stop string (the longest suffix that
//   is a proper prefix of some stop string is held back). When a stop string completes, the text
//   before it is emitted, the stop string itself and anything after it are dropped, and the checker
//   is finished. If several stop strings occur, the one that completes first (smallest end offset)
//   wins, the earliest-starting one on a tie: the same answer as feeding the text one byte at a time.
// - Stop token ids and EOS are handled here too (is_stop_token): stop_ids always stop; EOS ids stop
//   unless ignore_eos. The caller does not append the text of a stop token (vLLM's default,
//   include_stop_str_in_output=false) and calls finish() to release held text. max_tokens is the
//   caller's (it counts tokens, not text).
// - UTF-8: stop strings are valid UTF-8, so matches and held-back suffixes always begin on a character
//   boundary. If a piece ends inside a multi-byte character, those bytes are held until it completes,
//   so emitted text never splits a character (finish() releases them regardless).
// Invariant: the held buffer never contains a complete stop string and is shorter than the longest
// stop string plus 3 bytes, so each append costs O(|piece| + held) per stop string.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/sampling_params.h"

namespace kiln::sampling {

class StopChecker {
public:
    struct Output {
        std::string text;       // safe to emit now (never part of a stop string)
        bool stopped = false;   // a stop string completed with this piece
        int32_t stop_idx = -1;  // index into stop_strings when stopped
    };

    StopChecker(std::vector<std::string> stop_strings, std::vector<int32_t> stop_ids = {},
                std::vector<int32_t> eos_ids = {}, bool ignore_eos = false);
    // From validated params (empty stop strings are skipped, not matched everywhere).
    StopChecker(const SamplingParams& params, std::vector<int32_t> eos_ids);

    // Appends a detokenized piece. After a stop, further pieces are ignored (empty Output).
    Output append(std::string_view piece);
    // End of generation for another reason (stop token, max_tokens): returns the held-back text.
    std::string finish();

    // True for a stop id, or an EOS id unless ignore_eos.
    bool is_stop_token(int32_t id) const;
    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stop_strings_;
    std::vector<int32_t> stop_ids_;
    std::vector<int32_t> eos_ids_;
    bool ignore_eos_;
    bool stopped_ = false;
    std::string held_;
};

}  // namespace kiln::sampling
