# Shared by the bench/live/ scripts (sourced, not run): the two-namespace
# topology, the agent, CPU and /metrics readers. Everything started here is
# stopped, and the namespaces deleted, on exit (also on failure or ^C).
# shellcheck shell=bash

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# TLSRUM=PATH runs that binary instead of building one (an older build,
# to compare against side by side).
TLSRUM="${TLSRUM:-$ROOT/target/release/tlsrum}"
# BENCH_DATA=DIR keeps the generated captures there (the smoke test uses a scratch one).
DATA="${BENCH_DATA:-$ROOT/bench-data}"
SNS="tlsrum-bench-s"      # server namespace: the agent's veth end
CNS="tlsrum-bench-c"      # client namespace
SDEV="tbs0"
CDEV="tbc0"
SIP="192.0.2.1"           # TEST-NET-1, only inside our namespaces
CIP="192.0.2.2"
TMPD="$(mktemp -d /tmp/tlsrum-bench-live.XXXXXX)"
PIDS=()

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi

log() { printf '%s\n' "$*" >&2; }

cleanup() {
  local p
  for p in "${PIDS[@]}"; do
    kill -TERM "$p" 2>/dev/null || true
  done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  ip netns del "$SNS" 2>/dev/null || true
  ip netns del "$CNS" 2>/dev/null || true
  rm -rf "$TMPD"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

need() {
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null 2>&1 || { log "missing $t: run scripts/install-deps.sh"; exit 2; }
  done
  [ "$(id -u)" -eq 0 ] || { log "run as root (namespaces, eBPF)"; exit 2; }
}

build() {
  if [ "$TLSRUM" != "$ROOT/target/release/tlsrum" ]; then
    log "== using $TLSRUM"
    return
  fi
  log "== scripts/build-release.sh"
  bash "$ROOT/scripts/build-release.sh" --quiet
}

# Two namespaces joined by a veth pair; the server end gets $SIP, the client end $CIP.
topo_up() {
  ip netns del "$SNS" 2>/dev/null || true
  ip netns del "$CNS" 2>/dev/null || true
  ip netns add "$SNS"
  ip netns add "$CNS"
  ip link add "$SDEV" netns "$SNS" type veth peer name "$CDEV" netns "$CNS"
  ip -n "$SNS" addr add "$SIP/24" dev "$SDEV"
  ip -n "$CNS" addr add "$CIP/24" dev "$CDEV"
  for ns in "$SNS" "$CNS"; do ip -n "$ns" link set lo up; done
  ip -n "$SNS" link set "$SDEV" up
  ip -n "$CNS" link set "$CDEV" up
}

# bg NAME CMD...: starts CMD in the background (stdout+stderr to $TMPD/NAME.log),
# remembers its pid for cleanup, sets BG_PID.
bg() {
  local name="$1"; shift
  "$@" >"$TMPD/$name.log" 2>&1 &
  BG_PID=$!
  PIDS+=("$BG_PID")
}

# stop PID [SIGNAL]: signal and wait (SIGKILL after 10 s).
stop() {
  local p="$1" sig="${2:-TERM}"
  kill -"$sig" "$p" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
}

# agent_start BACKEND METRICS_PORT ARGS...: `tlsrum live` on the server end;
# sets AGENT_PID, AGENT_LOG, AGENT_EVENTS, AGENT_METRICS.
agent_start() {
  local backend="$1" mport="$2"; shift 2
  AGENT_EVENTS="$TMPD/events-$backend-$mport.ndjson"
  # `live --events` appends: a second run on the same backend and port
  # would count the first run's records too.
  rm -f "$AGENT_EVENTS"
  AGENT_METRICS="http://127.0.0.1:$mport/metrics"
  # AGENT_NO_EVENTS=1: metrics only, as an agent in production runs.
  local events=(--events "$AGENT_EVENTS")
  [ "${AGENT_NO_EVENTS:-0}" = 1 ] && events=()
  bg "agent-$backend-$mport" ip netns exec "$SNS" "$TLSRUM" live --iface "$SDEV" \
    --backend "$backend" --metrics "127.0.0.1:$mport" "${events[@]}" "$@"
  AGENT_PID=$BG_PID
  AGENT_LOG="$TMPD/agent-$backend-$mport.log"
  for _ in $(seq 200); do
    grep -q 'tlsrum: watching' "$AGENT_LOG" 2>/dev/null && return 0
    kill -0 "$AGENT_PID" 2>/dev/null || break
    sleep 0.05
  done
  log "agent did not start:"; cat "$AGENT_LOG" >&2; exit 1
}

agent_stop() {
  stop "$AGENT_PID" INT
  if grep -qi error "$AGENT_LOG"; then log "agent log:"; cat "$AGENT_LOG" >&2; fi
}

# cpu_ticks PID: user+system clock ticks of the process so far.
cpu_ticks() {
  awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}

# sys_ticks PID: the system part of cpu_ticks (system calls such as the
# --events file's writes, page faults).
sys_ticks() {
  awk '{ sub(/.*\) /, ""); print $13 }' "/proc/$1/stat"
}

# machine_ticks: busy (non-idle, non-iowait) clock ticks of all CPUs so far.
machine_ticks() {
  awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat
}

HZ=$(getconf CLK_TCK)

# scrape URL: the agent's /metrics (from inside the server namespace).
scrape() {
  ip netns exec "$SNS" curl -sSf "$1"
}

# msum FILE NAME [LABEL=VALUE]: the sum of metric NAME over the series that have the label.
msum() {
  local file="$1" name="$2" want="${3:-}"
  awk -v name="$name" -v want="$want" '
    $1 ~ "^" name "({|$)" {
      if (want != "") { split(want, kv, "="); if (index($1, kv[1] "=\"" kv[2] "\"") == 0) next }
      s += $NF
    }
    END { printf "%d\n", s }' "$file"
}

# bpf_runtime_ns: run_time_ns summed over the loaded tlsrum_* programs
# (needs kernel.bpf_stats_enabled=1).
bpf_runtime_ns() {
  bpf_stats | cut -d' ' -f1
}

# bpf_stats: "run_time_ns run_cnt" summed over the loaded tlsrum_* programs.
bpf_stats() {
  bpftool -j prog show 2>/dev/null | python3 -c '
import json, sys
progs = [p for p in json.load(sys.stdin) if p.get("name", "").startswith("tlsrum_")]
print(sum(p.get("run_time_ns", 0) for p in progs), sum(p.get("run_cnt", 0) for p in progs))'
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
