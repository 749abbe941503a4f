//! `tlsrum live`: analyse live traffic from eBPF (default) or libpcap and
//! serve Prometheus metrics; optionally write records and handshake packets.

use std::cell::RefCell;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use analyzer::client_names::ClientNames;
use analyzer::counters::Counter;
use analyzer::{Analyzer, Config, Stats};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use crate::ebpf::{
    ring_bytes, EbpfOptions, COUNTERS as KERNEL_COUNTERS, DEFAULT_KERNEL_FLOWS, MIN_KERNEL_FLOWS,
};
use crate::host_addrs::HostAddrs;
use crate::metrics::clients::ClientFingerprints;
use crate::metrics::http::Liveness;
use crate::metrics::labels::ServerNames;
use crate::metrics::{self, Metrics, MetricsSink};
use crate::pcap_out::PacketWriter;
use crate::pipeline::{deliver, pump};
use crate::sink::events_file::{EventsFile, EventsFormat};
use crate::sink::top::{self, TopSink, Window};
use crate::sink::{FanOut, RecordSink, RunEnd};
use crate::source::ebpf::EbpfSource;
use crate::source::pcap_live::PcapLive;
use crate::source::{Source, Status};

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub enum Backend {
    /// TC classifier in the kernel: only handshake packets reach user space.
    Ebpf,
    /// libpcap live capture with a BPF filter, for hosts without eBPF.
    Pcap,
}

