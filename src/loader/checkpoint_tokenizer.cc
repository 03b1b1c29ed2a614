// load_tokenizer (see checkpoint_tokenizer.h).
#include "loader/checkpoint_tokenizer.h"

#include <filesystem>

namespace kiln::loader {

core::Result<std::unique_ptr<tokenizer::Tokenizer>> load_tokenizer(const Checkpoint& ck) {
    if (ck.gguf) return tokenizer::Tokenizer::from_gguf(*ck.gguf);
    if (!ck.tokenizer_path.empty()) return tokenizer::Tokenizer::from_hf(ck.tokenizer_path);
    for (const auto& [key, value] : ck.gguf_metadata) {
        if (key.rfind("tokenizer.ggml.", 0) == 0)
            return tokenizer::Tokenizer::from_gguf_metadata(ck.gguf_metadata, ck.path);
    }
    return core::error(core::StatusCode::kNotFound) << ck.path << ": the checkpoint carries no tokenizer";
}

core::Result<std::unique_ptr<tokenizer::Tokenizer>> load_tokenizer(const std::string& path) {
    auto tok = tokenizer::Tokenizer::load(path);
    std::error_code ec;
    if (tok.is_ok() || !std::filesystem::is_directory(path, ec)) return tok;
    auto ck = load_checkpoint(path);
    if (!ck.is_ok()) return tok;  // the tokenizer error says more than the model's
    return load_tokenizer(*ck);
}

core::Result<std::unique_ptr<tokenizer::Tokenizer>> find_tokenizer(const Checkpoint& ck,
                                                                   const std::string& explicit_path) {
    namespace fs = std::filesystem;
    if (!explicit_path.empty()) return load_tokenizer(explicit_path);
    auto tok = load_tokenizer(ck);
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

}  // namespace kiln::loader
