//! The pcap and pcapng formats, read from a window of bytes (a memory
//! map of the whole file, or a large buffer over a stream) without copying
//! a packet: the blocks are parsed by rusticata's `pcap-parser`; this
//! module adds what libpcap does on top of it, so that every packet, its
//! timestamp and every error read as they did through `pcap_next_ex`:
//! link types mapped to libpcap's DLT numbers, the snapshot length checks
//! and cuts, timestamps scaled to microseconds with libpcap's integer
//! arithmetic, pcapng's if_tsresol and if_tsoffset, and libpcap's
//! messages for damaged files.

use pcap_parser::nom::{self, Needed};
use pcap_parser::pcapng::{Block, InterfaceDescriptionBlock};
use pcap_parser::{
    parse_block_be, parse_block_le, parse_pcap_header, parse_sectionheaderblock, PcapError,
};

/// One packet, borrowed from the window.
pub struct Frame<'a> {
    /// Seconds, at microsecond precision as libpcap hands them over.
    pub ts: f64,
    /// libpcap's DLT number of its link type.
    pub dlt: i32,
    /// Bytes captured (`data.len()`) and the length on the wire.
    pub caplen: u32,
    pub len: u32,
    pub data: &'a [u8],
}

/// What the next bytes of the window hold.
pub enum Step<'a> {
    /// A packet, and how many bytes it took.
    Frame(usize, Frame<'a>),
    /// A block with no packet (headers, statistics, names): its length.
    Skip(usize),
    /// The next record is longer than the window: this many bytes from
    /// the window's start are needed (at the end of the input: cut short).
    Need(usize),
}

/// A damaged file: libpcap's words for it.
pub type Damage = String;

/// pcap magic numbers, as read little-endian.
const PCAP_NANO: u32 = 0xa1b2_3c4d;
const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
const PCAPNG_PB: u32 = 2;
const NFLOG: i32 = 239;

/// libpcap's largest block before it calls a pcapng file damaged
/// (INITIAL_MAX_BLOCKSIZE), raised for link types with larger packets.
const MAX_BLOCK: u32 = 16 * 1024 * 1024;

/// libpcap's `linktype_to_dlt`: the LINKTYPE_ numbers in files that differ
/// from the DLT_ numbers libpcap hands over (on Linux).
fn linktype_to_dlt(linktype: u32) -> i32 {
    match linktype {
        100 => 11, // ATM_RFC1483
        101 => 12, // RAW
        102 => 15, // SLIP_BSDOS
        103 => 16, // PPP_BSDOS
        106 => 19, // ATM_CLIP
        n => n as i32,
    }
}

/// libpcap's `max_snaplen_for_dlt`: larger packets are damage.
fn max_snaplen(dlt: i32) -> u32 {
    match dlt {
        231 => 128 * 1024 * 1024, // DBUS
        279 => 8 * 1024 * 1024,   // EBHSCR
        249 => 1024 * 1024,       // USBPCAP
        _ => 262_144,
    }
}

/// libpcap's `pcap_adjust_snapshot`: 0 or too large means the largest.
fn adjust_snapshot(dlt: i32, snaplen: u32) -> u32 {
    let max = max_snaplen(dlt);
    if snaplen == 0 || snaplen > max {
        max
    } else {
        snaplen
    }
}

/// The format and what its headers said.
pub enum Format {
    Pcap(Pcap),
    PcapNg(PcapNg),
}

#[derive(Default)]
pub struct Pcap {
    big_endian: bool,
    nano: bool,
    dlt: i32,
    snapshot: u32,
    /// Files before version 2.3 hold caplen and len the other way round;
    /// 2.3 files may (libpcap's `lengths_swapped`).
    lengths: Lengths,
}

#[derive(Clone, Copy, PartialEq, Default)]
enum Lengths {
    #[default]
    Normal,
    Swapped,
    Maybe,
}

pub struct PcapNg {
    /// None before the first Section Header Block is read.
    big_endian: Option<bool>,
    ifaces: Vec<Iface>,
    /// The first interface's DLT, for `first_dlt`.
    first: Option<i32>,
    max_block: u32,
}

struct Iface {
    dlt: i32,
    snapshot: u32,
    /// Units per second, and the offset in seconds (if_tsresol, if_tsoffset).
    resol: u64,
    binary: bool,
    offset: u64,
}

/// libpcap's words for what pcap-parser could not parse.
fn parse_error(e: nom::Err<PcapError<&[u8]>>) -> Damage {
    match e {
        nom::Err::Incomplete(_) => "block in pcapng dump file is too short".into(),
        nom::Err::Error(e) | nom::Err::Failure(e) => format!("malformed block: {e:?}")
            .chars()
            .take(200)
            .collect(),
    }
}

