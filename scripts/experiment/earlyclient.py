#!/usr/bin/env python3
"""A TLS 1.3 client that sends 0-RTT early data and times itself like curl -w.

curl 7.88 cannot send early data and openssl s_client prints no timings, so
this drives the system's libssl (OpenSSL 3) directly through ctypes: the first
connection is a full handshake that keeps the session (its ticket); each
later one resumes it and, with --early, sends the HTTP request with
SSL_write_early_data before the handshake completes. One JSON line per
connection: local_port, time_connect, time_appconnect, time_starttransfer
(seconds from the connection's start, as curl's -w fields), session_reused,
and early_data as the client's own library reports it
(SSL_get_early_data_status: not_sent, rejected, accepted).
"""

import argparse
import ctypes
import ctypes.util
import json
import socket
import time

SSL_CTRL_SET_TLSEXT_HOSTNAME = 55
SSL_CTRL_SET_MIN_PROTO_VERSION = 123
SSL_CTRL_SET_MAX_PROTO_VERSION = 124
TLS1_3_VERSION = 0x0304
SSL_VERIFY_PEER = 1
EARLY_STATUS = {0: "not_sent", 1: "rejected", 2: "accepted"}

P = ctypes.c_void_p


def load():
    ssl = ctypes.CDLL(ctypes.util.find_library("ssl") or "libssl.so.3")
    sigs = {
        "TLS_client_method": (P, []),
        "SSL_CTX_new": (P, [P]),
        "SSL_CTX_ctrl": (ctypes.c_long, [P, ctypes.c_int, ctypes.c_long, P]),
        "SSL_CTX_load_verify_locations": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_char_p]),
        "SSL_CTX_set_verify": (None, [P, ctypes.c_int, P]),
        "SSL_CTX_set_alpn_protos": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_uint]),
        "SSL_new": (P, [P]),
        "SSL_set_fd": (ctypes.c_int, [P, ctypes.c_int]),
        "SSL_ctrl": (ctypes.c_long, [P, ctypes.c_int, ctypes.c_long, P]),
        "SSL_set_session": (ctypes.c_int, [P, P]),
        "SSL_write_early_data": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
        "SSL_connect": (ctypes.c_int, [P]),
        "SSL_write": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_int]),
        "SSL_read": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_int]),
        "SSL_get_error": (ctypes.c_int, [P, ctypes.c_int]),
        "SSL_get1_session": (P, [P]),
        "SSL_SESSION_get_max_early_data": (ctypes.c_uint32, [P]),
        "SSL_SESSION_free": (None, [P]),
        "SSL_get_early_data_status": (ctypes.c_int, [P]),
        "SSL_session_reused": (ctypes.c_int, [P]),
        "SSL_shutdown": (ctypes.c_int, [P]),
        "SSL_free": (None, [P]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(ssl, name)
        f.restype, f.argtypes = res, args
    return ssl


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--sni", required=True)
    ap.add_argument("--cafile", required=True)
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--warmup-port", type=int, help="first make one connection here (library start-up "
                    "costs land on it); its session is not kept")
    ap.add_argument("--early", action="store_true", help="send the request as early data when resuming")
    a = ap.parse_args()
    lib = load()
    ctx = lib.SSL_CTX_new(lib.TLS_client_method())
    lib.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_3_VERSION, None)
    lib.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MAX_PROTO_VERSION, TLS1_3_VERSION, None)
    if lib.SSL_CTX_load_verify_locations(ctx, a.cafile.encode(), None) != 1:
        raise SystemExit("cannot load CA file")
    lib.SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, None)
    lib.SSL_CTX_set_alpn_protos(ctx, b"\x08http/1.1", 9)  # returns 0 on success
    request = f"GET / HTTP/1.1\r\nHost: {a.sni}\r\nConnection: close\r\n\r\n".encode()
    buf = ctypes.create_string_buffer(65536)
    # With --early the warm-up is a full handshake and a 0-RTT resumption:
    # OpenSSL's first early-data write costs ~2.5 ms before the ClientHello.
    n_warm = (2 if a.early else 1) if a.warmup_port else 0
    ports = [a.warmup_port] * n_warm + [a.port] * a.n
    session = warm_session = None
    for i, port in enumerate(ports):
        warmup = i < n_warm
        if i == n_warm:
            if warm_session:
                lib.SSL_SESSION_free(warm_session)
            warm_session = None
        if warmup:
            session, warm_session = warm_session, session
        t0 = time.perf_counter()
        sock = socket.create_connection((a.host, port))
        t_connect = time.perf_counter()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        local_port = sock.getsockname()[1]
        ssl = lib.SSL_new(ctx)
        lib.SSL_set_fd(ssl, sock.fileno())
        lib.SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, 0, ctypes.c_char_p(a.sni.encode()))
        if session:
            lib.SSL_set_session(ssl, session)
        sent_early = False
        if a.early and session and lib.SSL_SESSION_get_max_early_data(session) > 0:
            written = ctypes.c_size_t(0)
            if lib.SSL_write_early_data(ssl, request, len(request), ctypes.byref(written)) != 1:
                raise SystemExit("SSL_write_early_data failed")
            sent_early = True
        if lib.SSL_connect(ssl) != 1:
            raise SystemExit("handshake failed")
        t_app = time.perf_counter()
        status = EARLY_STATUS.get(lib.SSL_get_early_data_status(ssl), "?")
        if not (sent_early and status == "accepted"):
            if lib.SSL_write(ssl, request, len(request)) <= 0:
                raise SystemExit("SSL_write failed")
        n = lib.SSL_read(ssl, buf, 1)
        t_first = time.perf_counter()
        if n <= 0:
            raise SystemExit("no response")
        body = buf.raw[:1]
        while True:
            n = lib.SSL_read(ssl, buf, len(buf))
            if n <= 0:
                break
            body += buf.raw[:n]
        if session:
            lib.SSL_SESSION_free(session)
        session = lib.SSL_get1_session(ssl)  # now with the ticket that came after the handshake
        if warmup:
            session, warm_session = warm_session, session
        reused = bool(lib.SSL_session_reused(ssl))
        lib.SSL_shutdown(ssl)
        lib.SSL_free(ssl)
        sock.close()
        print(json.dumps({
            "local_port": local_port,
            "time_connect": t_connect - t0,
            "time_appconnect": t_app - t0,
            "time_starttransfer": t_first - t0,
            "session_reused": reused,
            "warmup": warmup,
            "early_data": status,
            "status_line": body.split(b"\r\n", 1)[0].decode(errors="replace"),
        }), flush=True)


if __name__ == "__main__":
    main()
