#!/usr/bin/env python3
"""`make experiment-ats`: the Traffic Server pre-warming experiment (issue 16).
Runs atslab.py (pre-warming off, then on), then writes docs/experiment5-ats.json
(the summary), docs/experiment5-ats.png and the section of docs/experiments.md
between the markers below (run.py keeps that section when it rewrites the file).

    python3 ats_report.py --docs docs [--n 20] [--from-json lab.json]
"""

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BEGIN, END = "<!-- ats:begin -->", "<!-- ats:end -->"
INBOUND, OUTBOUND = ":4443", ":4401"
# The seed's figures (ATS summit 2020, "Pre-warming TLS Tunnel"): TLS 1.2 full
# handshake to a 100 ms origin, without and with a pre-warmed pool.
TALK = {"without": 400, "with": 140}


def side(recs, port):
    return [r for r in recs if (r.get("server") or "").endswith(port)]


def port_of(endpoint):
    return int(endpoint.rsplit(":", 1)[1])


def ssl(stats, at, name):
    return stats[at].get(f"proxy.process.ssl.{name}", 0)


def pool(stats, at, name):
    """A pre-warm statistic summed over the pools (one per ALPN)."""
    return sum(v for k, v in stats[at].items()
               if k.startswith("proxy.process.tunnel.prewarm.") and k.endswith("." + name))


def mean(xs):
    return statistics.fmean(xs) if xs else None


def metric_sum(text, name, *labels):
    total = 0.0
    for line in (text or "").splitlines():
        if line.startswith(name + "{") and all(lb in line for lb in labels):
            total += float(line.rsplit(" ", 1)[1])
    return total


def summarize(mode):
    if "error" in mode:
        return {"prewarm": mode["prewarm"], "error": mode["error"]}
    live, stats = mode["live"], mode["ats"]
    inb, outb = side(live, INBOUND), side(live, OUTBOUND)
    by_port = {port_of(r["client"]): r for r in inb}
    conns = []
    for c in mode["curl"]:
        r = by_port.get(c["local_port"], {})
        conns.append({"index": c["index"], "curl_ttfb": (c["time_starttransfer"] - c["time_connect"]) * 1e3,
                      "curl_handshake": (c["time_appconnect"] - c["time_connect"]) * 1e3,
                      "tlsrum_ttfb": r.get("timing", {}).get("ttfb"),
                      "tlsrum_hello_delay": r.get("timing", {}).get("client_hello_delay"),
                      "tlsrum_handshake": r.get("timing", {}).get("handshake")})
    # ATS started after tlsrum: its totals since start count what tlsrum saw.
    ats_in = ssl(stats, "after", "total_success_handshake_count_in")
    idle = [r["timing"].get("idle_before_use") for r in outb]
    pooled = [r for r, x in zip(outb, idle) if x is not None and x > 10]
    in_pool = [r for r, x in zip(outb, idle) if x is None or x > 10]
    pool_count = pool(stats, "after", "total_handshake_count")
    return {
        "prewarm": mode["prewarm"], "rtt": mode["rtt"], "requests": len(mode["curl"]),
        "connections": conns,
        "outbound_idle_ms": sorted(x for x in idle if x is not None),
        "ats": {"handshakes_in": ats_in, "handshakes_out": ssl(stats, "after", "total_success_handshake_count_out"),
                "handshake_time_in_mean_ms": ssl(stats, "after", "total_handshake_time") / ats_in / 1e6
                if ats_in else None,
                "pool_hit": pool(stats, "after", "total_hit") - pool(stats, "before", "total_hit"),
                "pool_miss": pool(stats, "after", "total_miss") - pool(stats, "before", "total_miss"),
                "pool_handshakes": pool_count,
                "pool_handshake_mean_ms": pool(stats, "after", "total_handshake_time") / pool_count / 1e6
                if pool_count else None},
        "nginx": {"lines": len(mode["nginx"]), "new_sessions": sum(x.get("reused") == "." for x in mode["nginx"])},
        "tlsrum": {"inbound": len(inb), "outbound": len(outb),
                   "outbound_full": sum(r["handshake"] == "full" for r in outb),
                   "inbound_handshake_mean_ms": mean([r["timing"]["handshake"] for r in inb]),
                   "outbound_handshake_mean_ms": mean([r["timing"]["handshake"] for r in outb]),
                   "outbound_tcp_rtt_mean_ms": mean([r["timing"]["tcp_rtt"] for r in outb]),
                   "inbound_ttfb_mean_ms": mean([r["timing"]["ttfb"] for r in inb]),
                   "live_roles": sorted({str(r.get("role")) for r in live}),
                   "replay_roles": sorted({f"{r['server'].rsplit(':', 1)[1]}:{r.get('role')}"
                                           for r in mode["replay"]}),
                   "outbound_pooled": len(pooled),
                   "outbound_on_demand": sum(x is not None and x <= 10 for x in idle),
                   "outbound_never_used": sum(x is None for x in idle),
                   "pooled_idle_median_ms": statistics.median([r["timing"]["idle_before_use"] for r in pooled])
                   if pooled else None,
                   "pool_setup_mean_ms": mean([r["timing"]["tcp_rtt"] + r["timing"]["handshake"] for r in in_pool]),
                   "metric_pooled": metric_sum(mode.get("metrics"), "tls_connections_first_use_total",
                                               'role="outbound"', 'use="pooled"'),
                   "metric_on_demand": metric_sum(mode.get("metrics"), "tls_connections_first_use_total",
                                                  'role="outbound"', 'use="on_demand"')},
        "curl": {"ttfb_mean_ms": mean([c["curl_ttfb"] for c in conns]),
                 "ttfb_median_ms": statistics.median([c["curl_ttfb"] for c in conns])},
    }


