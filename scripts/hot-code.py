#!/usr/bin/env python3
"""Hot code footprint of a benchmark run, from a callgrind profile.

How many bytes of machine code a run executes over and over: the instruction bytes executed at
least --min times, and the 64-byte cache lines they sit in (what the L1 instruction cache must
hold for the loop to run without refetching), by the function symbol that contains them.

    B=$(ls target/release/deps/stack-* | grep -v '\\.d$' | head -1)   # after cargo bench --no-run
    ZCNET_STACK_SIDE=zcnet ZCNET_STACK_ONLY=bulk valgrind --tool=callgrind --dump-instr=yes \\
        --compress-pos=no --compress-strings=no --callgrind-out-file=cg.zcnet \\
        --toggle-collect='*zc_run*' $B --quick
    python3 scripts/hot-code.py cg.zcnet $B

(smoltcp: ZCNET_STACK_SIDE=smoltcp and --toggle-collect='*smol_run*'.) Only code of the binary
itself is counted (not the C library's). Add --cache-sim=yes to the valgrind command for its
modelled L1 instruction-cache misses (callgrind_annotate prints them as I1mr).
"""

import argparse
import bisect
import collections
import re
import subprocess
import sys

LINE = 64


def symbols(binary):
    """(start address, name) of the binary's text symbols, sorted."""
    out = subprocess.run(
        ["nm", "-C", "--defined-only", "-n", binary], check=True, capture_output=True, text=True
    ).stdout
    syms = []
    for row in out.splitlines():
        parts = row.split(" ", 2)
        if len(parts) == 3 and parts[1] in "tT":
            syms.append((int(parts[0], 16), parts[2]))
    return syms


def executions(profile, binary):
    """Instruction address -> times executed, for the binary's own code (self cost only)."""
    counts = collections.Counter()
    obj = ""
    after_call = False
    pattern = re.compile(r"^(0x[0-9a-f]+) \d+ (\d+)")
    with open(profile) as f:
        for row in f:
            if row.startswith("ob="):
                obj = row[3:].strip()
            elif row.startswith("calls="):
                # The next cost line is the call's inclusive cost, not this instruction's.
                after_call = True
                continue
            m = pattern.match(row)
            if not m:
                continue
            if after_call:
                after_call = False
                continue
            if obj and obj.endswith(binary.rsplit("/", 1)[-1]):
                counts[int(m.group(1), 16)] += int(m.group(2))
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profile", help="callgrind output (--dump-instr=yes --compress-pos=no)")
    ap.add_argument("binary", help="the profiled binary")
    ap.add_argument("--min", type=int, default=1000, help="executions that make code hot")
    ap.add_argument("--top", type=int, default=15, help="functions to list")
    args = ap.parse_args()

    counts = executions(args.profile, args.binary)
    if not counts:
        sys.exit("no instruction of the binary in the profile (was --dump-instr=yes given?)")
    addrs = sorted(counts)
    syms = symbols(args.binary)
    starts = [a for a, _ in syms]

    hot_bytes = collections.Counter()
    hot_lines = collections.defaultdict(set)
    for i, a in enumerate(addrs):
        if counts[a] < args.min:
            continue
        # An x86 instruction is at most 15 bytes; the next executed address bounds it.
        size = min(addrs[i + 1] - a, 15) if i + 1 < len(addrs) else 4
        sym = syms[bisect.bisect_right(starts, a) - 1][1]
        hot_bytes[sym] += size
        hot_lines[sym].add(a // LINE)

    all_lines = set().union(*hot_lines.values())
    print(f"instructions executed: {sum(counts.values())}")
    print(
        f"hot code (executed >= {args.min} times): {sum(hot_bytes.values())} bytes "
        f"in {len(all_lines)} cache lines ({len(all_lines) * LINE // 1024} KiB)"
    )
    print(f"{'bytes':>7} {'lines':>6}  function")
    for sym, b in hot_bytes.most_common(args.top):
        print(f"{b:>7} {len(hot_lines[sym]):>6}  {sym[:110]}")


if __name__ == "__main__":
    main()
