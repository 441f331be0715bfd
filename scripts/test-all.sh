#!/usr/bin/env bash
# The whole zcnet test suite, as CI runs it (.ci/run calls this after installing what it needs).
#
#   bash scripts/test-all.sh          # everything
#   QUICK_LOOM=1 bash scripts/test-all.sh   # loom with fewer preemptions (faster local runs)
#
# Steps: formatting, clippy (warnings are errors), unit + integration + doc tests, the loom
# models (release build, own target dir, LOOM_MAX_PREEMPTIONS=3), benchmark smoke runs, and the
# README's demo.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings

step "unit, integration and doc tests"
cargo test --workspace

step "loom models (zcnet-buffer)"
preemptions=3
[ "${QUICK_LOOM:-0}" = 1 ] && preemptions=2
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="$preemptions" CARGO_TARGET_DIR=target-loom \
    cargo test -p zcnet-buffer --release --lib

step "benchmark smoke runs"
cargo bench -p zcnet-benches --bench pool -- --quick

step "demo (README's first command)"
cargo run -q -p zcnet-examples --bin pool-demo > /dev/null

printf '\nall steps passed\n'
