//! Reading the ring buffer: wait for events, parse each record's header
//! and hand the event over with its wall-clock time.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use anyhow::{Context, Result};
use aya::maps::{MapData, RingBuf};

use super::abi::{EventHeader, EVENT_HEADER_LEN};
use super::clock::{boot_to_epoch_ns, epoch_secs};
use super::event::Event;

/// A record wakes the reader only when it takes the pending bytes across a
/// multiple of this fraction of the ring buffer (`wakeup_bytes`,
/// `ring_output` in bpf/tlsrum.bpf.c): a wakeup per record cost an
/// interrupt each. Below the first, records wait for the reader's poll
/// timeout. A quarter (2 MiB
/// of an 8 MiB ring, ~16 ms of a 25,000 handshakes/s flood) cost the agent
/// 0.92x the CPU per handshake of a sixteenth (11 pairs, 8 better), and a
/// 128th (64 KiB) 1.08x: fewer, larger drains are cheaper. The other three
/// quarters hold the flood while the reader waits for a CPU: 6 MiB of an
/// 8 MiB ring was too little at 55,000 handshakes/s, hence the 32 MiB
/// default (`live --buffer-size`).
pub const WAKEUP_FRACTION: u32 = 4;

/// The `events` ring buffer and the clock offset its timestamps need.
pub(crate) struct EventRing {
    events: RingBuf<MapData>,
    /// CLOCK_REALTIME - CLOCK_BOOTTIME, nanoseconds; resampled every poll.
    boot_to_epoch_ns: i64,
}

impl EventRing {
    pub(crate) fn new(events: RingBuf<MapData>) -> Self {
        Self {
            events,
            boot_to_epoch_ns: boot_to_epoch_ns(),
        }
    }

    /// Waits up to `timeout` for events, then hands every available one to
    /// `f`. Returns the number of events. The kernel wakes this up early
    /// only as each 1/[`WAKEUP_FRACTION`] of the ring buffer fills, so
    /// fewer events wait out the timeout: keep it short (100 ms).
    pub(crate) fn poll(
        &mut self,
        timeout: Duration,
        f: &mut dyn FnMut(Event<'_>),
    ) -> Result<usize> {
        self.boot_to_epoch_ns = boot_to_epoch_ns();
        let mut n = self.drain(f);
        if n == 0 {
            let mut pfd = libc::pollfd {
                fd: self.events.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd for the duration of the call.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e).context("poll on the eBPF ring buffer");
                }
            }
            n = self.drain(f);
        }
        Ok(n)
    }

    fn drain(&mut self, f: &mut dyn FnMut(Event<'_>)) -> usize {
        let offset = self.boot_to_epoch_ns;
        let mut n = 0;
        while let Some(item) = self.events.next() {
            let Some(header) = EventHeader::parse(&item) else {
                continue;
            };
            let end = (EVENT_HEADER_LEN + header.len as usize).min(item.len());
            let payload = &item[EVENT_HEADER_LEN..end];
            let ts = epoch_secs(header.ts_ns, offset);
            f(Event {
                ts,
                header: &header,
                payload,
            });
            n += 1;
        }
        n
    }
}
