//! QUIC version numbers: one table of every version tlsrum knows, each
//! number's name, Initial salt and key labels stated once.
//!
//! Complete against Wireshark's `quic_version_vals` (epan/dissectors/
//! packet-quic.c) and the salts its `quic_derive_initial_secrets` uses,
//! plus the mvfst numbers of mvfst's own `QuicVersion` and
//! `getQuicVersionSalt`. Every long header's version is one of:
//! * [`Class::Tls`]: TLS 1.3 in CRYPTO frames under RFC 9000 long headers,
//!   Initial keys from the number's salt: tlsrum decrypts these ([`TLS`]).
//! * [`Class::Known`]: a number in use whose Initials tlsrum cannot read —
//!   Google QUIC with QUIC Crypto instead of TLS, IETF drafts before the
//!   RFC 8999 header, vendor experiments whose keys were never published,
//!   the reserved 0x?a?a?a?a numbers that force Version Negotiation
//!   ([`OTHER`]). Counted by reason, never decoded as TLS.
//! * [`Class::Unknown`]: any other number, counted with its value.
//!
//! ```
//! use analyzer::quic::version::{classify, Class, Undecoded};
//! assert!(matches!(classify(0xff00_0021), Class::Tls(v) if v.name() == "draft-33"));
//! assert!(matches!(classify(0x5130_3530), Class::Known(k) if k.why == Undecoded::NotTls));
//! assert!(matches!(classify(0x1a2a_3a4a), Class::Known(k) if k.why == Undecoded::Reserved));
//! assert!(matches!(classify(0x1234_5678), Class::Unknown));
//! ```

use std::hash::{Hash, Hasher};

/// Initial salts, each once, from the document that defines it.
/// draft-ietf-quic-tls-22 §5.2 (draft 22; mvfst 0xfaceb001).
const SALT_DRAFT_22: [u8; 20] = hex20("7fbcdb0e7c66bbe9193a96cd21519ebd7a02644a");
/// draft-ietf-quic-tls-23 §5.2, unchanged to -28 (and mvfst's draft-27 numbers).
const SALT_DRAFT_23: [u8; 20] = hex20("c3eef712c72ebb5a11a7d2432bb46365bef9f502");
/// draft-ietf-quic-tls-29 §5.2, unchanged to -32.
const SALT_DRAFT_29: [u8; 20] = hex20("afbfec289993d24c9e9786f19c6111e04390a899");
/// RFC 9001 §5.2, first in draft-ietf-quic-tls-33 (so drafts 33 and 34 use it).
const SALT_V1: [u8; 20] = hex20("38762cf7f55934b34d179ae6a4c80cadccbb7f0a");
/// draft-ietf-quic-v2-01..04 §3.3.1, for the provisional number 0x709a50c4.
const SALT_V2_DRAFT: [u8; 20] = hex20("a707c203a59b47184a1d62ca570406ea7ae3e5d3");
/// RFC 9369 §3.3.1.
const SALT_V2: [u8; 20] = hex20("0dede3def700a6db819381be6e269dcbf9bd2ed9");
/// Google's TLS-based T050 and T051 (Chromium's `kT050Salt`, `kT051Salt`,
/// as Wireshark's `handshake_salt_draft_t50`/`_t51` give them).
const SALT_T050: [u8; 20] = hex20("7ff579e5acd072915580304c43a2367c60488310");
const SALT_T051: [u8; 20] = hex20("7a4edef4e7ccee5fa4506c19124fc8ccda6e033d");

const fn hex20(s: &str) -> [u8; 20] {
    const fn nib(c: u8) -> u8 {
        match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => panic!("not hex"),
        }
    }
    let b = s.as_bytes();
    assert!(b.len() == 40, "a salt is 20 bytes");
    let mut out = [0u8; 20];
    let mut i = 0;
    while i < 20 {
        out[i] = (nib(b[2 * i]) << 4) | nib(b[2 * i + 1]);
        i += 1;
    }
    out
}

