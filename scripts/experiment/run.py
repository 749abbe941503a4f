#!/usr/bin/env python3
"""`make experiment`: the curl-loop experiments people run by hand, measured
passively by tlsrum through the delay line, with the clients' own timings
beside them. Writes docs/experiments.md and docs/*.png.

    python3 scripts/experiment/run.py [--docs docs] [--quick]

1. nginx with no resumption / a shared session cache / tickets, 100
   connections each from clients that reuse sessions, at 100 ms RTT: the
   connection time saved per resumed handshake.
2. TLS 1.2 versus TLS 1.3 handshake cost at 20, 100 and 260 ms.
3. TLS 1.3 fresh, resumed, and resumed with early data: time to first byte.
4. A large CA bundle loaded before the ClientHello (curl 7.87's order) or
   while the server's answer travels (curl 7.88's) at 0, 20 and 100 ms.
Plus the delay line's own precision and the accuracy table (tlsrum at the
client and at the server against the configured RTT and the clients' clocks).
"""

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy  # noqa: E402
import ats_report  # noqa: E402
import caclient  # noqa: E402
import compare  # noqa: E402
import delay_accuracy  # noqa: E402
import wanlab  # noqa: E402

RTTS = [20.0, 100.0, 260.0]
EXP4_RTTS = [0.0, 20.0, 100.0]
EXP4_CLIENTS = [("python-eager", "eager: load, then ClientHello (curl 7.87's order; Python ssl)"),
                ("python-deferred", "deferred: ClientHello, then load (curl 7.88's order; Python ssl)"),
                ("curl", "curl 7.88 `--cacert` (deferred)")]


def mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=1):
    return "–" if x is None else f"{x:.{nd}f}"


def client_ms(c, field):
    if c.get("time_connect") is None:
        return None
    return (c[field] - c["time_connect"]) * 1000


def kind(c):
    rec = c.get("tlsrum_client")
    return compare.kind_of(rec) if rec else None


def run_lab(rtt, work, fn):
    lab = wanlab.Lab(rtt, work)
    with lab:
        fn(lab)
    res = lab.results()
    for c in res["connections"]:
        c["expected_kind"], c["expected_round_trips"] = accuracy.expected(c)
    return res


# ---- experiment 1 ----------------------------------------------------------
def exp1(work, n):
    def fn(lab):
        for policy in ("none", "cache", "tickets"):
            lab.pyclient(policy, "1.2", n, f"exp1-{policy}-tls12")
            lab.curl(policy, "1.3", n, f"exp1-{policy}-tls13")
    return run_lab(100.0, work / "exp1", fn)


