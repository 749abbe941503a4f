#!/usr/bin/env bash
# Set up and tear down a delay-line lab: namespaces NAME-c (client, 198.18.0.1)
# and NAME-s (server, 198.18.0.2) joined by `delayline`.
#
#   tools/delayline/lab.sh up   [--name N] [delayline options, e.g. --rtt 100 --jitter 1]
#   tools/delayline/lab.sh down [--name N]
#   tools/delayline/lab.sh run  [--name N] [delayline options] -- COMMAND...
#        (up, run COMMAND in the root namespace, down -- also when COMMAND fails)
#
# Then e.g. `ip netns exec N-s nginx ...` and `ip netns exec N-c curl https://198.18.0.2/`.
# `down` ends the processes still running inside the two namespaces (they were
# started there for the lab), stops the delay line (which removes the TUN
# devices and deletes the namespaces) and removes anything left behind.
# 198.18.0.0/15 is the benchmarking range (RFC 2544): it exists only inside the lab.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
name=dlab
cmd="${1:-}"
[ $# -gt 0 ] && shift
if [ "${1:-}" = "--name" ]; then name="$2"; shift 2; fi
state="/run/delayline-$name"

bin="${DELAYLINE:-$root/target/release/delayline}"
if [ ! -x "$bin" ]; then
  (cd "$root" && cargo build --release --locked -p delayline >&2)
fi

down() {
  for ns in "$name-c" "$name-s"; do
    if [ -e "/run/netns/$ns" ]; then
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null || true; done
    fi
  done
  if [ -f "$state/pid" ]; then
    pid="$(cat "$state/pid")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  for ns in "$name-c" "$name-s"; do
    if [ -e "/run/netns/$ns" ]; then
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  [ -f "$state/stats.json" ] && cat "$state/stats.json" >&2
  rm -rf "$state"
}

up() {
  if [ -e "/run/netns/$name-c" ] || [ -e "/run/netns/$name-s" ]; then
    echo "lab.sh: lab $name exists; run: $0 down --name $name" >&2
    exit 1
  fi
  mkdir -p "$state"
  "$bin" --ns-a "$name-c" --ns-b "$name-s" --create-ns --stats "$state/stats.json" "$@" \
    >"$state/out" 2>"$state/err" &
  echo $! >"$state/pid"
  for _ in $(seq 100); do
    if grep -q ready "$state/out" 2>/dev/null; then
      echo "lab.sh: $name-c (198.18.0.1) <-> $name-s (198.18.0.2) via delayline $*" >&2
      return 0
    fi
    if ! kill -0 "$(cat "$state/pid")" 2>/dev/null; then break; fi
    sleep 0.05
  done
  cat "$state/err" >&2
  down
  echo "lab.sh: delayline did not come up" >&2
  exit 1
}

case "$cmd" in
  up) up "$@" ;;
  down) down ;;
  run)
    opts=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
    [ "${1:-}" = "--" ] && shift
    [ $# -gt 0 ] || { echo "lab.sh run: no command after --" >&2; exit 2; }
    trap down EXIT
    trap 'exit 130' INT TERM
    up "${opts[@]}"
    "$@"
    ;;
  *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
