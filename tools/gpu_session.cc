// GpuSequence (see gpu_session.h): model::CudaModel with one sequence in a build with the CUDA
// backend (compiled into kiln_tools_cuda, KILN_HAVE_CUDA), a clear error elsewhere.
#include "gpu_session.h"

#include "engine_options.h"

#ifdef KILN_HAVE_CUDA
#include "model/cuda/cuda_model.h"
#endif

namespace kiln::tools {

std::optional<int> parse_device(const std::string& d) {
    if (d == "cpu") return -1;
    if (d == "cuda") return 0;
    if (d.rfind("cuda:", 0) == 0 && d.size() > 5 && d.size() <= 8 &&
        d.find_first_not_of("0123456789", 5) == std::string::npos)
        return std::stoi(d.substr(5));
    return std::nullopt;
}

#ifdef KILN_HAVE_CUDA

namespace {

class CudaSequence : public GpuSequence {
public:
    explicit CudaSequence(std::unique_ptr<model::CudaModel> m) : m_(std::move(m)) {}
    std::string describe() const override { return m_->describe(); }
    core::Status forward(std::span<const int32_t> tokens, int64_t start, bool all_logits,
                         std::vector<float>& logits) override {
        return m_->forward(tokens, start, all_logits, logits);
    }

private:
    std::unique_ptr<model::CudaModel> m_;
};

}  // namespace

core::Result<std::unique_ptr<GpuSequence>> open_gpu_sequence(const loader::Checkpoint& ck, const GpuSequenceOptions& o) {
    model::CudaModelOptions co;
    co.device = o.device;
    co.gpu_memory_utilization = o.gpu_memory_utilization;
    co.max_seq_len = o.max_seq_len;
    co.max_batch_tokens = o.max_tokens;
    co.max_logits = o.max_tokens;
    co.max_seqs = 1;
    co.kv_dtype = o.kv_dtype;
    if (o.max_seq_len > 0) co.num_kv_blocks = (o.max_seq_len + co.block_size - 1) / co.block_size;  // one sequence
    co.progress = print_upload_progress;
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<model::CudaModel> m, model::CudaModel::create(ck, co));
    return std::unique_ptr<GpuSequence>(new CudaSequence(std::move(m)));
}

#else

core::Result<std::unique_ptr<GpuSequence>> open_gpu_sequence(const loader::Checkpoint&, const GpuSequenceOptions&) {
    return core::error(core::StatusCode::kUnsupported)
           << "this kiln was built without the CUDA backend: build it with the cuda-release preset (-DKILN_CUDA=ON)";
}

#endif

}  // namespace kiln::tools
