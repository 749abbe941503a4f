#!/usr/bin/env bash
# Apache Traffic Server with working pre-warm pools, for the ATS lab
# (scripts/experiment/atslab.py, agent/tests/proxy_ats.rs): Debian 12's own
# source of trafficserver (the version in bookworm, with Debian's patches)
# plus prewarm-schedule-imm.patch, the upstream fix Debian's 9.2 lacks (its
# binary package aborts whenever a pre-warm pool is configured). Only the
# core is built (no plugins, tools or docs), without debug info, into
# $ATS_PREFIX (default /opt/tlsrum-ats).
#
# Idempotent: a stamp in the prefix names the source version and the hash of
# this script and the patch; a matching stamp means nothing to do. Called by
# scripts/install-deps.sh; about 5-10 minutes on 2 cores the first time.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
prefix=${ATS_PREFIX:-/opt/tlsrum-ats}
version=$(apt-cache show --no-all-versions trafficserver 2>/dev/null | awk '/^Version:/{print $2; exit}')
[ -n "$version" ] || { echo "ats build: no trafficserver in the apt lists (apt-get update?)" >&2; exit 1; }
stamp="trafficserver $version; $(cat "$here/build.sh" "$here/prewarm-schedule-imm.patch" | sha256sum | cut -c1-16)"
if [ -x "$prefix/bin/traffic_server" ] && [ "$(cat "$prefix/.tlsrum-build" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ats build: $prefix is missing or stale and building it needs root" >&2
  exit 1
fi
echo "ats build: Traffic Server $version with the pre-warm fix into $prefix (a few minutes)"

work=$(mktemp -d /var/tmp/tlsrum-ats.XXXXXX)
chmod 755 "$work"   # apt's downloads run as _apt
trap 'echo "ats build: failed; the build tree and logs stay in $work" >&2' ERR
# Debian's source package of the same suites the binaries come from.
cat > "$work/sources.list" <<SRC
deb-src http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian bookworm-updates main
deb-src http://deb.debian.org/debian-security bookworm-security main
SRC
apt_src=(-o "Dir::Etc::sourcelist=$work/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$work/lists")
mkdir -p "$work/lists/partial"
apt-get "${apt_src[@]}" update -qq
(cd "$work" && apt-get "${apt_src[@]}" source -qq "trafficserver=$version" >/dev/null)
src=$(find "$work" -maxdepth 1 -type d -name 'trafficserver-*' | head -1)
cd "$src"
patch -p1 < "$here/prewarm-schedule-imm.patch"
# Debian's patches touch configure.ac (system yaml-cpp).
autoreconf -fi >/dev/null 2>&1
PYTHON=/usr/bin/python3 ./configure -q --prefix="$prefix" --with-user=root --with-group=root \
  --disable-tests --disable-curl --with-yaml-cpp=/usr >"$work/configure.log" 2>&1 \
  || { tail -30 "$work/configure.log" >&2; exit 1; }
# -O1 -g0 after the project's -O3 -g: a lab proxy, built in half the time.
flags=(CFLAGS="-O1 -g0" CXXFLAGS="-O1 -g0")
# The top-level SUBDIRS in order, without plugins, tools, examples, tests.
core=(include src/tscpp/util lib src/tscore iocore proxy mgmt src configs)
for d in "${core[@]}"; do
  make -s -j"$(nproc)" -C "$d" "${flags[@]}" >>"$work/make.log" 2>&1 || { tail -40 "$work/make.log" >&2; exit 1; }
done
rm -rf "$prefix"
for d in "${core[@]}"; do
  make -s -C "$d" "${flags[@]}" install >>"$work/install.log" 2>&1 || { tail -40 "$work/install.log" >&2; exit 1; }
done
"$prefix/bin/traffic_server" --version >/dev/null
echo "$stamp" > "$prefix/.tlsrum-build"
rm -rf "$work"
echo "ats build: done ($("$prefix/bin/traffic_server" --version 2>&1 | head -1))"