/// The two packet layouts and key schedules of the TLS-based versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// RFC 9000/9001: long-header types 0 Initial, 1 0-RTT, 2 Handshake,
    /// 3 Retry; keys with the labels `quic key`, `quic iv`, `quic hp`.
    /// Drafts 22-34, mvfst and Google's T050/T051 too.
    V1,
    /// RFC 9369 §3.2-3.3: types rotated (1 Initial, 2 0-RTT, 3 Handshake,
    /// 0 Retry), labels `quicv2 key`, `quicv2 iv`, `quicv2 hp`.
    V2,
}

/// A version whose Initial packets tlsrum decrypts.
#[derive(Debug)]
pub struct TlsVersion {
    pub wire: u32,
    pub name: &'static str,
    pub salt: &'static [u8; 20],
    pub family: Family,
    /// Added to the record's `notes` (v1 adds none).
    pub note: Option<&'static str>,
}

const fn tls(
    wire: u32,
    name: &'static str,
    salt: &'static [u8; 20],
    family: Family,
    note: Option<&'static str>,
) -> TlsVersion {
    TlsVersion {
        wire,
        name,
        salt,
        family,
        note,
    }
}

const DRAFT: Option<&str> = Some("quic_draft");
const MVFST: Option<&str> = Some("quic_mvfst");
const GOOGLE: Option<&str> = Some("quic_google");

/// Every version tlsrum decrypts. v1 first: it is looked up the most.
pub const TLS: &[TlsVersion] = &[
    tls(0x0000_0001, "1", &SALT_V1, Family::V1, None),
    tls(0x6b33_43cf, "2", &SALT_V2, Family::V2, Some("quic_v2")),
    tls(
        0x709a_50c4,
        "v2-draft",
        &SALT_V2_DRAFT,
        Family::V2,
        Some("quic_v2_draft"),
    ),
    // IETF drafts (draft-ietf-quic-transport-NN, 0xff0000NN): 22 is the
    // first with RFC 8999's one-byte connection ID lengths.
    tls(0xff00_0016, "draft-22", &SALT_DRAFT_22, Family::V1, DRAFT),
    tls(0xff00_0017, "draft-23", &SALT_DRAFT_23, Family::V1, DRAFT),
    tls(0xff00_0018, "draft-24", &SALT_DRAFT_23, Family::V1, DRAFT),
    tls(0xff00_0019, "draft-25", &SALT_DRAFT_23, Family::V1, DRAFT),
    tls(0xff00_001a, "draft-26", &SALT_DRAFT_23, Family::V1, DRAFT),
    tls(0xff00_001b, "draft-27", &SALT_DRAFT_23, Family::V1, DRAFT),
    tls(0xff00_001c, "draft-28", &SALT_DRAFT_23, Family::V1, DRAFT),
    tls(0xff00_001d, "draft-29", &SALT_DRAFT_29, Family::V1, DRAFT),
    tls(0xff00_001e, "draft-30", &SALT_DRAFT_29, Family::V1, DRAFT),
    tls(0xff00_001f, "draft-31", &SALT_DRAFT_29, Family::V1, DRAFT),
    tls(0xff00_0020, "draft-32", &SALT_DRAFT_29, Family::V1, DRAFT),
    tls(0xff00_0021, "draft-33", &SALT_V1, Family::V1, DRAFT),
    tls(0xff00_0022, "draft-34", &SALT_V1, Family::V1, DRAFT),
    // Facebook mvfst: getQuicVersionSalt gives its v1 alias the v1 salt
    // and every other number (MVFST and its aliases) draft-23's; 0xfaceb001
    // keeps draft-22's ("equivalent to d-24 mostly, but we never updated
    // the salt"). Wireshark maps 001 to draft-22, 002 and 00e to draft-27.
    tls(
        0xface_b001,
        "mvfst draft-22",
        &SALT_DRAFT_22,
        Family::V1,
        MVFST,
    ),
    tls(
        0xface_b002,
        "mvfst draft-27",
        &SALT_DRAFT_23,
        Family::V1,
        MVFST,
    ),
    tls(0xface_b003, "mvfst v1 alias", &SALT_V1, Family::V1, MVFST),
    tls(
        0xface_b00e,
        "mvfst experimental",
        &SALT_DRAFT_23,
        Family::V1,
        MVFST,
    ),
    tls(
        0xface_b010,
        "mvfst alias",
        &SALT_DRAFT_23,
        Family::V1,
        MVFST,
    ),
    tls(
        0xface_b011,
        "mvfst experimental 2",
        &SALT_DRAFT_23,
        Family::V1,
        MVFST,
    ),
    tls(
        0xface_b013,
        "mvfst experimental 3",
        &SALT_DRAFT_23,
        Family::V1,
        MVFST,
    ),
    tls(
        0xface_b014,
        "mvfst experimental 4",
        &SALT_DRAFT_23,
        Family::V1,
        MVFST,
    ),
    tls(
        0xface_b015,
        "mvfst experimental 5",
        &SALT_DRAFT_23,
        Family::V1,
        MVFST,
    ),
    // Google's TLS-based versions: RFC 8999 long headers, v1's labels and
    // packet types (Wireshark dissects them as draft-27), own salts.
    tls(0x5430_3530, "Google T050", &SALT_T050, Family::V1, GOOGLE),
    tls(0x5430_3531, "Google T051", &SALT_T051, Family::V1, GOOGLE),
];

