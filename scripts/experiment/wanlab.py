#!/usr/bin/env python3
"""A wide-area TLS lab: nginx in one network namespace, clients in another,
joined by tools/delayline at a chosen RTT, with captures at both ends and
tlsrum watching. Shared by the accuracy tests (accuracy.py, run by
agent/tests/wan_accuracy.rs) and the experiments (run.py, `make experiment`).

Python 3 standard library only. Needs root (namespaces, TUN, capture).

    lab = Lab(rtt_ms=100, workdir=Path("/tmp/x"))
    with lab:
        lab.curl(port=PORTS["none"], tls="1.2", n=3, scenario="...")
    lab.results()   # connections joined with tlsrum's records at both ends
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
HOST = "tlsrum.test"
CLIENT_IP = "198.18.0.1"   # RFC 2544 benchmarking range: exists only in the lab
SERVER_IP = "198.18.0.2"
IFACE = "dl0"

# One nginx, one server block per session-reuse policy.
PORTS = {
    "none": 4401,     # ssl_session_cache none: IDs handed out, never stored; no tickets
    "cache": 4402,    # shared session cache, no tickets
    "tickets": 4403,  # tickets, no cache
    "early": 4404,    # tickets + ssl_early_data on
    "early-warmup": 4405,  # the same, for clients to warm up on
}
POLICY = {
    "none": ("none", "off", "off"),
    "cache": ("shared:SSL:4m", "off", "off"),
    "tickets": ("off", "on", "off"),
    "early": ("off", "on", "on"),
    "early-warmup": ("off", "on", "on"),
}
METRICS_ADDR = "127.0.0.1:9853"

HTTP_REQ = f"GET / HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"


class LabError(Exception):
    """The lab could not be set up or a peer misbehaved: not a tlsrum result."""


def log(msg):
    print(f"[wanlab] {msg}", file=sys.stderr, flush=True)


def binary(name, env):
    p = Path(os.environ.get(env, ROOT / "target" / "release" / name))
    if not p.exists():
        raise LabError(f"{p} not found (cargo build --release -p {name}, or set {env})")
    return p


def check_capabilities():
    """What the lab needs; raises LabError naming what is missing."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root")
    if not Path("/dev/net/tun").exists():
        missing.append("/dev/net/tun")
    for tool in ["ip", "tcpdump", "nginx", "curl", "openssl", "chrt"]:
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            missing.append(tool)
    if missing:
        raise LabError("missing: " + ", ".join(missing))


class Procs:
    """Children in their own process groups, stopped by id."""

    def __init__(self):
        self.live = []

    def spawn(self, cmd, out=None, err=None, stdin=subprocess.DEVNULL):
        outf = open(out, "wb") if out else subprocess.DEVNULL
        errf = open(err, "wb") if err else subprocess.STDOUT if out else subprocess.DEVNULL
        try:
            p = subprocess.Popen([str(c) for c in cmd], stdin=stdin, stdout=outf, stderr=errf,
                                 start_new_session=True)
        finally:
            for f in (outf, errf):
                if hasattr(f, "close"):
                    f.close()
        p.cmdline = " ".join(map(str, cmd))
        self.live.append(p)
        return p

    def stop(self, p, sig=signal.SIGTERM, timeout=10.0):
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(5)
        if p in self.live:
            self.live.remove(p)

    def stop_all(self):
        for p in reversed(list(self.live)):
            self.stop(p)


def wait_for(pred, what, timeout=15.0, proc=None):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        if proc is not None and proc.poll() is not None:
            raise LabError(f"{what}: process exited ({proc.returncode}): {proc.cmdline}")
        time.sleep(0.02)
    raise LabError(f"timed out waiting for {what}")


