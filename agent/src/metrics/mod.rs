//! Prometheus metrics (prometheus-client): traffic facts under `tls_`,
//! from each record; the agent's own health under `tlsrum_`, from the
//! counters of the analyzer, the capture source and the kernel
//! ([`health`]). Label values are enums, except `server_name` and `ja4_stable`,
//! which are bounded ([`labels::ServerNames`], [`clients`]).

pub mod clients;
pub mod health;
pub mod heavy;
pub mod http;
pub mod labels;
pub mod process;

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::ops::Deref;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use analyzer::counters::Counter as Count;
use analyzer::record::{ConnectionRecord, EarlyData, HandshakeKind, Resumption};
use analyzer::Stats;
use anyhow::Result;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use self::clients::ClientFingerprints;
use self::health::Health;
use self::labels::{
    ClientKindLabels, ClientLabels, EarlyDataLabels, FirstUseLabels, HandshakeLabels, KindLabels,
    NameTransportLabels, Named, OfferLabels, RoleNameTransportLabels, RoleTimedLabels,
    RoleTransportLabels, ServerNames, TimedLabels,
};
use crate::sink::{RecordSink, RunEnd};

/// A metric as registered here: in /metrics from the start, HELP and TYPE
/// included, even a family with no series yet (prometheus-client leaves
/// an empty family out, and a dashboard would say "No data" where a
/// family's series show 0 once they exist: see [`Metrics::precreate`]).
#[derive(Debug)]
pub struct Shown<M>(pub M);

impl<M: EncodeMetric> EncodeMetric for Shown<M> {
    fn encode(&self, encoder: MetricEncoder) -> std::fmt::Result {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        false
    }
}

/// Which series each `server_name` value has, so that a retired name's
/// go ([`labels::ServerNames`]): prometheus-client can remove a series by
/// its label set, not list a family's.
#[derive(Default)]
struct Owners(HashMap<String, Vec<Box<dyn FnOnce() + Send>>>);

impl Owners {
    /// Notes the series of `labels` in `family` under its name.
    fn note<S, M>(&mut self, family: &Family<S, M>, labels: &S)
    where
        S: Named + Clone + Hash + Eq + Send + Sync + 'static,
        M: Send + Sync + 'static,
    {
        let name = labels.server_name();
        if name == labels::OTHER || name == labels::NONE || family.get(labels).is_some() {
            return;
        }
        let (family, labels) = (family.clone(), labels.clone());
        self.0
            .entry(labels.server_name().to_string())
            .or_default()
            .push(Box::new(move || {
                family.remove(&labels);
            }));
    }

    /// Creates the series of `labels` in `family` (at 0), noted under its name.
    fn create<S, M>(&mut self, family: &Family<S, M>, labels: &S)
    where
        S: Named + Clone + Hash + Eq + Send + Sync + 'static,
        M: Clone + Default + Send + Sync + 'static,
    {
        self.note(family, labels);
        family.get_or_create_owned(labels);
    }

    /// The series of `labels` in `family`, noted under its name.
    fn get<'f, S, M>(&mut self, family: &'f Family<S, M>, labels: &S) -> impl Deref<Target = M> + 'f
    where
        S: Named + Clone + Hash + Eq + Send + Sync + 'static,
        M: Send + Sync + 'static,
    {
        self.note(family, labels);
        family.get_or_create(labels)
    }

    /// Removes every series of the name.
    fn retire(&mut self, name: &str) {
        for remove in self.0.remove(name).into_iter().flatten() {
            remove();
        }
    }
}

/// `tlsrum_build_info`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
    /// `git rev-parse --short=12 HEAD` at build time, or "unknown" (agent/build.rs).
    pub commit: String,
    /// ebpf or pcap (live); none where no capture runs.
    pub backend: String,
}

/// The commit the agent was built from (agent/build.rs).
pub const COMMIT: &str = env!("TLSRUM_COMMIT");

/// The early-data outcomes a handshake can have, each with its series
/// from a name's first handshake on.
const EARLY_OUTCOMES: [EarlyData; 3] = [
    EarlyData::Attempted,
    EarlyData::Accepted,
    EarlyData::Rejected,
];
const OFFER_OUTCOMES: [&str; 2] = ["accepted", "declined"];

fn seconds_buckets() -> impl Iterator<Item = f64> {
    [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0,
        5.0,
    ]
    .into_iter()
}

/// Idle before use: a connection used at once (~0 ms) and one pooled for
/// minutes both land in a bucket of their own; 0.01 is [`ON_DEMAND_MS`].
fn idle_buckets() -> impl Iterator<Item = f64> {
    [
        0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0,
    ]
    .into_iter()
}

/// Connection lifetime: a one-request connection to a pooled one kept
/// for an hour.
fn lifetime_buckets() -> impl Iterator<Item = f64> {
    [0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0].into_iter()
}

/// A connection first used within this many milliseconds of its
/// handshake's end was opened on demand; later, it waited in a pool (or
/// was pre-warmed). 10 ms: well above a client's own turnaround from
/// Finished to its request (under a millisecond to a few on a busy host),
/// well below any pool's idle time worth the name.
pub const ON_DEMAND_MS: f64 = 10.0;

/// The `use` label of `tls_connections_first_use`, by whether the
/// connection waited more than [`ON_DEMAND_MS`].
const FIRST_USES: [&str; 2] = ["on_demand", "pooled"];

/// Most label combinations whose series [`Metrics`] keeps at hand; more
/// and it starts over (the series themselves stay).
const SERIES_CACHE: usize = 4096;

/// A record's label values: the `role` is `unknown` where the record has
/// none (replay without `--local`).
#[derive(PartialEq, Eq, Hash)]
struct SeriesKey {
    /// Shared with the label bounds (`labels`, `clients`): no copy a record.
    server_name: Arc<str>,
    ja4_stable: Arc<str>,
    role: &'static str,
    kind: &'static str,
    method: &'static str,
    version: &'static str,
    family: &'static str,
    transport: &'static str,
}

/// The series of one [`SeriesKey`], each taken at its first use (a record
/// without, say, a ttfb creates no ttfb series): the next record with
/// these labels skips some twenty label hashes and string copies.
#[derive(Default)]
struct Series {
    client: String,
    handshakes: Option<Counter>,
    client_handshakes: Option<Counter>,
    /// By method (session_id, ticket, psk) and [`OFFER_OUTCOMES`].
    offers: [[Option<Counter>; 2]; 3],
    /// By [`EARLY_OUTCOMES`].
    early_data: [Option<Counter>; 3],
    hrr: Option<Counter>,
    handshake_seconds: Option<Histogram>,
    client_handshake_seconds: Option<Histogram>,
    ttfb: Option<Histogram>,
    round_trips: Option<Histogram>,
    tcp_rtt: Option<Histogram>,
    avoidable: Option<Counter<f64, AtomicU64>>,
    idle_before_use: Option<Histogram>,
    /// By [`FIRST_USES`].
    first_use: [Option<Counter>; 2],
    lifetime: Option<Histogram>,
    /// client_hello_delay, server_think, client_think, network.
    think: [Option<Histogram>; 4],
}

