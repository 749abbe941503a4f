#!/usr/bin/env python3
"""HAProxy lab (agent/tests/proxy_haproxy.rs): three network namespaces,
client -> proxy -> origin, joined by two veth pairs. HAProxy (HTTP mode) in
the proxy namespace terminates the clients' TLS and speaks TLS to an nginx
origin; each request is its own client connection and its own backend
connection (`option httpclose`, `http-reuse never`), so that HAProxy's
per-request log line names exactly one inbound and one outbound handshake:

    cport=<client's source port> fe_resumed=<ssl_fc_is_resumed> fe_proto=...
    bport=<backend connection's source port> be_resumed=<ssl_bc_is_resumed> ...

That log is the ground truth; tlsrum's records are only collected here, the
test compares them. In the proxy namespace: `tlsrum live` with the eBPF
backend and with the pcap backend (both interfaces, NDJSON events), and a
tcpdump capture of both interfaces for `tlsrum replay --local`.

Traffic, to produce full and resumed handshakes on both sides:
- inbound: curl fetching several URLs per command (its first connection is
  full, the rest resume its session), curl with --no-sessionid (all full),
  openssl s_client with -sess_out then -sess_in; TLS 1.2 and 1.3;
- outbound: three backends to the same origin, chosen by path: `reuse`
  (HAProxy's default: it keeps the origin's last session and resumes it;
  TLS 1.3), `tls12` (the same, TLS 1.2) and `fresh` (`no-ssl-reuse`: every
  backend handshake full).

    haproxylab.py --out doc.json [--workdir DIR]

Python 3 standard library only. Needs root (namespaces, capture, eBPF),
haproxy, nginx, curl, openssl, tcpdump, ip. TLSRUM names the binary.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wanlab import HOST, LabError, Procs, binary, make_cert, wait_for

CLIENT_IP = "198.18.1.1"        # RFC 2544 benchmarking range: exists only in the lab
PROXY_FRONT_IP = "198.18.1.2"   # the proxy's address toward the clients
PROXY_BACK_IP = "198.18.2.1"    # the proxy's address toward the origin
ORIGIN_IP = "198.18.2.2"
PORT = 443
FRONT_IF, BACK_IF = "cli0", "org0"   # the proxy's interfaces
METRICS = {"ebpf": "127.0.0.1:9871", "pcap": "127.0.0.1:9872"}
# Path prefix -> backend (see HAPROXY_CONF).
BACKENDS = ("reuse", "tls12", "fresh")

HAPROXY_CONF = """global
    log stdout format raw local0
    nbthread 1
    ssl-server-verify none

defaults
    mode http
    log global
    option httpclose
    http-reuse never
    timeout connect 5s
    timeout client 10s
    timeout server 10s
    log-format "cport=%cp fe_resumed=%[ssl_fc_is_resumed] fe_proto=%[ssl_fc_protocol] bsrc=%bi bport=%bp be_resumed=%[ssl_bc_is_resumed] be_proto=%[ssl_bc_protocol] backend=%b status=%ST path=%HP"

frontend fe
    bind {front}:{port} ssl crt {pem} alpn http/1.1 ssl-min-ver TLSv1.2
    use_backend tls12 if {{ path_beg /tls12/ }}
    use_backend fresh if {{ path_beg /fresh/ }}
    default_backend reuse

backend reuse
    server o {origin}:{port} ssl verify none sni str({host}) ssl-min-ver TLSv1.3

backend tls12
    server o {origin}:{port} ssl verify none sni str({host}) ssl-max-ver TLSv1.2

backend fresh
    server o {origin}:{port} ssl verify none sni str({host}) no-ssl-reuse
