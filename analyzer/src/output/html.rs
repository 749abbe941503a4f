//! `tlsrum replay --html FILE`: one self-contained page (inline CSS and SVG,
//! no scripts, no fetches) with the summary table (the rows and numbers of
//! `replay`'s table: [`Summary::rows`]), resumption and 0-RTT by server
//! name and transport, curl-style timing by kind, where the handshake time goes
//! (network, server, client) by kind, time distributions, round trips,
//! avoidable latency, and the busiest and slowest servers. Every number
//! carries a `data-metric` attribute so tests can read it back.

use std::fmt::Write;

use crate::aggregate::{Aggregate, Histogram, Split, Summary, SummaryRow};
use crate::client_names::ClientNames;
use crate::record::Transport;
use crate::slice::Slicer;

/// What the report shows besides the summary: client names, the `--by`
/// groups, and the windowed slicers its time series come from.
#[derive(Default)]
pub struct Extras<'a> {
    pub names: Option<&'a ClientNames>,
    pub by: Option<&'a Slicer>,
    pub series: Vec<&'a Slicer>,
}

pub(crate) const COLORS: [&str; 6] = [
    "#4e79a7", "#59a14f", "#f28e2b", "#b07aa1", "#e15759", "#bab0ac",
];

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into())
}

/// A cell whose value a test can find: `data-metric="NAME"`.
pub(crate) fn cell(metric: &str, value: &str) -> String {
    format!("<td data-metric=\"{}\">{}</td>", esc(metric), esc(value))
}

/// One bar of [`stacked_bars`]: its label, a value per series, and the
/// `data-metric` its total carries, if any.
struct Bar {
    label: String,
    values: Vec<f64>,
    metric: Option<String>,
}

impl Bar {
    fn new(label: impl Into<String>, values: Vec<f64>) -> Self {
        Bar {
            label: label.into(),
            values,
            metric: None,
        }
    }

    fn metric(mut self, m: impl Into<String>) -> Self {
        self.metric = Some(m.into());
        self
    }
}

/// Characters of a bar label that fit left of the plot (11 px type, about
/// 6.2 px a character, in 212 px); longer labels are cut in the middle
/// (keeping the domain and the transport at the end) and carry the whole
/// text as a tooltip.
const LABEL_CHARS: usize = 32;

/// A y-axis category label: at most [`LABEL_CHARS`], the whole text in
/// its `<title>` when cut.
fn category_label(x: f64, y: f64, label: &str) -> String {
    let chars: Vec<char> = label.chars().collect();
    let shown: String = if chars.len() > LABEL_CHARS {
        let head = (LABEL_CHARS - 1) / 2;
        let tail = LABEL_CHARS - 1 - head;
        let mut t: String = chars[..head].iter().collect();
        t.push('…');
        t.extend(&chars[chars.len() - tail..]);
        t
    } else {
        label.to_string()
    };
    format!(
        "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"end\" class=\"label y-tick\" data-full=\"{}\"><title>{}</title>{}</text>",
        esc(label),
        esc(label),
        esc(&shown)
    )
}

