//! Aggregates of connection records per server name, in bounded memory:
//! counts, and handshake times in log-scaled histograms for quantiles.

use std::collections::BTreeMap;

use crate::never_resume::ByClient;
use crate::record::{ConnectionRecord, EarlyData, HandshakeKind, Resumption, Role, Transport};

/// Distinct server names kept before the rest are folded into `(other)`.
pub const MAX_NAMES: usize = 10_000;
pub const OTHER: &str = "(other)";
pub const NO_SNI: &str = "(no sni)";

/// A log-bucketed histogram of milliseconds, sparse (only non-empty
/// buckets are kept): buckets 1% wide from 1 µs up, a quantile reported as
/// its bucket's geometric midpoint, so within 0.5% of the true order
/// statistic.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// (bucket, count), ascending by bucket: a record lands in ~70
    /// histograms of the summary, and a binary search over a few hundred
    /// adjacent keys is cheaper than walking a tree.
    counts: Vec<(u16, u64)>,
    n: u64,
}

const GROWTH: f64 = 1.01;
const FLOOR_MS: f64 = 0.001;

/// A value's histogram bucket: computed once per record value, then added
/// to each histogram that counts it (a logarithm costs more than the add).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bucket(u16);

impl Bucket {
    fn of(ms: f64) -> Bucket {
        Bucket(if ms <= FLOOR_MS {
            0
        } else {
            ((ms / FLOOR_MS).ln() / GROWTH.ln())
                .ceil()
                .min(u16::MAX as f64) as u16
        })
    }
}

impl Histogram {
    pub fn add(&mut self, ms: f64) {
        self.add_bucket(Bucket::of(ms), 1);
    }

    fn add_bucket(&mut self, Bucket(b): Bucket, count: u64) {
        match self.counts.binary_search_by_key(&b, |&(k, _)| k) {
            Ok(i) => self.counts[i].1 += count,
            Err(i) => self.counts.insert(i, (b, count)),
        }
        self.n += count;
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    /// The q-quantile (0..=1): the nearest-rank order statistic (rank
    /// ⌈q·n⌉), as the geometric midpoint of its bucket (within
    /// √[`GROWTH`] − 1 < 0.5% of it; values under 1 µs give 1 µs).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for &(b, c) in &self.counts {
            seen += c;
            if seen >= rank {
                return Some(if b == 0 {
                    FLOOR_MS
                } else {
                    FLOOR_MS * GROWTH.powf(b as f64 - 0.5)
                });
            }
        }
        None
    }

    /// (upper edge in ms, count) per non-empty bucket, ascending.
    pub fn buckets(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.counts.iter().map(|&(b, c)| {
            (
                if b == 0 {
                    FLOOR_MS
                } else {
                    FLOOR_MS * GROWTH.powi(b as i32)
                },
                c,
            )
        })
    }

    pub fn merge(&mut self, other: &Histogram) {
        for &(b, c) in &other.counts {
            self.add_bucket(Bucket(b), c);
        }
    }
}

/// A record's timing values as buckets, each computed once however many
/// aggregates the record is added to.
#[derive(Debug, Clone, Copy)]
struct Buckets {
    handshake: Option<Bucket>,
    ttfb: Option<Bucket>,
    tcp_rtt: Option<Bucket>,
    client_hello_delay: Option<Bucket>,
    server_think: Option<Bucket>,
    client_think: Option<Bucket>,
    network: Option<Bucket>,
    idle_before_use: Option<Bucket>,
    lifetime: Option<Bucket>,
}

impl Buckets {
    fn of(t: &crate::record::Timing) -> Buckets {
        let b = |v: Option<f64>| v.map(Bucket::of);
        Buckets {
            handshake: b(t.handshake),
            ttfb: b(t.ttfb),
            tcp_rtt: b(t.tcp_rtt),
            client_hello_delay: b(t.client_hello_delay),
            server_think: b(t.server_think),
            client_think: b(t.client_think),
            network: b(t.network()),
            idle_before_use: b(t.idle_before_use),
            lifetime: b(t.lifetime),
        }
    }
}

/// Where a kind's handshake time went, over the handshakes whose split is
/// known ([`crate::record::Timing::network`]): one population for all
/// three, so that their medians describe the same handshakes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Split {
    pub network_ms: Histogram,
    pub server_ms: Histogram,
    pub client_ms: Histogram,
}