#[derive(Args, Clone)]
pub struct LiveArgs {
    /// Interface to watch, as `tcpdump -i` (repeatable).
    #[arg(short = 'i', long = "iface", required_unless_present = "zeek_log")]
    pub ifaces: Vec<String>,
    /// Follow this Zeek ssl.log (TSV or JSON) instead of capturing packets,
    /// as `tail -F` (Zeek's rotation and copytruncate followed): each new
    /// row counts in the same metrics (timing ones stay empty: Zeek does
    /// not log times). Roles come from --local only.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["ifaces", "backend", "filter", "write_pcap", "all_ports", "ports", "kernel_flows", "max_payload_per_flow", "buffer_size"])]
    pub zeek_log: Option<PathBuf>,
    /// With --zeek-log: also count the rows already in the file when the
    /// agent starts (by default only rows written after it).
    #[arg(long, requires = "zeek_log")]
    pub zeek_from_start: bool,
    #[arg(long, value_enum, default_value = "ebpf")]
    pub backend: Backend,
    /// Server ports to watch (repeatable).
    #[arg(long = "port", default_values_t = [443u16, 8443])]
    pub ports: Vec<u16>,
    /// Watch every port and recognise TLS by content.
    #[arg(long)]
    pub all_ports: bool,
    /// An address or network counted as this host's besides its
    /// interfaces' (repeatable), e.g. a load balancer's VIP that is on no
    /// interface. Each record's `role` is `inbound` (this host is the TLS
    /// server), `outbound` (the client) or `transit` (neither), from the
    /// addresses of every interface, kept current as they change.
    #[arg(long, value_name = "ADDR|CIDR", value_parser = parse_local)]
    pub local: Vec<String>,
    /// Where to serve /metrics, /healthz and /: HOST:PORT, [IPV6]:PORT,
    /// localhost:PORT, or :PORT (or PORT) for every address of the host.
    // The doc comment is --help's text, where "[IPV6]" is no link.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9853", value_parser = metrics::http::parse_listen)]
    pub metrics: metrics::http::Listen,
    /// Append connection records as NDJSON to FILE (or - for stdout);
    /// SIGHUP reopens FILE (logrotate: move it, then HUP the agent).
    #[arg(long)]
    pub events: Option<String>,
    /// What --events writes: ndjson (the record contract), zeek (Zeek's
    /// ssl.log, TSV; a header block whenever the file is opened empty) or
    /// zeek-json (Zeek's JSON form); see docs/zeek.md.
    #[arg(long, value_enum, default_value_t = EventsFormat::Ndjson, requires = "events")]
    pub events_format: EventsFormat,
    /// A table of the busiest server names on standard output, refreshed
    /// in place like top(1): handshakes/s, resumed %, 0-RTT offers, p50/p95
    /// handshake ms and declined offers over the last interval (plain
    /// tables one after another when standard output is not a terminal).
    #[arg(long)]
    pub top: bool,
    /// Seconds between --top's refreshes (default 2), or between one-line
    /// summaries on standard error (default 10 when it is a terminal,
    /// none otherwise; 0: none).
    #[arg(long, value_name = "SECS")]
    pub summary_interval: Option<f64>,
    /// Write the packets it analysed as pcapng, as `tcpdump -w` (readable
    /// by `tlsrum replay`, tcpdump and Wireshark).
    #[arg(short = 'w', long, value_name = "FILE")]
    pub write_pcap: Option<PathBuf>,
    /// Only packets matching this BPF expression too, as tcpdump's (with
    /// `--backend pcap`; checked before anything is opened).
    #[arg(short = 'f', long, value_parser = crate::cli::parse_bpf_filter)]
    pub filter: Option<String>,
    /// Server names with a `server_name` label value of their own besides
    /// --server-names-file's: the N busiest, kept by a heavy-hitters sketch
    /// (the rest "other"; docs/running.md has the series budget)
    /// [default: 20, or 0 with --server-names-file].
    #[arg(long, value_name = "N")]
    pub top_server_names: Option<usize>,
    /// Server names (one a line, `#` comments) that always have a
    /// `server_name` value of their own: with the same file and the default
    /// --top-server-names 0, every host folds the same names into "other".
    #[arg(long, value_name = "FILE")]
    pub server_names_file: Option<PathBuf>,
    /// Client fingerprints (ja4_stable) with a `ja4_stable` label value of their own: the
    /// busiest N, admitted by a heavy-hitters sketch; the rest "other".
    #[arg(long, default_value_t = 20)]
    pub top_clients: usize,
    /// CSV of `ja4,name`: a `client` label with the name beside each
    /// fingerprint's `ja4_stable` (as `replay --ja4-names`).
    #[arg(long, value_name = "FILE")]
    pub ja4_names: Option<PathBuf>,
    /// Replace server names in labels by a salted SHA-256 prefix.
    #[arg(long, value_name = "SALT")]
    pub hash_server_names: Option<String>,
    /// Seconds without a packet after which a flow is finished.
    #[arg(long, default_value_t = 30.0)]
    pub idle_timeout: f64,
    /// When a TLS-over-TCP connection's record is written: once its
    /// handshake and first use are timed, or at its FIN/RST (lifetime and
    /// bytes after the handshake filled; held records count in
    /// --memory-budget and --max-flows).
    #[arg(long, value_enum, default_value = "handshake")]
    pub record_at: crate::cli::RecordAt,
    /// Stop after this many seconds (default: until SIGINT/SIGTERM).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Flows tracked at once (least recently used evicted beyond, counted).
    #[arg(long, default_value_t = Config::default().max_flows)]
    pub max_flows: usize,
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
    pub max_memory: Option<usize>,
    /// Per-direction payload bytes the kernel forwards for a flow whose TLS
    /// records it cannot follow (not TLS, reordered before the hook; eBPF backend).
    #[arg(long, default_value_t = 256 * 1024)]
    pub max_payload_per_flow: u32,
    /// Flows the kernel follows at once (eBPF backend; its LRU flow map, about
    /// 200 bytes of kernel memory a flow): past this, the least recently used are evicted, and
    /// none of their application data leaves the kernel afterwards
    /// (`tlsrum_kernel_midstream_flows_total`). Raise it on hosts with more
    /// concurrent connections.
    #[arg(long, default_value_t = DEFAULT_KERNEL_FLOWS, value_parser = clap::value_parser!(u32).range(i64::from(MIN_KERNEL_FLOWS)..))]
    pub kernel_flows: u32,
    /// Kernel memory between the capture and the agent, e.g. 64M (as
    /// tcpdump -B): the eBPF ring buffer (rounded up to a power of two) or
    /// libpcap's buffer on each interface. Bursts wait here while the agent
    /// is busy or waits for a CPU; past it packets are lost, counted in
    /// `tlsrum_drops_total` (`ringbuf_full`, `pcap_dropped`) [default: 32M].
    #[arg(long, value_name = "SIZE", value_parser = crate::cli::parse_buffer_size)]
    pub buffer_size: Option<usize>,
}

