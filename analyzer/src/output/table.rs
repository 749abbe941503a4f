//! The summary table printed by `tlsrum replay`: one row per server name
//! and transport (TLS over TCP and QUIC apart), totals per transport.
use std::io::{self, Write};

use crate::aggregate::{Aggregate, Summary};
use crate::client_names::ClientNames;
use crate::never_resume::ByClient;

fn ms(v: Option<f64>) -> String {
    v.map(|v| {
        if v < 10.0 {
            format!("{v:.2}")
        } else {
            format!("{v:.1}")
        }
    })
    .unwrap_or_else(|| "-".into())
}

fn pct(v: Option<f64>) -> String {
    v.map(|v| format!("{:.0}%", v * 100.0))
        .unwrap_or_else(|| "-".into())
}

fn row(name: &str, transport: &str, a: &Aggregate) -> Vec<String> {
    let early = a.early_data();
    vec![
        name.to_string(),
        transport.to_string(),
        a.connections.to_string(),
        a.full.to_string(),
        a.resumed_session_id.to_string(),
        a.resumed_ticket.to_string(),
        a.resumed_psk.to_string(),
        a.declined.to_string(),
        format!("{}/{}/{}", early.tried, early.accepted, early.rejected),
        a.failed.to_string(),
        a.incomplete.to_string(),
        pct(a.resumption_rate()),
        ms(a.handshake_full_ms.quantile(0.5)),
        ms(a.handshake_resumed_ms.quantile(0.5)),
        ms(a.ttfb_ms.quantile(0.5)),
        ms(a.client_hello_delay_ms.quantile(0.5)),
        ms(a.server_think_ms.quantile(0.5)),
        ms(a.client_think_ms.quantile(0.5)),
        format!("{:.1}", a.avoidable_ms),
    ]
}

const HEAD: [&str; 19] = [
    "server_name",
    "transport",
    "conns",
    "full",
    "res:id",
    "res:ticket",
    "res:psk",
    "declined",
    "0rtt:try/ok/rej",
    "failed",
    "incompl",
    "resumed%",
    "hs_full_p50",
    "hs_resumed_p50",
    "ttfb_p50",
    "ch_delay_p50",
    "srv_think_p50",
    "cli_think_p50",
    "avoidable_ms",
];

/// Writes the table: [`Summary::rows`] (the `top` busiest (name,
/// transport) rows, the rest folded, totals per transport and overall).
pub fn write_table(
    w: &mut impl Write,
    s: &Summary,
    top: usize,
    names: Option<&ClientNames>,
) -> io::Result<()> {
    let mut rows: Vec<Vec<String>> = vec![HEAD.iter().map(|h| h.to_string()).collect()];
    let mut body = Vec::new();
    for r in s.rows(top) {
        if r.total && body.is_empty() {
            body.push(rows.len());
        }
        rows.push(row(r.name, r.transport, &r.agg));
    }
    print_rows(w, &rows, &body)?;
    writeln!(w, "(medians in ms of handshake, ttfb, ch_delay = TCP handshake end to ClientHello, srv_think and cli_think = each side's own time in the handshake; 0rtt: tried (offered, whatever the outcome) / accepted / rejected; declined = full handshakes whose client offered resumption)")?;
    write_roles(w, s, top)?;
    write_never_resume(w, &s.clients, names)
}

/// The section by role, when records carry one (`--local`, live): per
/// role its busiest server names and a total, with the pool view: the
/// first use's delay after the handshake, the share used on demand, and
/// the connections' lifetime.
fn write_roles(w: &mut impl Write, s: &Summary, top: usize) -> io::Result<()> {
    if s.by_role.is_empty() {
        return Ok(());
    }
    let mut head: Vec<String> = HEAD.iter().map(|h| h.to_string()).collect();
    head[1] = "role".into();
    head.extend(["idle_p50", "on_demand%", "lifetime_p50"].map(String::from));
    let mut rows = vec![head];
    let mut body = Vec::new();
    let with_pool = |mut r: Vec<String>, a: &Aggregate| {
        r.push(ms(a.idle_before_use_ms.quantile(0.5)));
        r.push(pct(a.on_demand_rate()));
        r.push(ms(a.lifetime_ms.quantile(0.5)));
        r
    };
    for (role, (names, rest)) in s.top_by_role(top) {
        if rows.len() > 1 {
            body.push(rows.len());
        }
        for (n, a) in names {
            rows.push(with_pool(row(n, role.as_str(), a), a));
        }
        if let Some(rest) = &rest {
            rows.push(with_pool(
                row(crate::aggregate::OTHER, role.as_str(), rest),
                rest,
            ));
        }
        if let Some(a) = s.by_role.get(&role) {
            rows.push(with_pool(row("TOTAL", role.as_str(), a), a));
        }
    }
    writeln!(w)?;
    writeln!(
        w,
        "by role (inbound: this host is the TLS server, outbound: the client, transit: neither)"
    )?;
    print_rows(w, &rows, &body)?;
    writeln!(w, "(idle = handshake end to the client's first application data; on_demand = share used within {} ms of it, the rest pooled or pre-warmed; lifetime = first packet to FIN/RST, known for connections closed before their record went out or with --record-at close)", crate::aggregate::ON_DEMAND_MS)
}

