#!/usr/bin/env python3
"""A TLS client that times itself the way curl -w does, for the handshake
kinds curl cannot make (curl's OpenSSL backend never sends a TLS 1.2
SessionTicket). Python's ssl module (OpenSSL) offers tickets by default.

Makes N sequential connections, each reusing the previous session, sends one
HTTP/1.1 request with Connection: close, reads to EOF, and prints one JSON
line per connection with times in seconds from the start of that connection:
time_connect (connect() returned), time_appconnect (do_handshake() returned),
time_starttransfer (first response byte), as curl's -w fields.
"""

import argparse
import json
import socket
import ssl
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--sni", required=True)
    ap.add_argument("--cafile", required=True)
    ap.add_argument("--tls", choices=["1.2", "1.3"], required=True)
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--warmup-port", type=int, help="first make one connection here (library start-up "
                    "costs land on it); its session is not kept")
    a = ap.parse_args()

    ctx = ssl.create_default_context(cafile=a.cafile)
    ver = ssl.TLSVersion.TLSv1_2 if a.tls == "1.2" else ssl.TLSVersion.TLSv1_3
    ctx.minimum_version = ctx.maximum_version = ver
    ctx.set_alpn_protocols(["http/1.1"])
    session = None
    ports = ([a.warmup_port] if a.warmup_port else []) + [a.port] * a.n
    for i, port in enumerate(ports):
        warmup = bool(a.warmup_port) and i == 0
        t0 = time.perf_counter()
        raw = socket.create_connection((a.host, port))
        # As curl does: without it Nagle holds the request behind the
        # unacknowledged Finished for a delayed-ACK time.
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t_connect = time.perf_counter()
        local_port = raw.getsockname()[1]
        s = ctx.wrap_socket(raw, server_hostname=a.sni, session=session, do_handshake_on_connect=False)
        s.do_handshake()
        t_app = time.perf_counter()
        s.sendall(f"GET / HTTP/1.1\r\nHost: {a.sni}\r\nConnection: close\r\n\r\n".encode())
        first = s.recv(1)
        t_first = time.perf_counter()
        body = first
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
        reused = s.session_reused
        if not warmup:
            session = s.session
        s.close()
        print(json.dumps({
            "local_port": local_port,
            "time_connect": t_connect - t0,
            "time_appconnect": t_app - t0,
            "time_starttransfer": t_first - t0,
            "session_reused": reused,
            "warmup": warmup,
            "status_line": body.split(b"\r\n", 1)[0].decode(errors="replace"),
        }), flush=True)


if __name__ == "__main__":
    main()
