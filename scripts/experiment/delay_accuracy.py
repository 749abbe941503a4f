#!/usr/bin/env python3
"""How precisely tools/delayline holds its delay, under the test load.

At each RTT: ping (ICMP echo every 10 ms) while curl makes TLS connections
through nginx (the accuracy tests' traffic), tcpdump on both TUN devices.
Three measurements, all in ms of error against the configured value:
  ping      the RTT ping reports (includes both kernels' ICMP handling);
  one-way   every packet's trip from one namespace's TUN to the other's,
            matched by its bytes in the two captures (one kernel clock);
  line      the delay line's own log: release time minus deadline.

    python3 scripts/experiment/delay_accuracy.py --rtt 20,100,260 --out /tmp/delay.json
"""

import argparse
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wanlab  # noqa: E402


def quantiles(xs):
    xs = sorted(xs)
    if not xs:
        return None
    q = lambda p: xs[min(len(xs) - 1, int(p * (len(xs) - 1) + 0.5))]  # noqa: E731
    return {"n": len(xs), "min": xs[0], "p50": q(0.5), "p99": q(0.99), "max": xs[-1],
            "within_0_5ms": sum(abs(x) <= 0.5 for x in xs) / len(xs)}


def ping_rtts(client_pcap):
    """Echo request -> reply at the client's TUN device, from the capture
    (ping itself prints 3 significant digits: "time=100 ms")."""
    sent, out = {}, []
    for ts, pkt in wanlab.read_pcap(client_pcap):
        if len(pkt) < 28 or pkt[0] >> 4 != 4 or pkt[9] != 1:
            continue
        icmp = pkt[(pkt[0] & 15) * 4:]
        key = icmp[4:8]  # identifier, sequence
        if icmp[0] == 8:
            sent[key] = ts
        elif icmp[0] == 0 and key in sent:
            out.append((ts - sent.pop(key)) * 1000)
    return out


def measure(rtt, workdir, pings=300, curl_rounds=None):
    lab = wanlab.Lab(rtt, workdir, live=False, capture_filter="tcp or icmp")
    ping_out = {}
    with lab:
        def ping():
            r = subprocess.run(lab.nsexec(lab.ns_c, ["ping", "-n", "-i", "0.01", "-c", pings, wanlab.SERVER_IP]),
                               capture_output=True, text=True)
            ping_out["text"] = r.stdout
        t = threading.Thread(target=ping)
        t.start()
        while t.is_alive():  # TLS load for the ping's duration
            lab.curl("cache", "1.3", 3, "load", warmup=False)
        t.join()
    rtts = ping_rtts(lab.dir / "client.pcap")
    if len(rtts) < pings * 0.99:
        raise wanlab.LabError(f"only {len(rtts)} of {pings} pings answered: {ping_out.get('text', '')[-500:]}")
    ab, ba = wanlab.one_way_delays(lab.dir / "client.pcap", lab.dir / "server.pcap")
    late = []
    with open(lab.dir / "line.csv") as f:
        next(f)
        for line in f:
            parts = line.rstrip().split(",")
            late.append((int(parts[7]) - int(parts[6])) / 1e6)
    half = rtt / 2
    return {"rtt": rtt, "ping_rtt_ms": quantiles(rtts), "ping_error_ms": quantiles([x - rtt for x in rtts]),
            "one_way_error_ms": {"ab": quantiles([x - half for x in ab]), "ba": quantiles([x - half for x in ba])},
            "line_late_ms": quantiles(late), "line_stats": lab.line_stats, "tls_connections": len(lab.conns)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rtt", default="20,100,260")
    ap.add_argument("--out", required=True)
    ap.add_argument("--pings", type=int, default=300)
    a = ap.parse_args()
    res = []
    with tempfile.TemporaryDirectory(prefix="tlsrum-delay-") as d:
        for rtt in [float(x) for x in a.rtt.split(",")]:
            wanlab.log(f"delay accuracy at {rtt} ms")
            res.append(measure(rtt, Path(d) / f"rtt{rtt:g}", a.pings))
    Path(a.out).write_text(json.dumps(res, indent=1))
    for r in res:
        print(r["rtt"], "ping", r["ping_error_ms"], "\n   one-way", r["one_way_error_ms"], "\n   line", r["line_late_ms"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
