// The JSON types of json_schema_to_gbnf: each builds one expression for its type from the keywords
// that apply to it (json_schema.cc has already refused the keywords kiln cannot honour).
#include <algorithm>
#include <cmath>

#include "grammar/gbnf.h"
#include "grammar/json_schema_internal.h"
#include "grammar/regex.h"

namespace kiln::grammar::json_schema_detail {

using core::error;
using core::Result;
using core::StatusCode;

namespace {

const std::string kQuote = R"g("\"")g";
const std::string kComma = R"g("," ws )g";  // a comma and the whitespace after it

std::optional<int64_t> minus(std::optional<int64_t> v, int64_t d) {
    return v ? std::optional<int64_t>(*v - d) : std::nullopt;
}

}  // namespace

Result<std::string> Converter::string_expr(const Json& s, const std::string& ptr) {
    bool lengths = s.contains("minLength") || s.contains("maxLength");
    auto refuse_mix = [&](const char* key) -> core::Status {
        return error(StatusCode::kUnsupported)
               << "unsupported keyword '" << key << "' combined with another string constraint at " << where(ptr);
    };
    for (const char* key : {"format", "pattern"}) {
        auto it = s.find(key);
        if (it == s.end()) continue;
        if (!it->is_string())
            return error(StatusCode::kInvalidArgument) << key << " at " << where(ptr) << " is not a string";
        bool is_format = key == std::string_view("format");
        Result<std::string> e = is_format ? format_gbnf(it->get<std::string>()) : regex_to_gbnf(it->get<std::string>());
        // Validators ignore formats they do not know; so does the grammar.
        if (is_format && e.status().code() == StatusCode::kUnsupported) continue;
        if (!e.is_ok()) return error(e.status().code()) << key << " at " << where(ptr) << ": " << e.status().message();
        if (lengths || (is_format && s.contains("pattern"))) return refuse_mix(key);
        return kQuote + " " + e.value() + " " + kQuote;
    }
    if (!lengths) return use("string");
    KILN_ASSIGN_OR_RETURN(std::optional<int64_t> lo, count(s, "minLength", ptr));
    KILN_ASSIGN_OR_RETURN(std::optional<int64_t> hi, count(s, "maxLength", ptr));
    if (hi && lo.value_or(0) > *hi)
        return error(StatusCode::kInvalidArgument) << "minLength > maxLength at " << where(ptr);
    return seq(seq(kQuote, repeat(use("string-char"), lo.value_or(0), hi)), kQuote);
}

Result<std::string> Converter::integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi,
                                             const std::string& ptr) {
    Result<std::string> e = integer_range_gbnf(lo, hi);
    if (!e.is_ok()) return error(e.status().code()) << "range at " << where(ptr) << ": " << e.status().message();
    return e;
}

// Fractional bounds round inwards: integers >= 1.5 are those >= 2, integers > 1.5 too.
Result<std::string> Converter::integer_expr(const Json& s, const std::string& ptr) {
    std::optional<int64_t> lo, hi;
    auto raise = [&](int64_t v) { lo = lo ? std::max(*lo, v) : v; };
    auto lower = [&](int64_t v) { hi = hi ? std::min(*hi, v) : v; };
    KILN_ASSIGN_OR_RETURN(std::optional<Bound> min, bound(s, "minimum", ptr));
    KILN_ASSIGN_OR_RETURN(std::optional<Bound> xmin, bound(s, "exclusiveMinimum", ptr));
    KILN_ASSIGN_OR_RETURN(std::optional<Bound> max, bound(s, "maximum", ptr));
    KILN_ASSIGN_OR_RETURN(std::optional<Bound> xmax, bound(s, "exclusiveMaximum", ptr));
    if (min) raise(min->exact ? *min->exact : static_cast<int64_t>(std::ceil(min->value)));
    if (xmin) raise(xmin->exact ? *xmin->exact + 1 : static_cast<int64_t>(std::floor(xmin->value)) + 1);
    if (max) lower(max->exact ? *max->exact : static_cast<int64_t>(std::floor(max->value)));
    if (xmax) lower(xmax->exact ? *xmax->exact - 1 : static_cast<int64_t>(std::ceil(xmax->value)) - 1);
    if (!lo && !hi) return use("integer");
    if (lo && hi && *lo > *hi)
        return error(StatusCode::kInvalidArgument) << "no integer satisfies the bounds at " << where(ptr);
    return integer_range(lo, hi, ptr);
}

