#include "grammar/compiler.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "tokenizer/unicode.h"

namespace kiln::grammar {
namespace {

using Kind = StructuredSpec::Kind;
constexpr const char* kNames[] = {"", "json_schema", "json_object", "regex", "choice", "grammar"};

core::Status prefixed(const core::Status& st, const char* what) {
    return core::Status(st.code(), std::string(what) + ": " + st.message());
}

// Length in bytes of the first UTF-8 character of s (1 for a stray byte).
size_t char_len(std::string_view s) { return std::min(tokenizer::utf8_len(uint8_t(s[0])), s.size()); }

// Choices as a trie of rules (one per branching point), so a state holds one stack however many
// choices share a prefix: a flat list of alternatives would keep one stack per choice alive.
// `items` sorted and unique; returns the rule's name.
std::string choice_trie(std::vector<std::string_view> items, std::string& out, int& next) {
    const std::string name = "choice-" + std::to_string(next++);
    bool optional = false;
    std::vector<std::string> alts;
    size_t i = 0;
    if (!items.empty() && items[0].empty()) optional = true, i = 1;
    while (i < items.size()) {
        const size_t first = char_len(items[i]);
        size_t j = i + 1;
        while (j < items.size() && items[j].substr(0, first) == items[i].substr(0, first)) ++j;
        // The group's common prefix, whole characters only.
        size_t common = items[i].size();
        for (size_t k = i + 1; k < j; ++k) {
            size_t n = 0;
            while (n < common && n < items[k].size() && items[k][n] == items[i][n]) ++n;
            common = n;
        }
        size_t cut = 0;
        while (cut < common && cut + char_len(items[i].substr(cut)) <= common) cut += char_len(items[i].substr(cut));
        std::string alt = gbnf_literal(items[i].substr(0, cut));
        if (j - i > 1 || items[i].size() > cut) {
            std::vector<std::string_view> rest;
            for (size_t k = i; k < j; ++k) rest.push_back(items[k].substr(cut));
            if (!(rest.size() == 1 && rest[0].empty())) alt += " " + choice_trie(std::move(rest), out, next);
        }
        alts.push_back(std::move(alt));
        i = j;
    }
    std::string body;
    for (size_t k = 0; k < alts.size(); ++k) body += (k ? " | " : "") + alts[k];
    out += name + " ::= " + (optional ? "( " + body + " )?" : body) + "\n";
    return name;
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
            size_t bytes = 0;
            for (const std::string& c : spec.choices) bytes += c.size();
            if (spec.choices.size() > 10000 || bytes > (1u << 20))
                return core::error(core::StatusCode::kInvalidArgument) << "choice: at most 10000 choices of 1 MiB in all";
            std::vector<std::string_view> items;
            for (size_t i = 0; i < spec.choices.size(); ++i) {
                if (spec.choices[i].empty()) return core::error(core::StatusCode::kInvalidArgument) << "choice: choice " << i << " is empty";
                items.push_back(spec.choices[i]);
            }
            std::sort(items.begin(), items.end());
            items.erase(std::unique(items.begin(), items.end()), items.end());
            std::string rules;
            int next = 0;
            const std::string top = choice_trie(std::move(items), rules, next);
            return "root ::= " + top + "\n" + rules;
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
