//! `tlsrum live`: analyse live traffic from eBPF (default) or libpcap and
//! serve Prometheus metrics; optionally write records and handshake packets.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use analyzer::output::ndjson;
use analyzer::record::ConnectionRecord;
use analyzer::wire::{LinkType, Packet};
use analyzer::{Analyzer, Config, Endpoint};
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use crate::metrics::{Metrics, ServerNames};
use crate::pcap_out::PacketWriter;

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub enum Backend {
    /// TC classifier in the kernel: only handshake packets reach user space.
    Ebpf,
    /// libpcap live capture with a BPF filter, for hosts without eBPF.
    Pcap,
}

#[derive(Args, Clone)]
pub struct LiveArgs {
    /// Interface to watch (repeatable).
    #[arg(long = "iface", required = true)]
    pub ifaces: Vec<String>,
    #[arg(long, value_enum, default_value = "ebpf")]
    pub backend: Backend,
    /// Server ports to watch (repeatable).
    #[arg(long = "port", default_values_t = [443u16, 8443])]
    pub ports: Vec<u16>,
    /// Watch every port and recognise TLS by content.
    #[arg(long)]
    pub all_ports: bool,
    /// Where to serve /metrics.
    #[arg(long, default_value = "127.0.0.1:9853")]
    pub metrics: SocketAddr,
    /// Write connection records as NDJSON to FILE (or - for stdout).
    #[arg(long)]
    pub events: Option<String>,
    /// Write the captured handshake packets as pcapng (readable by `tlsrum replay`).
    #[arg(long)]
    pub write_pcap: Option<PathBuf>,
    /// Distinct server_name label values before the rest become "other".
    #[arg(long, default_value_t = 20)]
    pub top_server_names: usize,
    /// Replace server names in labels by a salted SHA-256 prefix.
    #[arg(long, value_name = "SALT")]
    pub hash_server_names: Option<String>,
    /// Seconds without a packet after which a flow is finished.
    #[arg(long, default_value_t = 30.0)]
    pub idle_timeout: f64,
    /// Stop after this many seconds (default: until SIGINT/SIGTERM).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Per-direction payload bytes the kernel forwards for a flow whose TLS
    /// records it cannot follow (not TLS, reordered before the hook; eBPF backend).
    #[arg(long, default_value_t = 256 * 1024)]
    pub max_payload_per_flow: u32,
}

