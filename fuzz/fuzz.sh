#!/usr/bin/env bash
# Builds and runs tlsrum's libFuzzer targets on stable Rust (no cargo-fuzz,
# no nightly): the coverage instrumentation cargo-fuzz would ask for is set
# by hand in RUSTFLAGS. `--target` is given so that build scripts (agent's
# eBPF build, libfuzzer-sys's C++ build) are compiled without these flags.
#
#   fuzz/fuzz.sh build              build every target
#   fuzz/fuzz.sh run SECS [TARGET…] fuzz each target SECS seconds (default all)
#   fuzz/fuzz.sh smoke SECS         replay corpus + regressions, then fuzz SECS each
#   fuzz/fuzz.sh seeds              (re)write corpus/<target>/ from ../pcaps
#
# Artifacts (crashing inputs) go to fuzz/artifacts/<target>/; a crash ends
# the script with a non-zero status.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$HOME/.cargo/bin:$PATH"

TRIPLE="${FUZZ_TRIPLE:-$(rustc -vV | sed -n 's/^host: //p')}"
TARGETS=(packets tls_handshake tls_record quic reassembly keylog ebpf_event zeek_log)
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares -Coverflow-checks=on -Cdebug-assertions=on -Cforce-frame-pointers=yes"
JOBS="${FUZZ_JOBS:-2}"
BIN="target/$TRIPLE/release"

build() {
    cargo build --release --locked --target "$TRIPLE" -j "$JOBS" --bins
}

seeds() {
    # The seed writer is a plain (uninstrumented) program of its own.
    (cd seeds && env -u RUSTFLAGS cargo run --release --locked -q -j "$JOBS" -- ../../pcaps ../corpus)
}

# Corpus dirs: the committed/generated seeds, plus what fuzzing found
# (corpus-new/, not committed) and the regressions.
run_one() {
    local t=$1 secs=$2
    mkdir -p "corpus-new/$t" "corpus/$t" "artifacts/$t"
    "$BIN/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="artifacts/$t/" \
        "corpus-new/$t" "corpus/$t"
}

replay_one() {
    local t=$1 dirs=()
    for d in "corpus/$t" "regressions/$t"; do
        [ -d "$d" ] && [ -n "$(ls -A "$d")" ] && dirs+=("$d")
    done
    [ ${#dirs[@]} -eq 0 ] && return 0
    # -runs=0 with directories: every file executed once (no mutation).
    mkdir -p "artifacts/$t"
    "$BIN/$t" -runs=0 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="artifacts/$t/" "${dirs[@]}"
}

# What failed: the panic, the top frames, and the input libFuzzer kept.
why() {
    local log="target/smoke-$1.log"
    grep -m1 -A1 -E 'panicked at|ERROR: libFuzzer' "$log" || tail -n 20 "$log"
    grep -m6 -E '^ +[0-9]+: ' "$log" | grep -v -E 'rust_begin_unwind|panicking|panic_' | head -n 4 || true
    grep -E '^(SUMMARY|artifact_prefix)' "$log" || true
}

# Every target runs even after another failed: the first crash must not
# hide the rest. The failures are listed at the end.
failed=()
finish() {
    if [ ${#failed[@]} -gt 0 ]; then
        echo "fuzz: FAILED: ${failed[*]} (inputs in fuzz/artifacts/<target>/; fuzz/README.md says how to reproduce)" >&2
        exit 1
    fi
}

case "${1:-}" in
    build) build ;;
    seeds) seeds ;;
    run)
        secs="${2:-600}"; shift 2 || true
        [ $# -gt 0 ] && TARGETS=("$@")
        [ -d corpus/packets ] || seeds
        build
        for t in "${TARGETS[@]}"; do
            echo "== fuzz $t for ${secs}s"
            run_one "$t" "$secs" || failed+=("$t")
        done
        finish
        ;;
    smoke)
        secs="${2:-20}"
        [ -d corpus/packets ] || seeds
        build
        for t in "${TARGETS[@]}"; do
            echo "== smoke $t: replay corpus/$t and regressions/$t, then ${secs}s of fuzzing"
            if ! replay_one "$t" > "target/smoke-$t.log" 2>&1; then
                why "$t"
                failed+=("$t(replay)")
                continue
            fi
            if ! run_one "$t" "$secs" > "target/smoke-$t.log" 2>&1; then
                why "$t"
                failed+=("$t")
                continue
            fi
            grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units)' "target/smoke-$t.log" || true
        done
        finish
        ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
esac
