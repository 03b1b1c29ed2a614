// `kiln grammar [--json-schema S | --json-object | --regex RE | --choice T... | --grammar FILE]
// [-m MODEL [--check FILE]]`: what a structured-output spec compiles to, for debugging a schema
// and measuring the grammar engine. Without -m: prints the GBNF (or the error naming the keyword or
// construct kiln cannot honour). With -m: compiles against the model's tokenizer and prints the
// compile time and table sizes. With --check FILE as well: walks FILE's tokens (the tokenizer's
// encoding of its text) through the token masks, says whether the text is a whole sentence, and
// times each mask, cold (the first request with this spec) and warm (any request after it); further
// --check FILEs are walked after it ("seen": the spec's tables made so far are kept, new texts meet
// new states).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "grammar/compiler.h"
#include "loader/checkpoint_tokenizer.h"
#include "structured_flags.h"

namespace kiln::tools {
namespace {

constexpr const char* kGrammarUsage =
    "usage: kiln grammar SPEC [-m MODEL [--check FILE]...]\n"
    "\n"
    "Prints the GBNF grammar a structured-output spec compiles to. With -m, compiles it against the\n"
    "model's tokenizer and prints the time and table sizes; with --check FILE too, feeds FILE's text\n"
    "token by token through the masks: exit 0 when it is a whole sentence of the grammar, 1 when not.\n"
    "\n"
    "  -m, --model MODEL      a model or tokenizer (as for kiln tokenize)\n"
    "  --check FILE           a text to walk through the masks ('-' for standard input; one final\n"
    "                         newline is dropped, as editors add it); timed cold (the spec's first\n"
    "                         text) and warm (the same text again). Repeatable: later texts are\n"
    "                         timed as 'seen' (the tables of the texts before them kept)\n"
    "\n";

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// The masks over `ids`, timed: returns false (and says where) when a token is not allowed.
bool walk(const std::shared_ptr<grammar::CompiledGrammar>& g, const std::vector<int32_t>& ids, const std::string& label,
          bool* whole) {
    grammar::Matcher m(g);
    std::vector<uint64_t> mask;
    double total = 0, worst = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
        const auto t0 = Clock::now();
        m.fill_mask(mask);
        const double t = ms_since(t0);
        total += t;
        worst = std::max(worst, t);
        const int32_t id = ids[i];
        if (!((mask[size_t(id) >> 6] >> (id & 63)) & 1) || !m.accept_token(id)) {
            std::printf("token %zu (id %d, '%s') is not allowed there\n", i, id, g->vocab().bytes(id).c_str());
            return false;
        }
    }
    std::printf("%s masks: %zu tokens, %.3f ms in all, mean %.1f us, worst %.3f ms\n", label.c_str(), ids.size(), total,
                ids.empty() ? 0.0 : total * 1e3 / double(ids.size()), worst);
    *whole = m.can_end();
    return true;
}

}  // namespace

