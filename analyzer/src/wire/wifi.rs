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
    let mut mesh = false;
    if qos {
        // QoS Control; the A-MSDU Present bit says several packets follow.
        let qos_ctl = *f.get(len).ok_or(DecodeError::ShortLink)?;
        if qos_ctl & 0x80 != 0 {
            return Err(DecodeError::Aggregate);
        }
        // Mesh Control Present (802.11s), in a four-address mesh data frame.
        mesh = four_addresses && f.get(len + 1).is_some_and(|b| b & 0x01 != 0);
        len += 2;
        if fc1 & 0x80 != 0 {
            len += 4; // +HTC: the Order bit on a QoS data frame
        }
    }
    if datapad {
        len = len.next_multiple_of(4);
    }
    let header = f.get(..len).ok_or(DecodeError::ShortLink)?;
    if mesh {
        // Mesh Control: flags, TTL, sequence number (6 bytes), then 0, 1
        // or 2 extra addresses by the Address Extension Mode in the flags.
        let mode = usize::from(*f.get(len).ok_or(DecodeError::ShortLink)? & 0x03);
        if mode == 3 {
            return Err(DecodeError::Malformed);
        }
        len += 6 + 6 * mode;
    }
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
    let len = be32(4)
        .map(u32::from_be_bytes)
        .ok_or(DecodeError::ShortLink)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::decode;
    use crate::wire::tests::{assert_hi, ipv4_tcp, ipv6_tcp};

    const SNAP_IPV4: [u8; 8] = [0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00];
    const SNAP_IPV6: [u8; 8] = [0xaa, 0xaa, 0x03, 0, 0, 0, 0x86, 0xdd];

    /// An 802.11 data frame: frame control (type/subtype byte, flags),
    /// duration, three or four addresses, sequence control, QoS control
    /// (when `qos` is given) and HT control (when flagged), then `body`.
    fn frame(fc0: u8, fc1: u8, qos: Option<[u8; 2]>, body: &[u8]) -> Vec<u8> {
        let mut f = vec![fc0, fc1, 0x2c, 0];
        for a in 1..=3u8 {
            f.extend([2, 0, 0, 0, 0, a]);
        }
        f.extend([0x10, 0]); // sequence 1, fragment 0
        if fc1 & 0x03 == 0x03 {
            f.extend([2, 0, 0, 0, 0, 4]);
        }
        if let Some(q) = qos {
            f.extend(q);
            if fc1 & 0x80 != 0 {
                f.extend([0; 4]);
            }
        }
        f.extend(body);
        f
    }

    fn snap(snap: [u8; 8], ip: &[u8]) -> Vec<u8> {
        let mut b = snap.to_vec();
        b.extend(ip);
        b
    }

    /// Data (to the AP, from it), QoS data, QoS with +HTC, four-address
    /// (WDS) frames, 802.11s mesh data; LLC/SNAP then IPv4 or IPv6.
    #[test]
    fn data_frames() {
        let v4 = snap(SNAP_IPV4, &ipv4_tcp());
        let v6 = snap(SNAP_IPV6, &ipv6_tcp());
        for f in [
            frame(0x08, 0x01, None, &v4),            // data, To DS
            frame(0x08, 0x02, None, &v6),            // data, From DS
            frame(0x88, 0x01, Some([0x05, 0]), &v4), // QoS data
            frame(0x88, 0x82, Some([0x00, 0]), &v4), // QoS data, +HTC
            frame(0x08, 0x03, None, &v4),            // four addresses
            frame(0x88, 0x03, Some([0x06, 0]), &v6), // QoS, four addresses
            // 802.11s mesh data: Mesh Control, no extra address / two of them.
            frame(
                0x88,
                0x03,
                Some([0, 0x01]),
                &[&[0, 31, 1, 0, 0, 0][..], &v4].concat(),
            ),
            frame(
                0x88,
                0x03,
                Some([0, 0x01]),
                &[&[2, 31, 1, 0, 0, 0][..], &[7; 12], &v4].concat(),
            ),
        ] {
            assert_hi(LinkType::Ieee80211, &f);
        }
    }

    /// What carries no readable packet is counted as such: protected
    /// frames, A-MSDU aggregates, fragments, null data, management frames.
    #[test]
    fn frames_without_a_readable_packet() {
        let v4 = snap(SNAP_IPV4, &ipv4_tcp());
        let cases = [
            (
                frame(0x88, 0x41, Some([0, 0]), &[0; 60]),
                DecodeError::Encrypted,
            ),
            (frame(0x08, 0x42, None, &[0; 60]), DecodeError::Encrypted),
            (
                frame(0x88, 0x01, Some([0x80, 0]), &v4),
                DecodeError::Aggregate,
            ),
            (frame(0x08, 0x05, None, &v4), DecodeError::Fragment), // More Fragments
            (frame(0x48, 0x01, None, &[]), DecodeError::NotIp),    // null data
            (frame(0xc8, 0x01, Some([0, 0]), &[]), DecodeError::NotIp), // QoS null
            (frame(0x80, 0x00, None, &[0; 40]), DecodeError::NotIp), // beacon
        ];
        for (f, want) in cases {
            assert_eq!(decode(LinkType::Ieee80211, &f), Err(want), "{f:02x?}");
        }
        let mut second_fragment = frame(0x08, 0x01, None, &v4);
        second_fragment[22] = 0x11;
        assert_eq!(
            decode(LinkType::Ieee80211, &second_fragment),
            Err(DecodeError::Fragment)
        );
    }

    /// Radiotap: the shortest header; TSFT and Flags with the FCS at the
    /// end and the header padded to 4 bytes; an extended present bitmap;
    /// a frame that failed its FCS check.
    #[test]
    fn radiotap() {
        let v4 = snap(SNAP_IPV4, &ipv4_tcp());
        let mut plain = vec![0, 0, 8, 0, 0, 0, 0, 0];
        plain.extend(frame(0x08, 0x01, None, &v4));
        assert_hi(LinkType::Ieee80211Radiotap, &plain);

        // present: TSFT | Flags | Rate; TSFT at 8, Flags at 16, rate at 17, pad.
        let with_flags = |flags: u8, body: &[u8]| {
            let mut f = vec![0, 0, 20, 0, 0x07, 0, 0, 0];
            f.extend([0; 8]);
            f.extend([flags, 0x0c, 0, 0]);
            f.extend(body);
            f
        };
        let mut fcs = with_flags(RADIOTAP_FCS, &frame(0x08, 0x01, None, &v4));
        fcs.extend([0xde, 0xad, 0xbe, 0xef]);
        assert_hi(LinkType::Ieee80211Radiotap, &fcs);
        // QoS data: a 26-byte header padded to 28.
        let mut padded = frame(0x88, 0x01, Some([0, 0]), &[]);
        padded.extend([0, 0]);
        padded.extend(&v4);
        assert_hi(
            LinkType::Ieee80211Radiotap,
            &with_flags(RADIOTAP_DATAPAD, &padded),
        );
        let bad = with_flags(RADIOTAP_BAD_FCS, &frame(0x08, 0x01, None, &v4));
        assert_eq!(
            decode(LinkType::Ieee80211Radiotap, &bad),
            Err(DecodeError::Malformed)
        );
        // Two present words (bit 31 extends): TSFT | Flags | Ext, then 0;
        // fields after both: TSFT 8-aligned at 16, Flags at 24.
        let mut ext = vec![0, 0, 28, 0, 0x03, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0];
        ext.extend([0; 8]);
        ext.extend([RADIOTAP_FCS, 0, 0, 0]);
        ext.extend(frame(0x08, 0x01, None, &v4));
        ext.extend([1, 2, 3, 4]);
        assert_hi(LinkType::Ieee80211Radiotap, &ext);
    }

    /// Prism (144 bytes, host byte order), AVS and PPI headers before 802.11.
    #[test]
    fn prism_avs_and_ppi() {
        let data = frame(0x08, 0x01, None, &snap(SNAP_IPV4, &ipv4_tcp()));
        let mut prism = vec![0x41, 0, 0, 0, 144, 0, 0, 0];
        prism.resize(144, 0);
        prism.extend(&data);
        assert_hi(LinkType::Ieee80211Prism, &prism);
        let mut avs = vec![0x80, 0x21, 0x10, 0x01, 0, 0, 0, 64];
        avs.resize(64, 0);
        avs.extend(&data);
        assert_hi(LinkType::Ieee80211Avs, &avs);
        assert_hi(LinkType::Ieee80211Prism, &avs);
        let mut ppi = vec![0, 0, 8, 0, 105, 0, 0, 0];
        ppi.extend(&data);
        assert_hi(LinkType::Ppi, &ppi);
        let nested = [0, 0, 8, 0, 192, 0, 0, 0];
        assert_eq!(decode(LinkType::Ppi, &nested), Err(DecodeError::NotIp));
    }
}
