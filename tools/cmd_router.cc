// `kiln router --worker URL [--worker URL ...] [--host H] [--port P] [--api-key K]
// [--worker-api-key K] [--block-bytes N] [--slack N] [--health-interval S]`: one OpenAI-compatible
// endpoint in front of several `kiln serve` replicas (server/proxy.h; docs/parallel.md "Data
// parallelism across processes"), until SIGINT or SIGTERM.
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "args.h"
#include "commands.h"
#include "server/proxy.h"

namespace kiln::tools {
namespace {

constexpr const char* kRouterUsage =
    "usage: kiln router --worker URL [--worker URL ...] [--host HOST] [--port PORT] [--api-key KEY]\n"
    "                   [--worker-api-key KEY] [--block-bytes N] [--slack N] [--health-interval S]\n"
    "\n"
    "Data parallelism across processes and hosts: one OpenAI-compatible endpoint in front of several\n"
    "`kiln serve` replicas of the same model (docs/parallel.md). A generation request goes to the\n"
    "worker that got its prompt's prefix before (its prefix cache holds it) unless that worker is busier\n"
    "than the least busy by more than --slack sequences, else to the least busy; streams are relayed as\n"
    "they come. Workers are polled on /health; one that does not answer is left out until it does, and a\n"
    "request whose worker cannot be reached goes to the next. SIGINT or SIGTERM stop it.\n"
    "\n"
    "  --worker URL           http://HOST[:PORT] of a replica's server (repeat for each)\n"
    "  --host HOST            address to listen on (default 127.0.0.1)\n"
    "  --port PORT            TCP port (default 8000; 0 = any free port, printed on stderr)\n"
    "  --api-key KEY          require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize\n"
    "  --worker-api-key KEY   the key the workers require (default: pass the client's header on)\n"
    "  --block-bytes N        prefix affinity granularity in prompt bytes (default 64)\n"
    "  --slack N              sequences in flight a prefix's worker may exceed the least busy by (default 4)\n"
    "  --health-interval S    seconds between /health polls of each worker (default 2)\n";

}  // namespace

int cmd_router(int argc, char** argv) {
    Args args({"--help", "-h"}, {"--worker", "--host", "--port", "--api-key", "--worker-api-key", "--block-bytes",
                                 "--slack", "--health-interval"});
    if (!args.parse(argc, argv, 2)) {
        std::fprintf(stderr, "kiln router: %s\n", args.error().c_str());
        std::fputs(kRouterUsage, stderr);
        return 2;
    }
    if (args.has("--help") || args.has("-h")) {
        std::fputs(kRouterUsage, stdout);
        return 0;
    }
    if (!args.positional().empty()) {
        std::fputs(kRouterUsage, stderr);
        return 2;
    }
    server::ProxyOptions o;
    o.workers = args.get_all("--worker");
    if (o.workers.empty()) {
        std::fprintf(stderr, "kiln router: no --worker given\n");
        std::fputs(kRouterUsage, stderr);
        return 2;
    }
    for (const std::string& url : o.workers) {
        std::string err;
        if (!server::parse_worker_url(url, &err)) {
            std::fprintf(stderr, "kiln router: %s\n", err.c_str());
            return 2;
        }
    }
    if (auto v = args.get("--host")) o.host = *v;
    const auto port = int_option(args, "router", "--port", 8000, 0, 65535);
    const auto block = int_option(args, "router", "--block-bytes", 64, 1, 1 << 20);
    const auto slack = int_option(args, "router", "--slack", 4, 0, 1 << 20);
    if (!port || !block || !slack) return 2;
    o.port = int(*port);
    o.block_bytes = int(*block);
    o.slack = *slack;
    if (auto v = args.get("--health-interval")) {
        try {
            size_t used = 0;
            o.health_interval_s = std::stod(*v, &used);
            if (used != v->size() || !(o.health_interval_s >= 0.05 && o.health_interval_s <= 3600)) throw 0;
        } catch (...) {
            std::fprintf(stderr, "kiln router: --health-interval needs seconds in [0.05, 3600], got '%s'\n", v->c_str());
            return 2;
        }
    }
    for (const char* key : {"--api-key", "--worker-api-key"})
        if (auto v = args.get(key)) {
            if (v->empty()) {
                std::fprintf(stderr, "kiln router: %s is empty\n", key);
                return 2;
            }
            (std::string(key) == "--api-key" ? o.api_key : o.worker_api_key) = *v;
        }

    // Signals to one sigwait thread (the mask is set before any thread starts), as kiln serve.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    server::ProxyServer proxy(o);
    std::string err;
    if (!proxy.bind(&err)) {
        std::fprintf(stderr, "kiln router: %s\n", err.c_str());
        return 1;
    }
    std::fprintf(stderr, "kiln router: listening on http://%s:%d, %zu workers\n", o.host.c_str(), proxy.port(),
                 o.workers.size());
    std::fflush(stderr);
    std::atomic<bool> signalled{false};
    std::thread sig_thread([&] {
        int sig = 0;
        sigwait(&sigs, &sig);
        if (!signalled.exchange(true)) std::fprintf(stderr, "kiln router: signal %d, shutting down\n", sig);
        proxy.stop();
    });
    const bool ok = proxy.serve();
    if (!signalled.exchange(true)) pthread_kill(sig_thread.native_handle(), SIGTERM);
    sig_thread.join();
    if (!ok) {
        std::fprintf(stderr, "kiln router: the listener failed\n");
        return 1;
    }
    return 0;
}

}  // namespace kiln::tools
