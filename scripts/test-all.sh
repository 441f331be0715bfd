#!/usr/bin/env bash
# The whole zcnet test suite, as CI runs it (.ci/run calls this after installing what it needs).
#
#   bash scripts/test-all.sh          # everything
#   QUICK_LOOM=1 bash scripts/test-all.sh   # loom with fewer preemptions (faster local runs)
#
# Steps: formatting, clippy (warnings are errors; also the logging features: none, log, defmt),
# the example kernel (examples/qemu-kernel, its own cargo project: fmt, clippy, release build),
# unit + integration + doc tests (among them the kernel booted under QEMU,
# tests/tests/qemu_kernel.rs), the soak test's short form (40 s of HTTP, TCP and UDP echo and
# ping over a TAP, tests/tests/soak), the loom models (release build with debug assertions,
# own target dir, LOOM_MAX_PREEMPTIONS=3), an AddressSanitizer run of the
# unsafe-heavy crates (without the QEMU tests), the fuzz targets (tests/fuzz, 45 s each),
# benchmark smoke runs, and the README's demo.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings

step "logging features: the stack and the drivers without one, with log, with defmt (clippy)"
# The workspace run above has zcnet-stack's and zcnet-tap's `log` on (the examples enable it);
# these cover each crate without a logging feature (the macros must expand to nothing without
# warnings), zcnet-virtio with `log`, and `defmt` (which only embedded targets use).
cargo clippy -p zcnet-stack -p zcnet-virtio -p zcnet-tap --all-targets -- -D warnings
cargo clippy -p zcnet-stack -p zcnet-virtio --all-targets \
    --features zcnet-stack/log,zcnet-virtio/log -- -D warnings
cargo clippy -p zcnet-stack -p zcnet-virtio --features zcnet-stack/defmt,zcnet-virtio/defmt -- -D warnings

step "library crates build without std or alloc (the no_std configuration kernels use)"
cargo check -p zcnet-buffer -p zcnet-executor -p zcnet-stack --no-default-features

step "rustdoc (broken links are errors; the no_std crates' docs and their private items too)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
RUSTDOCFLAGS="-D warnings" CARGO_TARGET_DIR=target/doc-nostd cargo doc -p zcnet-stack --no-deps --no-default-features
RUSTDOCFLAGS="-D warnings" CARGO_TARGET_DIR=target/doc-nostd cargo doc -p zcnet-stack --no-deps --no-default-features --document-private-items
RUSTDOCFLAGS="-D warnings" CARGO_TARGET_DIR=target/doc-nostd cargo doc -p zcnet-buffer -p zcnet-executor --no-deps --no-default-features --document-private-items

step "example kernel (examples/qemu-kernel): fmt, clippy (zcnet and the smoltcp baselines), build"
# Its own cargo project (not a workspace member): its .cargo/config.toml (target, freestanding
# link flags) is found from the current directory, so these run inside it. The QEMU tests in
# the next step build it too (a no-op after this).
(
    cd examples/qemu-kernel
    cargo fmt -- --check
    cargo clippy --release -- -D warnings
    # The smoltcp-only variants the kernel benchmark measures zcnet against.
    cargo clippy --release --features baseline -- -D warnings
    cargo clippy --release --features baseline-lend -- -D warnings
    cargo build --release
)

step "unit, integration and doc tests"
cargo test --workspace

step "soak, short form (tests/tests/soak: HTTP, TCP and UDP echo and ping over a TAP, 40 s)"
# Root, /dev/net/tun, wrk, python3, ping, curl, ss. Ignored by `cargo test --workspace` (and the
# ASan run) so it runs once, here, on the debug build of the step above: its debug assertions
# check every slot-state transition of the pool. Its full form (10 minutes, release) and
# figures: RELIABILITY.md, "Soak".
cargo test -p zcnet-tests --test soak -- --ignored --nocapture

step "loom models (zcnet-buffer, zcnet-executor)"
preemptions=3
[ "${QUICK_LOOM:-0}" = 1 ] && preemptions=2
# Debug assertions stay on: a task queued twice or a slot moved from the wrong state trips one.
RUSTFLAGS="--cfg loom -C debug-assertions" LOOM_MAX_PREEMPTIONS="$preemptions" \
    CARGO_TARGET_DIR=target-loom cargo test -p zcnet-buffer -p zcnet-executor --release --lib

