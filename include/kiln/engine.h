// kiln's public C++ API: an Engine loads a model and serves many requests at once (continuous
// batching over a paged KV cache with prefix caching; see docs/kv.md). Requests may be added and
// aborted from any thread; the engine runs its step loop on its own thread and reports each
// request's progress to the request's callback, on that thread.
// Self-contained: includes only the standard library (no src/ headers, no CUDA types); no exception
// crosses it (errors are kiln::Status).
// Guarantee (batch invariance): a request's tokens (and, on CPU, the logits they came from, bit
// for bit) do not depend on the other requests, on chunked prefill, on preemption or on prefix
// cache hits.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

struct Status {
    enum class Code {
        kOk = 0,
        kInvalidArgument,
        kNotFound,
        kUnsupported,
        kCorrupt,
        kIo,
        kOutOfMemory,
        kInternal,
        kUnavailable
    };
    Code code = Code::kOk;
    std::string message;
    bool ok() const { return code == Code::kOk; }
};

// Structured output (docs/structured.md): the generated text is a sentence of this language.
// kind: "" (off), "json_schema" (value: a JSON Schema as JSON text), "json_object" (any JSON
// object), "regex" (value: the pattern, matched in full), "choice" (exactly one of `choices`),
// "grammar" (value: GBNF text, llama.cpp's dialect). A spec kiln cannot honour is refused by
// add_request with kInvalidArgument or kUnsupported naming the part (a schema keyword, a regex construct).
struct StructuredOutput {
    std::string kind;
    std::string value;
    std::vector<std::string> choices;
};

// Token selection and stopping (vLLM / OpenAI semantics; kiln::Engine validates every field).
struct SamplingParams {
    float temperature = 1.0f;  // 0 = greedy
    int32_t top_k = 0;         // 0 or -1 = off
    float top_p = 1.0f;        // (0, 1]
    float min_p = 0.0f;        // [0, 1]
    float repetition_penalty = 1.0f;
    float frequency_penalty = 0.0f;  // [-2, 2]
    float presence_penalty = 0.0f;   // [-2, 2]
    std::vector<std::pair<int32_t, float>> logit_bias;
    uint64_t seed = 0;
    bool has_seed = false;  // false: seeded from std::random_device
    int32_t max_tokens = 16;
    std::vector<std::string> stop;  // stop strings (excluded from the text)
    std::vector<int32_t> stop_token_ids;
    bool ignore_eos = false;
    // Leave control tokens (and the unknown token) out of the text, as vLLM does by default; their
    // ids stay in token_ids. kiln's own default keeps them (llama.cpp's behaviour).
    bool skip_special_tokens = false;
    // -1: off. 0..20: each new token's log-probability (log_softmax of the model's raw logits, before
    // bias, penalties and temperature) plus this many most likely alternatives (RequestOutput::logprobs).
    int32_t logprobs = -1;
    // Constrains the tokens drawn (after bias and penalties, before temperature and the top-k/p/min-p
    // cuts); the request finishes with "stop" once the text is whole and nothing more can follow.
    StructuredOutput structured;
};

// Range checks of every field (the ones add_request makes, less the vocabulary bound of token ids),
// for a client that wants to report bad parameters before loading a model.
Status validate_sampling_params(const SamplingParams& params);

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);  // "", "stop", "length", "abort", "error"

// A generated token's log-probability and the most likely alternatives (best first, ties by lower id).
struct TokenLogprobs {
    int32_t token_id = 0;
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;  // (token id, logprob), SamplingParams::logprobs of them
};

// One update of a request. The last one has finished = true (exactly one per request).
struct RequestOutput {
    uint64_t request_id = 0;
    std::vector<int32_t> token_ids;  // new tokens since the previous update
    std::string text;                // their text (never half a UTF-8 character, never part of a stop string)
    bool finished = false;
    FinishReason finish_reason = FinishReason::kNone;
    std::string error;          // with kError
    int64_t prompt_tokens = 0;  // usage
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;               // prompt tokens served by the prefix cache
    double ttft_seconds = 0;                 // from add_request to the first token (set on every update after it)
    std::vector<std::vector<float>> logits;  // with Request::return_logits: each new token's logits row
    std::vector<TokenLogprobs> logprobs;     // with SamplingParams::logprobs >= 0: one per entry of token_ids
};
using OutputCallback = std::function<void(const RequestOutput&)>;

struct Request {
    std::string prompt;               // encoded with the tokenizer's BOS/EOS rules, unless prompt_ids is set
    std::vector<int32_t> prompt_ids;  // used as is when non-empty
    SamplingParams sampling;
    OutputCallback on_output;  // called on the engine's thread; must not block for long
    bool return_logits = false;
    bool speculate = true;  // with EngineOptions::speculative set: false runs this request without drafts
};