/// A QUIC version whose Initial packets tlsrum can decrypt: a row of [`TLS`].
#[derive(Clone, Copy)]
pub struct Version(&'static TlsVersion);

impl Version {
    /// QUIC version 1 (RFC 9000).
    pub const V1: Version = Version(&TLS[0]);
    /// QUIC version 2 (RFC 9369).
    pub const V2: Version = Version(&TLS[1]);

    pub fn from_wire(v: u32) -> Option<Self> {
        TLS.iter().find(|t| t.wire == v).map(Version)
    }

    pub fn wire(self) -> u32 {
        self.0.wire
    }

    pub fn name(self) -> &'static str {
        self.0.name
    }

    pub fn family(self) -> Family {
        self.0.family
    }

    /// The Initial salt (RFC 9001 §5.2 and the table above).
    pub fn initial_salt(self) -> &'static [u8; 20] {
        self.0.salt
    }

    /// The note this version adds to a record.
    pub fn note(self) -> Option<&'static str> {
        self.0.note
    }

    /// HKDF labels for key, IV and header-protection key, at every level
    /// (RFC 9001 §5.1, RFC 9369 §3.3.2).
    pub(crate) fn labels(self) -> [&'static str; 3] {
        match self.0.family {
            Family::V1 => ["quic key", "quic iv", "quic hp"],
            Family::V2 => ["quicv2 key", "quicv2 iv", "quicv2 hp"],
        }
    }
}

impl PartialEq for Version {
    fn eq(&self, o: &Self) -> bool {
        self.0.wire == o.0.wire
    }
}
impl Eq for Version {}
impl Hash for Version {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.wire.hash(h);
    }
}
impl std::fmt::Debug for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Version({})", self.0.name)
    }
}

/// Why tlsrum does not decode a known version's Initials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undecoded {
    /// Google QUIC's own crypto handshake (QUIC Crypto, CHLO/SHLO), not
    /// TLS: Q043/Q046 use gQUIC headers, Q050 IETF-style Initials with its
    /// own salt (0x504574efd066fe2f9d945cfcdbd3a7f0d3b56b45) around a CHLO.
    NotTls,
    /// IETF drafts before 22: connection ID lengths in one byte's nibbles,
    /// not RFC 8999's long header.
    OldHeader,
    /// A vendor's experimental or private number whose key schedule was
    /// never published.
    KeysUnpublished,
    /// 0x?a?a?a?a, reserved to force Version Negotiation (RFC 9000 §15).
    Reserved,
}

impl Undecoded {
    pub fn as_str(self) -> &'static str {
        match self {
            Undecoded::NotTls => "not_tls",
            Undecoded::OldHeader => "old_header",
            Undecoded::KeysUnpublished => "keys_unpublished",
            Undecoded::Reserved => "reserved",
        }
    }
}

/// A known version number (or range) tlsrum does not decode.
#[derive(Debug)]
pub struct OtherVersion {
    pub lo: u32,
    pub hi: u32,
    pub name: &'static str,
    pub why: Undecoded,
}

const fn other(lo: u32, hi: u32, name: &'static str, why: Undecoded) -> OtherVersion {
    OtherVersion { lo, hi, name, why }
}

