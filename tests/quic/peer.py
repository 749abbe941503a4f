#!/usr/bin/env python3
"""aioquic peers for the live QUIC test (agent/tests/live_quic.rs).

  peer.py server --bind IP --port N --cert C --key K [--retry] [--alpn P,...]
  peer.py client --connect IP --port N --cafile C --plan full,resume,early [--keylog F]

The client prints one JSON label per connection, taken from aioquic's own
state (session_resumed, early_data_accepted, cipher suite, Retry count),
never from tlsrum. Each connection is a request/response on one stream.
"""
import argparse
import asyncio
import json
import sys

HOST = "tlsrum.test"
ALPN = ["h3", "tlsrum-echo"]
REQUEST = b"GET /ok.txt\r\n"
RESPONSE = b"ok\n"


async def server(args):
    from aioquic.asyncio import serve
    from aioquic.quic.configuration import QuicConfiguration

    tickets = {}

    async def handle(reader, writer):
        await reader.read()
        writer.write(RESPONSE)
        writer.write_eof()

    conf = QuicConfiguration(is_client=False, alpn_protocols=args.alpn.split(","), max_datagram_frame_size=None)
    conf.load_cert_chain(args.cert, args.key)
    await serve(args.bind, args.port, configuration=conf,
                stream_handler=lambda r, w: asyncio.ensure_future(handle(r, w)),
                session_ticket_fetcher=lambda label: tickets.pop(label, None),
                session_ticket_handler=lambda t: tickets.__setitem__(t.ticket, t),
                retry=args.retry)
    print("listening", flush=True)
    await asyncio.Future()


async def client(args):
    from aioquic.asyncio import connect
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.tls import CipherSuite

    received = []
    for step in args.plan.split(","):
        conf = QuicConfiguration(is_client=True, alpn_protocols=list(ALPN), server_name=HOST)
        if args.keylog:
            conf.secrets_log_file = open(args.keylog, "a")
        if args.initial_rtt is not None:
            conf.initial_rtt = args.initial_rtt
        conf.load_verify_locations(args.cafile)
        ticket = received[-1] if step in ("resume", "early") and received else None
        if ticket is not None and step == "resume":
            ticket.max_early_data_size = None  # resume without offering 0-RTT
        conf.session_ticket = ticket
        early = step == "early" and ticket is not None and ticket.max_early_data_size is not None
        async with connect(args.connect, args.port, configuration=conf,
                           session_ticket_handler=received.append, wait_connected=not early) as c:
            port = c._transport.get_extra_info("sockname")[1]
            reader, writer = await c.create_stream()
            writer.write(REQUEST)
            writer.write_eof()
            if early:
                await c.wait_connected()
            body = await asyncio.wait_for(reader.read(), 10)
            assert body == RESPONSE, body
            await asyncio.sleep(0.2)  # let the session ticket arrive
            tls = c._quic.tls
            resumed = bool(tls.session_resumed)
            offered_early = ticket is not None and ticket.max_early_data_size is not None
            print(json.dumps({
                "client_port": port,
                "handshake": "resumed" if resumed else "full",
                "resumption": "psk" if resumed else None,
                "offered": ["psk"] if ticket is not None else [],
                "early_data": ("accepted" if tls.early_data_accepted else "rejected") if offered_early else "none",
                "retry": bool(c._quic._retry_count),
                "cipher": "TLS_" + CipherSuite(tls.key_schedule.cipher_suite).name,
                "zero_rtt_sent": early,
                "alpn_negotiated": tls.alpn_negotiated,
            }), flush=True)
        await asyncio.sleep(0.3)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("server")
    s.add_argument("--bind", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--cert", required=True)
    s.add_argument("--key", required=True)
    s.add_argument("--retry", action="store_true")
    s.add_argument("--alpn", default="tlsrum-echo")
    c = sub.add_parser("client")
    c.add_argument("--connect", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--cafile", required=True)
    c.add_argument("--plan", default="full,resume,early")
    c.add_argument("--keylog")
    # Seconds; aioquic's default is 0.1 (a probe after 200 ms without an
    # answer), RFC 9002's 0.333: scripts/experiment/thinktime.py runs at 260 ms.
    c.add_argument("--initial-rtt", type=float)
    args = ap.parse_args()
    asyncio.run(server(args) if args.mode == "server" else client(args))


if __name__ == "__main__":
    sys.exit(main())
