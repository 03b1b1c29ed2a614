// Model + tokenizer + thread pool setup for the commands that run a model (see model_session.h).
#include "model_session.h"

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

core::Result<std::unique_ptr<ModelSession>> open_model_session(const std::string& model_path,
                                                               const std::string& tokenizer_path,
                                                               std::optional<int> threads) {
    auto s = std::make_unique<ModelSession>();
    KILN_ASSIGN_OR_RETURN(s->checkpoint, model::load_checkpoint(model_path));
    KILN_ASSIGN_OR_RETURN(s->tokenizer, find_tokenizer(s->checkpoint, tokenizer_path));
    s->pool = std::make_unique<core::ThreadPool>(threads.value_or(core::ThreadPool::default_num_threads()));
    KILN_ASSIGN_OR_RETURN(s->model, model::LlamaModel::create(s->checkpoint, s->pool.get()));
    return s;
}

}  // namespace kiln::tools
