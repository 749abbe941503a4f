//! Flows: TCP stream reassembly, the bounded flow table and the tombstones
//! of connections that left it.
pub mod reassembly;
pub mod table;
pub mod tombstone;
