//! Reading pcap / pcapng files (via `pcap-file` v2) and stripping link-layer headers.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::{bail, Context, Result};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::TsResolution;

use crate::packet::{be16, Skip, ETHERTYPE_IPV4, ETHERTYPE_IPV6};

pub const LINKTYPE_NULL: u32 = 0;
pub const LINKTYPE_ETHERNET: u32 = 1;
pub const LINKTYPE_RAW: u32 = 101;
pub const LINKTYPE_RAW_OPENBSD: u32 = 14;
pub const LINKTYPE_RAW_BSD: u32 = 12;
pub const LINKTYPE_LOOP: u32 = 108;
pub const LINKTYPE_LINUX_SLL: u32 = 113;
pub const LINKTYPE_IPV4: u32 = 228;
pub const LINKTYPE_IPV6: u32 = 229;
pub const LINKTYPE_LINUX_SLL2: u32 = 276;

/// One captured frame as read from an input file.
pub struct Frame<'a> {
    pub ts_ns: u64,
    pub linktype: u32,
    pub data: &'a [u8],
}

/// Calls `f` for every packet of a pcap or pcapng file, in file order. Returns the number of
/// frames read. A read error in the middle of a file is reported as a warning on stderr and ends
/// that file (truncated captures are common).
pub fn read_capture(path: &Path, mut f: impl FnMut(&Frame)) -> Result<u64> {
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut magic = [0u8; 4];
    file.read_exact(&mut magic).with_context(|| format!("reading {}", path.display()))?;
    drop(file);
    let reader = BufReader::with_capacity(1 << 20, File::open(path)?);
    let mut n = 0u64;
    match u32::from_le_bytes(magic) {
        0x0a0d_0d0a => {
            let mut r =
                PcapNgReader::new(reader).with_context(|| format!("parsing pcapng header of {}", path.display()))?;
            // (linktype, tsresol byte, tsoffset seconds) per interface of the current section
            let mut ifaces: Vec<(u32, u8, u64)> = Vec::new();
            for iface in r.interfaces() {
                ifaces.push(iface_info(iface));
            }
            let mut last_ts = 0u64;
            while let Some(block) = r.next_block() {
                let block = match block {
                    Ok(b) => b,
                    Err(e) => {
                        eprintln!("warning: {}: stopped reading after {n} packets: {e}", path.display());
                        break;
                    }
                };
                match block {
                    Block::SectionHeader(_) => ifaces.clear(),
                    Block::InterfaceDescription(idb) => ifaces.push(iface_info(&idb)),
                    Block::EnhancedPacket(epb) => {
                        let Some(&(lt, res, off)) = ifaces.get(epb.interface_id as usize) else {
                            continue;
                        };
                        // pcap-file 2 stores the raw 64-bit timestamp as nanoseconds regardless
                        // of if_tsresol; as_nanos() gives the raw units back.
                        let raw = epb.timestamp.as_nanos() as u64;
                        last_ts = ts_to_ns(raw, res) + off * 1_000_000_000;
                        n += 1;
                        f(&Frame { ts_ns: last_ts, linktype: lt, data: &epb.data });
                    }
                    Block::SimplePacket(spb) => {
                        let Some(&(lt, _, _)) = ifaces.first() else { continue };
                        n += 1;
                        f(&Frame { ts_ns: last_ts, linktype: lt, data: &spb.data });
                    }
                    Block::Packet(pb) => {
                        let Some(&(lt, res, off)) = ifaces.get(pb.interface_id as usize) else {
                            continue;
                        };
                        last_ts = ts_to_ns(pb.timestamp, res) + off * 1_000_000_000;
                        n += 1;
                        f(&Frame { ts_ns: last_ts, linktype: lt, data: &pb.data });
                    }
                    _ => {}
                }
            }
        }
        0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 => {
            let mut r =
                PcapReader::new(reader).with_context(|| format!("parsing pcap header of {}", path.display()))?;
            let hdr = r.header();
            let lt = u32::from(hdr.datalink);
            let mul = match hdr.ts_resolution {
                TsResolution::MicroSecond => 1000u64,
                TsResolution::NanoSecond => 1,
            };
            // next_raw_packet: no validation of orig_len against snaplen (real files violate it).
            while let Some(p) = r.next_raw_packet() {
                let p = match p {
                    Ok(p) => p,
                    Err(e) => {
                        eprintln!("warning: {}: stopped reading after {n} packets: {e}", path.display());
                        break;
                    }
                };
                let ts_ns = p.ts_sec as u64 * 1_000_000_000 + p.ts_frac as u64 * mul;
                n += 1;
                f(&Frame { ts_ns, linktype: lt, data: &p.data });
            }
        }
        m => bail!("{}: not a pcap or pcapng file (magic {m:#010x})", path.display()),
    }
    Ok(n)
}

fn iface_info(idb: &pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock) -> (u32, u8, u64) {
    let mut res = 6u8;
    let mut off = 0u64;
    for o in &idb.options {
        match o {
            InterfaceDescriptionOption::IfTsResol(r) => res = *r,
            InterfaceDescriptionOption::IfTsOffset(o) => off = *o,
            _ => {}
        }
    }
    (u32::from(idb.linktype), res, off)
}

