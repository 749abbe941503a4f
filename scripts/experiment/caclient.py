#!/usr/bin/env python3
"""A TLS client that loads a CA bundle either before its ClientHello (as curl
7.87 did: `--mode eager`) or after it, while the server's answer travels (as
curl 7.88 does: `--mode deferred`). Experiment 4 of `make experiment`.

Why not `openssl s_client -CAfile`: it loads the CAfile while setting up,
before it even resolves and connects (strace: the bundle is read, then
`connect()`), so the load shows in no wire gap at all. curl 7.87 loaded it
after `connect()`, in its TLS filter's first step, before SSL_connect() wrote
the ClientHello; this client does the same: connect(), then a fresh
SSLContext per connection (curl builds a new SSL_CTX per connection too), then
load_verify_locations(bundle), then the ClientHello. In deferred mode the
context is wrapped first, the non-blocking handshake sends the ClientHello and
stops for the server's answer, and only then is the bundle loaded into the
context's store (the SSL object verifies against that same X509_STORE when the
Certificate arrives), which is curl 7.88's order.

Makes N sequential connections (plus an optional warm-up connection to
another port, which takes the library's one-time start-up), each a full TLS
1.3 handshake with a fresh context, sends one HTTP/1.1 request with
Connection: close, reads to EOF and prints one JSON line per connection with
times in seconds from the start of that connection, as curl's -w fields:
time_connect (connect() returned), time_appconnect (handshake done),
time_starttransfer (first response byte); and load_start/load_end, when
load_verify_locations() ran.
"""

import argparse
import json
import socket
import ssl
import time
from pathlib import Path

# 150 certificates take about 50 ms to load with OpenSSL 3.0 on the lab's
# machine, as long as Debian's own 144-certificate ca-certificates.crt.
BULK_CERTS = 150


def make_bundle(workdir, lab_crt, n=BULK_CERTS):
    """A CA bundle of n generated self-signed CA certificates (made once and
    kept in workdir) followed by the lab's own certificate, so that
    verification succeeds after loading them all."""
    workdir = Path(workdir)
    bulk = workdir / f"ca-bulk-{n}.pem"
    if not bulk.exists():
        import datetime
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
        key = ec.generate_private_key(ec.SECP256R1())
        start = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)
        pems = []
        for i in range(n):
            name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tlsrum lab"),
                              x509.NameAttribute(NameOID.COMMON_NAME, f"tlsrum bulk CA {i}")])
            cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                    .serial_number(i + 1).not_valid_before(start).not_valid_after(start + datetime.timedelta(days=365))
                    .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                    .sign(key, hashes.SHA256()))
            pems.append(cert.public_bytes(serialization.Encoding.PEM))
        tmp = bulk.with_suffix(".tmp")
        tmp.write_bytes(b"".join(pems))
        tmp.rename(bulk)
    bundle = workdir / f"ca-bundle-{n}.pem"
    bundle.write_bytes(bulk.read_bytes() + Path(lab_crt).read_bytes())
    return bundle


class Conn:
    """TLS over memory BIOs, so that the handshake can stop right after the
    ClientHello is written and before anything is read (on a socket-wrapped
    SSL a non-blocking do_handshake() may already read the server's answer
    and fail verification against the empty store)."""

    def __init__(self, sock, ctx, sni):
        self.sock, self.inc, self.out = sock, ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.inc, self.out, server_hostname=sni)

    def flush(self):
        data = self.out.read()
        if data:
            self.sock.sendall(data)

    def feed(self):
        data = self.sock.recv(65536)
        if data:
            self.inc.write(data)
        else:
            self.inc.write_eof()

    def step(self):
        """One handshake step: True when done; else it sent what it had and
        now waits for the peer (the caller feeds it on the next step)."""
        try:
            self.obj.do_handshake()
            self.flush()
            return True
        except ssl.SSLWantReadError:
            first = not hasattr(self, "_started")
            self._started = True
            self.flush()
            if not first:
                self.feed()
            return False

    def send(self, data):
        self.obj.write(data)
        self.flush()

    def recv(self):
        while True:
            try:
                return self.obj.read(65536)
            except ssl.SSLWantReadError:
                self.feed()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--sni", required=True)
    ap.add_argument("--cafile", help="the lab's own certificate (it is in --bundle; unused)")
    ap.add_argument("--bundle", required=True, help="the CA bundle to load (must hold the server's certificate)")
    ap.add_argument("--mode", choices=["eager", "deferred", "alternate"], required=True,
                    help="alternate: eager, deferred, eager, ... so that both meet the same machine load")
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--warmup-port", type=int, help="first make one connection here (not counted)")
    a = ap.parse_args()

    ports = ([a.warmup_port] if a.warmup_port else []) + [a.port] * a.n
    for i, port in enumerate(ports):
        warmup = bool(a.warmup_port) and i == 0
        mode = a.mode if a.mode != "alternate" else ("eager", "deferred")[max(0, i - bool(a.warmup_port)) % 2]
        t0 = time.perf_counter()
        raw = socket.create_connection((a.host, port))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as curl does
        t_connect = time.perf_counter()
        local_port = raw.getsockname()[1]
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname
        ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
        ctx.set_alpn_protocols(["http/1.1"])
        if mode == "eager":
            load_start = time.perf_counter()
            ctx.load_verify_locations(a.bundle)
            load_end = time.perf_counter()
        tls = Conn(raw, ctx, a.sni)
        if mode == "deferred":
            tls.step()  # the ClientHello is on the wire; the server's answer is not read yet
            load_start = time.perf_counter()
            ctx.load_verify_locations(a.bundle)
            load_end = time.perf_counter()
        while not tls.step():
            pass
        t_app = time.perf_counter()
        tls.send(f"GET / HTTP/1.1\r\nHost: {a.sni}\r\nConnection: close\r\n\r\n".encode())
        body = tls.recv()
        t_first = time.perf_counter()
        while True:
            chunk = tls.recv()
            if not chunk:
                break
            body += chunk
        raw.close()
        print(json.dumps({
            "local_port": local_port,
            "time_connect": t_connect - t0,
            "time_appconnect": t_app - t0,
            "time_starttransfer": t_first - t0,
            "load_start": load_start - t0,
            "load_end": load_end - t0,
            "mode": mode,
            "warmup": warmup,
            "status_line": body.split(b"\r\n", 1)[0].decode(errors="replace"),
        }), flush=True)


if __name__ == "__main__":
    main()
