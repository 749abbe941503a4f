//! Prometheus metrics (prometheus-client): traffic facts under `tls_`, the
//! agent's own health under `tlsrum_`. Label values are enums, except
//! `server_name`, which is bounded (first N names seen, the rest `other`)
//! and optionally replaced by a salted hash.

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;

use analyzer::record::{ConnectionRecord, HandshakeKind, Transport};
use analyzer::Stats;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandshakeLabels {
    pub kind: String,
    pub method: String,
    pub version: String,
    pub transport: String,
    pub server_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OfferLabels {
    pub outcome: String,
    pub method: String,
    pub transport: String,
    pub server_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EarlyDataLabels {
    pub outcome: String,
    pub transport: String,
    pub server_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
    pub transport: String,
    pub server_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameTransportLabels {
    pub transport: String,
    pub server_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindOnlyLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

/// Bounds and optionally hashes the `server_name` label.
pub struct ServerNames {
    top: usize,
    salt: Option<String>,
    admitted: HashSet<String>,
}

impl ServerNames {
    pub fn new(top: usize, salt: Option<String>) -> Self {
        ServerNames { top, salt, admitted: HashSet::new() }
    }

    /// The label value for a record's server name.
    pub fn label(&mut self, sni: Option<&str>) -> String {
        let name = match sni {
            None => return "none".into(),
            Some(n) => match &self.salt {
                Some(salt) => {
                    let digest = Sha256::new().chain_update(salt.as_bytes()).chain_update(n.as_bytes()).finalize();
                    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
                }
                None => n.to_string(),
            },
        };
        if self.admitted.contains(&name) {
            return name;
        }
        if self.admitted.len() < self.top {
            self.admitted.insert(name.clone());
            return name;
        }
        "other".into()
    }
}

fn seconds_buckets() -> impl Iterator<Item = f64> {
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0].into_iter()
}

pub struct Metrics {
    pub registry: Registry,
    names: ServerNames,
    handshakes: Family<HandshakeLabels, Counter>,
    offers: Family<OfferLabels, Counter>,
    early_data: Family<EarlyDataLabels, Counter>,
    hrr: Family<NameTransportLabels, Counter>,
    handshake_seconds: Family<KindLabels, Histogram>,
    ttfb_seconds: Family<KindLabels, Histogram>,
    tcp_rtt_seconds: Family<NameTransportLabels, Histogram>,
    round_trips: Family<KindLabels, Histogram>,
    avoidable_seconds: Family<NameTransportLabels, Counter<f64, AtomicU64>>,
    // agent health
    packets: Counter,
    records: Counter,
    events: Counter,
    ringbuf_bytes: Counter,
    kernel_packets: Family<KindOnlyLabels, Counter>,
    kernel_bytes_lost: Counter,
    kernel_filled_bytes: Counter,
    drops: Family<ReasonLabels, Counter>,
    flows_active: Gauge,
    flows_evicted: Counter,
    flows_expired: Counter,
    parse_errors: Family<ReasonLabels, Counter>,
    last: Stats,
    last_kernel: Vec<(String, u64)>,
}

impl Metrics {
    pub fn new(names: ServerNames) -> Self {
        let mut registry = Registry::default();
        let handshakes = Family::<HandshakeLabels, Counter>::default();
        registry.register("tls_handshakes", "TLS handshakes by kind (full, resumed, failed, incomplete), resumption method, version and transport", handshakes.clone());
        let offers = Family::<OfferLabels, Counter>::default();
        registry.register("tls_resumption_offers", "Resumption offers by method and outcome (accepted, declined)", offers.clone());
        let early_data = Family::<EarlyDataLabels, Counter>::default();
        registry.register("tls_early_data", "0-RTT offers by outcome (attempted, accepted, rejected)", early_data.clone());
        let hrr = Family::<NameTransportLabels, Counter>::default();
        registry.register("tls_hello_retry_requests", "Handshakes with a HelloRetryRequest", hrr.clone());
        let handshake_seconds = Family::<KindLabels, Histogram>::new_with_constructor(|| Histogram::new(seconds_buckets()));
        registry.register("tls_handshake_duration_seconds", "ClientHello to the client's first application data, by kind", handshake_seconds.clone());
        let ttfb_seconds = Family::<KindLabels, Histogram>::new_with_constructor(|| Histogram::new(seconds_buckets()));
        registry.register("tls_time_to_first_byte_seconds", "ClientHello to the server's first application data, by kind", ttfb_seconds.clone());
        let tcp_rtt_seconds = Family::<NameTransportLabels, Histogram>::new_with_constructor(|| Histogram::new(seconds_buckets()));
        registry.register("tls_tcp_rtt_seconds", "TCP round-trip time from the three-way handshake", tcp_rtt_seconds.clone());
        let round_trips = Family::<KindLabels, Histogram>::new_with_constructor(|| Histogram::new([0.0, 1.0, 2.0, 3.0, 4.0]));
        registry.register("tls_handshake_round_trips", "Handshake round trips before the client could send data", round_trips.clone());
        let avoidable_seconds = Family::<NameTransportLabels, Counter<f64, AtomicU64>>::default();
        registry.register("tls_avoidable_handshake_seconds", "Time full handshakes cost beyond a resumed one, where the client offered resumption", avoidable_seconds.clone());
        let packets = Counter::default();
        registry.register("tlsrum_packets", "Packets (or kernel events) analysed", packets.clone());
        let records = Counter::default();
        registry.register("tlsrum_connection_records", "Connection records produced", records.clone());
        let events = Counter::default();
        registry.register("tlsrum_ringbuf_events", "Events received from the kernel ring buffer", events.clone());
        let ringbuf_bytes = Counter::default();
        registry.register("tlsrum_ringbuf_payload_bytes", "Payload bytes the kernel copied to user space", ringbuf_bytes.clone());
        let kernel_packets = Family::<KindOnlyLabels, Counter>::default();
        registry.register(
            "tlsrum_kernel_packets",
            "Kernel-side bookkeeping by kind: done (packets of finished flows kept in the kernel), opaque (segments holding only application-data bodies kept in the kernel), new_flows, handshake_over (flows the kernel stopped itself once their handshake and first data each way had passed), record_limit (flows stopped after the analyzer's record limit), untracked (flow directions whose TLS record tracking was given up: not TLS, reordering), pulled (non-linear packets pulled)",
            kernel_packets.clone(),
        );
        let kernel_bytes_lost = Counter::default();
        registry.register("tlsrum_kernel_bytes_lost", "Payload bytes the kernel could not copy to user space (ring buffer full, chunk limit)", kernel_bytes_lost.clone());
        let kernel_filled_bytes = Counter::default();
        registry.register("tlsrum_kernel_filled_bytes", "Application-data record bodies the kernel kept, which the analyzer received as zeros (their headers went to user space)", kernel_filled_bytes.clone());
        let drops = Family::<ReasonLabels, Counter>::default();
        registry.register("tlsrum_drops", "Data not delivered to the analyzer, by reason", drops.clone());
        let flows_active = Gauge::default();
        registry.register("tlsrum_flows_active", "Flows tracked now", flows_active.clone());
        let flows_evicted = Counter::default();
        registry.register("tlsrum_flows_evicted", "Flows evicted from the full flow table", flows_evicted.clone());
        let flows_expired = Counter::default();
        registry.register("tlsrum_flows_expired", "Flows finished by the idle timeout", flows_expired.clone());
        let parse_errors = Family::<ReasonLabels, Counter>::default();
        registry.register("tlsrum_parse_errors", "Parse errors by kind", parse_errors.clone());
        Metrics {
            registry,
            names,
            handshakes,
            offers,
            early_data,
            hrr,
            handshake_seconds,
            ttfb_seconds,
            tcp_rtt_seconds,
            round_trips,
            avoidable_seconds,
            packets,
            records,
            events,
            ringbuf_bytes,
            kernel_packets,
            kernel_bytes_lost,
            kernel_filled_bytes,
            drops,
            flows_active,
            flows_evicted,
            flows_expired,
            parse_errors,
            last: Stats::default(),
            last_kernel: Vec::new(),
        }
    }

    pub fn record(&mut self, r: &ConnectionRecord) {
        let server_name = self.names.label(r.sni.as_deref());
        let transport = match r.transport {
            Transport::Tcp => "tcp",
            Transport::Quic => "quic",
        }
        .to_string();
        let kind = r.handshake.as_str().to_string();
        self.records.inc();
        self.handshakes
            .get_or_create(&HandshakeLabels {
                kind: kind.clone(),
                method: r.resumption.map_or("none", |m| m.as_str()).into(),
                version: r.version.unwrap_or("unknown").into(),
                transport: transport.clone(),
                server_name: server_name.clone(),
            })
            .inc();
        for m in &r.offered {
            let outcome = match (r.handshake, r.resumption) {
                (HandshakeKind::Resumed, Some(acc)) if acc == *m => "accepted",
                (HandshakeKind::Resumed, _) => continue, // another offered method won
                (HandshakeKind::Full, _) => "declined",
                _ => continue, // failed or incomplete: no verdict
            };
            self.offers
                .get_or_create(&OfferLabels {
                    outcome: outcome.into(),
                    method: m.as_str().into(),
                    transport: transport.clone(),
                    server_name: server_name.clone(),
                })
                .inc();
        }
        if r.early_data != analyzer::record::EarlyData::None {
            self.early_data
                .get_or_create(&EarlyDataLabels {
                    outcome: r.early_data.as_str().into(),
                    transport: transport.clone(),
                    server_name: server_name.clone(),
                })
                .inc();
        }
        let nt = NameTransportLabels { transport: transport.clone(), server_name: server_name.clone() };
        if r.hrr {
            self.hrr.get_or_create(&nt).inc();
        }
        let kl = KindLabels { kind, transport: transport.clone(), server_name: server_name.clone() };
        if let Some(ms) = r.timing.handshake {
            self.handshake_seconds.get_or_create(&kl).observe(ms / 1e3);
        }
        if let Some(ms) = r.timing.ttfb {
            self.ttfb_seconds.get_or_create(&kl).observe(ms / 1e3);
        }
        if let Some(n) = r.timing.round_trips {
            self.round_trips.get_or_create(&kl).observe(n as f64);
        }
        if let Some(ms) = r.timing.tcp_rtt {
            self.tcp_rtt_seconds.get_or_create(&nt).observe(ms / 1e3);
        }
        if let Some(ms) = r.timing.avoidable {
            self.avoidable_seconds.get_or_create(&nt).inc_by(ms / 1e3);
        }
    }

    /// Brings the health counters up to the analyzer's cumulative stats.
    pub fn health(&mut self, s: &Stats, flows_active: usize) {
        let d = |now: u64, then: u64| now.saturating_sub(then);
        self.packets.inc_by(d(s.packets, self.last.packets));
        self.flows_evicted.inc_by(d(s.flows_evicted, self.last.flows_evicted));
        self.flows_expired.inc_by(d(s.flows_expired, self.last.flows_expired));
        let reason = |r: &str| ReasonLabels { reason: r.into() };
        self.parse_errors.get_or_create(&reason("stream")).inc_by(d(s.stream_errors, self.last.stream_errors));
        self.parse_errors.get_or_create(&reason("handshake")).inc_by(d(s.handshake_parse_errors, self.last.handshake_parse_errors));
        self.parse_errors.get_or_create(&reason("packet")).inc_by(d(s.malformed_packets, self.last.malformed_packets));
        self.drops.get_or_create(&reason("reassembly_gap")).inc_by(d(s.reassembly_gaps, self.last.reassembly_gaps));
        self.drops.get_or_create(&reason("record_limit")).inc_by(d(s.record_limit_hits, self.last.record_limit_hits));
        self.flows_active.set(flows_active as i64);
        self.last = s.clone();
    }

    /// Kernel-side counters (cumulative, by name): events sent and drops by reason.
    pub fn kernel(&mut self, counters: &[(String, u64)]) {
        for (name, value) in counters {
            let before = self.last_kernel.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v);
            let delta = value.saturating_sub(before);
            match name.as_str() {
                "events_sent" => self.events.inc_by(delta),
                "bytes_sent" => self.ringbuf_bytes.inc_by(delta),
                "bytes_lost" => self.kernel_bytes_lost.inc_by(delta),
                "filled" => self.kernel_filled_bytes.inc_by(delta),
                "done" | "opaque" | "new_flows" | "record_limit" | "handshake_over" | "untracked" | "pulled" => {
                    self.kernel_packets.get_or_create(&KindOnlyLabels { kind: name.clone() }).inc_by(delta)
                }
                // ringbuf_full, payload_truncated, budget, parse_error, fragment, load_error, flow_map_error
                _ => self.drops.get_or_create(&ReasonLabels { reason: name.clone() }).inc_by(delta),
            };
        }
        self.last_kernel = counters.to_vec();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_bounded_and_hashable() {
        let mut n = ServerNames::new(2, None);
        assert_eq!(n.label(Some("a")), "a");
        assert_eq!(n.label(Some("b")), "b");
        assert_eq!(n.label(Some("c")), "other");
        assert_eq!(n.label(Some("a")), "a");
        assert_eq!(n.label(None), "none");
        let mut h = ServerNames::new(5, Some("pepper".into()));
        let x = h.label(Some("example.com"));
        assert_eq!(x.len(), 16);
        assert_ne!(x, ServerNames::new(5, Some("salt".into())).label(Some("example.com")));
    }
}
