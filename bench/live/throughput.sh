#!/usr/bin/env bash
# (a) Bulk TCP throughput over the veth, without and with `tlsrum live`
# (eBPF backend) attached to the server's end.
#
# One iperf3 transfer runs the whole time, on a port the agent watches (443
# by default), so every packet goes through the TC programs' parse and flow
# lookup: the worst case for a watched port. The agent is started and
# stopped in turn, and the throughput of each window of S seconds is read
# from the server's interface counters: without, with, without, with, ...,
# without. Each window with the agent is compared with the mean of the two
# without it on either side (which cancels drift), and the report gives the
# median of those ratios with a distribution-free 95% interval.
#
# Why one long transfer: on this kind of machine, separate iperf3 runs
# settle at levels up to 30% apart while one run's throughput moves by a
# few percent; comparing neighbouring windows of one run cancels that.
#
# By default iperf3's client and server are pinned to one CPU (--cpu 1): the
# sender, the receiver, the veth's softirq work and the TC programs all run
# there, so whatever the programs cost comes out of the transfer in full
# (the worst case again). The agent process is not pinned.
# kernel.bpf_stats_enabled, which adds two clock reads to every program run,
# is off during those windows and on for two extra windows that time the TC
# programs themselves.
#
#   bench/live/throughput.sh [--windows N] [--secs S] [--port P] [--cpu N|none]
#                            [--backend ebpf|pcap] [--streams N]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

WINDOWS=40
SECS=3
PORT=443
BACKEND=ebpf
STREAMS=1
CPU=1
while [ $# -gt 0 ]; do
  case "$1" in
    --windows|--runs) WINDOWS="$2"; shift 2 ;;
    --secs) SECS="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --cpu) CPU="$2"; shift 2 ;;
    --backend) BACKEND="$2"; shift 2 ;;
    --streams) STREAMS="$2"; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) log "unknown option $1"; exit 2 ;;
  esac
done
PIN=()
[ "$CPU" = none ] || PIN=(-A "$CPU,$CPU")

need iperf3 bpftool ip curl python3
build
topo_up
bg iperf3-server ip netns exec "$SNS" iperf3 -s -p "$PORT"
for _ in $(seq 100); do
  ip netns exec "$SNS" ss -Hltn "sport = :$PORT" | grep -q . && break
  sleep 0.05
done

OLD_STATS=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=0
trap 'sysctl -qw kernel.bpf_stats_enabled='"$OLD_STATS"'; cleanup' EXIT

# Received bytes of the server's end, and the time they were read (ns).
rx_now() {
  local b
  b=$(ip netns exec "$SNS" cat "/sys/class/net/$SDEV/statistics/rx_bytes")
  echo "$b $(date +%s%N)"
}

# window MODE -> "MODE gbps agent_cpu_s events bpf_ns bpf_runs"
window() {
  local mode="$1" t0=0 t1=0 ev="-" cpu="-" b0="0 0" b1="0 0" r0 r1
  if [ "$mode" != without ]; then
    agent_start "$BACKEND" 9931 --port "$PORT"
    sleep 0.5
    t0=$(cpu_ticks "$AGENT_PID")
    [ "$mode" = timed ] && { sysctl -qw kernel.bpf_stats_enabled=1; b0=$(bpf_stats); }
  else
    sleep 0.5
  fi
  r0=$(rx_now)
  sleep "$SECS"
  r1=$(rx_now)
  if [ "$mode" != without ]; then
    t1=$(cpu_ticks "$AGENT_PID")
    if [ "$mode" = timed ]; then
      b1=$(bpf_stats)
      sysctl -qw kernel.bpf_stats_enabled=0
      sleep 1.1   # kernel counters reach /metrics once a second
      scrape "$AGENT_METRICS" >"$TMPD/m.txt"
      ev=$(msum "$TMPD/m.txt" tlsrum_ringbuf_events_total)
    fi
    cpu=$(awk -v a="$t0" -v b="$t1" -v hz="$HZ" 'BEGIN { printf "%.2f", (b - a) / hz }')
    agent_stop
    kill -0 "$IPERF_PID" 2>/dev/null || { log "iperf3 stopped"; exit 1; }
  fi
  echo "$mode $(echo "$r0 $r1" | awk '{ printf "%.3f", ($3 - $1) * 8 / ($4 - $2) }') $cpu $ev $(echo "$b0 $b1" | awk '{ print $3 - $1, $4 - $2 }')"
}

