//! The contract's rules (DESIGN.md "Classification"), stated once for both
//! transports: what kind of handshake it was, what was offered and
//! accepted, what happened to early data, how many round trips it took.

use std::borrow::Cow;

use super::event::Dir;
use super::machine::{Handshake, State};
use crate::record::{EarlyData, HandshakeKind, Resumption};
use crate::tls::enums::cipher_label;

impl Handshake {
    /// None: a one-sided capture that does not show it (the client's
    /// direction alone, TLS 1.3, a PSK offered: accepted or not is in the
    /// server's hello).
    pub fn kind(&self) -> Option<HandshakeKind> {
        Some(match self.state {
            State::Complete if self.resumed() => HandshakeKind::Resumed,
            State::Complete
                if self.server_hello.is_none()
                    && self.is_tls13()
                    && self.offered().contains(&Resumption::Psk) =>
            {
                return None
            }
            State::Complete => HandshakeKind::Full,
            State::Failed => HandshakeKind::Failed,
            // The server's direction alone, none of it readable (QUIC
            // Initials keyed from the client's first connection ID).
            State::Start if self.missing == Some(Dir::Client) => return None,
            _ => HandshakeKind::Incomplete,
        })
    }

    /// Resumed, whether or not the method is visible.
    fn resumed(&self) -> bool {
        self.resumption().is_some() || (self.abbreviated && !self.is_tls13())
    }

    /// The resumption method the server accepted.
    pub fn resumption(&self) -> Option<Resumption> {
        if self.sslv2 {
            return self.sslv2_session_hit.then_some(Resumption::SessionId);
        }
        if self.is_tls13() {
            let sh = self.server_hello.as_ref().filter(|sh| !sh.is_hrr)?;
            return sh.psk_selected.map(|_| Resumption::Psk);
        }
        if !self.abbreviated {
            return None;
        }
        // The server's direction alone: the method is in the ClientHello.
        if self.client_hello.is_none() && self.missing == Some(Dir::Client) {
            return None;
        }
        // RFC 5077 §3.4: a server accepting a ticket echoes the client's
        // session ID, so a non-empty ticket wins over the echoed ID.
        let ticket = self
            .client_hello
            .as_ref()
            .and_then(|ch| ch.session_ticket_len)
            .unwrap_or(0)
            > 0;
        Some(if ticket {
            Resumption::Ticket
        } else {
            Resumption::SessionId
        })
    }

    /// Resumption methods the client offered (over both ClientHellos).
    pub fn offered(&self) -> Vec<Resumption> {
        let hellos = [
            self.first_client_hello.as_deref(),
            self.client_hello.as_deref(),
        ];
        let mut out = Vec::new();
        if self.session_id_offered || self.resumption() == Some(Resumption::SessionId) {
            out.push(Resumption::SessionId);
        }
        if hellos
            .iter()
            .flatten()
            .any(|ch| ch.session_ticket_len.unwrap_or(0) > 0)
            || self.resumption() == Some(Resumption::Ticket)
        {
            out.push(Resumption::Ticket);
        }
        if hellos.iter().flatten().any(|ch| ch.psk.is_some()) {
            out.push(Resumption::Psk);
        }
        out
    }

    pub fn early_data(&self) -> EarlyData {
        let first = self
            .first_client_hello
            .as_deref()
            .or(self.client_hello.as_deref());
        if !first.is_some_and(|ch| ch.early_data) {
            return EarlyData::None;
        }
        if self.hrr {
            return EarlyData::Rejected; // RFC 8446 §4.2.10: HRR rejects 0-RTT.
        }
        match self.server_hello.as_ref() {
            Some(sh) if !sh.version().is_tls13() || sh.psk_selected.is_none() => {
                EarlyData::Rejected
            }
            // PSK accepted: whether early data was too is in the encrypted
            // EncryptedExtensions, readable only with a key log -- or shown
            // by the client's EndOfEarlyData (heuristic eoed_before_finished).
            _ => match self.late().early_data_accepted {
                Some(true) => EarlyData::Accepted,
                Some(false) => EarlyData::Rejected,
                None if self.eoed_before_finished => EarlyData::Accepted,
                None => EarlyData::Attempted,
            },
        }
    }

    /// Round trips the handshake's own flights took, before the extras
    /// (HelloRetryRequest, QUIC Retry and Version Negotiation).
    fn base_round_trips(&self) -> Option<u8> {
        if self.state != State::Complete || self.sslv2 {
            return None;
        }
        // The server's direction alone shows neither early data under a
        // PSK nor a TLS 1.2 client's False Start.
        if self.missing == Some(Dir::Client)
            && (self.resumption() == Some(Resumption::Psk)
                || !(self.is_tls13() || self.abbreviated))
        {
            return None;
        }
        Some(if self.is_tls13() {
            match self.early_data() {
                EarlyData::Accepted => 0,
                EarlyData::Attempted => return None,
                _ => 1,
            }
        } else if self.abbreviated || self.false_start {
            // A False Start client sends data after its own Finished, one
            // round trip in, without waiting for the server's.
            1
        } else {
            2
        })
    }

    /// Handshake round trips before the client could send application data.
    pub fn round_trips(&self) -> Option<u8> {
        let extra = u8::from(self.hrr) + u8::from(self.retry) + u8::from(self.version_negotiation);
        Some(self.base_round_trips()? + extra)
    }

    /// Round trips a resumed handshake would have saved (for a full
    /// handshake whose client offered resumption). The extras would have
    /// come again, so only the handshake's own flights count.
    pub fn avoidable_round_trips(&self) -> Option<u8> {
        if self.kind() != Some(HandshakeKind::Full) || self.offered().is_empty() {
            return None;
        }
        let took = self.base_round_trips()?;
        // What the resumed handshake would have taken: TLS 1.2 one round
        // trip, TLS 1.3 one, or none with early data (if the client offered it).
        let resumed = if self.is_tls13() && self.early_data() != EarlyData::None {
            0
        } else {
            1
        };
        Some(took.saturating_sub(resumed))
    }

    /// IANA name of the negotiated suite, or its code point in hex.
    pub fn cipher(&self) -> Option<Cow<'static, str>> {
        let id = self.cipher_suite()?;
        Some(cipher_label(id))
    }
}
