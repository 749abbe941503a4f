//! Label sets of the traffic metrics, and the bound on `server_name`
//! ([`ServerNames`]): the names of an allow-list and the N busiest others
//! (the rest `other`), optionally replaced by a salted hash.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};

use prometheus_client::encoding::EncodeLabelSet;
use sha2::{Digest, Sha256};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandshakeLabels {
    /// Issue 16: inbound, outbound, transit, unknown (no role known).
    pub role: String,
    pub kind: String,
    pub method: String,
    pub version: String,
    pub family: String,
    pub transport: String,
    pub server_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OfferLabels {
    pub outcome: String,
    pub method: String,
    pub transport: String,
    pub server_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EarlyDataLabels {
    pub outcome: String,
    pub transport: String,
    pub server_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
    pub transport: String,
    pub server_name: String,
}

/// The handshake and time-to-first-byte histograms: by kind, address
/// family and version too (issue 15).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TimedLabels {
    pub kind: String,
    pub family: String,
    pub version: String,
    pub transport: String,
    pub server_name: String,
}

/// The handshake duration histogram: [`TimedLabels`] and the role
/// (issue 16); time to first byte keeps [`TimedLabels`] (the budget).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleTimedLabels {
    pub role: String,
    pub kind: String,
    pub family: String,
    pub version: String,
    pub transport: String,
    pub server_name: String,
}

/// The client families: by fingerprint ([`super::clients`]), the record's
/// `ja4_stable` (a TLS 1.3 client's fresh and resuming hellos have two raw
/// JA4s, which would split each client into a 0 % and a 100 % resumer),
/// no server name (the budget: docs/running.md).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientKindLabels {
    pub ja4_stable: String,
    /// The fingerprint's name from `--ja4-names`; empty when none.
    pub client: String,
    pub kind: String,
    pub transport: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientLabels {
    pub ja4_stable: String,
    pub client: String,
    pub transport: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameTransportLabels {
    pub transport: String,
    pub server_name: String,
}

/// Idle before use (issue 16): by role, server name and transport.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleNameTransportLabels {
    pub role: String,
    pub transport: String,
    pub server_name: String,
}

/// Connections by how soon after their handshake they were first used:
/// `use` is `on_demand` or `pooled` ([`super::ON_DEMAND_MS`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FirstUseLabels {
    pub role: String,
    pub server_name: String,
    /// Exposed as `use` (the derive strips `r#`).
    pub r#use: String,
}

/// Connection lifetime (issue 16): by role and transport, no server name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleTransportLabels {
    pub role: String,
    pub transport: String,
}

/// The label sets that carry `server_name`: their series are removed
/// when the name is retired ([`super::Owners`]).
pub trait Named {
    fn server_name(&self) -> &str;
}

macro_rules! named {
    ($($t:ty),*) => {$(
        impl Named for $t {
            fn server_name(&self) -> &str {
                &self.server_name
            }
        }
    )*};
}

named!(
    HandshakeLabels,
    OfferLabels,
    EarlyDataLabels,
    KindLabels,
    TimedLabels,
    RoleTimedLabels,
    NameTransportLabels,
    RoleNameTransportLabels,
    FirstUseLabels
);

/// Sketch counters per `--top-server-names` slot.
pub const SKETCH_PER_NAME: usize = 4;
/// Handshakes a name must certainly have made to be admitted.
pub const MIN_ADMIT: u64 = 2;
/// A name displaces the weakest admitted one only when it certainly made
/// this many times as many handshakes as that one may have: two names of
/// about the same volume do not take turns (each turn ends a series).
pub const DISPLACE_FACTOR: u64 = 2;

/// The value of a bounded label (`server_name`, `ja4_stable`) for a
/// record without one, and for the values past the bound.
pub const NONE: &str = "none";
pub const OTHER: &str = "other";

/// Bounds and optionally hashes the `server_name` label.
///
/// The names of `--server-names-file` always have their own value. Of the
/// rest, the N busiest (`--top-server-names`) do. While fewer than N have
/// a slot, a name gets one at its first handshake (a host with few names
/// shows them all at once). A Space-Saving sketch ([`super::heavy`],
/// 4 × N counters) counts every record's name; once the N slots are
/// taken, a name that certainly made at least [`MIN_ADMIT`] handshakes,
/// more than a 1/(4 × N) share of all, ranks among the sketch's top N,
/// and certainly made [`DISPLACE_FACTOR`] times as many handshakes as the
/// weakest admitted name may have takes that one's slot: the weakest is
/// *retired*. A flood of one-off names may take the free slots first, but
/// any steady name displaces them, and a one-off never displaces anything. Its series stay
/// in /metrics, unchanged, until the next scrape has read their last
/// values, and are then removed ([`ServerNames::take_retired`]); its
/// handshakes from then on count under `other`. No series ever goes
/// backwards while it exists; a name admitted again later starts new
/// series at 0, which `rate()` and `increase()` read as a counter reset.
pub struct ServerNames {
    top: usize,
    salt: Option<String>,
    /// `--server-names-file`, lower-case (names are case-insensitive).
    allowed: HashSet<String, foldhash::fast::RandomState>,
    sketch: super::heavy::SpaceSaving,
    /// Names (before hashing) with their own label value, besides
    /// `allowed`, and that value: made once at admission, handed out
    /// shared, so that a record costs no copy (nor, salted, a SHA-256).
    admitted: HashMap<String, Arc<str>, foldhash::fast::RandomState>,
    /// The shared `none` and `other` values.
    none: Arc<str>,
    other: Arc<str>,
    /// Label values of names displaced since the last scrape.
    retired: Vec<String>,
}

