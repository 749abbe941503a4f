//! The delay line between two real namespaces: delays per direction within
//! 0.5 ms (its own log and ping through it), loss, and clean teardown.
//! Needs root and /dev/net/tun; skipped without them unless CI=true.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The tests run one at a time: each delay line busy-polls near its
/// release times on a realtime thread, and two of them on a 2-core machine
/// would measure each other rather than the line.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn capable() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ping = Command::new("sh")
        .args(["-c", "command -v ping"])
        .output()
        .is_ok_and(|o| o.status.success());
    let ok = root && Path::new("/dev/net/tun").exists() && ping;
    if !ok {
        assert!(!ci(), "delay line test needs root, /dev/net/tun and ping (CI=true: a missing capability is a failure)");
        eprintln!("skipping: needs root, /dev/net/tun and ping");
    }
    ok
}

/// A running delay line; stopped and its namespaces removed on drop, also
/// when the test fails.
struct Lab {
    child: Option<Child>,
    ns: [String; 2],
    log: PathBuf,
}

impl Lab {
    fn start(tag: &str, args: &[&str]) -> Lab {
        let ns = [
            format!("dlt{}{tag}c", std::process::id()),
            format!("dlt{}{tag}s", std::process::id()),
        ];
        let log = std::env::temp_dir().join(format!("{}.csv", ns[0]));
        let mut child = Command::new(env!("CARGO_BIN_EXE_delayline"))
            .args(["--ns-a", &ns[0], "--ns-b", &ns[1], "--create-ns", "--log"])
            .arg(&log)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start delayline");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let lab = Lab {
            child: Some(child),
            ns,
            log,
        };
        assert_eq!(line.trim(), "ready", "delayline did not come up");
        lab
    }

    fn ping(&self, count: u32, interval: &str, size: u32) -> (u32, Vec<f64>) {
        self.ping_to("198.18.0.2", count, interval, size)
    }

    fn ping_to(&self, peer: &str, count: u32, interval: &str, size: u32) -> (u32, Vec<f64>) {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns[0],
                "ping",
                "-n",
                "-q",
                "-c",
                &count.to_string(),
                "-i",
                interval,
                "-s",
            ])
            .arg(size.to_string())
            .arg(peer)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let received = text
            .split(", ")
            .find_map(|p| {
                p.strip_suffix(" received")
                    .and_then(|n| n.trim().parse().ok())
            })
            .unwrap_or(0);
        // rtt min/avg/max/mdev = 20.026/20.046/20.618/0.057 ms
        let stats = text
            .lines()
            .find(|l| l.contains("min/avg/max"))
            .and_then(|l| l.split(" = ").nth(1))
            .map(|v| {
                v.trim_end_matches(" ms")
                    .split('/')
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        (received, stats)
    }

    /// Stops the line (SIGTERM) and returns each forwarded packet's
    /// direction and lateness (release minus deadline) in ms.
    fn stop(&mut self) -> Vec<(String, f64)> {
        if let Some(mut c) = self.child.take() {
            // SAFETY: signalling our own child by pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            assert!(
                c.wait().unwrap().success(),
                "delayline exited with an error"
            );
        }
        let text = std::fs::read_to_string(&self.log).expect("delayline log");
        text.lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                let late =
                    (f[7].parse::<i128>().unwrap() - f[6].parse::<i128>().unwrap()) as f64 / 1e6;
                (f[0].to_string(), late)
            })
            .collect()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in &self.ns {
            if Path::new("/run/netns").join(ns).exists() {
                let _ = Command::new("ip").args(["netns", "del", ns]).status();
            }
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

#[test]
fn holds_its_delay_within_half_a_millisecond() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !capable() {
        return;
    }
    let mut lab = Lab::start("p", &["--rtt", "20"]);
    // Load beside the measured pings: large echoes every 2 ms.
    let load = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.ns[0],
            "ping",
            "-q",
            "-c",
            "600",
            "-i",
            "0.002",
            "-s",
            "1400",
            "198.18.0.2",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (received, stats) = lab.ping(200, "0.005", 56);
    let mut load = load;
    load.wait().unwrap();
    let late = lab.stop();
    assert_eq!(received, 200);
    let avg = stats[1];
    assert!(
        (avg - 20.0).abs() < 0.5,
        "ping average {avg} ms through a 20 ms line"
    );
    assert!(late.len() >= 1400, "only {} packets forwarded", late.len());
    let mut l: Vec<f64> = late.iter().map(|x| x.1).collect();
    l.sort_by(f64::total_cmp);
    let median = l[l.len() / 2];
    let within = l.iter().filter(|&&x| x <= 0.5).count() as f64 / l.len() as f64;
    eprintln!(
        "lateness: median {median:.4} ms, p99 {:.4} ms, max {:.4} ms, {:.2}% within 0.5 ms",
        l[l.len() * 99 / 100],
        l[l.len() - 1],
        within * 100.0
    );
    assert!(median < 0.05, "median lateness {median} ms");
    assert!(
        within >= 0.99,
        "only {:.2}% of packets within 0.5 ms",
        within * 100.0
    );
}

#[test]
fn delays_each_direction_separately() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !capable() {
        return;
    }
    let mut lab = Lab::start("a", &["--delay-ab", "30", "--delay-ba", "5"]);
    let (received, stats) = lab.ping(20, "0.02", 56);
    lab.stop();
    assert_eq!(received, 20);
    assert!(
        (stats[1] - 35.0).abs() < 0.5,
        "ping average {} ms, expected 35",
        stats[1]
    );
}

#[test]
fn drops_the_configured_share() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !capable() {
        return;
    }
    let mut lab = Lab::start("l", &["--rtt", "2", "--loss", "30", "--seed", "7"]);
    let (received, _) = lab.ping(400, "0.005", 56);
    lab.stop();
    // An echo survives both directions: 0.7 * 0.7 = 49 %.
    assert!(
        (150..=240).contains(&received),
        "{received} of 400 echoes survived 30 % loss each way"
    );
}

#[test]
fn carries_ipv6_with_a_route_to_its_peer() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !capable() {
        return;
    }
    // The line adds the peer route and skips duplicate address detection
    // itself: pinging at once, with no setup of our own, must work.
    let mut lab = Lab::start(
        "6",
        &[
            "--addr-a",
            "fd00:1813::1",
            "--addr-b",
            "fd00:1813::2",
            "--rtt",
            "20",
        ],
    );
    let (received, stats) = lab.ping_to("fd00:1813::2", 20, "0.02", 56);
    let late = lab.stop();
    assert_eq!(received, 20, "IPv6 echoes through the line");
    assert!(
        (stats[1] - 20.0).abs() < 0.5,
        "ping average {} ms through a 20 ms line",
        stats[1]
    );
    assert!(late.len() >= 40, "only {} packets forwarded", late.len());
}
