//! Serves `/metrics` over HTTP from a thread of its own, until told to stop.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;

use super::Metrics;

pub fn serve(addr: SocketAddr, metrics: Arc<Mutex<Metrics>>, stop: Arc<AtomicBool>) -> Result<()> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e}"))?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok(Some(req)) = server.recv_timeout(Duration::from_millis(200)) else {
                    continue;
                };
                let (code, body, ctype) = if req.url().starts_with("/metrics") {
                    let body = metrics.lock().map(|m| m.encode()).unwrap_or_default();
                    (
                        200,
                        body,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )
                } else {
                    (404, "see /metrics\n".to_string(), "text/plain")
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
    Ok(())
}
