//! The libpcap live source: a capture per interface with a kernel BPF
//! filter on the server ports, read without blocking in turn.

use std::time::{Duration, Instant};

use analyzer::counters::Counter;
use analyzer::wire::LinkType;
use anyhow::{bail, Context, Result};

use super::{Captured, Source, Status};

/// The backend's counters: `ps_drop` and `ps_ifdrop` of pcap_stats,
/// summed over the interfaces (names as in `tlsrum_drops_total{reason}`).
pub const COUNTERS: [(&str, &str); 2] = [
    (
        "pcap_dropped",
        "Packets the kernel dropped because its capture buffer was full (tlsrum read too slowly).",
    ),
    (
        "pcap_ifdropped",
        "Packets the interface or its driver dropped before capture.",
    ),
];

/// The group of [`COUNTERS`] (see [`Counter::group`]).
pub const GROUP: &str = "pcap";

struct Iface {
    name: String,
    cap: Option<pcap::Capture<pcap::Active>>,
    link: LinkType,
    last_try: Instant,
    /// Kernel drop counts of captures closed since (pcap_stats of a handle
    /// start at zero), kept so the exported counters stay cumulative.
    closed_drops: [u64; 2],
}

/// ps_drop (the kernel's capture buffer was full: we read too slowly) and
/// ps_ifdrop (the interface dropped them) of one handle.
fn drops(cap: &mut pcap::Capture<pcap::Active>) -> [u64; 2] {
    cap.stats()
        .map_or([0, 0], |s| [u64::from(s.dropped), u64::from(s.if_dropped)])
}

pub struct PcapLive {
    ifaces: Vec<Iface>,
    filter: String,
    /// Kernel capture buffer per interface (`--buffer-size`): at the
    /// default 32 MiB bursts of tens of thousands of small packets (or
    /// about 500 GRO-merged 64 KiB ones) wait here while the analyzer
    /// catches up.
    buffer_bytes: i32,
}

/// The capture filter: TCP (and UDP, for QUIC) on the server ports.
pub fn bpf_filter(ports: &[u16], all_ports: bool) -> String {
    if all_ports || ports.is_empty() {
        return "tcp or udp".into();
    }
    let list: Vec<String> = ports.iter().map(|p| format!("port {p}")).collect();
    format!("(tcp or udp) and ({})", list.join(" or "))
}

fn open_iface(
    name: &str,
    filter: &str,
    buffer_bytes: i32,
) -> Result<(pcap::Capture<pcap::Active>, LinkType)> {
    let mut cap = pcap::Capture::from_device(name)
        .with_context(|| format!("no interface {name}"))?
        .snaplen(65535)
        // No immediate mode: with it libpcap uses TPACKET_V2, whose ring
        // has one 64 KiB slot per packet at this snaplen, so its default
        // 2 MB held about 30 packets and bursts were dropped. TPACKET_V3
        // packs packets into blocks and hands a block over when it is full
        // or after the timeout: records come at most that much later.
        .timeout(50)
        .buffer_size(buffer_bytes)
        .open()
        .map_err(|e| match e {
            pcap::Error::PcapError(m)
                if m.contains("permission") || m.contains("Operation not permitted") =>
            {
                anyhow::anyhow!("cannot capture on {name}: {m} (run as root or grant CAP_NET_RAW)")
            }
            e => anyhow::anyhow!("cannot capture on {name}: {e}"),
        })?;
    cap.filter(filter, true)
        .with_context(|| format!("setting filter {filter:?} on {name}"))?;
    let cap = cap
        .setnonblock()
        .with_context(|| format!("non-blocking mode on {name}"))?;
    let dlt = cap.get_datalink();
    let Some(link) = LinkType::from_linktype(dlt.0) else {
        bail!(
            "{name}: link type {} ({}) is not supported; tlsrum reads {}",
            dlt.0,
            dlt.get_name().unwrap_or_else(|_| "unknown".into()),
            LinkType::supported()
        );
    };
    Ok((cap, link))
}

