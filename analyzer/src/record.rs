//! The connection record: one per TLS-over-TCP or QUIC connection, the
//! contract of `tlsrum replay --format ndjson` (DESIGN.md "Classification").

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Quic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum HandshakeKind {
    Full,
    Resumed,
    Failed,
    Incomplete,
}

impl HandshakeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Resumed => "resumed",
            Self::Failed => "failed",
            Self::Incomplete => "incomplete",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Resumption {
    SessionId,
    Ticket,
    Psk,
}

impl Resumption {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SessionId => "session_id",
            Self::Ticket => "ticket",
            Self::Psk => "psk",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum EarlyData {
    None,
    Accepted,
    Rejected,
    Attempted,
}

impl EarlyData {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Accepted => "accepted",
            Self::Rejected => "rejected",
            Self::Attempted => "attempted",
        }
    }
}

/// Milliseconds at the observer; None where the wire does not show it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Timing {
    pub tcp_rtt: Option<f64>,
    pub handshake: Option<f64>,
    pub ttfb: Option<f64>,
    pub round_trips: Option<u8>,
    pub avoidable: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HandshakeBytes {
    pub client_handshake: u64,
    pub server_handshake: u64,
}

/// The server's certificate chain as sent in TLS <= 1.2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Certs {
    pub count: usize,
    pub bytes: usize,
    pub leaf_subject: Option<String>,
    pub leaf_issuer: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConnectionRecord {
    pub ts: f64,
    pub transport: Transport,
    pub client: String,
    pub server: String,
    pub sni: Option<String>,
    pub version: Option<&'static str>,
    pub cipher: Option<String>,
    pub alpn: Vec<String>,
    pub handshake: HandshakeKind,
    pub offered: Vec<Resumption>,
    pub resumption: Option<Resumption>,
    pub early_data: EarlyData,
    pub hrr: bool,
    /// QUIC Retry; always false for TCP.
    pub retry: bool,
    pub timing: Timing,
    pub bytes: HandshakeBytes,
    pub certs: Option<Certs>,
    /// Why a `failed` handshake failed: `alert:<name>`, `encrypted_alert`,
    /// `reset`, `close`. None otherwise.
    pub failure: Option<String>,
    /// What limited the view of this connection (lost bytes, caps hit,
    /// heuristics used), e.g. `client_gap`, `no_syn`, `evicted`.
    pub notes: Vec<&'static str>,
}

/// Formats an endpoint as `ip:port`, IPv6 as `[addr]:port`.
pub fn endpoint(addr: std::net::IpAddr, port: u16) -> String {
    std::net::SocketAddr::new(addr, port).to_string()
}
