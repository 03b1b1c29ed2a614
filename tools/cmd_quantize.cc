// `kiln quantize IN OUT --format F [--calib FILE] [--skip NAMES] ...`: a thin main over
// quant_tools/quantize.h, with a progress bar on stderr and the elapsed time.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "loader/checkpoint_tokenizer.h"
#include "quant_tools/gptq_calibrate.h"
#include "quant_tools/quantize.h"
#include "model_session.h"

namespace kiln::tools {
namespace {

constexpr const char* kUsage =
    "usage: kiln quantize IN OUT --format F [--calib FILE] [--calib-tokens N] [--skip NAMES]\n"
    "                     [--zero-point | --no-zero-point] [--awq-loss L] [--smoothquant ALPHA]\n"
    "                     [--gptq-one-pass] [--act-order] [--tokenizer FILE] [-t N] [--quiet]\n"
    "\n"
    "Quantizes the q/k/v/o and gate/up/down projections of IN (any model kiln loads; quantized GGUF\n"
    "weights are dequantized first) and writes OUT, a folder in the compressed-tensors layout\n"
    "(model.safetensors + config.json with its quantization_config) that kiln loads back.\n"
    "Embeddings, norms and the output layer stay f32. docs/quantization.md has the layouts.\n"
    "\n"
    "  --format F        int8       INT8 weights per output channel (activations int8 at run time)\n"
    "                    w4-gN      INT4 weight-only, groups of N = 32, 64 or 128 (symmetric)\n"
    "                    awq-w4-gN  the same with AWQ activation-aware scales (needs --calib; zero points)\n"
    "                    gptq-w4-gN INT4 with GPTQ's error-compensating rounding (needs --calib; zero points)\n"
    "                    awq-gptq-w4-gN  AWQ's scales and clipping, then GPTQ (needs --calib; zero points)\n"
    "                    fp8        FP8 E4M3 per output channel      fp8-block  FP8 with 128x128 block scales\n"
    "                    mxfp8      OCP MXFP8 (E4M3, 32-blocks)      mxfp4      OCP MXFP4 (E2M1, 32-blocks)\n"
    "                    nvfp4      NVFP4 (E2M1, 16-blocks with E4M3 scales, fp32 tensor scale)\n"
    "  --calib FILE      calibration text (AWQ, GPTQ, SmoothQuant)\n"
    "  --calib-tokens N  calibration tokens read from FILE (default 8192)\n"
    "  --skip NAMES      comma-separated projections kept in f32: full HF module names\n"
    "                    (model.layers.0.mlp.down_proj) or their ends (down_proj = every down_proj);\n"
    "                    may be repeated\n"
    "  --zero-point      INT4 with zero points (asymmetric; default for the awq- and gptq- formats)\n"
    "  --no-zero-point   symmetric INT4 (default for w4-gN)\n"
    "  --awq-loss L      what the AWQ scale search minimizes: attn (default: q/k/v by the attention\n"
    "                    block's output, the other groups by their own outputs), linear (every group by\n"
    "                    its own outputs), attn-mlp (attn, and gate/up by the MLP's output)\n"
    "  --gptq-one-pass   GPTQ's Hessians from one pass of the unquantized model (faster) instead of\n"
    "                    layer by layer with the earlier layers already quantized (the default)\n"
    "  --act-order       GPTQ over the columns in decreasing order of their calibration energy\n"
    "                    (diag of the Hessian), with each group's scale fixed from the original weights\n"
    "                    first (gptq.py's --act-order --static-groups; groups stay contiguous: no g_idx)\n"
    "  --smoothquant A   int8 only (needs --calib): SmoothQuant with migration strength A in [0, 1]\n"
    "                    (0.5 in the paper), folded into the attention and FFN norms\n"
    "  --tokenizer FILE  tokenizer for --calib and for llama2.c inputs (default: the model's own or the\n"
    "                    tok512.bin / tokenizer.bin beside it)\n"
    "  -t, --threads N   worker threads (default: the physical cores)\n"
    "  --quiet           no progress bar\n";

std::vector<std::string> split_commas(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string part; std::getline(ss, part, ',');)
        if (!part.empty()) out.push_back(part);
    return out;
}

class ProgressBar {
public:
    explicit ProgressBar(bool on) : on_(on) {}
    void update(const char* stage, int64_t done, int64_t total) {
        if (!on_ || total <= 0) return;
        const int pct = int(100 * done / total);
        if (stage == stage_ && pct == pct_) return;
        stage_ = stage;
        pct_ = pct;
        const int width = 30, filled = width * pct / 100;
        std::fprintf(stderr, "\r%-9s [%.*s%*s] %3d%% (%lld/%lld)", stage, filled, "##############################",
                     width - filled, "", pct, (long long)done, (long long)total);
        if (done == total) std::fputc('\n', stderr);
        std::fflush(stderr);
    }

private:
    bool on_;
    const char* stage_ = nullptr;
    int pct_ = -1;
};

}  // namespace

