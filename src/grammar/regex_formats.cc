// format_gbnf and integer_range_gbnf (see regex.h). The formats are written as regular expressions
// and compiled by regex_to_gbnf; they accept exactly what Python jsonschema's draft 2020-12 format
// checker accepts where it has one (date, time, date-time with rfc3339-validator; uuid, ipv4, ipv6),
// so a model's output validates there (runs are bounded so that a model cannot write one forever:
// fractions of a second up to 9 digits, an email's atoms up to 64 characters and 4 of them, at
// most 8 hostname labels, a URI's rest up to 1024 characters):
//   - date: YYYY-MM-DD, year 0001-9999, days per month, February 29 in leap years only;
//   - time: hh:mm:ss(.frac)? then Z or +hh:mm / -hh:mm; hours 00-23, no leap second (:60), as
//     rfc3339-validator; 't' and 'z' may be lower case (RFC 3339 section 5.6 allows it);
//   - ipv6: every RFC 3986 form (8 groups, :: compression anywhere, an IPv4 dotted tail), no zone id.
// The others follow a practical subset of their RFC:
//   - email: dot-atom local part (RFC 5322 atext, no quoted strings) "@" a hostname of two labels
//     or more (local@domain.tld); no IP-literal domains;
//   - hostname: RFC 1123 labels of 1-63 letters, digits and '-', not starting or ending with '-',
//     separated by dots; no trailing dot, and the 253-byte total is not enforced;
//   - uri: scheme ":" then one or more RFC 3986 characters (unreserved, reserved, %HH).
// integer_range_gbnf splits [lo, hi] by sign and by number of digits and writes each equal-length
// range digit by digit (a common prefix, then [a-b][0-9]{k} pieces), so it is exact for all of int64.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "grammar/regex.h"

namespace kiln::grammar {
namespace {

using core::StatusCode;

const std::string kIpv4 = R"((?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3})";

std::string ipv6_pattern() {
    const std::string h = "[0-9A-Fa-f]{1,4}";
    const std::string ls32 = "(?:" + h + ":" + h + "|" + kIpv4 + ")";
    auto groups = [&](int n) { return "(?:" + h + ":){" + std::to_string(n) + "}"; };
    auto before = [&](int n) {  // [ *n( h16 ":" ) h16 ] "::"
        return (n == 0 ? "(?:" + h + ")?" : "(?:(?:" + h + ":){0," + std::to_string(n) + "}" + h + ")?") + "::";
    };
    std::vector<std::string> forms = {
        groups(6) + ls32,          "::" + groups(5) + ls32,   before(0) + groups(4) + ls32,
        before(1) + groups(3) + ls32, before(2) + groups(2) + ls32, before(3) + h + ":" + ls32,
        before(4) + ls32,          before(5) + h,             before(6),
    };
    std::string out;
    for (const std::string& f : forms) out += (out.empty() ? "" : "|") + f;
    return out;
}

const std::string kLabel = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";

std::string format_pattern(std::string_view format) {
    if (format == "date" || format == "date-time") {
        const std::string year = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})";
        const std::string leap_year = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)";
        const std::string month_day =
            "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|"
            "02-(?:0[1-9]|1[0-9]|2[0-8]))";
        std::string date = "(?:" + year + "-" + month_day + "|" + leap_year + "-02-29)";
        if (format == "date") return date;
        return date + "[Tt]" + format_pattern("time");
    }
    if (format == "time") return "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
    if (format == "uuid") return "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}";
    if (format == "ipv4") return kIpv4;
    if (format == "ipv6") return ipv6_pattern();
    if (format == "hostname") return kLabel + "(?:\\." + kLabel + "){0,7}";
    if (format == "email") {
        const std::string atext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,64}";
        return atext + "(?:\\." + atext + "){0,3}@" + kLabel + "(?:\\." + kLabel + "){1,4}";
    }
    if (format == "uri") return "[A-Za-z][A-Za-z0-9+.-]*:(?:[A-Za-z0-9._~:/?#\\[\\]@!$&'()*+,;=-]|%[0-9A-Fa-f]{2}){1,1024}";
    return "";
}

// ---- Integer ranges ----

std::string digit_class(char a, char b) {
    if (a == b) return std::string("\"") + a + "\"";
    if (a == '0' && b == '9') return "[0-9]";
    return b == a + 1 ? std::string("[") + a + b + "]" : std::string("[") + a + "-" + b + "]";
}

// `k` more digits, any value: "", [0-9], [0-9]{k}.
std::string any_digits(size_t k) {
    if (k == 0) return "";
    return k == 1 ? "[0-9]" : "[0-9]{" + std::to_string(k) + "}";
}

// Sequences of digit pieces; a literal that ends one piece and a literal that starts the next
// (without a quantifier) merge: "1" "20" => "120".
std::string join_seq(const std::vector<std::string>& parts) {
    std::string out;
    for (const std::string& p : parts) {
        if (p.empty()) continue;
        size_t close = p[0] == '"' ? p.find('"', 1) : std::string::npos;
        bool merge = !out.empty() && out.back() == '"' && close != std::string::npos &&
                     (close + 1 == p.size() || p[close + 1] == ' ');
        if (merge)
            out.pop_back(), out += p.substr(1);
        else
            out += (out.empty() ? "" : " ") + p;
    }
    return out;
}

std::string join_alts(const std::vector<std::string>& alts, bool parens) {
    std::string out;
    for (const std::string& a : alts) out += (out.empty() ? "" : " | ") + a;
    return (parens && alts.size() > 1) ? "(" + out + ")" : out;
}

