//! What the live agent and its TC program cost per handshake, measured
//! without a sender: every frame of a capture is run through the loaded
//! ingress program (BPF_PROG_TEST_RUN), and the agent's own loop (ring
//! buffer, analyzer, metrics, stragglers marked done) drains what it sent
//! every `--batch` frames, as `tlsrum live --backend ebpf` would. The
//! kernel reports each run's time; the agent's is this thread's CPU time
//! around its drains. The same frames are then replayed into a second
//! analyzer with the same metrics, for the cost of reading events instead
//! of frames.
//!
//!   cargo run --release -p tlsrum --example live_cost -- CAPTURE [--batch N] [LIVE OPTIONS]
//!   (bench/live's captures: `--all-ports`, as its agent runs)
//!
//! Needs root (BPF). Frames arrive back to back, ~1 µs apart, so caches
//! are warmer than on a host and timestamps closer: compare builds and
//! changes with these figures; bench/live measures the real thing.

use std::cell::Cell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use analyzer::Analyzer;
use anyhow::{bail, Context, Result};
use clap::Parser;
use tlsrum::ebpf::TEST_RUN_MAX_FRAME;
use tlsrum::live::{self, LiveArgs};
use tlsrum::pipeline::{deliver, finish, pump};
use tlsrum::sink::{FanOut, RecordSink, RunEnd};
use tlsrum::source::ebpf::EbpfSource;
use tlsrum::source::pcap_file::PcapFile;
use tlsrum::source::{Captured, Source, Status};

/// The allocator `tlsrum` runs with (agent/src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
struct Cli {
    /// A capture of Ethernet frames (as bench/live's tcpreplay sends).
    capture: PathBuf,
    /// Frames run through the kernel between two drains of the ring.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    batch: u64,
    #[command(flatten)]
    live: LiveArgs,
}

/// This thread's CPU time (user + system).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Counts the records it is handed.
struct Count(Rc<Cell<u64>>);

impl RecordSink for Count {
    fn record(&mut self, _: &analyzer::record::ConnectionRecord) -> Result<()> {
        self.0.set(self.0.get() + 1);
        Ok(())
    }

    fn finish(&mut self, _: &RunEnd<'_>) -> Result<()> {
        Ok(())
    }
}

/// The agent's sinks (the metrics, and `--events` if given), and a count
/// of the records.
fn agent_sinks(args: &LiveArgs, source: &mut dyn Source) -> Result<(FanOut, Rc<Cell<u64>>)> {
    let metrics = live::metrics_for(args, live::server_names(args)?, None, source);
    let mut sinks = live::sinks(args, &metrics, &Default::default())?;
    let count = Rc::new(Cell::new(0));
    sinks.push(Box::new(Count(Rc::clone(&count))));
    Ok((sinks, count))
}

struct Agent {
    source: EbpfSource,
    analyzer: Analyzer,
    sinks: FanOut,
    cpu: Duration,
}

impl Agent {
    /// One turn of the live loop: read the ring, analyze, hand records and
    /// stragglers on.
    fn drain(&mut self) -> Result<()> {
        let start = thread_cpu();
        pump(
            &mut self.source,
            Duration::ZERO,
            &mut self.analyzer,
            None,
            &mut self.sinks,
        )?;
        deliver(&mut self.analyzer, &mut self.source, &mut self.sinks)?;
        self.cpu += thread_cpu() - start;
        Ok(())
    }
}

