//! A capture file (pcap or pcapng) read through libpcap, as `replay`
//! reads it: optionally filtered, handed over in batches.

use std::path::Path;
use std::time::Duration;

use analyzer::wire::LinkType;
use anyhow::{bail, Context, Result};

use super::{Captured, Source, Status};

/// Packets handed over per poll: the caller writes the records out after
/// each batch, which bounds how many wait in memory.
pub const BATCH: u64 = 4096;

pub struct PcapFile {
    /// The path as the user gave it, for messages.
    name: String,
    cap: pcap::Capture<pcap::Offline>,
    link: LinkType,
    packets: u64,
}

impl PcapFile {
    /// Opens the file, checks its link type and sets the filter (a BPF
    /// expression, as tcpdump takes).
    pub fn open(path: &Path, filter: Option<&str>) -> Result<Self> {
        let name = path.display();
        let mut cap = pcap::Capture::from_file(path)
            .with_context(|| format!("{name}: cannot open as pcap or pcapng"))?;
        let dlt = cap.get_datalink();
        let Some(link) = LinkType::from_linktype(dlt.0) else {
            bail!(
                "{name}: link type {} ({}) is not supported; tlsrum reads Ethernet (with VLAN/QinQ), Linux cooked v1/v2, raw IP and BSD loopback",
                dlt.0,
                dlt.get_name().unwrap_or_else(|_| "unknown".into())
            );
        };
        if let Some(f) = filter {
            cap.filter(f, true)
                .with_context(|| format!("{name}: bad --filter expression {f:?}"))?;
        }
        Ok(PcapFile {
            name: name.to_string(),
            cap,
            link,
            packets: 0,
        })
    }

    /// The file's name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Packets read so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }
}

impl Source for PcapFile {
    /// Hands over up to [`BATCH`] packets; a file never waits.
    fn poll(&mut self, _timeout: Duration, f: &mut dyn FnMut(Captured<'_>)) -> Result<Status> {
        loop {
            match self.cap.next_packet() {
                Ok(pkt) => {
                    self.packets += 1;
                    let ts = pkt.header.ts.tv_sec as f64 + pkt.header.ts.tv_usec as f64 * 1e-6;
                    f(Captured::Frame {
                        ts,
                        link: self.link,
                        data: pkt.data,
                    });
                    if self.packets.is_multiple_of(BATCH) {
                        return Ok(Status::Open);
                    }
                }
                Err(pcap::Error::NoMorePackets) => return Ok(Status::Ended),
                Err(e) => bail!(
                    "{}: capture is truncated or corrupt after packet {}: {e}",
                    self.name,
                    self.packets
                ),
            }
        }
    }

    fn link_types(&self) -> Vec<LinkType> {
        vec![self.link]
    }
}
