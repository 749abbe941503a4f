//! eBPF capture backend: loads `bpf/tlsrum.bpf.c` (compiled by build.rs),
//! attaches it as a TC classifier on ingress and egress of each interface,
//! and reads its events from the ring buffer.
//!
//! The kernel side forwards, per flow on the server ports, SYN/FIN/RST,
//! the bare ACKs of the handshake phase and each direction's TLS records
//! but for application-data bodies (README, "What leaves the kernel"); a
//! direction whose records it cannot follow from its SYN falls back to
//! `max_payload_per_dir` bytes, and one it met mid-stream stays quiet; after
//! [`EbpfCapture::mark_done`] only FIN/RST. Big segments (GSO/GRO, up to 256 KiB) arrive as several events
//! of at most [`CHUNK`] bytes; whatever is not sent is counted (see
//! [`EbpfCapture::counters`]) and flagged ([`EV_CUT`]).
//!
//! One job per module: [`abi`] mirrors `bpf/tlsrum.h`, [`event`] turns
//! events into analyzer packets, [`loader`] loads, attaches and detaches,
//! `ring` reads the ring buffer, `clock` maps the kernel's clock to the
//! epoch, `netlink` finds interfaces and removes our qdisc, `test_run`
//! runs the program on frames from user space.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use tlsrum::ebpf::{EbpfCapture, EbpfOptions};
//! let opts = EbpfOptions { ifaces: vec!["eth0".into()], ports: vec![443], ..Default::default() };
//! let mut cap = EbpfCapture::attach(&opts)?;
//! cap.poll(std::time::Duration::from_millis(100), &mut |ev| {
//!     let p = ev.to_packet();
//!     println!("{} {} -> {} {} bytes", ev.ts, p.src, p.dst, p.payload.len());
//! })?;
//! cap.detach()?;
//! # Ok(()) }
//! ```

pub mod abi;
mod clock;
pub mod event;
pub mod loader;
mod netlink;
mod ring;
mod test_run;

pub use abi::*;
pub use event::{Datagrams, Event};
pub use loader::{
    ring_bytes, AttachMode, EbpfCapture, EbpfOptions, DEFAULT_KERNEL_FLOWS, MIN_KERNEL_FLOWS,
};
pub use netlink::ifindex;
pub use ring::WAKEUP_FRACTION;
pub use test_run::TEST_RUN_MAX_FRAME;
