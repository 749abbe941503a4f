#!/usr/bin/env python3
"""Apache Traffic Server's pre-warmed TLS tunnels (issue 16; the ATS summit
talk "Pre-warming TLS Tunnel"), with the real Traffic Server.

    user ns (curl) --veth-- proxy ns (traffic_server, tlsrum live eBPF)
        --veth-- router ns --tools/delayline, RTT-- origin ns (nginx)

ATS terminates the client's TLS and opens its own TLS 1.2 connection to the
origin (a `partial_blind_route` in sni.yaml, the route kind the pre-warm
pool serves besides forward_route). nginx keeps no sessions (wanlab's
"none" server: no cache, no tickets), so every outbound handshake is full.
Each mode (pre-warming off, then on) runs in a fresh lab: curl makes N
sequential requests, each a new connection, with a pause between so the
pool refills. Ground truth is the programs' own: curl's -w timings, ATS's
statistics (`traffic_ctl metric match`), nginx's access log (one line per
origin connection, with ATS's source port). tlsrum live (eBPF) watches both
of the proxy's interfaces; a tcpdump capture there is replayed with
`--local` for the role.

The Traffic Server is Debian 12's source of trafficserver built with the
upstream pre-warm fix Debian's binary package lacks (scripts/ats/build.sh,
run by scripts/install-deps.sh into /opt/tlsrum-ats; ATS_PREFIX names
another build). The package's traffic_server aborts whenever a pre-warm pool
is configured (`Fatal: P_UnixEThread.h:209: failed assertion this ==
this_ethread()`); should a build still do so, the mode is recorded with the
crash (the Fatal line and the crash log's frames) as its error, and the exit
status is 2.

Python 3 standard library only; needs root. Writes one JSON document:

    python3 atslab.py --out ats.json --workdir /tmp/ats [--n 20] [--rtt 100]
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wanlab  # noqa: E402
from wanlab import LabError, log, wait_for  # noqa: E402

ORIGIN_PORT = wanlab.PORTS["none"]   # no session cache, no tickets: full handshakes
PROXY_PORT = 4443
HOST = wanlab.HOST
ROUTER_IP = wanlab.CLIENT_IP         # the delay line's near end
ORIGIN_IP = wanlab.SERVER_IP
USER_IP, PROXY_IN_IP = "198.18.1.1", "198.18.1.2"     # client <-> proxy
PROXY_OUT_IP, ROUTER_IN_IP = "198.18.2.1", "198.18.2.2"  # proxy <-> router
METRICS = "127.0.0.1:9854"
# Longer than a pooled connection waits here: a flow idle this long is
# finished, and a pooled connection used later would count as never used.
LIVE_IDLE_TIMEOUT = 60
CURL_W = "%{local_port} %{time_connect} %{time_appconnect} %{time_starttransfer} %{time_total} %{http_code}\\n"

RECORDS = """CONFIG proxy.config.admin.user_id STRING #-1
CONFIG proxy.config.http.server_ports STRING {port}:ssl
CONFIG proxy.config.http.cache.http INT 0
CONFIG proxy.config.http.connect_ports STRING {oport}
CONFIG proxy.config.exec_thread.autoconfig INT 0
CONFIG proxy.config.exec_thread.limit INT 1
CONFIG proxy.config.accept_threads INT 1
CONFIG proxy.config.task_threads INT 1
CONFIG proxy.config.ssl.server.cert.path STRING {dir}
CONFIG proxy.config.ssl.server.private_key.path STRING {dir}
CONFIG proxy.config.ssl.client.verify.server.policy STRING DISABLED
CONFIG proxy.config.ssl.client.TLSv1_3 INT 0
CONFIG proxy.config.ssl.origin_session_cache INT 0
CONFIG proxy.config.ssl.origin_session_cache.size INT 0
CONFIG proxy.config.tunnel.prewarm INT {prewarm}
CONFIG proxy.config.tunnel.prewarm.event_period INT 1000
CONFIG proxy.config.log.logging_enabled INT 0
# Statistics reach traffic_ctl within a second (default: up to 10 s late).
CONFIG proxy.config.raw_stat_sync_interval_ms INT 500
CONFIG proxy.config.remote_sync_interval_ms INT 500
CONFIG proxy.config.diags.debug.enabled INT {debug}
CONFIG proxy.config.diags.debug.tags STRING ssl_sni|prewarm|sni|ssl|http_tunnel|tunnel
CONFIG proxy.config.hostdb.host_file.path STRING {dir}/hosts
CONFIG proxy.config.dns.resolv_conf STRING {dir}/resolv.conf
CONFIG proxy.config.body_factory.template_sets_dir STRING {dir}/body_factory
"""

# The talk's sni.yaml (the seed), pointed at the lab's origin.
SNI = """sni:
- fqdn: {host}
  partial_blind_route: {origin}:{oport}
  # ATS answers the client's ALPN itself (http/1.1 from curl): a request
  # takes a pooled connection only from the pool of its negotiated protocol,
  # and without this line the only pool is the one for "no ALPN".
  tunnel_alpn: [http/1.1]
  tunnel_prewarm: {prewarm}
  tunnel_prewarm_connect_timeout: 10
  tunnel_prewarm_inactive_timeout: 150
  tunnel_prewarm_min: {pmin}
  tunnel_prewarm_max: {pmax}
