//! The HTML report's slicing sections: the `--by` table with percentiles,
//! "clients that never resume", and time series of resumption rate and
//! handshake p50/p95 per window, by version and by family. Self-contained
//! SVG like the rest of the report; numbers carry `data-metric`.

use std::fmt::Write;

use super::html::{cell, esc, COLORS};
use super::slices::{cells, header, Cell};
use crate::client_names::ClientNames;
use crate::never_resume::ByClient;
use crate::record::UtcTime;
use crate::slice::{Row, Slicer};

/// The `--by` table: the same columns as `--format csv`.
pub fn by_section(s: &Slicer, names: Option<&ClientNames>) -> String {
    let dims: Vec<&str> = s.dims().iter().map(|d| d.name()).collect();
    let mut h = format!(
        "<h2 id=\"by\">By {}</h2><div class=\"scroll\"><table id=\"by-table\"><thead><tr>",
        esc(&dims.join(" × "))
    );
    let head = header(s, names);
    for c in &head {
        let _ = write!(h, "<th>{}</th>", esc(c));
    }
    h.push_str("</tr></thead><tbody>");
    let mut row = |key: &str, r: &Row<'_>| {
        h.push_str("<tr>");
        for (name, c) in head.iter().zip(cells(s, r, names)) {
            let v = match c {
                Cell::Str(v) if v.is_empty() => "-".to_string(),
                Cell::Str(v) => v,
                Cell::Int(n) => n.to_string(),
                Cell::Num(None) => "-".into(),
                Cell::Num(Some(v)) if name == "resumption_rate" => format!("{:.1}%", v * 100.0),
                Cell::Num(Some(v)) => format!("{v:.2}"),
            };
            h.push_str(&cell(&format!("by/{key}/{name}"), &v));
        }
        h.push_str("</tr>");
    };
    for r in s.rows() {
        row(&r.group.join("|"), &r);
    }
    let all = vec!["TOTAL".to_string(); s.dims().len()];
    row(
        "TOTAL",
        &Row {
            window: None,
            group: &all,
            stats: &s.total,
        },
    );
    h.push_str("</tbody></table></div><p class=\"note\">Times in ms, nearest-rank percentiles within 0.5%. Handshake over completed handshakes (full and resumed); ttfb and tcp_rtt over every connection that has them.</p>");
    h
}

/// "Clients that never resume" (nothing when no fingerprinted handshake missed one).
pub fn never_resume_section(c: &ByClient, names: Option<&ClientNames>) -> String {
    let list = c.never_resume();
    if list.is_empty() {
        return String::new();
    }
    let mut h = String::from("<h2 id=\"never-resume\">Clients that never resume</h2><table id=\"never-resume-table\"><thead><tr><th>ja4</th>");
    if names.is_some() {
        h.push_str("<th>client</th>");
    }
    h.push_str("<th>full, no offer</th><th>declined</th><th>resumed</th><th>resumed %</th><th>avoidable ms</th><th>share of avoidable</th></tr></thead><tbody>");
    let pct = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.1}%", v * 100.0));
    for (ja4, r) in list {
        let k = |m: &str| format!("never_resume/{ja4}/{m}");
        let _ = write!(h, "<tr><th>{}</th>", esc(ja4));
        if let Some(n) = names {
            h.push_str(&cell(&k("client"), n.get(ja4).unwrap_or("-")));
        }
        for (m, v) in [
            ("full_no_offer", r.full_no_offer.to_string()),
            ("declined", r.declined.to_string()),
            ("resumed", r.resumed.to_string()),
            ("resumption_rate", pct(r.resumption_rate())),
            ("avoidable_ms", format!("{:.1}", r.avoidable_ms)),
            ("avoidable_share", pct(c.share(r))),
        ] {
            h.push_str(&cell(&k(m), &v));
        }
        h.push_str("</tr>");
    }
    h.push_str("</tbody></table><p class=\"note\">Fingerprints ordered by their full handshakes that offered no resumption or whose offer the server declined. Only declined offers have avoidable time: a client that offers nothing cannot be resumed by any server setting.</p>");
    h
}

/// One line of a time series: (window start, value) points.
struct Line {
    label: String,
    dashed: bool,
    color: &'static str,
    points: Vec<(f64, f64)>,
    metric: String,
}

