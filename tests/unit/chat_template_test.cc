// render_chat_template against Python jinja2 (as HF apply_chat_template configures it): the goldens in
// tests/golden/data/chat_templates.json come from scripts/gen_chat_template_goldens.py, some with
// `extra` variables (tools, date_string, overridden bos_token / add_generation_prompt). Also checks
// whitespace control, scoping, errors for unsupported or malformed templates, and the resource caps.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

namespace kiln::tokenizer {
namespace {

using json = nlohmann::ordered_json;  // keeps the key order of the tools objects

json load_goldens() {
    std::string path = std::string(__FILE__);
    path = path.substr(0, path.rfind('/')) + "/../golden/data/chat_templates.json";
    std::ifstream f(path);
    EXPECT_TRUE(f.good()) << path;
    std::stringstream ss;
    ss << f.rdbuf();
    return json::parse(ss.str());
}

// A JSON value as a template value (objects keep the file's key order, which tojson prints).
jinja::Value to_value(const json& j) {
    if (j.is_null()) return jinja::Value::none();
    if (j.is_boolean()) return jinja::Value::boolean(j.get<bool>());
    if (j.is_number_integer()) return jinja::Value::integer(j.get<int64_t>());
    if (j.is_number()) return jinja::Value::number(j.get<double>());
    if (j.is_string()) return jinja::Value::str(j.get<std::string>());
    if (j.is_array()) {
        jinja::List l;
        for (const auto& e : j) l.push_back(to_value(e));
        return jinja::Value::make_list(std::move(l));
    }
    jinja::Dict d;
    for (const auto& [k, v] : j.items()) d.emplace_back(k, to_value(v));
    return jinja::Value::make_dict(std::move(d));
}

std::string render(const std::string& tmpl, std::vector<ChatMessage> msgs = {{"user", "hi"}}, bool agp = false) {
    auto r = render_chat_template(tmpl, msgs, agp, "<s>", "</s>");
    return r.is_ok() ? r.value() : "ERROR: " + r.status().message();
}

// Cases where kiln's output is known to differ from jinja2's, with the reason; empty when all match.
const std::map<std::string, std::string> kKnownDifferences = {};

// Every case of the corpus (the real templates of tests/golden/data/chat_templates.json over the
// conversations there, with and without a generation prompt) renders byte for byte as HF transformers'
// render_jinja_template renders it, or fails where it fails.
TEST(ChatTemplate, MatchesTransformersGoldens) {
    json g = load_goldens();
    const int64_t now = 1796376615;  // g["now"], 2026-12-04T09:30:15 UTC: strftime_now's pinned clock
    ASSERT_EQ(g["now"].get<std::string>(), "2026-12-04T09:30:15");
    std::map<std::string, int> passed, total;
    int cases = 0, ok_cases = 0;
    for (const auto& c : g["cases"]) {
        const std::string name = c["template"];
        const std::string conv = c["conversation"];
        const json& cv = g["conversations"][conv];
        for (bool agp : {false, true}) {
            ChatTemplateInput in;
            in.messages = cv["messages"];
            if (cv.contains("tools")) in.tools = cv["tools"];
            in.add_generation_prompt = agp;
            in.bos_token = g["vars"]["bos_token"];
            in.eos_token = g["vars"]["eos_token"];
            in.now = now;
            if (getenv("KILN_TRACE")) std::fprintf(stderr, "%s %s %d\n", name.c_str(), conv.c_str(), agp);
            auto r = render_chat_template(g["templates"][name].get<std::string>(), in);
            const std::string what = name + " / " + conv + (agp ? " / gen" : "");
            const std::string key = agp ? "expected_gp" : "expected";
            ++total[name];
            ++cases;
            bool same;
            std::string expected;
            if (c.contains(key + "_error")) {
                same = !r.is_ok();
                expected = "ERROR " + c[key + "_error"].get<std::string>();
                const std::string err = c[key + "_error"];
                if (same && err.rfind("TemplateError: ", 0) == 0)  // raise_exception: the template's own words
                    same = r.status().message().find(err.substr(15)) != std::string::npos;
            } else {
                expected = agp && c.contains("gp_suffix") ? c["expected"].get<std::string>() + c["gp_suffix"].get<std::string>()
                                                          : c[key].get<std::string>();
                same = r.is_ok() && r.value() == expected;
            }
            const std::string got = r.is_ok() ? r.value() : "ERROR " + r.status().message();
            if (same) {
                ++passed[name];
                ++ok_cases;
            } else if (!kKnownDifferences.count(what)) {
                ADD_FAILURE() << what << "\n--- expected\n" << expected << "\n--- got\n" << got;
            }
        }
    }
    int same_templates = 0;
    for (const auto& [name, n] : total) {
        if (passed[name] == n) ++same_templates;
        else std::printf("%-50s %d/%d\n", name.c_str(), passed[name], n);
    }
    std::printf("%d of %zu templates render every case as transformers does; %d of %d cases\n", same_templates,
                total.size(), ok_cases, cases);
    EXPECT_GE(total.size(), 11u);
}

// One construct per snippet (macros, call/set/filter blocks, loops, filters, tests, methods, strings as code
// points, operators, undefined values, errors), each rendered as jinja2 renders it or failing where it fails.
TEST(ChatTemplate, SnippetsMatchJinja2) {
    json g = load_goldens();
    jinja::Dict vars = *json_to_value(g["snippet_vars"]).dict;
    jinja::RenderLimits limits;
    limits.now = 1796376615;
    int n = 0;
    for (const auto& c : g["snippets"]) {
        const std::string tmpl = c["template"];
        auto r = jinja::render(tmpl, vars, limits);
        ++n;
        if (c.contains("error")) {
            EXPECT_FALSE(r.is_ok()) << tmpl << "\njinja2: " << c["error"].get<std::string>() << "\nkiln: " << r.value();
            continue;
        }
        EXPECT_TRUE(r.is_ok()) << tmpl << ": " << r.status().message();
        if (r.is_ok()) {
            EXPECT_EQ(r.value(), c["expected"].get<std::string>()) << tmpl;
        }
    }
    EXPECT_GE(n, 90);
}

// `extra` adds variables and overrides the built-in ones; later entries win.
TEST(ChatTemplate, ExtraVariables) {
    const std::vector<ChatMessage> m = {{"user", "hi"}};
    auto r = render_chat_template("{{ bos_token }}{{ date_string }}{{ tools | length }}{{ add_generation_prompt }}", m,
                                  false, "<s>", "</s>",
                                  {{"date_string", jinja::Value::str("today")},
                                   {"tools", jinja::Value::make_list({jinja::Value::integer(1), jinja::Value::none()})},
                                   {"bos_token", jinja::Value::str("[B]")},
                                   {"add_generation_prompt", jinja::Value::boolean(true)}});
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(*r, "[B]today2True");
    r = render_chat_template("{{ x }}{{ messages | length }}", m, false, "<s>", "</s>",
                             {{"x", jinja::Value::integer(1)}, {"x", jinja::Value::integer(2)}});
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(*r, "21");
    EXPECT_EQ(render("{{ 'y' if tools is none else 'n' }}"), "y");  // no tools: None, as HF passes it
}

TEST(ChatTemplate, WhitespaceControl) {
    EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
    EXPECT_EQ(render("a\n  {% if true %}\nx\n  {% endif %}\nb"), "a\nx\nb");  // lstrip + trim blocks
    EXPECT_EQ(render("a {# c #} b"), "a  b");
    EXPECT_EQ(render("{{ 'x' }}\n"), "x\n");  // trim_blocks does not apply to {{ }}
}

TEST(ChatTemplate, Expressions) {
    EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 'a' ~ 1 }}"), "7 3 2 a1");
    EXPECT_EQ(render("{{ messages[0]['role'] }}{{ messages[0].content | upper }}"), "userHI");
    EXPECT_EQ(render("{{ 'abc'[1:] }}{{ [1,2,3][-1] }}{{ [1,2,3][::-1] }}"), "bc3[3, 2, 1]");
    EXPECT_EQ(render("{{ 'y' if x is defined else 'n' }}{{ x is none }}{{ none is none }}"), "nFalseTrue");
    EXPECT_EQ(render("{{ 'b' in 'abc' and not 'z' in 'abc' }}{{ 2 not in [1] }}"), "TrueTrue");
    EXPECT_EQ(render("{{ {'a': [1, 'x', none]} | tojson }}"), "{\"a\": [1, \"x\", null]}");
    EXPECT_EQ(render("{{ x | default('d') }}{{ '  t ' | trim | length }}"), "d1");
    EXPECT_EQ(render("{{ 'a,b'.split(',') | join('-') }}{{ ' s '.strip() }}"), "a-bs");
}