"""


# The Traffic Server built by scripts/ats/build.sh (its --prefix: bin/, lib/,
# libexec/trafficserver/, etc/trafficserver/ with the default configuration).
ATS_PREFIX = Path(os.environ.get("ATS_PREFIX") or "/opt/tlsrum-ats")
ATS_ETC = ATS_PREFIX / "etc" / "trafficserver"


def ats_tool(name):
    return str(ATS_PREFIX / "bin" / name)


def ats_layout():
    p = ATS_PREFIX
    return {"exec_prefix": p, "bindir": p / "bin", "sbindir": p / "bin", "includedir": p / "include",
            "libdir": p / "lib", "libexecdir": p / "libexec" / "trafficserver"}


class AtsLab(wanlab.Lab):
    """wanlab's delay line and nginx (router ns = its client end, origin ns =
    its server end), plus the proxy and user namespaces, ATS, tlsrum live."""

    def __init__(self, rtt_ms, workdir, prewarm, name=None, pool_min=2, pool_max=10):
        super().__init__(rtt_ms, workdir, name=name, live=False)
        self.prewarm = prewarm
        self.pool = (pool_min, pool_max)
        self.ns_p, self.ns_u = f"{self.name}-p", f"{self.name}-u"
        self.stats = {}

    def _up(self):
        for tool in [ats_tool("traffic_manager"), ats_tool("traffic_server"), ats_tool("traffic_ctl"), "ethtool"]:
            if not os.access(tool, os.X_OK) and subprocess.run(["which", tool], capture_output=True).returncode:
                raise LabError(f"missing: {tool} (scripts/install-deps.sh builds it: scripts/ats/build.sh)")
        for ns in (self.ns_p, self.ns_u):
            if Path(f"/run/netns/{ns}").exists():
                raise LabError(f"namespace {ns} exists (left over? ip netns del {ns})")
        super()._up()   # delay line router<->origin, captures on it, nginx
        self._wire()
        self.pcap = self.dir / "proxy.pcap"
        errf = self.dir / "tcpdump-proxy.log"
        self.proxy_cap = self.procs.spawn(self.nsexec(self.ns_p, [
            "tcpdump", "-i", "any", "-n", "-s", "0", "-U", "-B", "32768", "--immediate-mode",
            "--time-stamp-precision=nano", "-w", self.pcap, "tcp"]), out=errf)
        wait_for(lambda: "listening on" in errf.read_text(errors="replace"), "tcpdump in the proxy ns",
                 proc=self.proxy_cap)
        tlsrum = wanlab.binary("tlsrum", "TLSRUM")
        self.live_proc = self.procs.spawn(self.nsexec(self.ns_p, [
            tlsrum, "live", "--backend", "ebpf", "--iface", "dn0", "--iface", "up0",
            "--port", PROXY_PORT, "--port", ORIGIN_PORT, "--events", self.dir / "live.ndjson",
            "--metrics", METRICS, "--idle-timeout", str(LIVE_IDLE_TIMEOUT)]), out=self.dir / "live.log")
        wait_for(lambda: self._scrape_proxy() is not None, "tlsrum live /metrics", proc=self.live_proc)
        self._start_ats()

    def _wire(self):
        def ip(ns, *args):
            subprocess.run(self.nsexec(ns, ["ip"] + list(args)), check=True, capture_output=True)
        for ns in (self.ns_p, self.ns_u):
            subprocess.run(["ip", "netns", "add", ns], check=True)
            ip(ns, "link", "set", "lo", "up")
        # user <-> proxy, proxy <-> router: veths (Ethernet, for the eBPF backend)
        for a_ns, a_if, a_ip, b_ns, b_if, b_ip in (
                (self.ns_u, "cl0", USER_IP, self.ns_p, "dn0", PROXY_IN_IP),
                (self.ns_p, "up0", PROXY_OUT_IP, self.ns_c, "rt0", ROUTER_IN_IP)):
            subprocess.run(["ip", "link", "add", f"{self.name}a", "netns", a_ns, "type", "veth", "peer",
                            f"{self.name}b", "netns", b_ns], check=True)
            ip(a_ns, "link", "set", f"{self.name}a", "name", a_if)
            ip(b_ns, "link", "set", f"{self.name}b", "name", b_if)
            for ns, ifc, addr in ((a_ns, a_if, a_ip), (b_ns, b_if, b_ip)):
                ip(ns, "addr", "add", f"{addr}/24", "dev", ifc)
                ip(ns, "link", "set", ifc, "up")
                # One TCP segment per packet, as on a real wire.
                subprocess.run(self.nsexec(ns, ["ethtool", "-K", ifc, "tso", "off", "gso", "off", "gro", "off"]),
                               capture_output=True)
        ip(self.ns_p, "route", "add", "198.18.0.0/24", "via", ROUTER_IN_IP)
        ip(self.ns_s, "route", "add", "198.18.2.0/24", "dev", wanlab.IFACE)
        for key in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"):
            subprocess.run(self.nsexec(self.ns_c, ["sysctl", "-qw", key]), check=True)

    def _start_ats(self):
        d = self.dir / "ats"
        for sub in ("etc", "run", "log", "cache", "var"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        etc = d / "etc"
        (d / "runroot.yaml").write_text("".join(f"{k}: {v}\n" for k, v in {
            "prefix": d, **ats_layout(),
            "sysconfdir": etc, "datadir": d / "cache",
            "localstatedir": d / "var", "runtimedir": d / "run", "logdir": d / "log",
            "cachedir": d / "cache"}.items()))
        subprocess.run(["cp", "-r", ATS_ETC / "body_factory", etc], check=True)
        for f in ("cache.config", "hosting.config", "ip_allow.yaml", "logging.yaml", "parent.config",
                  "plugin.config", "remap.config", "socks.config", "splitdns.config", "strategies.yaml",
                  "volume.config"):
            subprocess.run(["cp", ATS_ETC / f, etc], check=True)
        subprocess.run(["cp", self.crt, etc / "cert.pem"], check=True)
        subprocess.run(["cp", self.key, etc / "key.pem"], check=True)
        (etc / "storage.config").write_text(f"{d / 'cache'} 64M\n")
        (etc / "hosts").write_text("")
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\n")
        (etc / "records.config").write_text(RECORDS.format(port=PROXY_PORT, dir=etc, oport=ORIGIN_PORT, prewarm=int(self.prewarm),
                                                           debug=int(os.environ.get("ATS_DEBUG", "0"))))
        (etc / "ssl_multicert.config").write_text("dest_ip=* ssl_cert_name=cert.pem ssl_key_name=key.pem\n")
        (etc / "sni.yaml").write_text(SNI.format(host=HOST, origin=ORIGIN_IP, oport=ORIGIN_PORT,
                                                 prewarm="true" if self.prewarm else "false",
                                                 pmin=self.pool[0], pmax=self.pool[1]))
        self.runroot = d / "runroot.yaml"
        env_rr = ["env", f"TS_RUNROOT={self.runroot}"]
        self.ats = self.procs.spawn(self.nsexec(self.ns_p, env_rr + [ats_tool("traffic_manager"), "--nosyslog"]),
                                    out=d / "manager.out")

        def listening():
            out = subprocess.run(self.nsexec(self.ns_p, ["ss", "-Hltn"]), capture_output=True, text=True).stdout
            return f":{PROXY_PORT} " in out
        try:
            wait_for(listening, "traffic_server listening", timeout=30, proc=self.ats)
            wait_for(lambda: self.ats_metrics("proxy.process.ssl") is not None, "traffic_ctl metric", timeout=20,
                     proc=self.ats)
        except LabError as e:
            raise LabError(self._ats_crash() or str(e)) from e
        # A traffic_server that aborts right after listening is relaunched
        # by traffic_manager: a crash log means this instance is not sound.
        time.sleep(1.0)
        if self._ats_crash():
            raise LabError(self._ats_crash())

    def _ats_crash(self):
        """traffic_server's own report of why it died, if it did: the Fatal
        line traffic_manager captured and the crash log's first frames."""
        log_dir = self.dir / "ats" / "log"
        crashes = sorted(log_dir.glob("crash-*.log"))
        if not crashes:
            return None
        out = (self.dir / "ats" / "manager.out").read_text(errors="replace")
        fatal = [line for line in out.splitlines() if line.startswith("Fatal:")]
        # The aborting thread's frames come first in the crash log.
        frames = [" ".join(line.split()[2:]) for line in crashes[-1].read_text(errors="replace").splitlines()
                  if re.match(r"^\d+\s+0x", line)][3:9]
        return (f"traffic_server aborted {len(crashes)} times (relaunched by traffic_manager): "
                f"{fatal[-1] if fatal else 'no Fatal line'}; crash log {crashes[-1]}: " + " | ".join(frames))

    def ats_metrics(self, prefix):
        """ATS's statistics whose names match `prefix` (traffic_ctl metric match)."""
        p = subprocess.run(self.nsexec(self.ns_p, ["env", f"TS_RUNROOT={self.runroot}", ats_tool("traffic_ctl"),
                                                   "metric", "match", prefix]),
                           capture_output=True, text=True, timeout=10)
        if p.returncode != 0 or not p.stdout.strip():
            return None
        out = {}
        for line in p.stdout.splitlines():
            k, _, v = line.partition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v.strip()
        return out

    def snapshot(self, tag, settle=0.0):
        """ATS's TLS, tunnel and pre-warm statistics (not the per-cipher ones).
        With settle, read until two reads `settle` s apart agree: ATS
        publishes its counters to traffic_ctl every few seconds."""
        def read():
            got = {**(self.ats_metrics("prewarm") or {}), **(self.ats_metrics("proxy.process.ssl") or {}),
                   **(self.ats_metrics("proxy.process.tunnel") or {}),
                   **(self.ats_metrics("proxy.process.http.total_client_connections") or {})}
            return {k: v for k, v in got.items() if ".cipher." not in k}
        now = read()
        end = time.time() + 20
        while settle and time.time() < end:
            time.sleep(settle)
            nxt = read()
            if nxt == now:
                break
            now = nxt
        self.stats[tag] = now

    def _scrape_proxy(self):
        r = subprocess.run(self.nsexec(self.ns_p, ["curl", "-s", "--max-time", "2", f"http://{METRICS}/metrics"]),
                           capture_output=True, text=True)
        return r.stdout if r.returncode == 0 and r.stdout else None

    def _down(self):
        if getattr(self, "live_proc", None) is not None and self.live_proc.poll() is None:
            time.sleep(self.rtt / 1000 * 2 + 1.0)
            self.metrics_text = self._scrape_proxy()
            self.procs.stop(self.live_proc, signal.SIGINT)
        if getattr(self, "proxy_cap", None) is not None:
            self.procs.stop(self.proxy_cap, signal.SIGINT)
        if getattr(self, "ats", None) is not None:
            self.procs.stop(self.ats, signal.SIGTERM)
        super()._down()
        for ns in (self.ns_p, self.ns_u):
            if Path(f"/run/netns/{ns}").exists():
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def requests(self, n, pause):
        """n sequential curl processes through the proxy, each a new TLS 1.2
        connection, `pause` seconds apart."""
        for i in range(n):
            out = self._run(self.ns_u, [
                "curl", "-sS", "--http1.1", "--tlsv1.2", "--tls-max", "1.2", "--cacert", self.crt,
                "--resolve", f"{HOST}:{PROXY_PORT}:{PROXY_IN_IP}", "-w", CURL_W, "-o", "/dev/null",
                f"https://{HOST}:{PROXY_PORT}/"], timeout=30)
            lport, tc, ta, ts, tt, code = out.split()
            if code != "200":
                raise LabError(f"curl through ATS got HTTP {code}")
            self.conns.append({"index": i, "local_port": int(lport), "time_connect": float(tc),
                               "time_appconnect": float(ta), "time_starttransfer": float(ts),
                               "time_total": float(tt), "started": self._last_started})
            time.sleep(pause)

    def results(self):
        tlsrum = wanlab.binary("tlsrum", "TLSRUM")
        live = [json.loads(x) for x in (self.dir / "live.ndjson").read_text().splitlines() if x.strip()]
        rep = subprocess.run([tlsrum, "replay", "--format", "ndjson", "--local", PROXY_IN_IP,
                              "--local", PROXY_OUT_IP, self.pcap], capture_output=True, text=True)
        if rep.returncode != 0:
            raise LabError(f"tlsrum replay proxy.pcap failed: {rep.stderr}")
        replay = [json.loads(x) for x in rep.stdout.splitlines() if x.strip()]
        nginx = []
        for line in (self.dir / "nginx" / "access.log").read_text().splitlines():
            nginx.append(dict(t.split("=", 1) for t in line.split()))
        return {"prewarm": self.prewarm, "rtt": self.rtt, "pool": list(self.pool), "curl": self.conns,
                "ats": self.stats, "nginx": nginx, "live": live, "replay": replay,
                "proxy_addrs": {"inbound": PROXY_IN_IP, "outbound": PROXY_OUT_IP},
                "metrics": self.metrics_text}


