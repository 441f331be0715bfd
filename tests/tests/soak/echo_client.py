# The soak test's TCP and UDP echo clients (tests/tests/soak/main.rs runs this inside its
# network namespace, against the echo example on zcnet).
#
#   python3 -c "$(cat echo_client.py)" ADDR PORT SECS TCP_CONNS UDP_RATE STATS_FILE
#
# TCP: TCP_CONNS threads, each in a loop until SECS have passed: connect, send 1 to 50 chunks
# of random bytes (1 byte, up to one segment, or up to 64 KiB) and read each one back before
# the next, comparing every byte; then shut down its sending side and expect the server's
# end of stream, and connect again.
# UDP: one thread sends a datagram (an 8-byte sequence number and 0 to 1464 random bytes)
# UDP_RATE times a second, one at a time, and waits up to 1 s for the echo. A reply with an
# older sequence number is counted `late` and skipped; no reply in 1 s is `lost`; a reply
# that differs from what was sent is a mismatch.
#
# Every second the counters go to STATS_FILE as one JSON object (written whole, then renamed
# into place), the last time with "done": true. Exit status 0 when there was no error and no
# mismatch of either kind, else 1 (the counters and the first errors say what).

import json
import os
import random
import socket
import sys
import threading
import time

addr, port, secs, tcp_conns, udp_rate, stats_path = sys.argv[1:7]
port, secs, tcp_conns, udp_rate = int(port), float(secs), int(tcp_conns), float(udp_rate)
deadline = time.monotonic() + secs
lock = threading.Lock()
stats = {
    "tcp_connections": 0,
    "tcp_rounds": 0,
    "tcp_bytes": 0,
    "tcp_mismatches": 0,
    "tcp_errors": 0,
    "udp_sent": 0,
    "udp_ok": 0,
    "udp_bytes": 0,
    "udp_lost": 0,
    "udp_late": 0,
    "udp_mismatches": 0,
    "udp_errors": 0,
    "errors": [],
    "done": False,
}


def add(**counts):
    with lock:
        for k, v in counts.items():
            stats[k] += v


def error(kind, what):
    with lock:
        stats[kind] += 1
        if len(stats["errors"]) < 10:
            stats["errors"].append(f"{time.monotonic() - deadline + secs:.1f}s {kind}: {what}")


def recv_exact(s, n):
    got = bytearray()
    while len(got) < n:
        b = s.recv(min(65536, n - len(got)))
        if not b:
            raise ConnectionError(f"end of stream after {len(got)} of {n} bytes")
        got += b
    return bytes(got)


def tcp_client(i):
    rng = random.Random(i)
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((addr, port), timeout=20) as s:
                add(tcp_connections=1)
                for _ in range(rng.randint(1, 50)):
                    if time.monotonic() >= deadline:
                        break
                    n = rng.choice([1, rng.randint(1, 1460), rng.randint(1, 65536)])
                    data = os.urandom(n)
                    s.sendall(data)
                    got = recv_exact(s, n)
                    if got != data:
                        first = next(j for j in range(n) if got[j] != data[j])
                        error("tcp_mismatches", f"{n}-byte chunk differs from byte {first}")
                        return
                    add(tcp_rounds=1, tcp_bytes=n)
                s.shutdown(socket.SHUT_WR)
                rest = s.recv(1)
                if rest:
                    error("tcp_mismatches", "data after the last echo")
                    return
        except OSError as e:
            error("tcp_errors", repr(e))
            time.sleep(0.1)


def udp_client():
    rng = random.Random(1000)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.connect((addr, port))
    u.settimeout(1.0)
    seq = 0
    next_send = time.monotonic()
    while time.monotonic() < deadline:
        seq += 1
        payload = seq.to_bytes(8, "big") + os.urandom(rng.randint(0, 1464))
        try:
            u.send(payload)
            add(udp_sent=1)
            while True:
                try:
                    got = u.recv(2048)
                except socket.timeout:
                    add(udp_lost=1)
                    break
                if len(got) >= 8 and int.from_bytes(got[:8], "big") < seq:
                    add(udp_late=1)
                    continue
                if got != payload:
                    error("udp_mismatches", f"datagram {seq}: {len(got)} bytes back, {len(payload)} sent")
                else:
                    add(udp_ok=1, udp_bytes=len(payload))
                break
        except OSError as e:
            error("udp_errors", repr(e))
            time.sleep(0.1)
        next_send += 1.0 / udp_rate
        time.sleep(max(0.0, next_send - time.monotonic()))


def write_stats():
    with lock:
        text = json.dumps(stats)
    tmp = stats_path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, stats_path)


threads = [threading.Thread(target=tcp_client, args=(i,)) for i in range(tcp_conns)]
threads.append(threading.Thread(target=udp_client))
for t in threads:
    t.start()
while any(t.is_alive() for t in threads):
    write_stats()
    time.sleep(1.0)
for t in threads:
    t.join()
stats["done"] = True
write_stats()
bad = sum(stats[k] for k in ("tcp_mismatches", "tcp_errors", "udp_mismatches", "udp_errors"))
print(json.dumps(stats))
sys.exit(1 if bad else 0)
