//! QUIC packet headers: the version-independent invariants (RFC 8999) first,
//! then the long-header fields of the versions tlsrum can decrypt (RFC 9000
//! §17.2, RFC 9369 §3.2, and the late drafts that share their layout).
//! Nothing here decrypts: header protection hides the packet number, so a
//! parsed [`LongPacket`] says where the packet number starts and how long the
//! protected part is (quinn-proto's `PartialDecode`).

pub use super::version::{Family, Version};
use crate::tls::codec::{InvalidMessage, Reader};

/// Longest connection ID QUIC v1/v2 allow (RFC 9000 §17.2); the invariants allow 255.
pub const MAX_CID_LEN: usize = 20;

/// Why a datagram's packet could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// The bytes cannot be a QUIC packet (empty, or a short header where
    /// none was expected).
    #[error("not QUIC: {0}")]
    NotQuic(&'static str),
    /// The header ends early or a length field overruns the datagram.
    #[error("bad header: {0}")]
    Bad(&'static str),
    /// A connection ID longer than the version allows.
    #[error("connection ID longer than 20 bytes")]
    CidLen,
}

impl From<InvalidMessage> for HeaderError {
    fn from(e: InvalidMessage) -> Self {
        match e {
            InvalidMessage::Truncated(w)
            | InvalidMessage::TrailingData(w)
            | InvalidMessage::Invalid(w) => HeaderError::Bad(w),
            #[allow(unreachable_patterns)]
            _ => HeaderError::Bad("header"),
        }
    }
}

/// A variable-length integer (RFC 9000 §16).
pub fn varint(r: &mut Reader<'_>, what: &'static str) -> Result<u64, InvalidMessage> {
    let first = r.u8(what)?;
    let extra = (1usize << (first >> 6)) - 1;
    let mut v = u64::from(first & 0x3f);
    for &b in r.take(extra, what)? {
        v = (v << 8) | u64::from(b);
    }
    Ok(v)
}

impl Version {
    /// The long-header packet type from the two type bits (RFC 9369 §3.2
    /// rotates them for v2).
    pub fn long_type(self, first: u8) -> LongType {
        let bits = (first >> 4) & 3;
        match (self.family(), bits) {
            (Family::V2, 0) => LongType::Retry,
            (Family::V2, 1) => LongType::Initial,
            (Family::V2, 2) => LongType::ZeroRtt,
            (Family::V2, _) => LongType::Handshake,
            (Family::V1, 0) => LongType::Initial,
            (Family::V1, 1) => LongType::ZeroRtt,
            (Family::V1, 2) => LongType::Handshake,
            (Family::V1, _) => LongType::Retry,
        }
    }

    /// The two type bits of a packet type (the inverse of [`Self::long_type`]).
    pub fn type_bits(self, ty: LongType) -> u8 {
        let v1 = match ty {
            LongType::Initial => 0,
            LongType::ZeroRtt => 1,
            LongType::Handshake => 2,
            LongType::Retry => 3,
        };
        match self.family() {
            Family::V1 => v1,
            Family::V2 => (v1 + 1) & 3,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongType {
    Initial,
    ZeroRtt,
    Handshake,
    Retry,
}

/// A long-header packet of a known version, still protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongPacket<'a> {
    pub version: Version,
    pub ty: LongType,
    pub dcid: &'a [u8],
    pub scid: &'a [u8],
    /// Initial: the token (empty when none); Retry: the retry token.
    pub token: &'a [u8],
    /// The whole packet, header included (for Retry: up to the integrity tag's end).
    pub bytes: &'a [u8],
    /// Offset of the (protected) packet number in `bytes`; 0 for Retry.
    pub pn_offset: usize,
}

/// One packet read from the front of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet<'a> {
    Long(LongPacket<'a>),
    /// Version Negotiation (version 0, RFC 9000 §17.2.1): the rest of the datagram.
    VersionNegotiation {
        dcid: &'a [u8],
        scid: &'a [u8],
        versions: &'a [u8],
    },
    /// A long header of a version tlsrum does not decrypt (not in
    /// [`version::TLS`](super::version::TLS)), its connection IDs read as
    /// RFC 8999 lays them out: the rest of the datagram.
    UnknownVersion {
        version: u32,
        dcid: &'a [u8],
        scid: &'a [u8],
    },
    /// A short (1-RTT) header: the rest of the datagram, connection ID unknown in length.
    Short {
        bytes: &'a [u8],
    },
}

/// Reads the packet at the front of `datagram`; returns it and the bytes it
/// used (coalesced packets follow, RFC 9000 §12.2).
pub fn parse(datagram: &[u8]) -> Result<(Packet<'_>, usize), HeaderError> {
    let Some(&first) = datagram.first() else {
        return Err(HeaderError::NotQuic("empty datagram"));
    };
    if first & 0x80 == 0 {
        return Ok((Packet::Short { bytes: datagram }, datagram.len()));
    }
    let mut r = Reader::new(datagram);
    r.u8("first byte")?;
    let version = r.u32("version")?;
    let dcid = r.sub8("dcid")?.rest();
    let scid = r.sub8("scid")?.rest();
    if version == 0 {
        let versions = r.rest();
        if versions.is_empty() || versions.len() & 3 != 0 {
            return Err(HeaderError::Bad("version list"));
        }
        return Ok((
            Packet::VersionNegotiation {
                dcid,
                scid,
                versions,
            },
            datagram.len(),
        ));
    }
    let Some(v) = Version::from_wire(version) else {
        return Ok((
            Packet::UnknownVersion {
                version,
                dcid,
                scid,
            },
            datagram.len(),
        ));
    };
    if dcid.len() > MAX_CID_LEN || scid.len() > MAX_CID_LEN {
        return Err(HeaderError::CidLen);
    }
    // The fixed bit (0x40) is not checked: peers that negotiated RFC 9287
    // grease it, in long headers too.
    let ty = v.long_type(first);
    let mut token: &[u8] = &[];
    if ty == LongType::Retry {
        // Drafts before 25 put the original DCID here and had no tag; only
        // the Retry's Source Connection ID matters to an observer.
        let rest = r.rest();
        token = rest
            .get(..rest.len().saturating_sub(16))
            .unwrap_or_default();
        return Ok((
            Packet::Long(LongPacket {
                version: v,
                ty,
                dcid,
                scid,
                token,
                bytes: datagram,
                pn_offset: 0,
            }),
            datagram.len(),
        ));
    }
    if ty == LongType::Initial {
        let n = varint(&mut r, "token length")?;
        token = r.take(
            usize::try_from(n).map_err(|_| HeaderError::Bad("token length"))?,
            "token",
        )?;
    }
    let len = varint(&mut r, "length")?;
    let pn_offset = datagram.len() - r.left();
    let len = usize::try_from(len).map_err(|_| HeaderError::Bad("length"))?;
    // Packet number (1..4) + at least a 16-byte sample's worth (RFC 9001 §5.4.2).
    if len < 20 {
        return Err(HeaderError::Bad("length too small"));
    }
    r.take(len, "packet payload")?;
    let end = pn_offset + len;
    Ok((
        Packet::Long(LongPacket {
            version: v,
            ty,
            dcid,
            scid,
            token,
            bytes: &datagram[..end],
            pn_offset,
        }),
        end,
    ))
}

/// The version field of a datagram that starts with a long header (RFC
/// 8999 §5.1), if it is long enough to hold one and connection ID lengths.
/// (No crypto, no allocation.)
pub fn long_header_version(d: &[u8]) -> Option<u32> {
    match d {
        [first, a, b, c, e, _, _, ..] if first & 0x80 != 0 => {
            Some(u32::from_be_bytes([*a, *b, *c, *e]))
        }
        _ => None,
    }
}

/// The version of a Google QUIC packet with a gQUIC public header (Q043
/// and before: no long-header bit, flags 0x01 "version present" and 0x08
/// "8-byte connection ID", the version after the connection ID), if it is
/// one of Google's "Q0nn" numbers. Such a client packet would otherwise
/// look like a short header.
pub fn gquic_public_header_version(d: &[u8]) -> Option<u32> {
    let (&flags, rest) = d.split_first()?;
    if flags & 0x80 != 0 || flags & 0x09 != 0x09 {
        return None;
    }
    let v = rest.get(8..12)?;
    match v {
        [b'Q', x, y, z] if [x, y, z].iter().all(|c| c.is_ascii_digit()) => {
            Some(u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn varints_of_rfc9000_appendix_a1() {
        for (bytes, want) in [
            ("c2197c5eff14e88c", 151_288_809_941_952_652u64),
            ("9d7f3e7d", 494_878_333),
            ("7bbd", 15_293),
            ("25", 37),
            ("4025", 37),
        ] {
            let b = hex(bytes);
            let mut r = Reader::new(&b);
            assert_eq!(varint(&mut r, "v").unwrap(), want);
            assert!(!r.any_left());
        }
        assert!(varint(&mut Reader::new(&[0x40]), "v").is_err());
    }

    #[test]
    fn v1_and_v2_retry_vectors_parse_as_retry() {
        // RFC 9001 A.4 and RFC 9369 A.4: Retry with token "token".
        for (pkt, v) in [
            (
                "ff000000010008f067a5502a4262b5746f6b656e04a265ba2eff4d829058fb3f0f2496ba",
                Version::V1,
            ),
            (
                "cf6b3343cf0008f067a5502a4262b5746f6b656ec8646ce8bfe33952d955543665dcc7b6",
                Version::V2,
            ),
        ] {
            let b = hex(pkt);
            let (p, used) = parse(&b).unwrap();
            assert_eq!(used, b.len());
            let Packet::Long(l) = p else {
                panic!("not long")
            };
            assert_eq!((l.version, l.ty), (v, LongType::Retry));
            assert_eq!(l.token, b"token");
            assert_eq!(l.scid, hex("f067a5502a4262b5"));
            assert!(l.dcid.is_empty());
        }
    }

    #[test]
    fn version_negotiation_and_unknown_versions() {
        let vn = hex("80 00000000 04 01020304 00 00000001 6b3343cf");
        let (p, _) = parse(&vn).unwrap();
        assert!(matches!(p, Packet::VersionNegotiation { versions, .. } if versions.len() == 8));
        let unknown = hex("c0 babababa 01 aa 00 00");
        assert!(matches!(
            parse(&unknown).unwrap().0,
            Packet::UnknownVersion {
                version: 0xbabababa,
                ..
            }
        ));
        // Unknown versions may carry up to 255-byte CIDs; known ones at most 20.
        let mut long_cid = hex("c0 00000001 15");
        long_cid.extend([0; 21]);
        long_cid.extend([0, 0, 0x40, 0x20]);
        assert_eq!(parse(&long_cid).unwrap_err(), HeaderError::CidLen);
        assert_eq!(long_header_version(&vn), Some(0));
        assert_eq!(long_header_version(&unknown), Some(0xbabababa));
        assert_eq!(long_header_version(&unknown[..6]), None);
    }

    #[test]
    fn truncated_headers_are_errors_never_panics() {
        let b = hex("c000000001088394c8f03e5157080000449e7b9aec34d1b1c98dd7689fb8ec11");
        for cut in 0..b.len() {
            let _ = parse(&b[..cut]);
        }
        assert!(
            parse(&b).is_err(),
            "length 0x449e overruns the 32 bytes here"
        );
    }
}