def exp1_table(res):
    rows, by = [], {}
    for c in res["connections"]:
        if c.get("warmup") or not c["scenario"].startswith("exp1"):
            continue
        by.setdefault(c["scenario"], []).append(c)
    out = ["| nginx | TLS | client | connections | full | resumed (method) | median handshake full / resumed, tlsrum ms | "
           "the client's own clock ms | saved per resumed handshake, tlsrum / client ms | avoidable (tlsrum), s total |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    chart = []
    for scen, cs in by.items():
        _, policy, tls = scen.split("-")
        recs = [c["tlsrum_client"] for c in cs if c.get("tlsrum_client")]
        full = [c for c in cs if c.get("tlsrum_client") and c["tlsrum_client"]["handshake"] == "full"]
        res_ = [c for c in cs if c.get("tlsrum_client") and c["tlsrum_client"]["handshake"] == "resumed"]
        methods = sorted({c["tlsrum_client"]["resumption"] for c in res_})
        hs_f = median(c["tlsrum_client"]["timing"]["handshake"] for c in full)
        hs_r = median(c["tlsrum_client"]["timing"]["handshake"] for c in res_)
        cl_f = median(client_ms(c, "time_appconnect") for c in full)
        cl_r = median(client_ms(c, "time_appconnect") for c in res_)
        ttfb_f = median(c["tlsrum_client"]["timing"]["ttfb"] for c in full)
        ttfb_r = median(c["tlsrum_client"]["timing"]["ttfb"] for c in res_)
        saved = None if hs_f is None or hs_r is None else hs_f - hs_r
        saved_c = None if cl_f is None or cl_r is None else cl_f - cl_r
        avoid = sum(r["timing"]["avoidable"] or 0 for r in recs) / 1000
        out.append(f"| {nginx_policy(policy)} | {tls[-2]}.{tls[-1]} | {cs[0]['client']} | {len(cs)} | {len(full)} | "
                   f"{len(res_)} ({', '.join(methods) or '–'}) | {fmt(hs_f)} / {fmt(hs_r)} | {fmt(cl_f)} / {fmt(cl_r)} | "
                   f"{fmt(saved)} / {fmt(saved_c)} | {avoid:.2f} |")
        chart.append({"label": f"{policy}\nTLS {tls[-2]}.{tls[-1]}", "hs_full": hs_f, "hs_res": hs_r,
                      "ttfb_full": ttfb_f, "ttfb_res": ttfb_r, "n_full": len(full), "n_res": len(res_)})
    return "\n".join(out), chart


def nginx_policy(p):
    return {"none": "`ssl_session_cache none`, no tickets", "cache": "`shared:SSL:4m`, no tickets",
            "tickets": "tickets, no cache", "early": "tickets + `ssl_early_data on`"}[p]


# ---- experiments 2 and 3 -----------------------------------------------------
def exp23(work, rtt, n):
    def fn(lab):
        lab.curl("none", "1.2", n, "exp2-tls12-full")
        lab.curl("cache", "1.2", n + 1, "exp2-tls12-resumed")
        lab.curl("none", "1.3", n, "exp2-tls13-full")
        lab.earlyclient("tickets", n + 1, "exp3-tls13-psk", early=False)
        lab.earlyclient("early", n + 1, "exp3-tls13-0rtt")
    return run_lab(rtt, work / f"exp23-{rtt:g}", fn)


def by_kind(res, prefix):
    groups = {}
    for c in res["connections"]:
        if c.get("warmup") or not c["scenario"].startswith(prefix) or not c.get("tlsrum_client"):
            continue
        groups.setdefault(kind(c), []).append(c)
    return groups


def exp2_table(results):
    out = ["| RTT ms | kind | n | round trips | handshake, tlsrum at client ms | client's clock ms | "
           "handshake / RTT | ttfb, tlsrum ms | client's clock ms |",
           "|---|---|---|---|---|---|---|---|---|"]
    chart = {}
    for res in results:
        rtt = res["rtt"]
        for k, cs in sorted(by_kind(res, "exp2").items()):
            hs = median(c["tlsrum_client"]["timing"]["handshake"] for c in cs)
            tt = median(c["tlsrum_client"]["timing"]["ttfb"] for c in cs)
            rts = sorted({c["tlsrum_client"]["timing"]["round_trips"] for c in cs}, key=str)
            out.append(f"| {rtt:g} | {k} | {len(cs)} | {', '.join(map(str, rts))} | {fmt(hs)} | "
                       f"{fmt(median(client_ms(c, 'time_appconnect') for c in cs))} | {fmt(hs / rtt, 2)} | {fmt(tt)} | "
                       f"{fmt(median(client_ms(c, 'time_starttransfer') for c in cs))} |")
            chart.setdefault(k, {})[rtt] = hs
    return "\n".join(out), chart


def exp3_table(results):
    out = ["| RTT ms | kind | n | early data | round trips | ttfb, tlsrum at client ms | client's clock ms | "
           "ttfb / RTT | ttfb, tlsrum at server ms |",
           "|---|---|---|---|---|---|---|---|---|"]
    chart = {}
    for res in results:
        rtt = res["rtt"]
        groups = by_kind(res, "exp3")
        groups.update({k: v for k, v in by_kind(res, "exp2-tls13").items()})
        for k, cs in sorted(groups.items()):
            tt = median(c["tlsrum_client"]["timing"]["ttfb"] for c in cs)
            st = median((c.get("tlsrum_server") or {}).get("timing", {}).get("ttfb") for c in cs)
            eds = sorted({c["tlsrum_client"]["early_data"] for c in cs})
            rts = sorted({c["tlsrum_client"]["timing"]["round_trips"] for c in cs}, key=str)
            out.append(f"| {rtt:g} | {k} | {len(cs)} | {', '.join(eds)} | {', '.join(map(str, rts))} | {fmt(tt)} | "
                       f"{fmt(median(client_ms(c, 'time_starttransfer') for c in cs))} | {fmt(tt / rtt, 2)} | {fmt(st)} |")
            chart.setdefault(k, {})[rtt] = tt
    return "\n".join(out), chart


# ---- experiment 4 ------------------------------------------------------------
def load_order(lab, bundle):
    """Each client's order of three system calls under strace: opening the
    bundle, connect() to the server, writing the ClientHello (a TLS record
    starting 16 03 01). One connection each; not part of the figures."""
    port = wanlab.PORTS["cache"]
    url = f"https://{wanlab.HOST}:{port}/"
    cmds = {
        "openssl s_client -CAfile": ["openssl", "s_client", "-connect", f"{wanlab.SERVER_IP}:{port}",
                                     "-servername", wanlab.HOST, "-CAfile", bundle],
        "curl 7.88 --cacert": ["curl", "-sS", "--cacert", bundle, "--resolve", f"{wanlab.HOST}:{port}:{wanlab.SERVER_IP}",
                               url, "-o", "/dev/null"],
    }
    for mode in ("eager", "deferred"):
        cmds[f"caclient.py --mode {mode}"] = [sys.executable, caclient.__file__, "--host", wanlab.SERVER_IP, "--port", port,
                                               "--sni", wanlab.HOST, "--bundle", bundle, "--mode", mode, "-n", "1"]
    out = {}
    for name, cmd in cmds.items():
        trace = lab.dir / f"strace-{len(out)}.txt"
        subprocess.run(lab.nsexec(lab.ns_c, ["strace", "-f", "-e", "trace=openat,connect,sendto,write", "-o", trace] + cmd),
                       input="", capture_output=True, text=True, timeout=30)
        seen = []
        for line in trace.read_text().splitlines() if trace.exists() else []:
            ev = ("bundle opened" if "openat(" in line and Path(bundle).name in line else
                  "connect()" if "connect(" in line and f'inet_addr("{wanlab.SERVER_IP}")' in line else
                  "ClientHello written" if ("sendto(" in line or "write(" in line) and '"\\26\\3\\1' in line else None)
            if ev and ev not in seen:
                seen.append(ev)
        out[name] = seen
    return out


def exp4(work, rtt, n, order=None):
    def fn(lab):
        bundle = caclient.make_bundle(work, lab.crt)
        if order is not None:
            order.update(load_order(lab, bundle))
        # Round by round, eager, deferred, curl: the load's time follows the
        # machine's load (2 shared vCPUs), so the three take turns.
        for _ in range(n):
            lab.caclient("none", 2, "exp4-python", bundle)
            lab.curl("none", "1.3", 1, "exp4-curl", cacert=bundle)
    return run_lab(rtt, work / f"exp4-{rtt:g}", fn)


def exp4_rows(results):
    """Medians per client and RTT: the clients' clocks and tlsrum at the client."""
    rows = []
    for res in results:
        for name, _ in EXP4_CLIENTS:
            cs = [c for c in res["connections"] if c["scenario"].startswith("exp4") and c["client"] == name
                  and not c.get("warmup") and c.get("tlsrum_client")]

            def t(field):
                return median(c["tlsrum_client"]["timing"][field] for c in cs)
            loads = [(c["load_end"] - c["load_start"]) * 1000 for c in cs if c.get("load_end") is not None]
            r = {"rtt": res["rtt"], "client": name, "n": len(cs),
                 "kinds": sorted({str(kind(c)) for c in cs}), "load": median(loads),
                 "load_range": [min(loads), max(loads)] if loads else None,
                 "c_handshake": median(client_ms(c, "time_appconnect") for c in cs),
                 "c_first_byte": median(client_ms(c, "time_starttransfer") for c in cs),
                 "c_total": median(c["time_starttransfer"] * 1000 for c in cs)}
            for f in ("tcp_rtt", "client_hello_delay", "handshake", "server_think", "client_think", "ttfb"):
                r[f] = t(f)
            r["to_first_byte"] = median(c["tlsrum_client"]["timing"]["client_hello_delay"] +
                                        c["tlsrum_client"]["timing"]["ttfb"] for c in cs
                                        if c["tlsrum_client"]["timing"]["client_hello_delay"] is not None
                                        and c["tlsrum_client"]["timing"]["ttfb"] is not None)
            rows.append(r)
    return rows


def exp4_table(rows):
    out = ["| RTT ms | client | n | kind | bundle load, client's clock ms | client's clock: connect → handshake done / "
           "→ first byte ms | tlsrum: `client_hello_delay` | `tcp_rtt` | `handshake` | `server_think` | `client_think` | "
           "`ttfb` | `client_hello_delay` + `ttfb` ms |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    out[0] = out[0].replace("bundle load, client's clock ms", "bundle load, client's clock ms (min–max)")
    for r in rows:
        rng = f" ({r['load_range'][0]:.0f}–{r['load_range'][1]:.0f})" if r["load_range"] else ""
        out.append(f"| {r['rtt']:g} | {r['client']} | {r['n']} | {', '.join(r['kinds'])} | {fmt(r['load'])}{rng} | "
                   f"{fmt(r['c_handshake'])} / {fmt(r['c_first_byte'])} | {fmt(r['client_hello_delay'], 2)} | "
                   f"{fmt(r['tcp_rtt'], 2)} | {fmt(r['handshake'])} | {fmt(r['server_think'], 2)} | "
                   f"{fmt(r['client_think'], 2)} | {fmt(r['ttfb'])} | **{fmt(r['to_first_byte'])}** |")
    return "\n".join(out)


def exp4_savings(rows):
    """Per RTT: what loading after the ClientHello saved (eager minus each
    deferred client, TCP handshake end to first response byte, tlsrum), and
    the bound the timeline predicts: min(load, RTT + server_think)."""
    out = []
    for rtt in EXP4_RTTS:
        by = {r["client"]: r for r in rows if r["rtt"] == rtt}
        e = by.get("python-eager")
        if not e or e["to_first_byte"] is None:
            continue
        d = by.get("python-deferred", {})
        pred = hidden = None
        if None not in (d.get("load"), d.get("server_think"), d.get("tcp_rtt")):
            pred = min(d["load"], d["tcp_rtt"] + d["server_think"])
        if None not in (d.get("load"), d.get("client_think"), e["client_think"]):
            # the load less what of it still shows as client_think (less the
            # certificate check, which the eager client's client_think is)
            hidden = d["load"] - (d["client_think"] - e["client_think"])
        saved_d = None if d.get("to_first_byte") is None else e["to_first_byte"] - d["to_first_byte"]
        # the same, as if both had loaded in the same time (the deferred one's)
        same_load = None if saved_d is None or None in (e["load"], d.get("load")) else \
            saved_d - (e["load"] - d["load"])
        out.append({"rtt": rtt, "load": e["load"], "load_deferred": d.get("load"), "predicted": pred,
                    "hidden": hidden, "saved_same_load": same_load,
                    **{f"saved_{k}": None if by.get(k, {}).get("to_first_byte") is None
                       else e["to_first_byte"] - by[k]["to_first_byte"] for k in ("python-deferred", "curl")},
                    **{f"ttfb_diff_{k}": None if by.get(k, {}).get("ttfb") is None or e["ttfb"] is None
                       else e["ttfb"] - by[k]["ttfb"] for k in ("python-deferred", "curl")}})
    return out


def exp4_savings_table(sav):
    out = ["| RTT ms | bundle load, eager / deferred Python ms | min(load, RTT + server_think) ms | "
           "hidden behind the round trip: load − (client_think − eager's client_think) ms | "
           "saved end to end, deferred Python ms | the same less the two loads' difference ms | "
           "saved end to end, curl 7.88 ms | `ttfb` alone: eager − deferred Python / − curl ms |",
           "|---|---|---|---|---|---|---|---|"]
    for s in sav:
        out.append(f"| {s['rtt']:g} | {fmt(s['load'])} / {fmt(s['load_deferred'])} | {fmt(s['predicted'])} | "
                   f"{fmt(s['hidden'])} | {fmt(s['saved_python-deferred'])} | {fmt(s['saved_same_load'])} | "
                   f"{fmt(s['saved_curl'])} | {fmt(s['ttfb_diff_python-deferred'])} / {fmt(s['ttfb_diff_curl'])} |")
    return "\n".join(out)


def exp4_chart(docs, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    names = [n for n, _ in EXP4_CLIENTS]
    short = {"python-eager": "eager", "python-deferred": "deferred", "curl": "curl 7.88"}
    w = 0.8 / len(names)
    parts = [("ClientHello delay (before the ClientHello)", "tab:red"), ("network and the rest of ttfb", "tab:gray"),
             ("server_think", "tab:blue"), ("client_think", "tab:orange")]
    ticks, labels = [], []
    for i, rtt in enumerate(EXP4_RTTS):
        for j, name in enumerate(names):
            r = next((r for r in rows if r["rtt"] == rtt and r["client"] == name), None)
            if not r or r["ttfb"] is None:
                continue
            chd, st, ct = r["client_hello_delay"] or 0, r["server_think"] or 0, r["client_think"] or 0
            vals = [chd, max(0.0, r["ttfb"] - st - ct), st, ct]
            x = i + (j - (len(names) - 1) / 2) * w
            bottom = 0.0
            for (label, colour), v in zip(parts, vals):
                ax.bar(x, v, w * 0.9, bottom=bottom, color=colour, label=label if i == 0 and j == 0 else None)
                bottom += v
            ax.text(x, bottom + 2, f"{bottom:.0f}", ha="center", fontsize=7)
            ticks.append(x)
            labels.append(f"{short[name]}\n{rtt:g} ms")
    ax.set_xticks(ticks, labels, fontsize=7)
    ax.set_ylabel("TCP handshake end → first response byte, ms\n(tlsrum at the client, medians)")
    ax.set_title(f"4. A {caclient.BULK_CERTS + 1}-certificate CA bundle loaded before or after the ClientHello")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(docs / "experiment4-ca-load.png", dpi=110)
    plt.close(fig)


def exp4_section(rows, sav, n, order):
    def row(client, rtt):
        return next((r for r in rows if r["client"] == client and r["rtt"] == rtt), {})

    def at(field, client, rtt, nd=1):
        return fmt(row(client, rtt).get(field), nd)

    def saved(k):
        return ", ".join(f"{fmt(x.get(k))} ms at {x['rtt']:g}" for x in sav)
    lo, hi = EXP4_RTTS[0], EXP4_RTTS[-1]
    mid = EXP4_RTTS[1]
    return f"""## 4. A large CA bundle loaded before or after the ClientHello (curl 7.87 → 7.88)

curl 7.87 parsed its CA bundle in its TLS filter's first step, after `connect()` and before
`SSL_connect()` wrote the ClientHello; curl 7.88 writes the ClientHello first and loads the
bundle while the server's answer is on its way (curl issue #10389; the seed article "curl
handshake"). Here: a bundle of {caclient.BULK_CERTS + 1} certificates ({caclient.BULK_CERTS} generated self-signed CAs and
the lab's own certificate last, so verification succeeds after all are parsed), which OpenSSL
3.0 takes tens of ms to load (the "bundle load" column: the Python client's clock around
`load_verify_locations()`; Debian's 144-certificate `ca-certificates.crt` takes about as long),
nginx with no resumption (every handshake full, every one verifies the certificate), TLS 1.3,
{n} connections per client at {", ".join(f"{r:g}" for r in EXP4_RTTS)} ms RTT (the delay line accepts `--rtt 0`: it then
only forwards, `tcp_rtt` ≈ 0.05 ms). Clients, each making a new TLS context per connection, as
curl does, so every connection pays the load:

- **eager** (`scripts/experiment/caclient.py --mode eager`): `connect()`, a new context,
  `load_verify_locations(bundle)`, then the ClientHello: curl 7.87's order. Not
  `openssl s_client -CAfile`: strace shows it reads the CAfile while setting up, before it
  even connects, so its load lies before the SYN and no wire observer can see it.
- **deferred** (`--mode deferred`): the same client (one process makes one eager and one
  deferred connection, then curl makes one, {n} rounds, so that all three meet the same load
  on the machine), but the ClientHello goes out first (TLS
  over memory BIOs, so nothing of the server's answer is read before the load) and the bundle is
  loaded into the context's store after it: curl 7.88's order with everything else equal.
- **curl** 7.88.1 (Debian 12) with `--cacert bundle` (each process first makes a warm-up
  connection to another port, not counted, which takes OpenSSL's one-time start-up): strace shows `sendto()` of the
  ClientHello, then `openat()` of the bundle, for every connection (7.88 has no CA cache).

Checked in this run (strace, one connection each, at {EXP4_RTTS[0]:g} ms; first occurrence of each system call):

| client | order |
|---|---|
{chr(10).join(f"| {k} | {' → '.join(v) or '–'} |" for k, v in order.items())}

Medians; the clients' clocks start at `connect()` returning; tlsrum's columns are its records
from the client-side capture, matched by local port. `client_hello_delay` + `ttfb` is tlsrum's
figure for the client's "connect → first byte".

{exp4_table(rows)}

The timeline: with load L, round trip R and the server's handshake time S, the eager client's
first byte comes L + 2R + S + (verify, request) after TCP's handshake, the deferred one's
max(L, R + S) + R + (the same), so deferring saves min(L, R + S). Below, that prediction (from
the deferred client's load, `tcp_rtt` and `server_think`); how much of the load tlsrum no longer
finds in the deferred client's `client_think`; and the end-to-end saving (the eager client's
`client_hello_delay` + `ttfb` minus the other's), which also carries the spread of the load
itself: one load takes from {min((r["load_range"] or [0])[0] for r in rows if r["load_range"]):.0f} to {max((r["load_range"] or [0])[1] for r in rows if r["load_range"]):.0f} ms on this shared 2-vCPU machine, and
two medians of {n} can differ by several ms even with the clients taking turns; the column after
it removes that difference (as if both had loaded in the deferred client's median time):

{exp4_savings_table(sav)}

![experiment 4](experiment4-ca-load.png)

**What curl's fix changed, and why it only shows above a certain RTT.** The load did not get cheaper:
it moved. The eager client pays it as `client_hello_delay` (≈ the load at every RTT:
{at("client_hello_delay", "python-eager", lo)}, {at("client_hello_delay", "python-eager", mid)} and
{at("client_hello_delay", "python-eager", hi)} ms at {lo:g}, {mid:g} and {hi:g} ms) and then has a
handshake as short as anyone's. The deferred clients send their ClientHello within a few
ms of `connect()` (curl: {at("client_hello_delay", "curl", lo, 2)} ms) and load while the
ClientHello and the server's flight travel; tlsrum finds whatever the round trip did not cover
in `client_think` (deferred Python: {at("client_think", "python-deferred", lo)} ms at {lo:g} ms,
{at("client_think", "python-deferred", mid)} at {mid:g}, {at("client_think", "python-deferred", hi)} at
{hi:g} ms, the last being just the certificate check; curl {at("client_think", "curl", lo)},
{at("client_think", "curl", mid)}, {at("client_think", "curl", hi)}). So the saving is min(load, RTT +
server_think): hidden behind the round trip {saved("hidden")} ms RTT, and end to end,
with the two loads' difference taken out, {saved("saved_same_load")} (deferred Python against
eager; curl 7.88 against the eager Python client, two programs compared, raw:
{saved("saved_curl")}). With no round trip to hide behind (loopback, a
LAN, a CDN edge next door) the two orders cost the same: all there is to hide the load behind
is the server's `server_think`, half a millisecond, and the measured saving (about a millisecond
either way) is lost in the load's own spread. It grows with the RTT, one
ms per ms, so it stands out of that spread only once the RTT is a few ms or more, and it stops
growing once RTT + `server_think` reaches the load time (here about
{fmt(row("python-deferred", hi).get("load"), 0)} ms): from there on every connection gets the
whole load back, a fixed amount, which is a large share of time to first byte at moderate RTTs
and a shrinking one beyond. A passive observer must add `client_hello_delay` to see
it: tlsrum's `ttfb` starts at the ClientHello, so by `ttfb` alone the fixed client looks
*slower* wherever the load is longer than the round trip (the last column: the load moved from
before `ttfb`'s start into its span), and only `client_hello_delay` + `ttfb`, or the split into
`client_hello_delay` and `client_think`, shows the fix for what it is.
"""


# ---- accuracy and delay tables ----------------------------------------------
def accuracy_table(doc):
    rows = compare.rows(doc)
    groups = {}
    for r in rows:
        groups.setdefault((r["rtt"], r["vantage"], r["expected_kind"]), []).append(r)
    out = ["| RTT ms | vantage | kind (nginx's log) | n | round trips expected / tlsrum | tcp_rtt ms (max error) | "
           "handshake: tlsrum / client ms (max diff) | ttfb: tlsrum / client ms (max diff) | problems |",
           "|---|---|---|---|---|---|---|---|---|"]
    for (rtt, vantage, k), rs in sorted(groups.items(), key=lambda x: (x[0][0], ["client", "server", "live"].index(x[0][1]), str(x[0][2]))):
        timed = [r for r in rs if r.get("handshake_diff") is not None]
        rt_got = sorted({str(r.get("round_trips")) for r in rs})
        tcp = [r.get("tcp_rtt") for r in rs if r.get("tcp_rtt") is not None]
        tcp_err = max((abs(x - rtt) for x in tcp), default=None)
        shift = 0 if vantage == "client" else rtt
        hs = mean(r.get("handshake") for r in timed)
        ttfb = mean(r.get("ttfb") for r in timed)
        out.append(
            f"| {rtt:g} | {vantage} | {k} | {len(rs)} | {rs[0]['expected_round_trips']} / {', '.join(rt_got)} | "
            f"{fmt(mean(tcp), 2)} ({fmt(tcp_err, 2)}) | "
            f"{fmt(hs, 2)} / {fmt(mean(r['client_handshake'] for r in timed), 2)} "
            f"({fmt(max((abs(r['handshake_diff']) for r in timed), default=None), 2)}) | "
            f"{fmt(ttfb, 2)}{'' if not shift or ttfb is None else f' (+{shift:g})'} / {fmt(mean(r['client_ttfb'] for r in timed), 2)} "
            f"({fmt(max((abs(r['ttfb_diff']) for r in timed if r.get('ttfb_diff') is not None), default=None), 2)}) | "
            f"{sum(bool(r['problems']) for r in rs)} |")
    return "\n".join(out)


def delay_table(delays):
    out = ["| RTT ms | measurement | n | median error ms | p99 ms | max ms | within 0.5 ms |", "|---|---|---|---|---|---|---|"]
    for d in delays:
        for name, q in (("ping RTT (capture)", d["ping_error_ms"]), ("one-way A→B", d["one_way_error_ms"]["ab"]),
                        ("one-way B→A", d["one_way_error_ms"]["ba"]), ("line: release − deadline", d["line_late_ms"])):
            if q:
                out.append(f"| {d['rtt']:g} | {name} | {q['n']} | {q['p50']:.3f} | {q['p99']:.3f} | {q['max']:.3f} | "
                           f"{q['within_0_5ms'] * 100:.2f} % |")
    return "\n".join(out)


# ---- charts ------------------------------------------------------------------
def charts(docs, c1, c2, c3, delays):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [c["label"] for c in c1]
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], [c["hs_full"] or 0 for c in c1], 0.4, label="full handshakes")
    ax.bar([i + 0.2 for i in x], [c["hs_res"] or 0 for c in c1], 0.4, label="resumed handshakes")
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("handshake, ms (tlsrum at the client)")
    ax.set_title("1. Session reuse at 100 ms RTT: 100 connections per server policy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(docs / "experiment1-resumption.png", dpi=110)
    plt.close(fig)

    for name, data, ylabel, title in (
            ("experiment2-handshake-cost.png", c2, "handshake, ms (tlsrum at the client)",
             "2. Handshake cost by kind and RTT"),
            ("experiment3-ttfb.png", c3, "time to first byte, ms (tlsrum at the client)",
             "3. TLS 1.3 time to first byte: fresh, resumed, 0-RTT")):
        fig, ax = plt.subplots(figsize=(8, 4))
        kinds = sorted(data)
        w = 0.8 / max(1, len(kinds))
        for j, k in enumerate(kinds):
            ax.bar([i + (j - (len(kinds) - 1) / 2) * w for i in range(len(RTTS))],
                   [data[k].get(r) or 0 for r in RTTS], w, label=k)
        ax.set_xticks(range(len(RTTS)), [f"{r:g} ms RTT" for r in RTTS])
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(docs / name, dpi=110)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for d in delays:
        ax.plot(sorted(d["one_way_samples"]), [i / max(1, len(d["one_way_samples"]) - 1) for i in range(len(d["one_way_samples"]))],
                label=f"{d['rtt']:g} ms RTT")
    ax.axvline(0.5, color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("one-way delay minus configured, ms (log)")
    ax.set_ylabel("fraction of packets")
    ax.set_title("Delay line precision under TLS load (both directions)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(docs / "delayline-precision.png", dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default=str(wanlab.ROOT / "docs"))
    ap.add_argument("--quick", action="store_true", help="10 instead of 100 connections (a smoke run)")
    a = ap.parse_args()
    docs = Path(a.docs)
    docs.mkdir(parents=True, exist_ok=True)
    n1, n23, n4 = (10, 4, 4) if a.quick else (100, 10, 30)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="tlsrum-experiment-") as d:
        work = Path(d)
        delays = []
        for rtt in RTTS:
            wanlab.log(f"delay line precision at {rtt:g} ms")
            dd = delay_accuracy.measure(rtt, work / f"delay-{rtt:g}", pings=300)
            ab, ba = wanlab.one_way_delays(work / f"delay-{rtt:g}" / "client.pcap", work / f"delay-{rtt:g}" / "server.pcap")
            dd["one_way_samples"] = [max(1e-4, abs(x - rtt / 2)) for x in ab + ba]
            delays.append(dd)
        wanlab.log("accuracy at 20/100/260 ms")
        acc = accuracy.run(RTTS, work / "accuracy")
        wanlab.log(f"experiment 1: {n1} connections per policy at 100 ms")
        r1 = exp1(work, n1)
        r23 = []
        for rtt in RTTS:
            wanlab.log(f"experiments 2 and 3 at {rtt:g} ms")
            r23.append(exp23(work, rtt, n23))
        r4, order4 = [], {}
        for rtt in EXP4_RTTS:
            wanlab.log(f"experiment 4 at {rtt:g} ms")
            r4.append(exp4(work, rtt, n4, order4 if rtt == EXP4_RTTS[0] else None))
    t1, c1 = exp1_table(r1)
    t2, c2 = exp2_table(r23)
    t3, c3 = exp3_table(r23)
    rows4 = exp4_rows(r4)
    sav4 = exp4_savings(rows4)
    charts(docs, c1, c2, c3, delays)
    exp4_chart(docs, rows4)
    for dd in delays:
        dd.pop("one_way_samples", None)
    summary = {"generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "elapsed_s": round(time.time() - t0),
               "kernel": platform.release(), "delay": delays, "reruns": acc["reruns"],
               "accuracy_problem_rows": sum(bool(r["problems"]) for r in compare.rows(acc)),
               "ca_load": {"bundle_certs": caclient.BULK_CERTS + 1, "syscall_order": order4, "rows": rows4,
                           "savings": sav4}}
    (docs / "experiments.json").write_text(json.dumps(summary, indent=1) + "\n")
    md = render(summary, delay_table(delays), accuracy_table(acc), t1, t2, t3, acc, n1, n23,
                exp4_section(rows4, sav4, n4, order4))
    # Section 5 is `make experiment-ats`'s (ats_report.py): keep it.
    old = (docs / "experiments.md").read_text() if (docs / "experiments.md").exists() else ""
    if ats_report.BEGIN in old and ats_report.END in old:
        block = ats_report.BEGIN + old.split(ats_report.BEGIN, 1)[1].split(ats_report.END, 1)[0] + ats_report.END
        head, tail = md.split("## What this does not show", 1)
        md = head + block + "\n\n## What this does not show" + tail
    (docs / "experiments.md").write_text(md)
    wanlab.log(f"wrote {docs / 'experiments.md'} in {time.time() - t0:.0f} s")
    return 0


def versions():
    def v(cmd):
        try:
            p = subprocess.run(cmd, capture_output=True, text=True)
            return (p.stdout + p.stderr).strip().splitlines()[0]
        except OSError:
            return "?"
    return f"{v(['nginx', '-v'])}; {v(['curl', '--version'])}; {v(['openssl', 'version'])}; Python {platform.python_version()}"


def render(summary, delay_t, acc_t, t1, t2, t3, acc, n1, n23, s4):
    reruns = "\n".join(f"- {r['rtt']:g} ms, attempt {r['attempt']}: " + "; ".join(r["why"]) for r in acc["reruns"]) or "- none"
    return f"""# Experiments: what each handshake costs, measured passively

Generated by `make experiment` (`scripts/experiment/run.py`) on {summary['generated']} in
{summary['elapsed_s']} s; Linux {summary['kernel']}, 2 vCPUs; {versions()}.
Every number below comes from a real run: nginx in one network namespace, the clients
in another, joined by `tools/delayline` at the stated RTT; tlsrum reads the captures
taken on each namespace's TUN device (`tlsrum replay`), and at the server also watches
live (`tlsrum live --backend pcap`). "tlsrum" columns are its records at the **client**
side unless a column says otherwise; "client's clock" columns are what the client
measured itself (curl `-w`: `time_appconnect - time_connect` for the handshake,
`time_starttransfer - time_connect` for ttfb; the Python and libssl clients measure the
same points), matched to tlsrum's record by the client's local port.

## The delay line

`tools/delayline` joins two namespaces through two TUN devices and forwards raw IP
between them after a per-direction delay (timer heap; `ppoll` with 1 ns timer slack
until 1 ms before the next release, then busy-polling; SCHED_FIFO; memory locked).
Measured under the tests' load (ICMP echo every 10 ms while curl makes TLS
connections through nginx), three ways: the ping RTT from the client's capture, the
one-way delay of every packet (the same bytes leave one TUN device and enter the
other, stamped by the one kernel clock), and the line's own log (release − deadline):

{delay_t}

![delay line precision](delayline-precision.png)

The rare late packets are stalls of the whole forwarding thread: this kernel is built
with `preempt=none` and the VM's 2 vCPUs are shared with everything else running, so a
busy CPU can hold off even a SCHED_FIFO thread for a few ms. The accuracy run checks the
line's log for every connection and reruns an RTT whose link was off by more than 0.5 ms
(see below), so no tlsrum figure is judged against a link that was not what was configured.

## Accuracy: tlsrum against the configured RTT, nginx's log and the clients' clocks

`scripts/experiment/accuracy.py` (asserted by `agent/tests/wan_accuracy.rs` in `make test`):
every kind of handshake at each RTT; the kind is what nginx logged (`$ssl_protocol`,
`$ssl_session_reused`, `$ssl_early_data`). Clients: curl (TLS 1.2 full and session-ID
resumption, TLS 1.3 full and PSK), Python's ssl (TLS 1.2 tickets: curl's OpenSSL backend
never sends a TLS 1.2 SessionTicket), a libssl client through ctypes (TLS 1.3 0-RTT with
`SSL_write_early_data`: curl 7.88 has no early data) and `openssl s_client -early_data`
(no clock of its own: kind and round trips only). Each client first makes a warm-up
connection to another port, which takes its one-time library start-up (about 2 ms between
`connect()` and the ClientHello for curl's first connection, 2.5 ms for OpenSSL's first
early-data write); warm-ups are checked for kind and round trips but not against the clock.

Rules: `tcp_rtt` within 1 ms of the configured RTT; `round_trips` exact; `handshake` and
`ttfb` within 2 ms or 2 % of the client's clock, which may be longer than tlsrum's by what
the client's capture shows of the client's own time (`compare.client_slack`): the gap
between its ACK and its ClientHello (its clock starts at `connect()` returning, somewhere
in between); for `handshake` the gap before its request (it reads that clock after its
handshake and before it sends the request); for `ttfb` its idle beyond 1 ms after the
server's last data before it closed (a client stalled before reading its clock). The clients whose clocks are labels
run at SCHED_FIFO 40, below the delay line. Columns: mean of tlsrum, mean of the client's
clock, and in brackets the largest per-connection difference.

{acc_t}

**Offsets between vantage points.** At the client, tlsrum starts at the ClientHello leaving
and the client's clock at `connect()` returning: the same instant but for the client's own
work in between (tens to hundreds of µs once warm). At the server the phases start when the
ClientHello *arrives*, one one-way delay later. The handshake ends with something the client
sends (its Finished; for a full TLS 1.2 handshake its first data or its ACK of the server's
Finished), which also arrives one one-way delay later, so `handshake` has the same length at
both ends. `ttfb` ends when the server *sends* its first data, which still has to travel to
the client: server-side `ttfb` = client-side `ttfb` − RTT (the "(+RTT)" in the table). For
0-RTT the response leaves with the server's first flight, so its ttfb is about one RTT at
the client and about zero at the server.

Reruns (the line was late by more than 0.5 ms on a connection, or only a client's own clock
disagreed — a client process scheduled late; a definition error in tlsrum is off by round
trips every time, and a wrong kind or round-trip count fails at once):

{reruns}

## 1. Session reuse at 100 ms RTT: what a resumed handshake saves

nginx with three policies — `ssl_session_cache none` (session IDs handed out but never
stored) and no tickets, a shared session cache without tickets, tickets without a cache — and
{n1} connections to each from a client that offers its last session every time: Python's ssl
for TLS 1.2 (it offers both the session ID and a ticket), curl for TLS 1.3. "Saved" is the median
full handshake minus the median resumed handshake. "Avoidable" is tlsrum's `timing.avoidable`
summed: for every full handshake whose client offered resumption, the round trips a resumed
one would have saved × `tcp_rtt` (TLS 1.2: one; TLS 1.3: none unless the client offered early
data). The same figure is the Prometheus counter `tls_avoidable_handshake_seconds_total`,
checked against the records by the accuracy test.

{t1}

![experiment 1](experiment1-resumption.png)

A resumed TLS 1.2 handshake saves one RTT (100 ms) of handshake. With TLS 1.3 a PSK resumption
saves no round trip, only the certificate and its signature (CPU time and bytes): "saved" is a
fraction of a millisecond here, and tlsrum says so by reporting 0 avoidable for TLS 1.3 full
handshakes whose clients offered a PSK without early data.

## 2. TLS 1.2 versus TLS 1.3 handshake cost

{n23} connections of each kind at each RTT (curl; one warm-up connection not counted).
Figures in experiments 1–3 are medians (one stalled process on a shared 2-vCPU box moves a
mean by milliseconds).

{t2}

![experiment 2](experiment2-handshake-cost.png)

A full TLS 1.2 handshake costs two round trips, TLS 1.3 and any resumption one; the handshake
time is that many RTTs plus a few ms of server and client CPU (the ECDSA P-256 signature and
certificate check on a full handshake), and the RTT multiple converges to the round-trip count
as the RTT grows.

## 3. TLS 1.3 fresh, resumed, resumed with early data: time to first byte

{n23} connections of each kind at each RTT: fresh (curl, TLS 1.3 full), resumed (libssl client,
PSK without early data), 0-RTT (libssl client, the request sent as early data; nginx logged
`$ssl_early_data` = 1 for each).

{t3}

![experiment 3](experiment3-ttfb.png)

0-RTT takes the request off the handshake's critical path: the response comes back one RTT
after the ClientHello, against two for a fresh or PSK-resumed TLS 1.3 connection (TCP's own
round trip, reported as `tcp_rtt`, comes on top of all of them). tlsrum sees 0-RTT's
acceptance without keys through the client's EndOfEarlyData (heuristic `eoed_before_finished`,
below).

{s4}

## How tlsrum tells accepted 0-RTT without keys (heuristic `eoed_before_finished`)

With the PSK accepted, whether early data was accepted is in the server's encrypted
EncryptedExtensions. But the client answers it in a way the wire shows: a client whose early
data was accepted must send EndOfEarlyData before its Finished (RFC 8446 §4.5), and one whose
early data was rejected must not. Both are encrypted, but their sizes are fixed for the
negotiated suite (no padding): EndOfEarlyData 4 bytes + 1 content type + AEAD tag = 21 bytes
(13 for CCM_8), Finished 4 + hash + 1 + tag = 53 or 69. tlsrum says `accepted` when the
client's first encrypted records after it acknowledged the ServerHello are exactly those two,
back to back in one segment; otherwise it still says `attempted` (or uses a key log, with
`--keylog`). The lookalike — a client writing exactly 4 more bytes of early data after the
server's flight arrived and coalescing them with its Finished — is not something a TLS stack
does; padded records simply leave the answer `attempted`. With 0-RTT accepted, `ttfb` counts
the server's first record after its Finished-sized record (the 0.5-RTT response); before this
fix it was null, and `round_trips` was null instead of 0 (regression tests in
`analyzer/src/handshake/tests.rs`).

## What this does not show

- Loss and jitter: the delay line supports both (`--loss`, `--jitter`), these runs use neither.
- The client's clock for `openssl s_client` (it prints none); its 0-RTT connections are
  checked for kind and round trips only.
- curl 7.88 cannot send early data or TLS 1.2 tickets; other clients stand in (above).
"""


if __name__ == "__main__":
    sys.exit(main())
