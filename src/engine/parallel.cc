// The rank-0-to-followers step protocol of parallel.h. A step's payload is one buffer:
// int64 [num_tokens, num_seqs], the token ids (int32), per sequence int64 [start, num_tokens,
// num_logits, table_len], then the block tables (int32) one after another.
#include "engine/parallel.h"

#include <cstdio>
#include <cstring>


namespace kiln::engine {
namespace {

enum : int64_t { kStep = 1, kStop = 2 };

template <typename T>
void put(std::vector<uint8_t>& b, const T* p, size_t n) {
    const size_t at = b.size();
    b.resize(at + n * sizeof(T));
    std::memcpy(b.data() + at, p, n * sizeof(T));
}

struct Reader {
    std::span<const uint8_t> b;
    size_t at = 0;
    template <typename T>
    bool get(T* p, size_t n) {
        if (b.size() - at < n * sizeof(T)) return false;
        std::memcpy(p, b.data() + at, n * sizeof(T));
        at += n * sizeof(T);
        return true;
    }
};

}  // namespace

namespace {

// `fn` with no deadline on the collectives it runs (ranks still loading their weights, or an idle
// server between steps, are no failure; a rank that died ends the job through mpirun).
template <typename Fn>
core::Status unbounded(dist::Communicator& comm, Fn fn) {
    const double timeout = comm.timeout_seconds();
    comm.set_timeout_seconds(0);
    const core::Status st = fn();
    comm.set_timeout_seconds(timeout);
    return st;
}

}  // namespace

int64_t kv_pool_block_bytes(const loader::ModelConfig& c, int64_t block_size, kernels::KvDtype dtype) {
    return kv::KvStorage::bytes_per_block(c.stage_layers(), block_size,
                                          kernels::kv_row_bytes(dtype, c.num_kv_heads, c.head_dim));
}

core::Result<KvPool> make_kv_pool(const loader::ModelConfig& c, int64_t num_blocks, int64_t block_size,
                                  kernels::KvDtype dtype) {
    KvPool p;
    KILN_ASSIGN_OR_RETURN(p.storage, kv::KvStorage::create(c.stage_layers(), num_blocks, block_size,
                                                           kernels::kv_row_bytes(dtype, c.num_kv_heads, c.head_dim)));
    p.layers = std::make_shared<model::KvLayers>();
    for (int64_t l = 0; l < c.num_layers; ++l) {
        p.layers->k.push_back(c.has_layer(l) ? p.storage->k(l - c.stage_begin) : nullptr);
        p.layers->v.push_back(c.has_layer(l) ? p.storage->v(l - c.stage_begin) : nullptr);
    }
    p.layers->block_size = block_size;
    p.layers->dtype = dtype;
    p.layers->num_slots = num_blocks * block_size;
    return p;
}

StepSender::~StepSender() {
    for (Message& m : in_flight_)
        for (auto& s : m.sends) (void)s->wait();
}

core::Status StepSender::send_pool(const PoolPlan& pool) {
    PoolPlan p = pool;
    dist::Communicator& comm = comm_;
    // Then every rank has its weights and its pool before the first step's deadlines start.
    return unbounded(comm, [&] {
        KILN_RETURN_IF_ERROR(comm.broadcast(&p, sizeof(p), 0));
        return comm.barrier();
    });
}

core::Status StepSender::post(int64_t kind, std::vector<uint8_t> payload) {
    // The oldest messages were taken long ago (a rank takes a step's plan before its pass): waiting
    // for them only bounds the buffers kept.
    constexpr size_t kMaxInFlight = 16;
    while (in_flight_.size() >= kMaxInFlight) {
        for (auto& s : in_flight_.front().sends) KILN_RETURN_IF_ERROR(s->wait());
        in_flight_.pop_front();
    }
    Message& m = in_flight_.emplace_back();
    m.header[0] = kind;
    m.header[1] = int64_t(payload.size());
    m.payload = std::move(payload);
    for (int r = 1; r < comm_.size(); ++r) {
        KILN_ASSIGN_OR_RETURN(std::unique_ptr<dist::Pending> h, comm_.start_send(m.header, sizeof(m.header), r));
        m.sends.push_back(std::move(h));
        if (m.payload.empty()) continue;
        KILN_ASSIGN_OR_RETURN(std::unique_ptr<dist::Pending> p,
                              comm_.start_send(m.payload.data(), int64_t(m.payload.size()), r));
        m.sends.push_back(std::move(p));
    }
    return core::Status::ok();
}

core::Status StepSender::send_step(std::span<const int32_t> tokens, std::span<const model::BatchSeq> seqs) {
    std::vector<uint8_t> b;
    const int64_t counts[2] = {int64_t(tokens.size()), int64_t(seqs.size())};
    put(b, counts, 2);
    put(b, tokens.data(), tokens.size());
    for (const model::BatchSeq& s : seqs) {
        const int64_t v[4] = {s.start, s.num_tokens, s.num_logits, int64_t(s.block_table.size())};
        put(b, v, 4);
    }
    for (const model::BatchSeq& s : seqs) put(b, s.block_table.data(), s.block_table.size());
    return post(kStep, std::move(b));
}

core::Status StepSender::send_stop() {
    KILN_RETURN_IF_ERROR(post(kStop, {}));
    while (!in_flight_.empty()) {  // every rank has it before rank 0 goes on to end
        for (auto& s : in_flight_.front().sends) KILN_RETURN_IF_ERROR(s->wait());
        in_flight_.pop_front();
    }
    return core::Status::ok();
}

core::Result<std::unique_ptr<SequenceRunner>> SequenceRunner::create(model::CpuModel& model, int64_t max_tokens,
                                                                     kernels::KvDtype dtype) {
    constexpr int64_t kBlock = 16;
    if (max_tokens < 1) return core::error(core::StatusCode::kInvalidArgument) << "a sequence of " << max_tokens << " tokens";
    const int64_t blocks = (max_tokens + kBlock - 1) / kBlock;
    KILN_ASSIGN_OR_RETURN(KvPool pool, make_kv_pool(model.config(), blocks, kBlock, dtype));
    std::unique_ptr<SequenceRunner> r(new SequenceRunner(model, std::move(pool), max_tokens));
    for (int64_t b = 0; b < blocks; ++b) r->table_.push_back(int32_t(b));
    if (dist::Communicator* group = model.step_group(); group && group->size() > 1) {
        r->sender_ = std::make_unique<StepSender>(*group);
        KILN_RETURN_IF_ERROR(r->sender_->send_pool({blocks, kBlock, int64_t(dtype)}));
    }
    return r;
}

SequenceRunner::~SequenceRunner() {
    if (!sender_) return;
    if (core::Status st = sender_->send_stop(); !st.is_ok())
        std::fprintf(stderr, "kiln: stopping the parallel ranks: %s\n", st.to_string().c_str());
}

core::Status SequenceRunner::forward(std::span<const int32_t> tokens, int64_t start, bool all_logits,
                                     std::vector<float>& logits) {
    const int64_t n = int64_t(tokens.size());
    if (n == 0 || start < 0 || start > end_ || start + n > max_tokens_)
        return core::error(core::StatusCode::kInvalidArgument)
               << "tokens [" << start << ", " << start + n << ") of a sequence of " << end_ << " run so far, at most "
               << max_tokens_;
    const model::BatchSeq seq{start, n, table_, all_logits ? n : 1};
    const std::span<const model::BatchSeq> seqs(&seq, 1);
    if (sender_) KILN_RETURN_IF_ERROR(sender_->send_step(tokens, seqs));
    KILN_RETURN_IF_ERROR(model_.forward_batch(tokens, seqs, *pool_.layers, logits));
    end_ = start + n;
    return core::Status::ok();
}

core::Status run_follower(model::CpuModel& model, dist::Communicator& comm) {
    PoolPlan pool;
    KILN_RETURN_IF_ERROR(unbounded(comm, [&] { return comm.broadcast(&pool, sizeof(pool), 0); }));
    KILN_ASSIGN_OR_RETURN(const KvPool kv, make_kv_pool(model.config(), pool.num_kv_blocks, pool.block_size,
                                                         kernels::KvDtype(pool.kv_dtype)));
    KILN_RETURN_IF_ERROR(unbounded(comm, [&] { return comm.barrier(); }));  // rank 0's send_pool
    const model::KvLayers& layers = *kv.layers;
    std::vector<uint8_t> payload;
    std::vector<int32_t> tokens, tables;
    std::vector<model::BatchSeq> seqs;
    std::vector<float> logits;
    for (;;) {
        int64_t header[2] = {0, 0};
        // The next step may be a long time coming (an idle server): no bound on this wait.
        KILN_RETURN_IF_ERROR(unbounded(comm, [&] { return comm.recv(header, sizeof(header), 0); }));
        if (header[0] == kStop) return core::Status::ok();
        if (header[0] != kStep || header[1] < 16)
            return core::error(core::StatusCode::kInternal) << "parallel ranks: a bad step header from rank 0";
        payload.resize(size_t(header[1]));
        KILN_RETURN_IF_ERROR(comm.recv(payload.data(), header[1], 0));
        Reader r{payload};
        int64_t counts[2];
        r.get(counts, 2);
        tokens.resize(size_t(counts[0]));
        bool ok = counts[0] >= 0 && counts[1] >= 0 && r.get(tokens.data(), tokens.size());
        seqs.assign(ok ? size_t(counts[1]) : 0, {});
        std::vector<int64_t> table_lens(seqs.size());
        for (size_t i = 0; ok && i < seqs.size(); ++i) {
            int64_t v[4] = {0, 0, 0, 0};
            ok = r.get(v, 4) && v[3] >= 0;
            seqs[i] = {v[0], v[1], {}, v[2]};
            table_lens[i] = ok ? v[3] : 0;
        }
        int64_t total = 0;
        for (int64_t n : table_lens) total += n;
        tables.resize(size_t(total));
        ok = ok && r.get(tables.data(), tables.size()) && r.at == payload.size();
        if (!ok) return core::error(core::StatusCode::kInternal) << "parallel ranks: a malformed step from rank 0";
        for (size_t i = 0, at = 0; i < seqs.size(); at += size_t(table_lens[i]), ++i)
            seqs[i].block_table = std::span<const int32_t>(tables.data() + at, size_t(table_lens[i]));
        // A failed step may have run some of its collectives: the ranks can no longer be matched up.
        if (core::Status s = model.forward_batch(tokens, seqs, layers, logits); !s.is_ok())
            return core::error(s.code()) << "rank " << comm.rank() << ": a step failed: " << s.message();
    }
}

}  // namespace kiln::engine
