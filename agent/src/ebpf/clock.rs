//! The host's clock against the kernel's: events carry CLOCK_BOOTTIME
//! (`bpf_ktime_get_boot_ns`), records want seconds since the epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// CLOCK_REALTIME - CLOCK_BOOTTIME in nanoseconds, sampled between two
/// reads of the boot clock so that the error is half the sampling window.
pub(crate) fn boot_to_epoch_ns() -> i128 {
    fn boottime_ns() -> i128 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the timespec we pass.
        unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
    }
    let b0 = boottime_ns();
    let real = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0);
    let b1 = boottime_ns();
    real - (b0 + b1) / 2
}

/// An event's boot-clock timestamp in seconds since the epoch, given the
/// offset [`boot_to_epoch_ns`] sampled.
pub(crate) fn epoch_secs(boot_ns: u64, boot_to_epoch_ns: i128) -> f64 {
    (i128::from(boot_ns) + boot_to_epoch_ns) as f64 / 1e9
}
