#!/usr/bin/env bash
# The one place that installs what tlsrum needs on Debian 12. Idempotent: it
# installs only what is missing, so every Makefile target can call it.
set -euo pipefail

APT_PACKAGES=(
  # build
  build-essential pkg-config libpcap-dev libssl-dev clang llvm libbpf-dev linux-libc-dev
  # real TLS peers and capture tools for the capture generator and tests
  openssl gnutls-bin nginx-light curl tshark tcpdump tcpreplay iproute2
  # a load balancer sending the PROXY protocol (agent/tests/proxy_protocol.rs),
  # and terminating TLS with TLS to an origin (agent/tests/proxy_haproxy.rs)
  haproxy
  # building Apache Traffic Server from Debian's source with the pre-warm fix
  # (scripts/ats/build.sh, for agent/tests/proxy_ats.rs and atslab.py)
  dpkg-dev autoconf automake libtool libpcre3-dev libcap-dev libhwloc-dev libunwind-dev
  libyaml-cpp-dev zlib1g-dev libncurses-dev
  # the ways in (agent/tests/ways_in.rs): NFLOG rules (nft), compressed
  # captures, GRE and ERSPAN mirror sessions from Open vSwitch's userspace
  # datapath (this kernel has no GRE), offloads off on its veths (ethtool)
  nftables zstd gzip openvswitch-switch ethtool
  # load generators for bench/live/
  iperf3 wrk bpftool
  python3 python3-pip python3-venv
  # headless browser for the HTML report test
  chromium fonts-dejavu-core
  # real Prometheus for the dashboard test (agent/tests/dashboards.rs); the
  # deploy/ checks there use promtool (in prometheus), systemd-analyze,
  # strace and PyYAML
  prometheus systemd strace python3-yaml
  # ping for the delay line's precision checks (tools/delayline, scripts/experiment)
  iputils-ping
  # GNU time: peak memory in the benchmarks (bench/run.sh, bench/open_handshakes.sh)
  time
  # exact instruction and allocation counts (bench/instructions.sh)
  valgrind
  # nDPI's ndpiReader: the other passive analyzer bench/run.sh compares with
  libndpi-bin
  # shipping it: the container image (buildah from scratch, run by podman:
  # agent/tests/image.rs; runc where crun refuses hybrid cgroups) and the
  # clean Debian 12 the package is installed on (mmdebstrap:
  # scripts/deb-check.sh)
  podman buildah runc mmdebstrap
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing Debian packages: ${missing[*]} (run as root, or install them)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # wireshark-common asks whether non-root users may capture; answer no.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # The Debian nginx package starts a server on port 80, the prometheus
  # package one on port 9090, and
  # openvswitch-switch its daemons; tlsrum's
  # tests run their own.
  for svc in nginx prometheus openvswitch-switch; do
    if command -v systemctl >/dev/null && systemctl is-active -q "$svc" 2>/dev/null; then
      systemctl stop "$svc" || true
    fi
  done
fi

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "install-deps: cargo not found; install Rust with rustup (https://rustup.rs)" >&2
    exit 1
  fi
fi
# llvm-profdata of the toolchain's own LLVM, for the profile-guided release
# build (scripts/build-release.sh; without it the build is a plain one).
# (rustup does nothing when it is there.)
if command -v rustup >/dev/null 2>&1; then
  rustup component add llvm-tools 2>/dev/null ||
    echo "install-deps: could not add rustup's llvm-tools; release builds will not be profile-guided" >&2
fi
# Python packages (aioquic for the QUIC captures), through pip.
req="$(cd "$(dirname "$0")" && pwd)/requirements.txt"
if ! python3 -c "import aioquic" >/dev/null 2>&1; then
  python3 -m pip install --quiet -r "$req" 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages -r "$req"
fi
# Old aioquic releases that speak the IETF drafts (aioquic 1.x speaks v1
# and v2 only), each in a venv of its own so that none replaces the aioquic
# above: agent/tests/quic_versions.rs. 0.9.25 (drafts 29-32) has a wheel;
# 0.8.8 (drafts 25-27) builds from source against libssl and needs a
# cryptography from before its OpenSSL bindings were trimmed.
aioquic_venv() { # dir, aioquic version, extra requirements...
  local dir=$1 version=$2
  shift 2
  if ! "$dir/bin/python" -c "import aioquic; assert aioquic.__version__ == '$version'" >/dev/null 2>&1; then
    python3 -m venv "$dir"
    "$dir/bin/python" -m pip install --quiet "aioquic==$version" "$@"
  fi
}
aioquic_venv /opt/tlsrum-aioquic-0.9 0.9.25
aioquic_venv /opt/tlsrum-aioquic-0.8 0.8.8 "cryptography==3.3.2"
# matplotlib for `make experiment`'s charts (scripts/experiment/requirements.txt).
req_exp="$(cd "$(dirname "$0")" && pwd)/experiment/requirements.txt"
if ! python3 -c "import matplotlib" >/dev/null 2>&1; then
  python3 -m pip install --quiet -r "$req_exp" 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages -r "$req_exp"
fi

# The Debian package's builder (`make deb`), pinned.
if ! cargo deb --version 2>/dev/null | grep -q '^3\.8\.0'; then
  cargo install cargo-deb --version 3.8.0 --locked --quiet
fi
# helm and the offline Kubernetes validator (tools/k8s-validate) for the
# chart's checks (agent/tests/deploy_k8s.rs), through the Go module proxy,
# into $(go env GOPATH)/bin.
gobin="$(go env GOPATH)/bin"
if ! "$gobin/helm" version --short 2>/dev/null | grep -q '^v3\.17'; then
  go install helm.sh/helm/v3/cmd/helm@v3.17.3
fi
(cd "$(dirname "$0")/../tools/k8s-validate" && go install .)

# Node.js for the browser test (Debian's if none is installed), then its
# npm packages from the lock file.
if ! command -v node >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm
fi
here="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -d "$here/tests/html/node_modules/playwright-core" ]; then
  (cd "$here/tests/html" && npm ci --no-audit --no-fund --silent)
fi
# Grafana's dashboard schema (TypeScript types) and the compiler that checks
# dashboards/*.json against it.
if [ ! -d "$here/tests/dashboards/node_modules/@grafana/schema" ] || [ ! -d "$here/tests/dashboards/node_modules/typescript" ]; then
  (cd "$here/tests/dashboards" && npm ci --no-audit --no-fund --silent)
fi

# Apache Traffic Server with working pre-warm pools (Debian's binary package
# aborts with one): built once into /opt/tlsrum-ats, a few minutes.
bash "$here/scripts/ats/build.sh"

echo "install-deps: all dependencies present"
# parsezeeklogs (an independent Zeek log reader) and communityid (Corelight's
# reference Community ID) in a venv of their own: agent/tests/zeek_write.rs.
if ! /opt/tlsrum-zeek/bin/python -c "import parsezeeklogs, communityid" >/dev/null 2>&1; then
  python3 -m venv /opt/tlsrum-zeek
  /opt/tlsrum-zeek/bin/python -m pip install --quiet "parsezeeklogs==3.0.1" "communityid==1.5.0"
fi
