//! Capture sources: where packets come from. Each source hands the
//! analyzer timestamped frames (a pcap file, libpcap live) or packets with
//! the 5-tuple already decoded (eBPF); `replay` and `live` drive the
//! analyzer through [`Source`] alone (see `pipeline`). A new
//! source (uprobes) is one new file here implementing it; Zeek's ssl.log
//! ([`zeek_log`]) holds records, not packets, and goes to the sinks directly.

mod capture_format;
pub mod ebpf;
pub mod pcap_file;
pub mod pcap_live;
pub mod zeek_log;

use std::time::Duration;

use analyzer::counters::Counter;
use analyzer::wire::{LinkType, Packet};
use analyzer::{Analyzer, Endpoint};
use anyhow::Result;

/// One captured unit: a frame (pcap) or a decoded packet (eBPF).
pub enum Captured<'a> {
    Frame {
        ts: f64,
        link: LinkType,
        data: &'a [u8],
    },
    Packet {
        ts: f64,
        packet: Packet<'a>,
    },
}

impl Captured<'_> {
    /// Hands it to the analyzer: the one place that knows what each kind
    /// of captured unit is to the analyzer.
    pub fn analyze(&self, analyzer: &mut Analyzer) {
        match self {
            Captured::Frame { ts, link, data } => analyzer.push_frame(*ts, *link, data),
            Captured::Packet { ts, packet } => analyzer.push_packet(*ts, packet),
        }
    }
}

/// Whether a source can produce more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// More may come (live sources always say this).
    Open,
    /// Everything was handed over (the end of a capture file).
    Ended,
}

/// A capture source.
pub trait Source {
    /// Waits up to `timeout` and hands over what arrived. Sources that read
    /// ahead of time (files) hand over a bounded batch without waiting.
    fn poll(&mut self, timeout: Duration, f: &mut dyn FnMut(Captured<'_>)) -> Result<Status>;
    /// The analyzer is done with these flows: stop sending them if possible.
    fn finished(&mut self, _flows: &[(Endpoint, Endpoint)]) {}
    /// Cumulative source-side counters (kernel events and drops by reason,
    /// capture buffer drops), each with its help text, every one of them
    /// on every call (zero rather than absent).
    fn counters(&mut self) -> Vec<Counter> {
        Vec::new()
    }
    /// Link types of what it captures, for --write-pcap.
    fn link_types(&self) -> Vec<LinkType>;
    /// Re-attach interfaces that went away and came back.
    fn check_interfaces(&mut self) -> Result<()> {
        Ok(())
    }
    /// Interfaces not captured now (gone, to be re-attached when they
    /// are back): `/healthz` reports them.
    fn missing_interfaces(&self) -> Vec<String> {
        Vec::new()
    }
    /// Detach from the kernel cleanly.
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}