impl Split {
    fn add(&mut self, b: &Buckets) {
        if let (Some(n), Some(s), Some(c)) = (b.network, b.server_think, b.client_think) {
            self.network_ms.add_bucket(n, 1);
            self.server_ms.add_bucket(s, 1);
            self.client_ms.add_bucket(c, 1);
        }
    }

    fn merge(&mut self, o: &Split) {
        self.network_ms.merge(&o.network_ms);
        self.server_ms.merge(&o.server_ms);
        self.client_ms.merge(&o.client_ms);
    }
}

/// Counts for one server name (or the total).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Aggregate {
    pub connections: u64,
    pub full: u64,
    pub resumed_session_id: u64,
    pub resumed_ticket: u64,
    pub resumed_psk: u64,
    pub failed: u64,
    pub incomplete: u64,
    /// One-sided captures: resumed, but the method is not visible (a TLS
    /// 1.2 server's abbreviated flight), and completed handshakes whose
    /// kind is not visible (a TLS 1.3 client that offered a PSK).
    pub resumed_unknown: u64,
    pub unknown: u64,
    /// Full handshakes whose client offered resumption: offers the server declined.
    pub declined: u64,
    pub early_attempted: u64,
    pub early_accepted: u64,
    pub early_rejected: u64,
    pub hrr: u64,
    pub handshake_full_ms: Histogram,
    pub handshake_resumed_ms: Histogram,
    pub ttfb_ms: Histogram,
    pub ttfb_full_ms: Histogram,
    pub ttfb_resumed_ms: Histogram,
    pub tcp_rtt_ms: Histogram,
    /// Connections by handshake round trips: 0, 1, 2, 3, 4+.
    pub round_trips: [u64; 5],
    pub avoidable_ms: f64,
    /// Every record's value where it has one (QUIC has server think only).
    pub client_hello_delay_ms: Histogram,
    pub server_think_ms: Histogram,
    pub client_think_ms: Histogram,
    pub split_full: Split,
    pub split_resumed: Split,
    /// Handshake's end -> the client's first application data.
    pub idle_before_use_ms: Histogram,
    /// Of those, the connections used within [`ON_DEMAND_MS`] of their
    /// handshake: opened on demand, not pooled or pre-warmed.
    pub used_on_demand: u64,
    pub lifetime_ms: Histogram,
}

/// 0-RTT by outcome. `tried`: the client offered early data (any
/// `early_data` but `none`), = `accepted` + `rejected` + `unseen`
/// (`attempted`: the outcome is encrypted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EarlyDataCounts {
    pub tried: u64,
    pub accepted: u64,
    pub rejected: u64,
    pub unseen: u64,
}

/// A connection whose client used it within this long (ms) of the
/// handshake's end was opened on demand; later, it waited in a pool or was
/// pre-warmed. 10 ms: far above a client's own delay between its Finished
/// and its request (well under 1 ms on the bundled captures), far below a
/// pool's idle times.
pub const ON_DEMAND_MS: f64 = 10.0;

impl Aggregate {
    pub fn add(&mut self, r: &ConnectionRecord) {
        self.add_bucketed(r, &Buckets::of(&r.timing));
    }