step "AddressSanitizer (zcnet-buffer, zcnet-executor, and the zcnet-tests tests: pool stress, stack, TAP)"
# The stable toolchain ships the ASan runtime; -Z needs RUSTC_BOOTSTRAP. Leak detection is off
# because tests leak their pools and executors on purpose ('static by design).
# `--skip qemu` leaves out tests/tests/qemu_kernel.rs (every test there has `qemu` in its name):
# the code under test runs inside the guest, which ASan does not instrument, so a second run
# would only repeat the previous step's QEMU boots.
ASAN_OPTIONS=detect_leaks=0 RUSTC_BOOTSTRAP=1 RUSTFLAGS="-Zsanitizer=address" \
    CARGO_TARGET_DIR=target-asan cargo test -p zcnet-buffer -p zcnet-executor -p zcnet-tests \
    --target x86_64-unknown-linux-gnu --lib --tests -- --skip qemu

step "fuzzing (tests/fuzz: cargo-fuzz / libFuzzer, 45 s per target from the committed corpus)"
# Its own cargo project (not a workspace member): fmt and clippy run inside it, and the stack's
# `fuzzing` feature, which only it enables, gets its own clippy run. cargo-fuzz needs -Z flags
# (ASan, sanitizer coverage): RUSTC_BOOTSTRAP lets the stable toolchain take them, as in the
# ASan step. libFuzzer's C++ is built by the libfuzzer-sys crate with the system's g++ (no clang
# needed). `-O -a`: optimized, with debug assertions and overflow checks (the pool checks every
# slot-state transition with them). First the corpus (seeds and regressions) is replayed by a
# plain test, then each target fuzzes for FUZZ_SECONDS (45) in one process (libFuzzer's
# default: one job, no -jobs/-workers forks); new inputs go to a scratch directory, not the
# repository. stack_ingress runs without LeakSanitizer: its one stack and its tasks live across
# inputs, so the heap grows between inputs by design and libFuzzer's per-input leak scan would
# take most of its time (its checks count pool slots instead). tests/fuzz/README.md has the
# long form.
cargo clippy -p zcnet-stack --features alloc,fuzzing -- -D warnings
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
(
    cd tests/fuzz
    export CARGO_TARGET_DIR=../../target-fuzz
    cargo fmt -- --check
    cargo clippy --locked --all-targets -- -D warnings
    cargo test --locked
)
fuzz_scratch=$(mktemp -d)
for t in stack_ingress classifier_neighbors buffer_leases http_parser iperf3_control tcp_fast_path; do
    mkdir -p "$fuzz_scratch/$t"
    leaks=1
    if [ "$t" = stack_ingress ]; then leaks=0; fi
    RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=target-fuzz cargo fuzz run --fuzz-dir tests/fuzz -O -a "$t" \
        "$fuzz_scratch/$t" "tests/fuzz/corpus/$t" -- \
        -max_total_time="${FUZZ_SECONDS:-45}" -detect_leaks="$leaks" -print_final_stats=1 \
        -artifact_prefix="$fuzz_scratch/" > "$fuzz_scratch/$t.log" 2>&1 || {
        tail -n 60 "$fuzz_scratch/$t.log"; echo "fuzz target $t failed (artifacts in $fuzz_scratch)"; exit 1;
    }
    grep -E '^stat::number_of_executed_units|^#[0-9]+ +DONE' "$fuzz_scratch/$t.log" || true
done
rm -rf "$fuzz_scratch"

step "benchmark smoke runs"
cargo bench -p zcnet-benches --bench pool -- --quick
cargo bench -p zcnet-benches --bench timers -- --quick
cargo bench -p zcnet-benches --bench executor -- --quick
cargo bench -p zcnet-benches --bench stack -- --quick
cargo bench -p zcnet-benches --bench copies -- --quick
# Root, /dev/net/tun and wrk: zcnet, smoltcp and embassy-net against Linux over TAP (< 60 s).
cargo bench -p zcnet-benches --bench tap -- --quick
# Root, /dev/net/tun, nft and ethtool: echo through 1% random loss each way, zcnet, smoltcp and
# embassy-net on a TAP and Linux <-> Linux over a veth, three runs of 3 s each (~60 s); fails
# if zcnet's median goodput is below 0.5x Linux's.
cargo bench -p zcnet-benches --bench loss -- --quick --gate
# Root, QEMU, iperf3 and wrk: the example kernel on zcnet against the same kernel on smoltcp's
# own poll loop (builds both kernels, then about 30 s of measuring).
cargo bench -p zcnet-benches --bench kernel -- --quick

step "demo (README's first command)"
cargo run -q -p zcnet-examples --bin demo > /dev/null

printf '\nall steps passed\n'
