//! `delayline`: a wide-area link for tests, on a kernel without netem.
//!
//! Two network namespaces, A and B, each get a TUN device (`dl0` by default)
//! with a point-to-point address whose peer is the other side. A is reachable
//! from B only through the devices, and this process, sitting in the root
//! namespace with both TUN descriptors, forwards the raw IP packets between
//! them after a per-direction delay (optionally with jitter and loss). The
//! kernels' own TCP stacks talk end to end; only the wire is slow.
//!
//! ```text
//! delayline --ns-a cli --ns-b srv --create-ns --rtt 100     # prints "ready"
//! ip netns exec srv nginx ...; ip netns exec cli curl https://198.18.0.2/
//! ```
//!
//! Release times come from a timer heap; the thread sleeps in ppoll (1 ns
//! timer slack, SCHED_FIFO when allowed) until shortly before the earliest
//! release and busy-polls the rest, so a packet leaves within microseconds of
//! its deadline. SIGINT/SIGTERM end it: the TUN devices vanish with their
//! descriptors, namespaces it created are deleted, and statistics (and, with
//! `--log`, one line per packet) are written.

mod line;
mod sys;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Parser;

use line::{Admit, Dir, DirConfig, Line};

#[derive(Parser, Debug)]
#[command(
    name = "delayline",
    version,
    about = "Delay line between two network namespaces through TUN devices"
)]
struct Args {
    /// Network namespace of side A (the client side, by convention).
    #[arg(long)]
    ns_a: String,
    /// Network namespace of side B.
    #[arg(long)]
    ns_b: String,
    /// Create both namespaces (they must not exist) and delete them on exit.
    #[arg(long)]
    create_ns: bool,
    /// Address of side A (its peer is --addr-b).
    #[arg(long, default_value = "198.18.0.1")]
    addr_a: String,
    /// Address of side B.
    #[arg(long, default_value = "198.18.0.2")]
    addr_b: String,
    /// Name of the TUN device in each namespace.
    #[arg(long, default_value = "dl0")]
    ifname: String,
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// Round-trip time in ms, split evenly between the directions.
    #[arg(long, default_value_t = 0.0)]
    rtt: f64,
    /// One-way delay A -> B in ms (overrides half of --rtt).
    #[arg(long)]
    delay_ab: Option<f64>,
    /// One-way delay B -> A in ms (overrides half of --rtt).
    #[arg(long)]
    delay_ba: Option<f64>,
    /// Each packet's one-way delay is drawn uniformly from delay ± jitter (ms).
    #[arg(long, default_value_t = 0.0)]
    jitter: f64,
    /// Let jitter reorder packets (default: each direction stays FIFO).
    #[arg(long)]
    reorder: bool,
    /// Percentage of packets dropped, each direction.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Seed for loss and jitter.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write one CSV line per packet (direction, length, FNV-1a hash of the
    /// bytes, TCP/UDP ports, arrival, deadline and release in CLOCK_REALTIME
    /// ns) on exit.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Write one CSV line per stall of this line's thread (`from_ns,to_ns`,
    /// CLOCK_REALTIME) on exit: a wake-up more than 100 µs after the time
    /// it asked for, whether from a sleep or a busy-poll, or a packet's
    /// write that took more than 100 µs. The thread did not run then (the
    /// host took the virtual CPU, or an interrupt did), so a packet due
    /// then left late through no fault of the line's.
    #[arg(long)]
    stall_log: Option<PathBuf>,
    /// Packets kept for --log, and stalls for --stall-log (the rest are
    /// counted, not logged).
    #[arg(long, default_value_t = 1_000_000)]
    log_limit: usize,
    /// Write the exit statistics (JSON) here instead of stderr.
    #[arg(long)]
    stats: Option<PathBuf>,
    /// Busy-poll this long before each deadline instead of sleeping (µs).
    /// A wake-up from sleep can come late by hundreds of µs on a busy box
    /// whose kernel is not preemptible; busy-polling cannot.
    #[arg(long, default_value_t = 1000)]
    spin_us: u64,
    /// Do not ask for SCHED_FIFO.
    #[arg(long)]
    no_realtime: bool,
    /// Keep every CPU from halting while the line runs: a busy loop at
    /// SCHED_IDLE on each (it takes only time nothing else wants). On a VM
    /// whose idle vCPUs halt, the line otherwise wakes late for a packet
    /// that comes while it sleeps, and stamps its arrival that late.
    #[arg(long)]
    keep_awake: bool,
}