bg iperf3-client ip netns exec "$CNS" iperf3 -c "$SIP" -p "$PORT" -t 86400 -P "$STREAMS" "${PIN[@]}"
IPERF_PID=$BG_PID
log "== iperf3 -P $STREAMS ${PIN[*]} on port $PORT; $WINDOWS windows of $SECS s with the $BACKEND agent, each between two without it"
sleep 2
: >"$TMPD/results"
for ((i = 1; i <= WINDOWS; i++)); do
  for mode in without with; do
    r=$(window "$mode")
    echo "$i $r" >>"$TMPD/results"
    log "   $i: $r"
  done
done
r=$(window without)
echo "$((WINDOWS + 1)) $r" >>"$TMPD/results"
log "   $((WINDOWS + 1)): $r"
log "== 2 windows with the agent and kernel.bpf_stats_enabled=1 (TC program time)"
for i in 1 2; do
  r=$(window timed)
  echo "t$i $r" >>"$TMPD/results"
  log "   $r"
done

without=$(awk '$2 == "without" { print $3 }' "$TMPD/results" | median)
with=$(awk '$2 == "with" { print $3 }' "$TMPD/results" | median)
# Window i with the agent against the mean of windows i and i+1 without.
awk '$2 == "without" { a[$1] = $3 } $2 == "with" { b[$1] = $3 }
  END { for (i in b) if (i in a && (i + 1) in a) print b[i] / ((a[i] + a[i + 1]) / 2) }' "$TMPD/results" | sort -g >"$TMPD/ratios"
paired=$(median <"$TMPD/ratios")
echo
echo "bulk TCP over the veth: one iperf3 -P $STREAMS ${PIN[*]} transfer, port $PORT watched by the $BACKEND agent; $WINDOWS windows of $SECS s with it, $((WINDOWS + 1)) without, in turn"
echo "  $(nproc) cores, $(uname -r)"
printf '  %-5s %-8s %s\n' '#' window "Gbit/s (agent CPU s)"
awk '$2 != "timed" { if ($2 == "with") printf "  %-5s %-8s %s  (%s s)\n", $1, $2, $3, $4; else printf "  %-5s %-8s %s\n", $1, $2, $3 }' "$TMPD/results"
echo "  median without: $without Gbit/s"
echo "  median with:    $with Gbit/s"
# change R: a ratio with/without in words ("1.20% lower", "0.50% higher").
CHANGE='function change(r) { return r <= 1 ? sprintf("%.2f%% lower", (1 - r) * 100) : sprintf("%.2f%% higher", (r - 1) * 100) }'
awk -v a="$without" -v b="$with" "$CHANGE"' BEGIN { printf "  with/without, medians:            %.4f (%s with the agent)\n", b / a, change(b / a) }'
awk -v r="$paired" "$CHANGE"' BEGIN { printf "  with/neighbours without, median:  %.4f (%s with the agent)\n", r, change(r) }'
awk '{ v[NR] = $1 } END { q = int(NR / 4) + 1; printf "  those ratios: min %.3f, quartiles %.3f-%.3f, max %.3f\n", v[1], v[q], v[NR + 1 - q], v[NR] }' "$TMPD/ratios"
# A 95% interval for the median of the ratios that assumes nothing
# of their distribution (order statistics; one outlier pair cannot move it).
awk "$CHANGE"' { v[NR] = $1 } END {
  n = NR; k = int((n - 1.96 * sqrt(n)) / 2); if (k < 1) k = 1
  printf "  95%% interval of that median: %.4f-%.4f (at worst %s with the agent)\n", v[k], v[n + 1 - k], change(v[k])
}' "$TMPD/ratios"
awk -v secs="$SECS" '$2 == "timed" { printf "  TC programs (stats on): %s Gbit/s, %d runs, %.1f ms = %.0f ns/run, %.2f%% of one CPU; %s ring-buffer events\n", $3, $7, $6 / 1e6, $7 ? $6 / $7 : 0, $6 / (secs * 1e9) * 100, $5 }' "$TMPD/results"
