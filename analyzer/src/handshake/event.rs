//! What the transport layers tell the handshake state machine: the same
//! events whether they come from TLS records over TCP or from QUIC's
//! CRYPTO frames and packets.

use crate::tls::record::RecordInfo;

/// Which side sent something: the client is the side that sent ClientHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Client,
    Server,
}

/// QUIC packet number spaces past Initial (RFC 9000 §12.3), whose packets
/// tlsrum sees but does not open (Handshake only with a key log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    Handshake,
    ZeroRtt,
    OneRtt,
}

/// How a connection ended before (or after) its handshake did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Close {
    /// TCP: both FINs, or a FIN seen when the flow was finished.
    Fin,
    /// TCP: RST.
    Reset,
    /// QUIC: CONNECTION_CLOSE, as a failure string (`alert:<name>`, `quic_close:0x..`).
    Quic(String),
}

/// One thing the wire showed about a handshake.
#[derive(Debug)]
pub enum Event<'a> {
    /// QUIC: the client began (its first Initial, or the attempt a Version
    /// Negotiation answered). Over TCP the ClientHello's record begins it.
    Begin { ts: f64 },
    /// A TLS record's header (TCP): logged for timing and byte counts.
    Record(RecordInfo),
    /// A whole plaintext handshake message: from TLS records, from QUIC
    /// CRYPTO frames, or decrypted with a key log. `body` is None when it
    /// was larger than the cap. `record` is the TLS record that carried
    /// its first byte (TCP only).
    Message {
        msg_type: u8,
        body: Option<&'a [u8]>,
        ts: f64,
        record: Option<RecordInfo>,
    },
    /// An SSL 2.0 message (the first record of a direction in SSLv2 format).
    Sslv2 {
        msg_type: u8,
        body: &'a [u8],
        record: RecordInfo,
    },
    /// TLS 1.3 over TCP: a server record after its Finished, opened with
    /// the key log's application traffic secret; `inner` is its inner
    /// content type (handshake for NewSessionTicket or KeyUpdate,
    /// application_data for data).
    Opened { record: RecordInfo, inner: u8 },
    /// A plaintext alert.
    Alert { level: u8, description: u8 },
    /// A TCP segment's acknowledgement number.
    Ack { ts: f64, ack: u32 },
    /// A protected QUIC packet of a space past Initial.
    Packet { space: Space, ts: f64 },
    /// QUIC: the server sent Retry (the client starts again with a new ClientHello).
    Retry,
    /// QUIC: a Version Negotiation preceded this connection.
    VersionNegotiation,
    /// The connection closed.
    Close(Close),
}

/// What the state machine asks of the transport layer below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directive {
    /// TLS <= 1.2 was negotiated: after a side's ChangeCipherSpec its
    /// records are encrypted.
    CcsEncrypts,
}
