//! `tlsrum replay`: read capture files, each its own trace, and write
//! records or a summary through the record sinks.

use std::io::{self, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use analyzer::{Analyzer, Config, Stats};
use anyhow::{bail, Context, Result};
use clap::Args;

use crate::pipeline::{self, deliver, pump};
use std::sync::Arc;

use analyzer::client_names::ClientNames;
use analyzer::slice::{Dim, Slicer, Windows};

use crate::sink::html::{HtmlSink, HtmlSlices};
use crate::sink::slices::SliceSink;
use crate::sink::{FanOut, Format, RecordSink, RunEnd};
use crate::source::pcap_file::{self, PcapFile};
use crate::source::Status;

#[derive(Args)]
pub struct ReplayArgs {
    /// Capture files (pcap, pcapng; plain, gzip or zstd) or directories to
    /// search for them.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Output: a summary table per server name, or one record per
    /// connection; with --by or --window, the aggregates by group (and window).
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Aggregate by these dimensions (comma-separated, repeatable): sni,
    /// ja4, client (= ja4_stable), family, version, alpn, transport, server,
    /// role.
    #[arg(long, value_name = "DIM", value_delimiter = ',', value_parser = parse_dim)]
    by: Vec<Dim>,
    /// Aggregate by time window of capture time, aligned to the epoch:
    /// 30s, 5m, 1h, 1d or seconds.
    #[arg(long, value_name = "DURATION", value_parser = analyzer::slice::parse_duration)]
    window: Option<f64>,
    /// CSV of `ja4,name`: client names shown next to fingerprints.
    #[arg(long, value_name = "FILE")]
    ja4_names: Option<PathBuf>,
    /// This host's address or network (repeatable): each record's `role`
    /// is `inbound` (the TLS server is local), `outbound` (the client is)
    /// or `transit`; without it, roles are unknown (null).
    #[arg(long, value_name = "ADDR|CIDR", value_parser = parse_local)]
    local: Vec<String>,
    /// When a TLS-over-TCP connection's record is written: once its
    /// handshake and first use are timed, or at its FIN/RST (lifetime and
    /// bytes after the handshake filled).
    #[arg(long, value_enum, default_value = "handshake")]
    record_at: crate::cli::RecordAt,
    /// Only packets matching this BPF expression (as tcpdump).
    #[arg(long)]
    filter: Option<String>,
    /// Server ports to treat as TLS (repeatable); by default TLS is recognised by content on any port.
    #[arg(long = "port")]
    ports: Vec<u16>,
    /// Server names shown in the table; the rest are folded into "(other)".
    #[arg(long, default_value_t = 25)]
    top: usize,
    /// Flows tracked at once (least recently used evicted beyond, counted).
    #[arg(long, default_value_t = Config::default().max_flows)]
    max_flows: usize,
    /// Out-of-order bytes buffered per flow direction.
    #[arg(long, default_value_t = Config::default().max_flow_buffer)]
    max_flow_buffer: usize,
    /// Memory the flow state (TCP and QUIC together) may use, e.g. 400M or
    /// 2G; beyond it the least recently used flows are finished, counted as
    /// `memory_evictions` [default: 256M].
    #[arg(long, value_name = "SIZE", value_parser = crate::cli::parse_size)]
    max_memory: Option<usize>,
    /// Seconds (capture time) after which an idle flow is finished.
    #[arg(long, default_value_t = Config::default().idle_timeout)]
    idle_timeout: f64,
    /// TLS key log (SSLKEYLOGFILE format): lets tlsrum read TLS 1.3
    /// EncryptedExtensions (TCP and QUIC) and say whether 0-RTT data was
    /// accepted and which ALPN protocol the server chose.
    #[arg(long, value_name = "FILE")]
    keylog: Option<PathBuf>,
    /// Also write a self-contained HTML report (charts and tables) to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Print the analyzer's counters (JSON) to stderr at the end.
    #[arg(long)]
    stats: bool,
    /// Hide the progress display shown on a terminal.
    #[arg(long)]
    quiet: bool,
}

fn parse_local(s: &str) -> Result<String, String> {
    analyzer::local_nets::LocalNets::default().add(s)?;
    Ok(s.to_string())
}

fn parse_dim(s: &str) -> Result<Dim, String> {
    Dim::parse(s.trim()).ok_or_else(|| {
        let all: Vec<&str> = Dim::ALL.iter().map(|d| d.name()).collect();
        format!("`{s}` is not a dimension (one of {})", all.join(", "))
    })
}

/// Expands directories (recursively, sorted) into capture files.
fn capture_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).with_context(|| format!("{}", p.display()))?;
        if meta.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("reading directory {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            entries.sort();
            let (dirs, files): (Vec<_>, Vec<_>) = entries.into_iter().partition(|e| e.is_dir());
            out.extend(files.into_iter().filter(|f| pcap_file::is_capture_name(f)));
            out.extend(capture_files(&dirs)?);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

pub fn run(args: ReplayArgs) -> Result<ExitCode> {
    // A bad names file stops the run before anything is read.
    let names = match &args.ja4_names {
        Some(path) => Some(Arc::new(ClientNames::load(path)?)),
        None => None,
    };
    let mut dims: Vec<Dim> = Vec::new();
    for d in &args.by {
        if !dims.contains(d) {
            dims.push(*d);
        }
    }
    let files = capture_files(&args.paths)?;
    if files.is_empty() {
        bail!(
            "no capture files ({}) under {:?}",
            pcap_file::capture_names(),
            args.paths
        );
    }
    let cfg = Config {
        max_flows: args.max_flows,
        max_flow_buffer: args.max_flow_buffer,
        max_memory: args.max_memory.unwrap_or(Config::default().max_memory),
        idle_timeout: args.idle_timeout,
        server_ports: args.ports.clone(),
        record_at: args.record_at.into(),
        keylog: match &args.keylog {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading key log {}", path.display()))?;
                let log = analyzer::tls::keylog::KeyLog::parse(&text);
                if log.is_empty() {
                    bail!(
                        "{}: no TLS secrets in this key log ({} malformed lines)",
                        path.display(),
                        log.bad_lines
                    );
                }
                Some(std::sync::Arc::new(log))
            }
            None => None,
        },
        ..Config::default()
    };
    let local = (!args.local.is_empty()).then(|| {
        let mut nets = analyzer::local_nets::LocalNets::default();
        for l in &args.local {
            // Checked by clap's parser.
            let _ = nets.add(l);
        }
        nets
    });
    let mut sink = FanOut::default();
    let windows = match args.window {
        Some(secs) => Windows::Fixed(secs),
        None => Windows::None,
    };
    if dims.is_empty() && args.window.is_none() {
        sink.push(args.format.stdout_sink(args.top, names.clone())?);
    } else {
        sink.push(Box::new(SliceSink::new(
            Slicer::new(dims.clone(), windows),
            args.format,
            names.clone(),
        )));
    }
    if let Some(path) = &args.html {
        sink.push(Box::new(HtmlSink::new(
            path.clone(),
            args.top,
            HtmlSlices::new(dims, args.window, names),
        )));
    }
    let progress = !args.quiet && io::stderr().is_terminal();
    let mut failures = 0;
    let mut total = Stats::default();
    for file in &files {
        // Each file is its own trace: session IDs seen in one do not count in another.
        let mut analyzer = Analyzer::new(cfg.clone());
        analyzer.set_local(local.clone());
        let res = replay_file(
            file,
            &mut analyzer,
            &mut sink,
            args.filter.as_deref(),
            progress,
        );
        pipeline::finish(&mut analyzer, &mut sink)?;
        // Never silent: QUIC of versions tlsrum does not decode is named,
        // like a short snap length, once per capture.
        let undecoded = &analyzer.stats().quic.undecoded_versions;
        if !undecoded.is_empty() {
            eprintln!(
                "tlsrum: {}: QUIC packets of versions tlsrum does not decode (no record): {}",
                file.display(),
                undecoded.describe()
            );
        }
        total.merge(analyzer.stats());
        if let Err(e) = res {
            failures += 1;
            eprintln!("tlsrum: {e:#}");
        }
    }
    let title = match files.as_slice() {
        [one] => one.display().to_string(),
        many => format!(
            "{} captures under {}",
            many.len(),
            args.paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    sink.finish(&RunEnd {
        stats: &total,
        captures: files.len(),
        title: &title,
    })?;
    if args.stats {
        eprintln!("{}", serde_json::to_string_pretty(&total)?);
    }
    Ok(if failures > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Reads one capture into the analyzer, records written out after each
/// batch of packets; a spinner on a terminal.
fn replay_file(
    path: &Path,
    analyzer: &mut Analyzer,
    sink: &mut dyn RecordSink,
    filter: Option<&str>,
    progress: bool,
) -> Result<()> {
    let mut source = PcapFile::open(path, filter)?;
    let bar = progress.then(|| {
        let pb = indicatif::ProgressBar::new_spinner();
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {msg} {human_pos} packets ({per_sec})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        pb.set_message(source.name().to_string());
        pb
    });
    let result = loop {
        match pump(&mut source, Duration::ZERO, analyzer, None, sink) {
            Ok(Status::Open) => {
                if let Err(e) = deliver(analyzer, &mut source, sink) {
                    break Err(e);
                }
                if let Some(pb) = &bar {
                    pb.set_position(source.packets());
                }
            }
            Ok(Status::Ended) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    if let Some(note) = source.snaplen_note() {
        eprintln!("tlsrum: {note}");
    }
    result
}