/// The series in `slot`, or the one of `labels` in `family` (noted under
/// its server name), kept there.
fn noted<'s, S, M>(
    slot: &'s mut Option<M>,
    owners: &mut Owners,
    family: &Family<S, M>,
    labels: impl FnOnce() -> S,
) -> &'s M
where
    S: Named + Clone + Hash + Eq + Send + Sync + 'static,
    M: Clone + Send + Sync + 'static,
{
    slot.get_or_insert_with(|| owners.get(family, &labels()).clone())
}

/// The same for a family without `server_name`.
fn plain<'s, S, M, C>(
    slot: &'s mut Option<M>,
    family: &Family<S, M, C>,
    labels: impl FnOnce() -> S,
) -> &'s M
where
    S: Clone + Hash + Eq,
    M: Clone,
    C: prometheus_client::metrics::family::MetricConstructor<M>,
{
    slot.get_or_insert_with(|| family.get_or_create(&labels()).clone())
}

/// Every counter of the analyzer (QUIC's included) with its value.
pub fn analyzer_counters(s: &Stats) -> Vec<Count> {
    let mut out = Vec::new();
    s.visit(&mut |c| out.push(c));
    out
}

pub struct Metrics {
    registry: Registry,
    names: ServerNames,
    clients: ClientFingerprints,
    handshakes: Family<HandshakeLabels, Counter>,
    offers: Family<OfferLabels, Counter>,
    early_data: Family<EarlyDataLabels, Counter>,
    hrr: Family<NameTransportLabels, Counter>,
    handshake_seconds: Family<RoleTimedLabels, Histogram>,
    idle_before_use_seconds: Family<RoleNameTransportLabels, Histogram>,
    first_use: Family<FirstUseLabels, Counter>,
    lifetime_seconds: Family<RoleTransportLabels, Histogram>,
    ttfb_seconds: Family<TimedLabels, Histogram>,
    tcp_rtt_seconds: Family<NameTransportLabels, Histogram>,
    round_trips: Family<KindLabels, Histogram>,
    avoidable_seconds: Family<NameTransportLabels, Counter<f64, AtomicU64>>,
    client_hello_delay_seconds: Family<NameTransportLabels, Histogram>,
    server_think_seconds: Family<NameTransportLabels, Histogram>,
    client_think_seconds: Family<NameTransportLabels, Histogram>,
    network_seconds: Family<NameTransportLabels, Histogram>,
    client_handshakes: Family<ClientKindLabels, Counter>,
    client_handshake_seconds: Family<ClientLabels, Histogram>,
    owners: Owners,
    /// Each label combination's series, as the records have used them.
    series: HashMap<SeriesKey, Series, foldhash::fast::RandomState>,
    /// (server_name, transport) pairs whose zero series exist.
    precreated: HashSet<(String, String)>,
    build_info: Family<BuildLabels, Gauge>,
    capture_buffer: Gauge,
    // agent health
    records: Counter,
    flows_active: Gauge,
    flow_memory: Gauge,
    health: Health,
}