/// One captured unit: a frame (pcap) or a decoded packet (eBPF).
pub enum Captured<'a> {
    Frame { ts: f64, link: LinkType, data: &'a [u8] },
    Packet { ts: f64, packet: Packet<'a> },
}

/// A live packet source.
pub trait Source {
    /// Waits up to `timeout` and hands over what arrived.
    fn poll(&mut self, timeout: Duration, f: &mut dyn FnMut(Captured<'_>)) -> Result<()>;
    /// The analyzer is done with these flows: stop sending them if possible.
    fn finished(&mut self, _flows: &[(Endpoint, Endpoint)]) {}
    /// Cumulative source-side counters (kernel events and drops by reason).
    fn counters(&mut self) -> Vec<(String, u64)> {
        Vec::new()
    }
    /// Link types of the interfaces, for --write-pcap.
    fn link_types(&self) -> Vec<LinkType>;
    /// Re-attach interfaces that went away and came back.
    fn check_interfaces(&mut self) -> Result<()> {
        Ok(())
    }
    /// Detach from the kernel cleanly.
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

pub fn wall_clock() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

fn serve_metrics(addr: SocketAddr, metrics: Arc<Mutex<Metrics>>, stop: Arc<AtomicBool>) -> Result<()> {
    let server = tiny_http::Server::http(addr).map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e}"))?;
    std::thread::Builder::new().name("metrics".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Ok(Some(req)) = server.recv_timeout(Duration::from_millis(200)) else { continue };
            let (code, body, ctype) = if req.url().starts_with("/metrics") {
                let body = metrics.lock().map(|m| m.encode()).unwrap_or_default();
                (200, body, "application/openmetrics-text; version=1.0.0; charset=utf-8")
            } else {
                (404, "see /metrics\n".to_string(), "text/plain")
            };
            let header = tiny_http::Header::from_bytes("Content-Type", ctype).expect("static header");
            let _ = req.respond(tiny_http::Response::from_string(body).with_status_code(code).with_header(header));
        }
    })?;
    Ok(())
}

fn open_source(args: &LiveArgs) -> Result<Box<dyn Source>> {
    match args.backend {
        Backend::Pcap => Ok(Box::new(crate::pcap_live::PcapSource::open(&args.ifaces, &args.ports, args.all_ports)?)),
        Backend::Ebpf => crate::live_ebpf::open(args),
    }
}

pub fn run(args: LiveArgs) -> Result<std::process::ExitCode> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing signal handlers")?;
    }
    let mut source = open_source(&args)?;
    let metrics = Arc::new(Mutex::new(Metrics::new(ServerNames::new(args.top_server_names, args.hash_server_names.clone()))));
    serve_metrics(args.metrics, Arc::clone(&metrics), Arc::clone(&stop))?;
    let mut events: Option<Box<dyn Write>> = match args.events.as_deref() {
        None => None,
        Some("-") => Some(Box::new(BufWriter::new(io::stdout()))),
        Some(path) => Some(Box::new(BufWriter::new(File::create(path).with_context(|| format!("creating {path}"))?))),
    };
    let mut pcap_out = match &args.write_pcap {
        Some(path) => Some(PacketWriter::create(path, &source.link_types())?),
        None => None,
    };
    let mut analyzer = Analyzer::new(Config {
        server_ports: if args.all_ports { Vec::new() } else { args.ports.clone() },
        idle_timeout: args.idle_timeout,
        report_finished_flows: true,
        ..Config::default()
    });
    eprintln!(
        "tlsrum: watching {} with the {:?} backend; metrics on http://{}/metrics",
        args.ifaces.join(", "),
        args.backend,
        args.metrics
    );
    let started = Instant::now();
    let mut last_tick = Instant::now();
    let mut result = Ok(());
    while !stop.load(Ordering::Relaxed) {
        if args.duration.is_some_and(|d| started.elapsed().as_secs_f64() >= d) {
            break;
        }
        let polled = source.poll(Duration::from_millis(100), &mut |c| match c {
            Captured::Frame { ts, link, data } => {
                if let Some(w) = pcap_out.as_mut() {
                    w.frame(link, ts, data);
                }
                analyzer.push_frame(ts, link, data);
            }
            Captured::Packet { ts, packet } => {
                if let Some(w) = pcap_out.as_mut() {
                    w.packet(ts, &packet);
                }
                analyzer.push_packet(ts, &packet);
            }
        });
        if let Err(e) = polled {
            result = Err(e);
            break;
        }
        deliver(&mut analyzer, &mut *source, &metrics, events.as_mut())?;
        if last_tick.elapsed() >= Duration::from_secs(1) {
            last_tick = Instant::now();
            analyzer.tick(wall_clock());
            deliver(&mut analyzer, &mut *source, &metrics, events.as_mut())?;
            let counters = source.counters();
            if let Ok(mut m) = metrics.lock() {
                m.health(analyzer.stats(), analyzer.active_flows());
                m.kernel(&counters);
            }
            if let Some(w) = events.as_mut() {
                w.flush()?;
            }
            if let Err(e) = source.check_interfaces() {
                eprintln!("tlsrum: {e:#}");
            }
        }
    }
    // Flush: connections still open are reported as they stand.
    analyzer.finish();
    deliver(&mut analyzer, &mut *source, &metrics, events.as_mut())?;
    if let Ok(mut m) = metrics.lock() {
        m.health(analyzer.stats(), analyzer.active_flows());
    }
    if let Some(w) = events.as_mut() {
        w.flush()?;
    }
    if let Some(w) = pcap_out.take() {
        w.finish()?;
    }
    stop.store(true, Ordering::Relaxed);
    source.close()?;
    result.map(|_| std::process::ExitCode::SUCCESS)
}

fn deliver(
    analyzer: &mut Analyzer,
    source: &mut dyn Source,
    metrics: &Arc<Mutex<Metrics>>,
    events: Option<&mut Box<dyn Write>>,
) -> Result<()> {
    let records: Vec<ConnectionRecord> = analyzer.take_records();
    let finished = analyzer.take_finished_flows();
    if !finished.is_empty() {
        source.finished(&finished);
    }
    if records.is_empty() {
        return Ok(());
    }
    if let Ok(mut m) = metrics.lock() {
        for r in &records {
            m.record(r);
        }
    }
    if let Some(w) = events {
        for r in &records {
            ndjson::write_record(w, r)?;
        }
    }
    Ok(())
}