use Undecoded::{KeysUnpublished, NotTls, OldHeader};

/// Known numbers tlsrum does not decode (first match wins; Wireshark's
/// `quic_version_vals` ranges, more specific rows first).
pub const OTHER: &[OtherVersion] = &[
    other(0x5130_3433, 0x5130_3433, "Google Q043", NotTls),
    other(0x5130_3434, 0x5130_3434, "Google Q044", NotTls),
    other(0x5130_3436, 0x5130_3436, "Google Q046", NotTls),
    other(0x5130_3530, 0x5130_3530, "Google Q050", NotTls),
    // Any other "Q0nn" (Q035, Q039, Q099...): QUIC Crypto as well.
    other(0x5130_3030, 0x5130_3939, "Google Q0xx", NotTls),
    other(0x5430_3030, 0x5430_3939, "Google T0xx", KeysUnpublished),
    other(0xff00_0001, 0xff00_0015, "draft-01..21", OldHeader),
    other(0xff02_0000, 0xff02_0000, "v2-draft-00", KeysUnpublished),
    other(0x4547_4700, 0x4547_47ff, "Quant", KeysUnpublished),
    other(
        0x5043_5130,
        0x5043_5131,
        "Picoquic internal",
        KeysUnpublished,
    ),
    other(
        0x5052_4f58,
        0x5052_4f58,
        "Proxied QUIC (PROX)",
        KeysUnpublished,
    ),
    other(0x5147_4f00, 0x5147_4fff, "QGO (quic-go)", KeysUnpublished),
    other(0x91c1_7000, 0x91c1_70ff, "Quicly", KeysUnpublished),
    other(0xabcd_0000, 0xabcd_000f, "MsQuic", KeysUnpublished),
    other(
        0xf0f0_f0f0,
        0xf0f0_f0ff,
        "ETH Zurich (measurability experiments)",
        KeysUnpublished,
    ),
    other(
        0xf0f0_f1f0,
        0xf0f0_f1ff,
        "Telecom Italia (measurability experiments)",
        KeysUnpublished,
    ),
    other(0xf123_f0c0, 0xf123_f0cf, "MozQuic", KeysUnpublished),
    // mvfst numbers without a published salt: QUIC_V1_ALIAS2, the
    // never-valid MVFST_INVALID (00f), the rest of Wireshark's
    // "Facebook mvfst" range, and MVFST_PRIMING.
    other(0xface_b000, 0xface_b0ff, "Facebook mvfst", KeysUnpublished),
    other(0xface_feed, 0xface_feed, "mvfst priming", KeysUnpublished),
];

/// The reserved numbers that force Version Negotiation.
pub const RESERVED: OtherVersion = other(
    0x0a0a_0a0a,
    0xfafa_fafa,
    "grease (forces Version Negotiation)",
    Undecoded::Reserved,
);

/// What tlsrum makes of a long header's version field.
#[derive(Debug, Clone, Copy)]
pub enum Class {
    /// 0: a Version Negotiation packet.
    Negotiation,
    Tls(Version),
    Known(&'static OtherVersion),
    Unknown,
}

/// The class of a version number.
pub fn classify(v: u32) -> Class {
    if v == 0 {
        return Class::Negotiation;
    }
    if let Some(t) = Version::from_wire(v) {
        return Class::Tls(t);
    }
    if v & 0x0f0f_0f0f == 0x0a0a_0a0a {
        return Class::Known(&RESERVED);
    }
    match OTHER.iter().find(|o| (o.lo..=o.hi).contains(&v)) {
        Some(o) => Class::Known(o),
        None => Class::Unknown,
    }
}

/// Distinct version values tlsrum did not decode that `--stats` lists.
pub const MAX_VERSIONS_SEEN: usize = 16;

/// The version values of the long headers tlsrum did not decode, with
/// packets per value: [`MAX_VERSIONS_SEEN`] values at most, the packets of
/// any further value counted in `other`. In `--stats` as a list with each
/// value's name and class; the counts by class are counters
/// (`unknown_version`, `not_tls_version`, `undecodable_version`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionsSeen {
    seen: Vec<(u32, u64)>,
    other: u64,
}

