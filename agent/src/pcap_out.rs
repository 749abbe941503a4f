//! `--write-pcap`: what the agent analysed, as pcapng that `tlsrum replay`
//! reads back to the same records. libpcap reads only single-link-type
//! pcapng files, so there is one interface: the capture's link type when
//! every interface shares it (frames written as captured), else raw IP
//! (LINKTYPE_RAW) with headers rebuilt around each packet, as for packets
//! that come from the kernel.

use std::borrow::Cow;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::time::Duration;

use analyzer::wire::{LinkType, Packet, Transport};
use anyhow::{Context, Result};
use etherparse::PacketBuilder;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;

use crate::source::Captured;

pub struct PacketWriter {
    w: PcapNgWriter<BufWriter<File>>,
    /// Frames of this link type are written as they are; others are rebuilt.
    frames_as: Option<LinkType>,
    errors: u64,
}

fn datalink(l: LinkType) -> DataLink {
    DataLink::from(u32::from(l.number()))
}

impl PacketWriter {
    pub fn create(path: &Path, links: &[LinkType]) -> Result<Self> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut w = PcapNgWriter::new(BufWriter::new(file)).context("writing pcapng header")?;
        let frames_as = links
            .first()
            .copied()
            .filter(|l| links.iter().all(|x| x == l));
        let idb = InterfaceDescriptionBlock {
            linktype: datalink(frames_as.unwrap_or(LinkType::RawIp)),
            snaplen: 0,
            // pcap-file writes timestamps in nanoseconds: say so (if_tsresol 9).
            options: vec![InterfaceDescriptionOption::IfTsResol(9)],
        };
        w.write_pcapng_block(idb)
            .context("writing pcapng interface")?;
        Ok(PacketWriter {
            w,
            frames_as,
            errors: 0,
        })
    }

    fn write(&mut self, ts: f64, data: &[u8]) {
        // Microsecond resolution (the pcapng default), as the analyzer sees it.
        let micros = (ts * 1e6).round() as u64;
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: Duration::from_micros(micros),
            original_len: data.len() as u32,
            data: Cow::Borrowed(data),
            options: vec![],
        };
        if self.w.write_pcapng_block(epb).is_err() {
            self.errors += 1;
        }
    }

    /// Writes what a source captured.
    pub fn captured(&mut self, c: &Captured<'_>) {
        match c {
            Captured::Frame { ts, link, data } => self.frame(**link, *ts, data),
            Captured::Packet { ts, packet } => self.packet(*ts, packet),
        }
    }

    pub fn frame(&mut self, link: LinkType, ts: f64, data: &[u8]) {
        if self.frames_as == Some(link) {
            self.write(ts, data);
        } else if let Ok(p) = analyzer::wire::decode(link, data) {
            self.packet(ts, &p);
        }
    }

    /// Rebuilds IP + TCP/UDP headers around a packet's payload.
    pub fn packet(&mut self, ts: f64, p: &Packet<'_>) {
        let builder = match (p.src, p.dst) {
            (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
                PacketBuilder::ipv4(s.octets(), d.octets(), 64)
            }
            (std::net::IpAddr::V6(s), std::net::IpAddr::V6(d)) => {
                PacketBuilder::ipv6(s.octets(), d.octets(), 64)
            }
            _ => return,
        };
        let mut buf = Vec::with_capacity(p.payload.len() + 60);
        let res = match p.transport {
            Transport::Tcp(h) => {
                let mut b = builder.tcp(h.src_port, h.dst_port, h.seq, 65535);
                if h.ack_flag {
                    b = b.ack(h.ack);
                }
                if h.syn {
                    b = b.syn();
                }
                if h.fin {
                    b = b.fin();
                }
                if h.rst {
                    b = b.rst();
                }
                b.write(&mut buf, p.payload)
            }
            Transport::Udp { src_port, dst_port } => {
                builder.udp(src_port, dst_port).write(&mut buf, p.payload)
            }
        };
        if res.is_ok() {
            self.write(ts, &buf);
        } else {
            self.errors += 1;
        }
    }

    pub fn finish(self) -> Result<()> {
        let mut inner = self.w.into_inner();
        std::io::Write::flush(&mut inner).context("flushing pcapng")?;
        if self.errors > 0 {
            eprintln!(
                "tlsrum: {} packets could not be written to the pcapng file",
                self.errors
            );
        }
        Ok(())
    }
}