/// Aligned columns, the first two left-aligned; a rule before each row
/// index in `rules`.
fn print_rows(w: &mut impl Write, rows: &[Vec<String>], rules: &[usize]) -> io::Result<()> {
    let cols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for (i, r) in rows.iter().enumerate() {
        if rules.contains(&i) {
            writeln!(
                w,
                "{}",
                widths
                    .iter()
                    .map(|&n| "-".repeat(n))
                    .collect::<Vec<_>>()
                    .join("  ")
            )?;
        }
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if c <= 1 {
                    format!("{v:<w$}", w = widths[c])
                } else {
                    format!("{v:>w$}", w = widths[c])
                }
            })
            .collect();
        writeln!(w, "{}", cells.join("  ").trim_end())?;
    }
    Ok(())
}

/// The section "clients that never resume": the clients (by `ja4_stable`) with the most
/// full handshakes that offered nothing or were declined; nothing when no
/// fingerprinted handshake missed a resumption.
pub fn write_never_resume(
    w: &mut impl Write,
    clients: &ByClient,
    names: Option<&ClientNames>,
) -> io::Result<()> {
    let list = clients.never_resume();
    if list.is_empty() {
        return Ok(());
    }
    let mut head = vec!["ja4_stable"];
    if names.is_some() {
        head.push("client");
    }
    head.extend([
        "full_no_offer",
        "declined",
        "resumed",
        "resumed%",
        "avoidable_ms",
        "avoidable_share",
    ]);
    let left = head.len() - 6;
    let mut rows = vec![head.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    for (fp, c) in list {
        let mut r = vec![fp.to_string()];
        if let Some(n) = names {
            r.push(n.get(fp).unwrap_or("-").to_string());
        }
        r.extend([
            c.full_no_offer.to_string(),
            c.declined.to_string(),
            c.resumed.to_string(),
            pct(c.resumption_rate()),
            format!("{:.1}", c.avoidable_ms),
            pct(clients.share(c)),
        ]);
        rows.push(r);
    }
    writeln!(w)?;
    writeln!(w, "clients that never resume")?;
    crate::output::slices::write_columns(w, &rows, left, Some(1))?;
    writeln!(w, "(clients by ja4_stable, JA4 without the session-dependent extensions; by full handshakes that offered no resumption (full_no_offer) or whose offer was declined; avoidable_share = share of all avoidable ms)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::*;

    fn tcp(sni: &str, kind: HandshakeKind, timing: Timing) -> ConnectionRecord {
        ConnectionRecord {
            sni: Some(sni.into()),
            resumption: (kind == HandshakeKind::Resumed).then_some(Resumption::Psk),
            timing,
            ..ConnectionRecord::sample(kind)
        }
    }

    /// The cells of `name`'s row under each heading.
    fn rows(text: &str) -> Vec<std::collections::BTreeMap<&str, &str>> {
        let mut lines = text.lines().filter(|l| !l.starts_with('-'));
        let head: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        lines
            .take_while(|l| !l.starts_with('('))
            .map(|l| head.iter().copied().zip(l.split_whitespace()).collect())
            .collect()
    }

    /// Issue 14: the medians of client_hello_delay, server_think and
    /// client_think per row, each over the records that have it, and "-"
    /// where none has.
    #[test]
    fn think_time_medians_per_row() {
        let t = |chd: f64, server: f64, client: Option<f64>| Timing {
            client_hello_delay: Some(chd),
            server_think: Some(server),
            client_think: client,
            ..Timing::default()
        };
        let mut s = Summary::default();
        for r in [
            tcp("a.test", HandshakeKind::Full, t(1.0, 40.0, Some(3.0))),
            tcp("a.test", HandshakeKind::Full, t(2.0, 50.0, Some(4.0))),
            tcp("a.test", HandshakeKind::Resumed, t(300.0, 60.0, None)),
            tcp("b.test", HandshakeKind::Full, Timing::default()),
        ] {
            s.add(&r);
        }
        let mut out = Vec::new();
        write_table(&mut out, &s, 10, None).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows = rows(&text);
        let row = |name: &str| {
            rows.iter()
                .find(|r| r["server_name"] == name)
                .unwrap_or_else(|| panic!("no row {name}:\n{text}"))
        };
        // The exact medians 2, 50 and 3, within the histogram's 0.5%
        // (and the table's rounding).
        let near = |cell: &str, want: f64| {
            let v: f64 = cell.parse().unwrap_or_else(|_| panic!("{cell:?}:\n{text}"));
            assert!(
                (v - want).abs() <= want * 0.005 + 0.05,
                "{v} vs {want}:\n{text}"
            );
        };
        let a = row("a.test");
        near(a["ch_delay_p50"], 2.0);
        near(a["srv_think_p50"], 50.0);
        near(a["cli_think_p50"], 3.0);
        let b = row("b.test");
        for c in ["ch_delay_p50", "srv_think_p50", "cli_think_p50"] {
            assert_eq!(b[c], "-", "{c}:\n{text}");
        }
        assert!(text.contains("srv_think and cli_think"), "{text}");
    }

    /// Issue 17: "tried" counts every 0-RTT offer, rejected ones included
    /// (the table said 5 tried of 6, the HTML report 3).
    #[test]
    fn zero_rtt_tried_counts_every_outcome() {
        let mut s = Summary::default();
        for e in [
            EarlyData::Accepted,
            EarlyData::Rejected,
            EarlyData::Attempted,
            EarlyData::Attempted,
            EarlyData::None,
        ] {
            let mut r = tcp("a.test", HandshakeKind::Resumed, Timing::default());
            r.early_data = Some(e);
            s.add(&r);
        }
        let mut out = Vec::new();
        write_table(&mut out, &s, 10, None).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows = rows(&text);
        let row = rows.iter().find(|r| r["server_name"] == "a.test").unwrap();
        assert_eq!(row["0rtt:try/ok/rej"], "4/1/1", "{text}");
    }

    /// Issue 16: without roles the output has no role section; with them,
    /// a section per role with the pool view: the median idle before use,
    /// the share used within 10 ms (on demand), the median lifetime.
    #[test]
    fn role_section_only_when_roles_are_known() {
        let t = |idle: f64, life: Option<f64>| Timing {
            idle_before_use: Some(idle),
            lifetime: life,
            ..Timing::default()
        };
        let mut plain = Summary::default();
        plain.add(&tcp("a.test", HandshakeKind::Full, t(1.0, None)));
        let mut out = Vec::new();
        write_table(&mut out, &plain, 10, None).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("by role"), "{text}");

        let mut s = Summary::default();
        for (role, idle, life) in [
            (Role::Outbound, 2.0, Some(1000.0)),
            (Role::Outbound, 400.0, Some(3000.0)),
            (Role::Outbound, 500.0, None),
            (Role::Inbound, 0.5, None),
        ] {
            let mut r = tcp("origin.test", HandshakeKind::Full, t(idle, life));
            r.role = Some(role);
            s.add(&r);
        }
        let mut out = Vec::new();
        write_table(&mut out, &s, 10, None).unwrap();
        let text = String::from_utf8(out).unwrap();
        let section = &text[text.find("by role").unwrap_or_else(|| panic!("{text}"))..];
        let line = |role: &str| {
            section
                .lines()
                .find(|l| l.starts_with("TOTAL") && l.split_whitespace().nth(1) == Some(role))
                .unwrap_or_else(|| panic!("no {role} total:\n{text}"))
                .split_whitespace()
                .collect::<Vec<_>>()
        };
        let out_row = line("outbound");
        let n = out_row.len();
        assert_eq!(out_row[2], "3", "{text}");
        // Median idle 400 (within the histogram's 0.5%), one of three
        // used on demand, median lifetime of the two closed.
        let idle: f64 = out_row[n - 3].parse().unwrap();
        assert!((idle - 400.0).abs() <= 2.0, "{text}");
        assert_eq!(out_row[n - 2], "33%", "{text}");
        let life: f64 = out_row[n - 1].parse().unwrap();
        assert!((1000.0..=3000.0).contains(&life), "{text}");
        let in_row = line("inbound");
        assert_eq!(
            (in_row[2], in_row[in_row.len() - 2]),
            ("1", "100%"),
            "{text}"
        );
        assert_eq!(in_row[in_row.len() - 1], "-", "{text}");
    }
}
