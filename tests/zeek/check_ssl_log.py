"""Checks `tlsrum replay --format zeek|zeek-json` against independent readers.

For each capture: the TSV log must read with parsezeeklogs (PyPI) with no
line skipped and every value of its declared type; the JSON log must give the
same rows; community_id must equal the `communityid` package's (PyPI,
Corelight's reference); and, for TLS over TCP, the standard columns must
equal what tshark shows: version, cipher, curve, server_name, next_protocol,
resumed by Zeek's rule (main.zeek) from tshark's session IDs and extensions,
and cert_chain_fps from tshark's certificate bytes.

Usage: check_ssl_log.py TLSRUM CAPTURE...   (prints a summary, exits 1 on a mismatch)
"""
import hashlib
import io
import re
import subprocess
import sys

import communityid
from parsezeeklogs import ZeekLog

NEWER_GROUPS = {4587: "SecP256r1MLKEM768", 4588: "X25519MLKEM768", 4589: "SecP384r1MLKEM1024",
                25497: "X25519Kyber768Draft00", 25498: "SecP256r1Kyber768Draft00"}


# consts.zeek's cipher_desc where it is not the IANA name upper-cased.
ZEEK_CIPHERS = {0x002C: "unknown-44", 0x002D: "unknown-45", 0x002E: "unknown-46",
                0x1306: "TLS_AEGIS_256_SHA384"}


def zeek_version(v):
    names = {0x0002: "SSLv2", 0x0300: "SSLv3", 0x0301: "TLSv10", 0x0302: "TLSv11",
             0x0303: "TLSv12", 0x0304: "TLSv13"}
    if v in names:
        return names[v]
    if v // 0xFF == 0x7F:
        return f"TLSv13-draft{v % 0x7F}"
    return f"unknown-{v}"


def read(text, errors):
    if not text.strip():  # a JSON log with no rows is empty
        return None, []
    log = ZeekLog(io.StringIO(text), on_error=lambda n, line, exc: errors.append(f"line {n}: {exc}"))
    with log:
        rows = list(log)
    return log, rows


TYPES = {
    "time": float, "interval": float, "count": int, "port": int,
    "bool": bool, "string": str, "addr": str,
}


def check_types(log, rows, problems, name):
    for i, row in enumerate(rows):
        for field, ztype in log.types.items():
            v = row.get(field)
            if v is None:
                continue
            inner = re.match(r"(set|vector)\[(\w+)\]", ztype)
            want = TYPES[inner.group(2) if inner else ztype]
            items = v if inner else [v]
            if inner and not isinstance(v, list):
                problems.append(f"{name} row {i}: {field} not a list")
            for item in items:
                if not isinstance(item, want):
                    problems.append(f"{name} row {i}: {field}={item!r} is not {ztype}")


