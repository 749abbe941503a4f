//! The eBPF backend as a live capture source: kernel events become analyzer
//! packets; a flow the analyzer has finished is marked done in the kernel
//! if it goes on sending events, so nothing more of it leaves the kernel;
//! interfaces that vanish and come back are re-attached.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use analyzer::counters::Counter;
use analyzer::wire::LinkType;
use analyzer::Endpoint;
use anyhow::Result;

use super::{Captured, Source, Status};
use crate::ebpf::{ifindex, EbpfCapture, EbpfOptions, FlowKey, FlowTuple, COUNTERS};

pub struct EbpfSource {
    opts: EbpfOptions,
    cap: Option<EbpfCapture>,
    /// ifindex of each interface when attached, to notice it being recreated.
    ifindexes: Vec<Option<u32>>,
    last_check: Instant,
    /// Counters of captures torn down by interface changes, kept
    /// cumulative; in the order of [`COUNTERS`].
    carried: [u64; COUNTERS.len()],
    /// Flows the analyzer finished and the kernel was not told about yet,
    /// keyed without protocol, with the generation they finished in; every
    /// RECENT_FOR the generation before last is dropped, so the map stays
    /// bounded. Every event is looked up here, once: foldhash, not SipHash
    /// (two SipHash lookups per event took a tenth of the agent's CPU).
    recent: RecentMap,
    generation: u32,
    recent_since: Instant,
}

type RecentMap = HashMap<FlowKey, u32, foldhash::fast::RandomState>;

/// How long a finished flow is remembered in case it sends more events.
const RECENT_FOR: Duration = Duration::from_secs(10);
/// Finished flows remembered at most (the kernel's flow map size): a flood
/// finishes a million flows in seconds, and remembering them all cost the
/// agent ~100 MiB. Past this, the older generation is forgotten early; a
/// flow forgotten only goes on costing its events, not a wrong result.
const RECENT_MAX: usize = 65_536;

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
            recent: RecentMap::default(),
            generation: 0,
            recent_since: Instant::now(),
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
        let recent = &mut self.recent;
        let mut stragglers: Vec<FlowTuple> = Vec::new();
        cap.poll(timeout, &mut |ev| {
            let ts = micros(ev.ts);
            // An event of a flow the analyzer finished (but not the SYN of
            // a new connection on its tuple, nor the FIN/RST the kernel
            // sends even for done flows): tell the kernel to stop it.
            if !recent.is_empty() {
                let h = ev.header;
                let key = FlowKey::new(&FlowTuple {
                    proto: 0,
                    ..h.flow()
                });
                if h.tcp_flags & 0x07 == 0 {
                    if recent.remove(&key).is_some() {
                        stragglers.push(h.flow());
                    }
                } else if h.tcp_flags & 0x02 != 0 {
                    // A SYN: a new connection reuses the tuple, which
                    // must not be stopped for the old one's sake.
                    recent.remove(&key);
                }
            }
            for packet in ev.datagrams() {
                f(Captured::Packet { ts, packet });
            }
        })?;
        for t in stragglers {
            let _ = cap.mark_done(t);
        }
        if self.recent_since.elapsed() >= RECENT_FOR {
            let g = self.generation;
            self.recent.retain(|_, finished| *finished == g);
            self.generation = g.wrapping_add(1);
            self.recent_since = Instant::now();
        }
        Ok(Status::Open)
    }

    /// Most finished flows need no word to the kernel: it stops TLS flows
    /// itself once their handshake phase is over, and many connections end
    /// with their handshake. Those that go on sending events are marked
    /// done when they do (see poll), which costs two system calls only for
    /// them, with the event's own protocol.
    fn finished(&mut self, flows: &[(Endpoint, Endpoint)]) {
        for &(a, b) in flows {
            let t = FlowTuple {
                src: a.0,
                dst: b.0,
                src_port: a.1,
                dst_port: b.1,
                proto: 0,
            };
            if self.recent.len() >= RECENT_MAX {
                let g = self.generation;
                self.recent.retain(|_, finished| *finished == g);
                self.generation = g.wrapping_add(1);
                self.recent_since = Instant::now();
                if self.recent.len() >= RECENT_MAX {
                    continue;
                }
            }
            self.recent.insert(FlowKey::new(&t), self.generation);
        }
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
