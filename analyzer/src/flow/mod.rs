//! Flows: TCP stream reassembly and the bounded flow table.
pub mod reassembly;
pub mod table;
