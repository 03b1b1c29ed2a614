// `kiln` entry point: dispatches to a subcommand. Argument positions: argv[1] is the subcommand,
// each cmd_* parses from argv[2].
#include <cstdio>
#include <cstring>

#include "commands.h"

namespace {

struct Command {
    const char* name;
    int (*fn)(int, char**);
    const char* help;
};

const Command kCommands[] = {
    {"inspect", kiln::tools::cmd_inspect, "show a model file: architecture, hyper-parameters, tokenizer, tensors"},
    {"tokenize", kiln::tools::cmd_tokenize, "encode text to token ids with a model's tokenizer"},
    {"detokenize", kiln::tools::cmd_detokenize, "decode token ids to text"},
    {"convert", kiln::tools::cmd_convert, "convert a model between llama2.c .bin, GGUF and safetensors"},
    {"quantize", kiln::tools::cmd_quantize, "quantize a model (INT8, INT4/AWQ, FP8, MXFP8/MXFP4, NVFP4) to compressed-tensors"},
    {"numerics", kiln::tools::cmd_numerics, "per-tensor SQNR and output error a quantization format would add"},
    {"logits", kiln::tools::cmd_logits, "teacher-forced top-K logits at every position of a prompt"},
    {"generate", kiln::tools::cmd_generate, "text generation from a prompt (greedy or sampled)"},
    {"perplexity", kiln::tools::cmd_perplexity, "perplexity of a text file (llama.cpp's windowed method)"},
    {"synth", kiln::tools::cmd_synth, "write a GGUF with random weights at a real model's shapes (benchmarks)"},
    {"bench", kiln::tools::cmd_bench, "prefill/decode tokens/s against measured bandwidth and compute peaks"},
    {"grammar", kiln::tools::cmd_grammar, "the grammar a JSON schema / regex / choice compiles to; check a text against it"},
    {"serve", kiln::tools::cmd_serve, "serve a model over an OpenAI-compatible HTTP API"},
    {"router", kiln::tools::cmd_router, "one OpenAI-compatible endpoint in front of several kiln serve replicas"},
};

void usage(FILE* out) {
    std::fprintf(out, "usage: kiln COMMAND [ARGS]   (kiln COMMAND --help for details)\n\ncommands:\n");
    for (const Command& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.help);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (const Command& c : kCommands)
        if (!std::strcmp(argv[1], c.name)) return c.fn(argc, argv);
    std::fprintf(stderr, "kiln: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