def chart(docs, summ):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    modes = [m for m in summ["modes"] if "error" not in m]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.4), gridspec_kw={"width_ratios": [3, 2]})
    for m, color in zip(modes, ("tab:red", "tab:green")):
        tag = "on" if m["prewarm"] else "off"
        idx = [c["index"] + 1 for c in m["connections"]]
        ax.plot(idx, [c["curl_ttfb"] for c in m["connections"]], "o", color=color, mfc="none",
                label=f"pre-warming {tag}: curl")
        ax.plot(idx, [c["tlsrum_ttfb"] for c in m["connections"]], "x", color=color,
                label=f"pre-warming {tag}: tlsrum (inbound ttfb)")
    last = max(len(m["connections"]) for m in modes)
    # Labels on the side of each line away from the points near it.
    for y, dy, what, style in ((TALK["without"], -28, "talk: > 400 ms without pre-warming", "--"),
                               (TALK["with"], 10, "talk: ~140 ms with pre-warming", ":")):
        ax.axhline(y, ls=style, color="grey")
        ax.text(last, y + dy, what, ha="right", color="grey")
    ax.set_ylim(0, max(520, max(c["curl_ttfb"] for m in modes for c in m["connections"]) + 60))
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel(f"request (a new TLS 1.2 connection through ATS; origin at {summ['rtt']:g} ms RTT)")
    ax.set_ylabel("client's time to first byte, ms")
    ax.legend(loc="center left", fontsize=8)
    for i, (m, color) in enumerate(zip(modes, ("tab:red", "tab:green"))):
        xs = [max(x, 0.01) for x in m["outbound_idle_ms"]]
        ax2.plot(xs, [i + 0.15 * ((j % 5) - 2) / 2 for j in range(len(xs))], "|", ms=14, color=color)
    ax2.axvline(10, color="grey", ls="--")
    ax2.text(11, len(modes) - 0.55, "10 ms: on demand | pooled", color="grey", fontsize=8)
    ax2.set_xscale("log")
    ax2.set_yticks(range(len(modes)), [f"pre-warming {'on' if m['prewarm'] else 'off'}" for m in modes])
    ax2.set_ylim(-0.6, len(modes) - 0.4)
    ax2.set_xlabel("outbound idle_before_use, ms (tlsrum; 0 drawn at 0.01)")
    fig.suptitle(f"Apache Traffic Server {summ['traffic_server']}, partial_blind_route, pre-warming off and on")
    fig.tight_layout()
    fig.savefig(docs / "experiment5-ats.png", dpi=110)


def fmt(x, d=1):
    return "—" if x is None else f"{x:.{d}f}"


def rows(m):
    """The table's two columns for one mode: their reports, tlsrum's."""
    a, t, n = m["ats"], m["tlsrum"], m["nginx"]
    pool_ats = (f"hit {a['pool_hit']:g}, miss {a['pool_miss']:g}" if m["prewarm"] else "no pool")
    return [
        (f"ATS count_in {a['handshakes_in']:g}", f"{t['inbound']} records"),
        (f"ATS count_out {a['handshakes_out']:g}; nginx {n['lines']} requests, {n['new_sessions']} new sessions",
         f"{t['outbound']} records, {t['outbound_full']} full"),
        (f"ATS {fmt(a['handshake_time_in_mean_ms'], 2)} ms", f"{fmt(t['inbound_handshake_mean_ms'], 2)} ms"),
        (f"curl {fmt(m['curl']['ttfb_mean_ms'])} ms (median {fmt(m['curl']['ttfb_median_ms'])})",
         f"inbound ttfb {fmt(t['inbound_ttfb_mean_ms'])} ms"),
        (f"ATS pre-warm {pool_ats}",
         f"used > 10 ms after the handshake {t['outbound_pooled']}, within 10 ms {t['outbound_on_demand']}, "
         f"never {t['outbound_never_used']}; metric pooled {t['metric_pooled']:g} / on demand "
         f"{t['metric_on_demand']:g}"),
        (f"ATS pre-warm {fmt(a['pool_handshake_mean_ms'])} ms over {a['pool_handshakes']:g}" if m["prewarm"] else "—",
         f"tcp_rtt + handshake of pool connections {fmt(t['pool_setup_mean_ms'])} ms" if m["prewarm"] else
         f"outbound handshake {fmt(t['outbound_handshake_mean_ms'])} ms (tcp_rtt {fmt(t['outbound_tcp_rtt_mean_ms'])})"),
        ("—", f"live: {', '.join(t['live_roles'])}; replay `--local`: {', '.join(t['replay_roles'])}"),
    ]