impl VersionsSeen {
    pub fn add(&mut self, version: u32, packets: u64) {
        if let Some(e) = self.seen.iter_mut().find(|e| e.0 == version) {
            e.1 += packets;
        } else if self.seen.len() < MAX_VERSIONS_SEEN {
            self.seen.push((version, packets));
        } else {
            self.other += packets;
        }
    }

    /// (version, packets), in order of first appearance.
    pub fn values(&self) -> &[(u32, u64)] {
        &self.seen
    }

    /// Packets of values past the cap.
    pub fn other(&self) -> u64 {
        self.other
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty() && self.other == 0
    }

    /// Packets of values past the cap, counted elsewhere (sharded replay
    /// rebuilds the list from its shards' in order of first appearance).
    pub fn add_other(&mut self, packets: u64) {
        self.other += packets;
    }

    /// Adds another instance's values (the counters macro's nested merge).
    pub fn merge(&mut self, o: &Self) {
        for &(v, n) in &o.seen {
            self.add(v, n);
        }
        self.other += o.other;
    }

    /// No counters of its own: the values are a list in `--stats`, their
    /// sums the counters beside it.
    pub fn visit(&self, _f: &mut dyn FnMut(crate::counters::Counter)) {}

    /// Counters-macro helper: no counters to fill.
    pub fn filled(_v: u64) -> Self {
        Self::default()
    }

    /// One line for a person: `0x51303530 Google Q050 (not_tls) ×3, …`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .seen
            .iter()
            .map(|&(v, n)| {
                let (name, class) = name_and_class(v);
                match name {
                    Some(name) => format!("{v:#010x} {name} ({class}) x{n}"),
                    None => format!("{v:#010x} ({class}) x{n}"),
                }
            })
            .collect();
        if self.other > 0 {
            parts.push(format!("{} more packets of other values", self.other));
        }
        parts.join(", ")
    }
}

/// A version's name (if known) and class word for reports.
fn name_and_class(v: u32) -> (Option<&'static str>, &'static str) {
    match classify(v) {
        Class::Negotiation => (Some("Version Negotiation"), "negotiation"),
        Class::Tls(t) => (Some(t.name()), "tls"),
        Class::Known(k) => (Some(k.name), k.why.as_str()),
        Class::Unknown => (None, "unknown"),
    }
}

