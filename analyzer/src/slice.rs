//! Aggregates of connection records by any combination of dimensions
//! (`--by sni,ja4,client,family,version,alpn,transport,server,role`) and, optionally,
//! by time window (`--window`), in bounded memory: distinct groups, windows
//! and (window, group) cells are capped, and what a cap folds is counted.

use std::collections::{BTreeMap, BTreeSet};

use crate::aggregate::{Histogram, NO_SNI, OTHER};
use crate::record::{ConnectionRecord, HandshakeKind, Transport};

/// Distinct groups kept; later ones fold into a group of `(other)` values.
pub const MAX_GROUPS: usize = 10_000;
/// Distinct windows kept; connections in later ones are left out of the
/// windowed output (counted).
pub const MAX_WINDOWS: usize = 10_000;
/// (window, group) cells kept; beyond, a new group in a window folds into
/// that window's `(other)` group.
pub const MAX_CELLS: usize = 100_000;

/// A grouping dimension of `--by`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dim {
    Sni,
    /// The raw JA4: a TLS 1.3 client's fresh and resuming hellos differ.
    Ja4,
    /// The client by its `ja4_stable`: fresh and resuming hellos together.
    Client,
    Family,
    Version,
    Alpn,
    Transport,
    Server,
    /// This host's end: `inbound`, `outbound`, `transit`, or `(unknown)`.
    Role,
}

impl Dim {
    pub const ALL: [Dim; 9] = [
        Dim::Sni,
        Dim::Ja4,
        Dim::Client,
        Dim::Family,
        Dim::Version,
        Dim::Alpn,
        Dim::Transport,
        Dim::Server,
        Dim::Role,
    ];

    /// The dimension's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Dim::Sni => "sni",
            Dim::Ja4 => "ja4",
            Dim::Client => "client",
            Dim::Family => "family",
            Dim::Version => "version",
            Dim::Alpn => "alpn",
            Dim::Transport => "transport",
            Dim::Server => "server",
            Dim::Role => "role",
        }
    }

    /// The dimension's column in outputs: its name, but `ja4_stable` for
    /// `client` (the record field it groups by; the names file's `client`
    /// column may follow it).
    pub fn column(self) -> &'static str {
        match self {
            Dim::Client => "ja4_stable",
            d => d.name(),
        }
    }

    /// Whether the values are client fingerprints (`--ja4-names` names them).
    pub fn is_fingerprint(self) -> bool {
        matches!(self, Dim::Ja4 | Dim::Client)
    }

    pub fn parse(s: &str) -> Option<Dim> {
        Dim::ALL.into_iter().find(|d| d.name() == s)
    }

    /// The record's value in this dimension (README "Slicing").
    pub fn value(self, r: &ConnectionRecord) -> String {
        match self {
            Dim::Sni => r.sni.as_deref().unwrap_or(NO_SNI).to_string(),
            Dim::Ja4 => r.ja4.as_deref().unwrap_or(NONE).to_string(),
            Dim::Client => r.ja4_stable.as_deref().unwrap_or(NONE).to_string(),
            Dim::Family => r.family.as_str().to_string(),
            Dim::Version => r.version.unwrap_or(UNKNOWN).to_string(),
            Dim::Alpn => r.alpn_negotiated.as_deref().unwrap_or(UNKNOWN).to_string(),
            Dim::Transport => match r.transport {
                Transport::Tcp => "tcp",
                Transport::Quic => "quic",
            }
            .to_string(),
            Dim::Server => server_ip(&r.server).to_string(),
            Dim::Role => r.role.map_or(UNKNOWN, |role| role.as_str()).to_string(),
        }
    }
}

/// The value of `ja4` and `client` for a record without a fingerprint.
pub const NONE: &str = "(none)";
/// The value of `version` and `alpn` where the wire does not show it, and
/// of `role` where this host's addresses are not known.
pub const UNKNOWN: &str = "(unknown)";

/// The address of an `ip:port` / `[ipv6]:port` endpoint, without port or brackets.
pub fn server_ip(endpoint: &str) -> &str {
    if let Some(rest) = endpoint.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match endpoint.rsplit_once(':') {
        // A bare IPv6 address has several colons: no port to strip.
        Some((ip, _)) if !ip.contains(':') => ip,
        _ => endpoint,
    }
}