fn ms_to_ns(ms: f64) -> Result<u64> {
    if !(0.0..=3_600_000.0).contains(&ms) {
        bail!("delay {ms} ms out of range");
    }
    Ok((ms * 1e6).round() as u64)
}

fn netns_path(name: &str) -> PathBuf {
    Path::new("/run/netns").join(name)
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("run ip (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Namespaces this process created, deleted when it is dropped (also on error).
struct CreatedNs(Vec<String>);

impl Drop for CreatedNs {
    fn drop(&mut self) {
        for ns in self.0.drain(..).rev() {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                eprintln!("delayline: {e:#}");
            }
        }
    }
}

struct Side {
    tun: OwnedFd,
}

fn setup_side(args: &Args, ns: &str, addr: &str, peer: &str) -> Result<Side> {
    let tun = sys::open_tun_in(&netns_path(ns), &args.ifname)?;
    let mtu = args.mtu.to_string();
    ip(&["-n", ns, "link", "set", "lo", "up"])?;
    let v6 = addr.contains(':');
    let mut add = vec![
        "-n",
        ns,
        "addr",
        "add",
        addr,
        "peer",
        peer,
        "dev",
        &args.ifname,
    ];
    if v6 {
        // Usable at once: duplicate address detection would hold the
        // address tentative for a second on a link that has no duplicates.
        add.push("nodad");
    }
    ip(&add)?;
    ip(&["-n", ns, "link", "set", &args.ifname, "mtu", &mtu, "up"])?;
    if v6 {
        // An IPv6 point-to-point address gets no route to its peer (IPv4's
        // does): without one the peer is unreachable.
        ip(&[
            "-n",
            ns,
            "-6",
            "route",
            "replace",
            peer,
            "dev",
            &args.ifname,
        ])?;
    }
    // Cached per-destination TCP metrics would carry one run's RTT and
    // ssthresh into the next; every connection should start from scratch.
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            "net.ipv4.tcp_no_metrics_save=1",
        ])
        .output()
        .context("sysctl in namespace")?;
    if !out.status.success() {
        eprintln!(
            "delayline: warning: tcp_no_metrics_save in {ns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(Side { tun })
}

/// One forwarded packet, for --log.
struct LogEntry {
    dir: Dir,
    len: u32,
    hash: u32,
    sport: u16,
    dport: u16,
    arrived: u64,
    deadline: u64,
    released: u64,
}

/// TCP/UDP source and destination ports of a raw IPv4/IPv6 packet (0 if
/// not TCP/UDP or an IPv6 extension header comes first), for --log.
fn ports(pkt: &[u8]) -> (u16, u16) {
    let l4 = match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 && matches!(pkt[9], 6 | 17) => {
            Some(((pkt[0] & 0x0f) as usize) * 4)
        }
        Some(6) if pkt.len() >= 40 && matches!(pkt[6], 6 | 17) => Some(40),
        _ => None,
    };
    match l4.and_then(|o| pkt.get(o..o + 4)) {
        Some(p) => (
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        ),
        None => (0, 0),
    }
}

fn fnv1a(data: &[u8]) -> u32 {
    data.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    })
}

#[derive(Default)]
struct DirStats {
    forwarded: u64,
    lost: u64,
    queue_full: u64,
    write_errors: u64,
    /// Release minus deadline, ns.
    late_sum: u64,
    late_max: u64,
    /// Histogram of lateness in 10 µs buckets (last bucket: >= 10 ms).
    late_hist: Vec<u64>,
}

/// A wake-up this much later than asked, or a write this long, is a stall
/// of the line's thread: a busy-poll's ppoll returns within a few µs and a
/// write runs the peer's receive path in tens, so this is far beyond both.
const STALL_NS: u64 = 100_000;

/// The line thread's stalls: counted, and the first `keep` logged as
/// (from, to), monotonic ns.
#[derive(Default)]
struct Stalls {
    count: u64,
    ns: u64,
    keep: usize,
    logged: Vec<(u64, u64)>,
}

