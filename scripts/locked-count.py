#!/usr/bin/env python3
"""Locked instructions a benchmark run executed, from a callgrind profile.

Sums the executions of every instruction of the binary that `objdump -d` shows with a `lock`
prefix or as an `xchg` with a memory operand (implicitly locked), in total and by the function
symbol that holds it. Divide by the run's operations (round trips, MiB) for a per-unit count.

    cargo bench -p zcnet-benches --bench stack --no-run
    B=$(ls target/release/deps/stack-* | grep -v '\\.d$' | head -1)
    ZCNET_STACK_SIDE=zcnet ZCNET_STACK_ONLY=rr valgrind --tool=callgrind --dump-instr=yes \\
        --compress-pos=no --compress-strings=no --callgrind-out-file=cg.zcnet \\
        --toggle-collect='*zc_run*' $B --quick
    python3 scripts/locked-count.py cg.zcnet $B --per 4000    # quick rr: 4 runs x 2 APIs x 500

(smoltcp: ZCNET_STACK_SIDE=smoltcp and --toggle-collect='*smol_run*'; embassy-net:
ZCNET_STACK_SIDE=embassy and '*emb_run*'.) Only the binary's own code is counted, as in
hot-code.py, which this shares its profile reader with.
"""

import argparse
import bisect
import collections
import importlib.util
import os
import re
import subprocess
import sys


def hot_code():
    """scripts/hot-code.py as a module (its name has a hyphen)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hot-code.py")
    spec = importlib.util.spec_from_file_location("hot_code", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def locked_addresses(binary):
    """Addresses of the binary's locked instructions."""
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", binary], check=True, capture_output=True, text=True
    ).stdout
    row = re.compile(r"^\s*([0-9a-f]+):\s+(.*)$")
    found = set()
    for line in out.splitlines():
        m = row.match(line)
        if not m:
            continue
        insn = m.group(2).strip()
        if insn.startswith("lock ") or (insn.startswith("xchg") and "(" in insn):
            found.add(int(m.group(1), 16))
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profile", help="callgrind output (--dump-instr=yes --compress-pos=no)")
    ap.add_argument("binary", help="the profiled binary")
    ap.add_argument("--per", type=float, default=1.0, help="divide the counts by this")
    ap.add_argument("--top", type=int, default=20, help="functions to list")
    args = ap.parse_args()

    hc = hot_code()
    counts = hc.executions(args.profile, args.binary)
    if not counts:
        sys.exit("no instruction of the binary in the profile (was --dump-instr=yes given?)")
    locked = locked_addresses(args.binary)
    syms = hc.symbols(args.binary)
    starts = [a for a, _ in syms]
    by_fn = collections.Counter()
    for a, n in counts.items():
        if a in locked:
            by_fn[syms[bisect.bisect_right(starts, a) - 1][1]] += n
    total = sum(by_fn.values())
    print(f"instructions executed: {sum(counts.values()) / args.per:.1f} per unit")
    print(f"locked instructions executed: {total / args.per:.1f} per unit ({total} in all)")
    for sym, n in by_fn.most_common(args.top):
        print(f"{n / args.per:>8.1f}  {sym[:110]}")


if __name__ == "__main__":
    main()