/// Horizontal stacked bars: one row per label (the y axis), one segment
/// per series, the total at the bar's end; an x axis in `unit`.
fn stacked_bars(id: &str, title: &str, series: &[&str], rows: &[Bar], unit: &str) -> String {
    let row_h = 22.0;
    let left = 220.0;
    let width = 900.0;
    let plot_w = width - left - 80.0;
    let top = 30.0;
    let plot_h = row_h * rows.len().max(1) as f64;
    let height = top + plot_h + 40.0;
    let sum = rows
        .iter()
        .map(|b| b.values.iter().sum::<f64>())
        .fold(0.0, f64::max);
    let step = super::html_slices::nice_step(if sum > 0.0 { sum } else { 1.0 });
    let max = step * (sum / step).ceil().max(1.0);
    let mut svg = format!(
        "<figure><figcaption>{}</figcaption><svg id=\"{id}\" class=\"chart\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" role=\"img\">",
        esc(title)
    );
    // The x axis: round ticks in the unit, a grid line each.
    let base = top + plot_h;
    for i in 0..=(max / step).round() as usize {
        let v = step * i as f64;
        let x = left + v / max * plot_w;
        let _ = write!(
            svg,
            "<line x1=\"{x:.1}\" y1=\"{top}\" x2=\"{x:.1}\" y2=\"{:.1}\" class=\"grid\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"label x-tick\">{}</text>",
            base + 4.0,
            base + 16.0,
            trim(v)
        );
    }
    let _ = write!(
        svg,
        "<line x1=\"{left}\" y1=\"{base}\" x2=\"{:.1}\" y2=\"{base}\" class=\"axis x-axis\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"label\">{}</text>",
        left + plot_w,
        left + plot_w / 2.0,
        height - 6.0,
        esc(unit)
    );
    let _ = write!(
        svg,
        "<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{base}\" class=\"axis y-axis\"/>"
    );
    for (i, bar) in rows.iter().enumerate() {
        let y = top + 3.0 + i as f64 * row_h;
        svg.push_str(&category_label(left - 8.0, y + 14.0, &bar.label));
        let mut x = left;
        for (j, v) in bar.values.iter().enumerate() {
            let w = v / max * plot_w;
            if w > 0.0 {
                let _ = write!(
                    svg,
                    "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}: {} {}</title></rect>",
                    row_h - 6.0,
                    COLORS[j % COLORS.len()],
                    esc(series.get(j).copied().unwrap_or("")),
                    v,
                    esc(unit)
                );
            }
            x += w;
        }
        let total: f64 = bar.values.iter().sum();
        let metric = bar
            .metric
            .as_ref()
            .map(|m| format!(" data-metric=\"{}\"", esc(m)))
            .unwrap_or_default();
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" class=\"value\"{metric}>{}</text>",
            x + 4.0,
            y + 14.0,
            trim(total)
        );
    }
    let mut lx = left;
    for (j, s) in series.iter().enumerate() {
        let _ = write!(
            svg,
            "<rect x=\"{lx}\" y=\"6\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"15\" class=\"legend\">{}</text>",
            COLORS[j % COLORS.len()],
            lx + 14.0,
            esc(s)
        );
        lx += 24.0 + 7.5 * s.len() as f64;
    }
    svg.push_str("</svg></figure>");
    svg
}

