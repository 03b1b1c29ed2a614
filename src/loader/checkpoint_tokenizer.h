// The tokenizer that travels with a checkpoint: a GGUF file's tokenizer.ggml.* keys, the
// tokenizer.json beside an HF checkpoint, or (for kiln-converted safetensors) the GGUF tokenizer
// carried in the kiln.gguf_tokenizer metadata key. llama2.c checkpoints carry none.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "loader/checkpoint.h"
#include "tokenizer/tokenizer.h"

namespace kiln::loader {

// kNotFound when the checkpoint carries no tokenizer.
core::Result<std::unique_ptr<tokenizer::Tokenizer>> load_tokenizer(const Checkpoint& checkpoint);

// A tokenizer from any path a user may name: what tokenizer::Tokenizer::load reads (.gguf,
// tokenizer.json or a folder holding one, llama2.c .bin), else the tokenizer of the checkpoint there.
core::Result<std::unique_ptr<tokenizer::Tokenizer>> load_tokenizer(const std::string& path);

// The tokenizer a model command uses: explicit_path when non-empty, else the checkpoint's own, else
// (llama2.c) tok512.bin or tokenizer.bin beside it; kNotFound naming the fix otherwise.
core::Result<std::unique_ptr<tokenizer::Tokenizer>> find_tokenizer(const Checkpoint& checkpoint,
                                                                   const std::string& explicit_path);

}  // namespace kiln::loader