impl LiveArgs {
    /// `--buffer-size`, or its default.
    pub fn buffer_bytes(&self) -> usize {
        self.buffer_size
            .unwrap_or(crate::source::DEFAULT_BUFFER_BYTES)
    }
}

fn parse_local(s: &str) -> Result<String, String> {
    analyzer::local_nets::LocalNets::default().add(s)?;
    Ok(s.to_string())
}

pub fn wall_clock() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn open_source(args: &LiveArgs) -> Result<Box<dyn Source>> {
    match args.backend {
        Backend::Pcap => Ok(Box::new(PcapLive::open(
            &args.ifaces,
            &args.ports,
            args.all_ports,
            args.filter.as_deref(),
            args.buffer_bytes(),
        )?)),
        Backend::Ebpf => Ok(Box::new(EbpfSource::open(ebpf_options(args))?)),
    }
}

/// The eBPF backend's settings from the command line.
pub fn ebpf_options(args: &LiveArgs) -> EbpfOptions {
    EbpfOptions {
        ifaces: args.ifaces.clone(),
        ports: args.ports.clone(),
        all_ports: args.all_ports,
        quic: true,
        max_payload_per_dir: args.max_payload_per_flow,
        kernel_flows: args.kernel_flows,
        // parse_buffer_size keeps it within 1 GiB.
        ringbuf_bytes: u32::try_from(args.buffer_bytes()).unwrap_or(1 << 30),
        ..EbpfOptions::default()
    }
}

/// The `server_name` bound: --server-names-file and --top-server-names.
pub fn server_names(args: &LiveArgs) -> Result<ServerNames> {
    let allowed = match &args.server_names_file {
        Some(path) => ServerNames::load_allowed(path)?,
        None => Vec::new(),
    };
    let top = args
        .top_server_names
        .unwrap_or(if args.server_names_file.is_some() {
            0
        } else {
            20
        });
    Ok(ServerNames::new(top, args.hash_server_names.clone()).with_allowed(allowed))
}

/// The metrics `/metrics` serves, with every known counter's series.
pub fn metrics_for(
    args: &LiveArgs,
    names: ServerNames,
    client_names: Option<Arc<ClientNames>>,
    source: &mut dyn Source,
) -> Arc<Mutex<Metrics>> {
    let mut metrics = Metrics::new(
        names,
        ClientFingerprints::new(args.top_clients).with_names(client_names),
        &known_counters(source),
    );
    metrics.set_backend(match args.backend {
        Backend::Ebpf => "ebpf",
        Backend::Pcap => "pcap",
    });
    let buffer = match args.backend {
        Backend::Ebpf => ring_bytes(ebpf_options(args).ringbuf_bytes).map_or(0, u64::from),
        Backend::Pcap => args.buffer_bytes() as u64,
    };
    metrics.set_capture_buffer(buffer);
    Arc::new(Mutex::new(metrics))
}

/// The analyzer's settings from the command line, for `source`.
pub fn analyzer_config(args: &LiveArgs, source: &dyn Source) -> Config {
    Config {
        server_ports: if args.all_ports {
            Vec::new()
        } else {
            args.ports.clone()
        },
        idle_timeout: args.idle_timeout,
        max_flows: args.max_flows,
        max_memory: args.max_memory.unwrap_or(Config::default().max_memory),
        report_stragglers: source.wants_stragglers(),
        record_at: args.record_at.into(),
        zeek_view: args.events.is_some() && args.events_format.is_zeek(),
        ..Config::default()
    }
}

/// The counters whose series /metrics shows from the start: the
/// analyzer's, the kernel's whatever the backend (dashboards query the
/// ring-buffer metrics on every host: zero without eBPF), the source's.
fn known_counters(source: &mut dyn Source) -> Vec<Counter> {
    let mut known = metrics::analyzer_counters(&Stats::default());
    known.extend(KERNEL_COUNTERS.iter().map(|k| k.counter(0)));
    known.extend(source.counters());
    known
}

