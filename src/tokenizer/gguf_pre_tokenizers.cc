// The table of llama.cpp's GGUF pre-tokenizers (see regex_split.h): for every tokenizer.ggml.pre name
// llama.cpp knows (llama-vocab.cpp at ggml-org/llama.cpp 00ad355e, and the copy vendored by
// llama-cpp-python 0.3.36, which adds glm5), the regexes its llm_tokenizer_bpe applies in order and
// the per-name flags kiln uses (ignore_merges, add_bos). Regexes are llama.cpp's strings with every
// non-ASCII character written \x{...} (see regex_split.cc on why) and run by PCRE2 with Unicode
// properties, which is the semantics of the tokenizer.json they came from. Where llama.cpp runs
// hand-written code instead of a regex (\p{AFMoE_digits}, tiny_aya's and superbpe's digit grouping)
// the table holds a regex with that code's result. Where the difference is deliberate it is noted:
//  - afmoe's compatibility-ideograph range starts at U+F900 as in its tokenizer.json (llama.cpp's
//    source holds U+8C48, the NFC form of U+F900, which widens the range);
//  - llama.cpp's std::regex fallback folds every non-ASCII letter into one class, so for the
//    youtu / tiny_aya / granite regexes it cannot tell non-ASCII upper from lower case; PCRE2 can.
// Names whose tokenizer is not a regex split followed by byte-level BPE are refused by name:
// kimi-k2 (a Han-excluding regex with class intersection), gemma4 / granite-embed-multi-311m /
// sarvam-moe (BPE on raw UTF-8 with spaces as U+2581) and whitespace.
#include <map>
#include <string>
#include <vector>

#include "tokenizer/regex_split.h"

namespace kiln::tokenizer {
namespace {

// llama3 (also dbrx, smaug, chatglm): contractions, letters, 1-3 digits
constexpr const char* kLlama3 = R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// qwen2 (also stablelm2, hunyuan, grok-2, ...): kLlama3 with single digits
constexpr const char* kQwen2 = R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-2's, without its last \s+ (llama.cpp's form)
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
// deepseek-llm / -coder: CJK, U+0800.., Hangul runs
constexpr const char* kCjkHangul = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
// deepseek-v3 family: CJK ideographs and kana runs
constexpr const char* kCjkKana = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
// deepseek-v3 / afmoe: punctuation-led words, letters with marks
constexpr const char* kDeepseek3Words = R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// tiny_aya: case-split words (tiktoken o200k style), 1-3 digits
constexpr const char* kLowerUpperWords = R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// poro / bloom / gpt3-finnish / viking: everything up to a space or stop
constexpr const char* kPoro = R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)";
// runs of newlines and of everything else
constexpr const char* kNewlineRuns = R"([^\n]+|[\n]+)";
// a digit run as its leading len % 3 digits, then threes (llama.cpp's \p{AFMoE_digits} splitter)
constexpr const char* kDigitsGroupedBy3 = R"(\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N})))";

struct PreSpec {
    std::vector<std::string> names;
    std::vector<std::string> regexes;
    bool ignore_merges = false;
    bool add_bos = false;
    const char* unsupported = nullptr;  // why kiln cannot run it yet
};