int cmd_quantize(int argc, char** argv) {
    Args args({"--help", "-h", "--quiet", "--zero-point", "--no-zero-point", "--gptq-one-pass", "--act-order"},
              {"--format", "--calib", "--calib-tokens", "--skip", "--tokenizer", "-t", "--threads", "--awq-loss",
               "--smoothquant"});
    if (!args.parse(argc, argv, 2)) {
        std::fprintf(stderr, "kiln quantize: %s\n%s", args.error().c_str(), kUsage);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        std::fputs(kUsage, stdout);
        return 0;
    }
    if (args.positional().size() != 2 || !args.get("--format")) {
        std::fputs(kUsage, stderr);
        return 2;
    }
    quant_tools::QuantizeOptions o;
    const std::string format_arg = args.get("--format").value_or("");
    std::string_view format = format_arg;
    if (format.starts_with("awq-")) {
        o.awq = true;
        o.scheme.zero_point = true;
        format.remove_prefix(4);
    }
    if (format.starts_with("gptq-")) {
        o.gptq = true;
        o.scheme.zero_point = true;
        format.remove_prefix(5);
    }
    if (format.starts_with("awq-")) {
        std::fprintf(stderr, "kiln quantize: --format: AWQ comes first: awq-gptq-w4-gN\n");
        return 2;
    }
    auto scheme = loader::parse_quant_scheme(format);
    if (!scheme.is_ok() || ((o.awq || o.gptq) && scheme->format != loader::QuantFormat::kPackedInt)) {
        std::fprintf(stderr, "kiln quantize: --format: %s\n",
                     scheme.is_ok()
                         ? "AWQ and GPTQ apply to w4-gN only (awq-w4-g32, gptq-w4-g128, awq-gptq-w4-g64, ...)"
                         : scheme.status().message().c_str());
        return 2;
    }
    const bool zp = o.awq || o.gptq ? !args.has("--no-zero-point") : args.has("--zero-point");
    o.scheme = *scheme;
    if (args.has("--zero-point") && args.has("--no-zero-point")) {
        std::fprintf(stderr, "kiln quantize: --zero-point and --no-zero-point exclude each other\n");
        return 2;
    }
    if (o.scheme.format == loader::QuantFormat::kPackedInt)
        o.scheme.zero_point = zp;
    else if (args.has("--zero-point") || args.has("--no-zero-point")) {
        std::fprintf(stderr, "kiln quantize: --zero-point applies to the INT4 formats only\n");
        return 2;
    }
    if (auto loss = args.get("--awq-loss")) {
        if (!o.awq) {
            std::fprintf(stderr, "kiln quantize: --awq-loss applies to the awq-w4-gN formats only\n");
            return 2;
        }
        if (*loss != "attn" && *loss != "linear" && *loss != "attn-mlp") {
            std::fprintf(stderr, "kiln quantize: --awq-loss must be attn, linear or attn-mlp, not '%s'\n", loss->c_str());
            return 2;
        }
        o.awq_attn_loss = *loss != "linear";
        o.awq_mlp_loss = *loss == "attn-mlp";
    }
    if (auto a = args.get("--smoothquant")) {
        char* end = nullptr;
        const double alpha = std::strtod(a->c_str(), &end);
        if (a->empty() || *end != '\0' || !(alpha >= 0.0 && alpha <= 1.0)) {
            std::fprintf(stderr, "kiln quantize: --smoothquant needs a number in [0, 1], got '%s'\n", a->c_str());
            return 2;
        }
        if (o.scheme.format != loader::QuantFormat::kInt8) {
            std::fprintf(stderr, "kiln quantize: --smoothquant applies to --format int8 only\n");
            return 2;
        }
        if (!args.get("--calib")) {
            std::fprintf(stderr, "kiln quantize: --smoothquant needs --calib FILE (calibration text)\n");
            return 2;
        }
        o.smoothquant_alpha = alpha;
    }
    if ((o.awq || o.gptq) && !args.get("--calib")) {
        std::fprintf(stderr, "kiln quantize: %s needs --calib FILE (calibration text)\n",
                     args.get("--format")->c_str());
        return 2;
    }
    const std::optional<int64_t> calib_tokens = int_option(args, "quantize", "--calib-tokens", 8192, 1, 1LL << 30);
    if (!calib_tokens) return 2;
    std::optional<int> threads;
    if (auto v = args.get("-t") ? args.get("-t") : args.get("--threads")) {
        threads = parse_threads(*v);
        if (!threads) {
            std::fprintf(stderr, "kiln quantize: -t needs a positive integer, got '%s'\n", v->c_str());
            return 2;
        }
    }
    for (const std::string& v : args.get_all("--skip")) {  // repeatable: the lists add up
        const std::vector<std::string> names = split_commas(v);
        o.skip.insert(o.skip.end(), names.begin(), names.end());
    }
    if (args.has("--act-order")) {
        if (!o.gptq) {
            std::fprintf(stderr, "kiln quantize: --act-order applies to the gptq- formats only\n");
            return 2;
        }
        o.gptq_act_order = true;
    }
    if (args.has("--gptq-one-pass")) {
        if (!o.gptq) {
            std::fprintf(stderr, "kiln quantize: --gptq-one-pass applies to the gptq- formats only\n");
            return 2;
        }
        o.gptq_sequential = false;
    }
    o.tokenizer_path = args.get("--tokenizer").value_or("");
    ProgressBar bar(!args.has("--quiet"));
    o.progress = [&](const char* stage, int64_t done, int64_t total) { bar.update(stage, done, total); };

    const auto t0 = std::chrono::steady_clock::now();
    const std::string& in = args.positional()[0];
    const std::string& out = args.positional()[1];
    auto fail = [](const core::Status& st) {
        std::fprintf(stderr, "kiln quantize: %s\n", st.message().c_str());
        return 1;
    };
    auto ck = loader::load_checkpoint(in);
    if (!ck.is_ok()) return fail(ck.status());
    if (o.awq || o.gptq || o.smoothquant_alpha >= 0) {
        auto tok = loader::find_tokenizer(*ck, o.tokenizer_path);
        if (!tok.is_ok()) return fail(tok.status());
        std::ifstream f(*args.get("--calib"), std::ios::binary);
        if (!f) {
            std::fprintf(stderr, "kiln quantize: cannot read --calib %s\n", args.get("--calib")->c_str());
            return 1;
        }
        std::stringstream ss;
        ss << f.rdbuf();
        o.calib_tokens = (*tok)->encode(ss.str());
        if (int64_t(o.calib_tokens.size()) > *calib_tokens) o.calib_tokens.resize(size_t(*calib_tokens));
        if (o.calib_tokens.size() < 64) {
            std::fprintf(stderr, "kiln quantize: --calib has only %zu tokens (64 at least)\n", o.calib_tokens.size());
            return 1;
        }
    }
    core::ThreadPool pool(threads.value_or(core::ThreadPool::default_num_threads()));
    auto report = quant_tools::quantize_checkpoint(*ck, out, o, &pool);
    if (!report.is_ok()) return fail(report.status());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!report->awq.empty()) {
        double rtn = 0, awq = 0;
        for (const quant_tools::AwqGroupReport& g : report->awq) rtn += g.rtn_error, awq += g.awq_error;
        std::fprintf(stderr,
                     "kiln quantize: AWQ over %zu projection groups: output error %.4g -> %.4g (%.1f%% of RTN)\n",
                     report->awq.size(), rtn, awq, rtn > 0 ? 100 * awq / rtn : 100.0);
    }
    if (report->rtn_experts > 0)
        std::fprintf(stderr,
                     "kiln quantize: GPTQ: %lld experts (layer x expert) got fewer than %lld calibration tokens and "
                     "were rounded to nearest instead (more --calib text routes more tokens to each)\n",
                     (long long)report->rtn_experts, (long long)quant_tools::GptqCalibrateOptions{}.min_expert_rows);
    std::fprintf(stderr, "kiln quantize: %s: %lld projections quantized (%s%s), %lld kept f32, in %.1f s\n",
                 out.c_str(), (long long)report->quantized,
                 o.awq && o.gptq ? "awq-gptq-"
                 : o.awq         ? "awq-"
                 : o.gptq        ? "gptq-"
                                 : "",
                 o.scheme.name().c_str(), (long long)report->kept, secs);
    return 0;
}

}  // namespace kiln::tools