fn u32_at(b: &[u8], at: usize, big_endian: bool) -> u32 {
    let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    if big_endian {
        u32::from_be_bytes(v)
    } else {
        u32::from_le_bytes(v)
    }
}

impl Format {
    /// Reads the file header from the window's start (the capture magic
    /// was checked already). Ok(None): more bytes are needed; the usize is
    /// the header's length.
    pub fn open(head: &[u8]) -> Result<Option<(Format, usize)>, Damage> {
        if head.len() < 4 {
            return Ok(None);
        }
        if u32_at(head, 0, false) == PCAPNG_SHB {
            return Ok(Some((
                Format::PcapNg(PcapNg {
                    big_endian: None,
                    ifaces: Vec::new(),
                    first: None,
                    max_block: MAX_BLOCK,
                }),
                0,
            )));
        }
        let h = match parse_pcap_header(head) {
            Ok((_, h)) => h,
            Err(nom::Err::Incomplete(_)) if head.len() < 24 => {
                return Ok(None);
            }
            Err(e) => return Err(parse_error(e)),
        };
        if h.version_major < 2 {
            return Err("archaic pcap savefile format".into());
        }
        if !(h.version_major == 2 && h.version_minor <= 4
            || h.version_major == 543 && h.version_minor == 0)
        {
            return Err(format!(
                "unsupported pcap savefile version {}.{}",
                h.version_major, h.version_minor
            ));
        }
        let lengths = match (h.version_major, h.version_minor) {
            (2, m) if m < 3 => Lengths::Swapped,
            (2, 3) => Lengths::Maybe,
            (543, _) => Lengths::Swapped,
            _ => Lengths::Normal,
        };
        // LT_LINKTYPE: the low 16 bits; the rest is extension bits.
        let dlt = linktype_to_dlt(h.network.0 as u32 & 0xffff);
        let magic = u32_at(head, 0, false);
        Ok(Some((
            Format::Pcap(Pcap {
                big_endian: h.is_bigendian(),
                nano: magic == PCAP_NANO || magic.swap_bytes() == PCAP_NANO,
                dlt,
                snapshot: adjust_snapshot(dlt, h.snaplen),
                lengths,
            }),
            24,
        )))
    }

    /// The link type of the first packets (pcap: the file's; pcapng: the
    /// first interface's, None until its block is read).
    pub fn first_dlt(&self) -> Option<i32> {
        match self {
            Format::Pcap(p) => Some(p.dlt),
            Format::PcapNg(n) => n.first,
        }
    }

    /// Whether the file's byte order is not this machine's: libpcap then
    /// fixes up the host-order headers some link types carry.
    fn swapped(&self) -> bool {
        let big = match self {
            Format::Pcap(p) => p.big_endian,
            Format::PcapNg(n) => n.big_endian.unwrap_or(false),
        };
        big != cfg!(target_endian = "big")
    }

    /// Whether packets of this link type must be changed before they are
    /// handed over (libpcap's `swap_pseudo_headers` for the link types
    /// tlsrum reads: NFLOG's host-order TLV headers).
    pub fn needs_fixup(&self, dlt: i32) -> bool {
        dlt == NFLOG && self.swapped()
    }

    /// The next record in `buf` (the unread bytes). Inlined with the pcap
    /// reader into the caller's loop: returned through memory, the frame
    /// was read back with wide loads right after narrow stores, a
    /// store-forwarding stall a packet.
    #[inline]
    pub fn next<'a>(&mut self, buf: &'a [u8]) -> Result<Step<'a>, Damage> {
        match self {
            Format::Pcap(p) => p.next(buf),
            Format::PcapNg(n) => n.next(buf),
        }
    }
}

impl Pcap {
    #[inline]
    fn next<'a>(&mut self, buf: &'a [u8]) -> Result<Step<'a>, Damage> {
        if buf.len() < 16 {
            return Ok(Step::Need(16));
        }
        let mut caplen = u32_at(buf, 8, self.big_endian);
        let mut len = u32_at(buf, 12, self.big_endian);
        let swapped =
            self.lengths == Lengths::Swapped || self.lengths == Lengths::Maybe && caplen > len;
        if swapped {
            (caplen, len) = (len, caplen);
        }
        let max = max_snaplen(self.dlt);
        if caplen > max {
            return Err(if caplen > self.snapshot {
                format!(
                    "invalid packet capture length {caplen}, bigger than snaplen of {}",
                    self.snapshot
                )
            } else {
                format!("invalid packet capture length {caplen}, bigger than maximum of {max}")
            });
        }
        let stored = caplen as usize;
        if buf.len() < 16 + stored {
            return Ok(Step::Need(16 + stored));
        }
        // The timestamp's two words are read here, as the lengths were
        // (pcap-parser's frame parser reads the same four words through
        // nom, at twice the cost of this whole function). Signed as
        // libpcap's on-disk header has them.
        let sec = u32_at(buf, 0, self.big_endian) as i32;
        let mut usec = u32_at(buf, 4, self.big_endian) as i32;
        if self.nano {
            usec /= 1000;
        }
        // A packet over the snapshot length is cut to it (libpcap reads
        // and drops the rest).
        let caplen = caplen.min(self.snapshot);
        let data = &buf[16..16 + (caplen as usize).min(stored)];
        Ok(Step::Frame(
            16 + stored,
            Frame {
                ts: f64::from(sec) + f64::from(usec) * 1e-6,
                dlt: self.dlt,
                caplen,
                len,
                data,
            },
        ))
    }
}

