#!/usr/bin/env python3
"""How long `kiln serve` takes to shut down on SIGTERM while a stream is running. Prints JSON.

Each run starts `kiln serve -m MODEL --port 0` (the port read from what it prints), opens one
streaming completion of the rest of the context (ignore_eos), waits for its first tokens, sends
SIGTERM and times (a) until the stream ends and (b) until the process exits. Reported: best and
median over --runs, and the median inter-token time of the streams before SIGTERM, measured in the
same runs, as the yardstick (shutdown_over_inter_token: how many decode steps a shutdown costs; one
that waited for the stream instead of aborting it would cost the rest of the context).
tests/server/serve_test.py checks that such a shutdown aborts the stream and exits 0; how long it
takes is measured here, since timing never goes in a test.

The default model is the SmolLM2 GGUF in ~/.cache/kiln (scripts/setup installs it), else stories260K;
stories260K generates its whole 512-token context in ~0.06 s, so its stream may be over before the
signal ("finish_reason" in the JSON then says "length", not "abort").

Usage: bench/serve_shutdown_bench.py [--kiln BIN] [--model PATH] [--runs 5] [--threads 2] [--tokens-before 8]
(KILN_BIN, KILN_TESTDATA and KILN_SHUTDOWN_MODEL are the defaults of --kiln and --model.)
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from bench_common import ROOT, default_kiln  # noqa: E402 (bench/ is on sys.path)
SMOL = os.path.expanduser("~/.cache/kiln/SmolLM2-135M-Instruct.Q4_1.gguf")
LISTENING = re.compile(rb"^kiln serve: listening on http://.*:(\d+), loading ", re.M)


def default_model():
    if os.path.exists(SMOL):
        return SMOL
    testdata = os.environ.get("KILN_TESTDATA", os.path.join(os.path.dirname(ROOT), "shared", "testdata"))
    return os.path.join(testdata, "models/stories260K/stories260K.bin")


def get_json(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, json.loads(body) if r.status == 200 else None


def start(kiln, model, threads, log):
    proc = subprocess.Popen([kiln, "serve", "-m", model, "-t", str(threads), "--port", "0"], stdout=log,
                            stderr=subprocess.STDOUT)
    port, deadline = None, time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"kiln serve exited ({proc.returncode}): {open(log.name).read()}")
        if port is None:
            with open(log.name, "rb") as f:
                m = LISTENING.search(f.read())
            port = int(m.group(1)) if m else None
        try:
            if port is not None and get_json(port, "/health")[0] == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    sys.exit(f"kiln serve did not become healthy: {open(log.name).read()}")


def one_run(kiln, model, threads, tmp, min_tokens):
    with open(os.path.join(tmp, "serve.log"), "wb") as log:
        proc, port = start(kiln, model, threads, log)
        try:
            ctx = get_json(port, "/v1/models")[1]["data"][0]["max_model_len"]
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            body = {"prompt": "Once upon a time", "max_tokens": ctx - 16, "ignore_eos": True, "stream": True}
            conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = conn.getresponse()
            stamps, finish = [], None
            while True:  # SSE lines; SIGTERM once min_tokens chunks came
                line = r.readline()
                if not line:
                    break
                if line.startswith(b"data: {"):
                    c = json.loads(line[6:])["choices"][0]
                    if c.get("text"):
                        stamps.append(time.perf_counter())
                    finish = c.get("finish_reason") or finish
                if len(stamps) == min_tokens:
                    t0 = time.perf_counter()
                    proc.send_signal(signal.SIGTERM)
            t_stream = time.perf_counter() - t0 if len(stamps) >= min_tokens else None
            if t_stream is None:  # the stream ended first: not a timed run
                proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=120)
            t_exit = time.perf_counter() - t0 if t_stream is not None else None
            conn.close()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    pre = [b - a for a, b in zip(stamps[:min_tokens - 1], stamps[1:min_tokens])]
    return {"stream_end_s": t_stream, "exit_s": t_exit, "exit_status": rc, "finish_reason": finish,
            "tokens_streamed": len(stamps), "inter_token_s": statistics.median(pre) if pre else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default=default_kiln())
    ap.add_argument("--model", default=os.environ.get("KILN_SHUTDOWN_MODEL") or default_model())
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens-before", type=int, default=8, help="streamed tokens before SIGTERM")
    a = ap.parse_args()
    if not os.path.exists(a.model):
        sys.exit(f"no model at {a.model}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="kiln_shutdown_bench_") as tmp:
        for _ in range(a.runs):
            runs.append(one_run(a.kiln, a.model, a.threads, tmp, a.tokens_before))
    timed = [r for r in runs if r["exit_s"] is not None]

    def summary(key):
        xs = [r[key] for r in timed if r[key] is not None]
        return {"best": min(xs), "median": statistics.median(xs)} if xs else None

    out = {"model": os.path.basename(a.model), "runs": a.runs, "timed_runs": len(timed), "threads": a.threads,
           "shutdown_s": summary("exit_s"), "stream_end_s": summary("stream_end_s"),
           "inter_token_s": summary("inter_token_s"),
           "exit_statuses": sorted({r["exit_status"] for r in runs}),
           "finish_reasons": sorted({str(r["finish_reason"]) for r in runs}), "per_run": runs}
    if out["shutdown_s"] and out["inter_token_s"]:
        out["shutdown_over_inter_token"] = out["shutdown_s"]["median"] / out["inter_token_s"]["median"]
    print(json.dumps(out, indent=1))
    return 0 if timed and out["exit_statuses"] == [0] else 1


if __name__ == "__main__":
    sys.exit(main())
