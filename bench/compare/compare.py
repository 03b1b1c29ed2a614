#!/usr/bin/env python3
"""kiln next to llama.cpp on the same GGUF files, interleaved (not a test; figures depend on the machine).

Sections (pick with --parts):
  bench  prefill / decode tokens/s: `kiln bench -p P -n N -r 1 --json` and `llama-bench -p P -n N -r 1 -o json`
         alternating, --reps times per model; kiln's JSON carries the read bandwidth its probe measured in
         the same run (bw_limit_gbps) and the read passes between its decode steps (ambient_bw_gbps), so
         each decode figure sits next to the bandwidth of its own moment.
  start  process start to exit of a 1-token generation of a short prompt (`kiln generate -n 1`, with
         and without --mmap; `llama-completion -n 1`), with the file in the page cache ("warm") and,
         where /proc/sys/vm/drop_caches is writable, after dropping it ("cold"). Each run waits --settle
         seconds first: on a VM whose host takes freed memory back, every process then starts alike.
  serve  `kiln serve` and `llama-server` (--parallel C slots, C x (I + O) context) on free ports, one at a
         time, each driven by `kiln bench serve --tokenizer MODEL --concurrency C` (prompts tokenized on
         the client, so no /tokenize route is needed), --reps rounds alternating the servers.
  ppl    perplexity of --text's first --text-kb KiB (`kiln perplexity -c C` and `llama-perplexity -c C`, the
         same windows) and the time each took.
Medians over the repetitions; every sample is printed too. llama.cpp comes from
bench/compare/build_llama_cpp.sh (the source PyPI's llama-cpp-python vendors, built in a scratch folder).

usage: bench/compare/compare.py --llama-bin DIR [--kiln build/cpu-release/bin/kiln] [-t 2] [--reps 3]
                                [--parts bench,start,serve,ppl] [--text FILE] [--text-kb 64] MODEL.gguf [MODEL.gguf ...]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request


def run(cmd, timeout=3600):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"compare: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return p.stdout, p.stderr, wall


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt(xs, digits=1):
    return f"{med(xs):.{digits}f} ({', '.join(f'{x:.{digits}f}' for x in xs)})"


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def bench_part(a, model):
    kiln = {"pp": [], "tg": [], "bw": [], "amb": []}
    llama = {"pp": [], "tg": []}
    for _ in range(a.reps):
        out, _, _ = run([a.kiln, "bench", "-m", model, "-p", str(a.p), "-n", str(a.n), "-r", "1", "-t", str(a.threads),
                         "--json"])
        for rec in json.loads(out):
            kind = "pp" if rec["test"].startswith("pp") else "tg"
            kiln[kind].append(rec["tokens_per_s"])
            if kind == "tg":
                kiln["bw"].append(rec["bw_limit_gbps"])
                kiln["amb"].append(rec["ambient_bw_gbps"] or float("nan"))
                bytes_per_token = rec["bytes_per_token"]
        out, _, _ = run([os.path.join(a.llama_bin, "llama-bench"), "-m", model, "-p", str(a.p), "-n", str(a.n),
                         "-r", "1", "-t", str(a.threads), "-o", "json"])
        for rec in json.loads(out):
            llama["pp" if rec["n_gen"] == 0 else "tg"].append(rec["avg_ts"])
    print(f"\n{os.path.basename(model)}: pp{a.p} / tg{a.n} tokens/s, {a.threads} threads, median (samples)")
    print(f"  kiln      pp {fmt(kiln['pp'])}   tg {fmt(kiln['tg'], 2)}")
    print(f"  llama.cpp pp {fmt(llama['pp'])}   tg {fmt(llama['tg'], 2)}")
    print(f"  kiln / llama.cpp: pp {med(kiln['pp']) / med(llama['pp']):.2f}x, "
          f"tg {med(kiln['tg']) / med(llama['tg']):.2f}x")
    gbps = [t * bytes_per_token / 1e9 for t in kiln["tg"]]
    print(f"  kiln tg reads {fmt(gbps)} GB/s; its runs' read probe {fmt(kiln['bw'])} GB/s, read passes between "
          f"its decode steps {fmt(kiln['amb'])} GB/s; llama.cpp tg at kiln's bytes/token "
          f"{fmt([t * bytes_per_token / 1e9 for t in llama['tg']])} GB/s")


def read_through(path):
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass


def drop_caches():
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def start_part(a, model):
    cmds = {
        "kiln": [a.kiln, "generate", "-m", model, "-p", "Hello", "-n", "1", "-t", str(a.threads)],
        "kiln --mmap": [a.kiln, "generate", "-m", model, "-p", "Hello", "-n", "1", "-t", str(a.threads), "--mmap"],
        "llama.cpp": [os.path.join(a.llama_bin, "llama-completion"), "-m", model, "-p", "Hello", "-n", "1", "-t",
                      str(a.threads), "-no-cnv"],
    }
    can_drop = os.access("/proc/sys/vm/drop_caches", os.W_OK)
    res = {(name, cache): [] for name in cmds for cache in ("warm", "cold")}
    for _ in range(a.reps):
        for cache in ("warm", "cold") if can_drop else ("warm",):
            for name, cmd in cmds.items():
                if cache == "warm":
                    read_through(model)  # the file in the page cache
                time.sleep(a.settle)
                if cache == "cold":
                    drop_caches()
                res[(name, cache)].append(run(cmd)[2])
    print(f"\n{os.path.basename(model)}: process start to exit, 1 token of 'Hello', {a.threads} threads, seconds, "
          f"median (samples), {a.settle:g} s settle before each")
    for (name, cache), xs in res.items():
        if xs:
            print(f"  {name:12s} page cache {cache}: {fmt(xs, 2)}")
    if not can_drop:
        print("  (cold page cache not measured: /proc/sys/vm/drop_caches is not writable)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(url, proc, timeout=600):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"compare: the server exited {proc.returncode} before it answered /health")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.5)
    sys.exit("compare: the server did not answer /health")


def serve_part(a, model):
    c, i, o = a.concurrency, a.input_len, a.output_len
    servers = {
        "kiln": lambda port: [a.kiln, "serve", "-m", model, "-t", str(a.threads), "--port", str(port),
                              "--max-seqs", str(c)],
        "llama.cpp": lambda port: [os.path.join(a.llama_bin, "llama-server"), "-m", model, "-t", str(a.threads),
                                   "--port", str(port), "--parallel", str(c), "-c", str(c * (i + o + 16)),
                                   "--no-webui"],
    }
    res = {name: [] for name in servers}
    for r in range(a.reps):
        for name, cmd in servers.items():
            port = free_port()
            proc = subprocess.Popen(cmd(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                url = f"http://127.0.0.1:{port}"
                wait_health(url, proc)
                out, _, _ = run([a.kiln, "bench", "serve", "--url", url, "--tokenizer", model, "--concurrency", str(c),
                                 "--requests", str(a.requests), "--input-len", str(i), "--output-len", str(o),
                                 "--seed", str(r + 1), "--json"])
                res[name].append(json.loads(out))
            finally:
                proc.terminate()
                proc.wait(timeout=60)
    print(f"\n{os.path.basename(model)}: served, {a.requests} requests of {i} prompt + {o} output tokens, "
          f"{c} concurrent, {a.threads} threads; median (samples)")
    for name, js in res.items():
        print(f"  {name:9s} output tok/s {fmt([j['output_throughput'] for j in js])}, median TTFT ms "
              f"{fmt([j['median_ttft_ms'] for j in js])}, median TPOT ms {fmt([j['median_tpot_ms'] for j in js], 2)}")


def ppl_part(a, model):
    text = os.path.join(tempfile.mkdtemp(prefix="kiln-compare-"), "text.txt")
    with open(a.text, "rb") as f, open(text, "wb") as out:
        out.write(f.read(a.text_kb * 1024))
    k, l = [], []
    for _ in range(a.reps):
        out, _, wall = run([a.kiln, "perplexity", "-m", model, "-f", text, "-c", str(a.ctx), "-t", str(a.threads)])
        m = re.search(r"ppl = ([0-9.]+)", out)
        k.append((float(m.group(1)) if m else float("nan"), wall))
        out, err, wall = run([os.path.join(a.llama_bin, "llama-perplexity"), "-m", model, "-f", text, "-c",
                              str(a.ctx), "-t", str(a.threads)])
        m = re.search(r"Final estimate: PPL = ([0-9.]+)", out + err)
        l.append((float(m.group(1)) if m else float("nan"), wall))
    print(f"\n{os.path.basename(model)}: perplexity of {os.path.basename(a.text)}'s first {a.text_kb} KiB, "
          f"{a.ctx}-token windows")
    print(f"  kiln      PPL {k[0][0]:.4f}, {fmt([w for _, w in k])} s")
    print(f"  llama.cpp PPL {l[0][0]:.4f}, {fmt([w for _, w in l])} s")
    print(f"  time: kiln {med([w for _, w in l]) / med([w for _, w in k]):.2f}x faster")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--llama-bin", required=True, help="folder with llama-bench etc. (build_llama_cpp.sh prints it)")
    ap.add_argument("--kiln", default=os.path.join(os.path.dirname(__file__), "../../build/cpu-release/bin/kiln"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--parts", default="bench,start,serve,ppl")
    ap.add_argument("--concurrency", type=int, default=8, help="serve: clients and slots (default 8)")
    ap.add_argument("--requests", type=int, default=32, help="serve: requests per round (default 32)")
    ap.add_argument("--input-len", type=int, default=128, help="serve: prompt tokens (default 128)")
    ap.add_argument("--output-len", type=int, default=64, help="serve: output tokens (default 64)")
    ap.add_argument("-p", type=int, default=512, help="prompt tokens of the prefill test (default 512)")
    ap.add_argument("-n", type=int, default=128, help="tokens of the decode test (default 128)")
    ap.add_argument("--settle", type=float, default=20, help="seconds to wait before each start-up run (default 20)")
    ap.add_argument("--text", default=os.path.join(os.path.dirname(__file__),
                                                   "../../../shared/testdata/eval/wiki.test.raw"))
    ap.add_argument("--text-kb", type=int, default=64, help="KiB of --text scored (default 64)")
    ap.add_argument("--ctx", type=int, default=512)
    a = ap.parse_args()
    parts = a.parts.split(",")
    print(f"CPU: {cpu_model()} ({os.cpu_count()} logical CPUs); load average {os.getloadavg()}")
    for model in a.models:
        if "bench" in parts:
            bench_part(a, model)
        if "start" in parts:
            start_part(a, model)
        if "serve" in parts:
            serve_part(a, model)
        if "ppl" in parts:
            ppl_part(a, model)


if __name__ == "__main__":
    main()
