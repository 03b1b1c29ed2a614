#!/usr/bin/env bash
# Tensor, pipeline and expert parallelism under mpirun (docs/parallel.md): `mpirun -np N kiln generate
# --tp T --pp P` (--ep E) gives the text one process gives, greedy and sampled, on stories260K (TP 2
# and 4: KV heads split, then replicated; PP 2 and 3; TP 2 x PP 2), on a synthetic mixture of experts
# (EP 2 and 4, PP 2, TP/EP 2 x PP 2) and on SmolLM2 (9 heads over 3 KV heads: TP 2
# splits them 2 + 1, TP 3, with f32 activations; PP 2 with the default int8 ones, which pipeline
# stages leave bit for bit unchanged; TP 2 x PP 2); bad launches are clear errors; a rank that dies
# ends the job (mpirun names it) and a rank that hangs ends it after --collective-timeout with kiln's
# message naming the operation. Ranks share this machine's cores (--oversubscribe). SIGTERM to
# mpirun drains the server and every rank exits. Concurrent completions over a PP 2 server (two
# batches in flight) equal each one alone.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/skip.sh"
D="$KILN_TESTDATA/models/stories260K"
[ -f "$D/stories260K.bin" ] || skip_test "no test data ($D/stories260K.bin)"
command -v mpirun > /dev/null || skip_test "no mpirun (scripts/setup installs openmpi-bin)"
M="$D/stories260K.bin"
T=$(mktemp -d)
cleanup() {
    [ -n "${mpi_pid:-}" ] && kill -9 "$mpi_pid" 2>/dev/null || true
    rm -rf "$T"
}
trap cleanup EXIT
# Containers often withhold the ptrace rights Open MPI's shared-memory single copy needs.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
fail() { echo "FAIL: $*"; exit 1; }

same_text() {  # NAME NP "PARALLEL FLAGS" ARGS...: one process, then NP ranks with the flags: the same stdout
    local name=$1 np=$2 flags=$3
    shift 3
    "$KILN_BIN" generate "$@" -t 1 2>"$T/$name.1.err" >"$T/$name.1.txt" || { cat "$T/$name.1.err"; fail "$name alone"; }
    # shellcheck disable=SC2086
    "${MPI[@]}" -np "$np" "$KILN_BIN" generate "$@" -t 1 $flags 2>"$T/$name.$np.err" >"$T/$name.$np.txt" ||
        { cat "$T/$name.$np.err"; fail "$name under mpirun -np $np $flags"; }
    [ -s "$T/$name.1.txt" ] || fail "$name: no text"
    cmp -s "$T/$name.1.txt" "$T/$name.$np.txt" ||
        { diff "$T/$name.1.txt" "$T/$name.$np.txt" | head; fail "$name: $flags differs from one process"; }
    echo "ok: $name at $flags: $(head -c 60 "$T/$name.1.txt" | tr '\n' ' ')..."
}
same_text greedy 2 "--tp 2" -m "$M" -p "Once upon a time" -n 96 --temp 0
same_text greedy 4 "--tp 4" -m "$M" -p "Once upon a time" -n 96 --temp 0
same_text sampled 2 "--tp 2" -m "$M" -p "The dog" -n 96 --temp 0.8 --top-p 0.95 --seed 7
same_text greedy 2 "--pp 2" -m "$M" -p "Once upon a time" -n 96 --temp 0
same_text greedy 3 "--pp 3" -m "$M" -p "Once upon a time" -n 96 --temp 0
same_text sampled 2 "--pp 2" -m "$M" -p "The dog" -n 96 --temp 0.8 --top-p 0.95 --seed 7
same_text greedy 4 "--tp 2 --pp 2" -m "$M" -p "Once upon a time" -n 96 --temp 0
# Speculation across ranks: the draft (a model of its own, or the target's first layers, whole) runs
# on rank 0 alone; greedy text is the text without speculation.
same_text spec-draft 2 "--tp 2 --spec draft --draft-model $M" -m "$M" -p "Once upon a time" -n 96 --temp 0
same_text spec-layers 2 "--pp 2 --spec layers:2" -m "$M" -p "Once upon a time" -n 96 --temp 0
same_text spec-layers 4 "--tp 2 --pp 2 --spec layers:3" -m "$M" -p "Once upon a time" -n 96 --temp 0
# kiln perplexity and kiln logits under the ranks (rank 0 sends each pass to the others): PP 2 gives
# one process's bits, TP 2 and TP 2 x PP 2 its figures within rounding (f32 activations).
E="$KILN_TESTDATA/eval/tinystories_excerpt.txt"
ppl_of() { sed -n 's/^ppl = //p' "$1"; }
"$KILN_BIN" perplexity -m "$M" -f "$E" -c 128 -t 1 --f32-activations > "$T/ppl.1.txt" 2> "$T/ppl.err" || { cat "$T/ppl.err"; fail "perplexity alone"; }
for spec in "2 --pp 2" "2 --tp 2" "4 --tp 2 --pp 2"; do
    # shellcheck disable=SC2086
    "${MPI[@]}" -np ${spec%% *} "$KILN_BIN" perplexity -m "$M" -f "$E" -c 128 -t 1 --f32-activations ${spec#* } \
        > "$T/ppl.n.txt" 2> "$T/ppl.err" || { cat "$T/ppl.err"; fail "perplexity under mpirun -np $spec"; }
    python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 1e-4 * a else 1)" \
        "$(ppl_of "$T/ppl.1.txt")" "$(ppl_of "$T/ppl.n.txt")" ||
        fail "perplexity under -np $spec: $(ppl_of "$T/ppl.n.txt") against one process's $(ppl_of "$T/ppl.1.txt")"