impl Metrics {
    /// `known`: the counters this run will report (analyzer, source,
    /// kernel), whose series exist from the start.
    pub fn new(names: ServerNames, clients: ClientFingerprints, known: &[Count]) -> Self {
        let mut registry = Registry::default();
        let handshakes = Family::<HandshakeLabels, Counter>::default();
        registry.register("tls_handshakes", "TLS handshakes by role (inbound, outbound, transit, unknown), kind (full, resumed, failed, incomplete), resumption method, version, address family and transport", Shown(handshakes.clone()));
        let offers = Family::<OfferLabels, Counter>::default();
        registry.register(
            "tls_resumption_offers",
            "Resumption offers by method and outcome (accepted, declined)",
            Shown(offers.clone()),
        );
        let early_data = Family::<EarlyDataLabels, Counter>::default();
        registry.register(
            "tls_early_data",
            "0-RTT offers by outcome (attempted, accepted, rejected)",
            Shown(early_data.clone()),
        );
        let hrr = Family::<NameTransportLabels, Counter>::default();
        registry.register(
            "tls_hello_retry_requests",
            "Handshakes with a HelloRetryRequest",
            Shown(hrr.clone()),
        );
        let handshake_seconds = Family::<RoleTimedLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(seconds_buckets())
        });
        registry.register(
            "tls_handshake_duration_seconds",
            "ClientHello to the client's first application data, by role, kind, address family and version",
            Shown(handshake_seconds.clone()),
        );
        // Issue 16: proxies and pools.
        let idle_before_use_seconds =
            Family::<RoleNameTransportLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(idle_buckets())
            });
        registry.register(
            "tls_idle_before_use_seconds",
            "The handshake's end to the client's first application data: near zero opened on demand, long pooled or pre-warmed",
            Shown(idle_before_use_seconds.clone()),
        );
        let first_use = Family::<FirstUseLabels, Counter>::default();
        registry.register(
            "tls_connections_first_use",
            "Connections by first use: on_demand (application data within 10 ms of the handshake's end) or pooled (later: a pool or pre-warming hit)",
            Shown(first_use.clone()),
        );
        let lifetime_seconds =
            Family::<RoleTransportLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(lifetime_buckets())
            });
        registry.register(
            "tls_connection_lifetime_seconds",
            "A connection's first packet to its FIN or RST, for connections seen to end",
            Shown(lifetime_seconds.clone()),
        );
        let ttfb_seconds = Family::<TimedLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(seconds_buckets())
        });
        registry.register(
            "tls_time_to_first_byte_seconds",
            "ClientHello to the server's first application data, by kind, address family and version",
            Shown(ttfb_seconds.clone()),
        );
        let tcp_rtt_seconds =
            Family::<NameTransportLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(seconds_buckets())
            });
        registry.register(
            "tls_tcp_rtt_seconds",
            "TCP round-trip time from the three-way handshake",
            Shown(tcp_rtt_seconds.clone()),
        );
        let round_trips = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([0.0, 1.0, 2.0, 3.0, 4.0])
        });
        registry.register(
            "tls_handshake_round_trips",
            "Handshake round trips before the client could send data",
            Shown(round_trips.clone()),
        );
        let avoidable_seconds = Family::<NameTransportLabels, Counter<f64, AtomicU64>>::default();
        registry.register(
            "tls_avoidable_handshake_seconds",
            "Time full handshakes cost beyond a resumed one, where the client offered resumption",
            Shown(avoidable_seconds.clone()),
        );
        // Issue 14: where the handshake time goes. Each family holds the
        // records that have its field; the network part only those whose
        // split is complete (Timing::network), the population of
        // tls_client_think_seconds, so that a view can stack the three.
        let seconds_by_name = |registry: &mut Registry, name: &str, help: &str| {
            let family = Family::<NameTransportLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(seconds_buckets())
            });
            registry.register(name, help, Shown(family.clone()));
            family
        };
        let client_hello_delay_seconds = seconds_by_name(
            &mut registry,
            "tls_client_hello_delay_seconds",
            "TCP handshake's end (the client's ACK) to the ClientHello: the client's time before it started TLS",
        );
        let server_think_seconds = seconds_by_name(
            &mut registry,
            "tls_server_think_seconds",
            "The server's own processing, summed over the handshake (round trips taken out)",
        );
        let client_think_seconds = seconds_by_name(
            &mut registry,
            "tls_client_think_seconds",
            "The client's own processing, summed over the handshake (round trips taken out); TLS over TCP only",
        );
        let network_seconds = seconds_by_name(
            &mut registry,
            "tls_handshake_network_seconds",
            "Handshake time less both sides' think time (about round trips x TCP RTT), where both are known",
        );
        // Issue 15: who connects. By client fingerprint (the top N by
        // volume, the rest `other`: clients.rs), without server_name.
        let client_handshakes = Family::<ClientKindLabels, Counter>::default();
        registry.register(
            "tls_client_handshakes",
            "TLS handshakes by client fingerprint (JA4: the top N by volume, the rest other, none without one), kind and transport",
            Shown(client_handshakes.clone()),
        );
        let client_handshake_seconds =
            Family::<ClientLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(seconds_buckets())
            });
        registry.register(
            "tls_client_handshake_duration_seconds",
            "ClientHello to the client's first application data (as tls_handshake_duration_seconds), by client fingerprint",
            Shown(client_handshake_seconds.clone()),
        );
        let records = Counter::default();
        registry.register(
            "tlsrum_connection_records",
            "Connection records produced",
            Shown(records.clone()),
        );
        let flows_active = Gauge::default();
        registry.register(
            "tlsrum_flows_active",
            "Flows tracked now",
            Shown(flows_active.clone()),
        );
        let flow_memory = Gauge::default();
        registry.register(
            "tlsrum_flow_memory_bytes",
            "Memory the flow state holds now, as counted against --memory-budget",
            Shown(flow_memory.clone()),
        );
        let health = Health::new(&mut registry, known);
        let build_info = Family::<BuildLabels, Gauge>::default();
        registry.register(
            "tlsrum_build_info",
            "The agent's version, the commit it was built from and the capture backend; always 1",
            Shown(build_info.clone()),
        );
        let capture_buffer = Gauge::default();
        registry.register(
            "tlsrum_capture_buffer_bytes",
            "Kernel buffer between the capture and the agent (--buffer-size): the eBPF ring buffer, or libpcap's on each interface; 0 without a capture",
            Shown(capture_buffer.clone()),
        );
        registry.register_collector(Box::new(process::ProcessCollector));
        let mut metrics = Metrics {
            registry,
            names,
            clients,
            handshakes,
            offers,
            early_data,
            hrr,
            handshake_seconds,
            idle_before_use_seconds,
            first_use,
            lifetime_seconds,
            ttfb_seconds,
            tcp_rtt_seconds,
            round_trips,
            avoidable_seconds,
            client_hello_delay_seconds,
            server_think_seconds,
            client_think_seconds,
            network_seconds,
            client_handshakes,
            client_handshake_seconds,
            records,
            flows_active,
            flow_memory,
            health,
            owners: Owners::default(),
            series: HashMap::default(),
            precreated: HashSet::new(),
            build_info,
            capture_buffer,
        };
        metrics.set_backend("none");
        metrics
    }

    /// `tlsrum_build_info{backend}`: the capture backend in use.
    pub fn set_backend(&mut self, backend: &str) {
        self.build_info.clear();
        self.build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                commit: COMMIT.into(),
                backend: backend.into(),
            })
            .set(1);
    }

    /// `tlsrum_capture_buffer_bytes`: the kernel buffer the capture got.
    pub fn set_capture_buffer(&mut self, bytes: u64) {
        self.capture_buffer
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// A name's counters of rare events (0-RTT, HelloRetryRequest,
    /// resumption offers) exist at 0 from its first handshake on, for each
    /// value of their enumerated labels, so that a server without 0-RTT
    /// shows 0 rather than "No data" (three panels of the resumption
    /// dashboard did). Bounded: 10 series per name and transport (TCP), 5
    /// (QUIC: PSK offers only).
    fn precreate(&mut self, server_name: &str, transport: &str) {
        if !self
            .precreated
            .insert((server_name.to_string(), transport.to_string()))
        {
            return;
        }
        for e in EARLY_OUTCOMES {
            self.owners.create(
                &self.early_data,
                &EarlyDataLabels {
                    outcome: e.as_str().into(),
                    transport: transport.into(),
                    server_name: server_name.into(),
                },
            );
        }
        self.owners.create(
            &self.hrr,
            &NameTransportLabels {
                transport: transport.into(),
                server_name: server_name.into(),
            },
        );
        let methods: &[Resumption] = if transport == "quic" {
            &[Resumption::Psk]
        } else {
            &[Resumption::SessionId, Resumption::Ticket, Resumption::Psk]
        };
        for m in methods {
            for outcome in OFFER_OUTCOMES {
                self.owners.create(
                    &self.offers,
                    &OfferLabels {
                        outcome: outcome.into(),
                        method: m.as_str().into(),
                        transport: transport.into(),
                        server_name: server_name.into(),
                    },
                );
            }
        }
    }

    pub fn record(&mut self, r: &ConnectionRecord) {
        let key = SeriesKey {
            server_name: self.names.label(r.sni.as_deref()),
            ja4_stable: self.clients.label(r.ja4_stable.as_deref()),
            role: r.role.map_or("unknown", |r| r.as_str()),
            // A one-sided capture may not show the kind.
            kind: r.handshake.map_or("unknown", |k| k.as_str()),
            method: r.resumption.map_or("none", |m| m.as_str()),
            version: r.version.unwrap_or("unknown"),
            family: r.family.as_str(),
            transport: r.transport.as_str(),
        };
        self.records.inc();
        // The series map is set aside while the record is added, so that its
        // series is looked up once (removing it and putting it back hashed
        // the eight labels twice) while `observe` borrows the rest.
        let mut series = std::mem::take(&mut self.series);
        match series.get_mut(&key) {
            Some(s) => self.observe(&key, s, r),
            None => {
                self.precreate(&key.server_name, key.transport);
                if series.len() >= SERIES_CACHE {
                    series.clear();
                }
                let mut s = Series {
                    client: self.clients.name(&key.ja4_stable),
                    ..Series::default()
                };
                self.observe(&key, &mut s, r);
                series.insert(key, s);
            }
        }
        self.series = series;
    }

    /// Adds the record to its series, each found (and created, noted
    /// under its name) at its first use by these labels.
    fn observe(&mut self, k: &SeriesKey, s: &mut Series, r: &ConnectionRecord) {
        let (name, transport) = (&k.server_name, k.transport);
        let owners = &mut self.owners;
        let nt = || NameTransportLabels {
            transport: transport.into(),
            server_name: name.to_string(),
        };
        let tl = || TimedLabels {
            kind: k.kind.into(),
            family: k.family.into(),
            version: k.version.into(),
            transport: transport.into(),
            server_name: name.to_string(),
        };
        noted(&mut s.handshakes, owners, &self.handshakes, || {
            HandshakeLabels {
                role: k.role.into(),
                kind: k.kind.into(),
                method: k.method.into(),
                version: k.version.into(),
                family: k.family.into(),
                transport: transport.into(),
                server_name: name.to_string(),
            }
        })
        .inc();
        plain(&mut s.client_handshakes, &self.client_handshakes, || {
            ClientKindLabels {
                ja4_stable: k.ja4_stable.to_string(),
                client: s.client.clone(),
                kind: k.kind.into(),
                transport: transport.into(),
            }
        })
        .inc();
        for m in r.offered.iter().flatten() {
            let outcome = match (r.handshake, r.resumption) {
                (Some(HandshakeKind::Resumed), Some(acc)) if acc == *m => 0,
                (Some(HandshakeKind::Resumed), _) => continue, // another offered method won
                (Some(HandshakeKind::Full), _) => 1,
                _ => continue, // failed or incomplete: no verdict
            };
            let method = match m {
                Resumption::SessionId => 0,
                Resumption::Ticket => 1,
                Resumption::Psk => 2,
            };
            noted(&mut s.offers[method][outcome], owners, &self.offers, || {
                OfferLabels {
                    outcome: OFFER_OUTCOMES[outcome].into(),
                    method: m.as_str().into(),
                    transport: transport.into(),
                    server_name: name.to_string(),
                }
            })
            .inc();
        }
        if let Some(i) = r
            .early_data
            .and_then(|e| EARLY_OUTCOMES.iter().position(|&o| o == e))
        {
            noted(&mut s.early_data[i], owners, &self.early_data, || {
                EarlyDataLabels {
                    outcome: EARLY_OUTCOMES[i].as_str().into(),
                    transport: transport.into(),
                    server_name: name.to_string(),
                }
            })
            .inc();
        }
        if r.hrr {
            noted(&mut s.hrr, owners, &self.hrr, nt).inc();
        }
        if let Some(ms) = r.timing.handshake {
            noted(
                &mut s.handshake_seconds,
                owners,
                &self.handshake_seconds,
                || RoleTimedLabels {
                    role: k.role.into(),
                    kind: k.kind.into(),
                    family: k.family.into(),
                    version: k.version.into(),
                    transport: transport.into(),
                    server_name: name.to_string(),
                },
            )
            .observe(ms / 1e3);
            plain(
                &mut s.client_handshake_seconds,
                &self.client_handshake_seconds,
                || ClientLabels {
                    ja4_stable: k.ja4_stable.to_string(),
                    client: s.client.clone(),
                    transport: transport.into(),
                },
            )
            .observe(ms / 1e3);
        }
        if let Some(ms) = r.timing.ttfb {
            noted(&mut s.ttfb, owners, &self.ttfb_seconds, tl).observe(ms / 1e3);
        }
        if let Some(n) = r.timing.round_trips {
            noted(&mut s.round_trips, owners, &self.round_trips, || {
                KindLabels {
                    kind: k.kind.into(),
                    transport: transport.into(),
                    server_name: name.to_string(),
                }
            })
            .observe(n as f64);
        }
        if let Some(ms) = r.timing.tcp_rtt {
            noted(&mut s.tcp_rtt, owners, &self.tcp_rtt_seconds, nt).observe(ms / 1e3);
        }
        if let Some(ms) = r.timing.avoidable {
            noted(&mut s.avoidable, owners, &self.avoidable_seconds, nt).inc_by(ms / 1e3);
        }
        if let Some(ms) = r.timing.idle_before_use {
            noted(
                &mut s.idle_before_use,
                owners,
                &self.idle_before_use_seconds,
                || RoleNameTransportLabels {
                    role: k.role.into(),
                    transport: transport.into(),
                    server_name: name.to_string(),
                },
            )
            .observe(ms / 1e3);
            let i = usize::from(ms > ON_DEMAND_MS);
            noted(&mut s.first_use[i], owners, &self.first_use, || {
                FirstUseLabels {
                    role: k.role.into(),
                    server_name: name.to_string(),
                    r#use: FIRST_USES[i].into(),
                }
            })
            .inc();
        }
        if let Some(ms) = r.timing.lifetime {
            plain(&mut s.lifetime, &self.lifetime_seconds, || {
                RoleTransportLabels {
                    role: k.role.into(),
                    transport: transport.into(),
                }
            })
            .observe(ms / 1e3);
        }
        for ((slot, family), ms) in s
            .think
            .iter_mut()
            .zip([
                &self.client_hello_delay_seconds,
                &self.server_think_seconds,
                &self.client_think_seconds,
                &self.network_seconds,
            ])
            .zip([
                r.timing.client_hello_delay,
                r.timing.server_think,
                r.timing.client_think,
                r.timing.network(),
            ])
        {
            if let Some(ms) = ms {
                noted(slot, owners, family, nt).observe(ms / 1e3);
            }
        }
    }

    /// Brings the health counters up to the analyzer's cumulative stats.
    pub fn health(&mut self, s: &Stats, flows_active: usize, flow_memory: usize) {
        for c in analyzer_counters(s) {
            self.health.update(&mut self.registry, &c);
        }
        self.flows_active.set(flows_active as i64);
        self.flow_memory
            .set(i64::try_from(flow_memory).unwrap_or(i64::MAX));
    }

    /// Brings the health counters up to these cumulative counters (the
    /// capture source's and the kernel's).
    pub fn counters(&mut self, counters: &[Count]) {
        for c in counters {
            self.health.update(&mut self.registry, c);
        }
    }

    /// The exposition; then the series of names retired since the last
    /// scrape go, now that it has read their last values.
    pub fn encode(&mut self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        for name in self.names.take_retired() {
            self.owners.retire(&name);
            self.precreated.retain(|(n, _)| *n != name);
            self.series.retain(|k, _| *k.server_name != *name);
        }
        out
    }
}

