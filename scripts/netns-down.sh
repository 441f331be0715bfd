#!/usr/bin/env bash
# Removes the namespace scripts/netns-up.sh made (and with it the TAP inside it).
#
# usage: sudo scripts/netns-down.sh [--netns NAME]
set -euo pipefail

ns=zcnet-demo
while [ $# -gt 0 ]; do
    case "$1" in
        --netns) ns=$2; shift 2 ;;
        -h|--help) sed -n '2,4p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

if [ "$(id -u)" -ne 0 ]; then
    echo "netns-down.sh needs root: run it with sudo" >&2
    exit 1
fi
if ! ip netns list | awk '{print $1}' | grep -qx "$ns"; then
    echo "no namespace $ns"
    exit 0
fi
# A process still inside the namespace (an example, an iperf3) keeps it alive: say so.
pids=$(ip netns pids "$ns" 2>/dev/null || true)
if [ -n "$pids" ]; then
    echo "note: processes still in $ns: $pids (stop them to free the namespace)" >&2
fi
ip netns del "$ns"
echo "removed namespace $ns"
