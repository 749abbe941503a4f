//! Output formats for connection records and their aggregates.
pub mod csv;
pub mod html;
mod html_slices;
pub mod ndjson;
pub mod slices;
pub mod table;
pub mod zeek;