/// Counts and time distributions of one group (in one window).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SliceStats {
    pub connections: u64,
    pub full: u64,
    pub resumed: u64,
    /// Full handshakes whose client offered resumption.
    pub declined: u64,
    pub failed: u64,
    pub incomplete: u64,
    /// Completed handshakes (full and resumed).
    pub handshake_ms: Histogram,
    /// Every record that has one.
    pub ttfb_ms: Histogram,
    pub tcp_rtt_ms: Histogram,
    pub avoidable_ms: f64,
}

impl SliceStats {
    pub fn add(&mut self, r: &ConnectionRecord) {
        self.connections += 1;
        match r.handshake {
            Some(HandshakeKind::Full) => {
                self.full += 1;
                if r.offered.as_ref().is_some_and(|o| !o.is_empty()) {
                    self.declined += 1;
                }
            }
            Some(HandshakeKind::Resumed) => self.resumed += 1,
            Some(HandshakeKind::Failed) => self.failed += 1,
            Some(HandshakeKind::Incomplete) => self.incomplete += 1,
            None => {}
        }
        if let (Some(ms), Some(HandshakeKind::Full | HandshakeKind::Resumed)) =
            (r.timing.handshake, r.handshake)
        {
            self.handshake_ms.add(ms);
        }
        if let Some(ms) = r.timing.ttfb {
            self.ttfb_ms.add(ms);
        }
        if let Some(ms) = r.timing.tcp_rtt {
            self.tcp_rtt_ms.add(ms);
        }
        self.avoidable_ms += r.timing.avoidable.unwrap_or(0.0);
    }

    pub fn merge(&mut self, o: &SliceStats) {
        self.connections += o.connections;
        self.full += o.full;
        self.resumed += o.resumed;
        self.declined += o.declined;
        self.failed += o.failed;
        self.incomplete += o.incomplete;
        self.handshake_ms.merge(&o.handshake_ms);
        self.ttfb_ms.merge(&o.ttfb_ms);
        self.tcp_rtt_ms.merge(&o.tcp_rtt_ms);
        self.avoidable_ms += o.avoidable_ms;
    }

    /// Resumed share of completed handshakes.
    pub fn resumption_rate(&self) -> Option<f64> {
        let done = self.full + self.resumed;
        (done > 0).then(|| self.resumed as f64 / done as f64)
    }
}

/// A time window's length in seconds: `30s`, `5m`, `1h`, `1d`, or a plain
/// number of seconds; positive and finite.
pub fn parse_duration(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 's')) => (&t[..i], 1.0),
        Some((i, 'm')) => (&t[..i], 60.0),
        Some((i, 'h')) => (&t[..i], 3600.0),
        Some((i, 'd')) => (&t[..i], 86400.0),
        _ => (t, 1.0),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (e.g. 30s, 5m, 1h, 1d, or seconds)"))?;
    let secs = n * mult;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("`{s}`: a window must be longer than 0"));
    }
    if secs < 0.001 {
        return Err(format!("`{s}`: a window must be at least 1 ms"));
    }
    Ok(secs)
}

/// Window lengths an automatic window is chosen from, seconds; each
/// divides the next, so windows merge exactly when the length grows.
pub const NICE_WINDOWS: [f64; 17] = [
    0.1, 0.2, 1.0, 2.0, 10.0, 30.0, 60.0, 120.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 43200.0,
    86400.0, 604800.0, 2419200.0,
];

/// Windows an automatic window aims at, at most.
pub const AUTO_POINTS: f64 = 60.0;

/// What the caps folded, for a warning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Folded {
    /// Connections whose group was new past [`MAX_GROUPS`] (or a cell past [`MAX_CELLS`]).
    pub groups: u64,
    /// Connections in windows past [`MAX_WINDOWS`], left out of the windows.
    pub windows: u64,
}

/// How windows are chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Windows {
    None,
    /// `--window`: fixed length, seconds.
    Fixed(f64),
    /// Grows along [`NICE_WINDOWS`] with the capture's span.
    Auto,
}