    /// [`Aggregate::add`] with the record's buckets already computed.
    fn add_bucketed(&mut self, r: &ConnectionRecord, b: &Buckets) {
        self.connections += 1;
        match (r.handshake, r.resumption) {
            (Some(HandshakeKind::Full), _) => self.full += 1,
            (Some(HandshakeKind::Resumed), Some(Resumption::SessionId)) => {
                self.resumed_session_id += 1
            }
            (Some(HandshakeKind::Resumed), Some(Resumption::Ticket)) => self.resumed_ticket += 1,
            (Some(HandshakeKind::Resumed), Some(Resumption::Psk)) => self.resumed_psk += 1,
            (Some(HandshakeKind::Resumed), None) => self.resumed_unknown += 1,
            (Some(HandshakeKind::Failed), _) => self.failed += 1,
            (Some(HandshakeKind::Incomplete), _) => self.incomplete += 1,
            (None, _) => self.unknown += 1,
        }
        if r.handshake == Some(HandshakeKind::Full)
            && r.offered.as_ref().is_some_and(|o| !o.is_empty())
        {
            self.declined += 1;
        }
        match r.early_data {
            Some(EarlyData::Attempted) => self.early_attempted += 1,
            Some(EarlyData::Accepted) => self.early_accepted += 1,
            Some(EarlyData::Rejected) => self.early_rejected += 1,
            Some(EarlyData::None) | None => {}
        }
        self.hrr += r.hrr as u64;
        if let Some(x) = b.handshake {
            match r.handshake {
                Some(HandshakeKind::Full) => self.handshake_full_ms.add_bucket(x, 1),
                Some(HandshakeKind::Resumed) => self.handshake_resumed_ms.add_bucket(x, 1),
                _ => {}
            }
        }
        if let Some(x) = b.ttfb {
            self.ttfb_ms.add_bucket(x, 1);
            match r.handshake {
                Some(HandshakeKind::Full) => self.ttfb_full_ms.add_bucket(x, 1),
                Some(HandshakeKind::Resumed) => self.ttfb_resumed_ms.add_bucket(x, 1),
                _ => {}
            }
        }
        if let Some(x) = b.tcp_rtt {
            self.tcp_rtt_ms.add_bucket(x, 1);
        }
        if let Some(n) = r.timing.round_trips {
            self.round_trips[(n as usize).min(4)] += 1;
        }
        self.avoidable_ms += r.timing.avoidable.unwrap_or(0.0);
        for (h, v) in [
            (&mut self.client_hello_delay_ms, b.client_hello_delay),
            (&mut self.server_think_ms, b.server_think),
            (&mut self.client_think_ms, b.client_think),
        ] {
            if let Some(x) = v {
                h.add_bucket(x, 1);
            }
        }
        match r.handshake {
            Some(HandshakeKind::Full) => self.split_full.add(b),
            Some(HandshakeKind::Resumed) => self.split_resumed.add(b),
            _ => {}
        }
        if let (Some(x), Some(idle)) = (b.idle_before_use, r.timing.idle_before_use) {
            self.idle_before_use_ms.add_bucket(x, 1);
            self.used_on_demand += u64::from(idle <= ON_DEMAND_MS);
        }
        if let Some(x) = b.lifetime {
            self.lifetime_ms.add_bucket(x, 1);
        }
    }

    /// Share of the connections with a known first use that were used
    /// within [`ON_DEMAND_MS`] of their handshake.
    pub fn on_demand_rate(&self) -> Option<f64> {
        let n = self.idle_before_use_ms.count();
        (n > 0).then(|| self.used_on_demand as f64 / n as f64)
    }

    /// The 0-RTT counts every output shows (table, HTML): one place, so
    /// that "tried" means the same everywhere.
    pub fn early_data(&self) -> EarlyDataCounts {
        EarlyDataCounts {
            tried: self.early_attempted + self.early_accepted + self.early_rejected,
            accepted: self.early_accepted,
            rejected: self.early_rejected,
            unseen: self.early_attempted,
        }
    }

    pub fn resumed(&self) -> u64 {
        self.resumed_session_id + self.resumed_ticket + self.resumed_psk + self.resumed_unknown
    }

    /// Resumed share of completed handshakes.
    pub fn resumption_rate(&self) -> Option<f64> {
        let done = self.full + self.resumed();
        (done > 0).then(|| self.resumed() as f64 / done as f64)
    }