fn trim(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Cumulative distribution lines of histograms (log-scaled milliseconds).
fn cdf(id: &str, title: &str, lines: &[(&str, &Histogram)]) -> String {
    let (width, height, left, bottom) = (900.0, 300.0, 64.0, 40.0);
    let lo = lines
        .iter()
        .filter_map(|(_, h)| h.buckets().next().map(|b| b.0))
        .fold(f64::MAX, f64::min);
    let hi = lines
        .iter()
        .filter_map(|(_, h)| h.buckets().last().map(|b| b.0))
        .fold(0.0, f64::max);
    let mut svg = format!(
        "<figure><figcaption>{}</figcaption><svg id=\"{id}\" class=\"chart\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" role=\"img\">",
        esc(title)
    );
    let (plot_w, plot_h) = (width - left - 20.0, height - bottom - 20.0);
    let _ = write!(
        svg,
        "<rect x=\"{left}\" y=\"20\" width=\"{plot_w}\" height=\"{plot_h}\" class=\"frame\"/>"
    );
    // The y axis: the cumulative share, 0 to 100%.
    let _ = write!(
        svg,
        "<line x1=\"{left}\" y1=\"20\" x2=\"{left}\" y2=\"{}\" class=\"axis y-axis\"/><text transform=\"translate(14 {:.1}) rotate(-90)\" text-anchor=\"middle\" class=\"label\">share of connections</text>",
        20.0 + plot_h,
        20.0 + plot_h / 2.0
    );
    for pct in [0, 25, 50, 75, 100] {
        let y = 20.0 + plot_h * (1.0 - f64::from(pct) / 100.0);
        let _ = write!(
            svg,
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" class=\"grid\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"label y-tick\">{pct}%</text>",
            left + plot_w,
            left - 4.0,
            y + 4.0
        );
    }
    if hi <= 0.0 || lo == f64::MAX {
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" class=\"label\">no data</text>",
            left + 10.0,
            height / 2.0
        );
        svg.push_str("</svg></figure>");
        return svg;
    }
    let (llo, lhi) = (
        (lo * 0.9).log10(),
        (hi * 1.1).log10().max((lo * 0.9).log10() + 0.1),
    );
    let x_of = |v: f64| left + (v.log10() - llo) / (lhi - llo) * plot_w;
    for exp in (llo.floor() as i32)..=(lhi.ceil() as i32) {
        let v = 10f64.powi(exp);
        if v.log10() < llo || v.log10() > lhi {
            continue;
        }
        let x = x_of(v);
        let _ = write!(
            svg,
            "<line x1=\"{x:.1}\" y1=\"20\" x2=\"{x:.1}\" y2=\"{}\" class=\"grid\"/><text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\" class=\"label\">{} ms</text>",
            20.0 + plot_h,
            height - 20.0,
            trim(v)
        );
    }
    for (j, (name, h)) in lines.iter().enumerate() {
        if h.count() == 0 {
            continue;
        }
        let mut seen = 0u64;
        let mut pts = format!("{:.1},{:.1}", x_of(lo * 0.9), 20.0 + plot_h);
        for (edge, c) in h.buckets() {
            seen += c;
            let y = 20.0 + plot_h * (1.0 - seen as f64 / h.count() as f64);
            let _ = write!(pts, " {:.1},{:.1}", x_of(edge), y);
        }
        let color = COLORS[j % COLORS.len()];
        let _ = write!(
            svg,
            "<polyline points=\"{pts}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>"
        );
        let _ = write!(
            svg,
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{}\" y=\"{}\" class=\"legend\">{} (n={})</text>",
            left + 10.0,
            28.0 + j as f64 * 16.0,
            left + 24.0,
            37.0 + j as f64 * 16.0,
            esc(name),
            h.count()
        );
    }
    svg.push_str("</svg></figure>");
    svg
}

/// The `data-metric` prefix of a summary row: `NAME/TRANSPORT`.
fn row_key(r: &SummaryRow<'_>) -> String {
    format!("{}/{}", r.name, r.transport)
}

/// A row's label in the charts: the name, and its transport.
fn row_label(r: &SummaryRow<'_>) -> String {
    format!("{} ({})", r.name, r.transport)
}

/// A server-name header cell: wraps rather than overflows (names can be
/// 253 characters), the whole name also as its tooltip.
fn name_cell(name: &str) -> String {
    format!("<th class=\"name\" title=\"{0}\">{0}</th>", esc(name))
}

fn summary_row(r: &SummaryRow<'_>) -> String {
    let a: &Aggregate = &r.agg;
    let key = row_key(r);
    let k = |m: &str| format!("{key}/{m}");
    let mut row = format!(
        "<tr>{}<td class=\"transport\">{}</td>",
        name_cell(r.name),
        esc(r.transport)
    );
    let early = a.early_data();
    for (m, v) in [
        ("connections", a.connections),
        ("full", a.full),
        ("resumed_session_id", a.resumed_session_id),
        ("resumed_ticket", a.resumed_ticket),
        ("resumed_psk", a.resumed_psk),
        ("declined", a.declined),
        ("early_tried", early.tried),
        ("early_accepted", early.accepted),
        ("early_rejected", early.rejected),
        ("failed", a.failed),
        ("incomplete", a.incomplete),
    ] {
        row.push_str(&cell(&k(m), &v.to_string()));
    }
    row.push_str(&cell(
        &k("resumption_rate"),
        &a.resumption_rate()
            .map(|r| format!("{:.1}%", r * 100.0))
            .unwrap_or("-".into()),
    ));
    row.push_str(&cell(
        &k("handshake_full_p50_ms"),
        &ms(a.handshake_full_ms.quantile(0.5)),
    ));
    row.push_str(&cell(
        &k("handshake_resumed_p50_ms"),
        &ms(a.handshake_resumed_ms.quantile(0.5)),
    ));
    row.push_str(&cell(&k("ttfb_p50_ms"), &ms(a.ttfb_ms.quantile(0.5))));
    for (m, hist) in [
        ("client_hello_delay_p50_ms", &a.client_hello_delay_ms),
        ("server_think_p50_ms", &a.server_think_ms),
        ("client_think_p50_ms", &a.client_think_ms),
    ] {
        row.push_str(&cell(&k(m), &ms(hist.quantile(0.5))));
    }
    row.push_str(&cell(&k("avoidable_ms"), &format!("{:.1}", a.avoidable_ms)));
    row.push_str("</tr>");
    row
}

