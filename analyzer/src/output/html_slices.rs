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
    let dims: Vec<&str> = s.dims().iter().map(|d| d.column()).collect();
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
    let mut h = String::from("<h2 id=\"never-resume\">Clients that never resume</h2><table id=\"never-resume-table\"><thead><tr><th>ja4_stable</th>");
    if names.is_some() {
        h.push_str("<th>client</th>");
    }
    h.push_str("<th>full, no offer</th><th>declined</th><th>resumed</th><th>resumed %</th><th>avoidable ms</th><th>share of avoidable</th></tr></thead><tbody>");
    let pct = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.1}%", v * 100.0));
    for (fp, r) in list {
        let k = |m: &str| format!("never_resume/{fp}/{m}");
        let _ = write!(h, "<tr><th>{}</th>", esc(fp));
        if let Some(n) = names {
            h.push_str(&cell(&k("client"), n.get(fp).unwrap_or("-")));
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
    h.push_str("</tbody></table><p class=\"note\">Clients by their <code>ja4_stable</code> (JA4 without the session-dependent extensions, so a client's fresh and resuming hellos count together), ordered by their full handshakes that offered no resumption or whose offer the server declined. Only declined offers have avoidable time: a client that offers nothing cannot be resumed by any server setting.</p>");
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

/// A round tick step for an axis from 0 to `max` with about four ticks:
/// 1, 2, 2.5 or 5 times a power of ten, so labels read 0, 5, 10, 15, 20.
pub(crate) fn nice_step(max: f64) -> f64 {
    let raw = max / 4.0;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|&s| s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

/// Decimals that show every multiple of `step` exactly (at most 3).
fn decimals(step: f64) -> usize {
    (0..3)
        .find(|&d| {
            let v = step * 10f64.powi(d as i32);
            (v - v.round()).abs() < 1e-6
        })
        .unwrap_or(3)
}

/// A window start as an x-axis tick label: the time of day (UTC), with
/// tenths for sub-second windows; the date when windows are days long.
fn tick_label(t: f64, step: f64) -> String {
    let full = UtcTime(t.floor() as i64).to_string(); // 2026-11-24T20:33:55Z
    if step >= 86_400.0 {
        return full.get(..10).unwrap_or(&full).to_string();
    }
    let hms = full.get(11..19).unwrap_or(&full);
    if step < 1.0 {
        format!("{hms}.{}", ((t - t.floor()) * 10.0).round().min(9.0))
    } else {
        hms.to_string()
    }
}

fn line_chart(
    id: &str,
    title: &str,
    x: (f64, f64),
    step: f64,
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
        "<rect x=\"{left}\" y=\"{top}\" width=\"{plot_w}\" height=\"{plot_h}\" class=\"frame\"/><line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" class=\"axis y-axis\"/>",
        top + plot_h
    );
    let y_step = nice_step(if y_max > 0.0 { y_max } else { 1.0 });
    let y_ticks = (y_max / y_step).ceil().max(1.0);
    let y_max = y_step * y_ticks;
    let span = (x.1 - x.0).max(1e-9);
    let xp = |t: f64| left + (t - x.0) / span * plot_w;
    let yp = |v: f64| top + plot_h * (1.0 - v / y_max);
    for i in 0..=y_ticks as usize {
        let v = y_step * i as f64;
        let y = yp(v);
        let _ = write!(
            svg,
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" class=\"grid\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"label y-tick\">{v:.prec$}{unit}</text>",
            left + plot_w,
            left - 4.0,
            y + 4.0,
            prec = decimals(y_step)
        );
    }
    // A tick at every window start, labelled at most every 8th of the axis
    // (labels of 8 characters need about 60 px).
    let windows = ((x.1 - x.0) / step).round() as usize;
    let every = windows.div_ceil(8).max(1);
    for i in (0..=windows).step_by(every) {
        let t = x.0 + i as f64 * step;
        let _ = write!(
            svg,
            "<line x1=\"{0:.1}\" y1=\"{1:.1}\" x2=\"{0:.1}\" y2=\"{2:.1}\" class=\"axis\"/><text x=\"{0:.1}\" y=\"{3:.1}\" text-anchor=\"middle\" class=\"label\">{4}</text>",
            xp(t),
            top + plot_h,
            top + plot_h + 4.0,
            top + plot_h + 16.0,
            tick_label(t, step)
        );
    }
    let day = UtcTime(x.0.floor() as i64).to_string();
    let _ = write!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"label\">window start (UTC){}</text>",
        left + plot_w / 2.0,
        height - 6.0,
        if step >= 86_400.0 {
            String::new()
        } else {
            format!(", {}", day.get(..10).unwrap_or(&day))
        }
    );
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
            s.step(),
            100.0,
            "%",
            &rate,
        ));
        let y_max = hs
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .fold(0.0, f64::max)
            * 1.05;
        h.push_str(&line_chart(
            &format!("series-{dim}-handshake"),
            &format!(
                "Handshake time by {dim}, per {step} window: p50 (solid) and p95 (dashed), ms"
            ),
            x,
            s.step(),
            y_max,
            "",
            &hs,
        ));
    }
    h.push_str("<p class=\"note\">Windows of capture time aligned to the epoch (UTC); a line joins the windows that have data, so a change (a config push, a new client version) shows as a step.</p>");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_ticks_are_round() {
        assert_eq!(nice_step(100.0), 25.0);
        assert_eq!(nice_step(20.5), 10.0);
        assert_eq!(nice_step(9.0), 2.5);
        assert_eq!(nice_step(0.3), 0.1);
        assert_eq!(decimals(25.0), 0);
        assert_eq!(decimals(2.5), 1);
        assert_eq!(decimals(0.25), 2);
    }

    #[test]
    fn tick_labels_by_window_length() {
        // 2026-11-24T20:40:35Z
        let t = 1_795_552_835.0;
        assert_eq!(tick_label(t, 5.0), "20:40:35");
        assert_eq!(tick_label(t + 0.2, 0.1), "20:40:35.2");
        assert_eq!(tick_label(t, 86_400.0), "2026-11-24");
    }
}
