#!/usr/bin/env bash
# The release tlsrum (target/release/tlsrum), optimized with a profile of its
# own runs (profile-guided optimization, PGO) when the Rust toolchain has
# llvm-profdata (rustup's llvm-tools component, which install-deps.sh adds):
#   1. an instrumented build in target/pgo-gen (-Cprofile-generate);
#   2. it runs scripts/pgo-train.sh on the bundled captures (pcaps/) and on
#      a capture bench/mkcapture multiplies from them, writing raw profiles
#      to target/pgo/raw;
#   3. llvm-profdata merges them into target/pgo/tlsrum-HASH.profdata;
#   4. the release build reads it (-Cprofile-use).
# Training uses only what the project bundles, never a benchmark's capture.
# The profile is made again only when the instrumented binary changed (a
# source change or a new commit; the commit id is compiled in), and its
# content hash is in its name, so that cargo rebuilds with a new profile.
#
# TLSRUM_PGO=0, or no llvm-profdata: a plain `cargo build --release`.
# Extra arguments go to the final cargo build (e.g. --quiet).
# Note that a plain `cargo build --release` afterwards rebuilds without the
# profile (RUSTFLAGS are part of cargo's fingerprint): build with this.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$HOME/.cargo/bin:$PATH"

say() { echo "build-release: $*" >&2; }

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
plain=""
[ "${TLSRUM_PGO:-1}" = 0 ] && plain="TLSRUM_PGO=0"
[ -z "$plain" ] && [ ! -x "$profdata" ] && plain="no $profdata (rustup component add llvm-tools)"
if [ -n "$plain" ]; then
  say "$plain: building without profile-guided optimization"
  exec cargo build --release --locked -p tlsrum "$@"
fi

data="$root/target/pgo"
gen="$root/target/pgo-gen"
mkdir -p "$data"
say "instrumented build (target/pgo-gen)"
RUSTFLAGS="-Cprofile-generate=$data/raw" \
  cargo build --release --locked --quiet -p tlsrum --target-dir "$gen"
instrumented="$gen/release/tlsrum"
stamp=$(sha256sum "$instrumented" | cut -c1-16)
profile=""
if [ -f "$data/stamp" ] && [ "$(cat "$data/stamp")" = "$stamp" ]; then
  profile=$(ls "$data"/tlsrum-*.profdata 2>/dev/null | head -1)
fi
if [ -z "$profile" ]; then
  cargo build --release --locked --quiet --manifest-path bench/mkcapture/Cargo.toml \
    --target-dir "$root/bench/mkcapture/target"
  # ~360 MB, made again in seconds: not kept.
  train="$data/train.pcap"
  "$root/bench/mkcapture/target/release/mkcapture" --out "$train" --connections 20000 \
    --bulk-ratio 10 --seed 7 pcaps/*.pcapng >/dev/null
  say "training: replaying pcaps/ and $(basename "$train") (scripts/pgo-train.sh)"
  rm -rf "$data/raw" "$data"/tlsrum-*.profdata "$data/stamp"
  bash scripts/pgo-train.sh "$instrumented" "$train"
  rm -f "$train"
  "$profdata" merge -o "$data/merged.profdata" "$data/raw"
  hash=$(sha256sum "$data/merged.profdata" | cut -c1-16)
  profile="$data/tlsrum-$hash.profdata"
  mv "$data/merged.profdata" "$profile"
  echo "$stamp" >"$data/stamp"
fi
say "release build with $(basename "$profile")"
RUSTFLAGS="-Cprofile-use=$profile" cargo build --release --locked -p tlsrum "$@"
