//! Output formats for connection records and their aggregates.
pub mod csv;
pub mod ndjson;
pub mod table;