/// One output row: a group (in a window).
#[derive(Debug)]
pub struct Row<'a> {
    /// Window start and end, seconds since the epoch.
    pub window: Option<(f64, f64)>,
    pub group: &'a [String],
    pub stats: &'a SliceStats,
}

/// Records grouped by dimensions and windows.
#[derive(Debug, Clone)]
pub struct Slicer {
    dims: Vec<Dim>,
    windows: Windows,
    /// Current window length (Auto: grows).
    step: f64,
    groups: BTreeSet<Vec<String>>,
    cells: BTreeMap<(i64, Vec<String>), SliceStats>,
    window_ids: BTreeSet<i64>,
    pub total: SliceStats,
    pub folded: Folded,
    span: Option<(f64, f64)>,
}

fn other(dims: usize) -> Vec<String> {
    vec![OTHER.to_string(); dims]
}

impl Slicer {
    pub fn new(dims: Vec<Dim>, windows: Windows) -> Self {
        let step = match windows {
            Windows::Fixed(s) => s,
            Windows::Auto => NICE_WINDOWS[0],
            Windows::None => 0.0,
        };
        Slicer {
            dims,
            windows,
            step,
            groups: BTreeSet::new(),
            cells: BTreeMap::new(),
            window_ids: BTreeSet::new(),
            total: SliceStats::default(),
            folded: Folded::default(),
            span: None,
        }
    }

    pub fn dims(&self) -> &[Dim] {
        &self.dims
    }

    pub fn windowed(&self) -> bool {
        self.windows != Windows::None
    }

    /// The window length, seconds (0 without windows).
    pub fn step(&self) -> f64 {
        self.step
    }

    fn window_of(&self, ts: f64) -> i64 {
        if self.windows == Windows::None || !ts.is_finite() {
            return 0;
        }
        // `as` saturates: absurd timestamps land in the first or last window.
        (ts / self.step).floor() as i64
    }

    pub fn add(&mut self, r: &ConnectionRecord) {
        self.total.add(r);
        if r.ts.is_finite() {
            let (lo, hi) = self.span.unwrap_or((r.ts, r.ts));
            self.span = Some((lo.min(r.ts), hi.max(r.ts)));
        }
        if self.windows == Windows::Auto {
            self.grow_auto(false);
        }
        let mut group: Vec<String> = self.dims.iter().map(|d| d.value(r)).collect();
        if !self.groups.contains(&group) {
            if self.groups.len() < MAX_GROUPS {
                self.groups.insert(group.clone());
            } else {
                group = other(self.dims.len());
                self.folded.groups += 1;
            }
        }
        let w = self.window_of(r.ts);
        if !self.window_ids.contains(&w) {
            if self.window_ids.len() >= MAX_WINDOWS {
                self.folded.windows += 1;
                return;
            }
            self.window_ids.insert(w);
        }
        let mut key = (w, group);
        if !self.cells.contains_key(&key) && self.cells.len() >= MAX_CELLS {
            key.1 = other(self.dims.len());
            self.folded.groups += 1;
        }
        self.cells.entry(key).or_default().add(r);
    }

    /// Auto windows: grows the window while the span holds more than
    /// [`AUTO_POINTS`] of them (4× while reading, to keep memory small,
    /// exactly at the end).
    fn grow_auto(&mut self, end: bool) {
        let Some((lo, hi)) = self.span else { return };
        let limit = if end { AUTO_POINTS } else { 4.0 * AUTO_POINTS };
        let mut step = self.step;
        for &s in NICE_WINDOWS.iter().filter(|&&s| s >= self.step) {
            step = s;
            if (hi / s).floor() - (lo / s).floor() + 1.0 <= limit {
                break;
            }
        }
        if step > self.step {
            self.rescale(step);
        }
    }

    /// Merges the windows into longer ones (`step` a multiple of the current).
    fn rescale(&mut self, step: f64) {
        let k = (step / self.step).round().max(1.0) as i64;
        let cells = std::mem::take(&mut self.cells);
        for ((w, g), s) in cells {
            self.cells
                .entry((w.div_euclid(k), g))
                .or_default()
                .merge(&s);
        }
        self.window_ids = self.window_ids.iter().map(|w| w.div_euclid(k)).collect();
        self.step = step;
    }

