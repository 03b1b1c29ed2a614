// HttpServer before set_engine (the model still loading): /health answers 503 {"status": "loading"}
// and every other route a 503 OpenAI error, over a real loopback socket.
#include "server/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

namespace kiln::server {
namespace {

using json = nlohmann::json;

TEST(HttpServer, AnswersLoadingBeforeTheEngineIsSet) {
    ServerOptions opt;
    opt.port = 0;
    HttpServer http(opt);
    std::string err;
    ASSERT_TRUE(http.bind(&err)) << err;
    std::thread listener([&] { http.serve(); });
    httplib::Client cli("127.0.0.1", http.port());
    auto health = cli.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 503);
    EXPECT_EQ(json::parse(health->body)["status"], "loading");
    auto models = cli.Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 503);
    EXPECT_EQ(json::parse(models->body)["error"]["code"], "model_loading");
    auto gen = cli.Post("/v1/completions", R"({"prompt": "x"})", "application/json");
    ASSERT_TRUE(gen);
    EXPECT_EQ(gen->status, 503);
    EXPECT_EQ(cli.Get("/metrics")->status, 503);
    http.stop();
    listener.join();
}

}  // namespace
}  // namespace kiln::server
