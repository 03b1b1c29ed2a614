// Replays a fuzz target's seed corpus without libFuzzer, so the regular (gcc) build and CI run every
// fuzz entry point: each seed as is, every truncation prefix of it, and each byte set to 0x00 and
// 0xff in turn. Deterministic; a crash or sanitizer report fails the test. Usage: X_replay DIR...
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// A private copy per call so ASan sees reads past the end of exactly `size` bytes.
void run(const std::vector<uint8_t>& bytes, size_t size) {
    std::vector<uint8_t> copy(bytes.begin(), bytes.begin() + std::ptrdiff_t(size));
    LLVMFuzzerTestOneInput(copy.data(), copy.size());
}

}  // namespace

int main(int argc, char** argv) {
    size_t num_files = 0, num_runs = 0;
    for (int a = 1; a < argc; ++a) {
        std::error_code ec;
        for (std::filesystem::directory_iterator it(argv[a], ec), end; !ec && it != end; it.increment(ec)) {
            if (!it->is_regular_file()) continue;
            std::ifstream in(it->path(), std::ios::binary);
            std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            ++num_files;
            for (size_t n = 0; n <= bytes.size(); ++n, ++num_runs) run(bytes, n);
            for (size_t i = 0; i < bytes.size(); ++i) {
                uint8_t saved = bytes[i];
                for (uint8_t v : {uint8_t(0x00), uint8_t(0xff)}) {
                    bytes[i] = v;
                    run(bytes, bytes.size());
                    ++num_runs;
                }
                bytes[i] = saved;
            }
        }
    }
    std::printf("%zu seed files, %zu inputs replayed\n", num_files, num_runs);
    if (num_files == 0) {
        std::fprintf(stderr, "no seed files found\n");
        return 1;
    }
    return 0;
}
