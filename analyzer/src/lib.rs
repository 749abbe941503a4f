#![forbid(unsafe_code)]
pub mod aggregate;
mod analyzer;
pub mod caps;
pub mod counters;
pub mod flow;
pub mod handshake;
pub mod memory;
pub mod output;
pub mod proxy_protocol;
pub mod quic;
pub mod record;
pub mod seq;
pub mod tcp;
pub mod tls;
pub mod wire;
pub use analyzer::{Analyzer, Config};
pub use counters::Stats;
pub use flow::table::Endpoint;
