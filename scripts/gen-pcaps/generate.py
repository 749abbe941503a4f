#!/usr/bin/env python3
"""Generate small real-traffic TLS captures with ground-truth labels.

Usage: python3 scripts/gen-pcaps/generate.py [--out pcaps] [--only SUBSTRING]
                                             [--list] [--keep-tmp]

Every scenario runs real TLS peers (openssl s_server/s_client, gnutls-serv/
gnutls-cli, nginx, curl) over loopback while dumpcap records the traffic.
Beside each capture `<name>.pcapng` it writes `<name>.expected.json` whose
labels come only from the peers' own reports (s_client/gnutls-cli output,
nginx access-log variables, curl -w/-v output) and from what the scenario's
configuration determines by construction.  tshark is used only to (a) read
the client ports of the SYNs, in order, for clients that do not print their
local port, and (b) sanity-check the labels against the capture; it never
produces a label.

Python 3 standard library only.  See README.md next to this file.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOST = "tlsrum.test"
BASE_PORT = 14433
MAX_CAPTURE_BYTES = 1 << 20

# The HelloRetryRequest "random" (RFC 8446 4.1.3) as s_client -trace prints
# it: gmt_unix_time=0xCF21AD74 then the remaining 28 bytes.
HRR_GMT = "0xCF21AD74"
HRR_RANDOM_BYTES = "E59A6111BE1D8C021E65B891C2A211167ABB8C5E079E09E2C8A8339C"

HTTP_REQ_OK = b"GET /ok.txt HTTP/1.0\r\nHost: tlsrum.test\r\n\r\n"
HTTP_REQ_ROOT = b"GET / HTTP/1.0\r\nHost: tlsrum.test\r\n\r\n"


class Fail(Exception):
    """A scenario did not behave as designed; the generator must fail loudly."""


def log(msg):
    print(f"[gen-pcaps] {msg}", flush=True)


def run(cmd, **kw):
    """Run a short helper command, return stdout (text); raise on failure."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("timeout", 60)
    p = subprocess.run(cmd, text=True, **kw)
    if p.returncode != 0:
        raise Fail(f"command failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr}")
    return p.stdout


# --------------------------------------------------------------------------
# Process management: every child runs in its own session (process group) so
# it can be killed with everything it spawned.
# --------------------------------------------------------------------------