fn main() -> Result<()> {
    let argv = std::env::args()
        .take(1)
        .chain(["-i".into(), "unattached".into()]);
    let cli = Cli::parse_from(argv.chain(std::env::args().skip(1)));
    let mut source = EbpfSource::unattached(live::ebpf_options(&cli.live))
        .context("loading the TC programs (root and BPF needed)")?;
    let analyzer = Analyzer::new(live::analyzer_config(&cli.live, &source));
    let (sinks, records) = agent_sinks(&cli.live, &mut source)?;
    let mut agent = Agent {
        source,
        analyzer,
        sinks,
        cpu: Duration::ZERO,
    };

    let mut frames = 0u64;
    let mut kernel = Duration::ZERO;
    let mut too_big = 0u64;
    let mut error = None;
    let mut file = PcapFile::open(&cli.capture, None)?;
    let mut each = |c: Captured<'_>| {
        let Captured::Frame { data, .. } = c else {
            return;
        };
        if error.is_some() {
            return;
        }
        if data.len() > TEST_RUN_MAX_FRAME {
            too_big += 1;
            return;
        }
        let cap = agent.source.capture().expect("loaded");
        match cap.test_run_repeat(data, 1) {
            Ok(t) => kernel += t,
            Err(e) => error = Some(e),
        }
        frames += 1;
        if frames.is_multiple_of(cli.batch) {
            if let Err(e) = agent.drain() {
                error = Some(e);
            }
        }
    };
    while file.poll(Duration::ZERO, &mut each)? == Status::Open {}
    if let Some(e) = error {
        return Err(e);
    }
    agent.drain()?;
    let start = thread_cpu();
    finish(&mut agent.analyzer, &mut agent.sinks)?;
    agent.cpu += thread_cpu() - start;
    let records = records.get();
    if records == 0 {
        bail!("no records from {frames} frames: is the capture TLS on the watched ports (--port)?");
    }

    // The same frames replayed into an analyzer with the same sinks, and
    // into one with no sink: what reading events costs over reading
    // frames, and what the metrics cost.
    let (replay_cpu, replayed) = replay(&cli, true)?;
    let (bare_cpu, _) = replay(&cli, false)?;

    let sent = agent
        .source
        .capture()
        .expect("loaded")
        .counters()?
        .into_iter()
        .filter(|(name, _)| ["events_sent", "bytes_sent"].contains(name))
        .map(|(name, v)| format!("{name} {v} ({:.1} a record)", v as f64 / records as f64))
        .collect::<Vec<_>>();
    let per = |d: Duration| d.as_secs_f64() * 1e6 / records as f64;
    println!(
        "{} frames ({} too large for BPF_PROG_TEST_RUN), {} records live, {} replayed",
        frames, too_big, records, replayed
    );
    println!("kernel: {}", sent.join(", "));
    println!(
        "TC program   {:8.3} µs a record   {:6.0} ns a frame   {:.3} s",
        per(kernel),
        kernel.as_secs_f64() * 1e9 / frames as f64,
        kernel.as_secs_f64()
    );
    println!(
        "agent        {:8.3} µs a record   (ring, analyzer, metrics, stragglers)   {:.3} s",
        per(agent.cpu),
        agent.cpu.as_secs_f64()
    );
    println!(
        "replay       {:8.3} µs a record   (same frames from the file, same sinks)   {:.3} s",
        per(replay_cpu),
        replay_cpu.as_secs_f64()
    );
    println!(
        "  no sink    {:8.3} µs a record   (the analyzer alone)   {:.3} s",
        per(bare_cpu),
        bare_cpu.as_secs_f64()
    );
    Ok(())
}

/// Replays the capture into an analyzer as the agent sets it up, with its
/// sinks or none: this thread's CPU time and the records.
fn replay(cli: &Cli, with_sinks: bool) -> Result<(Duration, u64)> {
    let mut file = PcapFile::open(&cli.capture, None)?;
    let mut analyzer = Analyzer::new(live::analyzer_config(&cli.live, &file));
    let (mut sinks, records) = if with_sinks {
        agent_sinks(&cli.live, &mut file)?
    } else {
        let records = Rc::new(Cell::new(0));
        let mut only_count = FanOut::default();
        only_count.push(Box::new(Count(Rc::clone(&records))));
        (only_count, records)
    };
    let start = thread_cpu();
    while pump(&mut file, Duration::ZERO, &mut analyzer, None, &mut sinks)? == Status::Open {}
    finish(&mut analyzer, &mut sinks)?;
    Ok((thread_cpu() - start, records.get()))
}
