//! QUIC: the TLS 1.3 handshakes inside QUIC v1 (RFC 9000/9001), v2 (RFC
//! 9369) and the late drafts, as seen by a passive observer.
//!
//! Data flows down the modules: [`version`] is the table of version
//! numbers (name, salt, labels; what tlsrum cannot decode and why);
//! [`packet`] reads the version-independent
//! header and the long-header fields; [`initial`] derives the Initial keys
//! from the client's first Destination Connection ID; [`protection`] removes
//! header protection and decrypts, with those keys or (given a key log)
//! Handshake keys; [`crypto_stream`] reassembles CRYPTO frames
//! (bounded) into handshake messages; [`tracker`] follows connections by
//! connection ID through Retry and Version Negotiation and hands what it
//! sees (hellos, 1-RTT packets, Retry, closes) to the handshake state
//! machine both transports share ([`crate::handshake`]), whose record
//! builder writes the [`ConnectionRecord`](crate::record::ConnectionRecord)s
//! with `transport: "quic"`. See `docs/quic.md` for what each field means here.
//!
//! ```
//! use analyzer::quic::tracker::{QuicStats, QuicTracker};
//! let mut t = QuicTracker::new(1000, 120.0);
//! let mut stats = QuicStats::default();
//! let (c, s) = (("10.0.0.1".parse().unwrap(), 50000), ("10.0.0.2".parse().unwrap(), 443));
//! t.on_datagram(1.0, c, s, b"\x00not quic", &mut stats); // counted, never an error
//! t.finish_all(&mut stats);
//! assert_eq!(stats.not_quic, 1);
//! assert!(t.out.is_empty());
//! ```

pub mod crypto_stream;
pub mod initial;
pub mod packet;
pub mod protection;
pub mod tracker;
#[cfg(test)]
mod vectors;
pub mod version;

pub use tracker::{QuicStats, QuicTracker};
