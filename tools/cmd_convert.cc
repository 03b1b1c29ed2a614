// `kiln convert IN OUT --to gguf|safetensors [--dtype f32|f16|bf16] [--tokenizer TOKENIZER.bin] [--layers N]
// [--quiet]`: a thin main over loader/convert.h.
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "core/dtype.h"
#include "loader/convert.h"

namespace kiln::tools {
namespace {

constexpr const char* kUsage =
    "usage: kiln convert IN OUT --to gguf|safetensors [--dtype f32|f16|bf16] [--tokenizer TOKENIZER.bin]\n"
    "                    [--layers N] [--dequantize] [--quiet]\n"
    "  IN:  a GGUF file, an HF safetensors directory (or .safetensors file with config.json beside it), or a\n"
    "       llama2.c .bin checkpoint\n"
    "  OUT: a .gguf file (--to gguf) or a directory (--to safetensors: model.safetensors + config.json)\n"
    "  --dtype      store float matrices as this type (norm weights and biases stay f32)\n"
    "  --tokenizer  a llama2.c tokenizer .bin to embed (for llama2.c checkpoints)\n"
    "  --layers N   keep only the first N layers (a smaller model with real weights, for tests)\n"
    "  --dequantize write quantized tensors (Q4_0, Q8_0, Q4_K, ...) as floats: --dtype, f32 by default\n"
    "  --quiet      no per-tensor progress on stderr\n";

}  // namespace

int cmd_convert(int argc, char** argv) {
    Args args({"--help", "-h", "--quiet", "--dequantize"}, {"--to", "--dtype", "--tokenizer", "--layers"});
    if (!args.parse(argc, argv, 2)) {
        std::fprintf(stderr, "kiln convert: %s\n%s", args.error().c_str(), kUsage);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        std::fputs(kUsage, stdout);
        return 0;
    }
    if (args.positional().size() != 2 || !args.get("--to")) {
        std::fputs(kUsage, stderr);
        return 2;
    }
    loader::ConvertOptions opts;
    opts.to = *args.get("--to");
    if (auto d = args.get("--dtype")) {
        opts.dtype = core::dtype_from_name(*d);
        if (!opts.dtype) {
            std::fprintf(stderr, "kiln convert: --dtype must be f32, f16 or bf16, not '%s'\n", d->c_str());
            return 2;
        }
    }
    opts.tokenizer_path = args.get("--tokenizer").value_or("");
    opts.progress = !args.has("--quiet");
    opts.dequantize = args.has("--dequantize");
    if (args.get("--layers")) {
        auto n = int_option(args, "convert", "--layers", 0, 1, 100000);
        if (!n) return 2;
        opts.num_layers = *n;
    }
    if (core::Status st = loader::check_convert_options(opts); !st.is_ok()) {
        std::fprintf(stderr, "kiln %s\n", st.message().c_str());
        return 2;
    }
    const std::string& in = args.positional()[0];
    const std::string& out = args.positional()[1];
    core::Status st = loader::convert_checkpoint(in, out, opts);
    if (!st.is_ok()) {
        std::fprintf(stderr, "kiln convert: %s\n", st.to_string().c_str());
        return 1;
    }
    std::fprintf(stderr, "kiln convert: wrote %s\n", out.c_str());
    return 0;
}

}  // namespace kiln::tools