def run_mode(prewarm, args, tag):
    wd = Path(args.workdir) / tag
    with AtsLab(args.rtt, wd, prewarm, name=f"ats{os.getpid() % 10000}{tag[0]}",
                pool_min=args.pool_min, pool_max=args.pool_max) as lab:
        # Let the pool fill (or, without pre-warming, nothing happen) first.
        time.sleep(args.settle)
        lab.snapshot("before")
        lab.requests(args.n, args.pause)
        time.sleep(args.rtt / 1000 * 2 + 0.5)
        lab.snapshot("after", settle=3.0)
    return lab.results()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--rtt", type=float, default=100)
    ap.add_argument("--n", type=int, default=20, help="requests per mode")
    ap.add_argument("--pause", type=float, default=0.5, help="seconds between requests")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds before the first request")
    ap.add_argument("--pool-min", type=int, default=2)
    ap.add_argument("--pool-max", type=int, default=10)
    ap.add_argument("--modes", default="off,on", help="pre-warming modes to run, in order")
    args = ap.parse_args()
    t0 = time.time()
    modes = []
    for tag in args.modes.split(","):
        prewarm = {"off": False, "on": True}[tag]
        log(f"ATS pre-warming {tag}: {args.n} requests at {args.rtt} ms RTT")
        try:
            modes.append(run_mode(prewarm, args, tag))
        except LabError as e:
            # Recorded, not hidden: the document says why the mode has no data.
            log(f"lab error, pre-warming {tag}: {e}")
            modes.append({"prewarm": prewarm, "rtt": args.rtt, "error": str(e)})
    doc = {"rtt": args.rtt, "n": args.n, "pause": args.pause, "seconds": round(time.time() - t0, 1),
           "traffic_server": subprocess.run([ats_tool("traffic_server"), "--version"], capture_output=True,
                                            text=True).stdout.strip().splitlines()[-1:],
           "modes": modes}
    Path(args.out).write_text(json.dumps(doc, indent=1))
    log(f"wrote {args.out} in {doc['seconds']} s")
    if any("error" in m for m in modes):
        sys.exit(2)


if __name__ == "__main__":
    main()
