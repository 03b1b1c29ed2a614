#include "grammar/utf8_ranges.h"

#include <algorithm>

namespace kiln::grammar {

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges) {
    std::vector<CodeRange> cut;
    for (CodeRange r : ranges) {
        r.hi = std::min<uint32_t>(r.hi, 0x10FFFF);
        if (r.lo > r.hi) continue;
        if (r.lo < 0xD800 && r.hi > 0xDFFF) {
            cut.push_back({r.lo, 0xD7FF});
            cut.push_back({0xE000, r.hi});
        } else if (r.lo >= 0xD800 && r.hi <= 0xDFFF) {
            continue;
        } else if (r.lo >= 0xD800 && r.lo <= 0xDFFF) {
            cut.push_back({0xE000, r.hi});
        } else if (r.hi >= 0xD800 && r.hi <= 0xDFFF) {
            cut.push_back({r.lo, 0xD7FF});
        } else {
            cut.push_back(r);
        }
    }
    std::sort(cut.begin(), cut.end(), [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
    std::vector<CodeRange> out;
    for (const CodeRange& r : cut) {
        if (!out.empty() && r.lo <= out.back().hi + 1) out.back().hi = std::max(out.back().hi, r.hi);
        else out.push_back(r);
    }
    return out;
}

std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& ranges) {
    std::vector<CodeRange> out;
    uint32_t next = 0;
    for (const CodeRange& r : ranges) {
        if (r.lo > next) out.push_back({next, r.lo - 1});
        next = r.hi + 1;
    }
    if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
    return normalize_ranges(std::move(out));
}

namespace {

int utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void encode(uint32_t cp, uint8_t* b) {
    switch (utf8_len(cp)) {
        case 1: b[0] = uint8_t(cp); break;
        case 2: b[0] = uint8_t(0xC0 | (cp >> 6)); b[1] = uint8_t(0x80 | (cp & 0x3F)); break;
        case 3:
            b[0] = uint8_t(0xE0 | (cp >> 12)); b[1] = uint8_t(0x80 | ((cp >> 6) & 0x3F));
            b[2] = uint8_t(0x80 | (cp & 0x3F));
            break;
        default:
            b[0] = uint8_t(0xF0 | (cp >> 18)); b[1] = uint8_t(0x80 | ((cp >> 12) & 0x3F));
            b[2] = uint8_t(0x80 | ((cp >> 6) & 0x3F)); b[3] = uint8_t(0x80 | (cp & 0x3F));
    }
}

// [lo, hi] within one encoding length: split until every byte position varies independently (each
// continuation byte spans its full 80..BF range below the first position that differs).
void split(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>& out) {
    const int n = utf8_len(lo);
    for (int i = 1; i < n; ++i) {
        const uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                split(lo, lo | m, out);
                split((lo | m) + 1, hi, out);
                return;
            }
            if ((hi & m) != m) {
                split(lo, (hi & ~m) - 1, out);
                split(hi & ~m, hi, out);
                return;
            }
        }
    }
    uint8_t a[4], b[4];
    encode(lo, a);
    encode(hi, b);
    ByteRangeSeq seq;
    for (int i = 0; i < n; ++i) seq.emplace_back(a[i], b[i]);
    out.push_back(std::move(seq));
}

}  // namespace

std::vector<ByteRangeSeq> utf8_sequences(const std::vector<CodeRange>& ranges) {
    static const uint32_t kEnds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    std::vector<ByteRangeSeq> out;
    for (const CodeRange& r : ranges) {
        uint32_t lo = r.lo;
        for (uint32_t end : kEnds) {
            if (lo > r.hi) break;
            if (lo > end) continue;
            const uint32_t hi = std::min(end, r.hi);
            split(lo, hi, out);
            lo = hi + 1;
        }
    }
    return out;
}

}  // namespace kiln::grammar