/// The summary split by this host's role (`--local`, live), when records
/// carry one: per role its busiest server names and a total, with the pool
/// view (idle before first use, share used on demand, lifetime).
fn role_section(summary: &Summary, top: usize) -> String {
    if summary.by_role.is_empty() {
        return String::new();
    }
    let mut h = String::from("<h2>By role</h2><div class=\"scroll\"><table id=\"roles\"><thead><tr><th>role / server name</th><th>conns</th><th>full</th><th>resumed</th><th>failed</th><th>resumed %</th><th>hs full p50</th><th>hs resumed p50</th><th>ttfb p50</th><th>idle before use p50</th><th>idle before use p90</th><th>used on demand</th><th>lifetime p50</th></tr></thead><tbody>");
    let rate = |r: Option<f64>| r.map_or("-".into(), |r| format!("{:.1}%", r * 100.0));
    let role_row = |name: String, a: &Aggregate| {
        let k = |m: &str| format!("{name}/{m}");
        let mut row = format!("<tr><th>{}</th>", esc(&name));
        for (m, v) in [
            ("connections", a.connections),
            ("full", a.full),
            ("resumed", a.resumed()),
            ("failed", a.failed),
        ] {
            row.push_str(&cell(&k(m), &v.to_string()));
        }
        row.push_str(&cell(&k("resumption_rate"), &rate(a.resumption_rate())));
        for (m, v) in [
            ("handshake_full_p50_ms", a.handshake_full_ms.quantile(0.5)),
            (
                "handshake_resumed_p50_ms",
                a.handshake_resumed_ms.quantile(0.5),
            ),
            ("ttfb_p50_ms", a.ttfb_ms.quantile(0.5)),
            ("idle_before_use_p50_ms", a.idle_before_use_ms.quantile(0.5)),
            ("idle_before_use_p90_ms", a.idle_before_use_ms.quantile(0.9)),
        ] {
            row.push_str(&cell(&k(m), &ms(v)));
        }
        row.push_str(&cell(&k("on_demand_rate"), &rate(a.on_demand_rate())));
        row.push_str(&cell(
            &k("lifetime_p50_ms"),
            &ms(a.lifetime_ms.quantile(0.5)),
        ));
        row.push_str("</tr>");
        row
    };
    for (role, (names, rest)) in summary.top_by_role(top) {
        let r = role.as_str();
        for (n, a) in names {
            h.push_str(&role_row(format!("{r} / {n}"), a));
        }
        if let Some(rest) = &rest {
            h.push_str(&role_row(
                format!("{r} / {}", crate::aggregate::OTHER),
                rest,
            ));
        }
        if let Some(a) = summary.by_role.get(&role) {
            h.push_str(&role_row(format!("{r} / TOTAL"), a));
        }
    }
    let _ = write!(h, "</tbody></table></div><p class=\"note\">Role: inbound = this host is the TLS server, outbound = its client, transit = neither. Idle before use: the handshake's end to the client's first application data; used on demand: within {} ms of it (the rest waited in a pool or were pre-warmed). Lifetime: first packet to FIN/RST, for connections that closed before their record went out (or all, with --record-at close).</p>", crate::aggregate::ON_DEMAND_MS);
    h
}