struct EngineOptions {
    std::string model;      // GGUF file, Hugging Face folder or llama2.c .bin
    std::string tokenizer;  // "" = the checkpoint's own
    int threads = 0;        // 0 = the physical cores
    std::string isa;        // "" = the best this CPU has; "avx2", "avx-vnni", "avx512", "avx512-vnni", "ref"
    bool f32_activations = false;
    bool mmap_weights = false;       // run from the file mapping (fast start) instead of a copy in anonymous memory
    int64_t kv_cache_bytes = 0;      // 0 = a quarter of available memory, at most what max_seqs full contexts need
    double kv_default_share = 1;     // with kv_cache_bytes 0: this share of that quarter (replicas split it)
    int32_t block_size = 16;         // tokens per KV block
    // "f32", "f16" (half the memory; K/V rounded to half once), "int8" or "fp8" (E4M3): one-byte codes
    // with an f32 scale per token and KV head (about a quarter of f32's memory); "" = f32 on the CPU,
    // f16 on a GPU.
    std::string kv_cache_dtype;
    int64_t max_batch_tokens = 512;  // tokens per step (decode tokens + prompt chunks)
    int32_t max_seqs = 64;           // sequences per step
    bool prefix_cache = true;
    // Commit the whole KV cache at start (as llama.cpp and vLLM do) instead of as blocks are first used:
    // a slower start for no first-touch page faults mid-request (CPU only; docs/kv.md).
    bool kv_prefault = false;
    int64_t max_model_len = 0;  // 0 = the model's context length
    // Speculative decoding (docs/speculative.md): "" = off; "ngram" = prompt lookup (drafts copied
    // from earlier in the sequence); "draft" = drafts from `draft_model` (same tokenizer, run
    // greedily, its own KV cache); "layers:N" = drafts from the model's own first N layers (CPU only).
    // Drafts are verified by the model in one step: greedy output is token for token what it is
    // without; sampled output keeps its distribution exactly.
    std::string speculative;
    std::string draft_model;                         // GGUF file or HF folder, with "draft"
    int32_t num_draft = 5;                           // most draft tokens per sequence and step
    int32_t spec_ngram_min = 2, spec_ngram_max = 4;  // n-gram lengths looked up, longest first
    int32_t spec_max_batch = -1;  // speculate while at most this many sequences decode; 0 = always; -1 = the default
    std::string device = "cpu";   // "cpu", or "cuda" / "cuda:N" (a build with the CUDA backend)
    double gpu_memory_utilization = 0.9;  // cuda: share of the device's memory for weights, activations, KV
    // Tensor parallelism over N processes started by `mpirun -np N` (CPU; docs/parallel.md): each rank
    // holds its share of the attention heads and MLP units. Rank 0 calls Engine::create and serves;
    // every other rank calls Engine::run_worker with the same options. 1 = one process.
    int tensor_parallel = 1;
    // Pipeline parallelism over P stages (mpirun -np T*P with tensor_parallel T): each stage holds a
    // contiguous run of the layers and passes its micro-batches' hidden states to the next; rank 0
    // (stage 0) serves. 1 = one stage.
    int pipeline_parallel = 1;
    // With pipeline_parallel > 1: batches in flight at once, each with its own share of the sequences
    // and KV blocks, so that rank 0 starts one while the later stages run another (vLLM's virtual
    // engines). 0 = one per stage; 1 = one batch at a time.
    int pipeline_batches = 0;
    // Expert parallelism for a mixture-of-experts model: its experts spread over E ranks (whole
    // experts, the outputs exchanged by all-to-all), its attention split over the same ranks by
    // tensor parallelism, so E must equal tensor_parallel (or tensor_parallel be 1, and it becomes E).
    // A mixture of experts under tensor_parallel alone spreads its experts the same way. 1 = off.
    int expert_parallel = 1;
    // Seconds a collective may wait for the other ranks before the job is ended (a rank that died or
    // hangs); workers waiting for rank 0's next step wait without a bound.
    double collective_timeout = 120;
    // Called while the weights are uploaded to a GPU with the bytes done and the total.
    std::function<void(uint64_t done, uint64_t total)> on_load_progress;
};

struct EngineStats {
    int64_t num_running = 0, num_waiting = 0;
    int32_t kv_blocks_in_use = 0, kv_blocks_total = 0, peak_kv_blocks_in_use = 0;
    int32_t block_size = 0;
    int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
    int64_t prompt_tokens_total = 0, generated_tokens_total = 0;
    int64_t num_preemptions = 0, num_steps = 0;
    double schedule_seconds = 0, forward_seconds = 0, sample_seconds = 0;
    // Structured output's share of sample_seconds: token masks made and applied, matchers advanced.
    double grammar_seconds = 0;
    // Speculative decoding: draft tokens verified, of those accepted, and sequence-steps that verified
    // a draft. Acceptance rate = accepted / draft; tokens per verifying step = 1 + accepted / steps.
    int64_t spec_draft_tokens = 0, spec_accepted_tokens = 0, spec_verify_steps = 0;
    // Parallel ranks (rank 0's view): collectives and sends so far, the bytes of the buffers they
    // carried (step plans, all-reduced activations, hidden states and logits between pipeline
    // stages) and the seconds spent in them, waiting for the other ranks included.
    int tensor_parallel = 1, pipeline_parallel = 1;
    int64_t collective_calls = 0, collective_bytes = 0;
    double collective_seconds = 0;
};