TEST(ChatTemplate, LoopsAndScopes) {
    std::vector<ChatMessage> m = {{"user", "a"}, {"assistant", "b"}, {"user", "c"}};
    EXPECT_EQ(render("{% for x in messages %}{{ loop.index }}{{ loop.first }}{{ loop.last }} {% endfor %}", m),
              "1TrueFalse 2FalseFalse 3FalseTrue ");
    EXPECT_EQ(render("{% set n = 0 %}{% for x in messages %}{% set n = n + 1 %}{% endfor %}{{ n }}", m), "0");
    EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
                     m),
              "3");
    EXPECT_EQ(render("{% for x in messages if x.role == 'user' %}{{ x.content }}{% endfor %}", m), "ac");
    EXPECT_EQ(render("{% for x in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ x.content }}{% endfor %}", m),
              "a");
    EXPECT_EQ(render("{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% endfor %}"), "a=1");
    EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
}

// Values that refer to themselves (through a namespace, a macro's scope or loop.changed's memory) render and
// are freed when the render ends (the ASan build reports a leak otherwise).
TEST(ChatTemplate, CyclesAreFreed) {
    EXPECT_EQ(render("{% set ns = namespace(n=1) %}{% set ns.me = ns %}{{ ns.me.me.n }}"), "1");
    EXPECT_EQ(render("{% macro m() %}x{% endmacro %}{% set ns = namespace() %}{% set ns.m = m %}{{ ns.m() }}"), "x");
    // jinja2's loop is one object: the second call sees the same one ("TrueFalse" from jinja2 3.1.6)
    EXPECT_EQ(render("{% for i in [1, 1] %}{{ loop.changed(loop) }}{% endfor %}"), "TrueFalse");
    // a macro kept past the loop iteration that defined it still runs (jinja2 renders this too)
    auto r = render_chat_template("{% set ns = namespace() %}{% for i in [1] %}{% macro m() %}x{% endmacro %}"
                                  "{% set ns.m = m %}{% endfor %}{{ ns.m() }}",
                                  {}, false, "", "");
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(*r, "x");
}

