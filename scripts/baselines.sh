#!/usr/bin/env bash
# Rewrites the baselines beside the captures in pcaps/ (zeek btest style):
# the full `tlsrum replay --format ndjson` output of every capture, byte for
# byte, as agent/tests/baseline.rs compares it.
#
#   pcaps/NAME.baseline.ndjson           with --keylog pcaps/NAME.keylog if that exists
#   pcaps/NAME.nokeylog.baseline.ndjson  the same capture without its key log
#                                        (only for captures that have one)
#
# Run it (`make baselines`) after an intended change of the output, then read
# `git diff pcaps/` and commit the baselines with the change, saying in the
# message why each difference is right. The captures and their
# NAME.expected.json labels are never touched here (`make pcaps` makes those).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$HOME/.cargo/bin:$PATH"

# The profile the tests use (`make test`), so the binary is the one they run.
cargo build --profile ci --locked -p tlsrum
bin="$root/target/ci/tlsrum"

shopt -s nullglob
captures=(pcaps/*.pcap pcaps/*.pcapng)
if [ ${#captures[@]} -eq 0 ]; then
  echo "baselines: no captures in pcaps/" >&2
  exit 1
fi

# Baselines of captures that no longer exist go too.
rm -f pcaps/*.baseline.ndjson

written=0
for cap in "${captures[@]}"; do
  name="${cap%.*}"
  # Relative paths from the repository's root, as the test passes them.
  if [ -f "$name.keylog" ]; then
    "$bin" replay --format ndjson --keylog "$name.keylog" "$cap" >"$name.baseline.ndjson"
    "$bin" replay --format ndjson "$cap" >"$name.nokeylog.baseline.ndjson"
    written=$((written + 2))
  else
    "$bin" replay --format ndjson "$cap" >"$name.baseline.ndjson"
    written=$((written + 1))
  fi
done
echo "baselines: wrote $written files for ${#captures[@]} captures; review them with: git diff --stat pcaps/ && git diff pcaps/"
