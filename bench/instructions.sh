#!/usr/bin/env bash
# Instructions and heap allocations of `tlsrum replay`, counted exactly by
# valgrind's callgrind, per packet and per connection, for one or more
# builds side by side. This VM has no hardware counters and its run times
# swing by up to 30 %, so a change worth a few percent cannot be told from
# noise by timing it; the instruction count can, to the instruction (what
# it cannot show is cache misses: confirm a gain with alternating timed
# runs, bench/README.md). valgrind hides the CPU's SHA extensions, so SHA-256
# (JA4's hashes, QUIC's Initial keys) weighs ~10x more here than on the
# hardware: `--tcp-only` leaves the QUIC templates out.
#
#   bench/instructions.sh [--connections N] [--bulk-ratio R] [--tcp-only]
#                         [--format F] [--data DIR] BIN [BIN ...]
#
# The capture is built by bench/mkcapture from pcaps/*.pcapng (default 3,000
# connections, bulk ratio 10: ~80,000 packets, ~2 s a build under valgrind).
# The first BIN is the baseline of the ratios.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
connections=3000
bulk=10
tcp_only=0
format=ndjson
data="$root/bench-data"
bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    --connections) connections="$2"; shift 2 ;;
    --bulk-ratio) bulk="$2"; shift 2 ;;
    --tcp-only) tcp_only=1; shift ;;
    --format) format="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "instructions.sh: unknown option $1" >&2; exit 2 ;;
    *) bins+=("$1"); shift ;;
  esac
done
if [ ${#bins[@]} -eq 0 ]; then
  echo "instructions.sh: name at least one tlsrum binary (see --help)" >&2
  exit 2
fi
command -v valgrind >/dev/null || { echo "instructions.sh: needs valgrind (scripts/install-deps.sh)" >&2; exit 1; }

cargo build --release --quiet --manifest-path bench/mkcapture/Cargo.toml \
  --target-dir "$root/bench/mkcapture/target"
inputs=()
for p in pcaps/*.pcapng; do
  if [ "$tcp_only" = 1 ] && [[ "$p" == *quic* ]]; then continue; fi
  inputs+=("$p")
done
mkdir -p "$data"
kind=$([ "$tcp_only" = 1 ] && echo tcp || echo all)
cap="$data/instructions-$kind-$connections-$bulk.pcap"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$root/bench/mkcapture/target/release/mkcapture" --connections "$connections" \
  --bulk-ratio "$bulk" -o "$cap" "${inputs[@]}" >"$scratch/mkcapture.log" 2>&1 || {
  cat "$scratch/mkcapture.log" >&2
  exit 1
}
packets=$("$root/bench/mkcapture/target/release/pcapcount" "$cap" | sed -n 's/^packets=\([0-9]*\) .*/\1/p')

echo "capture: $cap ($packets packets, $connections connections, --format $format)"
printf '%-40s %15s %10s %10s %12s %8s\n' binary instructions "per pkt" "per conn" "allocs/conn" ratio
base=""
for bin in "${bins[@]}"; do
  out="$scratch/callgrind.out"
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" replay --quiet \
    --format "$format" "$cap" >/dev/null 2>"$scratch/valgrind.err" || {
    cat "$scratch/valgrind.err" >&2
    exit 1
  }
  # Total instructions, and the calls made into the allocator's entry points
  # (mimalloc's, which tlsrum uses, or the C library's malloc family).
  read -r total allocs < <(python3 - "$out" <<'EOF'
import re, sys
names, total, allocs, cfn = {}, 0, 0, None
entry = re.compile(r"^(mi_(malloc|zalloc|realloc)(_aligned)?|malloc|calloc|realloc)$")
for line in open(sys.argv[1]):
    if line.startswith("summary:") or line.startswith("totals:"):
        total = int(line.split()[1])
    elif line.startswith("cfn="):
        m = re.match(r"cfn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
        cfn = names.get(m.group(1), "")
    elif line.startswith("fn="):
        m = re.match(r"fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
        if m and m.group(2) is not None:
            names[m.group(1)] = m.group(2)
    elif line.startswith("calls=") and cfn is not None and entry.match(cfn):
        allocs += int(line[6:].split()[0])
print(total, allocs)
EOF
)
  [ -n "$base" ] || base=$total
  awk -v b="$bin" -v t="$total" -v a="$allocs" -v p="$packets" -v c="$connections" -v base="$base" \
    'BEGIN { printf "%-40s %15d %10.0f %10.0f %12.2f %8.4f\n", b, t, t / p, t / c, a / c, t / base }'
done
