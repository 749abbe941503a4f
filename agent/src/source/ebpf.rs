//! The eBPF backend as a live capture source: kernel events become analyzer
//! packets; a flow the analyzer has finished is marked done in the kernel
//! when it goes on sending events (the analyzer reports it, from the
//! lookup it makes for every packet anyway), so nothing more of it leaves
//! the kernel;
//! interfaces that vanish and come back are re-attached.

use std::time::{Duration, Instant};

use analyzer::counters::Counter;
use analyzer::wire::LinkType;
use analyzer::Endpoint;
use anyhow::Result;

use super::{Captured, Source, Status};
use crate::ebpf::{ifindex, EbpfCapture, EbpfOptions, FlowTuple, COUNTERS};

pub struct EbpfSource {
    opts: EbpfOptions,
    cap: Option<EbpfCapture>,
    /// ifindex of each interface when attached, to notice it being recreated.
    ifindexes: Vec<Option<u32>>,
    last_check: Instant,
    /// Counters of captures torn down by interface changes, kept
    /// cumulative; in the order of [`COUNTERS`].
    carried: [u64; COUNTERS.len()],
}

impl EbpfSource {
    /// Loads the programs and attaches them to `opts.ifaces`.
    pub fn open(opts: EbpfOptions) -> Result<Self> {
        let cap = EbpfCapture::attach(&opts)?;
        let ifindexes = opts.ifaces.iter().map(|i| ifindex(i)).collect();
        Ok(EbpfSource {
            opts,
            cap: Some(cap),
            ifindexes,
            last_check: Instant::now(),
            carried: [0; COUNTERS.len()],
        })
    }
}

/// Microsecond timestamps, as a pcapng written by `--write-pcap` holds
/// them, so live and replayed records are identical.
fn micros(ts: f64) -> f64 {
    (ts * 1e6).round() / 1e6
}

impl Source for EbpfSource {
    fn poll(&mut self, timeout: Duration, f: &mut dyn FnMut(Captured<'_>)) -> Result<Status> {
        let Some(cap) = self.cap.as_mut() else {
            std::thread::sleep(timeout);
            return Ok(Status::Open);
        };
        cap.poll(timeout, &mut |ev| {
            let ts = micros(ev.ts);
            for packet in ev.datagrams() {
                f(Captured::Packet { ts, packet });
            }
        })?;
        Ok(Status::Open)
    }

    /// Most finished flows need no word to the kernel: it stops TLS flows
    /// itself once their handshake phase is over, and many connections end
    /// with their handshake. Those that go on sending events are marked
    /// done when they do, which costs two system calls only for them (once
    /// a poll: the analyzer reports each of their segments).
    fn stragglers(&mut self, flows: &[(Endpoint, Endpoint)]) {
        let Some(cap) = self.cap.as_mut() else {
            return;
        };
        // Either direction names the flow to the kernel: one call each.
        let mut flows: Vec<_> = flows
            .iter()
            .map(|&(a, b)| if a <= b { (a, b) } else { (b, a) })
            .collect();
        flows.sort_unstable();
        flows.dedup();
        for (a, b) in flows {
            // The analyzer reports TCP segments only.
            let _ = cap.mark_done(FlowTuple {
                src: a.0,
                dst: b.0,
                src_port: a.1,
                dst_port: b.1,
                proto: 6,
            });
        }
    }

    fn wants_stragglers(&self) -> bool {
        true
    }

    fn counters(&mut self) -> Vec<Counter> {
        let values = match self.cap.as_ref() {
            Some(cap) => self.counters_of(cap),
            None => self.carried,
        };
        COUNTERS
            .iter()
            .zip(values)
            .map(|(k, v)| k.counter(v))
            .collect()
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
            eprintln!(
                "tlsrum: an interface of {} changed; re-attaching when it is back",
                self.opts.ifaces.join(", ")
            );
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

    fn missing_interfaces(&self) -> Vec<String> {
        match self.cap {
            Some(_) => Vec::new(),
            None => self.opts.ifaces.clone(),
        }
    }

    fn close(mut self: Box<Self>) -> Result<()> {
        match self.cap.take() {
            Some(cap) => cap.detach(),
            None => Ok(()),
        }
    }
}

impl EbpfSource {
    /// The carried counters plus those of `cap` (which reads them all, in
    /// the order of [`COUNTERS`]).
    fn counters_of(&self, cap: &EbpfCapture) -> [u64; COUNTERS.len()] {
        let mut out = self.carried;
        if let Ok(now) = cap.counters() {
            for (total, (_, v)) in out.iter_mut().zip(now) {
                *total += v;
            }
        }
        out
    }
}