/// Where each kind's handshake time goes: the medians of its network
/// (round trips × RTT), server and client time, as a stacked bar and as
/// numbers, over the handshakes whose split is known.
fn time_split(t: &Aggregate) -> String {
    let kinds = [("full", &t.split_full), ("resumed", &t.split_resumed)];
    fn parts(s: &Split) -> [(&'static str, &Histogram); 3] {
        [
            ("network", &s.network_ms),
            ("server", &s.server_ms),
            ("client", &s.client_ms),
        ]
    }
    let bars: Vec<Bar> = kinds
        .iter()
        .filter(|(_, s)| s.network_ms.count() > 0)
        .map(|(kind, s)| {
            let medians = parts(s).map(|(_, h)| h.quantile(0.5).unwrap_or(0.0));
            Bar::new(*kind, medians.to_vec())
        })
        .collect();
    let mut h = stacked_bars(
        "time-split",
        "Where the handshake time goes: median network (round trips × RTT), server and client time by kind (ms)",
        &["network", "server", "client"],
        &bars,
        "ms",
    );
    h.push_str("<table id=\"time-split-table\"><caption>Where the handshake time goes, by kind (ms)</caption><thead><tr><th>kind</th><th>handshakes</th><th>network p50</th><th>server p50</th><th>client p50</th></tr></thead><tbody>");
    for (kind, s) in kinds {
        let _ = write!(
            h,
            "<tr><th>{kind}</th>{}",
            cell(
                &format!("split/{kind}/handshakes"),
                &s.network_ms.count().to_string()
            )
        );
        for (part, hist) in parts(s) {
            h.push_str(&cell(
                &format!("split/{kind}/{part}_p50_ms"),
                &ms(hist.quantile(0.5)),
            ));
        }
        h.push_str("</tr>");
    }
    h.push_str("</tbody></table><p class=\"note\">Over the handshakes whose split is known: TLS over TCP with its three-way handshake in view (QUIC shows no client think time). Network is the handshake time less both think times, about its round trips × the TCP RTT. Each part's median is taken on its own, so the bar need not equal the median handshake.</p>");
    h
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:17px;margin-top:32px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}td,th{padding:3px 8px;border-bottom:1px solid #eee;text-align:right}
th:first-child{text-align:left}thead th{background:#f4f4f4}figure{margin:12px 0}figcaption{font-weight:600;margin-bottom:4px}
.chart{max-width:100%;height:auto;background:#fff}.label{font-size:11px;fill:#444}.value{font-size:11px;fill:#222}
.legend{font-size:11px;fill:#222}.frame{fill:none;stroke:#bbb}.grid{stroke:#eee}.axis{stroke:#999}.note{color:#666;font-size:12px}
#summary{font-size:12px}#summary td,#summary th{padding:3px 4px}#summary thead th{font-size:11px}td.transport{text-align:left}.scroll{overflow-x:auto}
th.name{min-width:14ch;max-width:30ch;overflow-wrap:anywhere;white-space:normal}caption{font-weight:600;text-align:left;margin-bottom:4px}";

/// Renders the whole report.
pub fn render(summary: &Summary, title: &str, top: usize, extras: &Extras<'_>) -> String {
    // The table's rows ([`Summary::rows`]): by server name and transport,
    // TLS over TCP and QUIC apart, then the totals.
    let all = summary.rows(top);
    let rows: Vec<&SummaryRow<'_>> = all.iter().filter(|r| !r.total).collect();
    let t = &summary.total;
    let transport = |tr: Transport| summary.by_transport.get(&tr).map_or(0, |a| a.connections);
    let mut h = String::with_capacity(64 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>tlsrum report: {}</title><style>{STYLE}</style></head><body>",
        esc(title)
    );
    let _ = write!(h, "<h1>tlsrum report: {}</h1>", esc(title));
    let _ = write!(
        h,
        "<p><span data-metric=\"total/connections\">{}</span> connections (<span data-metric=\"headline/tcp_connections\">{}</span> TLS over TCP, <span data-metric=\"headline/quic_connections\">{}</span> QUIC); resumption rate <span data-metric=\"total/resumption_rate\">{}</span>; <span data-metric=\"total/avoidable_ms\">{:.1}</span> ms of avoidable handshake latency.</p>",
        t.connections,
        transport(Transport::Tcp),
        transport(Transport::Quic),
        t.resumption_rate().map(|r| format!("{:.1}%", r * 100.0)).unwrap_or("-".into()),
        t.avoidable_ms
    );

    h.push_str("<h2>Summary by server name and transport</h2><div class=\"scroll\"><table id=\"summary\"><thead><tr><th>server name</th><th>transport</th><th>conns</th><th>full</th><th>res: id</th><th>res: ticket</th><th>res: psk</th><th>declined</th><th>0-RTT tried</th><th>0-RTT ok</th><th>0-RTT rejected</th><th>failed</th><th>incomplete</th><th>resumed</th><th>hs full p50</th><th>hs resumed p50</th><th>ttfb p50</th><th>CH delay p50</th><th>server think p50</th><th>client think p50</th><th>avoidable ms</th></tr></thead><tbody>");
    for r in &all {
        h.push_str(&summary_row(r));
    }
    h.push_str("</tbody></table></div><p class=\"note\">Rows as in <code>tlsrum replay</code>'s table: TLS over TCP and QUIC apart, the rest folded into (other), totals per transport. Times in ms (medians within 0.5%, from 1%-wide histogram buckets). Declined: full handshakes whose client offered resumption. 0-RTT tried: the client offered early data, whatever came of it (accepted, rejected, or not visible without keys). CH delay: TCP handshake's end to the ClientHello (TLS over TCP). Server and client think: each side's own time in the handshake, the round trips taken out (QUIC shows the server's only).</p>");

    h.push_str(&role_section(summary, top));

    if let Some(by) = extras.by {
        h.push_str(&super::html_slices::by_section(by, extras.names));
    }
    h.push_str(&super::html_slices::never_resume_section(
        &summary.clients,
        extras.names,
    ));
    if !extras.series.is_empty() {
        h.push_str(&super::html_slices::series_section(&extras.series));
    }

    h.push_str("<h2>Handshakes and resumption by server name</h2>");
    let kinds: Vec<Bar> = rows
        .iter()
        .map(|r| {
            let a = &r.agg;
            Bar::new(
                row_label(r),
                vec![
                    a.full as f64,
                    a.resumed_session_id as f64,
                    a.resumed_ticket as f64,
                    a.resumed_psk as f64,
                    a.failed as f64,
                    a.incomplete as f64,
                ],
            )
        })
        .collect();
    h.push_str(&stacked_bars(
        "kinds",
        "Handshakes by kind",
        &[
            "full",
            "resumed: session ID",
            "resumed: ticket",
            "resumed: PSK",
            "failed",
            "incomplete",
        ],
        &kinds,
        "connections",
    ));
    let offers: Vec<Bar> = rows
        .iter()
        .map(|r| {
            Bar::new(
                row_label(r),
                vec![r.agg.resumed() as f64, r.agg.declined as f64],
            )
        })
        .collect();
    h.push_str(&stacked_bars(
        "offers",
        "Resumption offers: accepted vs declined",
        &["accepted", "declined"],
        &offers,
        "offers",
    ));
    let early: Vec<Bar> = rows
        .iter()
        .map(|r| {
            let e = r.agg.early_data();
            Bar::new(
                row_label(r),
                vec![e.accepted as f64, e.rejected as f64, e.unseen as f64],
            )
            .metric(format!("early/{}/tried", row_key(r)))
        })
        .collect();
    h.push_str(&stacked_bars(
        "early-data",
        "0-RTT tried, by outcome: accepted, rejected, not visible (encrypted, no keys)",
        &["accepted", "rejected", "not visible"],
        &early,
        "connections",
    ));

    h.push_str("<h2>What handshakes cost</h2>");
    let waterfall: Vec<Bar> = [
        ("full", &t.handshake_full_ms, &t.ttfb_full_ms),
        ("resumed", &t.handshake_resumed_ms, &t.ttfb_resumed_ms),
    ]
    .iter()
    .map(|(kind, hs, ttfb)| {
        let rtt = t.tcp_rtt_ms.quantile(0.5).unwrap_or(0.0);
        let hs50 = hs.quantile(0.5).unwrap_or(0.0);
        let tt50 = ttfb.quantile(0.5).unwrap_or(0.0);
        Bar::new(*kind, vec![rtt, hs50, (tt50 - hs50).max(0.0)])
    })
    .collect();
    h.push_str(&stacked_bars(
        "waterfall",
        "Median time line by kind, as curl reports it: TCP connect, TLS handshake, then to first byte (ms)",
        &["TCP connect (RTT)", "TLS handshake", "to first byte"],
        &waterfall,
        "ms",
    ));
    h.push_str(&time_split(t));
    h.push_str(&cdf(
        "handshake-cdf",
        "Handshake time, cumulative share of connections",
        &[
            ("full", &t.handshake_full_ms),
            ("resumed", &t.handshake_resumed_ms),
        ],
    ));
    h.push_str(&cdf(
        "ttfb-cdf",
        "Time to first byte, cumulative share of connections",
        &[("full", &t.ttfb_full_ms), ("resumed", &t.ttfb_resumed_ms)],
    ));
    let rt: Vec<Bar> = ["0", "1", "2", "3", "4+"]
        .iter()
        .zip(t.round_trips)
        .enumerate()
        .map(|(i, (l, c))| {
            Bar::new(format!("{l} round trips"), vec![c as f64])
                .metric(format!("total/round_trips_{i}"))
        })
        .collect();
    h.push_str(&stacked_bars(
        "round-trips",
        "Handshake round trips before the client could send data",
        &["connections"],
        &rt,
        "connections",
    ));

    h.push_str("<h2>Avoidable latency</h2><p>Full handshakes whose client offered resumption: the round trips a resumed handshake would have saved, times the measured RTT.</p>");
    let avoid: Vec<Bar> = rows
        .iter()
        .filter(|r| r.agg.avoidable_ms > 0.0)
        .map(|r| Bar::new(row_label(r), vec![r.agg.avoidable_ms]))
        .collect();
    h.push_str(&stacked_bars(
        "avoidable",
        "Avoidable handshake time by server name (ms)",
        &["avoidable ms"],
        &avoid,
        "ms",
    ));

    h.push_str("<h2>Busiest servers</h2><table id=\"busiest\"><thead><tr><th>server name</th><th>transport</th><th>conns</th><th>resumed</th><th>hs full p50</th></tr></thead><tbody>");
    for r in rows.iter().take(10) {
        let (key, a) = (row_key(r), &r.agg);
        let _ = write!(
            h,
            "<tr>{}<td class=\"transport\">{}</td>{}{}{}</tr>",
            name_cell(r.name),
            esc(r.transport),
            cell(
                &format!("busiest/{key}/connections"),
                &a.connections.to_string()
            ),
            cell(&format!("busiest/{key}/resumed"), &a.resumed().to_string()),
            cell(
                &format!("busiest/{key}/handshake_full_p50_ms"),
                &ms(a.handshake_full_ms.quantile(0.5))
            )
        );
    }
    h.push_str("</tbody></table><h2>Slowest servers (median full handshake)</h2><table id=\"slowest\"><thead><tr><th>server name</th><th>transport</th><th>hs full p50</th><th>hs full p90</th><th>conns</th></tr></thead><tbody>");
    let mut slow: Vec<&&SummaryRow<'_>> = rows
        .iter()
        .filter(|r| r.agg.handshake_full_ms.count() > 0)
        .collect();
    slow.sort_by(|a, b| {
        b.agg
            .handshake_full_ms
            .quantile(0.5)
            .partial_cmp(&a.agg.handshake_full_ms.quantile(0.5))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    for r in slow.iter().take(10) {
        let (key, a) = (row_key(r), &r.agg);
        let _ = write!(
            h,
            "<tr>{}<td class=\"transport\">{}</td>{}{}{}</tr>",
            name_cell(r.name),
            esc(r.transport),
            cell(
                &format!("slowest/{key}/handshake_full_p50_ms"),
                &ms(a.handshake_full_ms.quantile(0.5))
            ),
            cell(
                &format!("slowest/{key}/handshake_full_p90_ms"),
                &ms(a.handshake_full_ms.quantile(0.9))
            ),
            cell(
                &format!("slowest/{key}/connections"),
                &a.connections.to_string()
            )
        );
    }
    h.push_str("</tbody></table><p class=\"note\">Generated by tlsrum from passive observation; timings are at the capture point.</p></body></html>\n");
    h
}