struct ModelInfo {
    std::string name, arch, path;
    int64_t vocab_size = 0, max_model_len = 0, num_layers = 0, hidden_size = 0;
    int64_t num_experts = 0;  // a mixture of experts: experts per layer; 0: a dense model
    int32_t bos_id = -1, eos_id = -1;
    std::string chat_template;  // "" when the model has none
    int threads = 0;
    std::string isa;
    std::string device;  // "cpu", or the GPU's description (weights, KV cache, activations)
};

struct ChatMessage {
    std::string role, content;
};

// A chat rendered as HF's apply_chat_template renders it, from JSON (docs/tools.md): messages with tool
// calls (function.arguments as a JSON string, as OpenAI sends it, or an object), tool results and content
// parts; the tools the template lists; extra template variables (enable_thinking, ...).
struct ChatTemplateArgs {
    std::string messages_json;      // a JSON array of OpenAI-style message objects
    std::string tools_json;         // "" or a JSON array of {"type": "function", "function": {...}}
    std::string kwargs_json;        // "" or a JSON object of extra template variables
    bool add_generation_prompt = true;
    std::string chat_template;      // "" = the model's
};

// Tool calls in generated text. Formats (chosen from the chat template by detect_tool_call_format):
// "hermes", "qwen_xml", "glm", "llama3", "mistral", "gpt_oss", "deepseek", or "none".
struct ToolCall {
    std::string name;
    std::string arguments;  // a JSON object, compact
};
struct ToolCallParse {
    std::string content;
    std::string reasoning;  // gpt_oss's analysis channel
    std::vector<ToolCall> calls;
};
// Splits `text` (generated with control tokens kept) into content and calls. final = false (streaming):
// the content only grows from one call to the next on longer text and only complete calls are returned.
// `tools_json` ("" or the request's tools) types the qwen_xml format's parameter values.
ToolCallParse parse_tool_calls(const std::string& format, const std::string& text, const std::string& tools_json,
                               bool final);
// The format a chat template writes tool calls in ("none" when it shows none).
std::string detect_tool_call_format(const std::string& chat_template);
// Whether `name` is one of the formats above.
bool is_tool_call_format(const std::string& name);

class Engine {
public:
    // Loads the model and starts the step loop. nullptr with *status set on failure.
    static std::unique_ptr<Engine> create(const EngineOptions& options, Status* status);
    // Data parallelism in one process (kiln serve --dp): another engine over `first`'s model weights,
    // neither loaded nor copied again (the memory of one copy for every replica): its own threads,
    // KV cache, scheduler and draft model. CPU, one process; `first` must outlive it. options as
    // `first`'s, but for the threads, the KV budget and the engine's knobs.
    static std::unique_ptr<Engine> create_replica(const Engine& first, const EngineOptions& options, Status* status);
    // With options.tensor_parallel or pipeline_parallel > 1 under mpirun: this process's rank (rank 0
    // calls create, the others run_worker); 0 otherwise.
    static int parallel_rank(const EngineOptions& options);
    // Tensor / pipeline parallelism, ranks other than 0: loads this rank's share of the model and runs rank 0's
    // steps until rank 0's engine is destroyed. An error if it cannot start (the job then ends).
    static Status run_worker(const EngineOptions& options);
    ~Engine();  // aborts what is still running and joins the loop
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Queues a request; *id is its id. An error (nothing queued, no callback) for bad parameters, an
    // empty prompt or one that does not fit the context.
    Status add_request(Request request, uint64_t* id);
    // Queues several requests at once (one wait for the step loop instead of one per request, so a
    // batch submitted together starts together); *ids in order. On an error (the first failing
    // request's) the ones queued before it are aborted: their callbacks get their last output
    // (kAbort) at once, on the calling thread, while the engine's lock is held.
    Status add_requests(std::vector<Request> requests, std::vector<uint64_t>* ids);
    // Ends a request early: its callback gets finished with kAbort and its KV blocks are freed. A
    // finished or unknown id is a no-op.
    void abort(uint64_t id);
    EngineStats stats() const;
    const ModelInfo& model_info() const;

    std::vector<int32_t> tokenize(const std::string& text, bool add_special = true, bool parse_special = true) const;
    std::string detokenize(const std::vector<int32_t>& ids, bool skip_special = false) const;
    // The bytes token `id` adds to generated text (possibly part of a UTF-8 character; "" out of range).
    std::string token_bytes(int32_t id) const;
    // The conversation in the model's chat template (or `chat_template` when non-empty).
    Status apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                               const std::string& chat_template, std::string* text) const;
    // The same from JSON messages, with tools and template variables; kInvalidArgument for malformed JSON.
    Status apply_chat_template(const ChatTemplateArgs& args, std::string* text) const;

    struct Impl;

private:
    explicit Engine(std::unique_ptr<Impl> impl);
    // create (first null) and create_replica.
    static std::unique_ptr<Engine> create_with(const EngineOptions& options, Status* status, const Impl* first);
    std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
