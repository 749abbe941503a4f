//! The one helper of the privileged tests (every live, eBPF and namespace
//! test uses it, through `mod common;`):
//!
//! - [`prereq`]: what a test needs (root, BPF, network namespaces, a TUN
//!   device, tools, a Python module) and [`skip_unless`]/[`skip`]: a missing
//!   one is a skip with the reason locally and a FAILURE under `CI=true`
//!   (or `CI=1`).
//! - [`netns`]: [`Topology`], two namespaces (server, client) joined by a
//!   veth pair with IPv4 (and, on request, IPv6) addresses and a scratch
//!   directory; [`Netns`], one namespace; [`InNetns`], this thread inside a
//!   namespace. Each undoes itself on drop, also when the test fails:
//!   whatever still runs in the namespaces is killed, the namespaces go
//!   (with the veth and every TC program and capture on it), the thread
//!   returns to its own namespace.
//! - [`procs`]: [`Procs`], long-running children stopped on drop (SIGTERM,
//!   then SIGKILL), with their logs shown when one dies early; [`run`],
//!   [`ns_cmd`], [`wait_for_text`], [`wait_for`].
//! - [`kernel`]: a live agent's kernel flow map, read with bpftool;
//!   [`test_run`]: the TC program run on crafted frames, attached to nothing.
//! - [`cargo_build`]: the examples and tools a test runs, built with its
//!   profile; [`delayline`]: the wide-area link's.
//! - [`servers`]: nginx and `openssl s_server` started in a namespace.
//! - [`scratch`]: a scratch directory kept only when the test failed.
//! - [`metric_value`]: one series' value in an agent's `/metrics` page.
//!
//! Declare guards so that they drop in the right order (locals drop in
//! reverse order): the topology first, then `InNetns`, then `Procs`, then
//! any capture attached inside the namespace.

#![allow(dead_code)]

pub mod cargo_build;
pub mod delayline;
pub mod json;
pub mod kernel;
pub mod netns;
pub mod prereq;
pub mod procs;
pub mod scratch;
pub mod servers;
pub mod test_run;

// Each test binary uses a part of these.
#[allow(unused_imports)]
pub use delayline::delayline;
#[allow(unused_imports)]
pub use netns::{InNetns, Netns, Topology, CLIENT_IP, CLIENT_IP6, SERVER_IP, SERVER_IP6};
#[allow(unused_imports)]
pub use prereq::{ci, have, missing, missing_prerequisite, not_here, skip, skip_unless, Need};
#[allow(unused_imports)]
pub use procs::{ns_cmd, run, wait_for, wait_for_text, Procs};

/// The value of the series `name` (without labels) in a Prometheus text
/// page, if it has one.
pub fn metric_value(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
