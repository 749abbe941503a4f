#!/usr/bin/env python3
"""Checks of an accuracy run (accuracy.py's JSON): tlsrum at each vantage
point against the configured RTT, the server's own log and the client's own
clock. The same rules as agent/tests/wan_accuracy.rs, which is what CI
asserts; this prints them as a table.

    python3 scripts/experiment/compare.py /tmp/acc.json

Offsets between vantage points (all follow from tlsrum's definitions):
  client side   handshake and ttfb start at the ClientHello leaving the client;
                the client's clock (curl -w) starts when connect() returns:
                after its ACK of the SYN-ACK went out and before its
                ClientHello did (the gap between the two on the client's
                capture: client_hello_delay_ms). A client reads its
                handshake clock after its handshake and before it sends its
                request: late by up to the gap between the payload before
                the request and the request (client_request_gap_ms: 0.15-0.7
                ms; 3.6 and 5.4 ms when a client stalled). And it reads its
                ttfb clock after the response arrived and before it closes;
                when it sat idle longer than CLIENT_WORK_MS after the
                server's last data before closing (client_idle_ms), it read
                the clock late by up to the excess. So the client's spans are
                the same figures, longer by at most that slack
                (client_slack).
  server side   phases start when the ClientHello arrives, one one-way delay
                later. The handshake ends with a client action (its Finished,
                or its first data / ACK of the server Finished), which also
                arrives one one-way delay later: same length as at the client.
                ttfb ends when the server sends its first data, which reaches
                the client one one-way delay later: server ttfb = client ttfb
                - RTT.
"""

import json
import sys

TCP_RTT_TOL_MS = 1.0
LINE_TOL_US = 500.0


def tolerance(value_ms):
    """2 ms or 2 %, whichever is larger."""
    return max(2.0, 0.02 * abs(value_ms))


def kind_of(rec):
    if rec is None:
        return None
    if rec["handshake"] != "resumed":
        return f'{rec["version"]} {rec["handshake"]}'
    return f'{rec["version"]} {rec["resumption"]}' + (" 0-RTT" if rec["early_data"] == "accepted" else "")


# A client's own work between reading its ttfb clock and closing: up to
# 0.9 ms seen on a quiet box; more is a stall (famlab's CLIENT_LATE_MS).
CLIENT_WORK_MS = 1.0


def client_figures(c):
    """The client's own handshake and ttfb (ms), as curl -w defines them, or None."""
    if c.get("time_connect") is None:
        return None, None
    hs = (c["time_appconnect"] - c["time_connect"]) * 1000
    ttfb = (c["time_starttransfer"] - c["time_connect"]) * 1000
    return hs, ttfb


def client_slack(c):
    """How much longer than tlsrum's the client's handshake and ttfb may
    measurably be (ms): its work before the ClientHello, and its time
    before its request (handshake) or its stall before closing (ttfb)
    (module doc); None when the capture lacks the client's ACK or
    ClientHello."""
    chd = c.get("client_hello_delay_ms")
    if chd is None:
        return None, None
    return (chd + (c.get("client_request_gap_ms") or 0.0),
            chd + max(0.0, (c.get("client_idle_ms") or 0.0) - CLIENT_WORK_MS))


def agrees(mine, theirs, slack, allow=0.0):
    """Whether tlsrum's figure agrees with the client's span (ms), which may
    be longer by up to slack: within 2 ms or 2 % (plus allow) of it."""
    tol = tolerance(theirs) + allow
    return theirs - slack - tol <= mine <= theirs + tol