/// Converts a pcapng timestamp in if_tsresol units to nanoseconds.
pub fn ts_to_ns(raw: u64, tsresol: u8) -> u64 {
    if tsresol & 0x80 == 0 {
        let e = tsresol as u32;
        if e <= 9 {
            raw.saturating_mul(10u64.pow(9 - e))
        } else {
            raw / 10u64.pow((e - 9).min(19))
        }
    } else {
        let k = (tsresol & 0x7f) as u32;
        ((raw as u128 * 1_000_000_000u128) >> k.min(127)) as u64
    }
}

/// Where the IP header starts in a frame, plus the Ethernet MAC addresses when there are any.
pub fn strip_link(linktype: u32, d: &[u8]) -> Result<(usize, Option<[u8; 12]>), Skip> {
    let ip_version_ok = |off: usize, ethertype: Option<u16>| -> Result<usize, Skip> {
        let v = *d.get(off).ok_or(Skip::TooShort)? >> 4;
        match (v, ethertype) {
            (4, None | Some(ETHERTYPE_IPV4)) | (6, None | Some(ETHERTYPE_IPV6)) => Ok(off),
            _ => Err(Skip::NotIp),
        }
    };
    match linktype {
        LINKTYPE_ETHERNET => {
            if d.len() < 14 {
                return Err(Skip::TooShort);
            }
            let mut et = be16(d, 12);
            let mut off = 14;
            // 802.1Q / QinQ tags
            while matches!(et, 0x8100 | 0x88a8 | 0x9100) {
                if d.len() < off + 4 {
                    return Err(Skip::TooShort);
                }
                et = be16(d, off + 2);
                off += 4;
            }
            if et == 0x8864 {
                // PPPoE session: 6-byte PPPoE header + 2-byte PPP protocol
                if d.len() < off + 8 {
                    return Err(Skip::TooShort);
                }
                et = match be16(d, off + 6) {
                    0x0021 => ETHERTYPE_IPV4,
                    0x0057 => ETHERTYPE_IPV6,
                    _ => return Err(Skip::NotIp),
                };
                off += 8;
            }
            if et != ETHERTYPE_IPV4 && et != ETHERTYPE_IPV6 {
                return Err(Skip::NotIp);
            }
            let macs: [u8; 12] = d[..12].try_into().unwrap();
            Ok((ip_version_ok(off, Some(et))?, Some(macs)))
        }
        LINKTYPE_LINUX_SLL => {
            if d.len() < 16 {
                return Err(Skip::TooShort);
            }
            Ok((ip_version_ok(16, Some(be16(d, 14)))?, None))
        }
        LINKTYPE_LINUX_SLL2 => {
            if d.len() < 20 {
                return Err(Skip::TooShort);
            }
            Ok((ip_version_ok(20, Some(be16(d, 0)))?, None))
        }
        LINKTYPE_RAW | LINKTYPE_RAW_BSD | LINKTYPE_RAW_OPENBSD | LINKTYPE_IPV4 | LINKTYPE_IPV6 => {
            Ok((ip_version_ok(0, None)?, None))
        }
        // 4-byte address family in host (NULL) or network (LOOP) byte order; the family numbers
        // for IPv6 differ between OSes, so trust the IP version nibble.
        LINKTYPE_NULL | LINKTYPE_LOOP => Ok((ip_version_ok(4, None)?, None)),
        _ => Err(Skip::UnsupportedLinkType),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsresol() {
        assert_eq!(ts_to_ns(5, 6), 5000);
        assert_eq!(ts_to_ns(5, 9), 5);
        assert_eq!(ts_to_ns(5000, 12), 5);
        assert_eq!(ts_to_ns(1 << 20, 0x80 | 20), 1_000_000_000);
    }

    #[test]
    fn link_types() {
        let ip4 = [0x45u8, 0, 0, 20];
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x81, 0x00, 0, 5, 0x08, 0x00]);
        eth.extend_from_slice(&ip4);
        assert_eq!(strip_link(LINKTYPE_ETHERNET, &eth).unwrap().0, 18);
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(&ip4);
        assert_eq!(strip_link(LINKTYPE_LINUX_SLL, &sll).unwrap(), (16, None));
        let mut null = vec![2u8, 0, 0, 0];
        null.extend_from_slice(&ip4);
        assert_eq!(strip_link(LINKTYPE_NULL, &null).unwrap().0, 4);
        assert_eq!(strip_link(LINKTYPE_RAW, &ip4).unwrap().0, 0);
        let ip6 = [0x60u8, 0, 0, 0];
        assert_eq!(strip_link(LINKTYPE_RAW, &ip6).unwrap().0, 0);
        let mut arp = vec![0u8; 14];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&ip4);
        assert_eq!(strip_link(LINKTYPE_LINUX_SLL, &arp), Err(Skip::NotIp));
        assert_eq!(strip_link(147, &ip4), Err(Skip::UnsupportedLinkType));
    }
}
