//! The standard `process_*` metrics every Prometheus client library
//! exports (prometheus.io "Writing client libraries", process metrics),
//! read from `/proc/self` at each scrape. prometheus-client has no such
//! collector; kubert-prometheus-process, the one crate for it, is built
//! against prometheus-client 0.23, not the 0.25 this agent uses.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// What `/proc/self` says about the agent now.
#[derive(Debug, Default, PartialEq)]
pub struct Snapshot {
    pub cpu_seconds: f64,
    pub resident_bytes: f64,
    pub virtual_bytes: f64,
    pub start_time_seconds: f64,
    pub threads: f64,
    pub open_fds: f64,
    pub max_fds: f64,
}

fn sysconf(name: libc::c_int) -> f64 {
    // SAFETY: sysconf reads a system constant; no memory is passed.
    let v = unsafe { libc::sysconf(name) };
    if v > 0 {
        v as f64
    } else {
        0.0
    }
}

impl Snapshot {
    pub fn read() -> Option<Snapshot> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // proc(5): the fields after the command's closing parenthesis, from
        // field 3 (state) on; the command may itself hold spaces or ')'.
        let rest = &stat[stat.rfind(')')? + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| -> f64 { f.get(n - 3).and_then(|v| v.parse().ok()).unwrap_or(0.0) };
        let ticks = sysconf(libc::_SC_CLK_TCK).max(1.0);
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())?;
        let max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|l| {
                l.lines()
                    .find(|l| l.starts_with("Max open files"))
                    .and_then(|l| l.split_whitespace().nth(3))
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0.0);
        Some(Snapshot {
            cpu_seconds: (field(14) + field(15)) / ticks,
            threads: field(20),
            start_time_seconds: boot + field(22) / ticks,
            virtual_bytes: field(23),
            resident_bytes: field(24) * sysconf(libc::_SC_PAGESIZE),
            open_fds: std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count()) as f64,
            max_fds,
        })
    }
}

/// Registered with [`prometheus_client::registry::Registry::register_collector`].
#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(s) = Snapshot::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        for (name, help, value) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                s.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                s.virtual_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                s.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                s.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                s.max_fds,
            ),
            (
                "process_threads",
                "Number of OS threads in the process",
                s.threads,
            ),
        ] {
            let g = ConstGauge::new(value);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_is_plausible() {
        let s = Snapshot::read().unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            s.start_time_seconds > now - 86_400.0 * 30.0 && s.start_time_seconds <= now + 1.0,
            "{s:?}"
        );
        assert!(
            s.resident_bytes > 1e6 && s.virtual_bytes >= s.resident_bytes,
            "{s:?}"
        );
        assert!(s.open_fds >= 3.0 && s.max_fds >= s.open_fds, "{s:?}");
        assert!(s.threads >= 1.0 && s.cpu_seconds >= 0.0, "{s:?}");
    }
}