def tshark(cap):
    fields = ["tcp.stream", "ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst", "tcp.dstport",
              "tls.handshake.type", "tls.record.content_type", "tls.handshake.version",
              "tls.handshake.extensions.supported_version", "tls.handshake.ciphersuite",
              "tls.handshake.extensions_key_share_group", "tls.handshake.extensions_key_share_selected_group",
              "tls.handshake.server_named_curve",
              "tls.handshake.extensions_server_name", "tls.handshake.extensions_alpn_str",
              "tls.handshake.session_id", "tls.handshake.extension.type",
              "tls.handshake.extension.len", "tls.handshake.certificate", "_ws.malformed"]
    cmd = ["tshark", "-r", cap, "-Y", "tcp && tls", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    names = {}
    verbose = subprocess.run(["tshark", "-r", cap, "-Y", "tls.handshake.type == 2 || tls.handshake.type == 12", "-V"],
                             capture_output=True, text=True).stdout
    for name, code in re.findall(r"Cipher Suite: (\S+) \((0x[0-9a-f]{4})\)", verbose):
        names[int(code, 16)] = name
    for name, code in re.findall(r"(?:Group|Named Curve): (\S+) \((0x[0-9a-f]{4}|\d+)\)", verbose):
        names[("group", int(code, 0))] = name
    conns = {}
    for line in out.splitlines():
        c = dict(zip(fields, line.split("\t")))
        stream = c["tcp.stream"]
        src = c["ip.src"] or c["ipv6.src"]
        dst = c["ip.dst"] or c["ipv6.dst"]
        conn = conns.setdefault(stream, {"client": None, "ch": None, "sh": None, "certs": None,
                                         "client_ccs": False, "cke": False, "ske_curve": None,
                                         "malformed": False})
        conn["malformed"] |= bool(c["_ws.malformed"])
        types = c["tls.handshake.type"].split("|") if c["tls.handshake.type"] else []
        side = None
        if "1" in types:
            conn["client"] = (src, int(c["tcp.srcport"]), dst, int(c["tcp.dstport"]))
            conn["ch"] = c
        if conn["client"]:
            side = "client" if (src, int(c["tcp.srcport"])) == conn["client"][:2] else "server"
        if "2" in types and side == "server":
            conn["sh"] = c
        if side == "client" and "16" in types:
            conn["cke"] = True
        if side == "client" and "20" in c["tls.record.content_type"].split("|") and not conn["cke"]:
            conn["client_ccs"] = True
        if side == "server" and "11" in types and conn["certs"] is None and c["tls.handshake.certificate"]:
            conn["certs"] = [hashlib.sha256(bytes.fromhex(h.replace(":", ""))).hexdigest()
                             for h in c["tls.handshake.certificate"].split("|")]
        if side == "server" and c["tls.handshake.server_named_curve"]:
            conn["ske_curve"] = int(c["tls.handshake.server_named_curve"], 0)
    return conns, names


def first(v):
    return v.split("|")[0] if v else ""


def oracle(conn, names):
    ch, sh = conn["ch"], conn["sh"]
    want = {"server_name": first(ch["tls.handshake.extensions_server_name"]) or None}
    if sh is None:
        return want
    sv = sh["tls.handshake.extensions.supported_version"]
    version = int(first(sv), 0) if sv else int(first(sh["tls.handshake.version"]), 0)
    want["version"] = zeek_version(version)
    cipher = int(first(sh["tls.handshake.ciphersuite"]), 0)
    want["cipher"] = names.get(cipher, f"unknown-{cipher}")
    draft14 = want["cipher"] == "Unknown"  # tshark 4.0 misreads draft 14's ServerHello
    # Zeek's SSL::cipher_desc names are its constants': IANA's upper-cased
    # (TLS_DH_ANON_...), with a few suites named otherwise or not at all.
    if not want["cipher"].startswith("unknown-"):
        want["cipher"] = ZEEK_CIPHERS.get(cipher, want["cipher"].upper())
    # Groups tshark 4.0 does not name yet, by Zeek's SSL::ec_curves.
    for code, name in NEWER_GROUPS.items():
        if names.get(("group", code)) in (None, "Unknown"):
            names[("group", code)] = name
    group = sh["tls.handshake.extensions_key_share_group"] or sh["tls.handshake.extensions_key_share_selected_group"]
    curve = int(first(group), 0) if group else conn["ske_curve"]
    want["curve"] = None if curve is None else names.get(("group", curve), f"unknown-{curve}")
    if draft14:
        del want["cipher"], want["curve"]
    want["next_protocol"] = (first(sh["tls.handshake.extensions_alpn_str"]) or None) if version <= 0x0303 else None
    # Zeek's resumed (main.zeek): equal non-empty session IDs below TLS 1.3,
    # a pre_shared_key in both hellos, or a ticket with an empty session ID
    # and the client's CCS before any ClientKeyExchange.
    csid = first(ch["tls.handshake.session_id"]).replace(":", "")
    ssid = first(sh["tls.handshake.session_id"]).replace(":", "")
    csid = "" if set(csid) <= {"0"} and len(csid) == 64 else csid
    by_sid = csid != "" and csid == ssid and version // 0xFF != 0x7F and version != 0x0304
    ch_ext = ch["tls.handshake.extension.type"].split("|")
    ch_len = ch["tls.handshake.extension.len"].split("|")
    sh_ext = sh["tls.handshake.extension.type"].split("|")
    by_psk = "41" in ch_ext and "41" in sh_ext
    ticket = any(t == "35" and l != "0" for t, l in zip(ch_ext, ch_len))
    by_ticket = ticket and csid == "" and conn["client_ccs"]
    want["resumed"] = by_sid or by_psk or by_ticket
    if version <= 0x0303:
        want["cert_chain_fps"] = conn["certs"]
    return want


def check(tlsrum, cap):
    """One capture: (problems, rows, community IDs checked, rows vs tshark, skipped)."""
    problems, rows_read, compared, cid_checked, skipped = [], 0, 0, 0, 0
    tsv = subprocess.run([tlsrum, "replay", "--format", "zeek", cap], capture_output=True, text=True)
    jsn = subprocess.run([tlsrum, "replay", "--format", "zeek-json", cap], capture_output=True, text=True)
    if tsv.returncode or jsn.returncode:
        return [f"{cap}: tlsrum failed: {tsv.stderr.strip()} {jsn.stderr.strip()}"], 0, 0, 0, 0
    errors = []
    log, rows = read(tsv.stdout, errors)
    _, jrows = read(jsn.stdout, errors)
    problems += [f"{cap}: {e}" for e in errors]
    if log.path != "ssl" or "#close\t" not in tsv.stdout:
        problems.append(f"{cap}: header block or #close missing")
    check_types(log, rows, problems, cap)
    rows_read += len(rows)
    if len(rows) != len(jrows):
        problems.append(f"{cap}: {len(rows)} TSV rows, {len(jrows)} JSON rows")
    for i, (t, j) in enumerate(zip(rows, jrows)):
        t = {k: v for k, v in t.items() if v is not None}
        if list(t) != list(j):
            problems.append(f"{cap} row {i}: TSV columns {list(t)} JSON keys {list(j)}")
        for k in set(t) | set(j):
            a, b = t.get(k), j.get(k)
            same = abs(a - b) < 1e-6 if isinstance(a, float) and isinstance(b, (int, float)) else a == b
            if not same:
                problems.append(f"{cap} row {i}: {k}: TSV {a!r} JSON {b!r}")
    cid = communityid.CommunityID()
    conns, names = tshark(cap)
    by_tuple = {c["client"]: c for c in conns.values() if c["client"] and c["ch"]}
    for r in rows:
        key = (r["id.orig_h"], r["id.orig_p"], r["id.resp_h"], r["id.resp_p"])
        # The row does not name its transport: the ID hashes it, so
        # matching either one's is matching.
        ids = {cid.calc(make(key[0], key[2], key[1], key[3]))
               for make in (communityid.FlowTuple.make_tcp, communityid.FlowTuple.make_udp)}
        if r["community_id"] not in ids:
            problems.append(f"{cap}: community_id {r['community_id']} for {key}")
        cid_checked += 1
        if key not in by_tuple:
            continue
        if by_tuple[key]["malformed"]:  # tshark gave up on part of it
            skipped += 1
            continue
        compared += 1
        for k, v in oracle(by_tuple[key], names).items():
            got = r.get(k)
            if got != v:
                problems.append(f"{cap} {key}: {k}: tlsrum {got!r}, tshark {v!r}")
    return problems, rows_read, cid_checked, compared, skipped


def main():
    from concurrent.futures import ThreadPoolExecutor

    tlsrum, caps = sys.argv[1], sys.argv[2:]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda cap: check(tlsrum, cap), caps))
    problems = [p for r in results for p in r[0]]
    rows_read, cid_checked, compared, skipped = (sum(r[i] for r in results) for i in range(1, 5))
    for p in problems:
        print(p)
    print(f"captures={len(caps)} rows={rows_read} community_ids={cid_checked} "
          f"tcp_rows_vs_tshark={compared} tshark_malformed={skipped} problems={len(problems)}")
    sys.exit(1 if problems or compared == 0 else 0)


if __name__ == "__main__":
    main()
