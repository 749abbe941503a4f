#!/usr/bin/env bash
# Memory of concurrently open handshakes (issue 19): peak resident memory of
# `tlsrum replay` over N ClientHellos that are never answered, all open at
# once (agent/examples/flood.rs --kind hello), with a flow limit and a
# memory budget large enough that nothing is evicted. Compares binaries
# side by side, alternating, and prints bytes per open handshake.
#
#   bench/open_handshakes.sh [--count N] [--runs R] [BIN ...]
#
# BIN defaults to target/release/tlsrum (built here). Pass an older build
# too (e.g. a copy of main's) to compare before/after in one run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
count=1000000
runs=1
bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    --count) count="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) bins+=("$1"); shift ;;
  esac
done
if [ ${#bins[@]} -eq 0 ]; then
  bash "$root/scripts/build-release.sh"
  bins=("$root/target/release/tlsrum")
fi
cargo build --release -p tlsrum --example flood
mkdir -p bench-data
cap="bench-data/hello-$count.pcap"
[ -f "$cap" ] || target/release/examples/flood --kind hello --count "$count" -o "$cap"

# The capture's file header alone: what a replay costs with no flow.
empty="bench-data/hello-empty.pcap"
head -c 24 "$cap" >"$empty"
for ((r = 1; r <= runs; r++)); do
  for bin in "${bins[@]}"; do
    kib=$(/usr/bin/time -f %M "$bin" replay --format ndjson --quiet \
      --max-flows $((2 * count)) --max-memory 64G "$cap" 2>&1 >/dev/null | tail -1)
    base=$(/usr/bin/time -f %M "$bin" replay --format ndjson --quiet "$empty" 2>&1 >/dev/null | tail -1)
    echo "$bin run $r: peak RSS $((kib / 1024)) MiB for $count open handshakes," \
      "$((kib * 1024 / count)) B each (the $((base / 1024)) MiB of an empty replay included)"
  done
done
