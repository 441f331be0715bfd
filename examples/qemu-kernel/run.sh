#!/usr/bin/env bash
# Boots the zcnet example kernel in QEMU (TCG, PVH) on q35 (virtio-net-pci, MSI-X) or on
# microvm (no PCI, no ACPI: virtio-net on virtio-mmio, its line through the IOAPIC).
#
#   ./run.sh [--machine q35|microvm] [--tap IFNAME | --ports HTTP,ECHO,IPERF3]
#            [--append "KEY=VALUE ..."] [--kernel ELF]
#
# --machine picks the QEMU machine (default q35); the same kernel finds its NIC on either (the
# console's `nic:` line and /stats' "machine" say which).
#
# Without --kernel it builds the release kernel first (cargo build --release here). As cargo's
# runner (.cargo/config.toml) it is called with --kernel and the freshly built ELF.
#
# Network: by default QEMU's user-mode network (slirp; the guest gets 10.0.2.15 by DHCP) with
# host ports on 127.0.0.1 only: 5555 -> guest 80 (HTTP), 5556 -> 7 (TCP and UDP echo),
# 5201 -> 5201 (iperf3); --ports picks other host ports. With --tap IFNAME the guest is on an
# existing TAP interface instead.
#
# One CPU, but `maxcpus=2`: QEMU's TCG before 8.1 drops the guest's memory fences when the
# machine can only have one CPU, and virtio's interrupt requests then race with the device
# (emulated on another host thread) and are lost now and then (zcnet-virtio's crate docs).
#
# The CPU model is `max`: TCG's with everything it emulates, RDRAND among it (CPUID.01H:ECX
# bit 30), the kernel's source for the stack's secret; without it the kernel stops at boot.
#
# Exit status: 0 when the kernel exits through isa-debug-exit with the success code (QEMU's
# 33), QEMU's own status otherwise (35: a check failed, 37: panic or CPU exception), 1 if QEMU
# ended without the kernel choosing a status.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kernel=""
tap=""
append=""
ports="5555,5556,5201"
machine="q35"

usage() {
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
}

while [ $# -gt 0 ]; do
    case "$1" in
        --machine) machine="${2:?--machine needs q35 or microvm}"; shift 2 ;;
        --tap) tap="${2:?--tap needs an interface name}"; shift 2 ;;
        --append) append="${2?--append needs a value}"; shift 2 ;;
        --ports) ports="${2:?--ports needs HTTP,ECHO,IPERF3}"; shift 2 ;;
        --kernel) kernel="${2:?--kernel needs a path}"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done

case "$machine" in
    q35)
        machine_args=(-machine q35)
        nic_args=(-device virtio-net-pci,netdev=n0,disable-legacy=on,romfile=)
        ;;
    microvm)
        # acpi=off: QEMU then names each virtio-mmio transport on the kernel command line
        # (virtio_mmio.device=512@0xfeb00e00:12), with its GSI. force-legacy=false: the modern
        # (version 2) interface, which the kernel requires.
        machine_args=(-machine microvm,acpi=off)
        nic_args=(-global virtio-mmio.force-legacy=false -device virtio-net-device,netdev=n0)
        ;;
    *) echo "run.sh: --machine wants q35 or microvm, not $machine" >&2; exit 2 ;;
esac

if [ -z "$kernel" ]; then
    (cd "$here" && cargo build --release --quiet)
    kernel="$here/target/x86_64-unknown-linux-gnu/release/zcnet-qemu-kernel"
fi

if [ -n "$tap" ]; then
    netdev="tap,id=n0,ifname=$tap,script=no,downscript=no"
else
    IFS=, read -r http echo iperf3 extra <<<"$ports"
    if [ -z "${iperf3:-}" ] || [ -n "${extra:-}" ]; then
        echo "run.sh: --ports wants three ports, HTTP,ECHO,IPERF3" >&2
        exit 2
    fi
    netdev="user,id=n0"
    netdev+=",hostfwd=tcp:127.0.0.1:$http-:80"
    netdev+=",hostfwd=tcp:127.0.0.1:$echo-:7,hostfwd=udp:127.0.0.1:$echo-:7"
    netdev+=",hostfwd=tcp:127.0.0.1:$iperf3-:5201"
fi

# QEMU runs as a child so its status can be mapped below; a SIGTERM or SIGINT sent to this
# script (timeout, a test harness) is passed on to it, so it never outlives the script.
qemu-system-x86_64 \
    -accel tcg -cpu max -smp 1,maxcpus=2 "${machine_args[@]}" -m 256M \
    -display none -serial stdio -no-reboot \
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
    -kernel "$kernel" -append "$append" \
    -netdev "$netdev" \
    "${nic_args[@]}" \
    <&0 &
qemu=$!
trap 'kill -TERM "$qemu" 2>/dev/null' TERM INT HUP
status=0
wait "$qemu" || status=$?
# A trapped signal interrupts `wait`: wait again for QEMU's own status.
while kill -0 "$qemu" 2>/dev/null; do
    status=0
    wait "$qemu" || status=$?
done

case "$status" in
    33) exit 0 ;;
    0) exit 1 ;;
    *) exit "$status" ;;
esac
