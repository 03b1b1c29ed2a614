#!/usr/bin/env bash
# Parallel ranks on "separate hosts" (docs/parallel.md, "Several hosts"): two network namespaces on
# this machine, joined by a veth pair on private test addresses, each with its own hostname (a UTS
# namespace), stand for two hosts; mpirun runs in the first and starts the second's ranks through a
# launcher that enters the namespace (in place of ssh), with a hostfile naming the two addresses and
# MPI's traffic on TCP over the veth pair only (no shared memory between the "hosts"). `kiln generate`
# at TP 2, PP 2 and TP 2 x PP 2 across them prints the text one process prints. The test makes and
# removes the namespaces itself; where the kernel will not let it (no CAP_SYS_ADMIN / CAP_NET_ADMIN)
# it is skipped, under KILN_TEST_STRICT too: that is the machine, not a broken setup.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/skip.sh"
M="$KILN_TESTDATA/models/stories260K/stories260K.bin"
[ -f "$M" ] || skip_test "no test data ($M)"
command -v mpirun > /dev/null || skip_test "no mpirun (scripts/setup installs openmpi-bin)"
command -v ip > /dev/null || skip_test "no ip (scripts/setup installs iproute2)"
T=$(mktemp -d)
id=$$
ns_a="kiln-a-$id" ns_b="kiln-b-$id"
net="10.$((200 + id % 50)).$(((id / 50) % 250)).0"
addr_a="${net%.0}.1" addr_b="${net%.0}.2"
cleanup() {
    ip netns del "$ns_a" 2>/dev/null || true
    ip netns del "$ns_b" 2>/dev/null || true  # deleting a namespace deletes its end of the veth pair
    rm -rf "$T"
}
trap cleanup EXIT
if ! ip netns add "$ns_a" 2>"$T/netns.err" || ! ip netns add "$ns_b" 2>>"$T/netns.err" ||
    ! unshare -u true 2>>"$T/netns.err"; then
    echo "SKIPPED: this machine will not make network / UTS namespaces: $(head -n 1 "$T/netns.err")"
    exit 77
fi
veth_a="kva$((id % 100000))" veth_b="kvb$((id % 100000))"
ip link add "$veth_a" type veth peer name "$veth_b"
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
ip -n "$ns_a" addr add "$addr_a/24" dev "$veth_a"
ip -n "$ns_b" addr add "$addr_b/24" dev "$veth_b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$veth_a" up
ip -n "$ns_b" link set "$veth_b" up

# mpirun's "ssh": [options] HOST COMMAND... runs COMMAND in HOST's namespace under its hostname.
cat > "$T/launch" <<EOF
#!/usr/bin/env bash
while [[ "\$1" == -* ]]; do shift; done
host=\$1; shift
case \$host in
    $addr_a) ns=$ns_a; name=kiln-host-a ;;
    $addr_b) ns=$ns_b; name=kiln-host-b ;;
    *) echo "launch: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare -u sh -c "hostname \$name; \$*"
EOF
chmod +x "$T/launch"
printf "%s slots=2\n%s slots=2\n" "$addr_a" "$addr_b" > "$T/hosts"
fail() { echo "FAIL: $*"; exit 1; }
across() {  # NP ARGS...: mpirun in host a over both hosts, ranks placed host by host in turn
    local np=$1
    shift
    ip netns exec "$ns_a" unshare -u sh -c "hostname kiln-host-a; exec \"\$@\"" sh \
        mpirun --allow-run-as-root --hostfile "$T/hosts" -np "$np" --map-by node --bind-to none \
        --mca plm_rsh_agent "$T/launch" --mca btl tcp,self \
        --mca btl_tcp_if_include "$net/24" --mca oob_tcp_if_include "$net/24" "$@"
}
# The ranks really are on two "hosts".
across 2 sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname)"' > "$T/where.txt" 2>&1 ||
    { cat "$T/where.txt"; fail "mpirun across the namespaces"; }
grep -q "rank 0 on kiln-host-a" "$T/where.txt" && grep -q "rank 1 on kiln-host-b" "$T/where.txt" ||
    { cat "$T/where.txt"; fail "ranks not on the two hosts"; }
echo "ok: $(tr '\n' ';' < "$T/where.txt")"
"$KILN_BIN" generate -m "$M" -p "Once upon a time" -n 64 --temp 0 -t 1 > "$T/one.txt" 2> "$T/one.err" ||
    { cat "$T/one.err"; fail "one process"; }
for run in "2 --tp 2" "2 --pp 2" "4 --tp 2 --pp 2"; do
    read -r np flags <<< "$run"
    # shellcheck disable=SC2086
    across "$np" "$KILN_BIN" generate -m "$M" -p "Once upon a time" -n 64 --temp 0 -t 1 $flags \
        > "$T/got.txt" 2> "$T/got.err" || { cat "$T/got.err"; fail "$flags across two hosts"; }
    cmp -s "$T/one.txt" "$T/got.txt" || { diff "$T/one.txt" "$T/got.txt" | head; fail "$flags across two hosts: other text"; }
    echo "ok: $flags over $np ranks on two hosts: the text of one process"
done