    pub fn merge(&mut self, o: &Aggregate) {
        self.connections += o.connections;
        self.full += o.full;
        self.resumed_session_id += o.resumed_session_id;
        self.resumed_ticket += o.resumed_ticket;
        self.resumed_psk += o.resumed_psk;
        self.failed += o.failed;
        self.incomplete += o.incomplete;
        self.resumed_unknown += o.resumed_unknown;
        self.unknown += o.unknown;
        self.declined += o.declined;
        self.early_attempted += o.early_attempted;
        self.early_accepted += o.early_accepted;
        self.early_rejected += o.early_rejected;
        self.hrr += o.hrr;
        self.handshake_full_ms.merge(&o.handshake_full_ms);
        self.handshake_resumed_ms.merge(&o.handshake_resumed_ms);
        self.ttfb_ms.merge(&o.ttfb_ms);
        self.ttfb_full_ms.merge(&o.ttfb_full_ms);
        self.ttfb_resumed_ms.merge(&o.ttfb_resumed_ms);
        self.tcp_rtt_ms.merge(&o.tcp_rtt_ms);
        for (a, b) in self.round_trips.iter_mut().zip(o.round_trips) {
            *a += b;
        }
        self.avoidable_ms += o.avoidable_ms;
        self.client_hello_delay_ms.merge(&o.client_hello_delay_ms);
        self.server_think_ms.merge(&o.server_think_ms);
        self.client_think_ms.merge(&o.client_think_ms);
        self.split_full.merge(&o.split_full);
        self.split_resumed.merge(&o.split_resumed);
        self.idle_before_use_ms.merge(&o.idle_before_use_ms);
        self.used_on_demand += o.used_on_demand;
        self.lifetime_ms.merge(&o.lifetime_ms);
    }
}

/// Aggregates by server name, with a total; the same split by transport
/// (TLS over TCP, QUIC) for the replay table.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub by_name: BTreeMap<String, Aggregate>,
    pub total: Aggregate,
    /// By transport, then server name (bounded like `by_name`, per transport).
    pub by_transport_name: BTreeMap<Transport, BTreeMap<String, Aggregate>>,
    pub by_transport: BTreeMap<Transport, Aggregate>,
    /// Resumption by client fingerprint ("which clients never resume").
    pub clients: ByClient,
    /// By this host's role, then server name (bounded like `by_name`):
    /// only records whose role is known.
    pub by_role_name: BTreeMap<Role, BTreeMap<String, Aggregate>>,
    pub by_role: BTreeMap<Role, Aggregate>,
}

impl Summary {
    pub fn add(&mut self, r: &ConnectionRecord) {
        let b = Buckets::of(&r.timing);
        let name = r.sni.as_deref().unwrap_or(NO_SNI);
        self.total.add_bucketed(r, &b);
        self.clients.add(r);
        self.by_transport
            .entry(r.transport)
            .or_default()
            .add_bucketed(r, &b);
        if let Some(role) = r.role {
            self.by_role.entry(role).or_default().add_bucketed(r, &b);
            let names = self.by_role_name.entry(role).or_default();
            add_named(names, name, |a| a.add_bucketed(r, &b));
        }
        let names = self.by_transport_name.entry(r.transport).or_default();
        add_named(names, name, |a| a.add_bucketed(r, &b));
        add_named(&mut self.by_name, name, |a| a.add_bucketed(r, &b));
    }

    /// The `n` (name, transport) pairs with most connections, then the rest folded.
    pub fn top_by_transport(
        &self,
        n: usize,
    ) -> (Vec<(&str, Transport, &Aggregate)>, Option<Aggregate>) {
        let mut rows: Vec<(&str, Transport, &Aggregate)> = self
            .by_transport_name
            .iter()
            .flat_map(|(t, m)| m.iter().map(move |(k, v)| (k.as_str(), *t, v)))
            .collect();
        rows.sort_by(|a, b| {
            b.2.connections
                .cmp(&a.2.connections)
                .then(a.0.cmp(b.0))
                .then(a.1.cmp(&b.1))
        });
        if rows.len() <= n {
            return (rows, None);
        }
        let mut rest = Aggregate::default();
        for (_, _, a) in &rows[n..] {
            rest.merge(a);
        }
        rows.truncate(n);
        (rows, Some(rest))
    }

    /// Per role: the `n` server names with most connections, then the rest folded.
    pub fn top_by_role(&self, n: usize) -> Vec<(Role, TopNames<'_>)> {
        self.by_role_name
            .iter()
            .map(|(role, names)| (*role, top_of(names, n)))
            .collect()
    }

    /// The `n` names with most connections (ties by name), then the rest folded.
    pub fn top(&self, n: usize) -> TopNames<'_> {
        top_of(&self.by_name, n)
    }
}

/// One row of the summary, as the table and the HTML report both show it.
pub struct SummaryRow<'a> {
    /// A server name, [`OTHER`] or `TOTAL`.
    pub name: &'a str,
    /// `tcp`, `quic`; `all` for [`OTHER`] (pairs of both folded) and the total.
    pub transport: &'static str,
    pub total: bool,
    pub agg: std::borrow::Cow<'a, Aggregate>,
}

