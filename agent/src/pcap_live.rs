//! The libpcap live backend: a capture per interface with a kernel BPF
//! filter on the server ports, read without blocking in turn.

use std::time::{Duration, Instant};

use analyzer::wire::LinkType;
use anyhow::{bail, Context, Result};

use crate::live::{Captured, Source};

struct Iface {
    name: String,
    cap: Option<pcap::Capture<pcap::Active>>,
    link: LinkType,
    last_try: Instant,
}

pub struct PcapSource {
    ifaces: Vec<Iface>,
    filter: String,
}

/// The capture filter: TCP (and UDP, for QUIC) on the server ports.
pub fn bpf_filter(ports: &[u16], all_ports: bool) -> String {
    if all_ports || ports.is_empty() {
        return "tcp or udp".into();
    }
    let list: Vec<String> = ports.iter().map(|p| format!("port {p}")).collect();
    format!("(tcp or udp) and ({})", list.join(" or "))
}

fn open_iface(name: &str, filter: &str) -> Result<(pcap::Capture<pcap::Active>, LinkType)> {
    let mut cap = pcap::Capture::from_device(name)
        .with_context(|| format!("no interface {name}"))?
        .snaplen(65535)
        .immediate_mode(true)
        .timeout(50)
        .open()
        .map_err(|e| match e {
            pcap::Error::PcapError(m) if m.contains("permission") || m.contains("Operation not permitted") => {
                anyhow::anyhow!("cannot capture on {name}: {m} (run as root or grant CAP_NET_RAW)")
            }
            e => anyhow::anyhow!("cannot capture on {name}: {e}"),
        })?;
    cap.filter(filter, true).with_context(|| format!("setting filter {filter:?} on {name}"))?;
    let cap = cap.setnonblock().with_context(|| format!("non-blocking mode on {name}"))?;
    let dlt = cap.get_datalink();
    let Some(link) = LinkType::from_linktype(dlt.0) else {
        bail!("{name}: link type {} is not supported", dlt.0);
    };
    Ok((cap, link))
}

impl PcapSource {
    pub fn open(names: &[String], ports: &[u16], all_ports: bool) -> Result<Self> {
        let filter = bpf_filter(ports, all_ports);
        let mut ifaces = Vec::new();
        for name in names {
            let (cap, link) = open_iface(name, &filter)?;
            ifaces.push(Iface { name: name.clone(), cap: Some(cap), link, last_try: Instant::now() });
        }
        Ok(PcapSource { ifaces, filter })
    }
}

impl Source for PcapSource {
    fn poll(&mut self, timeout: Duration, f: &mut dyn FnMut(Captured<'_>)) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut got = 0;
            for iface in self.ifaces.iter_mut() {
                let Some(cap) = iface.cap.as_mut() else { continue };
                // Bounded batch per interface so one busy link cannot starve the others.
                for _ in 0..1024 {
                    match cap.next_packet() {
                        Ok(p) => {
                            got += 1;
                            let ts = p.header.ts.tv_sec as f64 + p.header.ts.tv_usec as f64 * 1e-6;
                            f(Captured::Frame { ts, link: iface.link, data: p.data });
                        }
                        Err(pcap::Error::TimeoutExpired) | Err(pcap::Error::NoMorePackets) => break,
                        Err(e) => {
                            eprintln!("tlsrum: capture on {} stopped ({e}); will reopen when it is back", iface.name);
                            iface.cap = None;
                            iface.last_try = Instant::now();
                            break;
                        }
                    }
                }
            }
            if got > 0 || Instant::now() >= deadline {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn link_types(&self) -> Vec<LinkType> {
        self.ifaces.iter().map(|i| i.link).collect()
    }

    /// An interface that went away is reopened once it exists again.
    fn check_interfaces(&mut self) -> Result<()> {
        for iface in &mut self.ifaces {
            if iface.cap.is_none() && iface.last_try.elapsed() >= Duration::from_secs(1) {
                iface.last_try = Instant::now();
                if let Ok((cap, link)) = open_iface(&iface.name, &self.filter) {
                    eprintln!("tlsrum: capturing on {} again", iface.name);
                    iface.cap = Some(cap);
                    iface.link = link;
                }
            }
        }
        Ok(())
    }
}
