//! `tlsrum live --zeek-log PATH`: the agent on a Zeek sensor. It follows
//! Zeek's ssl.log ([`Tail`]) instead of capturing packets, and each new
//! row counts in the same Prometheus metrics, `--events` and `--top` as a
//! handshake tlsrum saw itself, so the dashboards work on such hosts too
//! (their timing panels stay empty: Zeek logs no times).

use std::cell::RefCell;
use std::path::Path;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use analyzer::client_names::ClientNames;
use analyzer::local_nets::LocalNets;
use analyzer::Stats;
use anyhow::Result;

use crate::ebpf::COUNTERS as KERNEL_COUNTERS;
use crate::live::{show, show_every, sinks, LiveArgs};
use crate::metrics::clients::ClientFingerprints;
use crate::metrics::http::Liveness;
use crate::metrics::labels::ServerNames;
use crate::metrics::{self, Metrics};
use crate::sink::top::{TopSink, Window};
use crate::sink::{RecordSink, RunEnd};
use crate::source::zeek_log::tail::Tail;
use crate::source::zeek_log::ZeekStats;

/// How often the file is looked at: the live loop's pace with packets.
const POLL: Duration = Duration::from_millis(100);

/// What `live::run` set up before it knew the source.
pub struct Follow {
    pub names: ServerNames,
    pub client_names: Option<Arc<ClientNames>>,
    pub stop: Arc<AtomicBool>,
    pub reopen: Arc<AtomicBool>,
}

fn zeek_counters(s: &ZeekStats) -> Vec<analyzer::counters::Counter> {
    let mut out = Vec::new();
    s.visit(&mut |c| out.push(c));
    out
}

pub fn run(args: &LiveArgs, path: &Path, f: Follow) -> Result<ExitCode> {
    // A sensor's own addresses are not those of the traffic it watches:
    // roles come from --local only.
    let local = (!args.local.is_empty()).then(|| {
        let mut nets = LocalNets::default();
        for l in &args.local {
            // Checked by clap's parser.
            let _ = nets.add(l);
        }
        nets
    });
    let mut known = metrics::analyzer_counters(&Stats::default());
    known.extend(KERNEL_COUNTERS.iter().map(|k| k.counter(0)));
    known.extend(zeek_counters(&ZeekStats::default()));
    let metrics = Arc::new(Mutex::new(Metrics::new(
        f.names,
        ClientFingerprints::new(args.top_clients).with_names(f.client_names),
        &known,
    )));
    if let Ok(mut m) = metrics.lock() {
        m.set_backend("zeek");
    }
    let liveness = Arc::new(Liveness::default());
    let bound = metrics::http::serve(
        &args.metrics,
        Arc::clone(&metrics),
        Arc::clone(&liveness),
        Arc::clone(&f.stop),
    )?;
    if args.top && args.events.as_deref() == Some("-") {
        anyhow::bail!("--top and --events - both write to standard output: give --events a file");
    }
    let mut sink = sinks(args, &metrics, &f.reopen)?;
    let show_every = show_every(args);
    let window = Rc::new(RefCell::new(Window::default()));
    if show_every.is_some() {
        sink.push(Box::new(TopSink(Rc::clone(&window))));
    }
    let mut tail = Tail::new(path, args.zeek_from_start);
    eprintln!(
        "tlsrum: following the Zeek log {} ({}); metrics on http://{bound}/metrics",
        path.display(),
        if args.zeek_from_start {
            "from its first row"
        } else {
            "rows written from now on"
        }
    );
    let started = Instant::now();
    let (mut last_tick, mut last_show) = (Instant::now(), Instant::now());
    let mut records = Vec::new();
    while !f.stop.load(Ordering::Relaxed) {
        if args
            .duration
            .is_some_and(|d| started.elapsed().as_secs_f64() >= d)
        {
            break;
        }
        tail.poll(local.as_ref(), &mut records);
        sink.records(&records)?;
        let busy = !records.is_empty();
        records.clear();
        liveness.tick();
        if last_tick.elapsed() >= Duration::from_secs(1) {
            last_tick = Instant::now();
            if let Ok(mut m) = metrics.lock() {
                m.counters(&zeek_counters(tail.stats()));
            }
            sink.flush()?;
            liveness.beat(
                (!tail.is_open()).then(|| format!("waiting for {} to exist", path.display())),
            );
            if show_every.is_some_and(|every| last_show.elapsed() >= every) {
                let secs = last_show.elapsed().as_secs_f64();
                last_show = Instant::now();
                show(args, &window, secs, 0)?;
            }
        }
        if !busy {
            std::thread::sleep(POLL);
        }
    }
    liveness.stopped();
    if let Ok(mut m) = metrics.lock() {
        m.counters(&zeek_counters(tail.stats()));
    }
    sink.finish(&RunEnd {
        stats: &Stats::default(),
        captures: 0,
        title: &path.display().to_string(),
    })?;
    f.stop.store(true, Ordering::Relaxed);
    Ok(ExitCode::SUCCESS)
}
