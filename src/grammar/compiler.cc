#include "grammar/compiler.h"

#include <nlohmann/json.hpp>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace kiln::grammar {
namespace {

using Kind = StructuredSpec::Kind;
constexpr const char* kNames[] = {"", "json_schema", "json_object", "regex", "choice", "grammar"};

core::Status prefixed(const core::Status& st, const char* what) {
    return core::Status(st.code(), std::string(what) + ": " + st.message());
}

}  // namespace

bool parse_kind(const std::string& name, StructuredSpec::Kind& kind) {
    for (int k = 0; k < 6; ++k) {
        if (name == kNames[k]) {
            kind = Kind(k);
            return true;
        }
    }
    return false;
}

const char* kind_name(StructuredSpec::Kind kind) { return kNames[int(kind)]; }

core::Result<std::string> spec_to_gbnf(const StructuredSpec& spec) {
    switch (spec.kind) {
        case Kind::kNone:
            return core::error(core::StatusCode::kInvalidArgument) << "no structured output asked for";
        case Kind::kJsonObject:
            return json_object_gbnf();
        case Kind::kJsonSchema: {
            nlohmann::ordered_json schema;
            try {
                schema = nlohmann::ordered_json::parse(spec.value);
            } catch (const std::exception& e) {
                return core::error(core::StatusCode::kInvalidArgument) << "json schema: not valid JSON (" << e.what() << ")";
            }
            core::Result<std::string> g = json_schema_to_gbnf(schema);
            if (!g.is_ok()) return prefixed(g.status(), "json schema");
            return g;
        }
        case Kind::kRegex: {
            core::Result<std::string> e = regex_to_gbnf(spec.value);
            if (!e.is_ok()) return prefixed(e.status(), "regex");
            return "root ::= " + *e + "\n";
        }
        case Kind::kChoice: {
            if (spec.choices.empty()) return core::error(core::StatusCode::kInvalidArgument) << "choice: the list of choices is empty";
            std::string g = "root ::= ";
            for (size_t i = 0; i < spec.choices.size(); ++i) {
                if (spec.choices[i].empty()) return core::error(core::StatusCode::kInvalidArgument) << "choice: choice " << i << " is empty";
                g += (i ? " | " : "") + gbnf_literal(spec.choices[i]);
            }
            return g + "\n";
        }
        case Kind::kGrammar:
            return spec.value;
    }
    return core::error(core::StatusCode::kInternal) << "unknown structured output kind";
}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const TokenTable> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(capacity) {}

core::Result<std::shared_ptr<CompiledGrammar>> GrammarCompiler::compile(const StructuredSpec& spec) {
    std::string key = std::string(kind_name(spec.kind)) + '\0' + spec.value;
    for (const std::string& c : spec.choices) key += '\0' + std::to_string(c.size()) + ':' + c;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (auto it = index_.find(key); it != index_.end()) {
            lru_.splice(lru_.begin(), lru_, it->second);
            return it->second->second;
        }
    }
    // Compiled outside the lock: two threads asking for the same new spec both compile it (rare,
    // and cheaper than making every other spec wait).
    KILN_ASSIGN_OR_RETURN(std::string text, spec_to_gbnf(spec));
    core::Result<Grammar> g = parse_gbnf(text);
    if (!g.is_ok()) return prefixed(g.status(), spec.kind == Kind::kGrammar ? "grammar" : "generated grammar");
    std::shared_ptr<CompiledGrammar> compiled = CompiledGrammar::compile(std::move(*g), vocab_);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) return it->second->second;
    lru_.emplace_front(key, compiled);
    index_[key] = lru_.begin();
    if (lru_.size() > capacity_) {
        index_.erase(lru_.back().first);
        lru_.pop_back();
    }
    return compiled;
}

}  // namespace kiln::grammar
