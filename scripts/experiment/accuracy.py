#!/usr/bin/env python3
"""Accuracy run: every handshake kind at each RTT through the delay line,
tlsrum watching at the client and at the server, the clients' own clocks
beside. Writes one JSON document (see wanlab.Lab.results) that
agent/tests/wan_accuracy.rs asserts on and run.py turns into tables.

    python3 scripts/experiment/accuracy.py --rtt 20,100,260 --out /tmp/acc.json

Kinds and where their ground truth comes from (nginx's access log:
$ssl_session_reused, $ssl_protocol, $ssl_early_data; the client's reports):
  tls12-none     curl, TLS 1.2, server hands out session IDs but never resumes:
                 full, full (the second offers the first's session ID: avoidable)
  tls12-cache    curl, TLS 1.2, shared session cache: full, then session-ID resumptions
  tls12-tickets  python ssl, TLS 1.2, tickets only: full, then ticket resumptions
                 (curl's OpenSSL backend never sends a TLS 1.2 SessionTicket)
  tls13-none     curl, TLS 1.3, no resumption: full every time
  tls13-tickets  curl, TLS 1.3, tickets: full, then PSK resumptions
  tls13-early    libssl via ctypes (earlyclient.py), TLS 1.3, tickets +
                 ssl_early_data: full, then PSK resumptions carrying the request as
                 0-RTT early data (SSL_write_early_data), timed like curl -w
  tls13-early-s_client  the same with openssl s_client -sess_in -early_data
                 (no timings of its own: kind and round trips only)
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare  # noqa: E402
import wanlab  # noqa: E402


def scenarios(lab, n=3):
    lab.curl("none", "1.2", 2, "tls12-none")
    lab.curl("cache", "1.2", n, "tls12-cache")
    lab.pyclient("tickets", "1.2", n, "tls12-tickets")
    lab.curl("none", "1.3", 2, "tls13-none")
    lab.curl("tickets", "1.3", n, "tls13-tickets")
    lab.earlyclient("early", n, "tls13-early")
    lab.s_client_early("early", 1, "tls13-early-s_client")


def expected(c):
    """The kind the server's own log says this connection was, and its round trips."""
    ng = c.get("nginx") or {}
    ver = {"TLSv1.2": "TLS1.2", "TLSv1.3": "TLS1.3"}.get(ng.get("protocol"))
    reused = ng.get("reused") == "r"
    early = ng.get("early") == "1"
    if ver == "TLS1.2":
        if not reused:
            return "TLS1.2 full", 2
        return ("TLS1.2 resumed (ticket)" if c["policy"] == "tickets" else "TLS1.2 resumed (session ID)"), 1
    if ver == "TLS1.3":
        if early:
            return "TLS1.3 0-RTT (early data accepted)", 0
        return ("TLS1.3 PSK" if reused else "TLS1.3 full"), 1
    return None, None


# Reruns of one RTT: up to RERUNS_WORTHY while compare.rerun_worthy says
# so, and up to MAX_RERUNS while a scenario has no connection to judge.
RERUNS_WORTHY = 2
MAX_RERUNS = 4


def unjudged(res):
    """Scenarios without a connection wan_accuracy.rs judges against the
    wall clock (not a warm-up, the delay line on time): its coverage rule.
    On CI the line was late on the only two such connections of a scenario
    in a third attempt, after the other scenarios' in the first two."""
    judged = {c["scenario"] for c in res["connections"]
              if not c.get("warmup") and (c.get("line_late_max_us") or 0.0) <= compare.LINE_TOL_US}
    return sorted({c["scenario"] for c in res["connections"]} - judged)


def badness(res, rows):
    """Which attempt of an RTT to keep, lowest first: scenarios left
    unjudged, rows with problems, connections the line was late on."""
    late = sum(1 for c in res["connections"] if (c.get("line_late_max_us") or 0.0) > compare.LINE_TOL_US)
    return len(unjudged(res)), sum(1 for r in rows if r["problems"]), late


def run(rtts, workdir, n=3):
    doc = {"started": time.time(), "rtts": rtts, "labs": [], "reruns": []}
    for rtt in rtts:
        attempts = []
        for attempt in range(MAX_RERUNS + 1):
            wanlab.log(f"RTT {rtt} ms" + (f" (rerun {attempt})" if attempt else ""))
            lab = wanlab.Lab(rtt, Path(workdir) / f"rtt{rtt:g}-{attempt}")
            with lab:
                scenarios(lab, n)
            res = lab.results()
            for c in res["connections"]:
                c["expected_kind"], c["expected_round_trips"] = expected(c)
            rows = compare.rows({"labs": [res]})
            attempts.append((badness(res, rows), -attempt, res))
            worthy = attempt < RERUNS_WORTHY and compare.rerun_worthy(rows)
            if attempt < MAX_RERUNS and (worthy or unjudged(res)):
                why = sorted({f'{r["scenario"]}/{r["vantage"]}: {"; ".join(r["problems"] + r["noise"])}'
                              for r in rows if r["problems"] or r["noise"]})
                if not worthy:
                    why = [f"no connection to judge in {', '.join(unjudged(res))}"] + why
                wanlab.log(f"RTT {rtt} ms: rerun, the link or a client clock was off: {why}")
                doc["reruns"].append({"rtt": rtt, "attempt": attempt, "why": why})
                continue
            break
        # The best attempt (the latest of equals): a disturbed trial says
        # nothing about tlsrum either way, so keeping the last one would
        # only keep its disturbance.
        best = min(attempts, key=lambda a: (a[0], a[1]))
        if best[2] is not attempts[-1][2]:
            wanlab.log(f"RTT {rtt} ms: keeping attempt {-best[1]} of {len(attempts)} ({best[0]})")
        doc["labs"].append(best[2])
    doc["elapsed"] = time.time() - doc["started"]
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rtt", default="20,100,260", help="comma-separated RTTs in ms")
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", help="keep captures and logs here (default: a temporary directory)")
    ap.add_argument("-n", type=int, default=3, help="connections per resumable scenario")
    a = ap.parse_args()
    rtts = [float(x) for x in a.rtt.split(",")]
    try:
        if a.workdir:
            doc = run(rtts, a.workdir, a.n)
        else:
            with tempfile.TemporaryDirectory(prefix="tlsrum-wan-") as d:
                doc = run(rtts, d, a.n)
    except wanlab.LabError as e:
        print(f"accuracy: lab error: {e}", file=sys.stderr)
        return 3
    Path(a.out).write_text(json.dumps(doc, indent=1))
    wanlab.log(f"wrote {a.out} ({doc['elapsed']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
