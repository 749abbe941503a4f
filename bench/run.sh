#!/usr/bin/env bash
# Replay throughput benchmark: tlsrum vs. reading the file (cat, a bare libpcap loop) vs.
# tshark and nDPI's ndpiReader, on one large capture built by bench/mkcapture from real
# captures. See bench/README.md.
#
#   bench/run.sh [options] [CAPTURE.pcap|pcapng ...]
#
# Inputs: the captures given as arguments, else pcaps/*.pcapng of the repository.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/run.sh [options] [CAPTURE ...]

Builds bench/mkcapture and tlsrum (release), creates bench-data/big.pcap from the inputs
(CAPTURE arguments, else pcaps/*.pcapng) and times, alternating, RUNS times each:
  cat         cat FILE > /dev/null (reading the file out of the page cache)
  pcapcount   bare libpcap read loop (the floor of a libpcap reader)
  tlsrum      target/release/tlsrum replay --format FORMAT FILE > /dev/null
  ndpiReader  ndpiReader -q -i FILE (nDPI: protocol detection, TLS SNI/JA3 per flow)
  tshark      tshark -r FILE -Y tls.handshake -T fields ... > /dev/null

options:
  --connections N       connection copies in the capture            (default 100000)
  --bulk-ratio R        bulk packets per TLS connection              (default 10)
  --seed N              mkcapture seed                                (default 1)
  --mkcapture-args STR  extra mkcapture options, e.g. "--tls-only"
  --runs N              timed runs per tool                           (default 3)
  --tshark-packets N    run tshark on the first N packets only and extrapolate
                        packets/s (default 200000; 0 = whole file)
  --tshark-full         same as --tshark-packets 0
  --no-tshark           skip tshark
  --no-ndpi             skip ndpiReader
  --no-tlsrum           skip building and running tlsrum (generator + baselines only)
  --compare BIN         also time BIN (another tlsrum binary, e.g. one built from main
                        into another directory) as "baseline", alternating with tlsrum,
                        and report baseline/tlsrum
  --format F            tlsrum's output (default ndjson): table is what a plain
                        `tlsrum replay FILE` writes; csv, zeek and zeek-json cost more
  --threads N           also time tlsrum with --threads N (tool tlsrum-N), alternating
                        with tlsrum on one thread (--threads 1), and report the ratio
  --regen               rebuild bench-data/big.pcap even if it is up to date
  --tlsrum BIN          time BIN instead of building target/release/tlsrum (the tests'
                        smoke passes its own build)
  --data DIR            keep the capture and the reports in DIR (default bench-data/)
  -h, --help            this text
EOF
}

CONNECTIONS=100000
BULK_RATIO=10
SEED=1
MK_ARGS=""
RUNS=3
TSHARK_PACKETS=200000
DO_TSHARK=1
DO_NDPI=1
DO_TLSRUM=1
REGEN=0
COMPARE=""
THREADS=""
FORMAT=ndjson
TLSRUM_BIN=""
DATA_DIR=""
INPUTS=()

while [ $# -gt 0 ]; do
  case "$1" in
    --connections) CONNECTIONS="$2"; shift 2 ;;
    --bulk-ratio) BULK_RATIO="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --mkcapture-args) MK_ARGS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --tshark-packets) TSHARK_PACKETS="$2"; shift 2 ;;
    --tshark-full) TSHARK_PACKETS=0; shift ;;
    --no-tshark) DO_TSHARK=0; shift ;;
    --no-ndpi) DO_NDPI=0; shift ;;
    --no-tlsrum) DO_TLSRUM=0; shift ;;
    --regen) REGEN=1; shift ;;
    --compare) COMPARE="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --format) FORMAT="$2"; shift 2 ;;
    --tlsrum) TLSRUM_BIN="$2"; shift 2 ;;
    --data) DATA_DIR="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; INPUTS+=("$@"); break ;;
    -*) echo "run.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) INPUTS+=("$1"); shift ;;
  esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DATA="${DATA_DIR:-$ROOT/bench-data}"
BIG="$DATA/big.pcap"
mkdir -p "$DATA"

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi

# Make paths of the inputs absolute before anything else.
if [ ${#INPUTS[@]} -eq 0 ]; then
  shopt -s nullglob
  INPUTS=("$ROOT"/pcaps/*.pcapng)
  shopt -u nullglob
  if [ ${#INPUTS[@]} -eq 0 ]; then
    echo "run.sh: no inputs: pcaps/*.pcapng is empty and no CAPTURE arguments were given" >&2
    usage >&2
    exit 2
  fi
  INPUT_DESC="pcaps/*.pcapng (${#INPUTS[@]} files)"
else
  INPUT_DESC="${#INPUTS[@]} capture(s) from the command line"
fi
for f in "${INPUTS[@]}"; do
  [ -r "$f" ] || { echo "run.sh: cannot read input $f" >&2; exit 2; }
done

# --- timing tool -------------------------------------------------------------------------
if [ -x /usr/bin/time ] && /usr/bin/time -f '%e' true >/dev/null 2>&1; then
  HAVE_GNU_TIME=1
else
  HAVE_GNU_TIME=0
  echo "NOTE: GNU time (/usr/bin/time) not found, so peak RSS cannot be measured."
  echo "      Install the Debian package 'time' (apt-get install time) to get it;"
  echo "      falling back to bash's built-in time (elapsed seconds only)."
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# run_timed NAME CMD... : runs CMD with stdout to /dev/null, appends "seconds rss_kb" to
# $TMP/NAME.times. Fails loudly (with the command's stderr) if CMD fails.
# The machine's CPU time so far, and the part of it the host took from this guest (steal):
# "total steal" in clock ticks, from /proc/stat's first line.
cpu_ticks() {
  local _cpu user nice sys idle iowait irq softirq steal _rest
  read -r _cpu user nice sys idle iowait irq softirq steal _rest </proc/stat
  echo "$((user + nice + sys + idle + iowait + irq + softirq + steal)) $steal"
}

# Reads FILE back into the page cache if any of it was dropped since the last run (its
# resident bytes, from util-linux's fincore, below its size): a VM whose kernel pages idle
# memory out (DAMON's proactive reclaim, seen on this project's build VM: ~10 minutes idle
# left 46 of 316 MB of a capture cached) would otherwise time reads from disk. Counted.
REWARMED=0
ensure_cached() {
  local res
  res=$(fincore --bytes --noheadings --output RES "$1" 2>/dev/null) || return 0
  if [ "${res:-0}" -lt "$(stat -c %s "$1")" ]; then
    cat "$1" >/dev/null
    REWARMED=$((REWARMED + 1))
  fi
}

run_timed() {
  local name="$1"; shift
  local out="$TMP/$name.one" err="$TMP/$name.err" rc=0 t0 s0 t1 s1
  # Elapsed time from bash (to the millisecond; GNU time's %e has two decimals, too coarse
  # for a capture read in 0.2 s), peak RSS from GNU time, and the share of the machine's
  # time the host took meanwhile (a VM's steal: time its vCPUs wanted and did not get).
  local TIMEFORMAT='%3R' rss=()
  [ "$HAVE_GNU_TIME" = 1 ] && rss=(/usr/bin/time -f '%M' -o "$out.rss")
  read -r t0 s0 < <(cpu_ticks)
  { time "${rss[@]}" "$@" >/dev/null 2>"$err"; } 2>"$out" || rc=$?
  read -r t1 s1 < <(cpu_ticks)
  local steal
  steal=$(awk -v t="$((t1 - t0))" -v s="$((s1 - s0))" 'BEGIN { printf "%.1f", (t > 0 ? 100 * s / t : 0) }')
  [ -s "$out" ] && echo "$(tail -n1 "$out") $(tail -n1 "$out.rss" 2>/dev/null || echo NA) $steal" >"$out"
  if [ "$rc" -ne 0 ]; then
    echo "run.sh: $name failed (exit $rc): $*" >&2
    tail -n 20 "$err" >&2 || true
    exit 1
  fi
  tail -n1 "$out" >>"$TMP/$name.times"
}

# --- build ----------------------------------------------------------------------------------
echo "== building bench/mkcapture (release)"
T0=$(date +%s.%N)
cargo build --release --quiet --manifest-path bench/mkcapture/Cargo.toml --target-dir "$ROOT/bench/mkcapture/target"
MKCAPTURE="$ROOT/bench/mkcapture/target/release/mkcapture"
PCAPCOUNT="$ROOT/bench/mkcapture/target/release/pcapcount"
TLSRUM="${TLSRUM_BIN:-$ROOT/target/release/tlsrum}"
if [ -n "$TLSRUM_BIN" ]; then
  [ -x "$TLSRUM" ] || { echo "run.sh: --tlsrum $TLSRUM is not an executable" >&2; exit 1; }
elif [ "$DO_TLSRUM" = 1 ]; then
  echo "== building tlsrum (scripts/build-release.sh)"
  if ! bash scripts/build-release.sh --quiet; then
    echo "run.sh: building tlsrum failed; fix the build or run with --no-tlsrum" >&2
    exit 1
  fi
  [ -x "$TLSRUM" ] || { echo "run.sh: $TLSRUM missing after the build" >&2; exit 1; }
fi
awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "   builds took %.1f s\n", b - a }'

# --- the capture ----------------------------------------------------------------------------
STAMP="$DATA/big.params"
{
  echo "connections=$CONNECTIONS bulk_ratio=$BULK_RATIO seed=$SEED args=$MK_ARGS"
  stat -c '%n %s %Y' "$MKCAPTURE" "${INPUTS[@]}"
} >"$TMP/params"
if [ "$REGEN" = 1 ] || [ ! -s "$BIG" ] || ! cmp -s "$TMP/params" "$STAMP"; then
  echo "== creating $BIG from $INPUT_DESC"
  rm -f "$STAMP"
  T0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$MKCAPTURE" --out "$BIG" --connections "$CONNECTIONS" --bulk-ratio "$BULK_RATIO" \
    --seed "$SEED" $MK_ARGS "${INPUTS[@]}"
  awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "   mkcapture took %.1f s\n", b - a }'
  cp "$TMP/params" "$STAMP"
else
  echo "== reusing $BIG (same inputs and parameters; --regen to rebuild)"
fi

# The file's pages are dropped from the page cache, then read back in sequentially (pcapcount
# below), so every run starts from the state of a capture read from disk, whatever made the
# file: kernel readahead caches it in large folios, while a file just written in small pieces
# (mkcapture's 8 KiB writes) stays cached in 4 KiB pages, and mapping those cost tlsrum's reader
# a tenth more time (1.10x, 4 of 5 pairs; the kernel's share of a replay halved).
dd if="$BIG" iflag=nocache count=0 status=none 2>/dev/null || true
# Count packets (and pull the file into the page cache so every tool reads from memory).
read -r PKTS BYTES < <("$PCAPCOUNT" "$BIG" | sed -E 's/packets=([0-9]+) bytes=([0-9]+).*/\1 \2/')
if ! [[ "${PKTS:-}" =~ ^[0-9]+$ ]] || [ "$PKTS" -eq 0 ]; then
  echo "run.sh: pcapcount could not read $BIG" >&2
  exit 1
fi
FILE_BYTES=$(stat -c %s "$BIG")
echo "   $PKTS packets, $FILE_BYTES bytes in the file"

# --- tshark subset --------------------------------------------------------------------------
TSHARK_FILE="$BIG"
TSHARK_PKTS="$PKTS"
if [ "$DO_TSHARK" = 1 ]; then
  if ! command -v tshark >/dev/null 2>&1; then
    echo "NOTE: tshark not found (Debian package 'tshark'); skipping it"
    DO_TSHARK=0
  elif [ "$TSHARK_PACKETS" -gt 0 ] && [ "$TSHARK_PACKETS" -lt "$PKTS" ]; then
    if ! command -v editcap >/dev/null 2>&1; then
      echo "NOTE: editcap not found (Debian package 'wireshark-common'); skipping tshark"
      DO_TSHARK=0
    else
      TSHARK_FILE="$TMP/tshark-subset.pcap"
      editcap -r "$BIG" "$TSHARK_FILE" "1-$TSHARK_PACKETS"
      TSHARK_PKTS=$("$PCAPCOUNT" "$TSHARK_FILE" | sed -E 's/packets=([0-9]+).*/\1/')
      echo "   tshark runs on the first $TSHARK_PKTS packets only (editcap -r); its packets/s"
      echo "   is extrapolated to the whole file (--tshark-full to run it on all $PKTS)"
    fi
  fi
fi

if [ "$DO_NDPI" = 1 ] && ! command -v ndpiReader >/dev/null 2>&1; then
  echo "NOTE: ndpiReader not found (Debian package 'libndpi-bin'); skipping it"
  DO_NDPI=0
fi

# --- timed runs, alternating ----------------------------------------------------------------
TOOLS=(cat pcapcount)
[ "$DO_TLSRUM" = 1 ] && TOOLS+=(tlsrum)
if [ -n "$COMPARE" ]; then
  [ -x "$COMPARE" ] || { echo "run.sh: --compare $COMPARE is not an executable" >&2; exit 1; }
  TOOLS+=(baseline)
fi
[ "$DO_TLSRUM" = 1 ] && [ -n "$THREADS" ] && TOOLS+=("tlsrum-$THREADS")
[ "$DO_NDPI" = 1 ] && TOOLS+=(ndpiReader)
[ "$DO_TSHARK" = 1 ] && TOOLS+=(tshark)
echo "== timing ${TOOLS[*]}: $RUNS runs each, alternating"
for ((run = 1; run <= RUNS; run++)); do
  # Each run's order is shuffled (seeded by the run number, so a rerun
  # repeats it): no tool always follows the same one. tlsrum right after
  # pcapcount's read() of the whole file lost every pair to a build of the
  # same instructions; rotating the order did not help, since a rotation
  # keeps every tool's predecessor.
  mapfile -t ORDER < <(printf '%s\n' "${TOOLS[@]}" |
    awk -v seed="$run" 'BEGIN { srand(seed) } { printf "%.9f\t%s\n", rand(), $0 }' |
    sort -n | cut -f2)
  for tool in "${ORDER[@]}"; do
    if [ "$tool" = tshark ]; then ensure_cached "$TSHARK_FILE"; else ensure_cached "$BIG"; fi
    case "$tool" in
      cat) run_timed cat cat "$BIG" ;;
      pcapcount) run_timed pcapcount "$PCAPCOUNT" "$BIG" ;;
      ndpiReader) run_timed ndpiReader ndpiReader -q -i "$BIG" ;;
      tlsrum) run_timed tlsrum "$TLSRUM" replay --threads 1 --format "$FORMAT" "$BIG" ;;
      baseline) run_timed baseline "$COMPARE" replay --format "$FORMAT" "$BIG" ;;
      tlsrum-*) run_timed "$tool" "$TLSRUM" replay --threads "$THREADS" --format "$FORMAT" "$BIG" ;;
      tshark) run_timed tshark tshark -r "$TSHARK_FILE" -Y tls.handshake -T fields \
                -e frame.time_epoch -e tcp.stream -e tls.handshake.type ;;
    esac
    printf '   run %d %-10s %s s\n' "$run" "$tool" "$(tail -n1 "$TMP/$tool.times" | cut -d' ' -f1)"
  done
