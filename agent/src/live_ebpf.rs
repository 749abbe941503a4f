//! The eBPF backend as a live packet source: kernel events become analyzer
//! packets; flows the analyzer has finished are marked done in the kernel
//! so nothing more of them leaves it; interfaces that vanish and come back
//! are re-attached.

use std::time::{Duration, Instant};

use analyzer::wire::LinkType;
use analyzer::Endpoint;
use anyhow::Result;

use crate::ebpf::{EbpfCapture, EbpfOptions, FlowTuple};
use crate::live::{Captured, LiveArgs, Source};

pub struct EbpfSource {
    opts: EbpfOptions,
    cap: Option<EbpfCapture>,
    /// ifindex of each interface when attached, to notice it being recreated.
    ifindexes: Vec<Option<u32>>,
    last_check: Instant,
    /// Counters of captures torn down by interface changes, kept cumulative.
    carried: Vec<(String, u64)>,
}

fn ifindex(name: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex")).ok()?.trim().parse().ok()
}

pub fn open(args: &LiveArgs) -> Result<Box<dyn Source>> {
    let opts = EbpfOptions {
        ifaces: args.ifaces.clone(),
        ports: args.ports.clone(),
        all_ports: args.all_ports,
        quic: true,
        max_payload_per_dir: args.max_payload_per_flow,
        ..EbpfOptions::default()
    };
    let cap = EbpfCapture::attach(&opts)?;
    let ifindexes = opts.ifaces.iter().map(|i| ifindex(i)).collect();
    Ok(Box::new(EbpfSource { opts, cap: Some(cap), ifindexes, last_check: Instant::now(), carried: Vec::new() }))
}

/// Microsecond timestamps, as a pcapng written by `--write-pcap` holds
/// them, so live and replayed records are identical.
fn micros(ts: f64) -> f64 {
    (ts * 1e6).round() / 1e6
}

impl Source for EbpfSource {
    fn poll(&mut self, timeout: Duration, f: &mut dyn FnMut(Captured<'_>)) -> Result<()> {
        let Some(cap) = self.cap.as_mut() else {
            std::thread::sleep(timeout);
            return Ok(());
        };
        cap.poll(timeout, &mut |ev| {
            let ts = micros(ev.ts);
            for packet in ev.datagrams() {
                f(Captured::Packet { ts, packet });
            }
        })?;
        Ok(())
    }

    fn finished(&mut self, flows: &[(Endpoint, Endpoint)]) {
        let Some(cap) = self.cap.as_mut() else { return };
        // The analyzer's flows carry no protocol: mark the one the kernel
        // tracks (TCP first, the common case). Marking both created an entry
        // for the other protocol each time, which halved the LRU map's room
        // and doubled the system calls. A flow the map already evicted is
        // recreated as a done TCP flow, as mark_done does.
        for &(a, b) in flows {
            let t = |proto| FlowTuple { src: a.0, dst: b.0, src_port: a.1, dst_port: b.1, proto };
            if matches!(cap.mark_done_if_tracked(t(6)), Ok(true)) || matches!(cap.mark_done_if_tracked(t(17)), Ok(true)) {
                continue;
            }
            let _ = cap.mark_done(t(6));
        }
    }

    fn counters(&mut self) -> Vec<(String, u64)> {
        match self.cap.as_ref() {
            Some(cap) => self.counters_of(cap),
            None => self.carried.clone(),
        }
    }

    fn link_types(&self) -> Vec<LinkType> {
        vec![LinkType::RawIp]
    }

    /// A deleted and recreated interface has a new ifindex and lost our
    /// hooks: detach everything and attach again once all interfaces exist.
    fn check_interfaces(&mut self) -> Result<()> {
        if self.last_check.elapsed() < Duration::from_secs(1) {
            return Ok(());
        }
        self.last_check = Instant::now();
        let now: Vec<Option<u32>> = self.opts.ifaces.iter().map(|i| ifindex(i)).collect();
        if now == self.ifindexes && self.cap.is_some() {
            return Ok(());
        }
        if let Some(cap) = self.cap.take() {
            self.carried = self.counters_of(&cap);
            eprintln!("tlsrum: an interface of {} changed; re-attaching when it is back", self.opts.ifaces.join(", "));
            let _ = cap.detach();
        }
        if now.iter().all(|i| i.is_some()) {
            let cap = EbpfCapture::attach(&self.opts)?;
            eprintln!("tlsrum: attached again to {}", self.opts.ifaces.join(", "));
            self.cap = Some(cap);
            self.ifindexes = now;
        }
        Ok(())
    }

    fn close(mut self: Box<Self>) -> Result<()> {
        match self.cap.take() {
            Some(cap) => cap.detach(),
            None => Ok(()),
        }
    }
}

impl EbpfSource {
    fn counters_of(&self, cap: &EbpfCapture) -> Vec<(String, u64)> {
        let mut out = self.carried.clone();
        if let Ok(now) = cap.counters() {
            for (name, v) in now {
                match out.iter_mut().find(|(n, _)| n == name) {
                    Some((_, total)) => *total += v,
                    None => out.push((name.to_string(), v)),
                }
            }
        }
        out
    }
}
