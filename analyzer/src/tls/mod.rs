//! TLS wire formats: codec, protocol numbers, records and handshake messages.
pub mod codec;
pub mod enums;
pub mod handshake;
pub mod ja4;
pub mod keylog;
pub mod record;
pub(crate) mod server_flight;
pub mod suites;
