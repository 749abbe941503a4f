//! The handshake pipeline both transports share. The TCP record layer
//! ([`crate::tcp`]) and the QUIC packet layer ([`crate::quic`]) turn what
//! they see into transport-neutral [`Event`]s; one state machine
//! ([`Handshake`], in `machine`) consumes them; the contract's rules
//! (`rules`), timing (`timing`) and the record builder (`record_builder`)
//! read it. See `docs/architecture.md`.
//!
//! ```
//! use analyzer::handshake::{Close, Dir, Event, Handshake, NoMemory};
//! use analyzer::record::{HandshakeKind, Transport};
//! let mut hs = Handshake::new(Transport::Quic);
//! hs.on(Dir::Client, Event::Begin { ts: 1.0 }, &mut NoMemory);
//! hs.on(Dir::Server, Event::Close(Close::Quic("alert:handshake_failure".into())), &mut NoMemory);
//! assert_eq!(hs.kind(), Some(HandshakeKind::Failed));
//! ```

mod event;
mod machine;
mod record_builder;
mod record_logs;
mod rules;
mod timing;
mod zeek_view;

pub use event::{Close, Dir, Directive, Event, Space};
pub use machine::{leaf_names, Handshake, Issued, Leaf, NoMemory, State, TraceMemory};
pub use record_builder::{Finish, TransportView};
pub use timing::{ms, Vantage};
pub use zeek_view::{host_names, MAX_CHAIN, MAX_HISTORY};

#[cfg(test)]
mod tests;