class Procs:
    def __init__(self):
        self.live = []

    def spawn(self, cmd, *, stdin=subprocess.DEVNULL, out=None, cwd=None):
        outf = open(out, "wb") if out else subprocess.DEVNULL
        try:
            p = subprocess.Popen([str(c) for c in cmd], stdin=stdin, stdout=outf,
                                 stderr=subprocess.STDOUT, cwd=cwd,
                                 start_new_session=True)
        finally:
            if out:
                outf.close()
        p.cmdline = " ".join(map(str, cmd))
        self.live.append(p)
        return p

    def stop(self, p, sig=signal.SIGTERM, timeout=5.0):
        """Signal p's process group, wait, escalate to SIGKILL."""
        if p.poll() is None:  # leader not reaped yet: its group is ours
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
        # Stragglers left in the group (e.g. nginx workers).  A group id is
        # not reused while any member lives, so these are ours; kill by pid.
        for pid in group_members(p.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if p.stdin:
            try:
                p.stdin.close()
            except OSError:
                pass
        if p in self.live:
            self.live.remove(p)

    def stop_all(self):
        for p in list(self.live):
            self.stop(p)


def group_members(pgid):
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid:  # fields[0]=state, [1]=ppid, [2]=pgrp
            pids.append(int(entry))
    return pids


def listening(port):
    out = run(["ss", "-Hltn", f"sport = :{port}"])
    return bool(out.strip())


def wait_listening(port, proc, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise Fail(f"server exited early (rc={proc.returncode}): {proc.cmdline}")
        if listening(port):
            time.sleep(0.1)
            return
        time.sleep(0.05)
    raise Fail(f"server not listening on port {port} after {timeout}s: {proc.cmdline}")


def wait_not_listening(port, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if not listening(port):
            return
        time.sleep(0.05)
    raise Fail(f"port {port} still has a listener after {timeout}s")


# --------------------------------------------------------------------------
# Capture
# --------------------------------------------------------------------------

class Capture:
    def __init__(self, procs, path, port, logdir):
        self.procs, self.path, self.port, self.logdir = procs, Path(path), port, logdir
        self.proc = None

    def start(self):
        if self.path.exists():
            self.path.unlink()
        errlog = self.logdir / f"dumpcap-{self.port}.log"
        self.proc = self.procs.spawn(
            ["dumpcap", "-i", "lo", "-f", f"tcp port {self.port}", "-w", self.path],
            out=errlog)
        end = time.time() + 15
        while time.time() < end:
            if self.proc.poll() is not None:
                raise Fail(f"dumpcap exited: {errlog.read_text(errors='replace')}")
            if (self.path.exists() and self.path.stat().st_size > 0
                    and "Capturing on" in errlog.read_text(errors="replace")):
                time.sleep(0.5)  # let the capture settle before traffic starts
                return
            time.sleep(0.05)
        raise Fail("dumpcap did not start capturing within 15s")

    def stop(self, grace=0.8):
        if not self.proc:
            return
        time.sleep(grace)  # let the last FIN/ACKs land
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.procs.stop(self.proc)
        self.proc = None


def tshark_fields(pcap, port, display_filter, fields):
    cmd = ["tshark", "-r", pcap, "-d", f"tcp.port=={port},tls", "-Y", display_filter,
           "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]
    for f in fields:
        cmd += ["-e", f]
    out = run(cmd)
    return [line.split("\t") for line in out.splitlines() if line.strip()]


def syn_client_ports(pcap, port):
    """Client ports of the connection attempts, in order (retransmitted SYNs
    deduplicated).  This reads the capture only to match connections."""
    rows = tshark_fields(pcap, port, "tcp.flags.syn==1 && tcp.flags.ack==0",
                         ["tcp.srcport", "tcp.dstport"])
    ports = []
    for src, dst in rows:
        if int(dst) != port:
            continue
        if int(src) not in ports:
            ports.append(int(src))
    return ports


# --------------------------------------------------------------------------
# Cipher-suite names
# --------------------------------------------------------------------------

_OSSL_TO_IANA = None


def iana_cipher(name):
    """Map an OpenSSL cipher name to its IANA name (`openssl ciphers -stdname`)."""
    global _OSSL_TO_IANA
    if name.startswith("TLS_"):
        return name  # TLS 1.3 suites already carry their IANA names
    if _OSSL_TO_IANA is None:
        _OSSL_TO_IANA = {}
        out = run(["openssl", "ciphers", "-stdname", "ALL:COMPLEMENTOFALL:@SECLEVEL=0"])
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] == "-":
                _OSSL_TO_IANA[parts[2]] = parts[0]
    if name not in _OSSL_TO_IANA:
        raise Fail(f"unknown OpenSSL cipher name {name!r}")
    return _OSSL_TO_IANA[name]


# GnuTLS reports the key exchange, bulk cipher and MAC separately; the
# scenarios only negotiate AEAD suites, for which this table is complete.
_GNUTLS_AEAD = {
    "AES-128-GCM": ("AES_128_GCM", "SHA256"),
    "AES-256-GCM": ("AES_256_GCM", "SHA384"),
    "CHACHA20-POLY1305": ("CHACHA20_POLY1305", "SHA256"),
    "AES-128-CCM": ("AES_128_CCM", "SHA256"),
}


def gnutls_iana_cipher(version, kx, cipher, mac):
    if mac != "AEAD" or cipher not in _GNUTLS_AEAD:
        raise Fail(f"no IANA mapping for GnuTLS suite {version} {kx} {cipher} {mac}")
    bulk, prf = _GNUTLS_AEAD[cipher]
    if version == "TLS1.3":
        return f"TLS_{bulk}_{prf}"
    kxname = {"ECDHE-ECDSA": "ECDHE_ECDSA", "ECDHE-RSA": "ECDHE_RSA",
              "DHE-RSA": "DHE_RSA"}.get(kx)
    if not kxname:
        raise Fail(f"no IANA mapping for GnuTLS key exchange {kx!r}")
    return f"TLS_{kxname}_WITH_{bulk}_{prf}"


OSSL_VERSION = {"TLSv1": "TLS1.0", "TLSv1.1": "TLS1.1", "TLSv1.2": "TLS1.2",
                "TLSv1.3": "TLS1.3"}


# --------------------------------------------------------------------------
# PKI: throwaway root CA -> intermediate CA -> leaf (ECDSA P-256).  Servers
# send leaf + intermediate, so every Certificate message carries 2 certs.
# --------------------------------------------------------------------------

def make_pki(d):
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)

    def key(name):
        run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", d / f"{name}.key"])

    (d / "int.ext").write_text(
        "basicConstraints=critical,CA:TRUE,pathlen:0\n"
        "keyUsage=critical,keyCertSign,cRLSign\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    (d / "leaf.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        f"subjectAltName=DNS:{HOST}\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    key("ca")
    run(["openssl", "req", "-x509", "-new", "-key", d / "ca.key", "-sha256", "-days", "3650",
         "-subj", "/CN=tlsrum test root CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign",
         "-out", d / "ca.pem"])
    for name, cn, issuer, ext in (("int", "tlsrum test intermediate CA", "ca", "int.ext"),
                                  ("leaf", HOST, "int", "leaf.ext")):
        key(name)
        run(["openssl", "req", "-new", "-key", d / f"{name}.key", "-subj", f"/CN={cn}",
             "-out", d / f"{name}.csr"])
        run(["openssl", "x509", "-req", "-in", d / f"{name}.csr", "-CA", d / f"{issuer}.pem",
             "-CAkey", d / f"{issuer}.key", "-set_serial", "0x" + os.urandom(8).hex(),
             "-days", "3650", "-sha256", "-extfile", d / ext, "-out", d / f"{name}.pem"])
    (d / "chain.pem").write_text((d / "leaf.pem").read_text() + (d / "int.pem").read_text())
    run(["openssl", "verify", "-CAfile", d / "ca.pem", "-untrusted", d / "int.pem",
         d / "leaf.pem"])
    (d / "www").mkdir()
    (d / "www" / "ok.txt").write_text("ok\n")
    (d / "gnutls-resp.txt").write_bytes(
        b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n")
    return {k: d / f for k, f in (("ca", "ca.pem"), ("int", "int.pem"), ("leaf", "leaf.pem"),
                                 ("key", "leaf.key"), ("chain", "chain.pem"))}


# --------------------------------------------------------------------------
# Scenario context
# --------------------------------------------------------------------------

class Ctx:
    def __init__(self, name, port, tmp, pki, procs):
        self.name, self.port, self.pki, self.procs = name, port, pki, procs
        self.tmp = Path(tmp) / name
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.seq = 0

    def path(self, fname):
        return self.tmp / fname

    def next_log(self, what):
        self.seq += 1
        return self.tmp / f"{self.seq:02d}-{what}.log"

    # ---- servers ---------------------------------------------------------

    def s_server(self, args, ipv6=False):
        addr = f"[::1]:{self.port}" if ipv6 else f"127.0.0.1:{self.port}"
        cmd = ["openssl", "s_server", "-accept", addr, "-cert", self.pki["leaf"],
               "-key", self.pki["key"], "-cert_chain", self.pki["int"]] + args
        # stdin stays open (s_server quits on stdin EOF); cwd holds ok.txt for -WWW.
        p = self.procs.spawn(cmd, stdin=subprocess.PIPE, out=self.next_log("s_server"),
                             cwd=self.pki["ca"].parent / "www")
        wait_listening(self.port, p)
        return p

    def gnutls_serv(self, args):
        cmd = ["gnutls-serv", "-p", self.port, "--x509certfile", self.pki["chain"],
               "--x509keyfile", self.pki["key"], "--disable-client-cert",
               "--http", "--httpdata", self.pki["ca"].parent / "gnutls-resp.txt"] + args
        logf = self.next_log("gnutls-serv")
        p = self.procs.spawn(cmd, stdin=subprocess.PIPE, out=logf)
        wait_listening(self.port, p)
        p.logfile = logf
        return p

    def nginx(self, cache, tickets, early_data="off", protocols="TLSv1.2 TLSv1.3",
              ipv6=False):
        """nginx in the foreground; ipv6 adds a listener on [::1] (same port)."""
        d = self.tmp / "nginx"
        if d.exists():
            shutil.rmtree(d)
        d.mkdir()
        self._nginx_conf(d, cache, tickets, early_data, protocols, ipv6)
        p = self.procs.spawn(["nginx", "-p", d, "-c", d / "nginx.conf", "-e", d / "error.log"],
                             out=self.next_log("nginx"))
        wait_listening(self.port, p)
        p.access_log = d / "access.log"
        p.nginx_dir = d
        return p

    def _nginx_conf(self, d, cache, tickets, early_data, protocols, ipv6):
        conf = (HERE / "nginx.conf.in").read_text()
        listen6 = f"listen [::1]:{self.port} ssl;" if ipv6 else ""
        for k, v in {"TMP": d, "PORT": self.port, "CHAIN": self.pki["chain"],
                     "KEY": self.pki["key"], "SESSION_CACHE": cache,
                     "SESSION_TICKETS": tickets, "EARLY_DATA": early_data,
                     "PROTOCOLS": protocols, "LISTEN6": listen6}.items():
            conf = conf.replace(f"@{k}@", str(v))
        if "@" in re.sub(r"#.*", "", conf):
            raise Fail("unfilled placeholder in nginx.conf.in")
        (d / "nginx.conf").write_text(conf)
        run(["nginx", "-t", "-q", "-p", d, "-c", d / "nginx.conf", "-e", d / "error.log"])

    def nginx_reload(self, p, cache, tickets, early_data="off", protocols="TLSv1.2 TLSv1.3",
                     ipv6=False, timeout=10.0):
        """Rewrite the running nginx's config and `nginx -s reload` it (SIGHUP to
        the master, found by its pid file); returns once the master has started
        a worker with the new config and every old worker has exited, so no
        later connection meets the old config."""
        d = p.nginx_dir
        errlog = d / "error.log"
        mark = len(errlog.read_text(errors="replace"))
        old_workers = [pid for pid in group_members(p.pid) if pid != p.pid]
        self._nginx_conf(d, cache, tickets, early_data, protocols, ipv6)
        run(["nginx", "-p", d, "-c", d / "nginx.conf", "-e", errlog, "-s", "reload"])
        end = time.time() + timeout
        while time.time() < end:
            if p.poll() is not None:
                raise Fail(f"nginx exited during the reload (rc={p.returncode})")
            new = errlog.read_text(errors="replace")[mark:]
            gone = not any(Path(f"/proc/{pid}").exists() for pid in old_workers)
            if "reconfiguring" in new and "start worker process" in new and gone:
                return new
            time.sleep(0.05)
        raise Fail(f"nginx did not finish reloading within {timeout}s:\n"
                   f"{errlog.read_text(errors='replace')[mark:]}")

    def stop_server(self, p):
        self.procs.stop(p)
        wait_not_listening(self.port)

    # ---- clients ---------------------------------------------------------

    def s_client(self, args, stdin=b"", ipv6=False, hold=2.0, timeout=20.0):
        """Run one s_client connection; returns its output.

        The data in `stdin` is written at once and stdin is kept open for up
        to `hold` seconds: s_client exits by itself when the server closes the
        connection (HTTP/1.0), otherwise closing stdin makes it send
        close_notify and exit.  The hold also lets TLS 1.3 tickets arrive."""
        addr = f"[::1]:{self.port}" if ipv6 else f"127.0.0.1:{self.port}"
        # The TLS secrets go to a key log (NSS format), saved beside the
        # capture, so `tlsrum replay --keylog` can read encrypted handshake
        # messages (whether 0-RTT was accepted) — throwaway test sessions only.
        cmd = ["openssl", "s_client", "-connect", addr, "-servername", HOST, "-trace",
               "-keylogfile", str(self.path("keylog.txt"))] + args
        logf = self.next_log("s_client")
        p = self.procs.spawn(cmd, stdin=subprocess.PIPE, out=logf, cwd=self.tmp)
        try:
            p.stdin.write(stdin)
            p.stdin.flush()
        except BrokenPipeError:
            pass
        try:
            p.wait(hold)
        except subprocess.TimeoutExpired:
            pass
        try:
            p.stdin.close()
        except BrokenPipeError:
            pass
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.procs.stop(p)
            raise Fail(f"s_client timed out: {p.cmdline}")
        self.procs.stop(p)
        time.sleep(0.2)
        return logf.read_text(errors="replace")

    def gnutls_cli(self, args, stdin=b"", ipv6=False, timeout=20.0):
        host = "::1" if ipv6 else "127.0.0.1"
        cmd = ["gnutls-cli", host, "-p", self.port, "-V", "--sni-hostname", HOST,
               "--verify-hostname", HOST, "--x509cafile", self.pki["ca"]] + args
        logf = self.next_log("gnutls-cli")
        p = self.procs.spawn(cmd, stdin=subprocess.PIPE, out=logf, cwd=self.tmp)
        try:
            p.stdin.write(stdin)
            p.stdin.flush()
        except BrokenPipeError:
            pass
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.procs.stop(p)
            raise Fail(f"gnutls-cli timed out: {p.cmdline}")
        self.procs.stop(p)
        time.sleep(0.2)
        return p.returncode, logf.read_text(errors="replace")

    def curl(self, args, n, timeout=60.0):
        """One curl process fetching the URL n times; returns its -w and -v output."""
        return self.curl_wait(self.curl_spawn(args, n), timeout)

    def curl_spawn(self, args, n, ipv6=False):
        """Start one curl process fetching the URL n times, in the background."""
        url = f"https://{HOST}:{self.port}/"
        addr = "::1" if ipv6 else "127.0.0.1"
        cmd = ["curl", "-sS", "-v", "--http1.1", "--resolve", f"{HOST}:{self.port}:{addr}",
               "--cacert", self.pki["ca"], "-H", "Connection: close",
               "-w", "local_port=%{local_port} http_version=%{http_version} "
                     "status=%{response_code}\n"] + args
        for _ in range(n):
            cmd += ["-o", "/dev/null", url]
        wlog = self.next_log("curl-w")
        vlog = self.next_log("curl-v")
        with open(wlog, "wb") as w, open(vlog, "wb") as v:
            p = subprocess.Popen([str(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=w,
                                 stderr=v, start_new_session=True)
        p.cmdline = " ".join(map(str, cmd))
        p.wlog, p.vlog = wlog, vlog
        self.procs.live.append(p)
        return p

    def curl_wait(self, p, timeout=60.0):
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.procs.stop(p)
            raise Fail(f"curl timed out: {p.cmdline}")
        self.procs.stop(p)
        if p.returncode != 0:
            raise Fail(f"curl failed rc={p.returncode}: "
                       f"{p.vlog.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)
        return p.wlog.read_text(), p.vlog.read_text(errors="replace")


# --------------------------------------------------------------------------
# Output parsers (program reports -> labels)
# --------------------------------------------------------------------------

def first_line(text, regex):
    m = re.search(regex, text, re.M)
    return m


def parse_trace(text):
    """Handshake messages from s_client -trace output: list of
    (direction, msgtype, [lines]); direction is 'sent' or 'received'."""
    msgs, cur, direction = [], None, None
    for line in text.splitlines():
        if line.startswith("Sent Record") or line.startswith("Sent TLS Record"):
            direction, cur = "sent", None
            continue
        if line.startswith("Received Record") or line.startswith("Received TLS Record"):
            direction, cur = "received", None
            continue
        m = re.match(r"^\s{4}(\w+), Length=\d+$", line)
        if m and direction:
            cur = (direction, m.group(1), [])
            msgs.append(cur)
            continue
        if cur is not None:
            cur[2].append(line)
    return msgs


def s_client_labels(out, *, session_in=None, alpn=None, early_file=False):
    """Labels for one s_client run from its own output.

    session_in: the parsed labels of the run whose -sess_out file this run
    was given with -sess_in (None if no session was given); alpn: the
    protocol given to -alpn; early_file: whether -early_data FILE was given."""
    lab, ev = {}, []
    m = first_line(out, r"^(New|Reused), (\S+), Cipher is (\S+)$")
    if not m:
        raise Fail("s_client output has no New/Reused line")
    ev.append(m.group(0))
    msgs = parse_trace(out)
    chs = [x for x in msgs if x[0] == "sent" and x[1] == "ClientHello"]
    shs = [x for x in msgs if x[0] == "received" and x[1] == "ServerHello"]
    hrr_seen = False
    for sh in shs:
        body = "\n".join(sh[2])
        if f"gmt_unix_time={HRR_GMT}" in body and HRR_RANDOM_BYTES in body:
            hrr_seen = True
    lab["hrr"] = hrr_seen
    if hrr_seen:
        ev.append(f"-trace: ServerHello random {HRR_GMT[2:]}{HRR_RANDOM_BYTES} "
                  f"(HelloRetryRequest), then {len(chs)} ClientHellos sent")
    # The handshake completed iff both Finished messages went by (-trace
    # prints them decrypted).  For TLS 1.3 the New/Reused line is not enough:
    # it names the suite even when the client aborted on the certificate.
    fin_sent = any(x[0] == "sent" and x[1] == "Finished" for x in msgs)
    fin_recv = any(x[0] == "received" and x[1] == "Finished" for x in msgs)
    if m.group(2) == "(NONE)" or not (fin_sent and fin_recv):
        lab["handshake"] = "failed"
        errs = [l for l in out.splitlines() if ":error:" in l or l.startswith("verify error")]
        ev.extend(errs[:2])
        ev.append(f"-trace: Finished sent={fin_sent} received={fin_recv}")
        if shs:  # the server did answer: version and suite are in its ServerHello
            body = shs[-1][2]
            txt = "\n".join(body)
            cm = re.search(r"cipher_suite \{0x[0-9A-Fa-f]+, 0x[0-9A-Fa-f]+\} (\S+)", txt)
            if "supported_versions(43)" in txt and "TLS 1.3 (772)" in txt:
                lab["version"] = "TLS1.3"
            else:
                vm = re.search(r"server_version=0x[0-9a-fA-F]+ \(TLS 1\.([0-2])\)", txt)
                if vm:
                    lab["version"] = f"TLS1.{vm.group(1)}"
            if cm:
                lab["cipher"] = cm.group(1)
                ev.append(f"-trace ServerHello: {cm.group(0).strip()}")
    else:
        lab["version"] = OSSL_VERSION[m.group(2)]
        lab["cipher"] = iana_cipher(m.group(3))
        if m.group(1) == "Reused":
            lab["handshake"] = "resumed"
            if lab["version"] == "TLS1.3":
                lab["resumption"] = "psk"
            elif session_in and session_in["_had_ticket"]:
                lab["resumption"] = "ticket"
            else:
                lab["resumption"] = "session_id"
        else:
            lab["handshake"] = "full"
            lab["resumption"] = None
    ed = first_line(out, r"^Early data was (not sent|accepted|rejected)")
    if ed:
        lab["early_data"] = {"not sent": "none"}.get(ed.group(1), ed.group(1))
        ev.append(ed.group(0))
    elif not early_file:
        lab["early_data"] = "none"  # no -early_data: nothing sent, by construction
    # What the client offered for resumption is fixed by construction: the
    # session it was given (or none).
    if session_in is None:
        lab["offered"] = []
    elif session_in["version"] == "TLS1.3":
        lab["offered"] = ["psk"]
    elif session_in["_had_ticket"]:
        lab["offered"] = ["ticket"]
    else:
        lab["offered"] = ["session_id"]
    lab["alpn"] = [alpn] if alpn else []
    if alpn:
        am = first_line(out, r"^ALPN protocol: .*$")
        if am:
            ev.append(am.group(0))
    else:
        am = first_line(out, r"^No ALPN negotiated$")
        if am:
            ev.append(am.group(0))
    # Did the session printed by this run carry a ticket (TLS 1.2)?
    sess = out.split("SSL-Session:", 1)[1] if "SSL-Session:" in out else ""
    lab["_had_ticket"] = "TLS session ticket:" in sess.split("---", 1)[0]
    if lab["_had_ticket"] and lab.get("version") == "TLS1.2":
        ev.append("SSL-Session: TLS session ticket: present")
    lab["evidence"] = " | ".join(ev)
    return lab


def gnutls_cli_labels(rc, out, *, resumption_kind, sni=HOST):
    """Labels for both connections of one `gnutls-cli --resume` run."""
    parts = out.split("- Connecting again- trying to resume previous session")
    if len(parts) != 2:
        raise Fail(f"gnutls-cli did not reconnect (rc={rc}):\n{out[-2000:]}")
    conns = []
    for i, part in enumerate(parts):
        ver = first_line(part, r"^- Version: (\S+)$")
        cip = first_line(part, r"^- Cipher: (\S+)$")
        mac = first_line(part, r"^- MAC: (\S+)$")
        kx = first_line(part, r"^- Key Exchange: (\S+)$")
        desc = first_line(part, r"^- Description: .*$")
        done = first_line(part, r"^- (Resume )?Handshake was completed$")
        if not (ver and cip and mac and done):
            raise Fail(f"gnutls-cli connection {i + 1} did not complete:\n{part[-2000:]}")
        resumed = "*** This is a resumed session" in part
        version = ver.group(1)
        lab = {
            "sni": sni, "version": version,
            "cipher": gnutls_iana_cipher(version, kx.group(1) if kx else None, cip.group(1),
                                         mac.group(1)),
            "handshake": "resumed" if resumed else "full",
            "resumption": resumption_kind if resumed else None,
            "offered": [] if i == 0 else [resumption_kind],
            "early_data": "none", "alpn": [],
        }
        ev = [x.group(0) for x in (desc, ver, kx, cip, mac, done) if x]
        if resumed:
            ev.append("*** This is a resumed session")
        lab["evidence"] = " | ".join(ev)
        conns.append(lab)
    return conns


def parse_nginx_log(path):
    entries = []
    for line in Path(path).read_text().splitlines():
        kv = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        kv["_raw"] = line
        entries.append(kv)
    return entries


def nginx_labels(e):
    lab = {
        "version": OSSL_VERSION[e["protocol"]],
        "cipher": iana_cipher(e["cipher"]),
        "handshake": "resumed" if e["reused"] == "r" else "full",
        "sni": e["sni"],
    }
    return lab


# --------------------------------------------------------------------------
# Scenarios.  Each returns (description, label_sources, connections); a
# connection without "client_port" gets it from the SYNs in the capture, in
# order.
# --------------------------------------------------------------------------

SCENARIOS = []


def scenario(name):
    def deco(fn):
        SCENARIOS.append((name, fn))
        return fn
    return deco


OSSL_SRC = ("openssl s_client output (New/Reused line, 'Early data was ...' line, "
            "ALPN line, -trace handshake dump), the sessions handed to -sess_in, and the "
            "server command line")


def conn(port, ip=4, **lab):
    c = {"server_port": port, "ip_version": ip, "sni": HOST}
    c.update(lab)
    return c


def strip_private(lab):
    return {k: v for k, v in lab.items() if not k.startswith("_")}


def ossl_resumption(ctx, server_args, client_args, n_resume, ipv6=False):
    """One full handshake writing a session, then n_resume resumptions with it."""
    srv = ctx.s_server(server_args, ipv6=ipv6)
    sess = ctx.path("sess.pem")
    conns = []
    first = s_client_labels(ctx.s_client(client_args + ["-sess_out", sess], HTTP_REQ_OK,
                                         ipv6=ipv6))
    conns.append(first)
    for _ in range(n_resume):
        conns.append(s_client_labels(ctx.s_client(client_args + ["-sess_in", sess],
                                                  HTTP_REQ_OK, ipv6=ipv6),
                                     session_in=first))
    ctx.stop_server(srv)
    ip = 6 if ipv6 else 4
    return [conn(ctx.port, ip, **strip_private(c)) for c in conns]


def ossl_client_args(ctx, *extra):
    return ["-CAfile", ctx.pki["ca"], "-verify_return_error", "-verify_hostname", HOST] + list(extra)


@scenario("openssl-openssl-tls12-sessionid")
def sc_tls12_sessionid(ctx):
    conns = ossl_resumption(ctx, ["-WWW", "-tls1_2", "-no_ticket"],
                            ossl_client_args(ctx, "-tls1_2"), 2)
    for c in conns[1:]:
        if c["handshake"] != "resumed" or c["resumption"] != "session_id":
            raise Fail(f"expected session-ID resumption, got {c}")
    return ("openssl s_server -WWW -tls1_2 -no_ticket (no tickets, so a reuse can only be "
            "a session-ID resumption); s_client makes one full handshake (-sess_out) and "
            "two resumptions (-sess_in), each fetching /ok.txt over HTTP/1.0",
            OSSL_SRC, conns)


@scenario("openssl-openssl-tls12-ticket")
def sc_tls12_ticket(ctx):
    conns = ossl_resumption(ctx, ["-WWW", "-tls1_2", "-no_cache"],
                            ossl_client_args(ctx, "-tls1_2"), 2)
    for c in conns[1:]:
        if c["handshake"] != "resumed" or c["resumption"] != "ticket":
            raise Fail(f"expected ticket resumption, got {c}")
    return ("openssl s_server -WWW -tls1_2 -no_cache (session tickets on, the default; no "
            "session cache, so a reuse can only be a ticket resumption); s_client makes "
            "one full handshake (-sess_out, its session carries the ticket) and two "
            "resumptions with that ticket (-sess_in), each fetching /ok.txt",
            OSSL_SRC, conns)


@scenario("openssl-openssl-tls13-psk")
def sc_tls13_psk(ctx):
    conns = ossl_resumption(ctx, ["-WWW", "-tls1_3"],
                            ossl_client_args(ctx, "-tls1_3"), 2)
    for c in conns[1:]:
        if c["handshake"] != "resumed":
            raise Fail(f"expected PSK resumption, got {c}")
    return ("openssl s_server -WWW -tls1_3; s_client makes one full handshake (-sess_out) "
            "and two PSK resumptions from the saved ticket (-sess_in), each fetching /ok.txt",
            OSSL_SRC, conns)


@scenario("openssl-openssl-tls13-psk-ipv6")
def sc_tls13_psk_v6(ctx):
    conns = ossl_resumption(ctx, ["-WWW", "-tls1_3", "-alpn", "http/1.1"],
                            ossl_client_args(ctx, "-tls1_3", "-alpn", "http/1.1"), 1,
                            ipv6=True)
    for c, lab in zip(conns, ("full", "resumed")):
        if c["handshake"] != lab:
            raise Fail(f"expected {lab}, got {c}")
        c["alpn"] = ["http/1.1"]
    return ("IPv6 (::1): openssl s_server -WWW -tls1_3 -alpn http/1.1; s_client -alpn "
            "http/1.1 makes one full handshake (-sess_out) and one PSK resumption (-sess_in)",
            OSSL_SRC, conns)


def early_data_run(ctx, server_args, restart=False):
    """Full handshake to get a ticket, then a resumption attempt with 0-RTT data.
    s_server runs in its default (echo-to-stdout) mode: only that mode reads
    early data (s_server -early_data is not supported with -www/-WWW)."""
    early = ctx.path("early.txt")
    early.write_bytes(b"early data from s_client\n")
    sess = ctx.path("sess.pem")
    srv = ctx.s_server(server_args)
    first = s_client_labels(ctx.s_client(ossl_client_args(ctx, "-tls1_3", "-sess_out", sess),
                                         b"hello from s_client\n", hold=1.0))
    if restart:
        ctx.stop_server(srv)
        srv = ctx.s_server(server_args)
    second = s_client_labels(ctx.s_client(ossl_client_args(ctx, "-tls1_3", "-sess_in", sess,
                                                           "-early_data", early),
                                          b"", hold=1.0), session_in=first, early_file=True)
    ctx.stop_server(srv)
    srvlogs = sorted(ctx.tmp.glob("*-s_server.log"))
    return first, second, "\n".join(p.read_text(errors="replace") for p in srvlogs)


@scenario("openssl-openssl-tls13-0rtt-accepted")
def sc_0rtt_accepted(ctx):
    first, second, srvlog = early_data_run(ctx, ["-tls1_3", "-early_data"])
    if second["handshake"] != "resumed" or second.get("early_data") != "accepted":
        raise Fail(f"expected resumed + early data accepted, got {second}")
    if "Early data received:" not in srvlog:
        raise Fail("s_server did not report the early data")
    second["evidence"] += " | s_server: Early data received:"
    conns = [conn(ctx.port, **strip_private(c)) for c in (first, second)]
    return ("openssl s_server -tls1_3 -early_data (echo mode); s_client does a full handshake "
            "(-sess_out), then resumes (-sess_in) sending a file as 0-RTT early data "
            "(-early_data FILE), which the server accepts",
            OSSL_SRC + "; s_server's 'Early data received:' line", conns)


@scenario("openssl-openssl-tls13-0rtt-rejected-restart")
def sc_0rtt_restart(ctx):
    first, second, _ = early_data_run(ctx, ["-tls1_3", "-early_data"], restart=True)
    if second["handshake"] != "full" or second.get("early_data") != "rejected":
        raise Fail(f"expected full handshake + early data rejected, got {second}")
    conns = [conn(ctx.port, **strip_private(c)) for c in (first, second)]
    return ("openssl s_server -tls1_3 -early_data; s_client does a full handshake "
            "(-sess_out); the server is restarted (new ticket keys); s_client then offers the "
            "old ticket as PSK with 0-RTT early data: the PSK is refused, so the handshake is "
            "full and the early data rejected",
            OSSL_SRC, conns)


@scenario("openssl-openssl-tls13-0rtt-rejected-psk-ok")
def sc_0rtt_psk_ok(ctx):
    # Without -early_data, s_server would issue tickets with max_early_data 0
    # and the client would not even try 0-RTT.  -max_early_data makes the
    # tickets allow early data, but since s_server only reads early data with
    # -early_data, OpenSSL rejects it while still accepting the PSK.
    first, second, _ = early_data_run(ctx, ["-tls1_3", "-max_early_data", "16384"])
    if second["handshake"] != "resumed" or second.get("early_data") != "rejected":
        raise Fail(f"expected resumed + early data rejected, got {second}")
    conns = [conn(ctx.port, **strip_private(c)) for c in (first, second)]
    return ("openssl s_server -tls1_3 -max_early_data 16384 without -early_data (tickets "
            "allow 0-RTT but the server never reads early data); s_client resumes with "
            "-sess_in -early_data FILE: PSK accepted, early data rejected",
            OSSL_SRC, conns)


@scenario("openssl-openssl-tls13-hrr")
def sc_hrr(ctx):
    srv = ctx.s_server(["-WWW", "-tls1_3", "-groups", "secp384r1"])
    lab = s_client_labels(ctx.s_client(ossl_client_args(ctx, "-tls1_3", "-groups",
                                                        "X25519:secp384r1"), HTTP_REQ_OK))
    ctx.stop_server(srv)
    if not lab["hrr"] or lab["handshake"] != "full":
        raise Fail(f"expected a HelloRetryRequest, got {lab}")
    return ("openssl s_server -WWW -tls1_3 -groups secp384r1; s_client -groups "
            "X25519:secp384r1 sends only an X25519 key share, so the server answers with a "
            "HelloRetryRequest for secp384r1; the handshake then completes",
            OSSL_SRC, [conn(ctx.port, **strip_private(lab))])


@scenario("openssl-openssl-tls12-version-mismatch")
def sc_version_mismatch(ctx):
    srv = ctx.s_server(["-WWW", "-tls1_3"])
    lab = s_client_labels(ctx.s_client(ossl_client_args(ctx, "-tls1_2"), HTTP_REQ_OK))
    ctx.stop_server(srv)
    if lab["handshake"] != "failed" or "alert protocol version" not in lab["evidence"]:
        raise Fail(f"expected protocol_version alert, got {lab}")
    return ("openssl s_server -tls1_3 (TLS 1.3 only) and s_client -tls1_2 (TLS 1.2 only): "
            "the server rejects the ClientHello with a protocol_version alert",
            OSSL_SRC, [conn(ctx.port, **strip_private(lab))])


def untrusted(ctx, ver):
    srv = ctx.s_server(["-WWW", f"-tls1_{ver}"])
    # No trust anchors at all: the chain cannot be verified and
    # -verify_return_error makes s_client abort with an unknown_ca alert.
    lab = s_client_labels(ctx.s_client(["-no-CAfile", "-no-CApath", "-no-CAstore",
                                        "-verify_return_error", f"-tls1_{ver}"], HTTP_REQ_OK))
    ctx.stop_server(srv)
    if lab["handshake"] != "failed" or "certificate verify failed" not in lab["evidence"]:
        raise Fail(f"expected a certificate verification failure, got {lab}")
    return ([conn(ctx.port, **strip_private(lab))])


@scenario("openssl-openssl-tls12-untrusted-cert")
def sc_untrusted12(ctx):
    return ("openssl s_server -WWW -tls1_2; s_client -verify_return_error with no trusted CA "
            "aborts the handshake after the server's Certificate (alert unknown_ca)",
            OSSL_SRC, untrusted(ctx, 2))


@scenario("openssl-openssl-tls13-untrusted-cert")
def sc_untrusted13(ctx):
    return ("openssl s_server -WWW -tls1_3; s_client -verify_return_error with no trusted CA "
            "aborts the handshake after the server's (encrypted) Certificate "
            "(encrypted alert unknown_ca)",
            OSSL_SRC, untrusted(ctx, 3))


# ---- GnuTLS ----------------------------------------------------------------

GNUTLS_SRC = ("gnutls-cli -V output ('- Version:', '- Cipher:', '- MAC:', '- Key Exchange:', "
              "'*** This is a resumed session'), gnutls-serv's 'Accepted connection ... port N' "
              "lines, and the server/client command lines")


def gnutls_resume(ctx, prio, resumption_kind, server_extra=(), ipv6=False):
    srv = ctx.gnutls_serv(["--priority", prio] + list(server_extra))
    rc, out = ctx.gnutls_cli(["--priority", prio, "--resume"], HTTP_REQ_ROOT, ipv6=ipv6)
    time.sleep(0.3)
    ctx.stop_server(srv)
    labs = gnutls_cli_labels(rc, out, resumption_kind=resumption_kind)
    if labs[0]["handshake"] != "full" or labs[1]["handshake"] != "resumed":
        raise Fail(f"gnutls-cli did not resume: {labs}")
    # gnutls-serv reports each client's port: use it, the SYN order must agree.
    ports = [int(p) for p in re.findall(r"Accepted connection from IPv[46] \S+ port (\d+)",
                                        srv.logfile.read_text(errors="replace"))]
    if len(ports) != 2:
        raise Fail(f"gnutls-serv reported {len(ports)} connections, expected 2")
    ip = 6 if ipv6 else 4
    out_conns = []
    for lab, port in zip(labs, ports):
        lab["evidence"] += f" | gnutls-serv: Accepted connection ... port {port}"
        out_conns.append(conn(ctx.port, ip, client_port=port, **lab))
    return out_conns


@scenario("gnutls-gnutls-tls12-ticket")
def sc_gnutls12_ticket(ctx):
    p = "NORMAL:-VERS-ALL:+VERS-TLS1.2"
    return (f"gnutls-serv --http --nodb --priority {p} (session tickets enabled, the default; "
            "no session cache, so a reuse can only be a ticket resumption); gnutls-cli "
            "--resume: a full handshake, then a resumption with the session ticket the "
            "server issued",
            GNUTLS_SRC, gnutls_resume(ctx, p, "ticket", ["--nodb"]))


@scenario("gnutls-gnutls-tls12-sessionid-ipv6")
def sc_gnutls12_sid(ctx):
    p = "NORMAL:-VERS-ALL:+VERS-TLS1.2"
    return (f"IPv6 (::1): gnutls-serv --http --noticket --priority {p} (no tickets, so "
            "resumption uses the server's session cache by session ID); gnutls-cli --resume: "
            "a full handshake, then a session-ID resumption",
            GNUTLS_SRC, gnutls_resume(ctx, p, "session_id", ["--noticket"], ipv6=True))


@scenario("gnutls-gnutls-tls13-psk")
def sc_gnutls13(ctx):
    p = "NORMAL:-VERS-ALL:+VERS-TLS1.3"
    return (f"gnutls-serv --http --priority {p}; gnutls-cli --resume: a full handshake, then "
            "a PSK resumption with the ticket received on the first connection",
            GNUTLS_SRC, gnutls_resume(ctx, p, "psk"))


# ---- nginx + curl ----------------------------------------------------------

NGINX_CONFIGS = {
    "nocache-notickets": ("off", "off"),
    "cache-only": ("shared:SSL:1m", "off"),
    "tickets-only": ("off", "on"),
}

CURL_SRC = ("nginx access log ($remote_port $ssl_session_reused $ssl_protocol $ssl_cipher "
            "$ssl_server_name $ssl_early_data), curl -w '%{local_port} %{http_version}' and "
            "curl -v ('SSL connection using', 'ALPN: offers', 'SSL re-using session ID'), "
            "and the nginx configuration")


def curl_nginx(ctx, ver, cfg):
    cache, tickets = NGINX_CONFIGS[cfg]
    srv = ctx.nginx(cache, tickets)
    n = 4
    args = ["--tlsv1.2", "--tls-max", "1.2"] if ver == "TLS1.2" else ["--tlsv1.3"]
    wout, vout = ctx.curl(args, n)
    time.sleep(0.3)
    ctx.stop_server(srv)
    entries = parse_nginx_log(srv.access_log)
    if len(entries) != n:
        raise Fail(f"nginx logged {len(entries)} requests, curl made {n}")
    conns = curl_labels(ctx, wout, vout, entries, ver, cache, tickets, n)
    desc = (f"nginx with ssl_session_cache {cache}; ssl_session_tickets {tickets}; one curl "
            f"process ({' '.join(args)} --http1.1) fetches the URL {n} times with "
            "'Connection: close', so each fetch is a new TCP connection that may reuse the "
            "TLS session")
    return desc, CURL_SRC, conns


def curl_labels(ctx, wout, vout, entries, ver, cache, tickets, n, ip=4):
    """Labels of one curl process's n connections (its -w and -v output) from
    the nginx access log lines of their ports; ver is the version nginx must
    have negotiated, cache/tickets its configuration at the time."""
    wl = [dict(t.split("=", 1) for t in line.split()) for line in wout.splitlines() if line]
    blocks = re.split(r"^\* Connected to .*$", vout, flags=re.M)[1:]
    if not (len(wl) == len(blocks) == n):
        raise Fail(f"curl disagrees with itself on the connection count: -w {len(wl)}, "
                   f"-v {len(blocks)}, expected {n}")
    by_port = {int(e["port"]): e for e in entries}
    conns = []
    for w, blk in zip(wl, blocks):
        port = int(w["local_port"])
        e = by_port.get(port)
        if e is None:
            raise Fail(f"no nginx log line for curl port {port}")
        lab = nginx_labels(e)
        cm = re.search(r"^\* SSL connection using (\S+) / (\S+)$", blk, re.M)
        if not cm or OSSL_VERSION[cm.group(1)] != lab["version"] or \
                iana_cipher(cm.group(2)) != lab["cipher"]:
            raise Fail(f"curl and nginx disagree on version/cipher for port {port}")
        if lab["version"] != ver:
            raise Fail(f"expected {ver}, nginx says {lab['version']}")
        reusing = "SSL re-using session ID" in blk
        # curl (OpenSSL backend) never sends a TLS 1.2 SessionTicket extension,
        # so a TLS 1.2 session it re-uses is offered by session ID.
        kind = "psk" if ver == "TLS1.3" else "session_id"
        lab["offered"] = [kind] if reusing else []
        if lab["handshake"] == "resumed":
            if not reusing:
                raise Fail(f"nginx resumed port {port} but curl offered no session")
            # By construction: TLS 1.3 resumption is always a PSK; with TLS 1.2
            # the server decides by its configuration.
            lab["resumption"] = "psk" if ver == "TLS1.3" else (
                "ticket" if tickets == "on" and cache == "off" else "session_id")
        else:
            lab["resumption"] = None
        lab["early_data"] = "none"  # curl 7.88 cannot send early data; nginx logged ''
        if e["early"] not in ("", "-"):
            raise Fail(f"nginx reports early data for curl connection {port}")
        lab["alpn"] = ["http/1.1"]  # --http1.1: curl offers only http/1.1
        if "ALPN: offers http/1.1" not in blk:
            raise Fail("curl did not report its ALPN offer")
        evid = [e["_raw"], f"curl -w: {' '.join(f'{k}={v}' for k, v in w.items())}",
                cm.group(0).lstrip("* "), "curl: ALPN: offers http/1.1"]
        if reusing:
            evid.append("curl: SSL re-using session ID")
        lab["evidence"] = " | ".join(evid)
        conns.append(conn(ctx.port, ip, client_port=port, **lab))
    return conns


def _register_curl_nginx():
    for ver, vname in (("TLS1.2", "tls12"), ("TLS1.3", "tls13")):
        for cfg in NGINX_CONFIGS:
            def fn(ctx, ver=ver, cfg=cfg):
                return curl_nginx(ctx, ver, cfg)
            SCENARIOS.append((f"curl-nginx-{vname}-{cfg}", fn))


_register_curl_nginx()


def s_client_nginx(ctx, cache, tickets, early, runs):
    """runs: list of (client args, stdin, uses_session) for s_client vs nginx."""
    srv = ctx.nginx(cache, tickets, early)
    sess = ctx.path("sess.pem")
    labs = []
    first = None
    for args, stdin, use_sess in runs:
        extra = ["-sess_in", sess] if use_sess else ["-sess_out", sess]
        lab = s_client_labels(ctx.s_client(ossl_client_args(ctx, *args, *extra), stdin,
                                           hold=1.5),
                              session_in=first if use_sess else None,
                              alpn="http/1.1", early_file="-early_data" in args)
        if not use_sess:
            first = lab
        labs.append(lab)
    time.sleep(0.3)
    ctx.stop_server(srv)
    return labs, parse_nginx_log(srv.access_log)


def merge_nginx(labs, entries, ports):
    """Attach ports (SYN order) to s_client labels and cross-check with nginx."""
    by_port = {int(e["port"]): e for e in entries}
    conns = []
    for lab, port in zip(labs, ports):
        e = by_port.get(port)
        if e is None:
            raise Fail(f"no nginx log line for port {port}")
        ng = nginx_labels(e)
        for k in ("version", "cipher", "handshake"):
            if ng[k] != lab[k]:
                raise Fail(f"nginx and s_client disagree on {k} for port {port}: "
                           f"{ng[k]} vs {lab[k]}")
        ng_early = "accepted" if e["early"] == "1" else None
        if (lab.get("early_data") == "accepted") != (ng_early == "accepted"):
            raise Fail(f"nginx and s_client disagree on early data for port {port}")
        lab["sni"] = ng["sni"]
        lab["evidence"] += " | nginx: " + e["_raw"]
        conns.append(lab)
    return conns


@scenario("openssl-nginx-tls13-0rtt")
def sc_nginx_0rtt(ctx):
    early = ctx.path("early-req.txt")
    early.write_bytes(HTTP_REQ_ROOT)
    labs, entries = s_client_nginx(ctx, "off", "on", "on", [
        (["-tls1_3", "-alpn", "http/1.1"], HTTP_REQ_ROOT, False),
        (["-tls1_3", "-alpn", "http/1.1", "-early_data", early], b"", True),
    ])
    if labs[1].get("early_data") != "accepted":
        raise Fail(f"nginx did not accept early data: {labs[1]}")
    ctx.deferred_ports = lambda ports: merge_nginx(labs, entries, ports)
    return ("nginx with ssl_early_data on (tickets on, cache off); openssl s_client -tls1_3 "
            "does a full handshake with an HTTP/1.0 request (-sess_out), then resumes "
            "(-sess_in) sending the HTTP request as 0-RTT early data (-early_data FILE)",
            OSSL_SRC + "; nginx access log ($remote_port $ssl_session_reused $ssl_protocol "
            "$ssl_cipher $ssl_server_name $ssl_early_data)",
            None)


@scenario("openssl-nginx-tls12-tickets-only")
def sc_nginx_tls12_ticket(ctx):
    labs, entries = s_client_nginx(ctx, "off", "on", "off", [
        (["-tls1_2", "-alpn", "http/1.1"], HTTP_REQ_ROOT, False),
        (["-tls1_2", "-alpn", "http/1.1"], HTTP_REQ_ROOT, True),
    ])
    if labs[1]["handshake"] != "resumed" or labs[1]["resumption"] != "ticket":
        raise Fail(f"expected TLS 1.2 ticket resumption with nginx, got {labs[1]}")
    ctx.deferred_ports = lambda ports: merge_nginx(labs, entries, ports)
    return ("nginx with ssl_session_cache off; ssl_session_tickets on; openssl s_client "
            "-tls1_2 (which, unlike curl, sends the SessionTicket extension) does a full "
            "handshake (-sess_out) and a ticket resumption (-sess_in)",
            OSSL_SRC + "; nginx access log ($remote_port $ssl_session_reused $ssl_protocol "
            "$ssl_cipher $ssl_server_name $ssl_early_data)",
            None)


# ---- cross-implementation --------------------------------------------------

@scenario("gnutls-openssl-tls13-psk")
def sc_gnutls_vs_openssl(ctx):
    p = "NORMAL:-VERS-ALL:+VERS-TLS1.3"
    srv = ctx.s_server(["-WWW", "-tls1_3"])
    rc, out = ctx.gnutls_cli(["--priority", p, "--resume"], HTTP_REQ_OK)
    ctx.stop_server(srv)
    labs = gnutls_cli_labels(rc, out, resumption_kind="psk")
    if labs[1]["handshake"] != "resumed":
        raise Fail(f"gnutls-cli did not resume against s_server: {labs}")
    return ("openssl s_server -WWW -tls1_3; gnutls-cli --resume: a full handshake, then a "
            "PSK resumption",
            "gnutls-cli -V output ('- Version:', '- Cipher:', '- MAC:', "
            "'*** This is a resumed session') and the command lines",
            [conn(ctx.port, **lab) for lab in labs])


@scenario("openssl-gnutls-tls12-ticket")
def sc_openssl_vs_gnutls(ctx):
    srv = ctx.gnutls_serv(["--priority", "NORMAL:-VERS-ALL:+VERS-TLS1.2", "--nodb"])
    sess = ctx.path("sess.pem")
    first = s_client_labels(ctx.s_client(ossl_client_args(ctx, "-tls1_2", "-sess_out", sess),
                                         HTTP_REQ_ROOT))
    second = s_client_labels(ctx.s_client(ossl_client_args(ctx, "-tls1_2", "-sess_in", sess),
                                          HTTP_REQ_ROOT), session_in=first)
    ctx.stop_server(srv)
    if second["handshake"] != "resumed" or second["resumption"] != "ticket":
        raise Fail(f"expected a ticket resumption, got {second}")
    return ("gnutls-serv --http --nodb with TLS 1.2 only (tickets enabled, no session cache); "
            "openssl s_client -tls1_2 "
            "does a full handshake (-sess_out, the session carries a ticket) and a ticket "
            "resumption (-sess_in)",
            OSSL_SRC, [conn(ctx.port, **strip_private(c)) for c in (first, second)])


# ---- a capture spanning a change -------------------------------------------

# A capture that spans a configuration change (the before/after time series of
# the HTML report and `--window`): nginx first serves TLS 1.2 only with no
# session cache and no tickets, so nothing can be resumed; then `nginx -s
# reload` enables TLS 1.3 and session tickets.  In each phase two curl
# processes (one over IPv4, one over IPv6, started half a second apart) fetch
# UPGRADE_FETCHES times at one fetch a second, so a connection starts about
# every 0.5 s.  New curl processes after the reload: a curl holding no
# session makes the first fetch of each phase by construction, and the
# `offered` label stays exact (a TLS 1.2 session carried across the reload
# would be offered, or not, by OpenSSL's own rules).
UPGRADE_FETCHES = 16
UPGRADE_BEFORE = {"cache": "off", "tickets": "off", "protocols": "TLSv1.2"}
UPGRADE_AFTER = {"cache": "off", "tickets": "on", "protocols": "TLSv1.2 TLSv1.3"}


@scenario("curl-nginx-upgrade")
def sc_curl_nginx_upgrade(ctx):
    n = UPGRADE_FETCHES
    srv = ctx.nginx(ipv6=True, **UPGRADE_BEFORE)
    conns = []
    for phase, (cfg, ver) in enumerate(((UPGRADE_BEFORE, "TLS1.2"), (UPGRADE_AFTER, "TLS1.3"))):
        if phase:
            reload_log = ctx.nginx_reload(srv, ipv6=True, **cfg)
            log("nginx reloaded: " + " / ".join(
                l.split("] ", 1)[-1] for l in reload_log.splitlines() if "reconfiguring" in l))
        started = []
        for ipv6 in (False, True):
            started.append((ipv6, ctx.curl_spawn(["--rate", "1/s"], n, ipv6=ipv6)))
            time.sleep(0.5)
        outs = [(ipv6, ctx.curl_wait(p, timeout=2 * n + 30)) for ipv6, p in started]
        time.sleep(0.3)
        entries = parse_nginx_log(srv.access_log)
        labs = []
        for ipv6, (wout, vout) in outs:
            got = curl_labels(ctx, wout, vout, entries, ver, cfg["cache"], cfg["tickets"], n,
                              6 if ipv6 else 4)
            # By construction: before the reload nothing is resumable (no
            # cache, no tickets: nginx sends an empty session ID); after it,
            # each curl's first fetch is full and the others resume its ticket.
            want = ["full"] * n if phase == 0 else ["full"] + ["resumed"] * (n - 1)
            if [c["handshake"] for c in got] != want:
                raise Fail(f"phase {phase} IPv{6 if ipv6 else 4}: handshakes "
                           f"{[c['handshake'] for c in got]}, expected {want}")
            if phase == 0 and any(c["offered"] for c in got):
                raise Fail("curl re-used a session nginx made unresumable")
            labs += got
        for c in labs:
            c["evidence"] += (" | before the reload: ssl_protocols TLSv1.2; ssl_session_cache "
                              "off; ssl_session_tickets off" if phase == 0 else
                              " | after `nginx -s reload`: ssl_protocols TLSv1.2 TLSv1.3; "
                              "ssl_session_cache off; ssl_session_tickets on")
        conns += labs
    time.sleep(0.3)
    ctx.stop_server(srv)
    if len(parse_nginx_log(srv.access_log)) != 4 * n:
        raise Fail(f"nginx logged {len(parse_nginx_log(srv.access_log))} requests, "
                   f"curl made {4 * n}")

    def in_syn_order(ports):
        by_port = {c["client_port"]: c for c in conns}
        if len(by_port) != len(conns) or set(by_port) != set(ports):
            raise Fail(f"curl's ports {sorted(by_port)} are not the capture's SYNs {ports} "
                       "(an IPv4 and an IPv6 client drew the same port? run it again)")
        return [by_port[p] for p in ports]
    ctx.deferred_ports = in_syn_order
    return (f"nginx listening on 127.0.0.1 and [::1], first with ssl_protocols TLSv1.2, "
            f"ssl_session_cache off and ssl_session_tickets off (no resumption possible); "
            f"two curl processes (--http1.1 --rate 1/s, one over IPv4 and one over IPv6, "
            f"started 0.5 s apart) fetch the URL {n} times each with 'Connection: close'; "
            f"then `nginx -s reload` with ssl_protocols TLSv1.2 TLSv1.3 and "
            f"ssl_session_tickets on (cache still off), and two new curl processes do the "
            f"same: each one's first fetch is a full TLS 1.3 handshake, the other "
            f"{n - 1} resume it with a PSK. A connection about every 0.5 s; the capture "
            f"spans the reload",
            CURL_SRC + "; the configuration before and after `nginx -s reload`", None)



# --------------------------------------------------------------------------
# Capture sanity checks (tshark contradicting a label is a scenario bug).
# --------------------------------------------------------------------------

def verify_capture(pcap, port, conns):
    rows = tshark_fields(pcap, port, "tls.handshake.type",
                         ["tcp.srcport", "tcp.dstport", "tls.handshake.type",
                          "tls.handshake.extension.type", "tls.handshake.random",
                          "tls.handshake.session_id_length"])
    per = {}
    for row in rows:
        row += [""] * (6 - len(row))
        src, dst, types, exts, rnd, sidlen = row
        client = int(dst) if int(src) == port else int(src)
        d = per.setdefault(client, {"ch": [], "sh": [], "types_from_server": set()})
        tl = [int(t) for t in types.split(",") if t]
        el = [int(x) for x in exts.split(",") if x]
        if int(src) == port:
            d["types_from_server"].update(tl)
            if 2 in tl:
                d["sh"].append((el, rnd.replace(":", "").lower()))
        elif 1 in tl:
            d["ch"].append(el)
            d.setdefault("ch_sid", []).append(int(sidlen.split(",")[0] or 0))
    hrr_rand = ("cf21ad74" + HRR_RANDOM_BYTES).lower()
    problems = []
    for c in conns:
        p = c["client_port"]
        d = per.get(p, {"ch": [], "sh": [], "types_from_server": set()})
        where = f"port {p}"
        if not d["ch"]:
            problems.append(f"{where}: no ClientHello")
            continue
        real_sh = [s for s in d["sh"] if s[1] != hrr_rand]
        hrrs = [s for s in d["sh"] if s[1] == hrr_rand]
        if "hrr" in c:
            if c["hrr"] != bool(hrrs) or len(d["ch"]) != (2 if c["hrr"] else 1):
                problems.append(f"{where}: hrr={c['hrr']} but {len(hrrs)} HRR, "
                                f"{len(d['ch'])} ClientHellos")
        if c["handshake"] == "failed":
            continue
        if not real_sh:
            problems.append(f"{where}: no ServerHello")
            continue
        sh_exts = real_sh[-1][0]
        if c["version"] == "TLS1.2":
            has_cert = 11 in d["types_from_server"]
            if c["handshake"] == "resumed" and has_cert:
                problems.append(f"{where}: resumed TLS1.2 but server sent Certificate")
            if c["handshake"] == "full" and not has_cert:
                problems.append(f"{where}: full TLS1.2 but no Certificate")
            if c.get("resumption") == "ticket" and 35 not in d["ch"][0]:
                problems.append(f"{where}: ticket resumption without SessionTicket ext")
        # A client that also offers TLS 1.3 sends a random legacy session ID
        # (compatibility mode), which offers nothing: only check the others.
        if c["version"] == "TLS1.2" and "offered" in c and 43 not in d["ch"][0]:
            sid = d["ch_sid"][0]
            if ("session_id" in c["offered"] and sid == 0) or (not c["offered"] and sid):
                problems.append(f"{where}: offered={c['offered']} but ClientHello "
                                f"session_id length {sid}")
        if c["version"] == "TLS1.3":
            if (c["handshake"] == "resumed") != (41 in sh_exts):
                problems.append(f"{where}: handshake={c['handshake']} but ServerHello "
                                f"pre_shared_key={41 in sh_exts}")
        if "offered" in c and c["version"] == "TLS1.3":
            if ("psk" in c["offered"]) != (41 in d["ch"][0]):
                problems.append(f"{where}: offered={c['offered']} but ClientHello "
                                f"pre_shared_key={41 in d['ch'][0]}")
        if "early_data" in c:
            if (c["early_data"] != "none") != (42 in d["ch"][0]):
                problems.append(f"{where}: early_data={c['early_data']} but ClientHello "
                                f"early_data ext={42 in d['ch'][0]}")
        if "alpn" in c and (bool(c["alpn"]) != (16 in d["ch"][0])):
            problems.append(f"{where}: alpn={c['alpn']} but ClientHello ALPN ext="
                            f"{16 in d['ch'][0]}")
    if problems:
        raise Fail("capture contradicts labels:\n  " + "\n  ".join(problems))


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------

FIELD_ORDER = ["client_port", "server_port", "ip_version", "sni", "version", "cipher",
               "handshake", "resumption", "offered", "early_data", "hrr", "alpn", "evidence"]


def run_scenario(name, fn, port, outdir, tmp, pki, procs):
    ctx = Ctx(name, port, tmp, pki, procs)
    ctx.deferred_ports = None
    if listening(port):
        raise Fail(f"port {port} is already in use")
    pcap_tmp = ctx.path(f"{name}.pcapng")
    cap = Capture(procs, pcap_tmp, port, ctx.tmp)
    cap.start()
    try:
        desc, sources, conns = fn(ctx)
    finally:
        cap.stop()
    ports = syn_client_ports(pcap_tmp, port)
    if ctx.deferred_ports:
        conns = ctx.deferred_ports(ports)
        conns = [conn(port, **strip_private(c)) for c in conns]
    if len(ports) != len(conns):
        raise Fail(f"capture has {len(ports)} connection attempts (SYNs), expected "
                   f"{len(conns)}: {ports}")
    for c, p in zip(conns, ports):
        if "client_port" in c and c["client_port"] != p:
            raise Fail(f"client port mismatch: program says {c['client_port']}, the SYN order "
                       f"says {p}")
        c["client_port"] = p
    conns = [{k: c[k] for k in FIELD_ORDER if k in c} for c in conns]
    verify_capture(pcap_tmp, port, conns)
    size = pcap_tmp.stat().st_size
    if size >= MAX_CAPTURE_BYTES:
        raise Fail(f"capture is {size} bytes (limit {MAX_CAPTURE_BYTES})")
    doc = {"capture": f"{name}.pcapng", "description": desc, "label_sources": sources,
           "connections": conns}
    shutil.copyfile(pcap_tmp, outdir / f"{name}.pcapng")
    (outdir / f"{name}.expected.json").write_text(json.dumps(doc, indent=2) + "\n")
    keylog = ctx.path("keylog.txt")
    if keylog.exists() and keylog.stat().st_size > 0:
        shutil.copyfile(keylog, outdir / f"{name}.keylog")
    return len(conns), size


def check_tools():
    missing = [t for t in ("openssl", "gnutls-serv", "gnutls-cli", "nginx", "curl", "tshark",
                           "dumpcap", "ss") if not shutil.which(t)]
    if missing:
        raise SystemExit(f"missing tools: {' '.join(missing)} (run scripts/install-deps.sh)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="output directory (default: <repo>/pcaps)")
    ap.add_argument("--only", default=None, help="run only scenarios whose name contains this")
    ap.add_argument("--list", action="store_true", help="list scenarios and exit")
    ap.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (logs, keys)")
    args = ap.parse_args()

    planned = [(n, f, BASE_PORT + i) for i, (n, f) in enumerate(SCENARIOS)]
    if args.only:
        planned = [x for x in planned if args.only in x[0]]
    if args.list:
        for n, _, p in planned:
            print(f"{p}  {n}")
        return 0
    if not planned:
        raise SystemExit(f"no scenario matches {args.only!r}")
    check_tools()
    outdir = Path(args.out) if args.out else HERE.parent.parent / "pcaps"
    outdir.mkdir(parents=True, exist_ok=True)

    procs = Procs()

    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    tmp = Path(tempfile.mkdtemp(prefix="tlsrum-gen-pcaps-"))
    failed = []
    try:
        pki = make_pki(tmp / "pki")
        for name, fn, port in planned:
            log(f"{name} (port {port}) ...")
            try:
                n, size = run_scenario(name, fn, port, outdir, tmp, pki, procs)
                log(f"{name}: {n} connections, {size} bytes")
            except Exception as e:  # noqa: BLE001 - report and go on with the others
                failed.append(name)
                if isinstance(e, Fail):
                    log(f"FAILED {name}: {e}")
                else:
                    log(f"FAILED {name}: {e!r}")
                    traceback.print_exc()
                for stale in (outdir / f"{name}.pcapng", outdir / f"{name}.expected.json",
                              outdir / f"{name}.keylog"):
                    if stale.exists():
                        stale.unlink()
            finally:
                procs.stop_all()
    finally:
        procs.stop_all()
        if args.keep_tmp:
            log(f"temp dir kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if failed:
        log(f"{len(failed)} scenario(s) failed: {', '.join(failed)}")
        return 1
    log(f"all {len(planned)} scenarios written to {outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