impl PcapNg {
    fn next<'a>(&mut self, buf: &'a [u8]) -> Result<Step<'a>, Damage> {
        if buf.len() < 8 {
            return Ok(Step::Need(8));
        }
        let kind = u32_at(buf, 0, false);
        if kind == PCAPNG_SHB && buf.len() < 12 {
            return Ok(Step::Need(12));
        }
        let big_endian = if kind == PCAPNG_SHB {
            // The byte order magic says the section's byte order.
            let magic = u32_at(buf, 8, false);
            let big = match magic {
                0x1a2b_3c4d => false,
                0x4d3c_2b1a => true,
                _ => return Err("the file has a section with a bad byte order magic field".into()),
            };
            if self.big_endian.is_some_and(|b| b != big) {
                return Err("the file has sections with different byte orders".into());
            }
            big
        } else {
            self.big_endian.unwrap_or(false)
        };
        let block_len = u32_at(buf, 4, big_endian);
        if block_len < 12 {
            return Err(format!(
                "block in pcapng dump file has a length of {block_len} < 12"
            ));
        }
        if !block_len.is_multiple_of(4) {
            return Err(format!(
                "block in pcapng dump file has a length of {block_len} that is not a multiple of 4"
            ));
        }
        if block_len > self.max_block {
            return Err(format!(
                "pcapng block size {block_len} > maximum {}",
                self.max_block
            ));
        }
        let n = block_len as usize;
        if buf.len() < n {
            return Ok(Step::Need(n));
        }
        let bytes = &buf[..n];
        let parsed = if kind == PCAPNG_SHB {
            parse_sectionheaderblock(bytes).map(|(r, b)| (r, Block::SectionHeader(b)))
        } else if big_endian {
            parse_block_be(bytes)
        } else {
            parse_block_le(bytes)
        };
        let block = match parsed {
            Ok((_, b)) => b,
            // The whole block is in the window: what is missing is inside it.
            Err(e) => {
                return Err(match e {
                    nom::Err::Incomplete(Needed::Size(_) | Needed::Unknown) => {
                        format!("block of type {kind} in pcapng dump file is too short")
                    }
                    e => parse_error(e),
                })
            }
        };
        let (iface, t, caplen, len, data) = match block {
            Block::SectionHeader(shb) => {
                if self.big_endian.is_none()
                    && !(shb.major_version == 1 && matches!(shb.minor_version, 0 | 2))
                {
                    return Err(format!(
                        "unsupported pcapng savefile version {}.{}",
                        shb.major_version, shb.minor_version
                    ));
                }
                if shb.major_version != 1 {
                    return Err(format!(
                        "unknown pcapng savefile major version number {}",
                        shb.major_version
                    ));
                }
                self.big_endian = Some(big_endian);
                // A section has its own interfaces.
                self.ifaces.clear();
                return Ok(Step::Skip(n));
            }
            Block::InterfaceDescription(idb) => {
                self.add_interface(&idb)?;
                return Ok(Step::Skip(n));
            }
            Block::EnhancedPacket(epb) => (
                epb.if_id,
                (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low),
                epb.caplen,
                epb.origlen,
                epb.data,
            ),
            Block::SimplePacket(spb) => {
                // Its captured length is the snapshot length at most, and
                // it has no timestamp.
                let snapshot = self.iface(0)?.snapshot;
                (0, 0, spb.origlen.min(snapshot), spb.origlen, spb.data)
            }
            Block::Unknown(b) if kind == PCAPNG_PB || kind.swap_bytes() == PCAPNG_PB => {
                // The obsolete Packet Block: a 16-bit interface, 16-bit
                // drop count, timestamp, lengths, data.
                let d = b.data;
                if d.len() < 20 {
                    return Err(format!(
                        "block of type {PCAPNG_PB} in pcapng dump file is too short"
                    ));
                }
                let if_id = if big_endian {
                    u16::from_be_bytes([d[0], d[1]])
                } else {
                    u16::from_le_bytes([d[0], d[1]])
                };
                (
                    u32::from(if_id),
                    (u64::from(u32_at(d, 4, big_endian)) << 32)
                        | u64::from(u32_at(d, 8, big_endian)),
                    u32_at(d, 12, big_endian),
                    u32_at(d, 16, big_endian),
                    &d[20..],
                )
            }
            _ => return Ok(Step::Skip(n)),
        };
        let i = self.iface(iface)?;
        if caplen > i.snapshot {
            return Err(format!(
                "invalid packet capture length {caplen}, bigger than snaplen of {}",
                i.snapshot
            ));
        }
        let Some(data) = data.get(..caplen as usize) else {
            return Err(format!(
                "block of type {kind} in pcapng dump file is too short"
            ));
        };
        let sec = (t / i.resol).wrapping_add(i.offset);
        let mut frac = t % i.resol;
        const USER: u64 = 1_000_000;
        if i.resol != USER {
            frac = if i.binary {
                frac.wrapping_mul(USER) / i.resol
            } else if i.resol > USER {
                frac / (i.resol / USER)
            } else {
                frac * (USER / i.resol)
            };
        }
        // As libpcap stores them: time_t seconds, int microseconds.
        let ts = sec as i64 as f64 + f64::from(frac as i32) * 1e-6;
        Ok(Step::Frame(
            n,
            Frame {
                ts,
                dlt: i.dlt,
                caplen,
                len,
                data,
            },
        ))
    }

    fn iface(&self, id: u32) -> Result<&Iface, Damage> {
        if self.first.is_none() {
            return Err(
                "the capture file has a packet block before any Interface Description Blocks"
                    .into(),
            );
        }
        self.ifaces.get(id as usize).ok_or_else(|| {
            format!(
                "a packet arrived on interface {id}, but there's no Interface Description Block for that interface"
            )
        })
    }

    /// libpcap's `add_interface`: the link type, snapshot length and
    /// timestamp resolution and offset of the next interface.
    fn add_interface(&mut self, idb: &InterfaceDescriptionBlock) -> Result<(), Damage> {
        let dlt = linktype_to_dlt(idb.linktype.0 as u32 & 0xffff);
        let mut resol = 1_000_000u64;
        let mut binary = false;
        let mut offset = 0u64;
        for opt in &idb.options {
            let Some(value) = opt.as_bytes() else {
                return Err("Interface Description Block option is too short".into());
            };
            match opt.code.0 {
                // opt_endofopt: libpcap reads no further.
                0 => break,
                // if_tsresol
                9 => {
                    let [v] = value else {
                        return Err(
                            "Interface Description Block has if_tsresol option with length != 1"
                                .into(),
                        );
                    };
                    if v & 0x80 != 0 {
                        let exp = v & 0x7f;
                        if exp > 63 {
                            return Err(format!("Interface Description Block if_tsresol option resolution 2^{exp} is too high"));
                        }
                        resol = 1u64 << exp;
                        binary = true;
                    } else {
                        if *v > 19 {
                            return Err(format!("Interface Description Block if_tsresol option resolution 10^{v} is too high"));
                        }
                        resol = 10u64.pow(u32::from(*v));
                        binary = false;
                    }
                }
                // if_tsoffset
                14 => {
                    let v = value;
                    if v.len() != 8 {
                        return Err(
                            "Interface Description Block has if_tsoffset option with length != 8"
                                .into(),
                        );
                    }
                    let b = [v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]];
                    offset = if self.big_endian == Some(true) {
                        u64::from_be_bytes(b)
                    } else {
                        u64::from_le_bytes(b)
                    };
                }
                _ => {}
            }
        }
        let max = max_snaplen(dlt);
        self.max_block = self.max_block.max(max.saturating_add(131_072));
        self.first.get_or_insert(dlt);
        self.ifaces.push(Iface {
            dlt,
            snapshot: adjust_snapshot(dlt, idb.snaplen),
            resol,
            binary,
            offset,
        });
        Ok(())
    }
}

/// libpcap's `swap_nflog_header`: NFLOG's TLV lengths and types are in
/// the writing host's byte order; turned into this machine's, in `out`.
pub fn swap_nflog(data: &[u8], len: u32, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(data);
    let mut caplen = out.len();
    let mut length = len as usize;
    // nflog_hdr_t: family, version, resource id (network order).
    if caplen < 4 || length < 4 || out[1] != 0 {
        return;
    }
    let mut p = 4;
    caplen -= 4;
    length -= 4;
    while length >= 4 {
        if caplen < 4 {
            return;
        }
        out.swap(p, p + 1);
        out.swap(p + 2, p + 3);
        let mut size = usize::from(u16::from_ne_bytes([out[p], out[p + 1]]));
        if !size.is_multiple_of(4) {
            size += 4 - size % 4;
        }
        if size < 4 || caplen < size || length < size {
            return;
        }
        p += size;
        caplen -= size;
        length -= size;
    }
}
