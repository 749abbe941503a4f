//! What `live` shows someone logged into the host: a one-line summary
//! every `--summary-interval` on standard error, and `--top`, a table of
//! the busiest server names refreshed in place like top(1). Both read the
//! records of the last interval from a [`Window`] that [`TopSink`] fills.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::rc::Rc;

use analyzer::aggregate::{add_named, NO_SNI};
use analyzer::record::{ConnectionRecord, EarlyData, HandshakeKind};
use anyhow::Result;

use super::{RecordSink, RunEnd};

/// Handshake durations kept per name and interval for the percentiles;
/// past it, further ones count but are not sampled.
const MAX_SAMPLES: usize = 4096;

/// One name's (or the whole host's) handshakes in the interval.
#[derive(Clone, Default)]
pub struct Tally {
    pub handshakes: u64,
    pub resumed: u64,
    /// full + resumed: the resumption rate's denominator.
    pub completed: u64,
    /// 0-RTT offers, every outcome.
    pub early: u64,
    /// Resumption offers a full handshake followed.
    pub declined: u64,
    durations_ms: Vec<f64>,
}

impl Tally {
    fn add(&mut self, r: &ConnectionRecord) {
        self.handshakes += 1;
        match r.handshake {
            Some(HandshakeKind::Resumed) => {
                self.resumed += 1;
                self.completed += 1;
            }
            Some(HandshakeKind::Full) => {
                self.completed += 1;
                self.declined += r.offered.iter().flatten().count() as u64;
            }
            _ => {}
        }
        if r.early_data.is_some_and(|e| e != EarlyData::None) {
            self.early += 1;
        }
        if let Some(ms) = r.timing.handshake {
            if self.durations_ms.len() < MAX_SAMPLES {
                self.durations_ms.push(ms);
            }
        }
    }

    fn merge(&mut self, o: &Tally) {
        self.handshakes += o.handshakes;
        self.resumed += o.resumed;
        self.completed += o.completed;
        self.early += o.early;
        self.declined += o.declined;
        let room = MAX_SAMPLES.saturating_sub(self.durations_ms.len());
        self.durations_ms
            .extend(o.durations_ms.iter().take(room).copied());
    }

    /// Resumed share of full + resumed, in percent.
    pub fn resumed_pct(&self) -> Option<f64> {
        (self.completed > 0).then(|| 100.0 * self.resumed as f64 / self.completed as f64)
    }

    /// The nearest-rank percentile `p` (0-100) of the timed handshakes, ms.
    pub fn percentile(&self, p: f64) -> Option<f64> {
        let mut d = self.durations_ms.clone();
        if d.is_empty() {
            return None;
        }
        d.sort_by(f64::total_cmp);
        let rank = ((p / 100.0) * d.len() as f64).ceil().max(1.0) as usize;
        d.get(rank - 1).copied()
    }
}

/// The records of the current interval, by server name.
#[derive(Default)]
pub struct Window {
    /// Bounded as the summary's names are ([`add_named`]).
    by_name: BTreeMap<String, Tally>,
}

impl Window {
    /// The interval is over: its tallies, busiest first, and the total.
    pub fn take(&mut self) -> (Vec<(String, Tally)>, Tally) {
        let mut rows: Vec<(String, Tally)> =
            std::mem::take(&mut self.by_name).into_iter().collect();
        rows.sort_by(|a, b| b.1.handshakes.cmp(&a.1.handshakes).then(a.0.cmp(&b.0)));
        let mut total = Tally::default();
        for (_, t) in &rows {
            total.merge(t);
        }
        (rows, total)
    }
}

/// Feeds a [`Window`] shared with the live loop, which renders it.
pub struct TopSink(pub Rc<RefCell<Window>>);

impl RecordSink for TopSink {
    fn record(&mut self, r: &ConnectionRecord) -> Result<()> {
        let name = r.sni.as_deref().unwrap_or(NO_SNI);
        add_named(&mut self.0.borrow_mut().by_name, name, |t| t.add(r));
        Ok(())
    }

    fn finish(&mut self, _end: &RunEnd<'_>) -> Result<()> {
        Ok(())
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}%"))
}

/// The one-line summary of an interval of `secs` seconds.
pub fn summary_line(total: &Tally, names: usize, secs: f64, flows: usize) -> String {
    format!(
        "tlsrum: last {secs:.0} s: {} handshakes ({:.1}/s) for {names} names, {} resumed, {} 0-RTT, {} declined offers, handshake p50 {} ms p95 {} ms; {flows} flows tracked",
        total.handshakes,
        total.handshakes as f64 / secs.max(1e-9),
        pct(total.resumed_pct()),
        total.early,
        total.declined,
        ms(total.percentile(50.0)),
        ms(total.percentile(95.0)),
    )
}

/// `--top`'s table of an interval: a header line, the column titles and
/// at most `rows` names, busiest first.
pub fn table(
    title: &str,
    rows_in: &[(String, Tally)],
    total: &Tally,
    secs: f64,
    rows: usize,
) -> String {
    let mut out = String::new();
    let secs = secs.max(1e-9);
    let _ = writeln!(
        out,
        "{title}: {:.1} handshakes/s, {} resumed, {} names (last {secs:.0} s)",
        total.handshakes as f64 / secs,
        pct(total.resumed_pct()),
        rows_in.len()
    );
    let width = rows_in
        .iter()
        .take(rows)
        .map(|(n, _)| n.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(11, 48);
    let _ = writeln!(
        out,
        "{:<width$} {:>8} {:>8} {:>6} {:>8} {:>8} {:>9}",
        "SERVER_NAME", "HS/S", "RESUMED", "0-RTT", "P50_MS", "P95_MS", "DECLINED"
    );
    for (name, t) in rows_in.iter().take(rows) {
        let shown: String = if name.chars().count() > width {
            let head: String = name.chars().take(width - 1).collect();
            head + "…"
        } else {
            name.clone()
        };
        let _ = writeln!(
            out,
            "{shown:<width$} {:>8.1} {:>8} {:>6} {:>8} {:>8} {:>9}",
            t.handshakes as f64 / secs,
            pct(t.resumed_pct()),
            t.early,
            ms(t.percentile(50.0)),
            ms(t.percentile(95.0)),
            t.declined
        );
    }
    if rows_in.len() > rows {
        let _ = writeln!(out, "… {} more names", rows_in.len() - rows);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let t = Tally {
            durations_ms: (1..=100).map(f64::from).collect(),
            ..Tally::default()
        };
        assert_eq!(t.percentile(50.0), Some(50.0));
        assert_eq!(t.percentile(95.0), Some(95.0));
        assert_eq!(Tally::default().percentile(50.0), None);
    }
}