    /// The run is over: an automatic window takes its final length.
    pub fn finish(&mut self) {
        if self.windows == Windows::Auto {
            self.grow_auto(true);
        }
    }

    /// Windows holding data.
    pub fn window_count(&self) -> usize {
        self.window_ids.len()
    }

    /// Windows the capture's span covers (empty ones included), 0 if none.
    pub fn windows_spanned(&self) -> u64 {
        match self.span {
            Some((lo, hi)) if self.windowed() => {
                ((hi / self.step).floor() - (lo / self.step).floor()) as u64 + 1
            }
            _ => 0,
        }
    }

    /// Rows: windows ascending, in each the groups by connections
    /// (descending), then group values.
    pub fn rows(&self) -> Vec<Row<'_>> {
        let mut rows: Vec<(i64, Row<'_>)> = self
            .cells
            .iter()
            .map(|((w, g), s)| {
                let window = self
                    .windowed()
                    .then(|| (*w as f64 * self.step, (*w + 1) as f64 * self.step));
                (
                    *w,
                    Row {
                        window,
                        group: g.as_slice(),
                        stats: s,
                    },
                )
            })
            .collect();
        rows.sort_by(|(wa, a), (wb, b)| {
            wa.cmp(wb)
                .then(b.stats.connections.cmp(&a.stats.connections))
                .then(a.group.cmp(b.group))
        });
        rows.into_iter().map(|(_, r)| r).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::*;

    pub(crate) fn rec(
        ts: f64,
        sni: Option<&str>,
        kind: HandshakeKind,
        hs: f64,
    ) -> ConnectionRecord {
        ConnectionRecord {
            ts,
            sni: sni.map(Into::into),
            timing: Timing {
                handshake: Some(hs),
                ..Timing::default()
            },
            ..ConnectionRecord::sample(kind)
        }
    }

    #[test]
    fn dimension_values() {
        let mut r = rec(0.0, None, HandshakeKind::Full, 1.0);
        let v = |r: &ConnectionRecord| Dim::ALL.map(|d| d.value(r));
        assert_eq!(
            v(&r),
            [
                "(no sni)",
                "(none)",
                "(none)",
                "ipv4",
                "TLS1.3",
                "(unknown)",
                "tcp",
                "10.0.0.2",
                "(unknown)"
            ]
        );
        r.server = "[2001:db8::1]:8443".into();
        r.version = None;
        r.alpn = Some(["h2"].into_iter().collect());
        r.family = Family::Ipv6;
        r.transport = Transport::Quic;
        assert_eq!(Dim::Server.value(&r), "2001:db8::1");
        assert_eq!(Dim::Version.value(&r), "(unknown)");
        // The offer is not the choice.
        assert_eq!(Dim::Alpn.value(&r), "(unknown)");
        r.alpn_negotiated = Some("h3".into());
        assert_eq!(Dim::Alpn.value(&r), "h3");
        assert_eq!(Dim::Family.value(&r), "ipv6");
        assert_eq!(Dim::Transport.value(&r), "quic");
        r.role = Some(crate::record::Role::Outbound);
        assert_eq!(Dim::Role.value(&r), "outbound");
        r.ja4 = Some("t13d0412h1_16476d049b0b_622f681f1a22".into());
        r.ja4_stable = Some("t13d0411h1_16476d049b0b_303c7117418d".into());
        assert_eq!(Dim::Ja4.value(&r), "t13d0412h1_16476d049b0b_622f681f1a22");
        assert_eq!(
            Dim::Client.value(&r),
            "t13d0411h1_16476d049b0b_303c7117418d"
        );
        assert_eq!(Dim::Client.column(), "ja4_stable");
        assert_eq!(Dim::Ja4.column(), "ja4");
        assert_eq!(server_ip("2001:db8::1"), "2001:db8::1");
        for d in Dim::ALL {
            assert_eq!(Dim::parse(d.name()), Some(d));
        }
        assert_eq!(Dim::parse("nope"), None);
    }

    #[test]
    fn groups_ordered_by_connections_then_values() {
        let mut s = Slicer::new(vec![Dim::Sni], Windows::None);
        for (sni, kind) in [
            ("b", HandshakeKind::Full),
            ("a", HandshakeKind::Resumed),
            ("c", HandshakeKind::Full),
            ("c", HandshakeKind::Resumed),
            ("c", HandshakeKind::Failed),
        ] {
            s.add(&rec(0.0, Some(sni), kind, 10.0));
        }
        let rows = s.rows();
        let names: Vec<&str> = rows.iter().map(|r| r.group[0].as_str()).collect();
        assert_eq!(names, ["c", "a", "b"]);
        let c = rows[0].stats;
        assert_eq!((c.connections, c.full, c.resumed, c.failed), (3, 1, 1, 1));
        // Completed handshakes only.
        assert_eq!(c.handshake_ms.count(), 2);
        assert_eq!(c.resumption_rate(), Some(0.5));
        assert_eq!(s.total.connections, 5);
        assert!(rows.iter().all(|r| r.window.is_none()));
    }

    #[test]
    fn windows_align_to_the_epoch() {
        let mut s = Slicer::new(vec![], Windows::Fixed(60.0));
        for ts in [119.9, 120.0, 179.0, 61.0, 3600.5] {
            s.add(&rec(ts, None, HandshakeKind::Full, 1.0));
        }
        let rows = s.rows();
        let w: Vec<(f64, f64, u64)> = rows
            .iter()
            .map(|r| {
                let (a, b) = r.window.unwrap();
                (a, b, r.stats.connections)
            })
            .collect();
        assert_eq!(
            w,
            [(60.0, 120.0, 2), (120.0, 180.0, 2), (3600.0, 3660.0, 1)]
        );
        assert!(rows.iter().all(|r| r.group.is_empty()));
    }

    #[test]
    fn group_cap_folds_into_other_and_counts() {
        let mut s = Slicer::new(vec![Dim::Sni], Windows::None);
        for i in 0..MAX_GROUPS + 5 {
            s.add(&rec(0.0, Some(&format!("h{i}")), HandshakeKind::Full, 1.0));
        }
        assert_eq!(s.folded.groups, 5);
        let rows = s.rows();
        assert_eq!(rows.len(), MAX_GROUPS + 1);
        assert_eq!(rows[0].group, [OTHER]);
        assert_eq!(rows[0].stats.connections, 5);
    }

    #[test]
    fn window_cap_counts_what_it_leaves_out() {
        let mut s = Slicer::new(vec![], Windows::Fixed(1.0));
        for i in 0..MAX_WINDOWS + 3 {
            s.add(&rec(i as f64, None, HandshakeKind::Full, 1.0));
        }
        assert_eq!(s.window_count(), MAX_WINDOWS);
        assert_eq!(s.folded.windows, 3);
        assert_eq!(s.total.connections, MAX_WINDOWS as u64 + 3);
    }

    #[test]
    fn auto_windows_merge_exactly() {
        let mut s = Slicer::new(vec![Dim::Version], Windows::Auto);
        // One hour, a connection every 10 s.
        for i in 0..360 {
            s.add(&rec(
                1_699_999_980.0 + i as f64 * 10.0,
                None,
                HandshakeKind::Full,
                1.0,
            ));
        }
        s.finish();
        assert_eq!(s.step(), 60.0);
        assert!(
            (20..=61).contains(&s.window_count()),
            "{}",
            s.window_count()
        );
        let n: u64 = s.rows().iter().map(|r| r.stats.connections).sum();
        assert_eq!(n, 360);
        assert!(s.rows().iter().all(|r| r.stats.connections <= 6));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(30.0));
        assert_eq!(parse_duration("5m"), Ok(300.0));
        assert_eq!(parse_duration("1h"), Ok(3600.0));
        assert_eq!(parse_duration("1d"), Ok(86400.0));
        assert_eq!(parse_duration("90"), Ok(90.0));
        assert_eq!(parse_duration("0.5s"), Ok(0.5));
        for bad in ["0", "0s", "-5m", "", "m", "1w", "inf", "NaN"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