done
echo "ok: perplexity $(ppl_of "$T/ppl.1.txt") at --pp 2, --tp 2 and --tp 2 --pp 2"
"$KILN_BIN" logits -m "$M" -p "Once upon a time there was" --top 4 -t 1 > "$T/logits.1.txt"
"${MPI[@]}" -np 2 "$KILN_BIN" logits -m "$M" -p "Once upon a time there was" --top 4 -t 1 --pp 2 > "$T/logits.2.txt"
cmp -s "$T/logits.1.txt" "$T/logits.2.txt" || { diff "$T/logits.1.txt" "$T/logits.2.txt" | head; fail "logits at --pp 2"; }
echo "ok: logits at --pp 2 are one process's"
# A mixture of experts (kiln synth's tiny-moe: 4 experts, top 2): its experts spread over the ranks
# (--ep, or --tp), its attention split over them, and the same under pipeline stages.
"$KILN_BIN" synth --preset tiny-moe --dtype q8_0 -o "$T/moe.gguf" > /dev/null
same_text moe 2 "--ep 2" -m "$T/moe.gguf" -p "Once upon a time" -n 48 --temp 0 --f32-activations
same_text moe 4 "--ep 4" -m "$T/moe.gguf" -p "Once upon a time" -n 48 --temp 0 --f32-activations
same_text moe 2 "--pp 2" -m "$T/moe.gguf" -p "Once upon a time" -n 48 --temp 0
same_text moe 4 "--tp 2 --pp 2" -m "$T/moe.gguf" -p "Once upon a time" -n 48 --temp 0 --f32-activations
S="$(python3 - <<'PY'
import os
print(os.environ.get("KILN_SMOLLM2") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
      "kiln", "SmolLM2-135M-Instruct.Q4_1.gguf"))
PY
)"
if [ -f "$S" ]; then
    same_text smollm2 2 "--tp 2" -m "$S" -p "The capital of France is" -n 32 --temp 0 --f32-activations
    same_text smollm2 3 "--tp 3" -m "$S" -p "The capital of France is" -n 32 --temp 0 --f32-activations
    same_text smollm2 2 "--pp 2" -m "$S" -p "The capital of France is" -n 32 --temp 0
    same_text smollm2 4 "--tp 2 --pp 2" -m "$S" -p "The capital of France is" -n 32 --temp 0 --f32-activations
elif [ "${KILN_TEST_STRICT:-0}" = "1" ]; then
    fail "SmolLM2 not installed ($S; scripts/setup)"
fi

