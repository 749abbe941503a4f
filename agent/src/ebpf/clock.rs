//! The host's clock against the kernel's: events carry CLOCK_BOOTTIME
//! (`bpf_ktime_get_boot_ns`), records want seconds since the epoch.
//! Nanoseconds since the epoch fit an i64 until 2262; an i128 here cost
//! each event a software conversion to f64 (~1% of the live agent's CPU).

use std::time::{SystemTime, UNIX_EPOCH};

/// CLOCK_REALTIME - CLOCK_BOOTTIME in nanoseconds, sampled between two
/// reads of the boot clock so that the error is half the sampling window.
pub(crate) fn boot_to_epoch_ns() -> i64 {
    fn boottime_ns() -> i64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the timespec we pass.
        unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        ts.tv_sec * 1_000_000_000 + ts.tv_nsec
    }
    let b0 = boottime_ns();
    let real = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    let b1 = boottime_ns();
    real - (b0 + b1) / 2
}

/// An event's boot-clock timestamp in seconds since the epoch, given the
/// offset [`boot_to_epoch_ns`] sampled.
pub(crate) fn epoch_secs(boot_ns: u64, boot_to_epoch_ns: i64) -> f64 {
    (boot_ns as i64).wrapping_add(boot_to_epoch_ns) as f64 / 1e9
}