// Numbers between whole-number bounds L and H, without exponents, as three disjoint sets:
//   whole values in the bounds (exclusive bounds shrink this set only), optionally with a zero fraction;
//   n.F with F not all zeros and 0 <= n: the value lies in (n, n+1), inside iff L <= n and n + 1 <= H;
//   -n.F likewise, in (-n-1, -n): inside iff L <= -n-1 and -n <= H (this is where -0.5 comes from).
// E.g. [-3, 5]: -3..5 with optional .0*, then 0..4 and -0..-2 with a non-zero fraction.
Result<std::string> Converter::number_expr(const Json& s, const std::string& ptr) {
    struct Side {
        std::optional<int64_t> at;
        bool exclusive = false;
    } lo, hi;
    struct Key {
        const char* name;
        bool lower, exclusive;
    };
    for (Key key : {Key{"minimum", true, false}, Key{"exclusiveMinimum", true, true}, Key{"maximum", false, false},
                    Key{"exclusiveMaximum", false, true}}) {
        KILN_ASSIGN_OR_RETURN(std::optional<Bound> b, bound(s, key.name, ptr));
        if (!b) continue;
        if (!b->exact)
            return error(StatusCode::kUnsupported)
                   << "unsupported keyword '" << key.name << "' with a non-integer value on a number at " << where(ptr);
        Side& side = key.lower ? lo : hi;
        bool tighter = !side.at || (key.lower ? *b->exact > *side.at : *b->exact < *side.at) ||
                       (*b->exact == *side.at && key.exclusive);
        if (tighter) side = {b->exact, key.exclusive};
    }
    if (!lo.at && !hi.at) return use("number");
    const std::string frac = R"g("." "0"{0,15} [1-9] [0-9]{0,15})g";  // digits bounded: see json_schema.h
    std::vector<std::string> parts;
    std::optional<int64_t> wlo = minus(lo.at, lo.exclusive ? -1 : 0), whi = minus(hi.at, hi.exclusive ? 1 : 0);
    if (!wlo || !whi || *wlo <= *whi) {
        KILN_ASSIGN_OR_RETURN(std::string whole, integer_range(wlo, whi, ptr));
        parts.push_back(whole + R"g( ( "." "0"{1,16} )?)g");
    }
    int64_t plo = std::max<int64_t>(lo.at.value_or(0), 0);
    std::optional<int64_t> phi = minus(hi.at, 1);
    if (!phi || plo <= *phi) {
        KILN_ASSIGN_OR_RETURN(std::string n, integer_range(plo, phi, ptr));
        parts.push_back(n + " " + frac);
    }
    int64_t nlo = std::max<int64_t>(hi.at ? -*hi.at : 0, 0);
    std::optional<int64_t> nhi = lo.at ? std::optional<int64_t>(-*lo.at - 1) : std::nullopt;
    if (!nhi || nlo <= *nhi) {
        KILN_ASSIGN_OR_RETURN(std::string n, integer_range(nlo, nhi, ptr));
        parts.push_back(R"g("-" )g" + n + " " + frac);
    }
    if (parts.empty()) return error(StatusCode::kInvalidArgument) << "no number satisfies the bounds at " << where(ptr);
    return group(parts);
}

// Properties follow the schema's order, each required one present, optional ones skippable, commas only
// between those present, then any extra properties. Once something is written, property i is just
// `( "," ws kv_i )?` (without the ? when required), so what follows property i is a plain sequence. The
// first property written needs a choice: any property up to the first required one (or an extra one
// when none is required). Tails referenced by two choices become rules, keeping the grammar linear.
Result<std::string> Converter::object_expr(const Json& s, const std::string& ptr, const std::string& name) {
    const std::string open = R"g("{" )g" + use("ws"), close = R"g("}")g";
    auto props = s.find("properties");
    if (props != s.end() && !props->is_object())
        return error(StatusCode::kInvalidArgument) << "properties at " << where(ptr) << " is not an object";
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
        if (!it->is_array())
            return error(StatusCode::kInvalidArgument) << "required at " << where(ptr) << " is not a list";
        for (const auto& r : *it) {
            if (!r.is_string())
                return error(StatusCode::kInvalidArgument) << "required at " << where(ptr) << " lists a non-string";
            if (props == s.end() || !props->contains(r.get<std::string>()))
                return error(StatusCode::kUnsupported)
                       << "unsupported keyword 'required': property '" << r.get<std::string>()
                       << "' is not in properties at " << where(ptr);
            required.insert(r.get<std::string>());
        }
    }
    // Listed properties close the object unless additionalProperties opens it; with neither, any object.
    std::string extra;  // the rule for an extra property's value; "" when none are allowed
    auto addl = s.find("additionalProperties");
    if (addl == s.end() ? props == s.end() : addl->is_boolean() && addl->get<bool>()) {
        if (props == s.end()) return use("object");
        extra = use("value");
    } else if (addl != s.end() && !addl->is_boolean()) {
        KILN_ASSIGN_OR_RETURN(extra, rule_for(*addl, ptr + "/additionalProperties", name + "-additional"));
    }

    std::vector<std::string> kv;
    std::vector<bool> req;
    static const Json kNone = Json::object();
    for (const auto& [key, sub] : (props == s.end() ? kNone : *props).items()) {
        std::string sub_ptr = ptr + "/properties/" + pointer_token(key);
        KILN_ASSIGN_OR_RETURN(std::string value, rule_for(sub, sub_ptr, name + "-" + sanitize(key)));
        kv.push_back(gbnf_literal(compact(Json(key))) + R"g( ":" ws )g" + value);
        req.push_back(required.count(key) > 0);
    }
    std::string extra_kv = extra.empty() ? "" : use("string") + R"g( ":" ws )g" + extra;
    size_t k = kv.size();
    size_t first_req = std::find(req.begin(), req.end(), true) - req.begin();
    size_t last_first = first_req < k ? first_req : k - 1;  // the last property that may come first (k > 0)

    std::vector<std::string> tail(k + 1);  // tail[i]: what may follow once properties before i are settled
    tail[k] = extra.empty() ? "" : repeat(kComma + extra_kv, 0, std::nullopt);
    for (size_t i = k; i >= 1; --i) {
        if (i < k) tail[i] = seq(req[i] ? kComma + kv[i] : "( " + kComma + kv[i] + " )?", tail[i + 1]);
        bool two_uses = k > 0 && i >= 2 && i <= last_first + 1;  // by choice i-1 and by tail[i-1]
        if (two_uses && !tail[i].empty() && !is_identifier(tail[i])) {
            std::string rule = reserve(name + "-tail" + std::to_string(i));
            bodies_[rule] = tail[i];
            tail[i] = rule;
        }
    }
    std::vector<std::string> firsts;
    for (size_t i = 0; k > 0 && i <= last_first; ++i) firsts.push_back(seq(kv[i], tail[i + 1]));
    if (first_req == k && !extra.empty()) firsts.push_back(seq(extra_kv, tail[k]));
    if (firsts.empty()) return open + " " + close;
    if (first_req < k) return open + " " + group(firsts) + " ws " + close;
    return open + " ( " + group(firsts) + " ws )? " + close;
}