LABELS = ["inbound handshakes", "outbound handshakes", "inbound handshake time, mean",
          "clients' time to first byte, mean", "outbound connections: pool hits", "pool connection set-up, mean",
          "role"]


def section(summ):
    off = next(m for m in summ["modes"] if not m["prewarm"])
    on = next((m for m in summ["modes"] if m["prewarm"]), None)
    have_on = on is not None and "error" not in on
    head = "| | pre-warming off: ATS / nginx / curl | off: tlsrum live | on: ATS / nginx / curl | on: tlsrum live |"
    table = [head, "|---|---|---|---|---|"]
    for label, a, b in zip(LABELS, rows(off), rows(on) if have_on else [("—", "—")] * len(LABELS)):
        table.append(f"| {label} | {a[0]} | {a[1]} | {b[0]} | {b[1]} |")
    gaps = [c["curl_ttfb"] - c["tlsrum_ttfb"] for m in (off, on) if m and "error" not in m
            for c in m["connections"] if c["tlsrum_ttfb"] is not None]
    # What is left once the wire's client_hello_delay (curl's own TLS set-up) is added.
    rest = [abs(c["curl_ttfb"] - c["tlsrum_ttfb"] - c["tlsrum_hello_delay"]) for m in (off, on)
            if m and "error" not in m for c in m["connections"]
            if c["tlsrum_ttfb"] is not None and c["tlsrum_hello_delay"] is not None]
    if have_on:
        t, a = on["tlsrum"], on["ats"]
        on_text = f"""With pre-warming on, the talk's second figure: {fmt(on['curl']['ttfb_mean_ms'], 0)} ms to first byte
(the talk: ~140 ms), one round trip to the origin for the request instead of four. ATS served
{a['pool_hit']:g} of {on['requests']} requests from its pool; tlsrum, knowing nothing of the pool, sees
{t['outbound_pooled']} outbound connections first used more than 10 ms after their handshake (median
{fmt(t['pooled_idle_median_ms'], 0)} ms idle) and {t['outbound_on_demand']} within 10 ms — ATS's hits and misses — and
{t['outbound_never_used']} the pool opened that no request used before the lab ended (ATS keeps a pool per
ALPN: http/1.1 and "none"). Its `tls_connections_first_use_total{{role="outbound"}}` says the
same ({t['metric_pooled']:g} pooled, {t['metric_on_demand']:g} on demand): the pool hit rate read from the wire.
ATS times each pool connection from its connect to the end of its TLS handshake,
{fmt(a['pool_handshake_mean_ms'])} ms on average; tlsrum's tcp_rtt + handshake for the same connections is
{fmt(t['pool_setup_mean_ms'])} ms."""
    else:
        on_text = f"With pre-warming on the lab failed: {on['error'] if on else 'not run'}."
    return f"""{BEGIN}
## 5. Apache Traffic Server: pre-warmed TLS tunnels (issue 16)

The Traffic Server summit talk "Pre-warming TLS Tunnel" (Masaori Koshiba, 2020) measures a
TLS proxy in front of an origin 100 ms away: when the proxy opens its TLS 1.2 connection to
the origin on demand, the client's time to first byte is the TCP handshake, two round trips
of full handshake and the request — more than 400 ms; with a pool of connections the proxy
opened and handshook beforehand (`tunnel_prewarm` in sni.yaml), it is about 140 ms. tlsrum,
watching on the proxy host, should show this without any help from the proxy: two handshakes
per request (inbound: the host is the server; outbound: it is the client), the outbound
connection's idle time before use (near zero when opened on demand, long when pre-warmed)
and the clients' time to first byte.

The lab (`make experiment-ats`, scripts/experiment/atslab.py): curl in one namespace,
Traffic Server {summ['traffic_server']} in the next, terminating the client's TLS and opening
TLS 1.2 to nginx (no session cache, no tickets: every outbound handshake full) through
tools/delayline at {summ['rtt']:g} ms RTT, routed by a `partial_blind_route` in sni.yaml (the
route kind, with `forward_route`, that the pre-warm pool serves; `tunnel_alpn: [http/1.1]`,
since a request takes a pooled connection only from the pool of its negotiated protocol).
`tlsrum live` (eBPF) on both of the proxy's interfaces; ATS's own counters read with
`traffic_ctl metric match` before and after; {off['requests']} sequential requests, each a new
connection, {summ['pause']:g} s apart; each mode in a fresh lab.

The Traffic Server is Debian 12's source package of trafficserver with one upstream fix
(scripts/ats/build.sh, run once by scripts/install-deps.sh into /opt/tlsrum-ats). Debian's
binary package aborts whenever a pre-warm pool is configured (`Fatal: P_UnixEThread.h:209:
failed assertion this == this_ethread()`, at start-up and on `traffic_ctl config reload`,
relaunched by traffic_manager in a loop): `PreWarmManager::reconfigure_prewarming_on_threads`
hands each network thread its pool with `EThread::schedule_imm_local` from another thread,
which 9.2 checks since apache/trafficserver#9691; apache/trafficserver#9692 schedules it with
`schedule_imm`, the patch in scripts/ats/.

{chr(10).join(table)}

![experiment 5](experiment5-ats.png)

Without pre-warming the talk's first figure is reproduced: {fmt(off['curl']['ttfb_mean_ms'], 0)} ms
to first byte at {off['rtt']:g} ms RTT, of which tlsrum attributes two round trips to the
outbound full handshake ({fmt(off['tlsrum']['outbound_handshake_mean_ms'], 0)} ms), and every outbound
connection is used within 10 ms of its handshake. Per connection tlsrum's inbound ttfb is
{fmt(min(gaps))}–{fmt(max(gaps))} ms below curl's: curl's clock starts when its TCP handshake ends and so also
counts its own work before the ClientHello, where tlsrum's starts. tlsrum shows that work as
`client_hello_delay`, and `client_hello_delay` + `ttfb` is within {fmt(max(rest), 2)} ms of curl's on every
connection (agent/tests/proxy_ats.rs checks each within 5 ms + 2 % in CI). The inbound handshake means differ by
{fmt(off['tlsrum']['inbound_handshake_mean_ms'] - off['ats']['handshake_time_in_mean_ms'], 1)} ms: the two clocks
time different spans (tlsrum: on the wire, from the ClientHello to the client's first
application data; ATS: its own handshake processing).

{on_text}
{END}
"""