fn line_chart(
    id: &str,
    title: &str,
    x: (f64, f64),
    y_max: f64,
    unit: &str,
    lines: &[Line],
) -> String {
    let (width, height, left, bottom, top) = (900.0, 280.0, 60.0, 40.0, 20.0);
    let (plot_w, plot_h) = (width - left - 170.0, height - bottom - top);
    let mut svg = format!(
        "<figure><figcaption>{}</figcaption><svg id=\"{id}\" class=\"chart\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" role=\"img\">",
        esc(title)
    );
    let _ = write!(
        svg,
        "<rect x=\"{left}\" y=\"{top}\" width=\"{plot_w}\" height=\"{plot_h}\" class=\"frame\"/>"
    );
    let y_max = if y_max > 0.0 { y_max } else { 1.0 };
    let span = (x.1 - x.0).max(1e-9);
    let xp = |t: f64| left + (t - x.0) / span * plot_w;
    let yp = |v: f64| top + plot_h * (1.0 - v / y_max);
    for i in 0..=4 {
        let v = y_max * i as f64 / 4.0;
        let y = yp(v);
        let _ = write!(
            svg,
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" class=\"grid\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"label\">{}{unit}</text>",
            left + plot_w,
            left - 4.0,
            y + 4.0,
            if v >= 10.0 { format!("{v:.0}") } else { format!("{v:.1}") }
        );
    }
    for (t, anchor) in [(x.0, "start"), (x.1, "end")] {
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" class=\"label\">{} UTC</text>",
            xp(t),
            height - 20.0,
            UtcTime(t.floor() as i64)
        );
    }
    for (j, l) in lines.iter().enumerate() {
        let pts: Vec<String> = l
            .points
            .iter()
            .map(|&(t, v)| format!("{:.1},{:.1}", xp(t), yp(v)))
            .collect();
        let dash = if l.dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        let _ = write!(
            svg,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash}/>",
            pts.join(" "),
            l.color
        );
        for &(t, v) in &l.points {
            let _ = write!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{}\" data-metric=\"{}/{}\"><title>{}</title></circle>",
                xp(t),
                yp(v),
                l.color,
                esc(&l.metric),
                t,
                if unit == "%" { format!("{v:.1}") } else { format!("{v:.2}") }
            );
        }
        let ly = top + 10.0 + j as f64 * 16.0;
        let _ = write!(
            svg,
            "<line x1=\"{:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{}\" stroke-width=\"2\"{dash}/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">{}</text>",
            left + plot_w + 10.0,
            left + plot_w + 30.0,
            l.color,
            left + plot_w + 34.0,
            ly + 4.0,
            esc(&l.label)
        );
    }
    svg.push_str("</svg></figure>");
    svg
}

/// A human window length.
fn duration(secs: f64) -> String {
    for (unit, n) in [("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)] {
        if secs >= n && (secs / n).fract() == 0.0 {
            return format!("{}{unit}", secs / n);
        }
    }
    format!("{secs}s")
}

/// Time series by each slicer's single dimension (version, family).
pub fn series_section(series: &[&Slicer]) -> String {
    let mut h = String::from("<h2 id=\"over-time\">Over time</h2>");
    for s in series {
        let Some(dim) = s.dims().first().map(|d| d.name()) else {
            continue;
        };
        if s.windows_spanned() < 2 {
            let _ = write!(
                h,
                "<p class=\"note\" id=\"series-{dim}-none\">By {dim}: the capture spans less than two {} windows; no time series.</p>",
                duration(s.step())
            );
            continue;
        }
        let rows = s.rows();
        let mut values: Vec<&str> = rows
            .iter()
            .filter_map(|r| r.group.first().map(|v| v.as_str()))
            .collect();
        values.sort();
        values.dedup();
        let x = rows
            .iter()
            .filter_map(|r| r.window)
            .fold((f64::MAX, f64::MIN), |(a, b), (s, _)| (a.min(s), b.max(s)));
        let mut rate = Vec::new();
        let mut hs = Vec::new();
        for (j, v) in values.iter().enumerate() {
            let color = COLORS[j % COLORS.len()];
            let of = |f: &dyn Fn(&Row<'_>) -> Option<f64>| -> Vec<(f64, f64)> {
                rows.iter()
                    .filter(|r| r.group.first().map(|g| g.as_str()) == Some(v))
                    .filter_map(|r| Some((r.window?.0, f(r)?)))
                    .collect()
            };
            rate.push(Line {
                label: v.to_string(),
                dashed: false,
                color,
                points: of(&|r| r.stats.resumption_rate().map(|x| x * 100.0)),
                metric: format!("series/{dim}/{v}/resumption_rate"),
            });
            for (q, p, dashed) in [("p50", 0.5, false), ("p95", 0.95, true)] {
                hs.push(Line {
                    label: format!("{v} {q}"),
                    dashed,
                    color,
                    points: of(&|r| r.stats.handshake_ms.quantile(p)),
                    metric: format!("series/{dim}/{v}/handshake_{q}"),
                });
            }
        }
        let step = duration(s.step());
        h.push_str(&line_chart(
            &format!("series-{dim}-resumption"),
            &format!("Resumption rate by {dim}, per {step} window (% of completed handshakes)"),
            x,
            100.0,
            "%",
            &rate,
        ));
        let y_max = hs
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .fold(0.0, f64::max)
            * 1.1;
        h.push_str(&line_chart(
            &format!("series-{dim}-handshake"),
            &format!(
                "Handshake time by {dim}, per {step} window: p50 (solid) and p95 (dashed), ms"
            ),
            x,
            y_max,
            "",
            &hs,
        ));
    }
    h.push_str("<p class=\"note\">Windows of capture time aligned to the epoch (UTC); a line joins the windows that have data, so a change (a config push, a new client version) shows as a step.</p>");
    h
}
