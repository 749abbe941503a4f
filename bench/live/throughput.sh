#!/usr/bin/env bash
# (a) Bulk TCP throughput over the veth, without and with `tlsrum live`
# (eBPF backend) attached to the server's end. iperf3 runs on a port the
# agent watches (443 by default), so every packet goes through the TC
# programs' parse and flow lookup: the worst case for a watched port.
# Runs alternate (without, with, with, without, ...) so drift hits both alike;
# the report gives medians and their ratio.
#
#   bench/live/throughput.sh [--runs N] [--secs S] [--port P] [--backend ebpf|pcap] [--streams N]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

RUNS=8
SECS=10
PORT=443
BACKEND=ebpf
STREAMS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --secs) SECS="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --backend) BACKEND="$2"; shift 2 ;;
    --streams) STREAMS="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) log "unknown option $1"; exit 2 ;;
  esac
done

need iperf3 bpftool ip curl python3
build
topo_up
bg iperf3-server ip netns exec "$SNS" iperf3 -s -p "$PORT"
for _ in $(seq 100); do
  ip netns exec "$SNS" ss -Hltn "sport = :$PORT" | grep -q . && break
  sleep 0.05
done

OLD_STATS=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
trap 'sysctl -qw kernel.bpf_stats_enabled='"$OLD_STATS"'; cleanup' EXIT

one_run() { # MODE -> prints "MODE gbps agent_cpu_s events bpf_ns bpf_runs"
  local mode="$1" t0=0 t1=0 ev="-" cpu="-" b0="0 0" b1="0 0"
  if [ "$mode" = with ]; then
    agent_start "$BACKEND" 9931 --port "$PORT"
    sleep 1
    t0=$(cpu_ticks "$AGENT_PID")
    b0=$(bpf_stats)
  fi
  ip netns exec "$CNS" iperf3 -c "$SIP" -p "$PORT" -t "$SECS" -P "$STREAMS" -J >"$TMPD/iperf.json"
  if [ "$mode" = with ]; then
    t1=$(cpu_ticks "$AGENT_PID")
    b1=$(bpf_stats)
    sleep 1.2   # kernel counters reach /metrics once a second
    scrape "$AGENT_METRICS" >"$TMPD/m.txt"
    ev=$(msum "$TMPD/m.txt" tlsrum_ringbuf_events_total)
    cpu=$(awk -v a="$t0" -v b="$t1" -v hz="$HZ" 'BEGIN { printf "%.2f", (b - a) / hz }')
    agent_stop
  fi
  local gbps
  gbps=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.3f" % (d["end"]["sum_received"]["bits_per_second"] / 1e9))' "$TMPD/iperf.json")
  echo "$mode $gbps $cpu $ev $(echo "$b0 $b1" | awk '{ print $3 - $1, $4 - $2 }')"
}

log "== warm-up"
one_run without >/dev/null
log "== $RUNS runs of iperf3 -t $SECS -P $STREAMS on port $PORT, alternating without/with the $BACKEND agent"
: >"$TMPD/results"
for ((i = 1; i <= RUNS; i++)); do
  if [ $((i % 2)) -eq 1 ]; then order="without with"; else order="with without"; fi
  for mode in $order; do
    r=$(one_run "$mode")
    echo "$r" >>"$TMPD/results"
    log "   run $i: $r"
  done
done

without=$(awk '$1 == "without" { print $2 }' "$TMPD/results" | median)
with=$(awk '$1 == "with" { print $2 }' "$TMPD/results" | median)
echo
echo "bulk TCP over the veth: iperf3 -t $SECS -P $STREAMS, port $PORT watched by the $BACKEND agent; $RUNS runs each, alternating"
echo "  $(nproc) cores, $(uname -r)"
printf '  %-8s %s\n' run "Gbit/s (agent CPU s, ring-buffer events, TC program runs and their total run time)"
awk '{ if ($1 == "with") printf "  %-8s %s  (%s s, %s events, %d runs, %.1f ms = %.0f ns/run)\n", $1, $2, $3, $4, $6, $5 / 1e6, $6 ? $5 / $6 : 0; else printf "  %-8s %s\n", $1, $2 }' "$TMPD/results"
echo "  median without: $without Gbit/s"
echo "  median with:    $with Gbit/s"
awk -v a="$without" -v b="$with" 'BEGIN { printf "  with/without = %.4f (%.2f%% lower with the agent)\n", b / a, (1 - b / a) * 100 }'
awk -v secs="$SECS" '$1 == "with" { ns += $5; n++ }
  END { printf "  TC programs: %.2f%% of one CPU on average over the runs with the agent (%.1f ms per %d s run)\n", ns / n / (secs * 1e9) * 100, ns / n / 1e6, secs }' "$TMPD/results"