def rows(doc):
    """One row per (connection, vantage point)."""
    out = []
    for lab in doc["labs"]:
        rtt = lab["rtt"]
        for c in lab["connections"]:
            chs, cttfb = client_figures(c)
            for vantage in ("client", "server", "live"):
                rec = c.get(f"tlsrum_{vantage}")
                if vantage == "live" and rec is None and not lab.get("metrics"):
                    continue
                row = {"rtt": rtt, "vantage": vantage, "scenario": c["scenario"], "client": c["client"],
                       "port": c["local_port"], "warmup": c.get("warmup", False),
                       "expected_kind": c["expected_kind"], "expected_round_trips": c["expected_round_trips"],
                       "client_handshake": chs, "client_ttfb": cttfb, "line_late_max_us": c.get("line_late_max_us"),
                       "problems": [], "noise": []}
                p = row["problems"]
                late = c.get("line_late_max_us") or 0.0
                if late > LINE_TOL_US:
                    row["noise"].append(f"delay line {late:.0f} us late")
                if rec is None:
                    p.append("no record")
                    out.append(row)
                    continue
                t = rec["timing"]
                row.update(kind=kind_of(rec), round_trips=t["round_trips"], tcp_rtt=t["tcp_rtt"],
                           handshake=t["handshake"], ttfb=t["ttfb"], avoidable=t["avoidable"],
                           early_data=rec["early_data"])
                if t["round_trips"] != c["expected_round_trips"]:
                    p.append(f'round_trips {t["round_trips"]} != {c["expected_round_trips"]}')
                if t["tcp_rtt"] is None or abs(t["tcp_rtt"] - rtt) > TCP_RTT_TOL_MS:
                    p.append(f'tcp_rtt {t["tcp_rtt"]} vs {rtt}')
                shift = rtt if vantage != "client" else 0.0
                hs_slack, ttfb_slack = client_slack(c)
                if chs is not None and hs_slack is None:
                    p.append("no ACK and ClientHello in the client capture")
                elif chs is not None and not c.get("warmup"):
                    for name, mine, theirs, slack in (
                            ("handshake", t["handshake"], chs, hs_slack),
                            ("ttfb", None if t["ttfb"] is None else t["ttfb"] + shift, cttfb, ttfb_slack)):
                        if mine is None:
                            p.append(f"{name} null")
                            continue
                        row[f"{name}_diff"] = mine - theirs
                        if not agrees(mine, theirs, slack):
                            p.append(f"{name} {mine:.3f} vs client {theirs:.3f} (slack {slack:.3f})")
                            row["noise"].append(f"client clock {name}")
                out.append(row)
    return out


def rerun_worthy(rows_):
    """Whether a second run is worth it. The delay line missing its bound on
    any connection is always worth one, even when every check passed: the
    link was not what was configured, so the run proves nothing about tlsrum
    (and wan_accuracy.rs fails on it). Otherwise only problems a second run
    can tell apart from a tlsrum bug: only the client's own clock disagreed
    (a client process scheduled late on a busy 2-core box; a definition bug
    in tlsrum would be off by round trips, every time). Anything else -- a
    wrong kind, round trip count or a missing record -- is a failure at once."""
    if any(n.startswith("delay line") for r in rows_ for n in r["noise"]):
        return True
    bad = [r for r in rows_ if r["problems"]]
    if not bad:
        return False
    return all(all(x.startswith(("handshake ", "ttfb ")) and "null" not in x for x in r["problems"]) for r in bad)


def main():
    doc = json.load(open(sys.argv[1]))
    bad = 0
    for r in rows(doc):
        ok = "ok  " if not r["problems"] else "FAIL"
        bad += bool(r["problems"])
        hd = r.get("handshake_diff")
        td = r.get("ttfb_diff")
        print(f'{ok} {r["rtt"]:>5g} {r["vantage"]:6} {r["scenario"]:22} {str(r["expected_kind"]):36} '
              f'rt={r.get("round_trips")} tcp_rtt={r.get("tcp_rtt")} '
              f'hs_diff={"" if hd is None else f"{hd:+.3f}"} ttfb_diff={"" if td is None else f"{td:+.3f}"} '
              f'{"; ".join(r["problems"])}')
    print(f"{bad} rows with problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
