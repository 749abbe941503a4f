//! The few system calls the delay line needs: TUN devices created inside a
//! network namespace, clocks, ppoll with a nanosecond timeout, scheduling.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use anyhow::{bail, Context, Result};

/// `_IOW('T', 202, int)` from <linux/if_tun.h>.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Opens a TUN device (raw IP, no packet-information header) named `ifname`
/// inside the network namespace mounted at `netns` (as `ip netns add` does).
///
/// A TUN device belongs to the namespace of the thread that created it, so
/// this thread enters the namespace, creates the device and comes back. The
/// returned descriptor stays usable from the root namespace; closing it
/// destroys the device (it is not persistent), which is the teardown.
pub fn open_tun_in(netns: &Path, ifname: &str) -> Result<OwnedFd> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
        bail!(
            "interface name {ifname:?} must be 1..{} bytes",
            libc::IFNAMSIZ - 1
        );
    }
    let home = File::open("/proc/thread-self/ns/net").context("open /proc/thread-self/ns/net")?;
    let target =
        File::open(netns).with_context(|| format!("open network namespace {}", netns.display()))?;
    setns(target.as_raw_fd())
        .with_context(|| format!("enter network namespace {}", netns.display()))?;
    let tun = create_tun(ifname);
    // Always come back, even if creating the device failed.
    setns(home.as_raw_fd()).context("return to the original network namespace")?;
    tun
}

fn setns(fd: RawFd) -> io::Result<()> {
    // SAFETY: plain system call on a descriptor we own.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn create_tun(ifname: &str) -> Result<OwnedFd> {
    // SAFETY: open(2) with a constant NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error())
            .context("open /dev/net/tun (is the tun module there, are we root?)");
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_TUN | IFF_NO_PI,
        _pad: [0; 22],
    };
    for (dst, src) in req.name.iter_mut().zip(ifname.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: TUNSETIFF reads and writes a struct ifreq, which IfReq mirrors (40 bytes).
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) } < 0 {
        return Err(io::Error::last_os_error()).with_context(|| format!("TUNSETIFF {ifname}"));
    }
    Ok(fd)
}

/// CLOCK_MONOTONIC in nanoseconds: the clock every deadline is kept in.
pub fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in nanoseconds: the clock capture timestamps use.
pub fn real_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Waits until one of `fds` is readable or `timeout_ns` passed (None: no
/// limit). Returns which fds are readable; an interrupted wait (a signal)
/// returns none readable.
pub fn wait_readable(fds: &[RawFd; 2], timeout_ns: Option<u64>) -> io::Result<[bool; 2]> {
    let mut pfds = fds.map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: pfds is a valid array of 2 pollfd; tsp is null or points to a live timespec.
    let n = unsafe { libc::ppoll(pfds.as_mut_ptr(), 2, tsp, std::ptr::null()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok([false; 2]);
        }
        return Err(e);
    }
    Ok(pfds.map(|p| p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0))
}

/// Reads one packet; None when nothing is queued.
pub fn read_packet(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: buf is valid for buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(n as usize))
}

/// Writes one packet (a TUN write injects it into the namespace's stack).
pub fn write_packet(fd: RawFd, pkt: &[u8]) -> io::Result<()> {
    // SAFETY: pkt is valid for pkt.len() bytes.
    let n = unsafe { libc::write(fd, pkt.as_ptr().cast(), pkt.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Timer slack to 1 ns (the default 50 µs would blur every wake-up) and,
/// if allowed, SCHED_FIFO so other work on the box does not delay a release.
/// Returns what could not be done, for the log.
pub fn tune_scheduling(realtime: bool) -> Vec<String> {
    let mut missed = Vec::new();
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        missed.push(format!("PR_SET_TIMERSLACK: {}", io::Error::last_os_error()));
    }
    // Page faults in the forwarding loop would be stalls of their own.
    // SAFETY: mlockall with flag constants.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
        missed.push(format!("mlockall: {}", io::Error::last_os_error()));
    }
    if realtime {
        let param = libc::sched_param { sched_priority: 50 };
        // SAFETY: sched_setscheduler on ourselves with a valid sched_param.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
            missed.push(format!("SCHED_FIFO: {}", io::Error::last_os_error()));
        }
    }
    missed
}

/// Starts a busy loop at SCHED_IDLE pinned to each CPU this process may
/// use; they spin until `stop`. A halted virtual CPU wakes late (0.5-3.9 ms
/// on a Firecracker VM without a cpuidle driver), and a line asleep when a
/// packet comes stamps its arrival that late; SCHED_IDLE runs only when
/// nothing else can, so no other work loses CPU to it. Returns the CPUs.
pub fn keep_awake(stop: &std::sync::Arc<std::sync::atomic::AtomicBool>) -> io::Result<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: cpu is below CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect();
    for &cpu in &cpus {
        let stop = std::sync::Arc::clone(stop);
        std::thread::Builder::new()
            .name(format!("awake{cpu}"))
            .stack_size(64 * 1024)
            .spawn(move || {
                // SAFETY: a zeroed cpu_set_t with one CPU set, for this thread.
                unsafe {
                    let mut one: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut one);
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one);
                    let param = libc::sched_param { sched_priority: 0 };
                    libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
                }
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })?;
    }
    Ok(cpus.len())
}