// The digit strings s with a <= s <= b, all three of the same length (leading zeros allowed: the
// caller fixes the first digit). Alternatives, each a sequence.
std::vector<std::string> same_length(const std::string& a, const std::string& b) {
    size_t n = a.size();
    if (n == 0) return {""};
    size_t common = 0;
    while (common < n && a[common] == b[common]) ++common;
    std::string prefix = common > 0 ? "\"" + a.substr(0, common) + "\"" : "";
    if (common == n) return {prefix};
    std::string ar = a.substr(common + 1), br = b.substr(common + 1);
    bool low_full = ar.find_first_not_of('0') == std::string::npos;   // a's tail is 00..0
    bool high_full = br.find_first_not_of('9') == std::string::npos;  // b's tail is 99..9
    char lo = a[common], hi = b[common];
    std::vector<std::string> alts;
    if (!low_full) {  // lo followed by [ar, 99..9]
        alts.push_back(join_seq({std::string("\"") + lo + "\"", join_alts(same_length(ar, std::string(ar.size(), '9')), true)}));
        ++lo;
    }
    char mid_hi = high_full ? hi : char(hi - 1);
    if (lo == '0' && mid_hi == '9')
        alts.push_back(any_digits(ar.size() + 1));
    else if (lo <= mid_hi)
        alts.push_back(join_seq({digit_class(lo, mid_hi), any_digits(ar.size())}));
    if (!high_full)  // hi followed by [00..0, br]
        alts.push_back(join_seq({std::string("\"") + hi + "\"", join_alts(same_length(std::string(br.size(), '0'), br), true)}));
    if (prefix.empty()) return alts;
    return {join_seq({prefix, join_alts(alts, true)})};
}

// [1-9] then p-1 to q-1 more digits: every number of p..q digits.
std::string whole_lengths(size_t p, size_t q) {
    std::string tail;
    if (p == q)
        tail = any_digits(p - 1);
    else
        tail = (p == 1 && q == 2) ? "[0-9]?" : "[0-9]{" + std::to_string(p - 1) + "," + std::to_string(q - 1) + "}";
    return join_seq({"[1-9]", tail});
}

// An open side of a range stops at this many digits, the longest int64: a model left an endless
// run of digits keeps producing them.
constexpr size_t kMaxDigits = 19;

// Positive integers in [a, b] (a >= 1; b absent: up to kMaxDigits digits), without leading zeros.
// Only the shortest and the longest length can be partial; the lengths between are one piece.
std::vector<std::string> positive_range(uint64_t a, std::optional<uint64_t> b) {
    auto smallest = [](size_t len) { return "1" + std::string(len - 1, '0'); };
    auto largest = [](size_t len) { return std::string(len, '9'); };
    std::string as = std::to_string(a);
    const size_t la = as.size();
    const std::string bs = b ? std::to_string(*b) : largest(std::max(la, kMaxDigits));
    const size_t lb = bs.size();
    std::vector<std::string> alts;
    size_t len = la;
    std::string first_hi = lb == la ? bs : largest(la);
    if (as != smallest(la) || first_hi != largest(la)) {  // a partial first length
        alts = same_length(as, first_hi);
        if (lb == la) return alts;
        ++len;
    }
    bool last_partial = bs != largest(lb);
    size_t whole_to = last_partial ? lb - 1 : lb;
    if (len <= whole_to) alts.push_back(whole_lengths(len, whole_to));
    if (last_partial) {
        std::vector<std::string> last = same_length(smallest(lb), bs);
        alts.insert(alts.end(), last.begin(), last.end());
    }
    return alts;
}

}  // namespace

core::Result<std::string> format_gbnf(std::string_view format) {
    std::string pattern = format_pattern(format);
    if (pattern.empty())
        return core::error(StatusCode::kUnsupported)
               << "string format \"" << std::string(format)
               << "\" is not supported (date, time, date-time, uuid, email, ipv4, ipv6, hostname, uri are)";
    return regex_to_gbnf(pattern);
}

core::Result<std::string> integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi) {
    if (lo && hi && *lo > *hi)
        return core::error(StatusCode::kInvalidArgument) << "integer range: minimum " << *lo << " is above maximum " << *hi;
    // Magnitudes as uint64_t: -INT64_MIN does not fit an int64_t.
    auto magnitude = [](int64_t v) { return v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v); };
    std::vector<std::string> negative, positive;
    if (!lo || *lo < 0) {  // -m for m in [max(1, -hi), -lo]
        uint64_t m_lo = (hi && *hi < 0) ? magnitude(*hi) : 1;
        std::optional<uint64_t> m_hi;
        if (lo) m_hi = magnitude(*lo);
        negative = positive_range(m_lo, m_hi);
    }
    if (!hi || *hi >= 1) {
        uint64_t p_lo = (lo && *lo > 1) ? uint64_t(*lo) : 1;
        std::optional<uint64_t> p_hi;
        if (hi) p_hi = uint64_t(*hi);
        positive = positive_range(p_lo, p_hi);
    }
    std::vector<std::string> alts;
    if ((!lo || *lo <= 0) && (!hi || *hi >= 0)) alts.push_back("\"0\"");
    if (!negative.empty() && negative == positive) {  // a symmetric range: "-"? once
        alts.push_back(join_seq({"\"-\"?", join_alts(positive, true)}));
    } else {
        if (!negative.empty()) alts.push_back(join_seq({"\"-\"", join_alts(negative, true)}));
        alts.insert(alts.end(), positive.begin(), positive.end());
    }
    return "(" + join_alts(alts, false) + ")";
}

}  // namespace kiln::grammar
