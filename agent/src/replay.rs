//! `tlsrum replay`: read capture files, each its own trace, and write
//! records or a summary through the record sinks.

use std::io::{self, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use analyzer::{Analyzer, Config, Stats};
use anyhow::{bail, Context, Result};
use clap::Args;

use crate::exit::Exit;
use crate::pipeline::{self, deliver, pump};
use std::sync::Arc;

use analyzer::client_names::ClientNames;
use analyzer::slice::{Dim, Slicer, Windows};

use crate::sink::html::{HtmlSink, HtmlSlices};
use crate::sink::slices::SliceSink;
use crate::sink::{FanOut, Format, RecordSink, RunEnd};
use crate::source::pcap_file::{self, Opened, PcapFile};
use crate::source::zeek_log::{self, ZeekStats};
use crate::source::Status;

#[derive(Args)]
#[command(group(clap::ArgGroup::new("input").args(["paths", "read"]).required(true).multiple(true)))]
pub struct ReplayArgs {
    /// Capture files (pcap, pcapng) or Zeek ssl.log files (TSV or JSON),
    /// plain, gzip or zstd, told by their first bytes; directories to
    /// search for them; or - for standard input.
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Read this capture, as `tcpdump -r` (repeatable; - for standard
    /// input); read before the PATHs.
    #[arg(short = 'r', long = "read", value_name = "FILE")]
    read: Vec<PathBuf>,
    /// Output: a summary table per server name, or one record per
    /// connection (ndjson, csv; zeek and zeek-json: Zeek's ssl.log, see
    /// docs/zeek.md); with --by or --window, the aggregates by group (and
    /// window) [default: table].
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Each record names its capture (`capture`, the path as given; a last
    /// CSV column), as `grep -H`; the default when several captures are read.
    #[arg(short = 'H', long, conflicts_with = "no_filename")]
    with_filename: bool,
    /// Records do not name their capture, even when several are read.
    #[arg(long)]
    no_filename: bool,
    /// Read this many packets at most, over all captures, as `tcpdump -c`.
    #[arg(short = 'c', long, value_name = "COUNT")]
    count: Option<u64>,
    /// Accepted and ignored, as typed out of tcpdump habit (`-nr x.pcap`):
    /// tlsrum never resolves names.
    #[arg(short = 'n')]
    numeric: bool,
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
    /// Only packets matching this BPF expression (as tcpdump's; checked
    /// before anything is read).
    #[arg(short = 'f', long, value_parser = crate::cli::parse_bpf_filter)]
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
    /// Memory the analyzer's flow state may use (TCP flows with their
    /// reassembly buffers and held records, tombstones of ended
    /// connections, QUIC connections), e.g. 400M or 2G; beyond it the
    /// oldest tombstones are forgotten, then the least recently used flows
    /// finished (records `incomplete`, noted `evicted`), counted as
    /// `memory_evictions` [default: 256M; alias --max-memory].
    #[arg(
        long = "memory-budget",
        alias = "max-memory",
        value_name = "SIZE",
        value_parser = crate::cli::parse_size
    )]
    max_memory: Option<usize>,
    /// Seconds (capture time) after which an idle flow is finished.
    #[arg(long, default_value_t = Config::default().idle_timeout)]
    idle_timeout: f64,
    /// TLS key log (SSLKEYLOGFILE format): lets tlsrum read TLS 1.3
    /// EncryptedExtensions (TCP and QUIC) and say whether 0-RTT data was
    /// accepted and which ALPN protocol the server chose.
    #[arg(long, value_name = "FILE")]
    keylog: Option<PathBuf>,
    /// Also write a self-contained HTML report (charts and tables) to FILE;
    /// `-`: to standard output, instead of the table.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Analysis threads: connections are spread over N analyzers (both
    /// directions, and a QUIC connection's every ID, in one) run by N
    /// threads, one of which also reads the capture; records, aggregates
    /// and counters are those of one thread (README, "Threads") [default:
    /// 1; on 2 idle cores two threads are 1.4-1.7x as fast and use twice
    /// the memory, bench/README.md, "Threads"].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: Option<u16>,
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

/// One input named on the command line or found in a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Input {
    Stdin,
    File(PathBuf),
}

impl Input {
    fn new(path: &Path) -> Self {
        if path == Path::new("-") {
            Input::Stdin
        } else {
            Input::File(path.to_path_buf())
        }
    }

    /// As given on the command line (or found): messages and `capture`.
    fn name(&self) -> String {
        match self {
            Input::Stdin => pcap_file::STDIN_NAME.to_string(),
            Input::File(p) => p.display().to_string(),
        }
    }

    /// A capture or a Zeek ssl.log, told by its first bytes.
    fn open(&self, filter: Option<&str>) -> Result<Opened> {
        match self {
            Input::Stdin => PcapFile::open_input(None, filter),
            Input::File(p) => PcapFile::open_input(Some(p), filter),
        }
    }
}

/// The inputs: `-r` files, then the paths, directories expanded
/// (recursively, sorted). A directory's file is taken when its name says
/// capture (any case) or its first bytes do; the others are reported on
/// stderr, with why, never skipped silently. A path that is no directory
/// is taken as it is: if it cannot be read, reading it says why.
fn inputs(read: &[PathBuf], paths: &[PathBuf]) -> Result<Vec<Input>> {
    let mut out = Vec::new();
    for p in read.iter().chain(paths) {
        if std::fs::metadata(p).is_ok_and(|m| m.is_dir()) {
            scan_dir(p, &mut out)?;
        } else {
            out.push(Input::new(p));
        }
    }
    if out.iter().filter(|i| **i == Input::Stdin).count() > 1 {
        bail!("standard input (-) can be read once only");
    }
    Ok(out)
}

/// `--threads` unless given: one. On a quiet 2-core machine 2 threads are
/// 1.4-1.7x as fast (bench/README.md "Threads"), and the replay tests
/// pass with two as the default (21 test files, tried 29 Nov). But each
/// thread adds its own memory (34 -> 59 MiB peak at two on big.pcap: a default of
/// all cores would be gigabytes on a large host), records finished at the
/// same moment (the end of the capture) come shard by shard rather than
/// oldest first, and a binding `--max-flows`/`--max-memory` can evict
/// other flows: more than one stays a choice the user makes.
const DEFAULT_THREADS: usize = 1;

/// Skipped files named per reason in one line, up to this many.
const SKIPPED_NAMED: usize = 3;

fn scan_dir(dir: &Path, out: &mut Vec<Input>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let (dirs, files): (Vec<_>, Vec<_>) = entries.into_iter().partition(|e| e.is_dir());
    // Reason -> files skipped for it, in order.
    let mut skipped: Vec<(String, Vec<String>)> = Vec::new();
    for f in files {
        let why = if pcap_file::is_capture_name(&f) {
            Ok(())
        } else {
            pcap_file::sniff(&f).or_else(|why| {
                if zeek_log::file::sniff(&f) {
                    Ok(())
                } else {
                    Err(why)
                }
            })
        };
        match why {
            Ok(()) => out.push(Input::File(f)),
            Err(why) => {
                let name = f
                    .file_name()
                    .map_or_else(|| f.display().to_string(), |n| n.to_string_lossy().into());
                match skipped.iter_mut().find(|(w, _)| *w == why) {
                    Some((_, names)) => names.push(name),
                    None => skipped.push((why, vec![name])),
                }
            }
        }
    }
    for (why, names) in skipped {
        let shown = names[..names.len().min(SKIPPED_NAMED)].join(", ");
        let more = match names.len().saturating_sub(SKIPPED_NAMED) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        eprintln!(
            "tlsrum: {}: skipped {} file{}, {why}: {shown}{more}",
            dir.display(),
            names.len(),
            if names.len() == 1 { "" } else { "s" }
        );
    }
    for d in dirs {
        scan_dir(&d, out)?;
    }
    Ok(())
}

pub fn run(args: ReplayArgs) -> Result<ExitCode> {
    // tcpdump's -n: nothing to turn off (see its help).
    let _ = args.numeric;
    // Only one thing can go to standard output.
    let html_to_stdout = args.html.as_deref() == Some(Path::new("-"));
    if let (true, Some(f)) = (html_to_stdout, args.format) {
        bail!(
            "--html - and --format {} both write to standard output: give --html a file",
            f.name()
        );
    }
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
    let files = inputs(&args.read, &args.paths)?;
    if files.is_empty() {
        bail!(
            "no capture files ({}) under {:?}",
            pcap_file::capture_names(),
            args.paths
        );
    }
    let with_filename = args.with_filename || (files.len() > 1 && !args.no_filename);
    let threads = args.threads.map_or(DEFAULT_THREADS, usize::from);
    let cfg = Config {
        max_flows: args.max_flows,
        max_flow_buffer: args.max_flow_buffer,
        max_memory: args.max_memory.unwrap_or(Config::default().max_memory),
        idle_timeout: args.idle_timeout,
        server_ports: args.ports.clone(),
        record_at: args.record_at.into(),
        zeek_view: args.format.is_some_and(Format::is_zeek),
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
    let format = args.format.unwrap_or(Format::Table);
    if format.is_zeek() && !(dims.is_empty() && args.window.is_none()) {
        anyhow::bail!(
            "--format {} writes one row per connection: --by and --window have no Zeek form",
            format.name()
        );
    }
    if html_to_stdout {
        // The report is standard output's: no table besides it.
    } else if dims.is_empty() && args.window.is_none() {
        sink.push(format.stdout_sink(args.top, names.clone(), with_filename)?);
    } else {
        sink.push(Box::new(SliceSink::new(
            Slicer::new(dims.clone(), windows),
            format,
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
    // Inputs that could not be opened, and those read with an error.
    let (mut unread, mut damaged) = (0, 0);
    let mut total = Stats::default();
    // Zeek logs' counters, when any was read.
    let mut zeek: Option<ZeekStats> = None;
    // Packets left to read (-c).
    let mut left = args.count;
    for file in &files {
        if left == Some(0) {
            break;
        }
        let name = file.name();
        let mut source = match file.open(args.filter.as_deref()) {
            Ok(Opened::Capture(s)) => *s,
            Ok(Opened::Text(stream)) => {
                let capture = with_filename.then_some(name.as_str());
                let out = zeek_log::file::read(&name, stream, capture, local.as_ref(), &mut sink)?;
                match zeek_outcome(&name, &out) {
                    Exit::Ok => {}
                    Exit::Damaged => damaged += 1,
                    Exit::Fatal => unread += 1,
                }
                // The table's footer counts them with the TLS-over-TCP connections.
                total.tls_connections += out.stats.rows;
                zeek.get_or_insert_with(ZeekStats::default)
                    .merge(&out.stats);
                continue;
            }
            Err(e) => {
                unread += 1;
                eprintln!("tlsrum: {e:#}");
                continue;
            }
        };
        // Each file is its own trace: session IDs seen in one do not count in another.
        let make = |cfg: &Config| {
            let mut analyzer = Analyzer::new(cfg.clone());
            analyzer.set_local(local.clone());
            analyzer.set_capture(with_filename.then(|| name.clone()));
            analyzer
        };
        if let Some(n) = left {
            source.limit(n);
        }
        let (packets, stats, res) = if threads > 1 {
            replay_sharded(source, threads, &cfg, &make, &mut sink, progress)?
        } else {
            let mut analyzer = make(&cfg);
            let (packets, res) = replay_file(source, &mut analyzer, &mut sink, progress);
            pipeline::finish(&mut analyzer, &mut sink)?;
            (packets, analyzer.stats().clone(), res)
        };
        left = left.map(|n| n.saturating_sub(packets));
        // Never silent: QUIC of versions tlsrum does not decode is named,
        // like a short snap length, once per capture.
        let undecoded = &stats.quic.undecoded_versions;
        if !undecoded.is_empty() {
            eprintln!(
                "tlsrum: {name}: QUIC packets of versions tlsrum does not decode (no record): {}",
                undecoded.describe()
            );
        }
        total.merge(&stats);
        if let Err(e) = res {
            damaged += 1;
            eprintln!("tlsrum: {e:#}");
        }
    }
    if unread == files.len() {
        // Nothing was read: no empty table, no report.
        bail!(
            "nothing could be read ({} input{})",
            unread,
            if unread == 1 { "" } else { "s" }
        );
    }
    let title = match files.as_slice() {
        [one] => one.name(),
        many => format!(
            "{} captures under {}",
            many.len(),
            args.read
                .iter()
                .chain(&args.paths)
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    sink.finish(&RunEnd {
        stats: &total,
        captures: files.len() - unread,
        title: &title,
    })?;
    if total.memory_evictions + total.flows_evicted > 0 {
        eprintln!(
            "tlsrum: {} flows finished early to stay within --memory-budget \
             (memory_evictions), {} beyond --max-flows (flows_evicted): \
             their records are noted `evicted`",
            total.memory_evictions, total.flows_evicted
        );
    }
    if args.stats {
        /// The analyzer's counters as they are, then the Zeek logs'.
        #[derive(serde::Serialize)]
        struct WithZeek<'a> {
            #[serde(flatten)]
            analyzer: &'a Stats,
            #[serde(skip_serializing_if = "Option::is_none")]
            zeek: Option<&'a ZeekStats>,
        }
        let stats = WithZeek {
            analyzer: &total,
            zeek: zeek.as_ref(),
        };
        eprintln!("{}", serde_json::to_string_pretty(&stats)?);
    }
    Ok(if unread + damaged > 0 {
        Exit::Damaged
    } else {
        Exit::Ok
    }
    .into())
}

/// Reads one capture into the analyzer, records written out after each
/// batch of packets; a spinner on a terminal. Returns the packets read.
fn replay_file(
    mut source: PcapFile,
    analyzer: &mut Analyzer,
    sink: &mut dyn RecordSink,
    progress: bool,
) -> (u64, Result<()>) {
    let bar = progress.then(|| spinner(source.name()));
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
    (source.packets(), result)
}

/// Says on standard error what reading a Zeek log met besides its rows,
/// and what it makes of the run: `Fatal` when the input held no header and
/// no row (not a Zeek log at all: unread), `Damaged` when a line was bad.
fn zeek_outcome(name: &str, out: &zeek_log::file::Outcome) -> Exit {
    if !out.saw_header && out.stats.rows == 0 {
        eprintln!(
            "tlsrum: {name}: neither a capture nor a Zeek ssl.log (no #fields header, no row read)"
        );
        return Exit::Fatal;
    }
    if out.stats.dtls_rows > 0 {
        eprintln!(
            "tlsrum: {name}: {} DTLS rows skipped (tlsrum analyses TLS over TCP and QUIC)",
            out.stats.dtls_rows
        );
    }
    if !out.unknown_columns.is_empty() {
        eprintln!(
            "tlsrum: {name}: columns not in Zeek's ssl.log, not read: {}",
            out.unknown_columns.join(", ")
        );
    }
    if out.stats.bad_lines > 0 {
        Exit::Damaged
    } else {
        Exit::Ok
    }
}

/// The progress display of one capture.
fn spinner(name: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new_spinner();
    pb.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} {human_pos} packets ({per_sec})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    pb.set_message(name.to_string());
    pb
}

/// [`replay_file`] and the end of input on `threads` analyzers
/// ([`crate::shard`]), each made by `make` with its share of the flow
/// limits. Returns the packets read and the counters.
fn replay_sharded(
    mut source: PcapFile,
    threads: usize,
    cfg: &Config,
    make: &(dyn Fn(&Config) -> Analyzer + Sync),
    sink: &mut dyn RecordSink,
    progress: bool,
) -> Result<(u64, Stats, Result<()>)> {
    // The limits hold for all shards together.
    let share = Config {
        max_flows: cfg.max_flows.div_ceil(threads),
        max_memory: cfg.max_memory / threads,
        recent_connections: cfg.recent_connections.div_ceil(threads),
        // The shards share one store of session IDs.
        max_session_ids: 1,
        ..cfg.clone()
    };
    let bar = progress.then(|| spinner(source.name()));
    let sharded = crate::shard::replay(
        &mut source,
        threads,
        cfg.max_session_ids,
        &|| make(&share),
        sink,
        &mut |read| {
            if let Some(pb) = &bar {
                pb.set_position(read);
            }
        },
    );
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    if let Some(note) = source.snaplen_note() {
        eprintln!("tlsrum: {note}");
    }
    let sharded = sharded?;
    let res = match sharded.read_error {
        Some(e) => Err(e),
        None => Ok(()),
    };
    Ok((source.packets(), sharded.stats, res))
}