int cmd_grammar(int argc, char** argv) {
    std::set<std::string> flags = {"--help", "-h"};
    std::set<std::string> opts = {"-m", "--model", "--check"};
    flags.insert(std::begin(kStructuredFlags), std::end(kStructuredFlags));
    opts.insert(std::begin(kStructuredOptions), std::end(kStructuredOptions));
    Args args(flags, opts);
    auto usage = [](std::FILE* f) {
        std::fputs(kGrammarUsage, f);
        std::fputs(kStructuredHelp, f);
    };
    if (!args.parse(argc, argv, 2)) {
        std::fprintf(stderr, "kiln grammar: %s\n", args.error().c_str());
        usage(stderr);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        usage(stdout);
        return 0;
    }
    StructuredOutput so;
    std::string error;
    if (!parse_structured_flags(args, so, &error)) {
        std::fprintf(stderr, "kiln grammar: %s\n", error.c_str());
        return 2;
    }
    grammar::StructuredSpec spec;
    if (so.kind.empty() || !grammar::parse_kind(so.kind, spec.kind) || !args.positional().empty()) {
        usage(stderr);
        return 2;
    }
    spec.value = so.value;
    spec.choices = so.choices;
    const auto model = args.get_either("--model", "-m");
    if (!model) {
        if (args.get("--check")) {
            std::fprintf(stderr, "kiln grammar: --check needs -m MODEL (the masks are over its tokens)\n");
            return 2;
        }
        core::Result<std::string> text = grammar::spec_to_gbnf(spec);
        if (!text.is_ok()) {
            std::fprintf(stderr, "kiln grammar: %s\n", text.status().message().c_str());
            return 1;
        }
        core::Result<grammar::Grammar> g = grammar::parse_gbnf(*text);  // a grammar file's errors too
        if (!g.is_ok()) {
            std::fprintf(stderr, "kiln grammar: %s\n", g.status().message().c_str());
            return 1;
        }
        std::fputs(text->c_str(), stdout);
        if (!text->empty() && text->back() != '\n') std::fputc('\n', stdout);
        return 0;
    }
    auto tok = loader::load_tokenizer(*model);
    if (!tok.is_ok()) {
        std::fprintf(stderr, "kiln grammar: %s\n", tok.status().message().c_str());
        return 1;
    }
    auto t0 = Clock::now();
    grammar::GrammarCompiler compiler(grammar::token_table(**tok));
    std::printf("token table: %d tokens, %.2f ms\n", (*tok)->vocab_size(), ms_since(t0));
    t0 = Clock::now();
    auto compiled = compiler.compile(spec);
    if (!compiled.is_ok()) {
        std::fprintf(stderr, "kiln grammar: %s\n", compiled.status().message().c_str());
        return 1;
    }
    const double compile_ms = ms_since(t0);
    const grammar::Grammar& g = (*compiled)->grammar();
    std::printf("compiled in %.2f ms (first mask and warm-up walks included): %zu rules, %zu elements\n", compile_ms,
                g.rules.size(), g.elements.size());
    const std::vector<std::string> checks = args.get_all("--check");
    if (checks.empty()) return 0;
    bool all_whole = true;
    for (size_t k = 0; k < checks.size(); ++k) {
        std::stringstream ss;
        if (checks[k] == "-") {
            ss << std::cin.rdbuf();
        } else {
            std::ifstream f(checks[k], std::ios::binary);
            if (!f) {
                std::fprintf(stderr, "kiln grammar: cannot read %s\n", checks[k].c_str());
                return 1;
            }
            ss << f.rdbuf();
        }
        std::string text = ss.str();
        if (!text.empty() && text.back() == '\n') text.pop_back();
        const std::vector<int32_t> ids = (*tok)->encode(text, /*add_special=*/false, /*parse_special=*/false);
        bool whole = false;
        if (!walk(*compiled, ids, k == 0 ? "cold" : "seen (" + checks[k] + ")", &whole)) return 1;
        if (k == 0 && !walk(*compiled, ids, "warm", &whole)) return 1;
        if (!whole && checks.size() > 1) std::printf("%s is a prefix of a sentence, not a whole one\n", checks[k].c_str());
        all_whole = all_whole && whole;
    }
    const grammar::CompiledGrammar::Stats st = (*compiled)->stats();
    std::printf("tables: %lld precomputed positions (%lld context-dependent tokens), %lld stacks, %lld states, %.1f MiB "
                "of classes and masks\n",
                (long long)st.positions, (long long)st.context_dependent, (long long)st.stacks, (long long)st.sets,
                double(st.table_bytes) / (1 << 20));
    const char* what = checks.size() > 1 ? "every text is" : "the text is";
    if (all_whole) std::printf("%s a whole sentence of the grammar\n", what);
    else if (checks.size() == 1) std::printf("the text is a prefix of a sentence, not a whole one\n");
    return all_whole ? 0 : 1;
}

}  // namespace kiln::tools