impl Stalls {
    /// The thread ran nothing else from `from` (when it was due to wake, or
    /// began a write) to `to`: a stall if that is longer than STALL_NS.
    fn note(&mut self, from: u64, to: u64) {
        if to > from + STALL_NS {
            self.count += 1;
            self.ns += to - from;
            if self.logged.len() < self.keep {
                self.logged.push((from, to));
            }
        }
    }
}

const LATE_BUCKET_NS: u64 = 10_000;
const LATE_BUCKETS: usize = 1001;

impl DirStats {
    fn new() -> DirStats {
        DirStats {
            late_hist: vec![0; LATE_BUCKETS],
            ..Default::default()
        }
    }

    fn released(&mut self, late: u64) {
        self.forwarded += 1;
        self.late_sum += late;
        self.late_max = self.late_max.max(late);
        self.late_hist[((late / LATE_BUCKET_NS) as usize).min(LATE_BUCKETS - 1)] += 1;
    }

    fn percentile_us(&self, q: f64) -> f64 {
        let target = (self.forwarded as f64 * q).ceil() as u64;
        let mut seen = 0;
        for (i, n) in self.late_hist.iter().enumerate() {
            seen += n;
            if seen >= target && target > 0 {
                return ((i as u64 + 1) * LATE_BUCKET_NS) as f64 / 1e3;
            }
        }
        0.0
    }

    fn json(&self, cfg: &DirConfig) -> String {
        format!(
            "{{\"delay_ms\":{},\"jitter_ms\":{},\"loss\":{},\"forwarded\":{},\"lost\":{},\"queue_full\":{},\"write_errors\":{},\"late_mean_us\":{:.1},\"late_p99_us_le\":{:.0},\"late_max_us\":{:.1}}}",
            cfg.delay_ns as f64 / 1e6,
            cfg.jitter_ns as f64 / 1e6,
            cfg.loss,
            self.forwarded,
            self.lost,
            self.queue_full,
            self.write_errors,
            if self.forwarded > 0 { self.late_sum as f64 / self.forwarded as f64 / 1e3 } else { 0.0 },
            self.percentile_us(0.99),
            self.late_max as f64 / 1e3,
        )
    }
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("delayline: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<()> {
    if args.ns_a == args.ns_b {
        bail!("--ns-a and --ns-b must differ");
    }
    if !(0.0..=100.0).contains(&args.loss) {
        bail!("--loss is a percentage, 0..100");
    }
    let dirs = [
        DirConfig {
            delay_ns: ms_to_ns(args.delay_ab.unwrap_or(args.rtt / 2.0))?,
            jitter_ns: ms_to_ns(args.jitter)?,
            loss: args.loss / 100.0,
        },
        DirConfig {
            delay_ns: ms_to_ns(args.delay_ba.unwrap_or(args.rtt / 2.0))?,
            jitter_ns: ms_to_ns(args.jitter)?,
            loss: args.loss / 100.0,
        },
    ];

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("signal handler")?;
    }

    let mut created = CreatedNs(Vec::new());
    for ns in [&args.ns_a, &args.ns_b] {
        if args.create_ns {
            if netns_path(ns).exists() {
                bail!("network namespace {ns} already exists (a previous run not cleaned up? `ip netns del {ns}`)");
            }
            ip(&["netns", "add", ns])?;
            created.0.push(ns.clone());
        } else if !netns_path(ns).exists() {
            bail!("network namespace {ns} does not exist (create it, or pass --create-ns)");
        }
    }
    let a = setup_side(&args, &args.ns_a, &args.addr_a, &args.addr_b)?;
    let b = setup_side(&args, &args.ns_b, &args.addr_b, &args.addr_a)?;

    if args.keep_awake {
        sys::keep_awake(&stop).context("--keep-awake")?;
    }
    for missed in sys::tune_scheduling(!args.no_realtime) {
        eprintln!("delayline: warning: {missed} (delays will be less precise)");
    }
    let realtime_offset = sys::real_ns() as i128 - sys::mono_ns() as i128;
    println!("ready");
    std::io::stdout().flush().ok();

    let mut line = Line::new(dirs, args.reorder, args.seed);
    let mut stats = [DirStats::new(), DirStats::new()];
    let mut log: Vec<LogEntry> = Vec::new();
    let mut log_dropped = 0u64;
    let mut stalls = Stalls {
        keep: if args.stall_log.is_some() {
            args.log_limit
        } else {
            0
        },
        ..Stalls::default()
    };
    let fds = [a.tun.as_raw_fd(), b.tun.as_raw_fd()];
    let spin_ns = args.spin_us * 1000;
    let mut buf = vec![0u8; 65_536];

