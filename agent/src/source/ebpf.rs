//! The eBPF backend as a live capture source: kernel events become analyzer
//! packets; a flow the analyzer has finished is marked done in the kernel
//! when it goes on sending events (the analyzer reports it, from the
//! lookup it makes for every packet anyway), so nothing more of it leaves
//! the kernel;
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
    /// Which straggling flows to mark done.
    straggling: Straggling,
}

/// Flows the analyzer reported straggling, by the kernel's key for them
/// (the same for both directions), with the poll they first did in: only one that straggles again
/// in a later poll is marked done. Within the poll a flow finished in, its
/// events are in already: most are the tail of a connection (its last
/// headers and ACKs), and marking those cost ~65,000 pairs of system calls
/// per 100,000 handshakes (and re-created closed flows in the kernel's
/// map) to stop nothing. A flow marked stays (its events already on their
/// way are no reason to mark it again) until it is forgotten.
struct Straggling {
    /// The poll each flow first straggled in, and whether it is marked.
    first: HashMap<FlowKey, (u64, bool), foldhash::fast::RandomState>,
    /// Polls so far; entries first seen before `kept_from` are dropped
    /// every [`STRAGGLING_FOR`].
    polls: u64,
    kept_from: u64,
    pruned: Instant,
}

/// How long a straggling flow is remembered waiting for a later poll.
const STRAGGLING_FOR: Duration = Duration::from_secs(10);
/// Straggling flows remembered at most (the kernel's flow map size): past
/// it, new ones are not remembered (they go on costing their events, not a
/// wrong result).
const STRAGGLING_MAX: usize = 65_536;

impl Straggling {
    fn new() -> Self {
        Straggling {
            first: HashMap::default(),
            polls: 0,
            kept_from: 0,
            pruned: Instant::now(),
        }
    }

    /// A poll begins; every [`STRAGGLING_FOR`], flows first seen before
    /// the previous prune are forgotten.
    fn next_poll(&mut self) {
        self.polls += 1;
        if self.pruned.elapsed() >= STRAGGLING_FOR {
            let from = self.kept_from;
            self.first.retain(|_, (first, _)| *first >= from);
            self.kept_from = self.polls;
            self.pruned = Instant::now();
        }
    }

    /// This poll's stragglers (a flow may come more than once, in either
    /// direction): the flows to mark done, each once.
    fn marks(&mut self, flows: &[(Endpoint, Endpoint)]) -> Vec<FlowTuple> {
        use std::collections::hash_map::Entry;
        let mut marks = Vec::new();
        for &(a, b) in flows {
            let flow = tcp(a, b);
            let full = self.first.len() >= STRAGGLING_MAX;
            match self.first.entry(FlowKey::new(&flow)) {
                Entry::Occupied(mut e) if !e.get().1 && e.get().0 < self.polls => {
                    e.get_mut().1 = true;
                    marks.push(flow);
                }
                Entry::Occupied(_) => {}
                Entry::Vacant(e) => {
                    if !full {
                        e.insert((self.polls, false));
                    }
                }
            }
        }
        marks
    }
}

/// A TCP segment's flow (the analyzer reports TCP segments only).
fn tcp(src: Endpoint, dst: Endpoint) -> FlowTuple {
    FlowTuple {
        src: src.0,
        dst: dst.0,
        src_port: src.1,
        dst_port: dst.1,
        proto: 6,
    }
}

impl EbpfSource {
    /// Loads the programs and attaches them to `opts.ifaces`.
    pub fn open(opts: EbpfOptions) -> Result<Self> {
        let cap = EbpfCapture::attach(&opts)?;
        Ok(Self::with(opts, cap))
    }

    /// Loads the programs and attaches them to nothing (`opts.ifaces` is
    /// left out): frames reach them through [`EbpfSource::capture`]'s
    /// `test_run`, and this source reads what they send as the live agent
    /// does (the `live_cost` benchmark).
    pub fn unattached(mut opts: EbpfOptions) -> Result<Self> {
        opts.ifaces.clear();
        let cap = EbpfCapture::load(&opts)?;
        Ok(Self::with(opts, cap))
    }

    /// The loaded programs, while attached (or loaded).
    pub fn capture(&mut self) -> Option<&mut EbpfCapture> {
        self.cap.as_mut()
    }

    fn with(opts: EbpfOptions, cap: EbpfCapture) -> Self {
        let ifindexes = opts.ifaces.iter().map(|i| ifindex(i)).collect();
        EbpfSource {
            opts,
            cap: Some(cap),
            ifindexes,
            last_check: Instant::now(),
            carried: [0; COUNTERS.len()],
            straggling: Straggling::new(),
        }
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
        self.straggling.next_poll();
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
    /// with their handshake. Those that go on sending events in a later
    /// poll are marked done then, which costs two system calls only for
    /// them.
    fn stragglers(&mut self, flows: &[(Endpoint, Endpoint)]) {
        let Some(cap) = self.cap.as_mut() else {
            return;
        };
        for flow in self.straggling.marks(flows) {
            let _ = cap.mark_done(flow);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(last: u8, port: u16) -> Endpoint {
        (std::net::IpAddr::from([10, 0, 0, last]), port)
    }

    /// A flow is marked once, in the first poll after the one it first
    /// straggled in, whichever direction its segments went.
    #[test]
    fn a_flow_is_marked_when_it_straggles_in_a_later_poll() {
        let (c, s, other) = (ep(1, 40000), ep(2, 443), ep(3, 40001));
        let mut st = Straggling::new();
        st.next_poll();
        assert!(st.marks(&[(c, s), (s, c), (c, s)]).is_empty());
        assert!(st.marks(&[(s, c)]).is_empty(), "same poll");
        st.next_poll();
        assert_eq!(st.marks(&[(s, c), (other, s), (c, s)]), [tcp(s, c)]);
        st.next_poll();
        assert_eq!(st.marks(&[(s, other)]), [tcp(s, other)]);
        // Marked once: its events on their way do not mark it again.
        assert!(st.marks(&[(c, s), (s, other)]).is_empty());
        st.next_poll();
        assert!(st.marks(&[(c, s), (s, other)]).is_empty());
        assert_eq!(st.first.len(), 2);
    }

    /// At most STRAGGLING_MAX flows wait; those past it are never marked.
    #[test]
    fn straggling_flows_are_bounded() {
        let mut st = Straggling::new();
        st.next_poll();
        let flows: Vec<_> = (0..=STRAGGLING_MAX as u32)
            .map(|i| (ep(1, (i % 60_000) as u16), ep((i / 60_000) as u8 + 2, 443)))
            .collect();
        assert!(st.marks(&flows).is_empty());
        assert_eq!(st.first.len(), STRAGGLING_MAX);
        st.next_poll();
        assert_eq!(st.marks(&flows).len(), STRAGGLING_MAX);
    }
}
