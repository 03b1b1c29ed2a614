// UTF-8 helpers, the byte-level alphabet and NFC (see unicode.h). NFC follows UAX #15: full
// canonical decomposition (Hangul algorithmically), canonical ordering by combining class, then
// canonical composition with the "blocked" rule; data in the generated unicode_nfc_tables.inc.
#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <vector>

namespace kiln::tokenizer {
namespace {

#include "tokenizer/unicode_nfc_tables.inc"

constexpr uint32_t kHangulS = 0xAC00, kHangulL = 0x1100, kHangulV = 0x1161, kHangulT = 0x11A7;
constexpr uint32_t kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28;
constexpr uint32_t kHangulNCount = kHangulVCount * kHangulTCount, kHangulSCount = kHangulLCount * kHangulNCount;

struct ByteMaps {
    std::array<uint32_t, 256> to_cp{};
    std::array<int16_t, 512> from_cp{};  // every alphabet code point is < 0x144
};

ByteMaps make_byte_maps() {
    ByteMaps m;
    m.from_cp.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        m.to_cp[b] = printable ? b : next++;
        m.from_cp[m.to_cp[b]] = int16_t(b);
    }
    return m;
}

const ByteMaps& byte_maps() {
    static const ByteMaps kMaps = make_byte_maps();
    return kMaps;
}

uint32_t ccc_of(uint32_t cp) {
    if (cp < 0x300) return 0;
    size_t lo = 0, hi = std::size(kNfcCcc);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (kNfcCcc[mid][1] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (lo < std::size(kNfcCcc) && kNfcCcc[lo][0] <= cp) ? kNfcCcc[lo][2] : 0;
}

const uint32_t* decomp_of(uint32_t cp) {
    if (cp < 0xC0) return nullptr;
    auto it = std::lower_bound(std::begin(kNfcDecomp), std::end(kNfcDecomp), cp,
                               [](const uint32_t* row, uint32_t v) { return row[0] < v; });
    return (it != std::end(kNfcDecomp) && (*it)[0] == cp) ? *it : nullptr;
}

// Primary composite of (a, b), or 0.
uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= kHangulL && a < kHangulL + kHangulLCount && b >= kHangulV && b < kHangulV + kHangulVCount)
        return kHangulS + ((a - kHangulL) * kHangulVCount + (b - kHangulV)) * kHangulTCount;
    if (a >= kHangulS && a < kHangulS + kHangulSCount && (a - kHangulS) % kHangulTCount == 0 && b > kHangulT &&
        b < kHangulT + kHangulTCount)
        return a + (b - kHangulT);
    auto it = std::lower_bound(std::begin(kNfcComp), std::end(kNfcComp), std::pair{a, b},
                               [](const uint32_t* row, std::pair<uint32_t, uint32_t> v) {
                                   return row[0] < v.first || (row[0] == v.first && row[1] < v.second);
                               });
    return (it != std::end(kNfcComp) && (*it)[0] == a && (*it)[1] == b) ? (*it)[2] : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
    if (cp >= kHangulS && cp < kHangulS + kHangulSCount) {
        uint32_t s = cp - kHangulS;
        out.push_back(kHangulL + s / kHangulNCount);
        out.push_back(kHangulV + (s % kHangulNCount) / kHangulTCount);
        if (s % kHangulTCount) out.push_back(kHangulT + s % kHangulTCount);
        return;
    }
    const uint32_t* d = decomp_of(cp);
    if (!d) {
        out.push_back(cp);
        return;
    }
    decompose(d[1], out);
    if (d[2]) decompose(d[2], out);
}

// Canonical ordering then composition, in place (UAX #15 sample algorithm).
void reorder_and_compose(std::vector<uint32_t>& cps) {
    for (size_t i = 1; i < cps.size(); ++i) {  // stable insertion sort of each run of non-starters
        uint32_t c = ccc_of(cps[i]);
        if (c == 0) continue;
        size_t j = i;
        while (j > 0 && ccc_of(cps[j - 1]) > c) {
            std::swap(cps[j], cps[j - 1]);
            --j;
        }
    }
    if (cps.empty()) return;
    size_t starter = 0, out = 1;
    uint32_t last_class = ccc_of(cps[0]) ? 256 : 0;
    for (size_t i = 1; i < cps.size(); ++i) {
        uint32_t c = ccc_of(cps[i]);
        uint32_t comp = last_class == 256 ? 0 : compose_pair(cps[starter], cps[i]);
        if (comp && (last_class < c || last_class == 0)) {
            cps[starter] = comp;
            continue;
        }
        if (c == 0) starter = out;
        last_class = c;
        cps[out++] = cps[i];
    }
    cps.resize(out);
}

}  // namespace

int32_t utf8_decode(std::string_view s, size_t pos, size_t* len) {
    const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
    size_t avail = s.size() - pos;
    uint8_t b0 = p[0];
    *len = 1;
    if (b0 < 0x80) return b0;
    size_t n = utf8_len(b0);
    if (n == 1 || n > avail) return -1;
    uint32_t cp = b0 & (0x7F >> n);
    for (size_t i = 1; i < n; ++i) {
        if ((p[i] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    *len = n;
    return int32_t(cp);
}

void utf8_append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

size_t utf8_incomplete_tail(std::string_view s) {
    // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
    for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
        auto b = uint8_t(s[s.size() - back]);
        if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
        size_t n = utf8_len(b);
        return (n > back) ? back : 0;
    }
    return 0;
}

bool utf8_valid(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        size_t n;
        if (utf8_decode(s, i, &n) < 0) return false;
        i += n;
    }
    return true;
}

uint32_t byte_to_unicode(uint8_t b) {
    return byte_maps().to_cp[b];
}

int32_t unicode_to_byte(uint32_t cp) {
    return cp < 512 ? byte_maps().from_cp[cp] : -1;
}

bool nfc_normalize(std::string_view in, std::string& out) {
    // Every code point below U+0300 is NFC-stable and none composes with a preceding character, so
    // text whose lead bytes are all < 0xCC needs no work (the common case).
    if (std::none_of(in.begin(), in.end(), [](char c) { return uint8_t(c) >= 0xCC; })) return false;
    std::string res;
    res.reserve(in.size());
    std::vector<uint32_t> run;  // decomposed code points since the last invalid byte
    auto emit_run = [&] {
        reorder_and_compose(run);
        for (uint32_t cp : run) utf8_append(res, cp);
        run.clear();
    };
    for (size_t i = 0; i < in.size();) {
        size_t n;
        int32_t cp = utf8_decode(in, i, &n);
        if (cp < 0) {
            emit_run();
            res += in[i];
        } else {
            decompose(uint32_t(cp), run);
        }
        i += n;
    }
    emit_run();
    if (res == in) return false;
    out = std::move(res);
    return true;
}

}  // namespace kiln::tokenizer