/// Where records go: the metrics, and NDJSON to `--events`.
pub fn sinks(
    args: &LiveArgs,
    metrics: &Arc<Mutex<Metrics>>,
    reopen: &Arc<AtomicBool>,
) -> Result<FanOut> {
    let mut sinks = FanOut::default();
    sinks.push(Box::new(MetricsSink(Arc::clone(metrics))));
    match args.events.as_deref() {
        None => {}
        Some("-") => sinks.push(args.events_format.sink(BufWriter::new(io::stdout()), true)),
        Some(path) => sinks.push(Box::new(EventsFile::open(
            Path::new(path),
            args.events_format,
            Arc::clone(reopen),
        )?)),
    }
    Ok(sinks)
}

/// How often the terminal gets a summary line or a --top table, if at all.
pub(crate) fn show_every(args: &LiveArgs) -> Option<Duration> {
    let default = if args.top {
        Some(2.0)
    } else if io::stderr().is_terminal() {
        Some(10.0)
    } else {
        None
    };
    args.summary_interval
        .or(default)
        .filter(|s| *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
}

/// Rows of the terminal on standard output (24 if it does not say).
fn terminal_rows() -> usize {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ fills the winsize it is given, nothing else.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    if ok && size.ws_row > 0 {
        usize::from(size.ws_row)
    } else {
        24
    }
}

/// Shows the interval that just ended: --top's table, or the summary line.
pub(crate) fn show(
    args: &LiveArgs,
    window: &RefCell<Window>,
    secs: f64,
    flows: usize,
) -> Result<()> {
    let (rows, total) = window.borrow_mut().take();
    if !args.top {
        eprintln!("{}", top::summary_line(&total, rows.len(), secs, flows));
        return Ok(());
    }
    let mut out = io::stdout().lock();
    let title = match &args.zeek_log {
        Some(p) => format!("tlsrum live following {}", p.display()),
        None => format!(
            "tlsrum live on {} ({:?}), {flows} flows",
            args.ifaces.join(", "),
            args.backend
        ),
    };
    if out.is_terminal() {
        // Home and clear, then the table cut to the screen.
        let table = top::table(
            &title,
            &rows,
            &total,
            secs,
            terminal_rows().saturating_sub(4).max(1),
        );
        write!(out, "\x1b[H\x1b[2J{table}")?;
    } else {
        let table = top::table(&title, &rows, &total, secs, usize::MAX);
        writeln!(out, "{table}")?;
    }
    out.flush()?;
    Ok(())
}

/// mimalloc's `mi_option_purge_delay` (mimalloc.h's `mi_option_e`; the
/// Rust bindings name no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// A live agent's peak memory is what a fleet sizes hosts by: freed pages
/// go back to the OS at once instead of after mimalloc's default 10 ms.
/// Under a flood that delay let a live agent's peak swing by ~60 MiB from
/// run to run (331-364 MiB with it at 0, 344-420 MiB without, in
/// agent/tests/flood_memory.rs). Replay keeps the default: it is faster
/// there and its peak is not a service's.
fn return_freed_memory_promptly() {
    // SAFETY: sets a process-wide allocator option; no memory is touched.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

pub fn run(args: LiveArgs) -> Result<ExitCode> {
    // The kernel side filters by --port only: a BPF expression needs libpcap.
    if args.filter.is_some() && args.backend == Backend::Ebpf {
        bail!("--filter (-f) needs --backend pcap: the eBPF backend selects packets by --port in the kernel");
    }
    // A bad names file stops the agent before it attaches anything.
    let client_names = match &args.ja4_names {
        Some(path) => Some(Arc::new(ClientNames::load(path)?)),
        None => None,
    };
    let names = server_names(&args)?;
    return_freed_memory_promptly();
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing signal handlers")?;
    }
    // SIGHUP reopens --events (and no longer ends the agent).
    let reopen = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&reopen))
        .context("installing signal handlers")?;
    if let Some(path) = args.zeek_log.clone() {
        let follow = crate::live_zeek::Follow {
            names,
            client_names,
            stop,
            reopen,
        };
        return crate::live_zeek::run(&args, &path, follow);
    }
    let mut host = HostAddrs::new(&args.local)?;
    let mut source = open_source(&args)?;
    let metrics = metrics_for(&args, names, client_names, &mut *source);
    let liveness = Arc::new(Liveness::default());
    let bound = metrics::http::serve(
        &args.metrics,
        Arc::clone(&metrics),
        Arc::clone(&liveness),
        Arc::clone(&stop),
    )?;
    if args.top && args.events.as_deref() == Some("-") {
        anyhow::bail!("--top and --events - both write to standard output: give --events a file");
    }
    let mut sink = sinks(&args, &metrics, &reopen)?;
    let show_every = show_every(&args);
    let window = Rc::new(RefCell::new(Window::default()));
    if show_every.is_some() {
        sink.push(Box::new(TopSink(Rc::clone(&window))));
    }
    let mut last_show = Instant::now();
    let mut pcap_out = match &args.write_pcap {
        Some(path) => Some(PacketWriter::create(path, &source.link_types())?),
        None => None,
    };
    let mut analyzer = Analyzer::new(analyzer_config(&args, &*source));
    analyzer.set_local(Some(host.current().clone()));
    eprintln!(
        "tlsrum: watching {} with the {:?} backend; metrics on http://{}/metrics",
        args.ifaces.join(", "),
        args.backend,
        bound
    );
    let started = Instant::now();
    let mut last_tick = Instant::now();
    let mut result = Ok(());
    while !stop.load(Ordering::Relaxed) {
        if args
            .duration
            .is_some_and(|d| started.elapsed().as_secs_f64() >= d)
        {
            break;
        }
        match pump(
            &mut *source,
            Duration::from_millis(100),
            &mut analyzer,
            pcap_out.as_mut(),
            &mut sink,
        ) {
            Ok(Status::Open) => {}
            Ok(Status::Ended) => break,
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        // Before records go out: their role reads the addresses as they are.
        if let Some(nets) = host.refresh(last_tick.elapsed() >= Duration::from_secs(1)) {
            analyzer.set_local(Some(nets.clone()));
        }
        deliver(&mut analyzer, &mut *source, &mut sink)?;
        liveness.tick();
        if last_tick.elapsed() >= Duration::from_secs(1) {
            last_tick = Instant::now();
            analyzer.tick(wall_clock());
            deliver(&mut analyzer, &mut *source, &mut sink)?;
            let counters = source.counters();
            if let Ok(mut m) = metrics.lock() {
                m.health(
                    analyzer.stats(),
                    analyzer.active_flows(),
                    analyzer.memory_used(),
                );
                m.counters(&counters);
            }
            sink.flush()?;
            let mut problem = source.check_interfaces().err().map(|e| format!("{e:#}"));
            if let Some(p) = &problem {
                eprintln!("tlsrum: {p}");
            }
            let missing = source.missing_interfaces();
            if problem.is_none() && !missing.is_empty() {
                problem = Some(format!(
                    "not capturing on {} (gone; re-attached when back)",
                    missing.join(", ")
                ));
            }
            liveness.beat(problem);
            if show_every.is_some_and(|every| last_show.elapsed() >= every) {
                let secs = last_show.elapsed().as_secs_f64();
                last_show = Instant::now();
                show(&args, &window, secs, analyzer.active_flows())?;
            }
        }
    }
    liveness.stopped();
    // Flush: connections still open are reported as they stand.
    while !analyzer.finish_some(4096) {
        deliver(&mut analyzer, &mut *source, &mut sink)?;
    }
    deliver(&mut analyzer, &mut *source, &mut sink)?;
    if let Ok(mut m) = metrics.lock() {
        m.health(
            analyzer.stats(),
            analyzer.active_flows(),
            analyzer.memory_used(),
        );
    }
    let title = args.ifaces.join(", ");
    sink.finish(&RunEnd {
        stats: analyzer.stats(),
        captures: 0,
        title: &title,
    })?;
    if let Some(w) = pcap_out.take() {
        w.finish()?;
    }
    stop.store(true, Ordering::Relaxed);
    source.close()?;
    result.map(|_| ExitCode::SUCCESS)
}
