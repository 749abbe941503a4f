//! Output formats for connection records and their aggregates.
pub mod csv;
pub mod html;
pub mod ndjson;
pub mod slices;
pub mod table;
