#!/usr/bin/env python3
"""Where a benchmark's time stalls: `perf record -e cpu-clock` samples by instruction, each
shown with the instruction before it, its source line and function, and (given a callgrind
profile of the same binary) how often that instruction ran per unit of work.

A sample lands on the instruction that waits to retire; the wait is usually the instruction
just before it: a locked instruction draining the store buffer, or a load that cannot take its
bytes from narrower stores still in flight (a store-forwarding stall: a 16-byte `movups` from
the stack right after the fields were written one by one). Counts are shares of the samples
taken in the binary itself.

    cargo bench -p zcnet-benches --bench stack --no-run
    B=$(ls target/release/deps/stack-* | grep -v '\\.d$' | head -1)
    ZCNET_STACK_SIDE=zcnet ZCNET_STACK_ONLY=rr perf record -e cpu-clock -F 20000 \\
        -o perf.data $B --bench
    ZCNET_STACK_SIDE=zcnet ZCNET_STACK_ONLY=rr valgrind --tool=callgrind --dump-instr=yes \\
        --compress-pos=no --compress-strings=no --callgrind-out-file=cg.zcnet \\
        --toggle-collect='*zc_run*' $B --quick
    python3 scripts/stall-sites.py perf.data $B --callgrind cg.zcnet --per 4000
"""

import argparse
import collections
import os
import re
import subprocess
import sys
from shutil import which


def load_offset(perf_data, binary):
    """The value to add to a sampled address to get the binary's virtual address."""
    out = subprocess.run(
        ["perf", "script", "-i", perf_data, "--show-mmap-events"],
        capture_output=True, text=True, check=True).stdout
    real = os.path.realpath(binary)
    for line in out.splitlines():
        if "MMAP" in line and "r-xp" in line and line.rstrip().endswith(real):
            m = re.search(r"\[0x([0-9a-f]+)\(0x[0-9a-f]+\) @ 0x([0-9a-f]+) ", line)
            if m:
                start, file_off = int(m.group(1), 16), int(m.group(2), 16)
                break
    else:
        sys.exit(f"no executable mapping of {real} in {perf_data}")
    # The loadable segment that maps that file offset gives the virtual address it maps to.
    hdr = subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True,
                         check=True).stdout
    for line in hdr.splitlines():
        f = line.split()
        if f and f[0] == "LOAD" and "E" in f[6:8]:
            off, vaddr = int(f[1], 16), int(f[2], 16)
            return vaddr - off + file_off - start
    sys.exit(f"no executable LOAD segment in {binary}")


def disassembly(binary):
    """address -> (function, source line, instruction), and the addresses in order."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-l", binary],
                         capture_output=True, text=True, check=True).stdout
    info, order = {}, []
    fn = src = None
    for line in out.splitlines():
        m = re.match(r"^([0-9a-f]+) <(.*)>:$", line)
        if m:
            fn = m.group(2)
            continue
        if line.startswith("/"):
            src = "/".join(line.strip().split("/")[-2:])
            continue
        m = re.match(r"\s+([0-9a-f]+):\s+(.*)$", line)
        if m:
            a = int(m.group(1), 16)
            info[a] = (fn, src, m.group(2).strip())
            order.append(a)
    return info, order


def executions(profile):
    """address -> executions, from a callgrind profile written with --dump-instr=yes."""
    cost = collections.Counter()
    in_call = False
    with open(profile) as f:
        for line in f:
            if line.startswith("calls="):
                in_call = True
                continue
            if line.startswith("0x"):
                if not in_call:
                    p = line.split()
                    cost[int(p[0], 16)] += int(p[-1])
                in_call = False
            elif line[:1].isdigit():
                in_call = False
    return cost


def demangle(names):
    """Readable function names: `rustfilt` if installed, else `c++filt`, else as they are."""
    for tool in ("rustfilt", "c++filt"):
        if which(tool):
            out = subprocess.run([tool], input="\n".join(names), capture_output=True,
                                 text=True)
            if out.returncode == 0:
                return out.stdout.splitlines()
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("perf_data")
    ap.add_argument("binary")
    ap.add_argument("--callgrind", help="callgrind profile of the same binary")
    ap.add_argument("--per", type=float, default=1.0,
                    help="units of work in the callgrind run (executions are divided by it)")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()

    delta = load_offset(a.perf_data, a.binary)
    out = subprocess.run(["perf", "script", "-i", a.perf_data, "-F", "ip,dso"],
                         capture_output=True, text=True, check=True).stdout
    base = os.path.basename(os.path.realpath(a.binary))
    samples = collections.Counter()
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 2 and base in f[1]:
            samples[int(f[0], 16) + delta] += 1
    total = sum(samples.values())
    if not total:
        sys.exit("no samples in the binary")
    info, order = disassembly(a.binary)
    index = {addr: i for i, addr in enumerate(order)}
    cost = executions(a.callgrind) if a.callgrind else {}
    top = samples.most_common(a.top)
    fns = demangle([info.get(addr, ("?", "", ""))[0] or "?" for addr, _ in top])
    print(f"{total} samples in {base}")
    print(f"{'share':>6} {'runs/unit':>9}  {'instruction before':<40} {'at':<34} function")
    for (addr, n), fn in zip(top, fns):
        i = index.get(addr)
        prev = info[order[i - 1]] if i else ("", "", "")
        runs = cost.get(addr, 0) / a.per if cost else float("nan")
        print(f"{100 * n / total:5.2f}% {runs:9.1f}  {prev[2][:40]:<40} {prev[1] or '':<34} "
              f"{fn[:90]}")


if __name__ == "__main__":
    main()
