//! IEEE 802.11: data frames down to their LLC/SNAP payload, and the
//! capture headers that come before them (radiotap, Prism, AVS, PPI).
//! Protected frames are not decrypted: they are counted.

use super::link::{self, LinkType};
use super::DecodeError;

/// Radiotap "Flags" field bits (radiotap.org/fields/Flags).
const RADIOTAP_FCS: u8 = 0x10;
const RADIOTAP_DATAPAD: u8 = 0x20;
const RADIOTAP_BAD_FCS: u8 = 0x40;
/// Present-bitmap words read before giving up (each extends the last).
const MAX_RADIOTAP_PRESENT: usize = 8;

/// An 802.11 frame (IEEE 802.11-2020 9.2, 9.3.2.1): data frames only
/// (management and control frames carry no IP), then LLC/SNAP. `datapad`:
/// the header is padded to a multiple of 4 bytes (radiotap's DATAPAD flag).
pub(super) fn peel_80211(f: &[u8], datapad: bool) -> Result<(u16, &[u8]), DecodeError> {
    let (fc0, fc1) = match f {
        [a, b, ..] => (*a, *b),
        _ => return Err(DecodeError::ShortLink),
    };
    if fc0 & 0x03 != 0 {
        return Err(DecodeError::Malformed); // protocol version 0 only
    }
    let (ftype, subtype) = ((fc0 >> 2) & 0x03, fc0 >> 4);
    // Type 2 is data; subtypes with bit 2 set carry no data (Null, QoS Null, CF-Ack...).
    if ftype != 2 || subtype & 0x04 != 0 {
        return Err(DecodeError::NotIp);
    }
    if fc1 & 0x40 != 0 {
        return Err(DecodeError::Encrypted); // Protected Frame: WEP, TKIP, CCMP, GCMP
    }
    let qos = subtype & 0x08 != 0;
    let four_addresses = fc1 & 0x03 == 0x03; // To DS and From DS: a WDS/mesh frame
    let mut len = if four_addresses { 30 } else { 24 };
    if qos {
        // QoS Control; the A-MSDU Present bit says several packets follow.
        let qos_ctl = *f.get(len).ok_or(DecodeError::ShortLink)?;
        if qos_ctl & 0x80 != 0 {
            return Err(DecodeError::Aggregate);
        }
        len += 2;
        if fc1 & 0x80 != 0 {
            len += 4; // +HTC: the Order bit on a QoS data frame
        }
    }
    if datapad {
        len = len.next_multiple_of(4);
    }
    let header = f.get(..len).ok_or(DecodeError::ShortLink)?;
    let fragment_number = header.get(22).map_or(0, |b| b & 0x0f);
    if fc1 & 0x04 != 0 || fragment_number != 0 {
        return Err(DecodeError::Fragment); // More Fragments, or not the first
    }
    link::peel_llc_snap(f.get(len..).ok_or(DecodeError::ShortLink)?)
}

/// Radiotap (radiotap.org): version 0, pad, length (little-endian), present
/// bitmaps; of its fields only Flags matters here (FCS at the end, header
/// padding, a failed FCS check), found after TSFT when that is present.
pub(super) fn peel_radiotap(f: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    let (version, len) = match f {
        [v, _, l0, l1, ..] => (*v, usize::from(u16::from_le_bytes([*l0, *l1]))),
        _ => return Err(DecodeError::ShortLink),
    };
    if version != 0 || len < 8 {
        return Err(DecodeError::Malformed);
    }
    let header = f.get(..len).ok_or(DecodeError::ShortLink)?;
    let le32 = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(header.get(at..at + 4)?.try_into().ok()?))
    };
    let present = le32(4).ok_or(DecodeError::Malformed)?;
    // Fields start after the last present word (bit 31: another follows).
    let mut at = 8;
    let mut word = present;
    for _ in 0..MAX_RADIOTAP_PRESENT {
        if word & 0x8000_0000 == 0 {
            break;
        }
        word = le32(at).ok_or(DecodeError::Malformed)?;
        at += 4;
    }
    let mut flags = 0;
    if present & 0x02 != 0 {
        if present & 0x01 != 0 {
            at = at.next_multiple_of(8) + 8; // TSFT: u64, 8-byte aligned
        }
        flags = *header.get(at).ok_or(DecodeError::Malformed)?;
    }
    if flags & RADIOTAP_BAD_FCS != 0 {
        return Err(DecodeError::Malformed);
    }
    let mut frame = f.get(len..).ok_or(DecodeError::ShortLink)?;
    if flags & RADIOTAP_FCS != 0 {
        frame = frame
            .get(..frame.len().saturating_sub(4))
            .unwrap_or_default();
    }
    peel_80211(frame, flags & RADIOTAP_DATAPAD != 0)
}

/// AVS capture header (version 1 or 2): a magic word, then its length,
/// both big-endian.
pub(super) fn peel_avs(f: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    let be32 = |at: usize| f.get(at..at + 4).and_then(|b| b.try_into().ok());
    let magic = be32(0).map(u32::from_be_bytes);
    let len = be32(4).map(u32::from_be_bytes).ok_or(DecodeError::ShortLink)?;
    if !matches!(magic, Some(0x8021_1001 | 0x8021_1002)) || len < 8 {
        return Err(DecodeError::Malformed);
    }
    let len = usize::try_from(len).map_err(|_| DecodeError::Malformed)?;
    peel_80211(f.get(len..).ok_or(DecodeError::ShortLink)?, false)
}

/// Prism capture header: message code, then its length (usually 144) in
/// the capturing host's byte order. Captures of this link type may hold an
/// AVS header instead (as Wireshark also checks).
pub(super) fn peel_prism(f: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    if matches!(f, [0x80, 0x21, 0x10, 0x01 | 0x02, ..]) {
        return peel_avs(f);
    }
    let raw: [u8; 4] = f
        .get(4..8)
        .and_then(|b| b.try_into().ok())
        .ok_or(DecodeError::ShortLink)?;
    let len = [u32::from_le_bytes(raw), u32::from_be_bytes(raw)]
        .into_iter()
        .filter_map(|l| usize::try_from(l).ok())
        .find(|l| (8..=f.len()).contains(l))
        .ok_or(DecodeError::Malformed)?;
    peel_80211(f.get(len..).ok_or(DecodeError::ShortLink)?, false)
}

/// PPI (Per-Packet Information): version, flags, length and the link type
/// that follows, little-endian.
pub(super) fn peel_ppi(f: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    let (len, dlt) = match f {
        [0, _, l0, l1, d0, d1, d2, d3, ..] => (
            usize::from(u16::from_le_bytes([*l0, *l1])),
            i32::from_le_bytes([*d0, *d1, *d2, *d3]),
        ),
        [_, _, _, _, _, _, _, _, ..] => return Err(DecodeError::Malformed),
        _ => return Err(DecodeError::ShortLink),
    };
    let rest = f.get(len.max(8)..).ok_or(DecodeError::ShortLink)?;
    match LinkType::from_linktype(dlt) {
        // No PPI in PPI: the recursion stops here.
        Some(LinkType::Ppi) | None => Err(DecodeError::NotIp),
        Some(inner) => link::peel_link(inner, rest),
    }
}
