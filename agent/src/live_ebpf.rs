//! The eBPF backend adapter (filled in when bpf/ and ebpf.rs land).
use anyhow::{bail, Result};

use crate::live::{LiveArgs, Source};

pub fn open(_args: &LiveArgs) -> Result<Box<dyn Source>> {
    bail!("the eBPF backend is not built yet; use --backend pcap")
}
