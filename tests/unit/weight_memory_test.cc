// Weights resident once: core::release_mapped_pages drops only whole pages of a live file mapping
// and leaves the bytes readable; create_model packs the repacked-only matrices straight from the
// file (copy_to_anonymous keeps them in place), frees the ones converted into buffers of their own
// (an HF folder's RoPE-permuted q/k, a compressed-tensors folder's decompressed weights), and gives
// the same logits as a model built over the plain file mapping, for stories260K as GGUF, as an HF
// safetensors folder and quantized to w4-g32.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "loader/checkpoint.h"
#include "loader/compressed_tensors.h"
#include "loader/convert.h"
#include "loader/layer_tensors.h"
#include "model/cpu_model.h"
#include "quant_tools/quantize.h"
#include "support/test_support.h"

namespace kiln::model {
namespace {

TEST(WeightMemory, ReleaseMappedPagesDropsWholePagesOfFileMappingsOnly) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    std::vector<uint8_t> bytes(3 * page + 100);
    std::mt19937 rng(7);
    for (uint8_t& b : bytes) b = uint8_t(rng());
    const std::string path = test::temp_dir("weight_memory") + "/blob.bin";
    test::write_file(path, bytes);
    auto f = core::MappedFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    const uint8_t* d = f->data();
    ASSERT_EQ(reinterpret_cast<uintptr_t>(d) % page, 0u);
    ASSERT_EQ(0, std::memcmp(d, bytes.data(), bytes.size()));  // fault every page in
    // [10, size - 10): whole pages 1 and 2 only (page 0 and the tail page are partly outside).
    EXPECT_EQ(core::release_mapped_pages(d + 10, bytes.size() - 20), 2 * page);
    EXPECT_EQ(0, std::memcmp(d, bytes.data(), bytes.size()));               // released pages read back from the file
    EXPECT_EQ(core::release_mapped_pages(d + 1, page), 0u);                 // no whole page inside
    EXPECT_EQ(core::release_mapped_pages(d, bytes.size() + 1), 0u);         // runs past the mapping
    EXPECT_EQ(core::release_mapped_pages(bytes.data(), bytes.size()), 0u);  // heap memory: never
    EXPECT_EQ(core::release_mapped_pages(nullptr, page), 0u);
    EXPECT_EQ(0, std::memcmp(bytes.data(), d, bytes.size()));
}

TEST(WeightMemory, PrefetchMappedPagesAdvisesEveryTouchedPageOfFileMappingsOnly) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    std::vector<uint8_t> bytes(3 * page + 100);
    std::mt19937 rng(9);
    for (uint8_t& b : bytes) b = uint8_t(rng());
    const std::string path = test::temp_dir("weight_memory_prefetch") + "/blob.bin";
    test::write_file(path, bytes);
    auto f = core::MappedFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    const uint8_t* d = f->data();
    // [10, size - 10) touches all 4 pages (the last one partly past the file's end).
    EXPECT_EQ(core::prefetch_mapped_pages(d + 10, bytes.size() - 20), 4 * page);
    EXPECT_EQ(core::prefetch_mapped_pages(d + 1, 2), page);
    EXPECT_EQ(core::prefetch_mapped_pages(d, bytes.size() + 1), 0u);         // runs past the mapping
    EXPECT_EQ(core::prefetch_mapped_pages(bytes.data(), bytes.size()), 0u);  // heap memory: never
    EXPECT_EQ(core::prefetch_mapped_pages(nullptr, page), 0u);
    EXPECT_EQ(0, std::memcmp(d, bytes.data(), bytes.size()));  // the contents, unchanged
}

class WeightMemoryModel : public ::testing::TestWithParam<std::string> {};