/// The metrics as a record sink, shared with the thread serving them.
#[derive(Clone)]
pub struct MetricsSink(pub Arc<Mutex<Metrics>>);

impl RecordSink for MetricsSink {
    fn record(&mut self, r: &ConnectionRecord) -> Result<()> {
        self.records(std::slice::from_ref(r))
    }

    /// One lock for the batch: the server's thread waits for it.
    fn records(&mut self, records: &[ConnectionRecord]) -> Result<()> {
        if let Ok(mut m) = self.0.lock() {
            for r in records {
                m.record(r);
            }
        }
        Ok(())
    }

    fn finish(&mut self, _end: &RunEnd<'_>) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet, HashSet};

    use analyzer::counters::QuicStats;
    use analyzer::record::{Family, Transport};

    use super::health::{series, Series};
    use super::*;
    use crate::ebpf::{KernelCounter, COUNTERS as KERNEL, COUNTER_NAMES};
    use crate::source::pcap_live;

    fn pcap_counters(value: u64) -> Vec<Count> {
        pcap_live::COUNTERS
            .iter()
            .map(|&(name, help)| Count {
                group: pcap_live::GROUP,
                name,
                help,
                value,
            })
            .collect()
    }

    /// /metrics after every counter (analyzer, QUIC, kernel, pcap) counted 1.
    fn all_counted_once() -> String {
        let kernel: Vec<Count> = KERNEL.iter().map(|k| k.counter(1)).collect();
        let mut known = analyzer_counters(&Stats::default());
        known.extend(KERNEL.iter().map(|k| k.counter(0)));
        known.extend(pcap_counters(0));
        let mut m = Metrics::new(
            ServerNames::new(5, None),
            ClientFingerprints::new(5),
            &known,
        );
        m.health(&Stats::filled(1), 3, 4096);
        m.counters(&kernel);
        m.counters(&pcap_counters(1));
        m.encode()
    }

    /// Every counter of the analyzer, QUIC, the kernel and the pcap backend
    /// is in /metrics, each under a series of its own, and a metric of its
    /// own carries the counter's doc comment as help.
    #[test]
    fn every_counter_reaches_metrics() {
        let text = all_counted_once();
        let mut lines: HashSet<&str> = text.lines().collect();
        let names = [
            (Stats::GROUP, Stats::NAMES),
            (QuicStats::GROUP, QuicStats::NAMES),
            (KernelCounter::GROUP, &COUNTER_NAMES[..]),
            (pcap_live::GROUP, &["pcap_dropped", "pcap_ifdropped"][..]),
        ];
        let mut all = analyzer_counters(&Stats::filled(1));
        all.extend(KERNEL.iter().map(|k| k.counter(1)));
        all.extend(pcap_counters(1));
        let mut checked = 0;
        for (group, names) in names {
            for &name in names {
                let c = all
                    .iter()
                    .find(|c| c.group == group && c.name == name)
                    .expect("a counter of that name");
                let line = format!("{} 1", series(c).exposition());
                // Removed once found: two counters on one series fail here.
                assert!(
                    lines.remove(line.as_str()),
                    "{group}.{name}: no `{line}` of its own in /metrics:\n{text}"
                );
                if let Series::Own(metric) = series(c) {
                    let help = format!("# HELP {metric} {}", c.help);
                    assert!(text.contains(&help), "{group}.{name}: no `{help}`");
                }
                checked += 1;
            }
        }
        assert_eq!(checked, all.len(), "a counter group above is incomplete");
        assert!(lines.contains("tlsrum_flows_active 3"));
        assert!(lines.contains("tlsrum_flow_memory_bytes 4096"));
    }

    /// The names /metrics had before every counter was exported stay:
    /// dashboards (dashboards/*.json), alerts and the live tests query them.
    #[test]
    fn metric_names_from_before_stay() {
        let text = all_counted_once();
        for line in [
            "tlsrum_packets_total 1",
            "tlsrum_flows_evicted_total 1",
            "tlsrum_flows_expired_total 1",
            "tlsrum_parse_errors_total{reason=\"stream\"} 1",
            "tlsrum_parse_errors_total{reason=\"handshake\"} 1",
            "tlsrum_parse_errors_total{reason=\"packet\"} 1",
            "tlsrum_drops_total{reason=\"reassembly_gap\"} 1",
            "tlsrum_drops_total{reason=\"record_limit\"} 1",
            "tlsrum_drops_total{reason=\"pcap_dropped\"} 1",
            "tlsrum_drops_total{reason=\"pcap_ifdropped\"} 1",
            "tlsrum_drops_total{reason=\"ringbuf_full\"} 1",
            "tlsrum_drops_total{reason=\"payload_truncated\"} 1",
            "tlsrum_drops_total{reason=\"budget\"} 1",
            "tlsrum_drops_total{reason=\"parse_error\"} 1",
            "tlsrum_drops_total{reason=\"fragment\"} 1",
            "tlsrum_drops_total{reason=\"load_error\"} 1",
            "tlsrum_drops_total{reason=\"flow_map_error\"} 1",
            "tlsrum_ringbuf_events_total 1",
            "tlsrum_ringbuf_payload_bytes_total 1",
            "tlsrum_kernel_lost_bytes_total 1",
            "tlsrum_kernel_filled_bytes_total 1",
            "tlsrum_kernel_packets_total{kind=\"done\"} 1",
            "tlsrum_kernel_packets_total{kind=\"opaque\"} 1",
            "tlsrum_kernel_packets_total{kind=\"new_flows\"} 1",
            "tlsrum_kernel_packets_total{kind=\"record_limit\"} 1",
            "tlsrum_kernel_packets_total{kind=\"handshake_over\"} 1",
            "tlsrum_kernel_packets_total{kind=\"untracked\"} 1",
            "tlsrum_kernel_packets_total{kind=\"pulled\"} 1",
            "tlsrum_flows_active 3",
            "tlsrum_connection_records_total 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "no `{line}` in /metrics:\n{text}"
            );
        }
    }

