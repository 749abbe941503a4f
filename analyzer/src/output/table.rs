//! The summary table printed by `tlsrum replay`: one row per server name.
use std::io::{self, Write};

use crate::aggregate::{Aggregate, Summary};

fn ms(v: Option<f64>) -> String {
    v.map(|v| if v < 10.0 { format!("{v:.2}") } else { format!("{v:.1}") }).unwrap_or_else(|| "-".into())
}

fn pct(v: Option<f64>) -> String {
    v.map(|v| format!("{:.0}%", v * 100.0)).unwrap_or_else(|| "-".into())
}

fn row(name: &str, a: &Aggregate) -> Vec<String> {
    vec![
        name.to_string(),
        a.connections.to_string(),
        a.full.to_string(),
        a.resumed_session_id.to_string(),
        a.resumed_ticket.to_string(),
        a.resumed_psk.to_string(),
        a.declined.to_string(),
        format!("{}/{}/{}", a.early_attempted + a.early_accepted, a.early_accepted, a.early_rejected),
        a.failed.to_string(),
        a.incomplete.to_string(),
        pct(a.resumption_rate()),
        ms(a.handshake_full_ms.quantile(0.5)),
        ms(a.handshake_resumed_ms.quantile(0.5)),
        ms(a.ttfb_ms.quantile(0.5)),
        format!("{:.1}", a.avoidable_ms),
    ]
}

const HEAD: [&str; 15] = [
    "server_name", "conns", "full", "res:id", "res:ticket", "res:psk", "declined", "0rtt:try/ok/rej",
    "failed", "incompl", "resumed%", "hs_full_p50", "hs_resumed_p50", "ttfb_p50", "avoidable_ms",
];

/// Writes the table: the `top` busiest names, the rest folded, and a total.
pub fn write_table(w: &mut impl Write, s: &Summary, top: usize) -> io::Result<()> {
    let (names, rest) = s.top(top);
    let mut rows: Vec<Vec<String>> = vec![HEAD.iter().map(|h| h.to_string()).collect()];
    rows.extend(names.iter().map(|(n, a)| row(n, a)));
    if let Some(rest) = &rest {
        rows.push(row(crate::aggregate::OTHER, rest));
    }
    rows.push(row("TOTAL", &s.total));
    let widths: Vec<usize> = (0..HEAD.len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    for (i, r) in rows.iter().enumerate() {
        if i == rows.len() - 1 {
            writeln!(w, "{}", widths.iter().map(|&n| "-".repeat(n)).collect::<Vec<_>>().join("  "))?;
        }
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, v)| if c == 0 { format!("{v:<w$}", w = widths[c]) } else { format!("{v:>w$}", w = widths[c]) })
            .collect();
        writeln!(w, "{}", cells.join("  ").trim_end())?;
    }
    writeln!(w, "(handshake and ttfb medians in ms; 0rtt: attempted incl. accepted / accepted / rejected; declined = full handshakes whose client offered resumption)")
}