# Bad launches: clear errors, no hang.
set +e
"$KILN_BIN" generate -m "$M" -p x -n 4 --tp 2 > /dev/null 2> "$T/e1.txt"; rc1=$?
timeout 60 "${MPI[@]}" -np 2 "$KILN_BIN" generate -m "$M" -p x -n 4 --tp 3 > /dev/null 2> "$T/e2.txt"; rc2=$?
"$KILN_BIN" generate -m "$M" -p x -n 4 --tp 0 > /dev/null 2> "$T/e3.txt"; rc3=$?
timeout 60 "${MPI[@]}" -np 4 "$KILN_BIN" generate -m "$M" -p x -n 4 --tp 2 --pp 3 > /dev/null 2> "$T/e5.txt"; rc5=$?
timeout 60 "${MPI[@]}" -np 2 "$KILN_BIN" generate -m "$M" -p x -n 4 --pp 2 --spec draft --draft-model "$T/none.gguf" > /dev/null 2> "$T/e6.txt"; rc6=$?
timeout 60 "${MPI[@]}" -np 2 "$KILN_BIN" generate -m "$M" -p x -n 4 --ep 2 > /dev/null 2> "$T/e7.txt"; rc7=$?
"$KILN_BIN" generate -m "$M" -p x -n 4 --tp 2 --ep 4 > /dev/null 2> "$T/e8.txt"; rc8=$?
# rank 0 refuses the options once the group exists: the job ends at once, the others do not wait
timeout 60 "${MPI[@]}" -np 2 "$KILN_BIN" generate -m "$M" -p x -n 4 --tp 2 --spec layers:9 > /dev/null 2> "$T/e4.txt"; rc4=$?
set -e
[ "$rc1" != 0 ] && grep -q "mpirun -np 2" "$T/e1.txt" || { cat "$T/e1.txt"; fail "--tp 2 without mpirun"; }
[ "$rc2" != 0 ] && [ "$rc2" != 124 ] && grep -q "needs 3 ranks" "$T/e2.txt" || { cat "$T/e2.txt"; fail "--tp 3 on 2 ranks (rc $rc2)"; }
[ "$rc3" = 2 ] && grep -q -- "--tp needs an integer" "$T/e3.txt" || { cat "$T/e3.txt"; fail "--tp 0"; }
[ "$rc4" != 0 ] && [ "$rc4" != 124 ] && grep -q "kiln: rank 0 of 2: .*ending the job" "$T/e4.txt" ||
    { cat "$T/e4.txt"; fail "an error on rank 0 after start-up (rc $rc4)"; }
[ "$rc5" != 0 ] && [ "$rc5" != 124 ] && grep -q "needs 6 ranks" "$T/e5.txt" || { cat "$T/e5.txt"; fail "--tp 2 --pp 3 on 4 ranks (rc $rc5)"; }
[ "$rc6" != 0 ] && [ "$rc6" != 124 ] && grep -q "kiln: rank 0 of 2: .*ending the job" "$T/e6.txt" ||
    { cat "$T/e6.txt"; fail "an error on rank 0 of a pipeline after start-up (rc $rc6)"; }
[ "$rc7" != 0 ] && [ "$rc7" != 124 ] && grep -q "has no experts" "$T/e7.txt" || { cat "$T/e7.txt"; fail "--ep on a dense model (rc $rc7)"; }
[ "$rc8" != 0 ] && grep -q "needs --tp 4" "$T/e8.txt" || { cat "$T/e8.txt"; fail "--tp 2 --ep 4"; }
echo "ok: bad launches"

# A rank that dies or hangs under `kiln serve`: the job ends, and says which rank.
rank_pid() {  # the pid of rank $1 of the job started by $mpi_pid
    local p
    for p in $(pgrep -P "$mpi_pid"); do
        if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
            echo "$p"
            return
        fi
    done
}
serve_until_ready() {  # LOG [FLAGS]: serve under mpirun -np 2 (--tp 2 by default); sets mpi_pid and port
    # shellcheck disable=SC2086
    "${MPI[@]}" -np 2 "$KILN_BIN" serve -m "$M" ${2:---tp 2} -t 1 --collective-timeout 3 --port 0 > "$1" 2>&1 &
    mpi_pid=$!
    port=""
    for _ in $(seq 1 600); do
        kill -0 "$mpi_pid" 2>/dev/null || { cat "$1"; fail "kiln serve --tp 2 exited before it was ready"; }
        [ -n "$port" ] || port="$(sed -n 's|^kiln serve: listening on http://.*:\([0-9][0-9]*\), loading .*|\1|p' "$1" | head -n 1)"
        if [ -n "$port" ] && python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=1)" 2>/dev/null; then
            return
        fi
        sleep 0.1
    done
    cat "$1"
    fail "kiln serve --tp 2 never became healthy"
}
ends_within() {  # SECONDS: $mpi_pid exits within that time; the status is mpirun's (non-zero after a
                 # rank died, and after mpirun itself got SIGTERM)
    local rc=0
    for _ in $(seq 1 $(($1 * 10))); do
        kill -0 "$mpi_pid" 2>/dev/null || { wait "$mpi_pid" || rc=$?; mpi_pid=""; [ "$rc" != 0 ]; return; }
        sleep 0.1
    done
    fail "the job still runs $1 s later"
}
complete() {  # one completion request (its failure is expected once a rank is gone)
    python3 - "$port" <<'PY' || true
import json, sys, urllib.request as u
req = u.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/completions", method="POST",
                data=json.dumps({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}).encode(),
                headers={"Content-Type": "application/json"})