TEST_P(WeightMemoryModel, PackedOnlyMatricesStayMappedAndLogitsMatch) {
    const std::string src = test::testdata("models/stories260K/stories260K.bin");
    if (!test::file_exists(src)) KILN_SKIP_MISSING() << "no test data";
    std::string path = test::temp_dir("weight_memory_" + GetParam()) + (GetParam() == "gguf" ? "/m.gguf" : "/hf");
    if (GetParam() == "w4-g32") {  // a compressed-tensors folder: every matrix decompressed at load
        auto source = loader::load_checkpoint(src);
        ASSERT_TRUE(source.is_ok()) << source.status().to_string();
        quant_tools::QuantizeOptions qo;
        qo.scheme = *loader::parse_quant_scheme("w4-g32");
        core::ThreadPool pool(2);
        auto report = quant_tools::quantize_checkpoint(*source, path, qo, &pool);
        ASSERT_TRUE(report.is_ok()) << report.status().to_string();
    } else {
        loader::ConvertOptions co;
        co.to = GetParam();
        const core::Status converted = loader::convert_checkpoint(src, path, co);
        ASSERT_TRUE(converted.is_ok()) << converted.to_string();
    }
    auto ck = loader::load_checkpoint(path), plain = loader::load_checkpoint(path);
    ASSERT_TRUE(ck.is_ok() && plain.is_ok()) << ck.status().to_string();

    const ops::LinearOptions lo;  // the best ISA, packing on
    std::vector<std::string> names = CpuModel::packed_only_matrices(*ck, lo);
    ops::LinearOptions no_pack = lo;
    no_pack.pack = false;
    EXPECT_TRUE(CpuModel::packed_only_matrices(*ck, no_pack).empty());
    EXPECT_EQ(std::count(names.begin(), names.end(), "token_embd.weight"), 0);  // the lookup reads its rows
    // stories260K: tied embeddings, 5 layers x 7 matrices, each packed when this ISA has a packed kernel
    // for its type (all of them at the AVX-512 levels; at AVX2 alone the f32 ones are not).
    size_t packable = 0, matrices = 0;
    for (const loader::TensorSpec& t : loader::checkpoint_tensors(ck->config)) {
        if (!t.matrix || t.name == "token_embd.weight") continue;
        const TensorRef* r = ck->find(t.name);
        ASSERT_NE(r, nullptr) << t.name;
        ++matrices;
        if (kernels::cpu::find_packed_matmul_kernel(r->dtype, lo.isa) != nullptr) ++packable;
    }
    EXPECT_EQ(matrices, size_t(5 * 7));
    EXPECT_EQ(names.size(), packable);
    if (kernels::cpu::find_packed_matmul_kernel(core::DType::kF32, lo.isa) != nullptr) {
        EXPECT_EQ(packable, matrices);
    }

    std::vector<const uint8_t*> before;
    for (const TensorRef& t : ck->tensors) before.push_back(t.data);
    core::ThreadPool pool(2);
    auto model = create_model(*ck, &pool, lo, WeightMemory::kAnonymous);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    for (size_t i = 0; i < ck->tensors.size(); ++i) {
        const TensorRef& t = ck->tensors[i];
        const bool kept = std::count(names.begin(), names.end(), t.name) > 0;
        // HF q/k rows are RoPE-permuted into buffers of their own, compressed-tensors weights are
        // decompressed into them: those are freed once packed.
        const bool owned =
            (GetParam() == "safetensors" && (t.name.ends_with("attn_q.weight") || t.name.ends_with("attn_k.weight"))) ||
            (GetParam() == "w4-g32" && t.name.starts_with("blk.") && t.shape.size() == 2);
        EXPECT_EQ(t.data == nullptr, kept && owned) << t.name;
        EXPECT_EQ(t.storage == nullptr, true) << t.name << ": a copied or released tensor keeps no buffer";
        if (!t.data) continue;
        EXPECT_EQ(t.data == before[i], kept) << t.name << (kept ? " was copied" : " was not copied");
        const TensorRef* p = plain->find(t.name);
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(0, std::memcmp(t.data, p->data, size_t(t.num_bytes))) << t.name;
    }
    auto reference = CpuModel::create(*plain, &pool, lo);
    ASSERT_TRUE(reference.is_ok()) << reference.status().to_string();
    const std::vector<int32_t> ids = {1, 403, 407, 261, 378};
    KvCache a((*model)->config(), 64), b((*reference)->config(), 64);
    auto la = (*model)->forward(ids, a, /*all_logits=*/true);
    auto lb = (*reference)->forward(ids, b, /*all_logits=*/true);
    ASSERT_TRUE(la.is_ok() && lb.is_ok());
    ASSERT_EQ(la->size(), lb->size());
    EXPECT_EQ(0, std::memcmp(la->data(), lb->data(), la->size() * sizeof(float)));
}

// Data-parallel replicas over one copy of the weights: each replica's passes, run at the same time
// as the model's on threads of their own, give the model's logits bit for bit.
TEST(WeightMemory, ReplicasShareTheWeightsAndGiveTheModelsLogits) {
    const std::string src = test::testdata("models/stories260K/stories260K.bin");
    if (!test::file_exists(src)) KILN_SKIP_MISSING() << "no test data";
    auto ck = loader::load_checkpoint(src);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    core::ThreadPool pool(1), pool_a(1), pool_b(1);
    auto model = create_model(*ck, &pool, ops::LinearOptions{}, WeightMemory::kAnonymous);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    const std::vector<int32_t> ids = {1, 403, 407, 261, 378, 383, 286, 300, 301, 302};
    KvCache c0((*model)->config(), 64);
    auto want = (*model)->forward(ids, c0, /*all_logits=*/true);
    ASSERT_TRUE(want.is_ok());
    std::unique_ptr<CpuModel> ra = (*model)->replica(&pool_a), rb = (*model)->replica(&pool_b);
    std::vector<std::vector<float>> got(3);
    std::vector<std::thread> threads;
    CpuModel* const models[3] = {model->get(), ra.get(), rb.get()};
    for (int r = 0; r < 3; ++r)
        threads.emplace_back([&, r] {
            for (int rep = 0; rep < 20; ++rep) {  // passes of all three overlap
                KvCache c(models[r]->config(), 64);
                auto l = models[r]->forward(ids, c, /*all_logits=*/true);
                if (!l.is_ok() || (rep > 0 && *l != got[size_t(r)])) return got[size_t(r)].clear();
                got[size_t(r)] = *l;
            }
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 3; ++r) {
        ASSERT_EQ(got[size_t(r)].size(), want->size()) << "model " << r << " failed or changed between passes";
        EXPECT_EQ(0, std::memcmp(got[size_t(r)].data(), want->data(), want->size() * sizeof(float))) << r;
    }
}

INSTANTIATE_TEST_SUITE_P(Formats, WeightMemoryModel, ::testing::Values("gguf", "safetensors", "w4-g32"),
                         [](const auto& info) { return info.param == "w4-g32" ? std::string("w4_g32") : info.param; });

}  // namespace
}  // namespace kiln::model
