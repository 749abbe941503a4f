//! The agent's health in /metrics: every counter of the analyzer, QUIC,
//! the capture backend and the kernel, with its doc comment as help text.
//! Counters come in cumulative; each series is brought up to its
//! counter's value.

use std::collections::HashMap;

use analyzer::counters::Counter;
use prometheus_client::metrics::counter::Counter as PromCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::Shown;

/// A family that several counters share, told apart by one label; these
/// existed before every counter was exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Labelled {
    Drops,
    ParseErrors,
    KernelPackets,
}

impl Labelled {
    const ALL: [Labelled; 3] = [
        Labelled::Drops,
        Labelled::ParseErrors,
        Labelled::KernelPackets,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Labelled::Drops => "tlsrum_drops",
            Labelled::ParseErrors => "tlsrum_parse_errors",
            Labelled::KernelPackets => "tlsrum_kernel_packets",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Labelled::Drops | Labelled::ParseErrors => "reason",
            Labelled::KernelPackets => "kind",
        }
    }

    /// The start of the help text; each member's help follows.
    fn intro(self) -> &'static str {
        match self {
            Labelled::Drops => "Data not delivered to the analyzer, by reason",
            Labelled::ParseErrors => "Parse errors by kind",
            Labelled::KernelPackets => "Kernel-side bookkeeping by kind",
        }
    }
}

/// Where one counter is exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Series {
    /// A metric of its own (the name without `_total`, which the encoder adds).
    Own(String),
    /// A label value of a shared family.
    In(Labelled, &'static str),
}

impl Series {
    /// The series as the text exposition names it (without its value).
    pub fn exposition(&self) -> String {
        match self {
            Series::Own(name) => format!("{name}_total"),
            Series::In(f, value) => format!("{}_total{{{}=\"{value}\"}}", f.name(), f.label()),
        }
    }
}

/// Where a counter is exported. The names /metrics had before every
/// counter reached it are kept, so no counter appears under two names:
/// dashboards, alerts and tests query them (this match is the one list
/// kept by hand, and only for them). Every other counter gets a metric of
/// its own, `tlsrum_<group>_<name>` (`tlsrum_analyzer_capture_loss_bytes`,
/// `tlsrum_quic_retry`): one metric per counter rather than one family
/// with a `counter` label, because HELP is per metric, so each keeps its
/// doc comment, and because the counters count different units (packets,
/// bytes, connections) that a sum over such a label would mix.
pub fn series(c: &Counter) -> Series {
    let own = |name: &str| Series::Own(name.to_string());
    match (c.group, c.name) {
        ("analyzer", "packets") => own("tlsrum_packets"),
        ("analyzer", "flows_evicted") => own("tlsrum_flows_evicted"),
        ("analyzer", "flows_expired") => own("tlsrum_flows_expired"),
        ("analyzer", "stream_errors") => Series::In(Labelled::ParseErrors, "stream"),
        ("analyzer", "handshake_parse_errors") => Series::In(Labelled::ParseErrors, "handshake"),
        ("analyzer", "malformed_packets") => Series::In(Labelled::ParseErrors, "packet"),
        ("analyzer", "reassembly_gaps") => Series::In(Labelled::Drops, "reassembly_gap"),
        ("analyzer", "record_limit_hits") => Series::In(Labelled::Drops, "record_limit"),
        ("kernel", "events_sent") => own("tlsrum_ringbuf_events"),
        ("kernel", "bytes_sent") => own("tlsrum_ringbuf_payload_bytes"),
        // Renamed in issue 17 (unit at the end): tlsrum_kernel_bytes_lost_total.
        ("kernel", "bytes_lost") => own("tlsrum_kernel_lost_bytes"),
        ("kernel", "filled") => own("tlsrum_kernel_filled_bytes"),
        (
            "kernel",
            "done" | "opaque" | "new_flows" | "closed" | "record_limit" | "handshake_over"
            | "untracked" | "pulled",
        ) => Series::In(Labelled::KernelPackets, c.name),
        (
            "kernel",
            "ringbuf_full" | "payload_truncated" | "budget" | "parse_error" | "fragment"
            | "load_error" | "flow_map_error",
        )
        | ("pcap", _) => Series::In(Labelled::Drops, c.name),
        (group, name) => Series::Own(format!("tlsrum_{group}_{name}")),
    }
}

type Labels = [(&'static str, &'static str); 1];

/// A counter's series and the value it was last brought to.
struct Slot {
    counter: PromCounter,
    last: u64,
}

/// The health counters of one registry.
pub struct Health {
    /// In the order of [`Labelled::ALL`].
    families: Vec<Family<Labels, PromCounter>>,
    slots: HashMap<(&'static str, &'static str), Slot>,
}

impl Health {
    /// Registers the shared families (their help lists their members'
    /// help texts) and a series for each of `known`, zero until counted.
    pub fn new(registry: &mut Registry, known: &[Counter]) -> Self {
        let mut families = Vec::new();
        for f in Labelled::ALL {
            let members: Vec<String> = known
                .iter()
                .filter_map(|c| match series(c) {
                    Series::In(g, value) if g == f => {
                        Some(format!("{value} = {}", c.help.trim_end_matches('.')))
                    }
                    _ => None,
                })
                .collect();
            let help = if members.is_empty() {
                f.intro().to_string()
            } else {
                format!("{}: {}", f.intro(), members.join("; "))
            };
            let family = Family::<Labels, PromCounter>::default();
            registry.register(f.name(), help, Shown(family.clone()));
            families.push(family);
        }
        let mut health = Health {
            families,
            slots: HashMap::new(),
        };
        for c in known {
            health.slot(registry, c);
        }
        health
    }

    /// The counter's series, registered on first sight.
    fn slot(&mut self, registry: &mut Registry, c: &Counter) -> &mut Slot {
        let families = &self.families;
        self.slots.entry((c.group, c.name)).or_insert_with(|| {
            let counter = match series(c) {
                Series::Own(name) => {
                    let counter = PromCounter::default();
                    registry.register(name, c.help.trim_end_matches('.'), Shown(counter.clone()));
                    counter
                }
                Series::In(f, value) => {
                    let i = Labelled::ALL
                        .iter()
                        .position(|x| *x == f)
                        .expect("every family is registered");
                    (*families[i].get_or_create(&[(f.label(), value)])).clone()
                }
            };
            Slot { counter, last: 0 }
        })
    }

    /// Brings the counter's series up to its (cumulative) value.
    pub fn update(&mut self, registry: &mut Registry, c: &Counter) {
        let slot = self.slot(registry, c);
        slot.counter.inc_by(c.value.saturating_sub(slot.last));
        slot.last = c.value;
    }
}
