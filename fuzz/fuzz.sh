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
TARGETS=(packets tls_handshake tls_record quic reassembly keylog ebpf_event)
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
    "$BIN/$t" -runs=0 -timeout=10 -rss_limit_mb=2048 "${dirs[@]}"
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
            run_one "$t" "$secs"
        done
        ;;
    smoke)
        secs="${2:-30}"
        [ -d corpus/packets ] || seeds
        build
        for t in "${TARGETS[@]}"; do
            echo "== smoke $t: replay corpus and regressions, then ${secs}s of fuzzing"
            replay_one "$t"
            run_one "$t" "$secs" 2>&1 | tail -n 25
            [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "fuzz smoke: $t failed (input in fuzz/artifacts/$t/)" >&2; exit 1; }
        done
        ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
esac