def splice(md_path, block):
    md = md_path.read_text() if md_path.exists() else ""
    if BEGIN in md and END in md:
        head, rest = md.split(BEGIN, 1)
        md = head + block.strip() + rest.split(END, 1)[1]
    elif "## What this does not show" in md:
        head, tail = md.split("## What this does not show", 1)
        md = head + block.strip() + "\n\n## What this does not show" + tail
    else:
        md = md + "\n" + block
    md_path.write_text(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default="docs")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--from-json", help="render an earlier atslab.py document instead of running the lab")
    args = ap.parse_args()
    docs = Path(args.docs)
    if args.from_json:
        lab = json.loads(Path(args.from_json).read_text())
    else:
        work = Path(tempfile.mkdtemp(prefix="tlsrum-ats-exp-"))
        out = work / "ats.json"
        # Exit status 2 = a mode failed; its reason is in the document.
        p = subprocess.run([sys.executable, HERE / "atslab.py", "--out", out, "--workdir", work / "labs",
                            "--n", str(args.n)])
        if not out.exists():
            sys.exit(f"atslab.py failed ({p.returncode}) without a document; logs in {work}")
        lab = json.loads(out.read_text())
        # ATS's cache files are most of the scratch space; the logs stay.
        for cache in (work / "labs").glob("*/ats/cache"):
            shutil.rmtree(cache, ignore_errors=True)
        print(f"lab logs in {work}", file=sys.stderr)
    summ = {"generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rtt": lab["rtt"], "pause": lab["pause"],
            "traffic_server": re.sub(r".*traffic_server - ([\d.]+) - .*", r"\1", " ".join(lab["traffic_server"])),
            "seconds": lab["seconds"], "modes": [summarize(m) for m in lab["modes"]]}
    if not any(not m["prewarm"] and "error" not in m for m in summ["modes"]):
        sys.exit("no pre-warming-off data: " + json.dumps([m.get("error") for m in summ["modes"]]))
    (docs / "experiment5-ats.json").write_text(json.dumps(summ, indent=1) + "\n")
    chart(docs, summ)
    splice(docs / "experiments.md", section(summ))
    print(f"wrote {docs}/experiment5-ats.json, experiment5-ats.png and section 5 of experiments.md", file=sys.stderr)


if __name__ == "__main__":
    main()
