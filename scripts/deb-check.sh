#!/usr/bin/env bash
# Installs a tlsrum .deb on a clean Debian 12 and checks what it installed,
# then removes and purges it (root; agent/tests/package.rs runs it):
#   scripts/deb-check.sh DEB CAPTURE OUTDIR
# "Clean" is a minimal bookworm root file system (mmdebstrap --variant=minbase
# from deb.debian.org), built once into target/debian12/minbase (minutes)
# and used read-only under a throw-away overlay, so every run starts from
# the same untouched system. apt's lists and downloads are kept in
# target/debian12/ between runs. Into OUTDIR go what the Rust test compares:
# replay.ndjson (CAPTURE replayed by the installed binary), version.txt,
# man/ (the installed pages, uncompressed), complete.txt (bash completing
# "tlsrum li").
set -euo pipefail
fail() { echo "deb-check: $*" >&2; exit 1; }
[ $# -eq 3 ] || fail "usage: deb-check.sh DEB CAPTURE OUTDIR"
deb=$(realpath "$1") capture=$(realpath "$2") out=$(realpath "$3")
repo="$(cd "$(dirname "$0")/.." && pwd)"
cache=$repo/target/debian12
base=$cache/minbase
mirror=http://deb.debian.org/debian

if [ ! -x "$base/usr/bin/apt-get" ]; then
  echo "deb-check: building a minimal Debian 12 in $base (once; takes minutes)" >&2
  rm -rf "$base" "$base.tmp"
  mkdir -p "$cache"
  mmdebstrap --quiet --variant=minbase bookworm "$base.tmp" "$mirror"
  mv "$base.tmp" "$base"
fi

# The rest in a mount namespace of its own: the overlay and binds vanish
# with it, whatever happens.
if [ -z "${DEB_CHECK_NS:-}" ]; then
  DEB_CHECK_NS=1 exec unshare --mount --propagation private --fork "$0" "$@"
fi
work=$(mktemp -d /tmp/tlsrum-ship-deb.XXXXXX)
trap 'umount -R "$work/root" 2>/dev/null; rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root" "$work/upper" "$work/work" "$cache/lists/partial" "$cache/archives/partial"
mount -t overlay overlay -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/work" "$root"
mount --bind "$cache/lists" "$root/var/lib/apt/lists"
mount --bind "$cache/archives" "$root/var/cache/apt/archives"
mount -t proc proc "$root/proc"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$deb" "$root/tmp/tlsrum.deb"
cp "$capture" "$root/tmp/capture"
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }

[ ! -e "$root/usr/lib/x86_64-linux-gnu/libpcap.so.0.8" ] || fail "the clean system already has libpcap"
# Alone, dpkg must refuse for want of the libraries the package declares.
if in_root dpkg -i /tmp/tlsrum.deb >"$work/dpkg.txt" 2>&1; then
  fail "dpkg -i succeeded without libpcap0.8: Depends is missing it"
fi
grep -q "depends on libpcap0.8" "$work/dpkg.txt" || { cat "$work/dpkg.txt" >&2; fail "dpkg -i failed, but not for libpcap0.8"; }
# apt fetches them from the mirror and finishes the installation.
in_root apt-get update -qq
in_root apt-get -f install -y -qq --no-install-recommends >"$work/apt.txt" 2>&1 || { cat "$work/apt.txt" >&2; fail "apt-get -f install"; }
[ "$(in_root dpkg-query -W -f='${Status}' tlsrum)" = "install ok installed" ] || fail "tlsrum not installed"

in_root tlsrum --version >"$out/version.txt"
in_root tlsrum replay --format ndjson /tmp/capture >"$out/replay.ndjson"
mkdir -p "$out/man"
for page in "$root"/usr/share/man/man1/tlsrum*.1.gz; do
  zcat "$page" >"$out/man/$(basename "$page" .gz)"
done
[ -s "$root/usr/share/zsh/vendor-completions/_tlsrum" ] || fail "no zsh completion"
[ -s "$root/usr/share/fish/vendor_completions.d/tlsrum.fish" ] || fail "no fish completion"
in_root bash -c '. /usr/share/bash-completion/completions/tlsrum
  COMP_WORDS=(tlsrum li); COMP_CWORD=1; _tlsrum tlsrum li tlsrum; echo "${COMPREPLY[@]}"' >"$out/complete.txt"

# The unit as installed; systemd finds the bare ExecStart name in /usr/bin.
unit=$root/usr/lib/systemd/system/tlsrum.service
[ -f "$unit" ] || fail "no systemd unit"
[ -x "$root/usr/bin/tlsrum" ] || fail "no /usr/bin/tlsrum for ExecStart"
sed "s|^ExecStart=tlsrum |ExecStart=$root/usr/bin/tlsrum |" "$unit" >"$work/tlsrum.service"
systemd-analyze verify "$work/tlsrum.service" 2>"$work/verify.txt" || true
[ ! -s "$work/verify.txt" ] || { cat "$work/verify.txt" >&2; fail "systemd-analyze verify complained"; }

# /etc/default/tlsrum is a conffile: an edit survives removal, purge deletes it.
in_root dpkg-query -W -f='${Conffiles}\n' tlsrum | grep -q '^ /etc/default/tlsrum ' || fail "/etc/default/tlsrum is not a conffile"
echo "TLSRUM_IFACE=ens5" >>"$root/etc/default/tlsrum"
in_root dpkg -r tlsrum >/dev/null
[ ! -e "$root/usr/bin/tlsrum" ] && [ ! -e "$unit" ] || fail "dpkg -r left the binary or the unit"
grep -q '^TLSRUM_IFACE=ens5$' "$root/etc/default/tlsrum" || fail "dpkg -r removed the edited /etc/default/tlsrum"
in_root dpkg -P tlsrum >/dev/null
[ ! -e "$root/etc/default/tlsrum" ] || fail "dpkg -P left /etc/default/tlsrum"
echo "deb-check: installed, checked, removed and purged on a clean Debian 12"
