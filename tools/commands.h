// Subcommands of `kiln`. Each returns the process exit code: 0 ok, 1 failure, 2 usage error.
#pragma once

namespace kiln::tools {

int cmd_inspect(int argc, char** argv);     // kiln inspect PATH [--json]
int cmd_tokenize(int argc, char** argv);    // kiln tokenize -m MODEL [...] TEXT|-
int cmd_detokenize(int argc, char** argv);  // kiln detokenize -m MODEL IDS...
int cmd_convert(int argc, char** argv);     // kiln convert IN OUT --to gguf|safetensors
int cmd_logits(int argc, char** argv);      // kiln logits -m MODEL -p PROMPT [--top K] [-t N]
int cmd_generate(int argc, char** argv);    // kiln generate -m MODEL [-p PROMPT] [-n N] [-t N] [sampling]
int cmd_perplexity(int argc, char** argv);  // kiln perplexity -m MODEL -f FILE [--ctx N] [-t N]
int cmd_synth(int argc, char** argv);       // kiln synth --preset NAME --dtype T -o OUT.gguf [--seed S] [--layers N]
int cmd_bench(int argc, char** argv);       // kiln bench -m MODEL [-p N] [-n N] [-t N] [-r N] [--json]
int cmd_bench_cuda(int argc, char** argv);  // kiln bench -m MODEL --device cuda[:N] ... (the model on a GPU)
int cmd_bench_offline(int argc, char** argv);  // kiln bench offline -m MODEL --requests N ... (engine throughput)
int cmd_bench_serve(int argc, char** argv);    // kiln bench serve --url URL [--requests N] ... (HTTP load generator)
int cmd_quantize(int argc, char** argv);       // kiln quantize IN OUT --format F ... (compressed-tensors)
int cmd_numerics(int argc, char** argv);       // kiln numerics MODEL --format F [--calib FILE] [--json] ...
int cmd_grammar(int argc, char** argv);        // kiln grammar SPEC [-m MODEL [--check FILE]] (structured output)
int cmd_serve(int argc, char** argv);          // kiln serve [-m MODEL] [--host H] [--port P] ... (OpenAI HTTP API)
int cmd_router(int argc, char** argv);         // kiln router --worker URL ... (data parallelism across processes)

}  // namespace kiln::tools
