//! A TLS 1.3 server's encrypted records over TCP, opened with a key log:
//! its handshake flight (EncryptedExtensions, Certificate, ...), then the
//! records after its Finished, to tell NewSessionTicket from data.

use crate::memory::HeapSize;
use crate::quic::crypto_stream::CryptoStream;
use crate::tls::enums::{content_type as ct, handshake_type as ht};
use crate::tls::keylog;

/// Records of a TLS 1.3 server's encrypted flight kept whole to open with
/// a key log: EncryptedExtensions, a Certificate (split over two or three
/// records when the chain is long), CertificateVerify and Finished.
pub(crate) const MAX_FLIGHT_RECORDS: u8 = 8;

/// Records after the server's Finished opened with its application traffic
/// secret to find the first that is data rather than a NewSessionTicket
/// (servers send one to a few tickets, one per record or together).
pub(crate) const MAX_POST_HANDSHAKE_RECORDS: u8 = 8;

/// A TLS 1.3 server's encrypted records, opened one by one with the key
/// log's secrets (RFC 8446 §5.3: sequence numbers count from 0 under each
/// key): first its handshake flight under the server handshake traffic
/// secret, whose messages come out of a bounded reassembler (one message
/// may span records and one record hold several); then, when the log has
/// SERVER_TRAFFIC_SECRET_0, the records after its Finished up to the first
/// that holds application data, whose inner content types tell tickets
/// from data.
pub(crate) struct ServerFlight {
    secret: Vec<u8>,
    /// The application traffic secret, until the Finished switches to it.
    traffic: Option<Vec<u8>>,
    /// Opening the records after the Finished.
    after_finished: bool,
    seq: u64,
    /// Records this key may still open.
    left: u8,
    plain: CryptoStream,
    offset: u64,
    /// Nothing more to read: the Finished came and there is no traffic
    /// secret, application data came, a record did not open (a lost
    /// segment, a stale key), or a cap was hit.
    pub(crate) done: bool,
}

impl HeapSize for ServerFlight {
    fn heap_size(&self) -> usize {
        self.secret.heap_size() + self.traffic.heap_size() + self.plain.heap_size()
    }
}

/// What opening one record of the server's told.
pub(crate) enum Opened<'a> {
    /// A handshake message of the flight (type, body).
    Message(u8, &'a [u8]),
    /// A record after the Finished, with its inner content type.
    AfterFinished(u8),
}

impl ServerFlight {
    pub(crate) fn new(secret: Vec<u8>, traffic: Option<Vec<u8>>) -> Self {
        ServerFlight {
            secret,
            traffic,
            after_finished: false,
            seq: 0,
            left: MAX_FLIGHT_RECORDS,
            plain: CryptoStream::default(),
            offset: 0,
            done: false,
        }
    }

    /// Records the record layer should still keep whole for this opener.
    pub(crate) fn wanted(&self) -> u8 {
        match (self.done, self.after_finished, self.traffic.is_some()) {
            (true, _, _) => 0,
            (false, false, true) => self.left.saturating_add(MAX_POST_HANDSHAKE_RECORDS),
            _ => self.left,
        }
    }

