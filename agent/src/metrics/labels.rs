//! Label sets of the traffic metrics, and the bound on `server_name`: the
//! first N names seen (the rest `other`), optionally replaced by a salted
//! hash.

use std::collections::HashSet;

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

/// Bounds and optionally hashes the `server_name` label.
pub struct ServerNames {
    top: usize,
    salt: Option<String>,
    admitted: HashSet<String>,
}

impl ServerNames {
    pub fn new(top: usize, salt: Option<String>) -> Self {
        ServerNames {
            top,
            salt,
            admitted: HashSet::new(),
        }
    }

    /// The label value for a record's server name.
    pub fn label(&mut self, sni: Option<&str>) -> String {
        let name = match sni {
            None => return "none".into(),
            Some(n) => match &self.salt {
                Some(salt) => {
                    let digest = Sha256::new()
                        .chain_update(salt.as_bytes())
                        .chain_update(n.as_bytes())
                        .finalize();
                    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
                }
                None => n.to_string(),
            },
        };
        if self.admitted.contains(&name) {
            return name;
        }
        if self.admitted.len() < self.top {
            self.admitted.insert(name.clone());
            return name;
        }
        "other".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_bounded_and_hashable() {
        let mut n = ServerNames::new(2, None);
        assert_eq!(n.label(Some("a")), "a");
        assert_eq!(n.label(Some("b")), "b");
        assert_eq!(n.label(Some("c")), "other");
        assert_eq!(n.label(Some("a")), "a");
        assert_eq!(n.label(None), "none");
        let mut h = ServerNames::new(5, Some("pepper".into()));
        let x = h.label(Some("example.com"));
        assert_eq!(x.len(), 16);
        assert_ne!(
            x,
            ServerNames::new(5, Some("salt".into())).label(Some("example.com"))
        );
    }
}
