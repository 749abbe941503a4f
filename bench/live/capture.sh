# Sourced by handshakes.sh and cpu.sh: makes bench-data/live-hs.pcap, a
# large capture of real handshakes for tcpreplay onto the veth.
#
# bench/mkcapture multiplies the IPv4 TLS-over-TCP captures of pcaps/ into
# LIVE_CONNECTIONS distinct connections (clients 10.0.0.0/8, server moved
# from 127.0.0.1 to 198.18.0.1, 20 us apart, 10 bulk records each), then
# tcprewrite moves the server to 192.0.2.1 and the clients to 198.18.0.0/15,
# so that every address on the veth is a documentation or benchmarking one.
# The frames keep zeroed MACs: the server namespace's stack drops them
# (not addressed to it) after the TC and packet-tap hooks have seen them.
# shellcheck shell=bash

LIVE_CONNECTIONS="${LIVE_CONNECTIONS:-100000}"
# Bulk records per connection (mkcapture --bulk-ratio); 0: handshakes only.
LIVE_BULK="${LIVE_BULK:-10}"
if [ "$LIVE_BULK" = 10 ]; then LIVE_PCAP="$DATA/live-hs.pcap"; else LIVE_PCAP="$DATA/live-hs-bulk$LIVE_BULK.pcap"; fi
if [ "$LIVE_CONNECTIONS" != 100000 ]; then LIVE_PCAP="${LIVE_PCAP%.pcap}-c$LIVE_CONNECTIONS.pcap"; fi

make_capture() {
  local params inputs
  inputs=$(ls "$ROOT"/pcaps/*-tls1[23]-*.pcapng | grep -v ipv6)
  params="connections=$LIVE_CONNECTIONS bulk=$LIVE_BULK $(stat -c '%n %s %Y' $inputs | md5sum | cut -c1-12)"
  if [ -s "$LIVE_PCAP" ] && [ "$(cat "$LIVE_PCAP.params" 2>/dev/null)" = "$params" ]; then
    log "== reusing $LIVE_PCAP"
    return
  fi
  mkdir -p "$DATA"
  log "== building $LIVE_PCAP ($LIVE_CONNECTIONS connections)"
  cargo build --release --quiet --manifest-path "$ROOT/bench/mkcapture/Cargo.toml"
  # shellcheck disable=SC2086
  "$ROOT/bench/mkcapture/target/release/mkcapture" --out "$TMPD/raw.pcap" \
    --connections "$LIVE_CONNECTIONS" --bulk-ratio "$LIVE_BULK" --tls-only $inputs >&2
  tcprewrite '--pnat=198.18.0.0/16:192.0.2.0/24,10.0.0.0/8:198.18.0.0/15' \
    -i "$TMPD/raw.pcap" -o "$LIVE_PCAP"
  rm -f "$TMPD/raw.pcap"
  echo "$params" >"$LIVE_PCAP.params"
}

# Two halves of LIVE_CONNECTIONS for two tcpreplay processes at once (one
# tcpreplay tops out near 13,000 handshakes/s here): mkcapture seeds 1 and 2,
# clients in 198.18.0.0/16 and 198.19.0.0/16, so no tuple is in both.
# Sets LIVE_PARTS to the two files.
make_split_captures() {
  local params inputs k
  inputs=$(ls "$ROOT"/pcaps/*-tls1[23]-*.pcapng | grep -v ipv6)
  params="split connections=$LIVE_CONNECTIONS bulk=$LIVE_BULK $(stat -c '%n %s %Y' $inputs | md5sum | cut -c1-12)"
  LIVE_PARTS=("$LIVE_PCAP.part0" "$LIVE_PCAP.part1")
  if [ -s "$LIVE_PCAP.part1" ] && [ "$(cat "$LIVE_PCAP.parts.params" 2>/dev/null)" = "$params" ]; then
    log "== reusing ${LIVE_PARTS[*]}"
    return
  fi
  mkdir -p "$DATA"
  cargo build --release --quiet --manifest-path "$ROOT/bench/mkcapture/Cargo.toml"
  for k in 0 1; do
    log "== building ${LIVE_PARTS[$k]} ($((LIVE_CONNECTIONS / 2)) connections)"
    # shellcheck disable=SC2086
    "$ROOT/bench/mkcapture/target/release/mkcapture" --out "$TMPD/raw.pcap" --seed $((k + 1)) \
      --connections $((LIVE_CONNECTIONS / 2)) --bulk-ratio "$LIVE_BULK" --tls-only $inputs >&2
    tcprewrite "--pnat=198.18.0.0/16:192.0.2.0/24,10.0.0.0/8:198.$((18 + k)).0.0/16" \
      -i "$TMPD/raw.pcap" -o "${LIVE_PARTS[$k]}"
    rm -f "$TMPD/raw.pcap"
  done
  echo "$params" >"$LIVE_PCAP.parts.params"
}

# The records `tlsrum replay` makes of the capture, by handshake kind:
# "N full=F resumed=R failed=X ..." (cached next to the capture).
replay_summary() {
  local cache="$LIVE_PCAP.summary"
  if [ ! -s "$cache" ] || [ "$cache" -ot "$LIVE_PCAP" ] || [ "$cache" -ot "$TLSRUM" ]; then
    "$TLSRUM" replay --format ndjson "$LIVE_PCAP" | kinds >"$cache"
  fi
  cat "$cache"
}

# kinds < NDJSON: "N kind=count ..." sorted by kind; a null kind (a capture
# that shows one side of a TLS 1.3 resumption offer) is counted as "null".
kinds() {
  python3 -c '
import collections, json, sys
c = collections.Counter(json.loads(l)["handshake"] or "null" for l in sys.stdin if l.strip())
print(sum(c.values()), " ".join(f"{k}={v}" for k, v in sorted(c.items())))'
}

# metric_kinds < /metrics text: the same summary from the agent's
# tls_handshakes_total (one count per record, by its kind), for an agent
# that writes no --events file.
metric_kinds() {
  python3 -c '
import collections, re, sys
c = collections.Counter()
for l in sys.stdin:
    m = re.match(r"tls_handshakes_total\{(.*)\} (\S+)$", l)
    if m:
        kind = re.search(r"kind=\"([^\"]*)\"", m.group(1))
        c[kind.group(1) if kind else "null"] += int(float(m.group(2)))
print(sum(c.values()), " ".join(f"{k}={v}" for k, v in sorted(c.items()) if v))'
}
