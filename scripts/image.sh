#!/usr/bin/env bash
# The container image, built without pulling a base image: `buildah from
# scratch` plus the tlsrum binary and exactly the shared libraries it links
# (as ldd resolves them here), nothing else: no shell, no package manager.
#   scripts/image.sh [BINARY [NAME]]   (root; `make image`)
# defaults: target/release/tlsrum, localhost/tlsrum:VERSION (also :latest).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin=$(realpath "${1:-$root/target/release/tlsrum}")
version=$("$bin" --version | awk '{print $2}')
name=${2:-localhost/tlsrum:$version}

ctr=$(buildah from scratch)
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
mnt=$(buildah mount "$ctr")
install -D -m 0755 "$bin" "$mnt/usr/bin/tlsrum"
# Without the debug information the release profile keeps for profiling.
objcopy --strip-debug "$mnt/usr/bin/tlsrum"
# Each library at the path the dynamic loader looks for it, the loader too.
libs=$(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
[ -n "$libs" ] || { echo "image.sh: ldd found no libraries in $bin" >&2; exit 1; }
for lib in $libs; do
  install -D -m "$(stat -c %a "$(realpath "$lib")")" "$(realpath "$lib")" "$mnt$lib"
done
buildah umount "$ctr" >/dev/null
buildah config \
  --entrypoint '["/usr/bin/tlsrum"]' --cmd '["--help"]' \
  --port 9853 \
  --label org.opencontainers.image.title=tlsrum \
  --label org.opencontainers.image.version="$version" \
  --label org.opencontainers.image.description="Passive TLS handshake analyzer (run: see docs/running.md, Containers)" \
  "$ctr"
buildah commit --quiet --rm "$ctr" "$name" >/dev/null
trap - EXIT
echo "$name"
