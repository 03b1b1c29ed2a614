// Model + tokenizer + thread pool setup for the commands that run a model (see model_session.h).
#include "model_session.h"

#include <cstdlib>
#include <filesystem>

#include "model/checkpoint_tokenizer.h"

namespace kiln::tools {

namespace fs = std::filesystem;

namespace {

core::Result<std::unique_ptr<tokenizer::Tokenizer>> find_tokenizer(const model::Checkpoint& ck,
                                                                   const std::string& explicit_path) {
    if (!explicit_path.empty()) return model::load_tokenizer(explicit_path);
    auto tok = model::load_tokenizer(ck);
    if (tok.is_ok() || tok.status().code() != core::StatusCode::kNotFound) return tok;
    if (ck.format == "llama2c") {
        const fs::path dir = fs::path(ck.path).parent_path();
        for (const char* name : {"tok512.bin", "tokenizer.bin"}) {
            std::error_code ec;
            if (fs::exists(dir / name, ec)) return tokenizer::Tokenizer::from_llama2c((dir / name).string());
        }
    }
    return core::error(core::StatusCode::kNotFound)
           << ck.path << ": no tokenizer in the checkpoint (and no tok512.bin / tokenizer.bin beside it); "
           << "pass --tokenizer FILE";
}

}  // namespace

std::string default_model_path() {
    if (const char* m = std::getenv("KILN_MODEL"); m && *m) return m;
    fs::path cache;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
        cache = x;
    } else if (const char* h = std::getenv("HOME"); h && *h) {
        cache = fs::path(h) / ".cache";
    } else {
        cache = ".cache";
    }
    return (cache / "kiln" / "SmolLM2-135M-Instruct.Q4_1.gguf").string();
}

core::Result<std::string> resolve_model_path(const std::optional<std::string>& model_arg) {
    if (model_arg) return *model_arg;
    std::string path = default_model_path();
    std::error_code ec;
    if (!fs::exists(path, ec)) {
        return core::error(core::StatusCode::kNotFound)
               << "no -m MODEL given and the default model " << path
               << " is missing (scripts/setup installs it; KILN_MODEL overrides the path)";
    }
    return path;
}

std::optional<int> parse_threads(const std::string& s) {
    try {
        size_t used = 0;
        int n = std::stoi(s, &used);
        if (used != s.size() || n < 1 || n > 1024) return std::nullopt;
        return n;
    } catch (...) {
        return std::nullopt;
    }
}

core::Result<std::unique_ptr<ModelSession>> open_model_session(const std::optional<std::string>& model_path,
                                                               const std::string& tokenizer_path,
                                                               std::optional<int> threads) {
    auto s = std::make_unique<ModelSession>();
    KILN_ASSIGN_OR_RETURN(std::string path, resolve_model_path(model_path));
    KILN_ASSIGN_OR_RETURN(s->checkpoint, model::load_checkpoint(path));
    KILN_ASSIGN_OR_RETURN(s->tokenizer, find_tokenizer(s->checkpoint, tokenizer_path));
    s->pool = std::make_unique<core::ThreadPool>(threads.value_or(core::ThreadPool::default_num_threads()));
    KILN_ASSIGN_OR_RETURN(s->model, model::LlamaModel::create(s->checkpoint, s->pool.get()));
    return s;
}

}  // namespace kiln::tools