impl ServerNames {
    pub fn new(top: usize, salt: Option<String>) -> Self {
        ServerNames {
            top,
            salt,
            allowed: HashSet::default(),
            sketch: super::heavy::SpaceSaving::new(top * SKETCH_PER_NAME),
            admitted: HashMap::default(),
            none: Arc::from(NONE),
            other: Arc::from(OTHER),
            retired: Vec::new(),
        }
    }

    /// `--server-names-file`: one name a line; blank lines and `#`
    /// comments skipped.
    pub fn with_allowed(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.allowed = names
            .into_iter()
            .map(|n| n.trim().to_ascii_lowercase())
            .filter(|n| !n.is_empty() && !n.starts_with('#'))
            .collect();
        self
    }

    pub fn load_allowed(path: &Path) -> Result<Vec<String>> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Ok(text.lines().map(str::to_string).collect())
    }

    /// The label value of a name: itself, or its salted hash.
    fn value(&self, name: &str) -> Arc<str> {
        match &self.salt {
            Some(salt) => {
                let digest = Sha256::new()
                    .chain_update(salt.as_bytes())
                    .chain_update(name.as_bytes())
                    .finalize();
                hex::encode(&digest[..8]).into()
            }
            None => name.into(),
        }
    }

    /// The label value for a record's server name.
    pub fn label(&mut self, sni: Option<&str>) -> Arc<str> {
        let Some(name) = sni else {
            return Arc::clone(&self.none);
        };
        // Most hosts have no list: no lower-case copy for them.
        if !self.allowed.is_empty() && self.allowed.contains(&name.to_ascii_lowercase()) {
            return self.value(name);
        }
        let Some(certain) = self.sketch.count(name) else {
            return Arc::clone(&self.other); // --top-server-names 0
        };
        if let Some(value) = self.admitted.get(name) {
            return Arc::clone(value);
        }
        if self.admitted.len() >= self.top {
            if !self.sketch.is_heavy(certain, MIN_ADMIT)
                || self.sketch.ranked_above(certain) >= self.top
            {
                return Arc::clone(&self.other);
            }
            let weakest = self
                .admitted
                .keys()
                .map(|a| (self.sketch.estimate(a), a))
                .min()
                .map(|(may, a)| (may, a.clone()));
            match weakest {
                Some((may, a)) if certain >= may.saturating_mul(DISPLACE_FACTOR).max(1) => {
                    if let Some(value) = self.admitted.remove(&a) {
                        self.retired.push(value.to_string());
                    }
                }
                _ => return Arc::clone(&self.other),
            }
        }
        let value = self.value(name);
        self.admitted.insert(name.to_string(), Arc::clone(&value));
        self.retired.retain(|r| r.as_str() != &*value);
        value
    }

    /// Label values of the names retired since the last call (whose series
    /// the scrape that just ran has read for the last time).
    pub fn take_retired(&mut self) -> Vec<String> {
        std::mem::take(&mut self.retired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_bounded_and_hashable() {
        let mut n = ServerNames::new(2, None);
        // Free slots: a name has its own at its first handshake.
        for _ in 0..5 {
            assert_eq!(&*n.label(Some("a")), "a");
            assert_eq!(&*n.label(Some("b")), "b");
        }
        // Taken: c is not busier than a and b.
        for _ in 0..5 {
            assert_eq!(&*n.label(Some("c")), "other");
        }
        assert_eq!(&*n.label(Some("a")), "a");
        assert_eq!(&*n.label(None), "none");
        assert!(n.take_retired().is_empty());
        let x = ServerNames::new(5, Some("pepper".into())).label(Some("example.com"));
        // The first 8 bytes of SHA-256("pepper" "example.com"), from Python's hashlib:
        // stable across versions, so that dashboards keep their series.
        assert_eq!(&*x, "a8ec411923b1bbf0");
        assert_ne!(
            x,
            ServerNames::new(5, Some("salt".into())).label(Some("example.com"))
        );
    }

    /// Issue 17: a skewed stream. Light names come first and take the
    /// slots; a heavy name that appears late displaces the weakest of them
    /// (retired once), never one of the heavy early ones, and one-off names
    /// never get in. With an allow-list, its names are kept whatever their
    /// volume, on top of the N busiest.
    #[test]
    fn a_late_heavy_name_displaces_a_light_one() {
        let mut n = ServerNames::new(3, None);
        for _ in 0..50 {
            n.label(Some("big-early"));
        }
        for _ in 0..5 {
            assert_eq!(&*n.label(Some("light-1")), "light-1");
            assert_eq!(&*n.label(Some("light-2")), "light-2");
        }
        let mut late = Vec::new();
        for i in 0..200 {
            late.push(n.label(Some("late-heavy")));
            n.label(Some(&format!("oneoff-{i}")));
        }
        assert_eq!(&*late[0], "other");
        assert_eq!(&**late.last().unwrap(), "late-heavy");
        assert_eq!(&*n.label(Some("big-early")), "big-early");
        let retired = n.take_retired();
        assert_eq!(retired.len(), 1, "{retired:?}");
        assert!(retired[0].starts_with("light-"), "{retired:?}");
        assert_eq!(&*n.label(Some(&retired[0])), "other");
        assert!(n.take_retired().is_empty());
        assert_eq!(n.admitted.len(), 3);
        assert!(!n.admitted.keys().any(|a| a.starts_with("oneoff")));

        let mut f =
            ServerNames::new(0, None).with_allowed(["API.example".to_string(), "# c".into()]);
        assert_eq!(&*f.label(Some("api.example")), "api.example");
        for _ in 0..100 {
            assert_eq!(&*f.label(Some("busy.example")), "other");
        }
    }
}
