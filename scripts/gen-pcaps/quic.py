#!/usr/bin/env python3
"""Generate small real-traffic QUIC captures with ground-truth labels.

Usage: python3 scripts/gen-pcaps/quic.py [--out pcaps] [--only SUBSTRING]
                                         [--list] [--keep-tmp]

Each scenario runs a real aioquic server and client (aioquic's asyncio API,
used directly) over loopback while dumpcap records `udp port N` on `lo`, and
writes `pcaps/aioquic-aioquic-quic-<scenario>.pcapng` with
`<same name>.expected.json` beside it.  Labels come only from aioquic's own
state (the client's TLS context: `session_resumed`, `early_data_accepted`,
the negotiated cipher suite; its connection's Retry and Version Negotiation
bookkeeping) and from the scenario's construction (server `retry=True`, the
session ticket handed to the client, the ALPN list configured).  tlsrum is
never used.  tshark only cross-checks the labels against the packets (Retry,
Version Negotiation and 0-RTT packet counts) and never sets one.

Needs: python3 with aioquic (`pip install aioquic`), openssl, dumpcap,
tshark.  Run as root (capturing on `lo`).  See README.md next to this file.
"""

import argparse
import asyncio
import json
import os
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
BASE_PORT = 14633  # generate.py's TCP scenarios use 14433 and up
MAX_CAPTURE_BYTES = 1 << 20
SERVER_ALPN = ["tlsrum-echo"]
# The client offers two protocols; the label is the offered list.
CLIENT_ALPN = ["h3", "tlsrum-echo"]
REQUEST = b"GET /ok.txt\r\n"
RESPONSE = b"ok\n"


class Fail(Exception):
    """A scenario did not behave as designed; the generator must fail loudly."""


def log(msg):
    print(f"[gen-pcaps/quic] {msg}", flush=True)


# Scenarios: each connection says which session ticket it gets
# ("none", "fresh" = the last ticket the server issued, with its early-data
# permission, or "no-early" = that ticket with the permission removed so the
# client does not offer 0-RTT) and whether it sends its request as 0-RTT.
SCENARIOS = {
    "full": dict(
        desc="aioquic server and client: two connections, each a full handshake (no session ticket given to the client)",
        conns=[dict(ticket="none"), dict(ticket="none")]),
    "resumed": dict(
        desc="full handshake, then a PSK resumption from the ticket it received (the ticket's early-data permission removed, so no early_data offer)",
        conns=[dict(ticket="none"), dict(ticket="no-early")]),
    "0rtt": dict(
        desc="full handshake, then a PSK resumption whose request is sent as 0-RTT data before the handshake completes",
        conns=[dict(ticket="none"), dict(ticket="fresh", early=True)]),
    "0rtt-rejected": dict(
        desc="full handshake, then a PSK resumption whose client offers 0-RTT and sends its request as 0-RTT data; the server accepts the PSK but refuses early data (no early_data in its EncryptedExtensions), so the request is sent again in 1-RTT",
        server_refuses_early_data=True,
        conns=[dict(ticket="none"), dict(ticket="fresh", early=True)]),
    "retry": dict(
        desc="server with retry=True (address validation): every connection gets a Retry first; full, then PSK resumption",
        retry=True,
        conns=[dict(ticket="none"), dict(ticket="no-early")]),
    "v2": dict(
        desc="client prefers QUIC version 2 (RFC 9369): full handshake in v2",
        client_versions="v2",
        conns=[dict(ticket="none")]),
    "vn": dict(
        desc="client's first Initial is QUIC v2, which the server (v1 only) does not speak: Version Negotiation, then a full handshake in v1",
        original_version="v2",
        server_versions="v1",
        conns=[dict(ticket="none")]),
}


def scenario_port(i):
    return BASE_PORT + i


def run(cmd, **kw):
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("timeout", 60)
    p = subprocess.run(cmd, text=True, **kw)
    if p.returncode != 0:
        raise Fail(f"command failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr}")
    return p.stdout


def make_cert(d):
    key, cert = d / "key.pem", d / "cert.pem"
    run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={HOST}",
         "-addext", f"subjectAltName=DNS:{HOST}"])
    return key, cert


