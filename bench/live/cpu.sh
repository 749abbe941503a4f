#!/usr/bin/env bash
# (c) Agent CPU for the same handshake-plus-bulk traffic, eBPF versus pcap
# backend, side by side in one run (alternating).
#
# Traffic, identical for both: tcpreplay of bench-data/live-hs.pcap (capture.sh:
# 100,000 real handshakes with 10 bulk records each) at --multiplier SPEED
# (default: --topspeed) from the client's end of the veth, and at the same
# time an iperf3 bulk transfer (-b RATE for S seconds) from the client
# namespace to a server on port 443 in the server namespace. The same packets
# and bytes each run, whatever rate the machine reaches. The agent (tlsrum live --all-ports) watches the server's end.
#
# Per run: the agent process's CPU (user+system from /proc/PID/stat), the
# in-kernel run time of the tlsrum TC programs (kernel.bpf_stats_enabled,
# eBPF only; that cost is paid in softirq by whoever sends the packets, not by
# the agent), the whole machine's busy CPU, and the records against replay.
#
#   bench/live/cpu.sh [--runs N] [--speed X|top] [--bulk RATE] [--secs S] [--agent-args "ARGS"]
#
# --agent-args adds arguments to every agent (e.g. "--buffer-size 128M").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/capture.sh"

RUNS=3
SPEED=top
BULK=5G
SECS=15
AGENT_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --speed) SPEED="$2"; shift 2 ;;
    --bulk) BULK="$2"; shift 2 ;;
    --secs) SECS="$2"; shift 2 ;;
    --agent-args) read -r -a AGENT_ARGS <<<"$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) log "unknown option $1"; exit 2 ;;
  esac
done

need tcpreplay tcprewrite iperf3 bpftool ip curl python3
build
make_capture
WANT=$(replay_summary)
CONNS=${WANT%% *}
topo_up
OLD_BACKLOG=$(sysctl -n net.core.netdev_max_backlog)
OLD_STATS=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw net.core.netdev_max_backlog=100000
sysctl -qw kernel.bpf_stats_enabled=1
trap 'sysctl -qw net.core.netdev_max_backlog='"$OLD_BACKLOG"' kernel.bpf_stats_enabled='"$OLD_STATS"'; cleanup' EXIT

bg iperf3-server ip netns exec "$SNS" iperf3 -s -p 443
for _ in $(seq 100); do ip netns exec "$SNS" ss -Hltn "sport = :443" | grep -q . && break; sleep 0.05; done
case "$SPEED" in
  top) REPLAY_OPT=(--topspeed) ;;
  *) REPLAY_OPT=(--multiplier="$SPEED") ;;
esac

one_run() { # BACKEND -> result line
  local backend="$1"
  agent_start "$backend" 9951 --all-ports "${AGENT_ARGS[@]}"
  sleep 1
  local a0 m0 b0 a1 m1 b1 t0 t1
  a0=$(cpu_ticks "$AGENT_PID"); m0=$(machine_ticks); b0=$(bpf_runtime_ns); t0=$(date +%s.%N)
  ip netns exec "$CNS" iperf3 -c "$SIP" -p 443 -t "$SECS" -b "$BULK" -J >"$TMPD/iperf.json" &
  local ip=$!
  ip netns exec "$CNS" tcpreplay -K -i "$CDEV" "${REPLAY_OPT[@]}" "$LIVE_PCAP" >"$TMPD/tcpreplay.out" 2>&1
  wait "$ip"
  sleep 2.5   # the agent catches up; counters reach /metrics
  a1=$(cpu_ticks "$AGENT_PID"); m1=$(machine_ticks); b1=$(bpf_runtime_ns); t1=$(date +%s.%N)
  scrape "$AGENT_METRICS" >"$TMPD/m.txt"
  agent_stop
  local got secs gbps
  got=$(kinds <"$AGENT_EVENTS")
  secs=$(sed -nE 's/.*Actual: [0-9]+ packets \([0-9]+ bytes\) sent in ([0-9.]+) seconds.*/\1/p' "$TMPD/tcpreplay.out")
  gbps=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f" % (d["end"]["sum_received"]["bits_per_second"] / 1e9))' "$TMPD/iperf.json")
  awk -v b="$backend" -v a="$((a1 - a0))" -v m="$((m1 - m0))" -v bpf="$((b1 - b0))" -v hz="$HZ" \
      -v w="$(awk -v x="$t0" -v y="$t1" 'BEGIN { print y - x }')" -v s="$secs" -v n="$CONNS" -v g="$gbps" \
      -v ev="$(msum "$TMPD/m.txt" tlsrum_ringbuf_events_total)" -v rf="$(msum "$TMPD/m.txt" tlsrum_drops_total reason=ringbuf_full)" \
      -v pd="$(msum "$TMPD/m.txt" tlsrum_drops_total reason=pcap_dropped)" -v pi="$(msum "$TMPD/m.txt" tlsrum_drops_total reason=pcap_ifdropped)" \
      -v got="$got" -v ok="$([ "$got" = "$WANT" ] && echo yes || echo NO)" \
      'BEGIN { printf "%-5s agent_cpu_s=%.2f bpf_prog_s=%.3f machine_busy_s=%.2f window_s=%.1f  %.0f hs/s + %s Gbit/s bulk  records: %s (same as replay: %s) ringbuf_events=%s ringbuf_full=%s pcap_dropped=%s pcap_ifdropped=%s\n", b, a / hz, bpf / 1e9, m / hz, w, n / s, g, got, ok, ev, rf, pd, pi }'
}

: >"$TMPD/results"
log "== $RUNS runs per backend, alternating; tcpreplay ${REPLAY_OPT[*]} + iperf3 -b $BULK for ${SECS}s"
for ((i = 1; i <= RUNS; i++)); do
  if [ $((i % 2)) -eq 1 ]; then order="ebpf pcap"; else order="pcap ebpf"; fi
  for backend in $order; do
    r=$(one_run "$backend")
    echo "$r" >>"$TMPD/results"
    log "   run $i: $r"
  done
done

e=$(awk '$1 == "ebpf" { sub("agent_cpu_s=", "", $2); print $2 }' "$TMPD/results" | median)
p=$(awk '$1 == "pcap" { sub("agent_cpu_s=", "", $2); print $2 }' "$TMPD/results" | median)
echo
echo "agent CPU, handshakes + bulk: tcpreplay ${REPLAY_OPT[*]} of $LIVE_PCAP ($CONNS connections) + iperf3 -b $BULK on port 443, ${SECS}s"
echo "  $(nproc) cores, $(uname -r); agent: tlsrum live --all-ports ${AGENT_ARGS[*]}; $RUNS runs per backend, alternating"
sed 's/^/  /' "$TMPD/results"
echo "  median agent CPU: eBPF $e s, pcap $p s"
awk -v e="$e" -v p="$p" 'BEGIN { if (e > 0) printf "  pcap/eBPF = %.1fx\n", p / e; else print "  pcap/eBPF = inf (eBPF agent used no measurable CPU)" }'