def make_cert(d):
    key, crt = d / "key.pem", d / "cert.pem"
    if not crt.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-keyout", key, "-out", crt, "-days", "30", "-subj", f"/CN={HOST}",
                        "-addext", f"subjectAltName=DNS:{HOST}"], check=True, capture_output=True)
    return key, crt


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
    log_format wan 'port=$remote_port policy=$server_port reused=$ssl_session_reused protocol=$ssl_protocol early=$ssl_early_data status=$status';
    access_log {tmp}/access.log wan;
{servers}
}}
"""

NGINX_SERVER = """    server {{
        listen {ip}:{port} ssl;
        server_name {host};
        ssl_certificate {crt};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache {cache};
        ssl_session_tickets {tickets};
        ssl_early_data {early};
        location / {{ default_type text/plain; return 200 "ok\\n"; }}
    }}
"""


# SCHED_FIFO priority of the clients whose clocks are labels: below the
# delay lines' 50 (tools/delayline), so they never delay a release.
RT_PRIORITY = "40"


class KeepAwake:
    """A busy loop at SCHED_IDLE on every CPU while a lab runs, so that no
    virtual CPU halts. On this Firecracker VM a halted vCPU wakes 0.5-3.5 ms
    late (a realtime thread's 1 ms sleeps: p99 0.86-1.0 ms, 65-74 wake-ups
    in 4 s later than 0.5 ms), and a delay line asleep when a packet comes
    stamps its arrival that late: most connections the labs could not
    judge (CI kept one lab with 440 of 585). Awake: p99 50-61 µs, 3-6
    wake-ups later than 0.5 ms. SCHED_IDLE runs only when nothing else
    can, so the programs measured lose no CPU to it; each loop ends with
    its parent, however that ends."""

    SPIN = ("import os, sys\n"
            "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
            "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
            "parent = os.getppid()\n"
            "while os.getppid() == parent:\n"
            "    for _ in range(200000):\n"
            "        pass\n")

    def __init__(self):
        self.procs = []

    def start(self):
        for cpu in sorted(os.sched_getaffinity(0)):
            self.procs.append(subprocess.Popen([sys.executable, "-c", self.SPIN, str(cpu)]))

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()
        self.procs = []


class Lab:
    """One RTT: delay line, nginx, captures at both ends, tlsrum live at the server."""

    def __init__(self, rtt_ms, workdir, name=None, live=True, delay_args=(), capture_filter="tcp",
                 realtime=True):
        self.rtt = float(rtt_ms)
        # The clients run at SCHED_FIFO RT_PRIORITY (below the delay lines'
        # 50) so that other work on the machine does not stall them between
        # a network event and their clock read: famlab measured 9 of 20
        # curl stalls of 3-5 ms at normal priority on a busy box, 1 in 80
        # so. realtime=False runs them as they come.
        self.realtime = realtime
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name or f"wan{os.getpid() % 100000}"
        self.ns_c, self.ns_s = f"{self.name}-c", f"{self.name}-s"
        self.live = live
        self.delay_args = list(delay_args)
        self.capture_filter = capture_filter
        self.procs = Procs()
        self.awake = KeepAwake()
        self.conns = []        # what the clients did, one dict per connection
        self.metrics_text = None
        self.line_stats = None

    # ---- setup / teardown ------------------------------------------------
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

    def nsexec(self, ns, cmd):
        return ["ip", "netns", "exec", ns] + [str(c) for c in cmd]

    def _up(self):
        check_capabilities()
        self.awake.start()
        dl = binary("delayline", "DELAYLINE")
        for ns in (self.ns_c, self.ns_s):
            if Path(f"/run/netns/{ns}").exists():
                raise LabError(f"namespace {ns} exists (left over? tools/delayline/lab.sh down --name {self.name})")
        self.line = self.procs.spawn([dl, "--ns-a", self.ns_c, "--ns-b", self.ns_s, "--create-ns",
                                      "--addr-a", CLIENT_IP, "--addr-b", SERVER_IP, "--ifname", IFACE,
                                      "--rtt", self.rtt, "--log", self.dir / "line.csv",
                                      "--stats", self.dir / "line-stats.json"] + self.delay_args,
                                     out=self.dir / "delayline.out", err=self.dir / "delayline.err")
        wait_for(lambda: "ready" in (self.dir / "delayline.out").read_text(), "delayline ready", proc=self.line)
        self.key, self.crt = make_cert(self.dir.parent)
        # Captures at both ends, on the TUN device (raw IP, nanosecond stamps).
        self.caps = {}
        for side, ns in (("client", self.ns_c), ("server", self.ns_s)):
            pcap = self.dir / f"{side}.pcap"
            errf = self.dir / f"tcpdump-{side}.log"
            p = self.procs.spawn(self.nsexec(ns, ["tcpdump", "-i", IFACE, "-n", "-s", "0", "-U", "-B", "32768",
                                                  "--immediate-mode", "--time-stamp-precision=nano",
                                                  "-w", pcap, self.capture_filter]), out=errf)
            wait_for(lambda: "listening on" in errf.read_text(errors="replace"), f"tcpdump in {ns}", proc=p)
            self.caps[side] = (p, pcap)
        self._start_nginx()
        if self.live:
            tlsrum = binary("tlsrum", "TLSRUM")
            args = ["live", "--backend", "pcap", "--iface", IFACE, "--events", self.dir / "live.ndjson",
                    "--metrics", METRICS_ADDR, "--idle-timeout", "5"]
            for port in PORTS.values():
                args += ["--port", port]
            self.live_proc = self.procs.spawn(self.nsexec(self.ns_s, [tlsrum] + args),
                                              out=self.dir / "live.log")
            wait_for(lambda: self._scrape() is not None, "tlsrum live /metrics", proc=self.live_proc)
        time.sleep(0.3)  # let captures settle

    def _start_nginx(self):
        tmp = self.dir / "nginx"
        tmp.mkdir(exist_ok=True)
        servers = "".join(NGINX_SERVER.format(ip=SERVER_IP, port=PORTS[k], host=HOST, crt=self.crt, key=self.key,
                                              cache=c, tickets=t, early=e)
                          for k, (c, t, e) in POLICY.items())
        conf = tmp / "nginx.conf"
        conf.write_text(NGINX_CONF.format(tmp=tmp, servers=servers))
        self.nginx = self.procs.spawn(self.nsexec(self.ns_s, ["nginx", "-c", conf, "-p", tmp]),
                                      out=tmp / "stdout.log")

        def listening():
            out = subprocess.run(self.nsexec(self.ns_s, ["ss", "-Hltn"]), capture_output=True, text=True).stdout
            return all(f":{p} " in out for p in PORTS.values())
        wait_for(listening, "nginx listening", proc=self.nginx)

    def _scrape(self):
        r = subprocess.run(self.nsexec(self.ns_s, ["curl", "-s", "--max-time", "2", f"http://{METRICS_ADDR}/metrics"]),
                           capture_output=True, text=True)
        return r.stdout if r.returncode == 0 and r.stdout else None

    def _down(self):
        # Order: clients are done; give the last FIN/ACKs time through the line,
        # scrape tlsrum live, then stop captures, live, nginx, the line.
        if getattr(self, "caps", None):
            time.sleep(self.rtt / 1000 * 2 + 0.5)
        if getattr(self, "live_proc", None) is not None and self.live_proc.poll() is None:
            time.sleep(0.5)
            self.metrics_text = self._scrape()
            self.procs.stop(self.live_proc, signal.SIGINT)
        for p, _ in getattr(self, "caps", {}).values():
            self.procs.stop(p, signal.SIGINT)
        if getattr(self, "nginx", None) is not None:
            self.procs.stop(self.nginx, signal.SIGQUIT)
        self.procs.stop_all()  # the delay line last: it deletes the namespaces
        for ns in (self.ns_c, self.ns_s):
            if Path(f"/run/netns/{ns}").exists():
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        stats = self.dir / "line-stats.json"
        if stats.exists():
            self.line_stats = json.loads(stats.read_text())
        self.awake.stop()

    # ---- clients ---------------------------------------------------------
    def curl(self, policy, tls, n, scenario, warmup=True, cacert=None):
        """One curl process fetching n URLs: n connections reusing its session.
        With warmup, a first fetch from another port takes the process's
        one-time OpenSSL start-up (about 2 ms between connect() and the
        ClientHello); it is recorded with warmup=True. cacert: the CA bundle
        (default: the lab's certificate alone)."""
        port = PORTS[policy]
        wport = PORTS["none"] if policy != "none" else PORTS["cache"]
        args = ["curl", "-sS", "--http1.1", "--cacert", cacert or self.crt,
                "--resolve", f"{HOST}:{port}:{SERVER_IP}", "--resolve", f"{HOST}:{wport}:{SERVER_IP}",
                "-w", "%{local_port} %{time_connect} %{time_appconnect} %{time_starttransfer} %{http_code}\\n"]
        args += ["--tlsv1.2", "--tls-max", "1.2"] if tls == "1.2" else ["--tlsv1.3"]
        urls = ([f"https://{HOST}:{wport}/"] if warmup else []) + [f"https://{HOST}:{port}/"] * n
        for url in urls:
            args += [url, "-o", "/dev/null"]
        n = len(urls)
        out = self._run(self.ns_c, self.clock(args), timeout=30 + n * self.rtt / 1000 * 8)
        rows = [line.split() for line in out.splitlines() if line.strip()]
        if len(rows) != n:
            raise LabError(f"curl made {len(rows)} of {n} transfers: {out}")
        for i, (lport, tc, ta, ts, code) in enumerate(rows):
            if code != "200":
                raise LabError(f"curl got HTTP {code}")
            w = warmup and i == 0
            self.conns.append({"scenario": scenario, "policy": "none" if w and policy != "none" else
                               "cache" if w else policy, "tls": tls, "client": "curl", "index": i, "warmup": w,
                               "local_port": int(lport), "time_connect": float(tc),
                               "time_appconnect": float(ta), "time_starttransfer": float(ts)})

    def pyclient(self, policy, tls, n, scenario):
        """Python's ssl module: n connections, each resuming the last session."""
        self._json_client("pyclient.py", ["--tls", tls], policy, tls, n, scenario, "python-ssl")

    def earlyclient(self, policy, n, scenario, early=True):
        """libssl through ctypes: a full TLS 1.3 handshake, then n-1 resumptions
        sending the request as 0-RTT early data (with early=True)."""
        self._json_client("earlyclient.py", ["--early"] if early else [], policy, "1.3", n, scenario,
                          "openssl-ctypes", warmup_policy="early-warmup" if early else None)

    def _json_client(self, script, extra, policy, tls, n, scenario, name, warmup_policy=None):
        port = PORTS[policy]
        wpol = warmup_policy or ("none" if policy != "none" else "cache")
        wport = PORTS[wpol]
        out = self._run(self.ns_c, self.clock([sys.executable, HERE / script, "--host", SERVER_IP,
                                               "--port", port, "--sni", HOST, "--cafile", self.crt, "-n", n,
                                               "--warmup-port", wport] + extra),
                        timeout=30 + n * self.rtt / 1000 * 8)
        rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        if len([r for r in rows if not r["warmup"]]) != n:
            raise LabError(f"{script} made {len(rows)} connections, wanted {n} after warm-up: {out}")
        for i, r in enumerate(rows):
            if "200" not in r.get("status_line", ""):
                raise LabError(f"{script}: unexpected response {r}")
            pol = wpol if r["warmup"] else policy
            self.conns.append({"scenario": scenario, "policy": pol, "tls": tls, "client": name,
                               "index": i, **r})

    def s_client_early(self, policy, n_resumed, scenario):
        """openssl s_client: one full TLS 1.3 handshake saving the session, then
        n_resumed resumptions sending the request as 0-RTT early data."""
        port = PORTS[policy]
        sess = self.dir / f"sess-{port}-{len(self.conns)}.pem"
        req = self.dir / "request.txt"
        req.write_text(HTTP_REQ)
        base = ["openssl", "s_client", "-connect", f"{SERVER_IP}:{port}", "-servername", HOST, "-tls1_3",
                "-CAfile", self.crt, "-alpn", "http/1.1", "-ign_eof"]
        runs = [base + ["-sess_out", sess]] + [base + ["-sess_in", sess, "-early_data", req]] * n_resumed
        for i, cmd in enumerate(runs):
            stdin = HTTP_REQ if i == 0 else ""
            out = self._run(self.ns_c, cmd, stdin=stdin, timeout=20 + self.rtt / 1000 * 8)
            m = re.search(r"^(New|Reused), TLSv1\.3", out, re.M)
            ed = re.search(r"^Early data was (.+)$", out, re.M)
            lp = re.findall(r"^(?:CONNECTED\(\w+\))", out, re.M)
            if not m or "200 OK" not in out or not lp:
                raise LabError(f"s_client run {i} did not complete a request:\n{out[-1500:]}")
            self.conns.append({"scenario": scenario, "policy": policy, "tls": "1.3", "client": "s_client",
                               "index": i, "warmup": False, "local_port": None, "session": m.group(1),
                               "early_data_report": ed.group(1) if ed else "not sent",
                               "started": self._last_started, "ended": time.time()})
            time.sleep(0.05)

    def clock(self, cmd):
        """cmd for a client whose own clock is a label: at SCHED_FIFO
        RT_PRIORITY unless the lab runs them as they come."""
        return ["chrt", "-f", RT_PRIORITY] + cmd if self.realtime else cmd

    def _run(self, ns, cmd, stdin="", timeout=60):
        self._last_started = time.time()
        p = subprocess.run(self.nsexec(ns, cmd), input=stdin, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise LabError(f"{' '.join(map(str, cmd))} failed ({p.returncode}): {p.stderr[-1500:]}")
        return p.stdout

    # ---- results ---------------------------------------------------------
    def results(self):
        """Every client connection joined with tlsrum's records (client-side
        capture, server-side capture, live at the server), nginx's log and
        the delay line's own lateness for the connection's packets."""
        tlsrum = binary("tlsrum", "TLSRUM")
        # A client port comes round again over hundreds of connections: keep
        # every record per port in time order and hand them out in the order
        # the clients made their connections.
        def queues(records, ts_key):
            q = {}
            for r in sorted(records, key=ts_key):
                q.setdefault(r["_port"], []).append(r)
            return q
        recs = {}
        for side in ("client", "server"):
            out = subprocess.run([tlsrum, "replay", self.dir / f"{side}.pcap", "--format", "ndjson"],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise LabError(f"tlsrum replay {side}.pcap failed: {out.stderr}")
            rs = [dict(json.loads(line), _port=port_of(json.loads(line)["client"])) for line in out.stdout.splitlines()]
            recs[side] = queues(rs, lambda r: r["ts"])
        live = {}
        lf = self.dir / "live.ndjson"
        if lf.exists():
            rs = [dict(json.loads(line), _port=port_of(json.loads(line)["client"]))
                  for line in lf.read_text().splitlines() if line.strip()]
            live = queues(rs, lambda r: r["ts"])
        lines = []
        for i, line in enumerate((self.dir / "nginx" / "access.log").read_text().splitlines()):
            kv = dict(t.split("=", 1) for t in line.split())
            kv["_port"], kv["_i"] = int(kv["port"]), i
            lines.append(kv)
        nginx_log = queues(lines, lambda r: r["_i"])
        late = line_lateness(self.dir / "line.csv")
        # The client's clocks start when connect() returns (its ACK of the
        # SYN-ACK goes out), tlsrum's at the ClientHello: the gap between
        # them, from the client's capture, is the client's own work before
        # its hello (0.5-1 ms; 1.6 ms from a stalled Python client).
        hello = hello_delays(self.dir / "client.pcap")
        idle = idle_before_close(self.dir / "client.pcap")
        request = request_gaps(self.dir / "client.pcap")
        # Only a plain line (no jitter, symmetric) has one expected delay.
        off = ({} if self.delay_args else
               line_deviation(self.dir / "client.pcap", self.dir / "server.pcap", self.rtt))
        # s_client does not print its port: take the connections in order.
        used = {c["local_port"] for c in self.conns if c["local_port"]}
        spare = sorted((r for p, q in recs["client"].items() if p not in used for r in q), key=lambda r: r["ts"])
        for c in self.conns:
            if c["local_port"] is None:
                if not spare:
                    raise LabError("an s_client connection is missing from the client capture")
                c["local_port"] = spare.pop(0)["_port"]

        def take(q, port):
            lst = q.get(port)
            if not lst:
                return None
            r = lst.pop(0)
            return {k: v for k, v in r.items() if not k.startswith("_")}
        out = []
        for c in self.conns:
            p = c["local_port"]
            out.append({**c, "rtt": self.rtt,
                        "tlsrum_client": take(recs["client"], p), "tlsrum_server": take(recs["server"], p),
                        "tlsrum_live": take(live, p), "nginx": take(nginx_log, p),
                        "line_late_max_us": late.get(p), "line_delay_off_us": off.get(p),
                        "client_hello_delay_ms": hello.get((CLIENT_IP, p)), "client_idle_ms": idle.get(p),
                        "client_request_gap_ms": request.get(p)})
        return {"rtt": self.rtt, "line_stats": self.line_stats, "metrics": self.metrics_text,
                "connections": out}

    def caclient(self, policy, n, scenario, bundle, mode="alternate"):
        """caclient.py: n full TLS 1.3 handshakes, each loading the CA bundle
        before the ClientHello (mode "eager", curl 7.87's order) or after it
        (mode "deferred", curl 7.88's); "alternate" takes turns. Recorded as
        client python-eager or python-deferred."""
        first = len(self.conns)
        self._json_client("caclient.py", ["--bundle", bundle, "--mode", mode], policy, "1.3", n, scenario,
                          "python")
        for c in self.conns[first:]:
            c["client"] = f"python-{c['mode']}"


def port_of(endpoint):
    return int(endpoint.rsplit(":", 1)[1])


def line_lateness(csv_path):
    """Client port -> the delay line's worst lateness (µs) on that connection's packets."""
    worst = {}
    if not csv_path.exists():
        return worst
    with open(csv_path) as f:
        next(f, None)
        for line in f:
            d, _, _, sport, dport, _, deadline, released = line.rstrip().split(",")
            port = int(sport) if d == "ab" else int(dport)
            late = (int(released) - int(deadline)) / 1000
            worst[port] = max(worst.get(port, 0.0), late)
    return worst


def metric_value(text, name, labels=None):
    """Sum of a metric's samples (optionally only those whose labels include `labels`)."""
    total, found = 0.0, False
    for line in (text or "").splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        lab = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if labels and any(lab.get(k) != v for k, v in labels.items()):
            continue
        total += float(m.group(3))
        found = True
    return total if found else None


def tcp_segments(pcap_path):
    """(timestamp, source address, destination address, source port,
    destination port, TCP flags, TCP payload length, seq, ack) of every TCP
    segment in a pcap: IPv4 and IPv6
    (no extension headers: none in the labs), raw IP (tcpdump on a TUN
    device) or Linux cooked (tcpdump -i any: SLL or SLL2)."""
    import ipaddress
    import struct
    # Link type -> bytes before the IP header.
    skip = {101: 0, 12: 0, 228: 0, 229: 0, 113: 16, 276: 20}
    with open(pcap_path, "rb") as f:
        head = f.read(24)
        if len(head) < 24:
            return
        magic = struct.unpack("<I", head[:4])[0]
        endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
        nano = struct.unpack(endian + "I", head[:4])[0] == 0xA1B23C4D
        linktype = struct.unpack(endian + "I", head[20:24])[0]
        if linktype not in skip:
            raise LabError(f"{pcap_path}: link type {linktype}, expected raw IP or Linux cooked")
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                break
            sec, frac, incl, _ = struct.unpack(endian + "IIII", rec)
            pkt = f.read(incl)[skip[linktype]:]
            ts = sec + frac / (1e9 if nano else 1e6)
            if len(pkt) >= 40 and pkt[0] >> 4 == 4 and pkt[9] == 6:
                ihl = (pkt[0] & 15) * 4
                src, dst, total = pkt[12:16], pkt[16:20], struct.unpack(">H", pkt[2:4])[0]
            elif len(pkt) >= 60 and pkt[0] >> 4 == 6 and pkt[6] == 6:
                ihl = 40
                src, dst, total = pkt[8:24], pkt[24:40], 40 + struct.unpack(">H", pkt[4:6])[0]
            else:
                continue
            tcp = pkt[ihl:]
            if len(tcp) < 20:
                continue
            sport, dport, seq, ack = struct.unpack(">HHII", tcp[:12])
            # From the IP length, not the captured length (a snap length or a
            # trailer would differ).
            payload = total - ihl - (tcp[12] >> 4) * 4
            yield (ts, str(ipaddress.ip_address(src)), str(ipaddress.ip_address(dst)), sport, dport, tcp[13],
                   payload, seq, ack)


def client_connections(pcap_path, client=CLIENT_IP):
    """Client port -> (timestamp, from the client, TCP flags, payload
    length) of its last connection's segments, in capture order."""
    conns = {}
    for ts, src, _, sport, dport, flags, payload, _, _ in tcp_segments(pcap_path):
        mine = src == client
        port = sport if mine else dport
        if mine and flags & 0x02:
            conns[port] = []   # a port used again: its last connection
        conns.setdefault(port, []).append((ts, mine, flags, payload))
    return conns


def idle_before_close(pcap_path, client=CLIENT_IP):
    """Client port -> how long (ms) the client sat after the last data the
    server sent it before its first closing act (its FIN, or its last
    payload: the close_notify), from the capture alone. A client reads its
    ttfb clock (time_starttransfer) after the response arrives and before it
    closes: this bounds how late it read it (normally 0.2-0.9 ms; a stalled
    client 4.3 ms, its ttfb 4.4 ms long)."""
    out = {}
    for port, segs in client_connections(pcap_path, client).items():
        closing = [i for i, (_, mine, flags, _) in enumerate(segs) if mine and flags & 0x01][:1]
        closing += [i for i, (_, mine, _, n) in enumerate(segs) if mine and n > 0][-1:]
        if not closing:
            continue
        i = min(closing)
        theirs = [ts for ts, mine, _, n in segs[:i] if not mine and n > 0]
        if theirs:
            out[port] = (segs[i][0] - max(theirs)) * 1000
    return out


def request_gaps(pcap_path, client=CLIENT_IP):
    """Client port -> how long (ms) the client took before sending its
    request, after the payload just before it (either way: its own Finished
    in TLS 1.3 and resumed TLS 1.2, the server's Finished in full TLS 1.2),
    from the capture alone. A client reads its handshake clock
    (time_appconnect) in that gap: this bounds how late it read it
    (famlab measured 0.15-0.5 ms; curl 4.2 ms late once on CI). The request
    is the client's last payload before the response, the server's last
    payload before the client's FIN or RST."""
    out = {}
    for port, segs in client_connections(pcap_path, client).items():
        end = next((i for i, (_, mine, flags, _) in enumerate(segs) if mine and flags & 0x05), len(segs))
        data = [i for i, (_, _, _, n) in enumerate(segs[:end]) if n > 0]
        response = next((i for i in reversed(data) if not segs[i][1]), None)
        request = next((i for i in reversed(data) if segs[i][1] and response is not None and i < response),
                       None)
        before = [i for i in data if request is not None and i < request]
        if before:
            out[port] = (segs[request][0] - segs[before[-1]][0]) * 1000
    return out


def wire_marks(pcap_path, clients=(CLIENT_IP,)):
    """(client address, client port) -> {syn, ack, hello}: when the client's
    SYN, its ACK of the SYN-ACK and its first payload byte (the ClientHello)
    crossed this vantage point. These are the offsets between curl's clock
    (time_connect: connect() returned, i.e. the ACK went out) and tlsrum's
    (the ClientHello)."""
    marks = {}
    for ts, src, _, sport, _, flags, payload, _, _ in tcp_segments(pcap_path):
        if src not in clients:
            continue
        m = marks.setdefault((src, sport), {})
        if flags & 0x02:
            m["syn"] = ts
            m.pop("ack", None)
            m.pop("hello", None)
        elif payload > 0:
            m.setdefault("hello", ts)
        elif flags & 0x10:
            m.setdefault("ack", ts)
    return marks


def hello_delays(pcap_path, clients=(CLIENT_IP,)):
    """(client address, client port) -> ms from the client's ACK of the
    SYN-ACK to its ClientHello on this capture (wire_marks): what a client
    clock started at connect() holds before tlsrum's phases start. A
    connection missing either mark is absent."""
    return {k: (m["hello"] - m["ack"]) * 1000
            for k, m in wire_marks(pcap_path, clients).items() if "hello" in m and "ack" in m}


def read_pcap(path):
    """(timestamp, raw IP bytes) of every packet in a raw-IP pcap."""
    import struct
    out = []
    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24:
            return out
        magic = struct.unpack("<I", head[:4])[0]
        endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
        nano = struct.unpack(endian + "I", head[:4])[0] == 0xA1B23C4D
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                break
            sec, frac, incl, _ = struct.unpack(endian + "IIII", rec)
            out.append((sec + frac / (1e9 if nano else 1e6), f.read(incl)))
    return out


def _by_bytes(path):
    """A capture's packets by their bytes -> their timestamps, in order."""
    seen = {}
    for ts, pkt in read_pcap(path):
        seen.setdefault(pkt, []).append(ts)
    return seen


def line_deviation(client_pcap, server_pcap, rtt_ms):
    """Client port -> the largest deviation (µs) of one of its packets'
    one-way delay through the line (between the captures at its two ends)
    from the configured RTT/2. A line stalled before it read a packet
    stamps the arrival late too, so its own log shows nothing; this does
    (a SYN-ACK 1.4 ms slow on a quiet machine, 28 Nov 2026)."""
    import struct

    c, s = _by_bytes(client_pcap), _by_bytes(server_pcap)
    client_ip = bytes(map(int, CLIENT_IP.split(".")))
    want = rtt_ms / 2 / 1e3
    worst = {}
    for pkt, cts in c.items():
        sts = s.get(pkt)
        if not sts or len(sts) != len(cts) or len(pkt) < 24 or pkt[0] >> 4 != 4:
            continue  # identical retransmissions are ambiguous
        ihl = (pkt[0] & 15) * 4
        sport, dport = struct.unpack(">HH", pkt[ihl:ihl + 4])
        up = pkt[12:16] == client_ip
        port = sport if up else dport
        for a, b in zip(cts, sts):
            dev = abs((b - a if up else a - b) - want) * 1e6
            worst[port] = round(max(worst.get(port, 0.0), dev), 1)
    return worst


def one_way_delays(client_pcap, server_pcap):
    """Per-packet one-way delay (ms) through the line, by direction: the same
    bytes leave one namespace's TUN device and enter the other's (the line
    forwards raw IP untouched), both stamped by the one kernel clock."""
    c, s = _by_bytes(client_pcap), _by_bytes(server_pcap)
    ab, ba = [], []
    for pkt, cts in c.items():
        sts = s.get(pkt)
        if not sts or len(sts) != len(cts):
            continue  # identical retransmissions are ambiguous
        src = pkt[12:16] if pkt and pkt[0] >> 4 == 4 else None
        from_client = src == bytes(map(int, CLIENT_IP.split(".")))
        for a, b in zip(cts, sts):
            (ab if from_client else ba).append((b - a if from_client else a - b) * 1000)
    return ab, ba