    /// (NDJSON lines, /metrics) after replaying a capture through the
    /// pipeline into the metrics and NDJSON at once.
    /// docs/ja4-names.csv: the bundled captures' clients by name.
    fn bundled_client_names() -> analyzer::client_names::ClientNames {
        analyzer::client_names::ClientNames::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ja4-names.csv"),
        )
        .unwrap()
    }

    fn replay_into_metrics(capture: &str) -> (Vec<String>, String) {
        use std::io::Write;
        use std::sync::{Arc, Mutex};

        use crate::pipeline::{deliver, pump};
        use crate::sink::{ndjson::NdjsonSink, FanOut};
        use crate::source::{pcap_file::PcapFile, Status};

        /// A writer whose bytes the test reads after the sink is gone.
        #[derive(Clone, Default)]
        struct Shared(Arc<Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }

        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../pcaps")
            .join(capture);
        let mut source = PcapFile::open(&path, None).unwrap();
        let mut analyzer = analyzer::Analyzer::new(analyzer::Config::default());
        let metrics = Arc::new(Mutex::new(Metrics::new(
            ServerNames::new(5, None),
            ClientFingerprints::new(5).with_names(Some(Arc::new(bundled_client_names()))),
            &analyzer_counters(&Stats::default()),
        )));
        let ndjson = Shared::default();
        let mut sink = FanOut::default();
        sink.push(Box::new(MetricsSink(Arc::clone(&metrics))));
        sink.push(Box::new(NdjsonSink::new(ndjson.clone())));
        while pump(
            &mut source,
            std::time::Duration::ZERO,
            &mut analyzer,
            None,
            &mut sink,
        )
        .unwrap()
            == Status::Open
        {
            deliver(&mut analyzer, &mut source, &mut sink).unwrap();
        }
        analyzer.finish();
        deliver(&mut analyzer, &mut source, &mut sink).unwrap();
        sink.finish(&RunEnd {
            stats: analyzer.stats(),
            captures: 1,
            title: "",
        })
        .unwrap();
        let lines = String::from_utf8(ndjson.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        let text = metrics.lock().unwrap().encode();
        (lines, text)
    }

    /// The sum of a metric's samples over every label set.
    fn total(text: &str, metric: &str) -> f64 {
        text.lines()
            .filter(|l| l.starts_with(&format!("{metric}{{")))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    }

    /// A capture replayed through the pipeline into the metrics and NDJSON
    /// at once: both see every record.
    #[test]
    fn records_reach_metrics_and_ndjson_through_one_fan_out() {
        let (lines, text) = replay_into_metrics("openssl-nginx-tls13-0rtt.pcapng");
        let lines = lines.len();
        assert!(lines > 1);
        assert!(
            text.lines()
                .any(|l| l == format!("tlsrum_connection_records_total {lines}")),
            "{text}"
        );
        let handshakes: u64 = text
            .lines()
            .filter(|l| l.starts_with("tls_handshakes_total{"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(handshakes, lines as u64, "{text}");
        for family in [
            "tls_early_data",
            "tls_handshake_duration_seconds",
            "tls_handshake_round_trips",
            "tls_tcp_rtt_seconds",
        ] {
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "no {family} in /metrics:\n{text}"
            );
        }
    }

    /// Issue 14: each time histogram holds, as count and sum, exactly the
    /// records that carry its field (the network part: handshake less both
    /// think times, where all three exist), on TLS over TCP (two think
    /// times) and QUIC (the server's only).
    #[test]
    fn where_the_time_goes_histograms_hold_the_records() {
        for (capture, transport, splits) in [
            ("openssl-nginx-tls13-0rtt.pcapng", "tcp", true),
            ("aioquic-aioquic-quic-full.pcapng", "quic", false),
        ] {
            let (lines, text) = replay_into_metrics(capture);
            let records: Vec<serde_json::Value> = lines
                .iter()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert!(records.len() > 1, "{capture}");
            let field = |r: &serde_json::Value, f: &str| r["timing"][f].as_f64();
            let network = |r: &serde_json::Value| {
                let (hs, s, c) = (
                    field(r, "handshake")?,
                    field(r, "server_think")?,
                    field(r, "client_think")?,
                );
                Some(hs - s - c)
            };
            for (metric, f) in [
                ("tls_client_hello_delay_seconds", Some("client_hello_delay")),
                ("tls_server_think_seconds", Some("server_think")),
                ("tls_client_think_seconds", Some("client_think")),
                ("tls_handshake_network_seconds", None),
            ] {
                let values: Vec<f64> = records
                    .iter()
                    .filter_map(|r| f.map_or_else(|| network(r), |f| field(r, f)))
                    .collect();
                let want_count = values.len() as f64;
                let want_sum = values.iter().sum::<f64>() / 1e3;
                let count = total(&text, &format!("{metric}_count"));
                let sum = total(&text, &format!("{metric}_sum"));
                assert_eq!(count, want_count, "{capture}: {metric}_count\n{text}");
                assert!(
                    (sum - want_sum).abs() < 1e-9,
                    "{capture}: {metric}_sum {sum} vs the records' {want_sum}\n{text}"
                );
                let present = match metric {
                    "tls_server_think_seconds" => true,
                    _ => splits,
                };
                assert_eq!(
                    count > 0.0,
                    present,
                    "{capture}: {metric} observed?\n{text}"
                );
                if present {
                    let line = format!("# TYPE {metric} histogram");
                    assert!(text.lines().any(|l| l == line), "{capture}: no `{line}`");
                    assert!(
                        text.contains(&format!("{metric}_count{{transport=\"{transport}\",")),
                        "{capture}: {metric} by transport\n{text}"
                    );
                }
            }
        }
    }

    /// Issue 15 on real captures, TLS over TCP and QUIC: the family,
    /// version and ja4_stable labels are the records' (a fingerprint seen twice
    /// or more has its own series from its second handshake on: fewer
    /// fingerprints here than sketch counters), and every record is counted
    /// once by client.
    #[test]
    fn family_version_and_client_labels_are_the_records() {
        // Captures with a fingerprint seen more than once.
        for capture in [
            "curl-nginx-tls13-nocache-notickets.pcapng",
            "aioquic-aioquic-quic-full.pcapng",
        ] {
            let (lines, text) = replay_into_metrics(capture);
            let records: Vec<serde_json::Value> = lines
                .iter()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let group = |metric: &str, labels: &[&str]| {
                let mut m: BTreeMap<Vec<String>, f64> = BTreeMap::new();
                for (l, v) in samples(&text, metric) {
                    *m.entry(labels.iter().map(|k| l[*k].clone()).collect())
                        .or_default() += v;
                }
                m.retain(|_, v| *v != 0.0);
                m
            };
            let s = |v: &serde_json::Value| v.as_str().unwrap_or("unknown").to_string();
            let mut families: BTreeMap<Vec<String>, f64> = BTreeMap::new();
            let mut timed: BTreeMap<Vec<String>, f64> = BTreeMap::new();
            let mut seen: BTreeMap<String, f64> = BTreeMap::new();
            for r in &records {
                *families
                    .entry(vec![s(&r["family"]), s(&r["transport"])])
                    .or_default() += 1.0;
                if r["timing"]["handshake"].is_number() {
                    *timed
                        .entry(vec![s(&r["family"]), s(&r["version"])])
                        .or_default() += 1.0;
                }
                *seen
                    .entry(r["ja4_stable"].as_str().unwrap_or("none").into())
                    .or_default() += 1.0;
            }
            assert_eq!(
                group("tls_handshakes_total", &["family", "transport"]),
                families,
                "{capture}"
            );
            assert_eq!(
                group(
                    "tls_handshake_duration_seconds_count",
                    &["family", "version"]
                ),
                timed,
                "{capture}"
            );
            let mut want: BTreeMap<Vec<String>, f64> = BTreeMap::new();
            for (j, n) in seen {
                let (own, other) = match (j.as_str(), n >= 2.0) {
                    ("none", _) => (n, 0.0),
                    (_, true) => (n - 1.0, 1.0),
                    (_, false) => (0.0, n),
                };
                if own > 0.0 {
                    want.insert(vec![j.clone()], own);
                }
                if other > 0.0 {
                    *want.entry(vec!["other".into()]).or_default() += other;
                }
            }
            assert_eq!(
                group("tls_client_handshakes_total", &["ja4_stable"]),
                want,
                "{capture}"
            );
            // `client` is the fingerprint's name (docs/ja4-names.csv names
            // these captures' clients), empty for other and none.
            let names = bundled_client_names();
            for (l, _) in samples(&text, "tls_client_handshakes_total") {
                let want = names.get(&l["ja4_stable"]).unwrap_or_default();
                assert_eq!(
                    l.get("client").map(String::as_str),
                    Some(want),
                    "{capture}: {l:?}"
                );
            }
            assert!(
                samples(&text, "tls_client_handshakes_total")
                    .iter()
                    .any(|(l, _)| !l["client"].is_empty()),
                "{capture}: no client named"
            );
            let prefix = if capture.contains("quic") { 'q' } else { 't' };
            assert!(
                want.keys().any(|k| k[0].starts_with(prefix)),
                "{capture}: no client of its own: {want:?}"
            );
        }
    }

    /// A record with only what the traffic metrics read filled in.
    fn record(fp: Option<&str>, kind: HandshakeKind, family: Family, ms: f64) -> ConnectionRecord {
        use analyzer::record::{HandshakeBytes, Resumption, Timing};
        ConnectionRecord {
            ts: 0.0,
            transport: Transport::Tcp,
            client: "192.0.2.2:40000".into(),
            server: "192.0.2.1:443".into(),
            sni: Some("example.test".into()),
            version: Some("TLS1.3"),
            cipher: None,
            alpn: None,
            handshake: Some(kind),
            offered: None,
            resumption: (kind == HandshakeKind::Resumed).then_some(Resumption::Psk),
            early_data: None,
            hrr: false,
            retry: false,
            timing: Timing {
                handshake: Some(ms),
                ..Timing::default()
            },
            bytes: HandshakeBytes::default(),
            certs: None,
            failure: None,
            notes: Vec::new(),
            ja4: fp.map(Into::into),
            ja4_stable: fp.map(Into::into),
            ja4s: None,
            alpn_negotiated: None,
            family,
            role: None,
            proxied_client: None,
            capture: None,
            zeek: None,
            unsettled: None,
        }
    }

    /// The samples of one metric: (labels, value).
    fn samples(text: &str, metric: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        text.lines()
            .filter_map(|l| l.strip_prefix(metric)?.strip_prefix('{'))
            .map(|l| {
                let (labels, value) = l.rsplit_once("} ").unwrap();
                let labels = labels
                    .split(',')
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').unwrap();
                        (k.to_string(), v.trim_matches('"').to_string())
                    })
                    .collect();
                (labels, value.parse().unwrap())
            })
            .collect()
    }

    /// Issue 15: 10,000 one-off fingerprints, with heavy clients among
    /// them from the start and others that appear only halfway through the
    /// flood, and records without a fingerprint. The heavy ones get series
    /// of their own, the label has at most N + 2 values (`other`, `none`),
    /// and no handshake is lost: every series together holds every record.
    #[test]
    fn ten_thousand_fingerprints_keep_the_heavy_ones_and_lose_nothing() {
        const TOP: usize = 20;
        const FLOOD: usize = 10_000;
        let mut m = Metrics::new(ServerNames::new(5, None), ClientFingerprints::new(TOP), &[]);
        let early: Vec<String> = (0..3).map(|i| format!("t13d1516h2_early{i}")).collect();
        let late: Vec<String> = (0..3).map(|i| format!("t13d1516h2_late{i}")).collect();
        let mut records = 0u64;
        let mut timed_ms = 0.0;
        let mut feed = |m: &mut Metrics, ja4: Option<&str>, kind, family| {
            records += 1;
            let ms = (records % 97) as f64;
            timed_ms += ms;
            m.record(&record(ja4, kind, family, ms));
        };
        for i in 0..FLOOD {
            feed(
                &mut m,
                Some(&format!("t13d0000xx_oneoff{i:05}")),
                HandshakeKind::Full,
                Family::Ipv4,
            );
            if i % 20 == 0 {
                for (j, e) in early.iter().enumerate() {
                    let kind = if j == 0 {
                        HandshakeKind::Resumed
                    } else {
                        HandshakeKind::Full
                    };
                    feed(&mut m, Some(e), kind, Family::Ipv6);
                }
            }
            if i >= FLOOD / 2 && i % 10 == 0 {
                for l in &late {
                    feed(&mut m, Some(l), HandshakeKind::Full, Family::Ipv4);
                }
            }
            if i % 100 == 0 {
                feed(&mut m, None, HandshakeKind::Failed, Family::Ipv4);
            }
        }
        let text = m.encode();
        let counts = samples(&text, "tls_client_handshakes_total");
        let values: BTreeSet<&str> = counts
            .iter()
            .map(|(l, _)| l["ja4_stable"].as_str())
            .collect();
        assert!(
            values.len() <= TOP + 2,
            "{} ja4_stable values: {values:?}",
            values.len()
        );
        for heavy in early.iter().chain(&late) {
            let own: f64 = counts
                .iter()
                .filter(|(l, _)| l["ja4_stable"] == *heavy)
                .map(|(_, v)| v)
                .sum();
            assert!(own > 0.0, "{heavy} has no series of its own: {values:?}");
        }
        assert!(
            values.contains("other") && values.contains("none"),
            "{values:?}"
        );
        // Nothing lost, nothing counted twice: counter and histogram alike.
        let all: f64 = counts.iter().map(|(_, v)| v).sum();
        assert_eq!(all, records as f64);
        assert_eq!(
            total(&text, "tls_client_handshake_duration_seconds_count"),
            records as f64
        );
        let sum = total(&text, "tls_client_handshake_duration_seconds_sum");
        assert!(
            (sum - timed_ms / 1e3).abs() < 1e-6,
            "{sum} vs {}",
            timed_ms / 1e3
        );
        assert_eq!(total(&text, "tls_handshakes_total"), records as f64);
        // The first heavy client resumes every time: its own series say so.
        let resumed = counts
            .iter()
            .find(|(l, _)| l["ja4_stable"] == early[0] && l["kind"] == "resumed");
        assert!(resumed.is_some_and(|(_, v)| *v > 0.0), "{counts:?}");
        // The address family reaches the handshake counter and histograms.
        let ipv6 = samples(&text, "tls_handshake_duration_seconds_count")
            .into_iter()
            .filter(|(l, _)| l["family"] == "ipv6" && l["version"] == "TLS1.3")
            .map(|(_, v)| v)
            .sum::<f64>();
        assert_eq!(ipv6, (early.len() * FLOOD.div_ceil(20)) as f64);
    }

    /// More label combinations than the series cache holds
    /// ([`SERIES_CACHE`]): the cache is emptied and filled again, and every
    /// record is still counted once, in its own series.
    #[test]
    fn more_series_than_the_cache_holds_lose_nothing() {
        const NAMES: usize = 100;
        const CLIENTS: usize = 60;
        let mut m = Metrics::new(
            ServerNames::new(NAMES, None),
            ClientFingerprints::new(CLIENTS),
            &[],
        );
        for _ in 0..2 {
            for name in 0..NAMES {
                for fp in 0..CLIENTS {
                    let ja4 = format!("t13d1516h2_fp{fp:03}");
                    let mut r = record(Some(&ja4), HandshakeKind::Full, Family::Ipv4, 1.0);
                    r.sni = Some(format!("host{name:03}.test"));
                    m.record(&r);
                }
            }
        }
        let text = m.encode();
        let by_name = samples(&text, "tls_handshakes_total");
        let by_client = samples(&text, "tls_client_handshakes_total");
        // Every name and fingerprint has a value of its own (a
        // fingerprint's first record, before its admission, is `other`):
        // NAMES x CLIENTS series, more than the cache holds, so it was
        // emptied along the way.
        let own = |l: &BTreeMap<String, String>| l["ja4_stable"] != "other";
        assert_eq!(by_name.len(), NAMES, "{by_name:?}");
        assert_eq!(by_client.iter().filter(|(l, _)| own(l)).count(), CLIENTS);
        assert!(NAMES * CLIENTS > SERIES_CACHE && m.series.len() < SERIES_CACHE);
        for (labels, v) in &by_name {
            assert_eq!(*v, (2 * CLIENTS) as f64, "{labels:?}");
        }
        for (labels, v) in by_client.iter().filter(|(l, _)| own(l)) {
            assert_eq!(*v, (2 * NAMES - 1) as f64, "{labels:?}");
        }
        let all: f64 = by_client.iter().map(|(_, v)| v).sum();
        assert_eq!(all, (2 * NAMES * CLIENTS) as f64);
        // The cache keeps the series it holds: a record of one of them
        // finds it.
        let held = m.series.len();
        let mut r = record(
            Some("t13d1516h2_fp000"),
            HandshakeKind::Full,
            Family::Ipv4,
            1.0,
        );
        r.sni = Some(format!("host{:03}.test", NAMES - 1));
        m.record(&r);
        assert!(
            held > 0 && m.series.len() == held,
            "{held} then {}",
            m.series.len()
        );
    }

    /// Issue 16 on synthetic records: the role label (records without one
    /// are `unknown`) on the handshake counter and duration histogram; idle
    /// before use by role, server name and transport, split at 10 ms into
    /// on_demand and pooled (10 ms itself on demand); lifetime only from
    /// records that carry one. Outbound handshakes per origin are the
    /// outbound counter by server_name.
    #[test]
    fn roles_idle_before_use_and_lifetime() {
        use analyzer::record::Role;
        let mut m = Metrics::new(ServerNames::new(5, None), ClientFingerprints::new(5), &[]);
        /// (role, sni, idle before use ms, lifetime ms)
        type Case = (Option<Role>, &'static str, Option<f64>, Option<f64>);
        let cases: [Case; 8] = [
            (Some(Role::Inbound), "front.test", Some(0.4), Some(250.0)),
            (Some(Role::Inbound), "front.test", Some(10.0), None),
            (
                Some(Role::Outbound),
                "origin-a.test",
                Some(10.001),
                Some(61_000.0),
            ),
            (Some(Role::Outbound), "origin-a.test", Some(120_000.0), None),
            (Some(Role::Outbound), "origin-b.test", Some(2.0), Some(40.0)),
            (Some(Role::Outbound), "origin-b.test", None, None),
            (Some(Role::Transit), "far.test", Some(30.0), Some(1.0)),
            (None, "front.test", None, Some(5.0)),
        ];
        for (role, sni, idle, lifetime) in cases {
            let mut r = record(Some("t13d_x"), HandshakeKind::Full, Family::Ipv4, 20.0);
            r.role = role;
            r.sni = Some(sni.into());
            r.timing.idle_before_use = idle;
            r.timing.lifetime = lifetime;
            m.record(&r);
        }
        let text = m.encode();
        let by = |metric: &str, keys: &[&str]| {
            let mut out: BTreeMap<String, f64> = BTreeMap::new();
            for (l, v) in samples(&text, metric) {
                let k: Vec<&str> = keys.iter().map(|k| l[*k].as_str()).collect();
                *out.entry(k.join("/")).or_default() += v;
            }
            out.retain(|_, v| *v != 0.0);
            out
        };
        let want = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        assert_eq!(
            by("tls_handshakes_total", &["role"]),
            want(&[
                ("inbound", 2.0),
                ("outbound", 4.0),
                ("transit", 1.0),
                ("unknown", 1.0)
            ]),
            "{text}"
        );
        assert_eq!(
            by("tls_handshake_duration_seconds_count", &["role"]),
            want(&[
                ("inbound", 2.0),
                ("outbound", 4.0),
                ("transit", 1.0),
                ("unknown", 1.0)
            ])
        );
        // Outbound handshakes per origin: what rate() by server_name reads.
        let outbound: BTreeMap<String, f64> = samples(&text, "tls_handshakes_total")
            .into_iter()
            .filter(|(l, _)| l["role"] == "outbound")
            .map(|(l, v)| (l["server_name"].clone(), v))
            .collect();
        assert_eq!(
            outbound,
            want(&[("origin-a.test", 2.0), ("origin-b.test", 2.0)])
        );
        assert_eq!(
            by(
                "tls_connections_first_use_total",
                &["role", "server_name", "use"]
            ),
            want(&[
                ("inbound/front.test/on_demand", 2.0),
                ("outbound/origin-a.test/pooled", 2.0),
                ("outbound/origin-b.test/on_demand", 1.0),
                ("transit/far.test/pooled", 1.0),
            ]),
            "{text}"
        );
        assert_eq!(
            by(
                "tls_idle_before_use_seconds_count",
                &["role", "server_name", "transport"]
            ),
            want(&[
                ("inbound/front.test/tcp", 2.0),
                ("outbound/origin-a.test/tcp", 2.0),
                ("outbound/origin-b.test/tcp", 1.0),
                ("transit/far.test/tcp", 1.0),
            ])
        );
        let sum = by("tls_idle_before_use_seconds_sum", &["role"]);
        assert!(
            (sum["outbound"] - (10.001 + 120_000.0 + 2.0) / 1e3).abs() < 1e-9,
            "{sum:?}"
        );
        // The buckets resolve both ends: sub-millisecond and minutes.
        let bucket = |role: &str, le: &str| {
            samples(&text, "tls_idle_before_use_seconds_bucket")
                .into_iter()
                .filter(|(l, _)| l["role"] == role && l["le"] == le)
                .map(|(_, v)| v)
                .sum::<f64>()
        };
        assert_eq!(bucket("inbound", "0.001"), 1.0);
        assert_eq!(bucket("inbound", "0.01"), 2.0);
        assert_eq!(bucket("outbound", "0.01"), 1.0);
        assert_eq!(bucket("outbound", "60.0"), 2.0);
        assert_eq!(bucket("outbound", "300.0"), 3.0);
        assert_eq!(
            by(
                "tls_connection_lifetime_seconds_count",
                &["role", "transport"]
            ),
            want(&[
                ("inbound/tcp", 1.0),
                ("outbound/tcp", 2.0),
                ("transit/tcp", 1.0),
                ("unknown/tcp", 1.0),
            ])
        );
        let life = by("tls_connection_lifetime_seconds_sum", &["role"]);
        assert!((life["outbound"] - 61.04).abs() < 1e-9, "{life:?}");
        assert!(
            !text.contains("tls_connection_lifetime_seconds_count{role=\"inbound\",transport=\"tcp\",server_name"),
            "lifetime carries no server_name"
        );
    }

    /// Issue 17: a name displaced from the top N keeps its series,
    /// unchanged, for one more scrape (which reads their last values), then
    /// they go, zero series included; the name's later handshakes count
    /// under `other`, and the displacing name has its own.
    #[test]
    fn a_displaced_name_is_scraped_once_more_then_removed() {
        let mut m = Metrics::new(ServerNames::new(1, None), ClientFingerprints::new(5), &[]);
        let rec = |sni: &str| {
            let mut r = record(Some("t13d_x"), HandshakeKind::Full, Family::Ipv4, 5.0);
            r.sni = Some(sni.into());
            r
        };
        m.record(&rec("light.test"));
        for _ in 0..10 {
            m.record(&rec("heavy.test"));
        }
        let by_name = |text: &str| -> BTreeMap<String, f64> {
            samples(text, "tls_handshakes_total")
                .into_iter()
                .map(|(l, v)| (l["server_name"].clone(), v))
                .collect()
        };
        let first = m.encode();
        assert_eq!(
            by_name(&first),
            [("light.test", 1.0), ("other", 1.0), ("heavy.test", 9.0)]
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            "{first}"
        );
        assert!(first.contains(
            r#"tls_early_data_total{outcome="rejected",transport="tcp",server_name="light.test"} 0"#
        ));
        m.record(&rec("light.test"));
        let second = m.encode();
        assert!(!second.contains("light.test"), "{second}");
        assert_eq!(
            by_name(&second),
            [("other", 2.0), ("heavy.test", 9.0)]
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect()
        );
    }

    /// Counters are cumulative: a series follows the value, and a counter
    /// that starts again from zero (a re-attached capture) only adds.
    #[test]
    fn series_follow_cumulative_counters() {
        let mut m = Metrics::new(ServerNames::new(5, None), ClientFingerprints::new(5), &[]);
        let at = |v: u64| KERNEL[0].counter(v);
        m.counters(&[at(5)]);
        m.counters(&[at(7)]);
        m.counters(&[at(2)]);
        m.counters(&[at(3)]);
        assert!(
            m.encode()
                .lines()
                .any(|l| l == "tlsrum_ringbuf_events_total 8"),
            "{}",
            m.encode()
        );
    }
}
