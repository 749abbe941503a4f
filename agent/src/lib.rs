//! tlsrum, the agent: capture sources, record sinks, the eBPF backend and
//! the `replay` and `live` commands. The `tlsrum` binary (`main.rs`) only
//! parses the command line and calls [`replay::run`] or [`live::run`].
//!
//! Modules, each using only those listed before it:
//! - [`cli`]: argument value parsers;
//! - [`exit`]: the exit status table;
//! - [`generate`]: man pages and shell completions from the command line;
//! - [`ebpf`]: the kernel side's loader, ABI mirror and events;
//! - [`source`]: the `Source` trait and the capture sources (pcap file,
//!   libpcap live, eBPF);
//! - [`sink`]: the `RecordSink` trait and the output formats (NDJSON,
//!   CSV, table, HTML);
//! - [`metrics`]: Prometheus, a record sink too, and the agent's health;
//! - [`pcap_out`] writes `--write-pcap` (`-w`);
//! - [`pipeline`]: source -> analyzer -> sinks, for both commands;
//! - [`replay`], [`live`]: the commands ([`live_zeek`]: `live --zeek-log`).
//!
//! A capture replayed into NDJSON through the library:
//!
//! ```
//! use std::time::Duration;
//! use tlsrum::pipeline::{flush_records, pump};
//! use tlsrum::sink::{ndjson::NdjsonSink, RecordSink, RunEnd};
//! use tlsrum::source::{pcap_file::PcapFile, Status};
//! # fn main() -> anyhow::Result<()> {
//! let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../pcaps/openssl-openssl-tls13-psk.pcapng");
//! let mut source = PcapFile::open(&path, None)?;
//! let mut analyzer = analyzer::Analyzer::new(analyzer::Config::default());
//! let mut sink = NdjsonSink::new(Vec::new());
//! while pump(&mut source, Duration::ZERO, &mut analyzer, None, &mut sink)? == Status::Open {
//!     flush_records(&mut analyzer, &mut sink)?;
//! }
//! analyzer.finish();
//! flush_records(&mut analyzer, &mut sink)?;
//! sink.finish(&RunEnd { stats: analyzer.stats(), captures: 1, title: "psk" })?;
//! let ndjson = String::from_utf8(sink.into_inner())?;
//! assert!(ndjson.lines().all(|l| l.starts_with("{\"ts\":")));
//! assert_eq!(ndjson.lines().count() as u64, analyzer.stats().tls_connections);
//! # Ok(()) }
//! ```

pub mod cli;
pub mod ebpf;
pub mod exit;
pub mod generate;
pub mod host_addrs;
pub mod live;
pub mod live_zeek;
pub mod metrics;
pub mod pcap_out;
pub mod pipeline;
pub mod replay;
pub mod shard;
pub mod sink;
pub mod source;