try:
    print(json.load(u.urlopen(req, timeout=30))["choices"][0]["text"])
except Exception as e:
    print("request failed:", e)
PY
}
serve_until_ready "$T/killed.log"
[ -n "$(complete)" ] || fail "no completion from the TP server"
kill -9 "$(rank_pid 1)"
ends_within 30 || fail "the job ended with status 0 after a rank was killed"
grep -Eiq "rank 1" "$T/killed.log" || { cat "$T/killed.log"; fail "the job's end does not name rank 1"; }
echo "ok: a killed rank ends the job: $(grep -Ei 'rank 1' "$T/killed.log" | head -n 1)"
serve_until_ready "$T/killed-pp.log" "--pp 2"
[ -n "$(complete)" ] || fail "no completion from the PP server"
kill -9 "$(rank_pid 1)"
ends_within 30 || fail "the job ended with status 0 after a pipeline stage was killed"
grep -Eiq "rank 1" "$T/killed-pp.log" || { cat "$T/killed-pp.log"; fail "the job's end does not name rank 1"; }
echo "ok: a killed pipeline stage ends the job"
# Pipeline lanes (two batches in flight at PP 2) under real MPI: concurrent greedy completions give
# each prompt's text alone (batch invariance), every rank staying in step.
serve_until_ready "$T/lanes.log" "--pp 2"
python3 - "$port" <<'PY' || { cat "$T/lanes.log"; fail "concurrent completions over pipeline lanes"; }
import json, sys, threading, urllib.request as u
port = sys.argv[1]
prompts = ["Once upon a time", "The dog", "Lily and Ben", "One day, a little", "The sun was", "Tom had a big"]
def complete(p):
    req = u.Request(f"http://127.0.0.1:{port}/v1/completions", method="POST",
                    data=json.dumps({"prompt": p, "max_tokens": 40, "temperature": 0}).encode(),
                    headers={"Content-Type": "application/json"})
    return json.load(u.urlopen(req, timeout=60))["choices"][0]["text"]
alone = [complete(p) for p in prompts]
together = [None] * len(prompts)
def run(i): together[i] = complete(prompts[i])
threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
for t in threads: t.start()
for t in threads: t.join()
for p, a, b in zip(prompts, alone, together):
    assert a and a == b, f"{p!r}: alone {a!r}, concurrent {b!r}"
print("ok: 6 concurrent completions over 2 pipeline lanes equal each one alone")
PY
kill -TERM "$mpi_pid"
ends_within 10 || true
grep -q "signal 15, shutting down" "$T/lanes.log" || { cat "$T/lanes.log"; fail "the PP server did not drain on SIGTERM"; }
serve_until_ready "$T/hung.log"
kill -STOP "$(rank_pid 1)"
complete > /dev/null &
ends_within 30 || fail "the job ended with status 0 after a rank hung"
grep -q "did not complete within 3 s" "$T/hung.log" || { cat "$T/hung.log"; fail "no timeout message"; }
echo "ok: a hung rank ends the job: $(grep 'did not complete' "$T/hung.log" | head -n 1)"
serve_until_ready "$T/term.log"
[ -n "$(complete)" ] || fail "no completion from the TP server"
pids="$(pgrep -P "$mpi_pid" | tr '\n' ' ')"
kill -TERM "$mpi_pid"
ends_within 10 || true
grep -q "signal 15, shutting down" "$T/term.log" || { cat "$T/term.log"; fail "rank 0 did not drain on SIGTERM"; }
for p in $pids; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    ! kill -0 "$p" 2>/dev/null || fail "rank process $p outlived the job by 5 s"
done
echo "ok: SIGTERM drains the server and ends every rank"
