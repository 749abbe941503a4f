//! Caps that more than one part of tlsrum must agree on, stated once.
//! Hitting any of them is counted (see [`mod@crate::counters`]).

/// TLS records kept per direction of a connection for timing and byte
/// counts; a handshake needs a handful, so hitting this means the
/// connection is odd (counted as `record_limit_hits`, noted `record_limit`).
/// The eBPF program (`TLSRUM_RECORDS_PER_DIR` in `bpf/tlsrum.h`) stops
/// forwarding a direction past this many records: the agent checks at
/// compile time that both say the same.
pub const MAX_RECORDS_PER_DIR: usize = 48;

/// Largest TLS record payload accepted: 2^14 plus the TLS 1.2 expansion
/// allowance (RFC 5246 §6.2.3). The eBPF program fills application-data
/// bodies up to this size (`TLSRUM_MAX_RECORD`), checked at compile time.
pub const MAX_RECORD_PAYLOAD: usize = (1 << 14) + 2048;
