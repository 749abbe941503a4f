#!/usr/bin/env bash
# (b) Handshakes per second the agent keeps up with while dropping nothing.
#
# Replayed: tcpreplay sends bench-data/live-hs.pcap (capture.sh: 100,000 real
# handshakes with 10 bulk records each) from the client's end of the veth at
# several speeds; the agent on the server's end sees every frame at TC
# ingress (eBPF) or the packet tap (pcap). For each speed and backend: the
# handshakes/s tcpreplay achieved, the records the agent wrote against
# `tlsrum replay` of the same file (count and kinds), the kernel's drop
# counters and the analyzer's gap counters from /metrics, the agent's CPU,
# and the whole machine's busy time over the same window (sender, kernel,
# TC programs and agent: issue 19 wants it lower with eBPF than with pcap).
#
# Real stack: wrk -H 'Connection: close' against nginx (TLS 1.3, no
# resumption) in the server namespace: one full handshake per request, with
# the agent watching; records against nginx's own request count.
#
#   [LIVE_BULK=0] bench/live/handshakes.sh [--speeds "0.5 1 2 top"] [--backends "ebpf pcap"]
#                            [--wrk-secs S] [--no-wrk] [--parallel] [--agent-args "ARGS"]
#                            [--no-events]
#
# Backend "none" sends the same traffic with no agent and no TC program: the
# rate tcpreplay itself reaches on this machine, the ceiling of every other
# row.
#
# --agent-args adds arguments to every agent (e.g. "--buffer-size 8M").
# --no-events runs the agent as in production, serving /metrics only: no
# --events file, whose writes are part of the agent's CPU otherwise; its
# records are then compared by kind from tls_handshakes_total.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/capture.sh"

SPEEDS="0.5 1 2 top"
BACKENDS="ebpf pcap"
WRK_SECS=10
DO_WRK=1
PARALLEL=0
AGENT_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --speeds) SPEEDS="$2"; shift 2 ;;
    --backends) BACKENDS="$2"; shift 2 ;;
    --wrk-secs) WRK_SECS="$2"; shift 2 ;;
    --no-wrk) DO_WRK=0; shift ;;
    --parallel) PARALLEL=1; shift ;;
    --agent-args) read -r -a AGENT_ARGS <<<"$2"; shift 2 ;;
    --no-events) AGENT_NO_EVENTS=1; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) log "unknown option $1"; exit 2 ;;
  esac
done

need tcpreplay tcprewrite ip curl python3
[ "$DO_WRK" = 0 ] || need wrk nginx openssl
build
make_capture
if [ "$PARALLEL" = 1 ]; then
  # Two halves sent by two tcpreplay processes at once.
  make_split_captures
  WANT=$(for f in "${LIVE_PARTS[@]}"; do "$TLSRUM" replay --format ndjson "$f"; done | kinds)
else
  LIVE_PARTS=("$LIVE_PCAP")
  WANT=$(replay_summary)
fi
CONNS=${WANT%% *}
log "   replay of the capture: $WANT"
topo_up

# The veth hands frames to the receiving side through the per-CPU backlog;
# at top speed its default 1000 packets can overflow before any hook runs.
OLD_BACKLOG=$(sysctl -n net.core.netdev_max_backlog)
sysctl -qw net.core.netdev_max_backlog=100000
trap 'sysctl -qw net.core.netdev_max_backlog='"$OLD_BACKLOG"'; cleanup' EXIT

DROPS="ringbuf_full payload_truncated flow_map_error load_error pcap_dropped pcap_ifdropped reassembly_gap record_limit"

# agent_kinds: the records of the agent just stopped, by kind (kinds), from
# its --events file, or from the /metrics scraped into $TMPD/m.txt.
agent_kinds() {
  if [ "${AGENT_NO_EVENTS:-0}" = 1 ]; then
    metric_kinds <"$TMPD/m.txt"
  else
    kinds <"$AGENT_EVENTS"
  fi
}