class Capture:
    """dumpcap on lo for one UDP port, in its own process group."""

    def __init__(self, path, port, logdir):
        self.path, self.port, self.logdir = Path(path), port, logdir
        self.proc = None

    def start(self):
        if self.path.exists():
            self.path.unlink()
        errlog = self.logdir / f"dumpcap-{self.port}.log"
        with open(errlog, "wb") as out:
            self.proc = subprocess.Popen(
                ["dumpcap", "-q", "-i", "lo", "-f", f"udp port {self.port}", "-w", str(self.path)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        end = time.time() + 15
        while time.time() < end:
            if self.proc.poll() is not None:
                raise Fail(f"dumpcap exited: {errlog.read_text(errors='replace')}")
            if self.path.exists() and self.path.stat().st_size > 0:
                time.sleep(0.5)
                return
            time.sleep(0.05)
        raise Fail("dumpcap did not start capturing within 15s")

    def stop(self):
        if not self.proc:
            return
        time.sleep(0.5)
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
                self.proc.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(5)
        self.proc = None


async def run_scenario(sc, port, key, cert, keylog):
    """Runs the server and the clients; returns one label dict per connection."""
    from aioquic.asyncio import connect, serve
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.packet import QuicProtocolVersion
    from aioquic.tls import CipherSuite

    tickets = {}

    def store_ticket(t):
        tickets[t.ticket] = t

    def fetch_ticket(label):
        return tickets.pop(label, None)

    async def handle_stream(reader, writer):
        await reader.read()
        writer.write(RESPONSE)
        writer.write_eof()

    server_conf = QuicConfiguration(is_client=False, alpn_protocols=SERVER_ALPN)
    server_conf.load_cert_chain(cert, key)
    if sc.get("server_versions") == "v1":
        server_conf.supported_versions = [QuicProtocolVersion.VERSION_1]
    import aioquic.tls as aioquic_tls
    pull_client_hello = aioquic_tls.pull_client_hello
    if sc.get("server_refuses_early_data"):
        # The server side reads the ClientHello through this function: a
        # server that never takes 0-RTT just does not see the offer, so it
        # resumes the PSK and leaves early_data out of EncryptedExtensions.
        def refusing(buf):
            hello = pull_client_hello(buf)
            hello.early_data = False
            return hello
        aioquic_tls.pull_client_hello = refusing
    server = await serve("127.0.0.1", port, configuration=server_conf,
                         stream_handler=lambda r, w: asyncio.ensure_future(handle_stream(r, w)),
                         session_ticket_fetcher=fetch_ticket, session_ticket_handler=store_ticket,
                         retry=sc.get("retry", False))
    received = []
    labels = []
    try:
        for i, c in enumerate(sc["conns"]):
            conf = QuicConfiguration(is_client=True, alpn_protocols=list(CLIENT_ALPN), server_name=HOST)
            conf.load_verify_locations(cert)
            conf.secrets_log_file = keylog
            if sc.get("client_versions") == "v2":
                conf.supported_versions = [QuicProtocolVersion.VERSION_2, QuicProtocolVersion.VERSION_1]
            if sc.get("original_version"):
                conf.original_version = QuicProtocolVersion.VERSION_2
            ticket = None
            if c["ticket"] != "none":
                if not received:
                    raise Fail("no session ticket received on the previous connection")
                ticket = received[-1]
                if c["ticket"] == "no-early":
                    ticket.max_early_data_size = None
                conf.session_ticket = ticket
            offered_early = ticket is not None and ticket.max_early_data_size is not None
            early = bool(c.get("early"))
            async with connect("127.0.0.1", port, configuration=conf, session_ticket_handler=received.append,
                               wait_connected=not early) as client:
                local_port = client._transport.get_extra_info("sockname")[1]
                reader, writer = await client.create_stream()
                writer.write(REQUEST)
                writer.write_eof()
                if early:
                    await client.wait_connected()
                body = await asyncio.wait_for(reader.read(), 10)
                if body != RESPONSE:
                    raise Fail(f"unexpected response {body!r}")
                await asyncio.sleep(0.2)  # let the ticket arrive
                quic = client._quic
                tls = quic.tls
                suite = CipherSuite(tls.key_schedule.cipher_suite).name
                resumed = bool(tls.session_resumed)
                early_accepted = bool(tls.early_data_accepted)
                retries = quic._retry_count
                vn = bool(quic._version_negotiated_incompatible)
                version = quic._version
            if c["ticket"] != "none" and not resumed:
                raise Fail(f"connection {i}: aioquic did not resume")
            if sc.get("retry") and retries != 1:
                raise Fail(f"connection {i}: expected one Retry, aioquic counted {retries}")
            if bool(sc.get("original_version")) != vn:
                raise Fail(f"connection {i}: version negotiation {vn}, expected {bool(sc.get('original_version'))}")
            evidence = (f"aioquic client: session_resumed={resumed} early_data_accepted={early_accepted} "
                        f"cipher={suite} retry_count={retries} version_negotiated={vn} version=0x{version:08x}; "
                        f"ticket given: {c['ticket']}; request sent as 0-RTT: {early}")
            labels.append({
                "client_port": local_port,
                "server_port": port,
                "ip_version": 4,
                "sni": HOST,
                "version": "TLS1.3",
                "cipher": "TLS_" + suite,
                "handshake": "resumed" if resumed else "full",
                "resumption": "psk" if resumed else None,
                "offered": ["psk"] if ticket is not None else [],
                "early_data": ("accepted" if early_accepted else "rejected") if offered_early else "none",
                "retry": bool(retries),
                "version_negotiation": vn,
                "zero_rtt_sent": early,
                "alpn": list(CLIENT_ALPN),
                "evidence": evidence,
            })
            await asyncio.sleep(0.3)
    finally:
        server.close()
        aioquic_tls.pull_client_hello = pull_client_hello
    return labels


def tshark_check(pcap, port, labels):
    """Cross-checks (never sets) labels: Retry, VN and 0-RTT packets per client port."""
    out = run(["tshark", "-r", str(pcap), "-d", f"udp.port=={port},quic", "-Y", "quic",
               "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,",
               "-e", "udp.srcport", "-e", "udp.dstport", "-e", "quic.long.packet_type",
               "-e", "quic.version"])
    per = {}
    for line in out.splitlines():
        f = line.split("\t")
        if len(f) < 4:
            continue
        src, dst, types, versions = int(f[0]), int(f[1]), f[2].split(","), f[3].split(",")
        client = dst if src == port else src
        d = per.setdefault(client, {"retry": 0, "vn": 0, "0rtt": 0})
        for t, v in zip(types, versions + [""] * len(types)):
            if v == "0x00000000":
                d["vn"] += 1
            elif t == "3" and v == "0x00000001" and src == port:
                d["retry"] += 1
            elif t == "1" and v == "0x00000001" and src != port:
                d["0rtt"] += 1
    for l in labels:
        d = per.get(l["client_port"])
        if d is None:
            raise Fail(f"tshark sees no QUIC from client port {l['client_port']}")
        if bool(d["retry"]) != l["retry"]:
            raise Fail(f"port {l['client_port']}: tshark Retry packets {d['retry']}, label retry={l['retry']}")
        if bool(d["vn"]) != l["version_negotiation"]:
            raise Fail(f"port {l['client_port']}: tshark VN packets {d['vn']}, label {l['version_negotiation']}")
        if l["zero_rtt_sent"] and not d["0rtt"]:
            raise Fail(f"port {l['client_port']}: request sent as 0-RTT but tshark sees no 0-RTT packet")


def generate(name, sc, port, outdir, tmp):
    key, cert = make_cert(tmp)
    pcap = tmp / f"{name}.pcapng"
    keylog = open(tmp / f"{name}.keys", "w")
    cap = Capture(pcap, port, tmp)
    cap.start()
    try:
        labels = asyncio.run(asyncio.wait_for(run_scenario(sc, port, key, cert, keylog), 60))
    finally:
        cap.stop()
        keylog.close()
    tshark_check(pcap, port, labels)
    size = pcap.stat().st_size
    if size >= MAX_CAPTURE_BYTES:
        raise Fail(f"capture is {size} bytes (limit {MAX_CAPTURE_BYTES})")
    for l in labels:
        del l["zero_rtt_sent"]
    doc = {
        "capture": f"{name}.pcapng",
        "description": sc["desc"],
        "label_sources": "aioquic client state after each connection (tls.session_resumed, tls.early_data_accepted, "
                         "tls.key_schedule.cipher_suite, the connection's Retry count and incompatible version "
                         "negotiation flag), the session ticket handed to the client, the configured ALPN list and "
                         "server name, and the server's retry setting",
        "connections": labels,
    }
    shutil.copy(pcap, outdir / f"{name}.pcapng")
    # The clients' TLS secrets: `replay --keylog` reads the server's
    # EncryptedExtensions with them (0-RTT accepted or rejected).
    shutil.copy(tmp / f"{name}.keys", outdir / f"{name}.keylog")
    (outdir / f"{name}.expected.json").write_text(json.dumps(doc, indent=2) + "\n")
    log(f"{name}: {len(labels)} connections, {size} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(HERE.parent.parent / "pcaps"))
    ap.add_argument("--only")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    names = [(f"aioquic-aioquic-quic-{k}", v, scenario_port(i)) for i, (k, v) in enumerate(SCENARIOS.items())]
    if args.list:
        for name, sc, port in names:
            print(f"{name}\tudp port {port}\t{sc['desc']}")
        return 0
    missing = [t for t in ("dumpcap", "tshark", "openssl") if not shutil.which(t)]
    if missing:
        print(f"missing tools: {missing}", file=sys.stderr)
        return 1
    try:
        import aioquic  # noqa: F401
    except ImportError:
        print("aioquic is not installed: pip install aioquic", file=sys.stderr)
        return 1
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name, sc, port in names:
        if args.only and args.only not in name:
            continue
        tmp = Path(tempfile.mkdtemp(prefix="tlsrum-quic-"))
        try:
            generate(name, sc, port, outdir, tmp)
        except Exception as e:  # noqa: BLE001 - report every scenario's failure and go on
            failed += 1
            log(f"{name}: FAILED: {e}")
            traceback.print_exc()
            for stale in (outdir / f"{name}.pcapng", outdir / f"{name}.expected.json", outdir / f"{name}.keylog"):
                if stale.exists():
                    stale.unlink()
        finally:
            if args.keep_tmp:
                log(f"kept {tmp}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