impl serde::Serialize for VersionsSeen {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        #[derive(serde::Serialize)]
        struct Entry {
            version: String,
            name: Option<&'static str>,
            class: &'static str,
            packets: u64,
        }
        let mut seq = s.serialize_seq(None)?;
        for &(v, n) in &self.seen {
            let (name, class) = name_and_class(v);
            seq.serialize_element(&Entry {
                version: format!("{v:#010x}"),
                name,
                class,
                packets: n,
            })?;
        }
        if self.other > 0 {
            seq.serialize_element(&Entry {
                version: "other".into(),
                name: None,
                class: "over_cap",
                packets: self.other,
            })?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::table::Endpoint;
    use crate::quic::tracker::{QuicStats, QuicTracker};

    const C: Endpoint = (
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)),
        50000,
    );
    const S: Endpoint = (
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)),
        443,
    );

    /// A 1200-byte long header of `version` with RFC 8999's layout.
    fn long(first: u8, version: u32) -> Vec<u8> {
        let mut d = vec![first];
        d.extend(version.to_be_bytes());
        d.extend([8, 1, 2, 3, 4, 5, 6, 7, 8, 0]);
        d.resize(1200, 0);
        d
    }

    #[test]
    fn every_row_is_reachable_and_names_are_unique() {
        let mut names: Vec<&str> = TLS.iter().map(|t| t.name).collect();
        for t in TLS {
            assert!(matches!(classify(t.wire), Class::Tls(v) if v.wire() == t.wire));
        }
        for o in OTHER {
            assert!(o.lo <= o.hi, "{}", o.name);
            // A range's first number classifies as that row (or a decoded one).
            match classify(o.lo) {
                Class::Known(k) => assert_eq!(k.name, o.name),
                Class::Tls(_) => {}
                c => panic!("{}: {c:?}", o.name),
            }
            names.push(o.name);
        }
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "a name twice");
    }

    /// Each kind of undecoded long header is counted by reason, with its
    /// value listed; nothing is read as TLS and nothing is dropped silently.
    #[test]
    fn undecoded_versions_are_counted_with_their_values() {
        let mut t = QuicTracker::new(100, 120.0);
        let mut st = QuicStats::default();
        // gQUIC Q043 client packet: public header (flags 0x09: version
        // present, 8-byte connection ID), then "Q043".
        let mut q043 = vec![0x09, 1, 2, 3, 4, 5, 6, 7, 8];
        q043.extend(b"Q043");
        q043.resize(1350, 0);
        // gQUIC Q046: a long header whose connection ID lengths are nibbles.
        let mut q046 = vec![0xc3];
        q046.extend(b"Q046");
        q046.push(0x50);
        q046.resize(1350, 0);
        let mut draft20 = vec![0xc3, 0xff, 0, 0, 0x14, 0x55];
        draft20.resize(1200, 0);
        for d in [
            q043,
            q046,
            long(0xc3, 0x5130_3530), // Q050: IETF-style header, QUIC Crypto inside
            draft20,                 // draft-20: the older header
            long(0xc3, 0x91c1_7001), // Quicly's private range
            long(0xc3, 0x5a6a_7a8a), // reserved: forces Version Negotiation
            long(0xc3, 0x1234_5678), // in no table
            long(0xc3, 0x1234_5678), // the same again
            long(0x83, 0x8765_4321), // fixed bit clear: not QUIC
            long(0x83, 0x5a6a_7a8a), // reserved number without the fixed bit: not QUIC
        ] {
            t.on_datagram(1.0, C, S, &d, &mut st);
        }
        t.finish_all(&mut st);
        assert!(t.out.is_empty());
        assert_eq!(
            (
                st.not_tls_version,
                st.undecodable_version,
                st.unknown_version,
                st.not_quic
            ),
            (3, 3, 2, 2),
            "{st:?}"
        );
        assert_eq!(
            st.undecoded_versions.values(),
            [
                (0x5130_3433, 1),
                (0x5130_3436, 1),
                (0x5130_3530, 1),
                (0xff00_0014, 1),
                (0x91c1_7001, 1),
                (0x5a6a_7a8a, 1),
                (0x1234_5678, 2),
            ]
        );
        let json = serde_json::to_value(&st).unwrap();
        let list = json["undecoded_versions"].as_array().unwrap();
        assert_eq!(list.len(), 7);
        assert_eq!(list[2]["version"], "0x51303530");
        assert_eq!(list[2]["name"], "Google Q050");
        assert_eq!(list[2]["class"], "not_tls");
        assert_eq!(list[3]["class"], "old_header");
        assert_eq!(list[5]["class"], "reserved");
        assert_eq!(list[6]["class"], "unknown");
        assert_eq!(list[6]["name"], serde_json::Value::Null);
        assert_eq!(list[6]["packets"], 2);
        let line = st.undecoded_versions.describe();
        assert!(
            line.contains("0x51303530 Google Q050 (not_tls) x1"),
            "{line}"
        );
        assert!(line.contains("0x12345678 (unknown) x2"), "{line}");
    }

    /// The list keeps MAX_VERSIONS_SEEN values; packets of any more are
    /// counted as "other", across merges too.
    #[test]
    fn the_list_of_values_is_bounded() {
        let mut a = VersionsSeen::default();
        for v in 0..(MAX_VERSIONS_SEEN as u32 + 4) {
            a.add(0x1000_0000 + v, 2);
        }
        assert_eq!(a.values().len(), MAX_VERSIONS_SEEN);
        assert_eq!(a.other(), 8);
        let mut b = VersionsSeen::default();
        b.add(0x1000_0000, 1);
        b.add(0x2000_0000, 5);
        b.merge(&a);
        assert_eq!(b.values().len(), MAX_VERSIONS_SEEN);
        assert_eq!(b.values()[0], (0x1000_0000, 3));
        // a's last listed value no longer fits, and a's own overflow comes along.
        assert_eq!(b.other(), 2 + 8);
        let json = serde_json::to_value(&b).unwrap();
        let last = json.as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["version"], "other");
        assert_eq!(last["packets"], 10);
    }
}