replay_run() { # BACKEND SPEED -> one result line
  local backend="$1" speed="$2" opt
  case "$speed" in
    top) opt=(--topspeed) ;;
    *) opt=(--multiplier="$speed") ;;
  esac
  local c0 c1 s0 s1 m0 m1
  if [ "$backend" = none ]; then
    AGENT_PID=$$   # this shell: ticks read, not reported
  else
    agent_start "$backend" 9941 --all-ports "${AGENT_ARGS[@]}"
    sleep 1
  fi
  c0=$(cpu_ticks "$AGENT_PID")
  s0=$(sys_ticks "$AGENT_PID")
  m0=$(machine_ticks)
  local rx0
  rx0=$(ip -n "$SNS" -s -j link show "$SDEV" | python3 -c 'import json,sys; s=json.load(sys.stdin)[0]["stats64"]["rx"]; print(s["dropped"])')
  local k pids=()
  for k in "${!LIVE_PARTS[@]}"; do
    ip netns exec "$CNS" tcpreplay -K -i "$CDEV" "${opt[@]}" "${LIVE_PARTS[$k]}" >"$TMPD/tcpreplay.$k.out" 2>&1 &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k"; done
  local secs failed
  # The slowest sender's time: all handshakes were sent within it.
  secs=$(cat "$TMPD"/tcpreplay.*.out | sed -nE 's/.*Actual: [0-9]+ packets \([0-9]+ bytes\) sent in ([0-9.]+) seconds.*/\1/p' | sort -g | tail -1)
  failed=$(cat "$TMPD"/tcpreplay.*.out | sed -nE 's/.*Failed packets: +([0-9]+).*/\1/p' | awk '{ s += $1 } END { print s }')
  rm -f "$TMPD"/tcpreplay.*.out
  sleep 2.5   # ring buffer drained, counters exported (1 s ticks)
  # The whole machine's busy time over the same window for every backend:
  # sender, kernel, TC programs (in softirq) and agent.
  m1=$(machine_ticks)
  if [ "$backend" = none ]; then
    awk -v sp="$speed" -v s="$secs" -v n="$CONNS" -v f="$failed" -v m="$((m1 - m0))" -v hz="$HZ" \
      'BEGIN { printf "%-5s %-5s %7.2f s %8.0f hs/s  (no agent, no TC program: the sender alone)  machine busy %.2f s  tcpreplay_failed=%s\n", "none", sp, s, n / s, m / hz, f }'
    return
  fi
  c1=$(cpu_ticks "$AGENT_PID")
  s1=$(sys_ticks "$AGENT_PID")
  scrape "$AGENT_METRICS" >"$TMPD/m.txt"
  local rxd
  rxd=$(ip -n "$SNS" -s -j link show "$SDEV" | python3 -c 'import json,sys; s=json.load(sys.stdin)[0]["stats64"]["rx"]; print(s["dropped"])')
  agent_stop   # SIGINT: flows still open are reported as they stand
  local got drops="" d
  got=$(agent_kinds)
  for d in $DROPS; do drops+=" $d=$(msum "$TMPD/m.txt" tlsrum_drops_total "reason=$d")"; done
  drops+=" kernel_bytes_lost=$(msum "$TMPD/m.txt" tlsrum_kernel_bytes_lost_total)"
  local ok=yes
  [ "$got" = "$WANT" ] || ok=NO
  awk -v b="$backend" -v sp="$speed" -v s="$secs" -v n="$CONNS" -v f="$failed" \
      -v ev="$(msum "$TMPD/m.txt" tlsrum_ringbuf_events_total)" -v got="$got" -v drops="$drops" \
      -v ok="$ok" -v vd="$((rxd - rx0))" -v cpu="$((c1 - c0))" -v sys="$((s1 - s0))" -v m="$((m1 - m0))" -v hz="$HZ" \
      'BEGIN { printf "%-5s %-5s %7.2f s %8.0f hs/s  records: %s  same as replay: %s  agent CPU %.2f s = %.1f us/handshake (%.0f%% of one core; system %.1f us)  machine busy %.2f s  events=%s%s veth_rx_dropped=%s tcpreplay_failed=%s\n", b, sp, s, n / s, got, ok, cpu / hz, cpu / hz / n * 1e6, cpu / hz / s * 100, sys / hz / n * 1e6, m / hz, ev, drops, vd, f }'
}