done

# --- report ---------------------------------------------------------------------------------
REPORT="$DATA/results-$(date +%Y%m%d-%H%M%S).txt"
{
  echo
  echo "replay throughput on $BIG"
  echo "  $PKTS packets, $FILE_BYTES bytes; $CONNECTIONS connections, bulk ratio $BULK_RATIO; inputs: $INPUT_DESC"
  echo "  tlsrum's output: --format $FORMAT"
  echo "  load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (ratios need an otherwise idle machine)"
  echo "  $(nproc) cores, $(uname -r); seconds and packets/s: median of $RUNS runs; best p/s: fastest run;"
  echo "  the file was read back into the page cache before $REWARMED of the runs (some of it had"
  echo "  been dropped since the run before)"
  echo "  peak RSS: largest maximum resident set size over the runs; steal: median share of the"
  echo "  machine's time the host took during the tool's runs (a VM's vCPUs waiting for the host;"
  echo "  any steal makes timings and ratios less trustworthy, two threads' more than one's)"
  echo
  printf '  %-10s %12s %14s %14s %12s %7s\n' tool seconds 'packets/s' 'best p/s' 'peak RSS' steal
  for tool in "${TOOLS[@]}"; do
    n=$PKTS
    [ "$tool" = tshark ] && n=$TSHARK_PKTS
    steal=$(cut -d' ' -f3 "$TMP/$tool.times" | sort -n | awk '{ s[NR] = $1 } END { print s[int((NR + 1) / 2)] + 0 }')
    sort -n -k1,1 "$TMP/$tool.times" | awk -v n="$n" -v tool="$tool" -v steal="$steal" '
      { t[NR] = $1; r[NR] = $2 }
      END {
        med = t[int((NR + 1) / 2)]; best = t[1]
        rss = 0; for (i = 1; i <= NR; i++) if (r[i] != "NA" && r[i] + 0 > rss) rss = r[i] + 0
        rs = (rss > 0) ? sprintf("%.1f MiB", rss / 1024) : "n/a"
        if (med <= 0) med = 0.001; if (best <= 0) best = 0.001
        printf "  %-10s %12.3f %14.0f %14.0f %12s %6.1f%%\n", tool, med, n / med, n / best, rs, steal
        printf "%s %.6f\n", tool, n / med > "/dev/stderr"
      }' 2>>"$TMP/pps"
  done
  if [ "$DO_TSHARK" = 1 ] && [ "$TSHARK_PKTS" != "$PKTS" ]; then
    awk -v n="$PKTS" '$1 == "tshark" { printf "  (tshark ran on the first %s packets; extrapolated to the whole file: %.1f s)\n", "'"$TSHARK_PKTS"'", n / $2 }' "$TMP/pps"
  fi
  echo
  awk '{ pps[$1] = $2 }
    END {
      if ("tlsrum" in pps && "ndpiReader" in pps)
        printf "  tlsrum/ndpiReader = %6.2fx  (tlsrum packets/s divided by ndpiReader packets/s; >1: tlsrum is faster)\n", pps["tlsrum"] / pps["ndpiReader"]
      if ("tlsrum" in pps && "tshark" in pps)
        printf "  tlsrum/tshark    = %6.2fx  (tlsrum packets/s divided by tshark packets/s; >1: tlsrum is faster)\n", pps["tlsrum"] / pps["tshark"]
      if ("tlsrum" in pps && "baseline" in pps)
        printf "  baseline/tlsrum  = %6.2fx  (--compare binary packets/s divided by tlsrum packets/s; <1: tlsrum is faster)\n", pps["baseline"] / pps["tlsrum"]
      if ("baseline" in pps)
        printf "  pcapcount/baseline = %6.2fx\n", pps["pcapcount"] / pps["baseline"]
      if ("tlsrum" in pps)
        printf "  pcapcount/tlsrum = %6.2fx  (how far tlsrum is from the bare libpcap read floor; 1 = at the floor)\n", pps["pcapcount"] / pps["tlsrum"]
      if ("tlsrum" in pps)
        printf "  cat/tlsrum       = %6.2fx  (how far tlsrum is from reading the file out of the page cache)\n", pps["cat"] / pps["tlsrum"]
      for (t in pps) if (t ~ /^tlsrum-/)
        printf "  %s/tlsrum = %6.2fx  (packets/s with --threads %s over one thread, runs alternating)\n", t, pps[t] / pps["tlsrum"], substr(t, 8)
    }' "$TMP/pps"
  [ "$HAVE_GNU_TIME" = 1 ] || echo "  (peak RSS n/a: install the Debian package 'time' for /usr/bin/time)"
} | tee "$REPORT"
echo
echo "report saved to $REPORT"