    /// Opens the next record under the current secret and tells `on`
    /// what it held: each complete handshake message of the flight, or the
    /// inner content type of a record after the Finished.
    pub(crate) fn open(
        &mut self,
        suite: u16,
        header: &[u8; 5],
        payload: &[u8],
        on: &mut dyn FnMut(Opened<'_>),
    ) {
        if self.done {
            return;
        }
        let opened = keylog::decrypt_record(suite, &self.secret, self.seq, header, payload);
        self.seq += 1;
        self.left = self.left.saturating_sub(1);
        if self.after_finished {
            let inner = opened.map(|(inner, _)| inner);
            if let Some(inner) = inner {
                on(Opened::AfterFinished(inner));
            }
            self.done = inner.is_none_or(|i| i == ct::APPLICATION_DATA) || self.left == 0;
            return;
        }
        let Some((ct::HANDSHAKE, plain)) = opened else {
            self.done = true;
            return;
        };
        self.plain.push(self.offset, &plain);
        self.offset += plain.len() as u64;
        while let Some((typ, body)) = self.plain.next_message() {
            on(Opened::Message(typ, &body));
            if typ == ht::FINISHED {
                match self.traffic.take() {
                    Some(traffic) => {
                        self.secret = traffic;
                        self.after_finished = true;
                        self.seq = 0;
                        self.left = MAX_POST_HANDSHAKE_RECORDS;
                        self.plain = CryptoStream::default();
                    }
                    None => self.done = true,
                }
                return;
            }
        }
        self.done |= self.plain.capped || self.plain.oversized() || self.left == 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes_gcm::aead::{Aead, KeyInit, Payload};

    /// A TLS 1.3 record (TLS_AES_128_GCM_SHA256) sealed under `secret`.
    fn seal(secret: &[u8], seq: u64, inner: u8, body: &[u8]) -> ([u8; 5], Vec<u8>) {
        let key = keylog::expand(false, secret, "key", 16).unwrap();
        let mut nonce = keylog::expand(false, secret, "iv", 12).unwrap();
        for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
            *n ^= s;
        }
        let mut plain = body.to_vec();
        plain.push(inner);
        let len = (plain.len() + 16) as u16;
        let header = [ct::APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
        let sealed = aes_gcm::Aes128Gcm::new_from_slice(&key)
            .unwrap()
            .encrypt(
                aes_gcm::Nonce::from_slice(&nonce),
                Payload {
                    msg: &plain,
                    aad: &header,
                },
            )
            .unwrap();
        (header, sealed)
    }

    /// The flight under the handshake secret, then the records after the
    /// Finished under the traffic secret, each numbered from 0, up to the
    /// first that holds data.
    #[test]
    fn server_flight_opens_tickets_then_data_under_the_traffic_secret() {
        let (hs, traffic) = ([1u8; 32], [2u8; 32]);
        let mut flight = ServerFlight::new(hs.to_vec(), Some(traffic.to_vec()));
        let finished = [ht::FINISHED, 0, 0, 32].iter().copied().chain([0; 32]);
        let records = [
            seal(&hs, 0, ct::HANDSHAKE, &finished.collect::<Vec<u8>>()),
            seal(
                &traffic,
                0,
                ct::HANDSHAKE,
                &[ht::NEW_SESSION_TICKET, 0, 0, 0],
            ),
            seal(&traffic, 1, ct::APPLICATION_DATA, b"HTTP/1.1 200 OK\r\n"),
            seal(&traffic, 2, ct::APPLICATION_DATA, b"more"),
        ];
        let mut seen = Vec::new();
        for (header, payload) in &records {
            flight.open(0x1301, header, payload, &mut |o| {
                seen.push(match o {
                    Opened::Message(typ, _) => format!("message {typ}"),
                    Opened::AfterFinished(inner) => format!("after {inner}"),
                })
            });
        }
        assert_eq!(seen, ["message 20", "after 22", "after 23"]);
        assert!(flight.done);
        assert_eq!(flight.wanted(), 0);
    }

    /// Without SERVER_TRAFFIC_SECRET_0 the opener stops at the Finished, as
    /// before; a record that does not open stops it too.
    #[test]
    fn server_flight_stops_without_traffic_secret_or_on_failure() {
        let hs = [1u8; 32];
        let finished: Vec<u8> = [ht::FINISHED, 0, 0, 32]
            .into_iter()
            .chain([0; 32])
            .collect();
        let (header, payload) = seal(&hs, 0, ct::HANDSHAKE, &finished);
        let mut flight = ServerFlight::new(hs.to_vec(), None);
        assert_eq!(flight.wanted(), MAX_FLIGHT_RECORDS);
        flight.open(0x1301, &header, &payload, &mut |_| {});
        assert!(flight.done);

        let mut flight = ServerFlight::new(hs.to_vec(), Some(vec![3; 32]));
        assert_eq!(
            flight.wanted(),
            MAX_FLIGHT_RECORDS + MAX_POST_HANDSHAKE_RECORDS
        );
        flight.open(0x1301, &header, &payload, &mut |_| {});
        assert!(!flight.done);
        assert_eq!(flight.wanted(), MAX_POST_HANDSHAKE_RECORDS);
        // A ticket sealed under another key: nothing reported, done.
        let (header, payload) = seal(&[4; 32], 0, ct::HANDSHAKE, &[4, 0, 0, 0]);
        let mut seen = 0;
        flight.open(0x1301, &header, &payload, &mut |_| seen += 1);
        assert_eq!((seen, flight.done), (0, true));
    }
}