echo
echo "replayed handshakes: ${LIVE_PARTS[*]} ($CONNS connections, $LIVE_BULK bulk records each; replay: $WANT)"
[ "$PARALLEL" = 1 ] && echo "  two tcpreplay processes at once, one per half"
echo "  $(nproc) cores, $(uname -r); tcpreplay -K -i VETH --multiplier=SPEED (or --topspeed); agent: tlsrum live --all-ports ${AGENT_ARGS[*]}$([ "${AGENT_NO_EVENTS:-0}" = 1 ] && echo " (no --events: records compared from /metrics)")"
for speed in $SPEEDS; do
  for backend in $BACKENDS; do
    replay_run "$backend" "$speed"
  done
done

[ "$DO_WRK" = 1 ] || exit 0

# ---- real stack: wrk against nginx ------------------------------------------------------
W="$TMPD/nginx"
mkdir -p "$W"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$W/key.pem" \
  -out "$W/cert.pem" -days 2 -subj /CN=tlsrum.test 2>/dev/null
cat >"$W/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $W/nginx.pid;
error_log $W/error.log warn;
worker_rlimit_nofile 65536;
events { worker_connections 16384; }
http {
    client_body_temp_path $W/body;
    proxy_temp_path $W/proxy;
    fastcgi_temp_path $W/fastcgi;
    uwsgi_temp_path $W/uwsgi;
    scgi_temp_path $W/scgi;
    log_format n 'reused=\$ssl_session_reused protocol=\$ssl_protocol';
    access_log $W/access.log n buffer=256k;
    server {
        listen $SIP:443 ssl;
        ssl_certificate $W/cert.pem;
        ssl_certificate_key $W/key.pem;
        ssl_protocols TLSv1.3;
        ssl_session_cache off;
        ssl_session_tickets off;
        location / { return 200 "ok\n"; }
    }
}
EOF
echo
echo "real stack: wrk -t1 -c32 -d${WRK_SECS}s -H 'Connection: close' https://$SIP/ against nginx (1 worker, TLS 1.3, ECDSA P-256, no resumption)"
for backend in $BACKENDS; do
  : >"$W/access.log"
  bg nginx ip netns exec "$SNS" nginx -p "$W/" -c "$W/nginx.conf"
  NGINX_PID=$BG_PID
  for _ in $(seq 100); do ip netns exec "$SNS" ss -Hltn "sport = :443" | grep -q . && break; sleep 0.05; done
  agent_start "$backend" 9942 --port 443
  sleep 1
  ip netns exec "$CNS" wrk -t1 -c32 -d"${WRK_SECS}s" -H 'Connection: close' "https://$SIP/" >"$TMPD/wrk.out" 2>&1
  sleep 2.5
  scrape "$AGENT_METRICS" >"$TMPD/m.txt"
  agent_stop
  stop "$NGINX_PID" TERM
  reqs=$(wc -l <"$W/access.log")
  rps=$(sed -nE 's/^Requests\/sec: +([0-9.]+).*/\1/p' "$TMPD/wrk.out")
  got=$(agent_kinds)
  drops=""
  for d in $DROPS; do drops+=" $d=$(msum "$TMPD/m.txt" tlsrum_drops_total "reason=$d")"; done
  drops+=" kernel_bytes_lost=$(msum "$TMPD/m.txt" tlsrum_kernel_bytes_lost_total)"
  echo "  $backend: wrk $rps requests/s; nginx logged $reqs requests ($(grep -c 'reused=r' "$W/access.log" || true) reused); agent records: $got;$drops"
done
