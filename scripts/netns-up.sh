#!/usr/bin/env bash
# Sets up what the examples' --attach mode uses: a network namespace holding a persistent TAP
# whose kernel side is the Linux peer (10.77.0.1/24). An example then runs inside the namespace
# and opens that TAP (zcnet is 10.77.0.2):
#
#   sudo scripts/netns-up.sh                       # namespace zcnet-demo, TAP zcdemo0, owned by $SUDO_USER
#   sudo ip netns exec zcnet-demo target/release/http --attach
#   sudo ip netns exec zcnet-demo curl http://10.77.0.2/
#   sudo scripts/netns-down.sh                     # removes both
#
# The TAP belongs to the user named by --user (default: the one who ran sudo), so the example
# itself may run without root: sudo ip netns exec zcnet-demo sudo -u "$USER" target/release/http --attach
# (Without this script, an example run as root sets up the same namespace itself.)
#
# usage: netns-up.sh [--netns NAME] [--tap NAME] [--user USER] [--mtu N]
set -euo pipefail

ns=zcnet-demo
tap=zcdemo0
user=${SUDO_USER:-root}
mtu=1500
while [ $# -gt 0 ]; do
    case "$1" in
        --netns) ns=$2; shift 2 ;;
        --tap) tap=$2; shift 2 ;;
        --user) user=$2; shift 2 ;;
        --mtu) mtu=$2; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

if [ "$(id -u)" -ne 0 ]; then
    echo "netns-up.sh needs root (network namespaces, TAP devices): run it with sudo" >&2
    exit 1
fi
command -v ip >/dev/null || { echo "needs iproute2's ip (apt-get install iproute2)" >&2; exit 1; }
[ -e /dev/net/tun ] || { echo "needs /dev/net/tun (modprobe tun)" >&2; exit 1; }

if ip netns list | awk '{print $1}' | grep -qx "$ns"; then
    echo "namespace $ns exists already (scripts/netns-down.sh removes it)" >&2
    exit 1
fi
ip netns add "$ns"
# Undo everything if a later step fails.
trap 'ip netns del "$ns" 2>/dev/null || true' ERR
ip -n "$ns" link set lo up
ip -n "$ns" tuntap add dev "$tap" mode tap user "$user"
ip -n "$ns" link set "$tap" mtu "$mtu"
ip -n "$ns" addr add 10.77.0.1/24 dev "$tap"
ip -n "$ns" link set "$tap" up
trap - ERR

echo "namespace $ns: TAP $tap (owner $user, MTU $mtu), Linux side 10.77.0.1/24; zcnet will be 10.77.0.2"
echo "run an example inside it:  sudo ip netns exec $ns target/release/http --attach --tap $tap --mtu $mtu"
echo "remove it:                 sudo scripts/netns-down.sh --netns $ns"
