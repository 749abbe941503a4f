//! `tlsrum replay`: read captures through libpcap and print records or a summary.

use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use analyzer::aggregate::Summary;
use analyzer::output::{csv::CsvWriter, ndjson, table};
use analyzer::record::ConnectionRecord;
use analyzer::wire::LinkType;
use analyzer::{Analyzer, Config, Stats};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Format {
    Table,
    Ndjson,
    Csv,
}

#[derive(Args)]
pub struct ReplayArgs {
    /// Capture files (pcap, pcapng) or directories to search for them.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Output: a summary table per server name, or one record per connection.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
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
    /// Seconds (capture time) after which an idle flow is finished.
    #[arg(long, default_value_t = Config::default().idle_timeout)]
    idle_timeout: f64,
    /// TLS key log (SSLKEYLOGFILE format): lets tlsrum read TLS 1.3
    /// EncryptedExtensions (TCP and QUIC) and say whether 0-RTT data was accepted.
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

enum Sink {
    Table(Box<Summary>),
    Ndjson(BufWriter<io::Stdout>, ndjson::NdjsonWriter, Box<Summary>),
    Csv(Box<CsvWriter<BufWriter<io::Stdout>>>, Box<Summary>),
}

impl Sink {
    fn write(&mut self, records: Vec<ConnectionRecord>) -> Result<()> {
        for r in &records {
            match self {
                Sink::Table(s) => s.add(r),
                Sink::Ndjson(w, j, s) => {
                    j.write(w, r)?;
                    s.add(r);
                }
                Sink::Csv(w, s) => {
                    w.write(r)?;
                    s.add(r);
                }
            }
        }
        Ok(())
    }
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
            out.extend(files.into_iter().filter(|f| {
                matches!(f.extension().and_then(|e| e.to_str()), Some("pcap" | "pcapng" | "cap"))
            }));
            out.extend(capture_files(&dirs)?);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

pub fn run(args: ReplayArgs) -> Result<ExitCode> {
    let files = capture_files(&args.paths)?;
    if files.is_empty() {
        bail!("no capture files (.pcap, .pcapng, .cap) under {:?}", args.paths);
    }
    let cfg = Config {
        max_flows: args.max_flows,
        max_flow_buffer: args.max_flow_buffer,
        idle_timeout: args.idle_timeout,
        server_ports: args.ports.clone(),
        keylog: match &args.keylog {
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| format!("reading key log {}", path.display()))?;
                let log = analyzer::tls::keylog::KeyLog::parse(&text);
                if log.is_empty() {
                    bail!("{}: no TLS secrets in this key log ({} malformed lines)", path.display(), log.bad_lines);
                }
                Some(std::sync::Arc::new(log))
            }
            None => None,
        },
        ..Config::default()
    };
    let stdout = || BufWriter::with_capacity(1 << 16, io::stdout());
    let mut sink = match args.format {
        Format::Table => Sink::Table(Box::default()),
        Format::Ndjson => Sink::Ndjson(stdout(), ndjson::NdjsonWriter::default(), Box::default()),
        Format::Csv => Sink::Csv(Box::new(CsvWriter::new(stdout())?), Box::default()),
    };
    let progress = !args.quiet && io::stderr().is_terminal();
    let mut failures = 0;
    let mut total = Stats::default();
    for file in &files {
        // Each file is its own trace: session IDs seen in one do not count in another.
        let mut analyzer = Analyzer::new(cfg.clone());
        let res = replay_file(file, &mut analyzer, &mut sink, args.filter.as_deref(), progress);
        analyzer.finish();
        sink.write(analyzer.take_records())?;
        total.merge(analyzer.stats());
        if let Err(e) = res {
            failures += 1;
            eprintln!("tlsrum: {e:#}");
        }
    }
    match &mut sink {
        Sink::Table(s) => {
            let mut out = io::stdout().lock();
            table::write_table(&mut out, s, args.top)?;
            writeln!(
                out,
                "{} files, {} packets, {} TLS-over-TCP and {} QUIC connections, {} non-TLS flows, {} stream errors, {} reassembly gaps, {} flows evicted",
                files.len(),
                total.packets,
                total.tls_connections,
                total.quic.connections,
                total.non_tls_flows,
                total.stream_errors,
                total.reassembly_gaps,
                total.flows_evicted
            )?;
        }
        Sink::Ndjson(w, _, _) => w.flush()?,
        Sink::Csv(w, _) => w.flush()?,
    }
    if let Some(path) = &args.html {
        let summary = match &sink {
            Sink::Table(s) | Sink::Ndjson(_, _, s) | Sink::Csv(_, s) => s,
        };
        let title = match files.as_slice() {
            [one] => one.display().to_string(),
            many => format!("{} captures under {}", many.len(), args.paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")),
        };
        std::fs::write(path, analyzer::output::html::render(summary, &title, args.top))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.stats {
        eprintln!("{}", serde_json::to_string_pretty(&total)?);
    }
    Ok(if failures > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}


fn replay_file(
    path: &Path,
    analyzer: &mut Analyzer,
    sink: &mut Sink,
    filter: Option<&str>,
    progress: bool,
) -> Result<()> {
    let name = path.display();
    let mut cap = pcap::Capture::from_file(path).with_context(|| format!("{name}: cannot open as pcap or pcapng"))?;
    let dlt = cap.get_datalink();
    let Some(link) = LinkType::from_linktype(dlt.0) else {
        bail!(
            "{name}: link type {} ({}) is not supported; tlsrum reads Ethernet (with VLAN/QinQ), Linux cooked v1/v2, raw IP and BSD loopback",
            dlt.0,
            dlt.get_name().unwrap_or_else(|_| "unknown".into())
        );
    };
    if let Some(f) = filter {
        cap.filter(f, true).with_context(|| format!("{name}: bad --filter expression {f:?}"))?;
    }
    let bar = progress.then(|| {
        let pb = indicatif::ProgressBar::new_spinner();
        pb.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg} {human_pos} packets ({per_sec})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        pb.set_message(name.to_string());
        pb
    });
    let mut n: u64 = 0;
    let result = loop {
        match cap.next_packet() {
            Ok(pkt) => {
                n += 1;
                let ts = pkt.header.ts.tv_sec as f64 + pkt.header.ts.tv_usec as f64 * 1e-6;
                analyzer.push_frame(ts, link, pkt.data);
                if n.is_multiple_of(4096) {
                    sink.write(analyzer.take_records())?;
                    if let Some(pb) = &bar {
                        pb.set_position(n);
                    }
                }
            }
            Err(pcap::Error::NoMorePackets) => break Ok(()),
            Err(e) => break Err(anyhow::anyhow!("{name}: capture is truncated or corrupt after packet {n}: {e}")),
        }
    };
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    result
}