    while !stop.load(Ordering::Relaxed) {
        // Release everything due.
        let now = sys::mono_ns();
        while let Some(p) = line.pop_due(now) {
            let out_fd = fds[1 - p.dir as usize];
            let st = &mut stats[p.dir as usize];
            // The release time is when the packet is handed to the other
            // namespace's stack; the write itself runs that stack's receive
            // path (tens of µs) in our context.
            let released = sys::mono_ns();
            let written = sys::write_packet(out_fd, &p.data);
            // A write longer than STALL_NS was not all the receive path's
            // work: the thread was taken away in it, and the packets queued
            // behind this one leave late for it.
            stalls.note(released, sys::mono_ns());
            match written {
                Ok(()) => {
                    st.released(released.saturating_sub(p.deadline));
                    if args.log.is_some() {
                        if log.len() < args.log_limit {
                            log.push(LogEntry {
                                dir: p.dir,
                                len: p.data.len() as u32,
                                hash: fnv1a(&p.data),
                                sport: ports(&p.data).0,
                                dport: ports(&p.data).1,
                                arrived: p.arrived,
                                deadline: p.deadline,
                                released,
                            });
                        } else {
                            log_dropped += 1;
                        }
                    }
                }
                Err(_) => st.write_errors += 1,
            }
        }
        // Sleep until shortly before the next deadline, then busy-poll.
        let asked = sys::mono_ns();
        let timeout = line
            .next_deadline()
            .map(|d| d.saturating_sub(asked).saturating_sub(spin_ns));
        let ready = sys::wait_readable(&fds, timeout).context("ppoll")?;
        if let Some(t) = timeout {
            // Woken early by a packet, or on time: nothing. Later: the
            // thread was not running when it should have been.
            stalls.note(asked + t, sys::mono_ns());
        }
        for (i, dir) in [Dir::AtoB, Dir::BtoA].into_iter().enumerate() {
            if !ready[i] {
                continue;
            }
            // Drain the device: every packet gets its own arrival time.
            while let Some(n) = sys::read_packet(fds[i], &mut buf).context("read TUN")? {
                let arrived = sys::mono_ns();
                match line.admit(dir, arrived, buf[..n].to_vec()) {
                    Admit::Queued { .. } => {}
                    Admit::Lost => stats[i].lost += 1,
                    Admit::QueueFull => stats[i].queue_full += 1,
                }
            }
        }
    }

    let to_real = |t: u64| (t as i128 + realtime_offset) as u64;
    if let Some(path) = &args.log {
        let mut w = BufWriter::new(
            File::create(path).with_context(|| format!("create {}", path.display()))?,
        );
        writeln!(
            w,
            "dir,len,hash,sport,dport,arrived_ns,deadline_ns,released_ns"
        )?;
        for e in &log {
            writeln!(
                w,
                "{},{},{:08x},{},{},{},{},{}",
                e.dir.name(),
                e.len,
                e.hash,
                e.sport,
                e.dport,
                to_real(e.arrived),
                to_real(e.deadline),
                to_real(e.released)
            )?;
        }
        w.flush()?;
    }
    if let Some(path) = &args.stall_log {
        let mut w = BufWriter::new(
            File::create(path).with_context(|| format!("create {}", path.display()))?,
        );
        writeln!(w, "from_ns,to_ns")?;
        for &(due, woke) in &stalls.logged {
            writeln!(w, "{},{}", to_real(due), to_real(woke))?;
        }
        w.flush()?;
    }
    let json = format!(
        "{{\"ab\":{},\"ba\":{},\"still_queued\":{},\"log_dropped\":{},\"stalls\":{},\"stalled_ms\":{:.3}}}",
        stats[0].json(&line.dirs[0]),
        stats[1].json(&line.dirs[1]),
        line.queued(),
        log_dropped,
        stalls.count,
        stalls.ns as f64 / 1e6
    );
    match &args.stats {
        Some(p) => {
            std::fs::write(p, json + "\n").with_context(|| format!("write {}", p.display()))?
        }
        None => eprintln!("{json}"),
    }
    drop(a);
    drop(b);
    drop(created);
    Ok(())
}
