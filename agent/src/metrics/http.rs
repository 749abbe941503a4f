//! Serves the agent over HTTP from a thread of its own, until told to
//! stop: `/metrics` (Prometheus), `/healthz` (is the capture running) and
//! `/`, a page saying so.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::Metrics;

/// `--metrics`: `HOST:PORT`, `[V6]:PORT`, `localhost:PORT`, or `:PORT`
/// (or a bare `PORT`) for every address of the host, as exporters take it.
#[derive(Clone, Debug)]
pub struct Listen {
    /// As given, for messages.
    pub text: String,
    /// Tried in order; the first that binds is served.
    pub candidates: Vec<SocketAddr>,
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

pub fn parse_listen(s: &str) -> Result<Listen, String> {
    let port_only = s.strip_prefix(':').unwrap_or(s);
    let candidates = if let Ok(port) = port_only.parse::<u16>() {
        // Every address: IPv6's wildcard takes IPv4 too (unless the host
        // set bindv6only); IPv4's where IPv6 is off.
        vec![
            SocketAddr::from(([0u16; 8], port)),
            SocketAddr::from(([0u8; 4], port)),
        ]
    } else {
        s.to_socket_addrs()
            .map_err(|e| {
                format!("`{s}`: {e} (use HOST:PORT, [IPV6]:PORT, localhost:PORT or :PORT)")
            })?
            .collect()
    };
    if candidates.is_empty() {
        return Err(format!("`{s}` names no address"));
    }
    Ok(Listen {
        text: s.to_string(),
        candidates,
    })
}

/// The main loop has not come round for this long: the capture is stuck.
pub const STALLED_AFTER: Duration = Duration::from_secs(10);

/// What `/healthz` reports: the main loop's heartbeat (it comes round at
/// least every 100 ms while the capture source runs) and the last problem
/// the source reported with its interfaces.
pub struct Liveness {
    origin: Instant,
    /// Milliseconds after `origin` of the last heartbeat.
    beat_ms: AtomicU64,
    /// Cleared once the capture ended: the agent is shutting down.
    running: AtomicBool,
    problem: Mutex<Option<String>>,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            origin: Instant::now(),
            beat_ms: AtomicU64::new(0),
            running: AtomicBool::new(true),
            problem: Mutex::new(None),
        }
    }
}

impl Liveness {
    /// The main loop came round; `problem` is what the source's interface
    /// check said (None: all attached).
    pub fn beat(&self, problem: Option<String>) {
        let ms = self.origin.elapsed().as_millis() as u64;
        self.beat_ms.store(ms, Ordering::Relaxed);
        if let Ok(mut p) = self.problem.lock() {
            *p = problem;
        }
    }

    /// The main loop only: the interface check's verdict is kept as it was.
    pub fn tick(&self) {
        let ms = self.origin.elapsed().as_millis() as u64;
        self.beat_ms.store(ms, Ordering::Relaxed);
    }

    pub fn stopped(&self) {
        self.running.store(false, Ordering::Relaxed);
    }

    /// (healthy, why).
    pub fn verdict(&self) -> (bool, String) {
        if !self.running.load(Ordering::Relaxed) {
            return (false, "capture stopped (the agent is exiting)".into());
        }
        let since = self
            .origin
            .elapsed()
            .saturating_sub(Duration::from_millis(self.beat_ms.load(Ordering::Relaxed)));
        if since > STALLED_AFTER {
            return (
                false,
                format!(
                    "capture stalled: no progress for {:.0} s",
                    since.as_secs_f64()
                ),
            );
        }
        if let Some(p) = self.problem.lock().ok().and_then(|p| p.clone()) {
            return (false, format!("capture degraded: {p}"));
        }
        (
            true,
            format!(
                "ok: capture running (main loop {:.1} s ago)",
                since.as_secs_f64()
            ),
        )
    }
}

const INDEX: &str = "<!doctype html>
<html><head><title>tlsrum</title></head><body>
<h1>tlsrum live</h1>
<p>Passive TLS handshake analysis of this host's traffic.</p>
<ul>
<li><a href=\"/metrics\">/metrics</a>: Prometheus metrics (OpenMetrics text): <code>tls_*</code> the handshakes seen, <code>tlsrum_*</code> and <code>process_*</code> the agent itself</li>
<li><a href=\"/healthz\">/healthz</a>: 200 while the capture runs and makes progress, 503 when it is stalled or lost an interface</li>
</ul>
<p>See <code>tlsrum live --help</code> and docs/running.md.</p>
</body></html>
";

/// Binds the first of `listen`'s addresses that works and serves from a
/// thread until `stop`; returns the address bound.
pub fn serve(
    listen: &Listen,
    metrics: Arc<Mutex<Metrics>>,
    liveness: Arc<Liveness>,
    stop: Arc<AtomicBool>,
) -> Result<SocketAddr> {
    let mut last_error = None;
    let server = listen
        .candidates
        .iter()
        .find_map(|a| {
            tiny_http::Server::http(a)
                .map_err(|e| last_error = Some(format!("{a}: {e}")))
                .ok()
        })
        .ok_or_else(|| {
            anyhow::anyhow!(
                "cannot serve metrics on {listen}: {}",
                last_error.unwrap_or_default()
            )
        })?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| anyhow::anyhow!("metrics: not an IP socket"))?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok(Some(req)) = server.recv_timeout(Duration::from_millis(200)) else {
                    continue;
                };
                let path = req.url().split('?').next().unwrap_or("");
                let (code, body, ctype) = match path {
                    "/metrics" => {
                        let body = metrics.lock().map(|mut m| m.encode()).unwrap_or_default();
                        (
                            200,
                            body,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )
                    }
                    "/healthz" => {
                        let (ok, why) = liveness.verdict();
                        (if ok { 200 } else { 503 }, why + "\n", "text/plain")
                    }
                    "/" => (200, INDEX.to_string(), "text/html; charset=utf-8"),
                    _ => (
                        404,
                        "not found: see / for /metrics and /healthz\n".to_string(),
                        "text/plain",
                    ),
                };
                let header =
                    tiny_http::Header::from_bytes("Content-Type", ctype).expect("static header");
                let _ = req.respond(
                    tiny_http::Response::from_string(body)
                        .with_status_code(code)
                        .with_header(header),
                );
            }
        })?;
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_forms() {
        let any = parse_listen(":9853").unwrap().candidates;
        assert_eq!(any[0].to_string(), "[::]:9853");
        assert_eq!(any[1].to_string(), "0.0.0.0:9853");
        assert_eq!(parse_listen("9853").unwrap().candidates, any);
        assert!(parse_listen("localhost:9853")
            .unwrap()
            .candidates
            .iter()
            .all(|a| a.ip().is_loopback() && a.port() == 9853));
        assert_eq!(
            parse_listen("[::]:9853").unwrap().candidates,
            vec![SocketAddr::from(([0u16; 8], 9853))]
        );
        assert_eq!(
            parse_listen("127.0.0.1:9853").unwrap().candidates[0].to_string(),
            "127.0.0.1:9853"
        );
        assert!(parse_listen("localhost").is_err());
        assert!(parse_listen(":99999").is_err());
    }
}
