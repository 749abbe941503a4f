//! The summary table printed by `tlsrum replay`: one row per server name
//! and transport (TLS over TCP and QUIC apart), totals per transport.
use std::io::{self, Write};

use crate::aggregate::{Aggregate, Summary};
use crate::record::Transport;

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
    vec![
        name.to_string(),
        transport.to_string(),
        a.connections.to_string(),
        a.full.to_string(),
        a.resumed_session_id.to_string(),
        a.resumed_ticket.to_string(),
        a.resumed_psk.to_string(),
        a.declined.to_string(),
        format!(
            "{}/{}/{}",
            a.early_attempted + a.early_accepted,
            a.early_accepted,
            a.early_rejected
        ),
        a.failed.to_string(),
        a.incomplete.to_string(),
        pct(a.resumption_rate()),
        ms(a.handshake_full_ms.quantile(0.5)),
        ms(a.handshake_resumed_ms.quantile(0.5)),
        ms(a.ttfb_ms.quantile(0.5)),
        format!("{:.1}", a.avoidable_ms),
    ]
}

const HEAD: [&str; 16] = [
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
    "avoidable_ms",
];

fn transport_name(t: Transport) -> &'static str {
    match t {
        Transport::Tcp => "tcp",
        Transport::Quic => "quic",
    }
}

/// Writes the table: the `top` busiest (name, transport) rows, the rest
/// folded, a total per transport when there are several, and a total.
pub fn write_table(w: &mut impl Write, s: &Summary, top: usize) -> io::Result<()> {
    let (names, rest) = s.top_by_transport(top);
    let mut rows: Vec<Vec<String>> = vec![HEAD.iter().map(|h| h.to_string()).collect()];
    rows.extend(names.iter().map(|(n, t, a)| row(n, transport_name(*t), a)));
    if let Some(rest) = &rest {
        rows.push(row(crate::aggregate::OTHER, "", rest));
    }
    let body = rows.len();
    if s.by_transport.len() > 1 {
        rows.extend(
            s.by_transport
                .iter()
                .map(|(t, a)| row("TOTAL", transport_name(*t), a)),
        );
    }
    rows.push(row("TOTAL", "all", &s.total));
    let widths: Vec<usize> = (0..HEAD.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for (i, r) in rows.iter().enumerate() {
        if i == body {
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
    writeln!(w, "(handshake and ttfb medians in ms; 0rtt: attempted incl. accepted / accepted / rejected; declined = full handshakes whose client offered resumption)")
}
