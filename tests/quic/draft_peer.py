#!/usr/bin/env python3
"""Old aioquic peers speaking the IETF drafts they implement, for
agent/tests/quic_versions.rs. Run with the interpreter of one of the venvs
that scripts/install-deps.sh makes: aioquic 0.9.25 (drafts 29-32) or 0.8.8
(drafts 25-27); aioquic 1.x dropped the drafts.

  draft_peer.py server --bind IP --port N --cert C --key K
  draft_peer.py client --connect IP --port N --cafile C --versions 0xff00001d,...

The client makes one connection per version, offering only that version,
and prints one JSON label per connection from aioquic's own state: its
local port, the version the connection used, the server name it sent and
whether the handshake completed. Never from tlsrum.
"""
import argparse
import asyncio
import json

HOST = "tlsrum.test"
ALPN = ["tlsrum-echo"]


async def server(args):
    from aioquic.asyncio import serve
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.packet import QuicProtocolVersion

    async def handle(reader, writer):
        await reader.read()
        writer.write(b"ok\n")
        writer.write_eof()

    conf = QuicConfiguration(is_client=False, alpn_protocols=ALPN)
    conf.supported_versions = [v for v in QuicProtocolVersion if v != 0]
    conf.load_cert_chain(args.cert, args.key)
    await serve(args.bind, args.port, configuration=conf,
                stream_handler=lambda r, w: asyncio.ensure_future(handle(r, w)))
    print("listening", flush=True)
    await asyncio.Future()


async def client(args):
    from aioquic.asyncio import connect
    from aioquic.quic.configuration import QuicConfiguration

    for v in args.versions.split(","):
        version = int(v, 16)
        conf = QuicConfiguration(is_client=True, alpn_protocols=ALPN, server_name=HOST)
        conf.supported_versions = [version]
        conf.load_verify_locations(args.cafile)
        async with connect(args.connect, args.port, configuration=conf) as c:
            port = c._transport.get_extra_info("sockname")[1]
            reader, writer = await c.create_stream()
            writer.write(b"GET /\r\n")
            writer.write_eof()
            await asyncio.wait_for(reader.read(), 5)
            quic = c._quic
            print(json.dumps({
                "client_port": port,
                "version": "%#010x" % quic._version,
                "sni": HOST,
                "handshake_complete": bool(quic._handshake_complete),
            }), flush=True)
        await asyncio.sleep(0.2)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--bind")
    p.add_argument("--connect")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--cafile")
    p.add_argument("--versions", default="0xff00001d")
    args = p.parse_args()
    asyncio.run(server(args) if args.role == "server" else client(args))


if __name__ == "__main__":
    main()