impl PcapLive {
    /// Captures on each interface with a kernel buffer of `buffer_bytes`
    /// (at most `i32::MAX`); `user_filter` (`-f`, a BPF expression)
    /// narrows the port filter further.
    pub fn open(
        names: &[String],
        ports: &[u16],
        all_ports: bool,
        user_filter: Option<&str>,
        buffer_bytes: usize,
    ) -> Result<Self> {
        let buffer_bytes = i32::try_from(buffer_bytes).unwrap_or(i32::MAX);
        let filter = match user_filter {
            Some(f) => format!("({}) and ({f})", bpf_filter(ports, all_ports)),
            None => bpf_filter(ports, all_ports),
        };
        let mut ifaces = Vec::new();
        for name in names {
            let (cap, link) = open_iface(name, &filter, buffer_bytes)?;
            ifaces.push(Iface {
                name: name.clone(),
                cap: Some(cap),
                link,
                last_try: Instant::now(),
                closed_drops: [0, 0],
            });
        }
        Ok(PcapLive {
            ifaces,
            filter,
            buffer_bytes,
        })
    }
}

impl Source for PcapLive {
    fn poll(&mut self, timeout: Duration, f: &mut dyn FnMut(Captured<'_>)) -> Result<Status> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut got = 0;
            for iface in self.ifaces.iter_mut() {
                let Some(cap) = iface.cap.as_mut() else {
                    continue;
                };
                // Bounded batch per interface so one busy link cannot starve the others.
                for _ in 0..1024 {
                    match cap.next_packet() {
                        Ok(p) => {
                            got += 1;
                            let ts = p.header.ts.tv_sec as f64 + p.header.ts.tv_usec as f64 * 1e-6;
                            f(Captured::Frame {
                                ts,
                                link: &iface.link,
                                data: p.data,
                            });
                        }
                        Err(pcap::Error::TimeoutExpired) | Err(pcap::Error::NoMorePackets) => break,
                        Err(e) => {
                            eprintln!(
                                "tlsrum: capture on {} stopped ({e}); will reopen when it is back",
                                iface.name
                            );
                            let d = drops(cap);
                            iface.closed_drops[0] += d[0];
                            iface.closed_drops[1] += d[1];
                            iface.cap = None;
                            iface.last_try = Instant::now();
                            break;
                        }
                    }
                }
            }
            if got > 0 || Instant::now() >= deadline {
                return Ok(Status::Open);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Packets the kernel dropped before we read them: exported as
    /// `tlsrum_drops_total{reason="pcap_dropped"|"pcap_ifdropped"}`.
    fn counters(&mut self) -> Vec<Counter> {
        let mut total = [0u64; 2];
        for iface in &mut self.ifaces {
            let now = iface.cap.as_mut().map_or([0, 0], drops);
            total[0] += iface.closed_drops[0] + now[0];
            total[1] += iface.closed_drops[1] + now[1];
        }
        COUNTERS
            .iter()
            .zip(total)
            .map(|(&(name, help), value)| Counter {
                group: GROUP,
                name,
                help,
                value,
            })
            .collect()
    }

    fn link_types(&self) -> Vec<LinkType> {
        self.ifaces.iter().map(|i| i.link).collect()
    }

    fn missing_interfaces(&self) -> Vec<String> {
        self.ifaces
            .iter()
            .filter(|i| i.cap.is_none())
            .map(|i| i.name.clone())
            .collect()
    }

    /// An interface that went away is reopened once it exists again.
    fn check_interfaces(&mut self) -> Result<()> {
        for iface in &mut self.ifaces {
            if iface.cap.is_none() && iface.last_try.elapsed() >= Duration::from_secs(1) {
                iface.last_try = Instant::now();
                if let Ok((cap, link)) = open_iface(&iface.name, &self.filter, self.buffer_bytes) {
                    eprintln!("tlsrum: capturing on {} again", iface.name);
                    iface.cap = Some(cap);
                    iface.link = link;
                }
            }
        }
        Ok(())
    }
}
