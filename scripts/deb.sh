#!/usr/bin/env bash
# The Debian package of an already built tlsrum (`make deb` builds the
# release one; agent/tests/package.rs the `ci` one):
#   scripts/deb.sh [PROFILE]   -> target/PROFILE/tlsrum_VERSION-1_ARCH.deb
#                                 (prints its path) and its -dbgsym .ddeb
# The man pages and completions come from the binary itself (generated from
# its command line by clap), into target/PROFILE/gen/, where the asset list
# in agent/Cargo.toml ([package.metadata.deb]) picks them up.
set -euo pipefail
profile=${1:-release}
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PATH="$HOME/.cargo/bin:$PATH"
out=target/$profile
bin=$out/tlsrum
[ -x "$bin" ] || { echo "deb.sh: no $bin (cargo build --profile $profile -p tlsrum)" >&2; exit 1; }
gen=$out/gen
rm -rf "$gen"
"$bin" manpages "$gen/man"
gzip -9n "$gen"/man/*.1 # Debian policy: compressed man pages
mkdir -p "$gen/completions"
"$bin" completions bash >"$gen/completions/tlsrum.bash"
"$bin" completions zsh >"$gen/completions/_tlsrum"
"$bin" completions fish >"$gen/completions/tlsrum.fish"
# cargo-deb reads target/release/... in the asset list as the chosen
# profile's. The debug symbols (the release profile keeps them for
# profiling) go into tlsrum-dbgsym_*.ddeb beside it, as Debian does.
cargo deb -p tlsrum --profile "$profile" --no-build --locked --dbgsym -o "$out/" | grep '\.deb$'
