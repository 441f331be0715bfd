#!/usr/bin/env bash
# The iperf3 example over a TAP, with the TAP's offloads (the default) and without them
# (`--no-offloads`), measured with an unmodified iperf3 client in the same run: Linux sends
# (`iperf3 -c`), zcnet sends (`-R`), and four parallel streams (`-P 4`, Linux sending).
#
#   sudo scripts/iperf3-offloads.sh              # 3 rounds of 5 s per test
#   sudo ROUNDS=5 SECONDS_PER_TEST=8 scripts/iperf3-offloads.sh
#
# Needs root, iperf3 and python3. Each round starts the example once per mode in a network
# namespace of its own (`zcnet-ipf`, TAP `zcipf0`, 10.77.0.1 ↔ 10.77.0.2), runs the three tests
# and stops it; the modes alternate round by round. Prints per test the medians (min–max) of the
# receiver's rate (iperf3's `end.sum_received`) and of the example's CPU per GB (its utime +
# stime over the test, from /proc), and the ratio of the medians, offloads / no offloads.
# The namespace is removed on exit, also when a test fails.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SECONDS_PER_TEST=${SECONDS_PER_TEST:-5}
NS=zcnet-ipf
TAP=zcipf0
ADDR=10.77.0.2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$ROOT/target/release/iperf3"
WORK=$(mktemp -d)
SERVER_PID=

cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    ip netns del "$NS" 2>/dev/null || true
    ip link del "$TAP" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

if [ "$(id -u)" -ne 0 ]; then
    echo "needs root (a TAP and a network namespace)" >&2
    exit 1
fi
command -v iperf3 >/dev/null || { echo "needs iperf3" >&2; exit 1; }
(cd "$ROOT" && cargo build --release -q -p zcnet-examples --bin iperf3)

# CPU seconds (user + system) of process $1 so far.
cpu_of() {
    python3 - "$1" <<'EOF'
import os, sys
f = open(f"/proc/{sys.argv[1]}/stat").read().rsplit(")", 1)[1].split()
print((int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK"))
EOF
}

start_server() { # $1: extra flag (empty or --no-offloads)
    ip netns del "$NS" 2>/dev/null || true
    # shellcheck disable=SC2086
    "$BIN" --netns "$NS" --tap "$TAP" $1 >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do
        if grep -q "iperf3 server on" "$WORK/server.log"; then
            return 0
        fi
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            break
        fi
        sleep 0.1
    done
    echo "the iperf3 example did not start:" >&2
    cat "$WORK/server.log" >&2
    exit 1
}

stop_server() {
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" || true
    SERVER_PID=
}

# Appends "<mode> <test> <Mbit/s> <CPU s per GB>" to $WORK/results.
run_test() { # $1 mode, $2 test name, $3.. iperf3 flags
    local mode=$1 name=$2
    shift 2
    local before after
    before=$(cpu_of "$SERVER_PID")
    ip netns exec "$NS" iperf3 -c "$ADDR" -t "$SECONDS_PER_TEST" -J "$@" >"$WORK/out.json"
    after=$(cpu_of "$SERVER_PID")
    python3 - "$WORK/out.json" "$mode" "$name" "$before" "$after" >>"$WORK/results" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["end"]["sum_received"]
cpu = float(sys.argv[5]) - float(sys.argv[4])
gb = s["bytes"] / 1e9
print(sys.argv[2], sys.argv[3], s["bits_per_second"] / 1e6, cpu / gb if gb else float("nan"))
EOF
}

for round in $(seq "$ROUNDS"); do
    modes="offloads no-offloads"
    if [ $((round % 2)) -eq 0 ]; then
        modes="no-offloads offloads"
    fi
    for mode in $modes; do
        flag=""
        [ "$mode" = no-offloads ] && flag="--no-offloads"
        start_server "$flag"
        run_test "$mode" "Linux→zcnet" 
        run_test "$mode" "zcnet→Linux" -R
        run_test "$mode" "Linux→zcnet,-P4" -P 4
        stop_server
        echo "round $round $mode done" >&2
    done
done

python3 - "$WORK/results" "$ROUNDS" "$SECONDS_PER_TEST" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
tests = ["Linux→zcnet", "zcnet→Linux", "Linux→zcnet,-P4"]
def cell(mode, test, i):
    v = [float(r[2 + i]) for r in rows if r[0] == mode and r[1] == test]
    return statistics.median(v), min(v), max(v)
print(f"iperf3 example over a TAP, {sys.argv[2]} rounds of {sys.argv[3]} s per test; medians (min–max)")
print()
print("| test | offloads Mbit/s | no offloads Mbit/s | ratio | offloads CPU s/GB | no offloads CPU s/GB | ratio |")
print("|---|---|---|---|---|---|---|")
for t in tests:
    a, b = cell("offloads", t, 0), cell("no-offloads", t, 0)
    c, d = cell("offloads", t, 1), cell("no-offloads", t, 1)
    name = t.replace(",-P4", " (-P 4)")
    print(f"| {name} | {a[0]:.0f} ({a[1]:.0f}–{a[2]:.0f}) | {b[0]:.0f} ({b[1]:.0f}–{b[2]:.0f}) | "
          f"{a[0] / b[0]:.2f}x | {c[0]:.2f} ({c[1]:.2f}–{c[2]:.2f}) | {d[0]:.2f} ({d[1]:.2f}–{d[2]:.2f}) | "
          f"{c[0] / d[0]:.2f}x |")
EOF