// Elements: the prefix items in order, then `items`; lengths within [minItems, maxItems]. After j
// elements the array may close only when j >= minItems, hence one optional group per prefix position.
Result<std::string> Converter::array_expr(const Json& s, const std::string& ptr, const std::string& name) {
    const std::string open = R"g("[" )g" + use("ws"), close = R"g("]")g";
    const Json* prefix = nullptr;
    const Json* items = nullptr;
    std::string prefix_key = "prefixItems", items_key = "items";
    if (auto it = s.find("prefixItems"); it != s.end()) {
        if (!it->is_array())
            return error(StatusCode::kInvalidArgument) << "prefixItems at " << where(ptr) << " is not a list";
        prefix = &*it;
    }
    if (auto it = s.find("items"); it != s.end()) {
        if (it->is_array()) {  // drafts 4 to 2019-09: a list of items is the prefix, additionalItems the rest
            if (prefix)
                return error(StatusCode::kInvalidArgument) << "items and prefixItems are both lists at " << where(ptr);
            prefix = &*it;
            prefix_key = "items";
            items_key = "additionalItems";
        } else {
            items = &*it;
        }
    }
    if (items_key == "additionalItems")
        if (auto it = s.find("additionalItems"); it != s.end()) items = &*it;
    std::vector<std::string> pre;
    for (size_t i = 0; prefix && i < prefix->size(); ++i) {
        std::string sub_ptr = ptr + "/" + prefix_key + "/" + std::to_string(i);
        KILN_ASSIGN_OR_RETURN(std::string r, rule_for((*prefix)[i], sub_ptr, name + "-item" + std::to_string(i)));
        pre.push_back(r);
    }
    KILN_ASSIGN_OR_RETURN(std::optional<int64_t> min, count(s, "minItems", ptr));
    KILN_ASSIGN_OR_RETURN(std::optional<int64_t> max, count(s, "maxItems", ptr));
    int64_t m = min.value_or(0), k = static_cast<int64_t>(pre.size());
    std::string item;
    if (items && items->is_boolean() && !items->get<bool>()) {
        max = std::min(max.value_or(k), k);
    } else if (items && !items->is_boolean()) {
        KILN_ASSIGN_OR_RETURN(item, rule_for(*items, ptr + "/" + items_key, name + "-item"));
    } else {
        item = use("value");
    }
    if (max && m > *max)
        return error(StatusCode::kInvalidArgument)
               << "no array length satisfies minItems, maxItems and items at " << where(ptr);
    if (max && *max == 0) return open + " " + close;
    std::string elements;
    if (k == 0) {
        elements = seq(item, repeat(kComma + item, std::max<int64_t>(m - 1, 0), minus(max, 1)));
    } else {
        std::optional<int64_t> rest_max = max ? std::optional<int64_t>(std::max<int64_t>(*max - k, 0)) : std::nullopt;
        std::string t = item.empty() ? "" : repeat(kComma + item, std::max<int64_t>(m - k, 0), rest_max);
        for (int64_t j = std::min(k, max.value_or(k)) - 1; j >= 1; --j) {
            t = seq(kComma + pre[j], t);
            if (j >= m) t = "( " + t + " )?";
        }
        elements = seq(pre[0], t);
    }
    if (m >= 1) return open + " " + elements + " ws " + close;
    return open + " ( " + elements + " ws )? " + close;
}

}  // namespace kiln::grammar::json_schema_detail