TEST(ChatTemplate, ErrorsNeverCrash) {
    const char* bad[] = {"{{ raise_exception('nope') }}", "{% if x %}", "{{ 1 + }}", 
                         "{{ 'unterminated }}", "{% for %}", "{{ x | nosuchfilter }}", "{{ 1 // 0 }}", "{% endif %}",
                         "{{ (((((((((((( 1 }}", "{{ foo() }}", "{{ 'a' + 1 }}",
                         "{{ none | list }}", "{% break %}", "{{ [1][::0] }}", "{{"};
    for (const char* t : bad) {
        auto r = render_chat_template(t, {{"user", "hi"}}, false, "", "");
        EXPECT_FALSE(r.is_ok()) << t;
    }
    EXPECT_NE(render("{{ raise_exception('nope') }}").find("nope"), std::string::npos);
    std::string deep(5000, '(');
    EXPECT_FALSE(render_chat_template("{{ " + deep + " }}", {}, false, "", "").is_ok());
    std::string nested;
    for (int k = 0; k < 500; ++k) nested += "{% if true %}";
    EXPECT_FALSE(render_chat_template(nested, {}, false, "", "").is_ok());
    // Output cap: doubling a string 40 times.
    std::string blow = "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}";
    EXPECT_FALSE(render_chat_template(blow + "{{ ns.s }}", {}, false, "", "").is_ok());
    EXPECT_FALSE(render_chat_template("{% for i in range(100000000000) %}{% endfor %}", {}, false, "", "").is_ok());
}

}  // namespace
}  // namespace kiln::tokenizer