"""

NGINX_CONF = """daemon off;
master_process on;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log info;
events {{ worker_connections 256; }}
http {{
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_timeout 0;
    log_format origin 'port=$remote_port reused=$ssl_session_reused protocol=$ssl_protocol';
    access_log {tmp}/access.log origin;
    server {{
        listen {ip}:{port} ssl;
        server_name {host};
        ssl_certificate {crt};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:SSL:4m;
        ssl_session_tickets on;
        location / {{ default_type text/plain; return 200 "ok\\n"; }}
    }}
}}
"""


def log(msg):
    print(f"[haproxylab] {msg}", file=sys.stderr, flush=True)


def sh(cmd, check=True):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise LabError(f"{' '.join(map(str, cmd))} failed: {p.stderr.strip()}")
    return p.stdout


def check_capabilities():
    missing = []
    if os.geteuid() != 0:
        missing.append("root")
    for tool in ["ip", "tcpdump", "nginx", "curl", "openssl", "haproxy"]:
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            missing.append(tool)
    if missing:
        raise LabError("missing: " + ", ".join(missing))


class ProxyLab:
    """The three namespaces, HAProxy, nginx, tlsrum live (both backends) and
    a capture in the proxy namespace."""

    def __init__(self, workdir, live_backends=("ebpf", "pcap")):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        tag = f"hpx{os.getpid() % 100000}"
        self.ns = {"client": f"{tag}-c", "proxy": f"{tag}-p", "origin": f"{tag}-o"}
        self.tag = tag
        self.live_backends = list(live_backends)
        self.procs = Procs()
        self.live = {}
        self.clients = []   # what each client command did

    def __enter__(self):
        try:
            self._up()
        except BaseException:
            self._down()
            raise
        return self

    def __exit__(self, *exc):
        self._down()
        return False

    def nsexec(self, side, cmd):
        return ["ip", "netns", "exec", self.ns[side]] + [str(c) for c in cmd]

    # ---- setup / teardown ------------------------------------------------
    def _up(self):
        check_capabilities()
        self.tlsrum = binary("tlsrum", "TLSRUM")
        for ns in self.ns.values():
            if Path(f"/run/netns/{ns}").exists():
                raise LabError(f"namespace {ns} exists (left over? ip netns del {ns})")
        for ns in self.ns.values():
            sh(["ip", "netns", "add", ns])
            sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        # Each pair is created in the root namespace under unique names, then
        # moved and renamed.
        for a_side, a_if, a_ip, b_side, b_if, b_ip, n in (
                ("client", "eth0", CLIENT_IP, "proxy", FRONT_IF, PROXY_FRONT_IP, 1),
                ("proxy", BACK_IF, PROXY_BACK_IP, "origin", "eth0", ORIGIN_IP, 2)):
            ta, tb = f"{self.tag}a{n}", f"{self.tag}b{n}"
            sh(["ip", "link", "add", ta, "type", "veth", "peer", "name", tb])
            for tmp, side, ifname, ip in ((ta, a_side, a_if, a_ip), (tb, b_side, b_if, b_ip)):
                ns = self.ns[side]
                sh(["ip", "link", "set", tmp, "netns", ns])
                sh(["ip", "-n", ns, "link", "set", tmp, "name", ifname])
                sh(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", ifname])
                sh(["ip", "-n", ns, "link", "set", ifname, "up"])
        key, crt = make_cert(self.dir)
        self.crt = crt
        pem = self.dir / "haproxy.pem"
        pem.write_text(crt.read_text() + key.read_text())
        # The capture first, so that it holds every connection.
        self.pcap = self.dir / "proxy.pcap"
        errf = self.dir / "tcpdump.log"
        p = self.procs.spawn(self.nsexec("proxy", ["tcpdump", "-i", "any", "-n", "-s", "0", "-U", "-B", "32768",
                                                   "--immediate-mode", "--time-stamp-precision=nano",
                                                   "-w", self.pcap, f"tcp port {PORT}"]), out=errf)
        wait_for(lambda: "listening on" in errf.read_text(errors="replace"), "tcpdump", proc=p)
        self.tcpdump = p
        for backend in self.live_backends:
            events = self.dir / f"live-{backend}.ndjson"
            proc = self.procs.spawn(self.nsexec("proxy", [
                self.tlsrum, "live", "--backend", backend, "--iface", FRONT_IF, "--iface", BACK_IF,
                "--port", PORT, "--record-at", "close", "--events", events, "--metrics", METRICS[backend], "--idle-timeout", "2"]),
                out=self.dir / f"live-{backend}.log")
            wait_for(lambda: self._scrape(backend) is not None, f"tlsrum live ({backend}) /metrics", proc=proc)
            self.live[backend] = (proc, events)
        self._start_nginx(key, crt)
        self._start_haproxy(pem)
        time.sleep(0.3)

    def _start_nginx(self, key, crt):
        tmp = self.dir / "nginx"
        tmp.mkdir(exist_ok=True)
        conf = tmp / "nginx.conf"
        conf.write_text(NGINX_CONF.format(tmp=tmp, ip=ORIGIN_IP, port=PORT, host=HOST, crt=crt, key=key))
        self.nginx = self.procs.spawn(self.nsexec("origin", ["nginx", "-c", conf, "-p", tmp]),
                                      out=tmp / "stdout.log")
        self._wait_listening("origin", ORIGIN_IP, self.nginx, "nginx")

    def _start_haproxy(self, pem):
        conf = self.dir / "haproxy.cfg"
        conf.write_text(HAPROXY_CONF.format(front=PROXY_FRONT_IP, port=PORT, pem=pem, origin=ORIGIN_IP,
                                            host=HOST))
        sh(["haproxy", "-c", "-f", conf])
        self.haproxy_log = self.dir / "haproxy.log"
        self.haproxy = self.procs.spawn(self.nsexec("proxy", ["haproxy", "-db", "-f", conf]),
                                        out=self.haproxy_log, err=self.dir / "haproxy.err")
        self._wait_listening("proxy", PROXY_FRONT_IP, self.haproxy, "haproxy")

    def _wait_listening(self, side, ip, proc, what):
        def listening():
            return f"{ip}:{PORT} " in sh(self.nsexec(side, ["ss", "-Hltn"]), check=False)
        wait_for(listening, f"{what} listening", proc=proc)

    def _scrape(self, backend):
        r = subprocess.run(self.nsexec("proxy", ["curl", "-s", "--max-time", "2",
                                                 f"http://{METRICS[backend]}/metrics"]),
                           capture_output=True, text=True)
        return r.stdout if r.returncode == 0 and r.stdout else None

    def _down(self):
        # Clients are done: give the last FINs a moment, then stop HAProxy and
        # nginx (their logs are complete), then live (past its idle timeout,
        # so every flow is finished and written), then the capture.
        if getattr(self, "tcpdump", None) is not None:
            time.sleep(0.5)
        for name in ("haproxy", "nginx"):
            p = getattr(self, name, None)
            if p is not None:
                self.procs.stop(p, signal.SIGUSR1 if name == "haproxy" else signal.SIGQUIT)
        if self.live:
            time.sleep(2.5)
        for proc, _ in self.live.values():
            self.procs.stop(proc, signal.SIGINT)
        if getattr(self, "tcpdump", None) is not None:
            self.procs.stop(self.tcpdump, signal.SIGINT)
        self.procs.stop_all()
        for ns in self.ns.values():
            if Path(f"/run/netns/{ns}").exists():
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    # ---- clients ---------------------------------------------------------
    def _run(self, cmd, stdin="", timeout=30):
        p = subprocess.run(self.nsexec("client", cmd), input=stdin, capture_output=True, text=True,
                           timeout=timeout)
        if p.returncode != 0:
            raise LabError(f"{' '.join(map(str, cmd))} failed ({p.returncode}): {p.stderr[-1500:]}")
        return p.stdout

    def curl(self, tls, paths, sessions=True):
        """One curl process fetching `paths` in turn: one connection each
        (HAProxy closes after every response); with sessions, each after
        the first offers the session curl kept."""
        args = ["curl", "-sS", "--http1.1", "--cacert", self.crt, "--resolve", f"{HOST}:{PORT}:{PROXY_FRONT_IP}",
                "-w", "%{local_port} %{http_code}\\n"]
        args += ["--tlsv1.2", "--tls-max", "1.2"] if tls == "1.2" else ["--tlsv1.3"]
        if not sessions:
            args.append("--no-sessionid")
        for path in paths:
            args += [f"https://{HOST}:{PORT}{path}", "-o", "/dev/null"]
        rows = [line.split() for line in self._run(args).splitlines() if line.strip()]
        if len(rows) != len(paths) or any(code != "200" for _, code in rows):
            raise LabError(f"curl: {rows}")
        self.clients.append({"client": "curl", "tls": tls, "sessions": sessions, "paths": list(paths),
                             "ports": [int(p) for p, _ in rows]})

    def s_client(self, tls, paths):
        """openssl s_client: the first path in a new session saved with
        -sess_out, the rest offering it with -sess_in; s_client's own
        New/Reused line is kept beside HAProxy's."""
        sess = self.dir / f"sess-{len(self.clients)}.pem"
        base = ["openssl", "s_client", "-connect", f"{PROXY_FRONT_IP}:{PORT}", "-servername", HOST,
                "-CAfile", self.crt, "-alpn", "http/1.1", "-ign_eof", "-tls1_2" if tls == "1.2" else "-tls1_3"]
        said = []
        for i, path in enumerate(paths):
            cmd = base + (["-sess_out", sess] if i == 0 else ["-sess_in", sess])
            req = f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n"
            out = self._run(cmd, stdin=req)
            m = re.search(r"^(New|Reused), TLSv1\.[23]", out, re.M)
            if not m or "200 OK" not in out:
                raise LabError(f"s_client {path}: no response:\n{out[-1500:]}")
            said.append(m.group(1))
        self.clients.append({"client": "s_client", "tls": tls, "paths": list(paths), "s_client_says": said})

    def traffic(self):
        mix = ["/reuse/a", "/tls12/b", "/fresh/c", "/reuse/d", "/tls12/e", "/fresh/f"]
        for tls in ("1.2", "1.3"):
            self.curl(tls, mix)
            self.curl(tls, mix[:3], sessions=False)
            self.s_client(tls, ["/reuse/g", "/tls12/h", "/fresh/i"])

    # ---- results ---------------------------------------------------------
    def haproxy_lines(self):
        lines = []
        for line in self.haproxy_log.read_text(errors="replace").splitlines():
            if not line.startswith("cport="):
                continue  # HAProxy's own start-up and shutdown messages
            lines.append(dict(t.split("=", 1) for t in line.split()))
        return lines

    def origin_lines(self):
        f = self.dir / "nginx" / "access.log"
        return [dict(t.split("=", 1) for t in line.split()) for line in f.read_text().splitlines()] \
            if f.exists() else []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--live", default="ebpf,pcap", help="tlsrum live backends to run (comma-separated, or none)")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="haproxylab-"))
    backends = [b for b in args.live.split(",") if b and b != "none"]
    started = time.time()
    try:
        lab = ProxyLab(work, backends)
        with lab:
            lab.traffic()
    except LabError as e:
        log(f"lab error: {e} (logs in {work})")
        return 2
    doc = {
        "client_ip": CLIENT_IP, "proxy_front_ip": PROXY_FRONT_IP, "proxy_back_ip": PROXY_BACK_IP,
        "origin_ip": ORIGIN_IP, "port": PORT,
        "haproxy": lab.haproxy_lines(), "origin": lab.origin_lines(), "clients": lab.clients,
        "capture": str(lab.pcap),
        "live": {b: str(events) for b, (_, events) in lab.live.items()},
        "seconds": round(time.time() - started, 1),
    }
    args.out.write_text(json.dumps(doc, indent=1))
    log(f"{len(doc['haproxy'])} requests in {doc['seconds']} s; {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
