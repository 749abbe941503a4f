//! BPF_PROG_TEST_RUN: the loaded ingress program run on frames handed in
//! from user space, with the same code and maps as on an interface, for
//! tests and for measuring what a packet costs the kernel side.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use anyhow::{Context, Result};
use aya::programs::SchedClassifier;

use super::loader::{EbpfCapture, PROGRAMS};

/// The largest frame [`EbpfCapture::test_run`] hands the kernel: it takes
/// about 3.5 KB (one page with skb headroom).
pub const TEST_RUN_MAX_FRAME: usize = 3400;

impl EbpfCapture {
    /// Runs the ingress program once on an Ethernet frame
    /// (BPF_PROG_TEST_RUN): the same code and maps as on an interface, so
    /// tests can push whole captures through the kernel side, in frames of
    /// up to [`TEST_RUN_MAX_FRAME`] bytes. Events land in the ring buffer; [`EbpfCapture::poll`]
    /// reads them.
    pub fn test_run(&mut self, frame: &[u8]) -> Result<()> {
        self.test_run_repeat(frame, 1).map(|_| ())
    }

    /// Runs the ingress program `repeat` times on one frame in the kernel
    /// (BPF_PROG_TEST_RUN) and returns the kernel's mean run time. Every
    /// run sees the same bytes, so this times one path of the program with
    /// its maps hot: a cost per packet to compare paths and builds with,
    /// not what a live packet costs.
    pub fn test_run_repeat(&mut self, frame: &[u8], repeat: u32) -> Result<Duration> {
        let prog: &SchedClassifier = self
            .ebpf
            .program(PROGRAMS[0].0)
            .context("ingress program missing")?
            .try_into()?;
        let fd = prog.fd()?.as_fd().as_raw_fd();
        // union bpf_attr, the `test` member (linux/bpf.h), up to ctx_out.
        #[repr(C)]
        #[derive(Default)]
        struct TestRun {
            prog_fd: u32,
            retval: u32,
            data_size_in: u32,
            data_size_out: u32,
            data_in: u64,
            data_out: u64,
            repeat: u32,
            duration: u32,
            ctx_size_in: u32,
            ctx_size_out: u32,
            ctx_in: u64,
            ctx_out: u64,
            flags: u32,
            cpu: u32,
            batch_size: u32,
            _pad: u32,
        }
        let mut attr = TestRun {
            prog_fd: fd as u32,
            data_size_in: frame.len() as u32,
            data_in: frame.as_ptr() as u64,
            repeat,
            ..Default::default()
        };
        const BPF_PROG_TEST_RUN: libc::c_long = 10;
        // SAFETY: attr is a valid, fully initialised bpf_attr prefix that
        // outlives the call (the kernel writes retval and duration back into
        // it); the kernel only reads `frame` through data_in.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_TEST_RUN,
                &mut attr as *mut TestRun,
                std::mem::size_of::<TestRun>() as u32,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error()).context("BPF_PROG_TEST_RUN");
        }
        Ok(Duration::from_nanos(attr.duration.into()))
    }
}