const std::vector<PreSpec>& specs() {
    static const std::vector<PreSpec> kSpecs = {
        {{"default"},
         {R"([\p{P}\$\+<=>\^~\|]+)",
          kGpt2,
          R"(\p{N}+)",
          R"([0-9][0-9][0-9])"}},
        {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
         {kLlama3}, true, true},
        {{"dbrx", "smaug-bpe", "chatglm-bpe"},
         {kLlama3}},
        {{"glm4", "glm5"},
         {kLlama3}, true, false},
        {{"minicpm5"},
         {R"(\p{N}{1,3})",
          R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}, true, false},
        {{"jais-2"},
         {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})"}},
        {{"deepseek-llm"},
         {R"([\r\n])",
          R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
          R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
          R"(\s+$)",
          kCjkHangul,
          R"(\p{N}+)"}},
        {{"deepseek-coder"},
         {R"([\r\n])",
          R"(\s?\p{L}+)",
          R"(\s?\p{P}+)",
          kCjkHangul,
          R"(\p{N})"}},
        {{"deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"},
         {R"(\p{N}{1,3})",
          kCjkKana,
          kDeepseek3Words}},
        {{"spark2_5"},
         {R"(\p{N}{1,3})",
          kCjkKana,
          R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)",
          R"(\p{N})"}},
        {{"youtu"},
         {R"([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
          R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}, true, false},
        {{"falcon"},
         {R"([\p{P}\$\+<=>\^~\|`]+)",
          kGpt2,
          R"([0-9][0-9][0-9])"}},
        {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "exaone4", "mpt", "olmo", "jais", "trillion", "granite-docling"},
         {kGpt2}},
        {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
         {R"(\p{N})",
          kGpt2}},
        {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open", "grok-2"},
         {kQwen2}},
        {{"qwen35"},
         {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
        {{"poro-chat", "bloom", "gpt3-finnish"},
         {kPoro}},
        {{"viking"},
         {kPoro,
          R"(\p{N})"}},
        {{"tekken"},
         {R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}, true, true},
        {{"chameleon"},
         {R"(<sentinel:[0-9]+>)",
          R"((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)",
          R"(([\t\n]|    |  ))",
          R"(\p{N})",
          R"([\p{P}!-/:-@\[-`{-~])",
          kGpt2}, false, true},
        {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"},
         {R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
        {{"granite-embed-multi-97m"},
         {R"([^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}, true, false},
        {{"tiny_aya", "cohere2moe"},
         {kDigitsGroupedBy3,
          kLowerUpperWords}},
        {{"superbpe"},
         {R"(\p{N}+)",
          R"([0-9]{1,3}(?=(?:[0-9]{3})*(?![0-9])))"}},
        {{"bailingmoe", "bailingmoe2", "llada-moe"},
         {R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"}},
        {{"seed-coder"},
         {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
        {{"ufakzeka"},
         {R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
        {{"afmoe"},
         {kDigitsGroupedBy3,
          R"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{F900}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF}\x{FF65}-\x{FF9F}\x{2F00}-\x{2FDF}\x{E40}-\x{E7F}\x{E80}-\x{EFF}\x{1780}-\x{17FF}\x{1000}-\x{109F}\x{AA60}-\x{AA7F}\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+)",
          kDeepseek3Words}},
        {{"laguna"},
         {kNewlineRuns,
          kQwen2}},
        {{"exaone-moe"},
         {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)"}},
        {{"kimi-k2"},
         {}, false, false, "its regex excludes Han from the letter classes (class intersection), not written for PCRE2 yet"},
        {{"gemma4", "granite-embed-multi-311m", "sarvam-moe"},
         {}, false, false, "BPE over raw UTF-8 with spaces as U+2581 (not byte-level) is not implemented yet"},
        {{"whitespace"},
         {}, false, false, "the whitespace tokenizer model is not implemented yet"},
    };
    return kSpecs;
}

const std::map<std::string, const PreSpec*>& by_name() {
    static const std::map<std::string, const PreSpec*> kByName = [] {
        std::map<std::string, const PreSpec*> m;
        for (const PreSpec& s : specs())
            for (const std::string& n : s.names) m[n] = &s;
        return m;
    }();
    return kByName;
}

}  // namespace

core::Result<GgufPreTokenizer> gguf_pre_tokenizer(const std::string& name) {
    // llama.cpp: a missing or empty name is "default" (with a warning about quality).
    auto it = by_name().find(name.empty() ? std::string("default") : name);
    if (it == by_name().end())
        return core::error(core::StatusCode::kUnsupported)
               << "unknown pre-tokenizer '" << name << "' (tokenizer.ggml.pre); known: " << gguf_pre_tokenizer_names();
    const PreSpec& s = *it->second;
    if (s.unsupported)
        return core::error(core::StatusCode::kUnsupported)
               << "pre-tokenizer '" << name << "' (tokenizer.ggml.pre) is not supported: " << s.unsupported;
    GgufPreTokenizer p;
    p.regexes = s.regexes;
    p.ignore_merges = s.ignore_merges;
    p.add_bos = s.add_bos;
    return p;
}

std::string gguf_pre_tokenizer_names() {
    std::string s;
    for (const auto& [name, spec] : by_name())
        if (!spec->unsupported) s += (s.empty() ? "" : ", ") + name;
    return s;
}

std::vector<std::string> gguf_pre_tokenizer_list() {
    std::vector<std::string> v;
    for (const auto& [name, spec] : by_name()) v.push_back(name);
    return v;
}

}  // namespace kiln::tokenizer
