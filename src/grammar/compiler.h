// What a request asks its output to look like (OpenAI response_format, vLLM guided_*), compiled
// once per distinct spec and vocabulary: GBNF text -> Grammar -> CompiledGrammar, cached.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "grammar/matcher.h"

namespace kiln::grammar {

struct StructuredSpec {
    enum class Kind { kNone, kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar };
    Kind kind = Kind::kNone;
    std::string value;                 // the schema (JSON text), the regex or the GBNF grammar
    std::vector<std::string> choices;  // kChoice: the output is exactly one of these
};

// "json_schema", "json_object", "regex", "choice", "grammar" (and "" = kNone); false for others.
bool parse_kind(const std::string& name, StructuredSpec::Kind& kind);
const char* kind_name(StructuredSpec::Kind kind);

// The GBNF a spec stands for. kInvalidArgument / kUnsupported with the reason (a schema keyword
// kiln cannot honour, a malformed regex, ...), prefixed with what was being compiled.
core::Result<std::string> spec_to_gbnf(const StructuredSpec& spec);

// Compiles specs against one vocabulary; thread-safe. Keeps the `capacity` most recently used.
class GrammarCompiler {
public:
    explicit GrammarCompiler(std::shared_ptr<const TokenTable> vocab, size_t capacity = 64);
    core::Result<std::shared_ptr<CompiledGrammar>> compile(const StructuredSpec& spec);
    const TokenTable& vocab() const { return *vocab_; }

private:
    std::shared_ptr<const TokenTable> vocab_;
    size_t capacity_;
    std::mutex mu_;
    std::list<std::pair<std::string, std::shared_ptr<CompiledGrammar>>> lru_;  // most recent first
    std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

}  // namespace kiln::grammar