impl Summary {
    /// The summary's rows: the `top` busiest (server name, transport)
    /// pairs, the rest folded into [`OTHER`], then a total per transport
    /// when there are several, and the total.
    pub fn rows(&self, top: usize) -> Vec<SummaryRow<'_>> {
        use std::borrow::Cow;
        let (names, rest) = self.top_by_transport(top);
        let mut rows: Vec<SummaryRow<'_>> = names
            .into_iter()
            .map(|(name, t, a)| SummaryRow {
                name,
                transport: t.as_str(),
                total: false,
                agg: Cow::Borrowed(a),
            })
            .collect();
        rows.extend(rest.map(|a| SummaryRow {
            name: OTHER,
            transport: "all",
            total: false,
            agg: Cow::Owned(a),
        }));
        if self.by_transport.len() > 1 {
            rows.extend(self.by_transport.iter().map(|(t, a)| SummaryRow {
                name: "TOTAL",
                transport: t.as_str(),
                total: true,
                agg: Cow::Borrowed(a),
            }));
        }
        rows.push(SummaryRow {
            name: "TOTAL",
            transport: "all",
            total: true,
            agg: Cow::Borrowed(&self.total),
        });
        rows
    }
}

/// Lets `add` change `name`'s entry in `names`, or [`OTHER`]'s once
/// [`MAX_NAMES`] are kept: the one bound of every table by name (server
/// names, client fingerprints, the live top view). Looked up by `&str`
/// first: a key is allocated only for a new name.
pub fn add_named<V: Default>(
    names: &mut BTreeMap<String, V>,
    name: &str,
    add: impl FnOnce(&mut V),
) {
    if let Some(a) = names.get_mut(name) {
        return add(a);
    }
    let key = if names.len() < MAX_NAMES { name } else { OTHER };
    add(names.entry(key.to_string()).or_default());
}

/// The busiest names with their aggregates, and the rest folded into one.
pub type TopNames<'a> = (Vec<(&'a str, &'a Aggregate)>, Option<Aggregate>);

/// The `n` names with most connections (ties by name), then the rest folded.
fn top_of(by_name: &BTreeMap<String, Aggregate>, n: usize) -> TopNames<'_> {
    let mut names: Vec<(&str, &Aggregate)> = by_name.iter().map(|(k, v)| (k.as_str(), v)).collect();
    names.sort_by(|a, b| b.1.connections.cmp(&a.1.connections).then(a.0.cmp(b.0)));
    if names.len() <= n {
        return (names, None);
    }
    let mut rest = Aggregate::default();
    for (_, a) in &names[n..] {
        rest.merge(a);
    }
    names.truncate(n);
    (names, Some(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reported quantile is within 0.5% of the nearest-rank order
    /// statistic, over values from 2 µs to an hour and every quantile
    /// the outputs show.
    #[test]
    fn histogram_quantiles_are_within_half_a_percent() {
        // A deterministic spread of values (LCG), log-uniform.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut values = Vec::new();
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            values.push(0.002 * (3.6e6f64 / 0.002).powf(u));
        }
        for n in [1, 2, 3, 10, 99, 1000, 20_000] {
            let mut h = Histogram::default();
            let mut v = values[..n].to_vec();
            for &ms in &v {
                h.add(ms);
            }
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            for q in [0.0, 0.01, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0] {
                let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
                let exact = v[rank - 1];
                let got = h.quantile(q).unwrap();
                assert!(
                    (got - exact).abs() <= exact * 0.005,
                    "n={n} q={q}: {got} vs {exact}"
                );
            }
        }
        let mut h = Histogram::default();
        for i in 1..=1000 {
            h.add(i as f64);
        }
        for (q, exact) in [(0.5, 500.0), (0.95, 950.0), (0.99, 990.0)] {
            let got = h.quantile(q).unwrap();
            assert!((got - exact).abs() <= exact * 0.005, "{q}: {got}");
        }
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    /// Sparse: a histogram keeps only the buckets it has seen.
    #[test]
    fn histogram_memory_is_sparse() {
        let mut h = Histogram::default();
        for _ in 0..10_000 {
            h.add(12.0);
        }
        assert_eq!(h.buckets().count(), 1);
    }
}
