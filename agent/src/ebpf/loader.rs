//! Loading and attaching: the options, the object built from
//! `bpf/tlsrum.bpf.c` with its settings, the TC hooks on each interface
//! (TCX links or netlink filters), the flow map and the counters, and
//! detaching cleanly.

use std::io;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::links::LinkOrder;
use aya::programs::tc::{NlOptions, SchedClassifierLinkId, TcAttachOptions};
use aya::programs::{ProgramError, SchedClassifier, TcAttachType};
use aya::util::KernelVersion;
use aya::{Ebpf, EbpfLoader};

use super::abi::{FlowKey, FlowState, FlowTuple, COUNTER_NAMES, MAX_PORTS};

/// Attempts at loading a program the verifier gave up on with EAGAIN (as libbpf).
const LOAD_TRIES: u32 = 5;
use super::event::Event;
use super::netlink::{self, ifindex, is_loopback};
use super::ring::{EventRing, WAKEUP_FRACTION};

/// The object built from `bpf/tlsrum.bpf.c` by build.rs.
static BPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tlsrum.bpf.o"));

/// The programs of the object and their hooks (ingress first).
pub(super) const PROGRAMS: [(&str, TcAttachType); 2] = [
    ("tlsrum_ingress", TcAttachType::Ingress),
    ("tlsrum_egress", TcAttachType::Egress),
];

/// How the programs are hooked to an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttachMode {
    /// TCX links on Linux 6.6+ (gone with the process, no qdisc), else
    /// netlink.
    #[default]
    Auto,
    /// TCX links (Linux 6.6+).
    Tcx,
    /// cls_bpf filters on a clsact qdisc (any kernel); the qdisc is added
    /// if missing and removed again on detach if we added it.
    Netlink,
}

/// What to capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EbpfOptions {
    /// Interfaces to attach to (ingress and egress; egress only on loopback,
    /// where every packet passes both hooks).
    pub ifaces: Vec<String>,
    /// Server ports (at most [`MAX_PORTS`]).
    pub ports: Vec<u16>,
    /// Every TCP (and with `quic`, UDP) flow is a candidate; user space
    /// recognises TLS by content and marks the rest done.
    pub all_ports: bool,
    /// Also forward QUIC (UDP on the ports): long-header packets and the
    /// first short-header packet each way.
    pub quic: bool,
    /// Payload bytes forwarded per flow direction at most.
    pub max_payload_per_dir: u32,
    /// Ring buffer size; rounded up to a power of two, at least one page.
    pub ringbuf_bytes: u32,
    /// Entries of the kernel's flow map (an LRU hash, about 200 bytes an
    /// entry): flows followed at once. Under pressure the least
    /// recently used flows are evicted; their later packets are counted
    /// (`midstream_flows`) and none of their application data leaves the
    /// kernel. At least [`MIN_KERNEL_FLOWS`].
    pub kernel_flows: u32,
    pub attach_mode: AttachMode,
}

/// The ring buffer the kernel makes for [`EbpfOptions::ringbuf_bytes`]: a
/// power-of-two number of pages; None past 2 GiB.
pub fn ring_bytes(requested: u32) -> Option<u32> {
    requested.max(4096).checked_next_power_of_two()
}

/// Smallest flow map [`EbpfOptions::kernel_flows`] takes: each CPU's LRU
/// free list holds some entries, a smaller map would mostly be those.
pub const MIN_KERNEL_FLOWS: u32 = 256;
/// The flow map's default size.
pub const DEFAULT_KERNEL_FLOWS: u32 = 65536;

impl Default for EbpfOptions {
    fn default() -> Self {
        Self {
            ifaces: Vec::new(),
            ports: vec![443],
            all_ports: false,
            quic: false,
            max_payload_per_dir: 64 * 1024,
            ringbuf_bytes: crate::source::DEFAULT_BUFFER_BYTES as u32,
            kernel_flows: DEFAULT_KERNEL_FLOWS,
            attach_mode: AttachMode::Auto,
        }
    }
}

/// A program attached to one hook of one interface.
struct Attachment {
    program: &'static str,
    iface: String,
    link: SchedClassifierLinkId,
}

/// A loaded and attached capture. Dropping it detaches (best effort).
pub struct EbpfCapture {
    /// The loaded object (programs; test_run.rs runs them too).
    pub(super) ebpf: Ebpf,
    events: EventRing,
    flows: BpfHashMap<MapData, FlowKey, FlowState>,
    counters: PerCpuArray<MapData, u64>,
    attachments: Vec<Attachment>,
    /// Interfaces where we added the clsact qdisc (removed on detach).
    our_clsact: Vec<String>,
    /// Instructions the verifier processed, per program.
    verified_insns: Vec<(&'static str, Option<u32>)>,
    detached: bool,
}

impl std::fmt::Debug for EbpfCapture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EbpfCapture")
            .field(
                "attachments",
                &self
                    .attachments
                    .iter()
                    .map(|a| (a.program, &a.iface))
                    .collect::<Vec<_>>(),
            )
            .field("our_clsact", &self.our_clsact)
            .finish_non_exhaustive()
    }
}

/// Explains an error of the load or attach steps in the terms a user can act on.
fn explain(e: impl Into<anyhow::Error>, what: &str) -> anyhow::Error {
    let e: anyhow::Error = e.into();
    let errno = e.chain().find_map(|c| {
        c.downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error)
    });
    let text = format!("{e:#}");
    let hint = if text.contains("Verifier output") {
        // The verifier says EACCES too: not a privilege problem.
        Some(
            "the kernel's verifier rejected it (its log follows); please report this with `uname -r`, \
             and use `--backend pcap` meanwhile",
        )
    } else if errno == Some(libc::EPERM)
        || errno == Some(libc::EACCES)
        || text.contains("Operation not permitted")
        || text.contains("Permission denied")
    {
        Some(
            "loading eBPF programs needs root (or CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON); \
             run as root, or use `--backend pcap`",
        )
    } else if errno == Some(libc::ENOSYS) {
        Some("this kernel has no BPF support; use `--backend pcap`")
    } else if text.contains("BPF_MAP_TYPE_RINGBUF") || text.contains("map `events`") {
        Some("the eBPF backend needs Linux 5.8 or newer (BPF ring buffer); use `--backend pcap`")
    } else {
        None
    };
    match hint {
        Some(h) => e.context(format!("{what}: {h}")),
        None => e.context(what.to_owned()),
    }
}

/// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; raise it there.
fn raise_memlock() {
    if KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(5, 11, 0)) {
        return;
    }
    let rlim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we pass; failure is reported by
    // the load that follows.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) };
}

impl EbpfCapture {
    /// Loads the programs with the options as their settings and attaches
    /// them. On failure nothing stays attached.
    pub fn attach(opts: &EbpfOptions) -> Result<Self> {
        if opts.ifaces.is_empty() {
            bail!("eBPF capture: no interface given");
        }
        for iface in &opts.ifaces {
            if ifindex(iface).is_none() {
                bail!("eBPF capture: no interface {iface:?}");
            }
        }
        let mut cap = Self::load(opts)?;
        // On error `cap` is dropped, which detaches what was attached.
        let tcx = match opts.attach_mode {
            AttachMode::Tcx => true,
            AttachMode::Netlink => false,
            AttachMode::Auto => {
                KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0))
            }
        };
        for iface in &opts.ifaces {
            cap.attach_iface(iface, tcx)?;
        }
        Ok(cap)
    }

    /// Loads the programs with the options as their settings, attached to
    /// nothing: [`EbpfCapture::test_run`] feeds them frames.
    pub fn load(opts: &EbpfOptions) -> Result<Self> {
        if !opts.all_ports && opts.ports.is_empty() {
            bail!("eBPF capture: no server port given (or ask for all ports)");
        }
        if opts.ports.len() > MAX_PORTS {
            bail!(
                "eBPF capture: at most {MAX_PORTS} server ports (got {}); use all ports instead",
                opts.ports.len()
            );
        }
        if opts.kernel_flows < MIN_KERNEL_FLOWS {
            bail!(
                "eBPF capture: the kernel flow map needs at least {MIN_KERNEL_FLOWS} entries (got {})",
                opts.kernel_flows
            );
        }
        let mut ports = [0u16; MAX_PORTS];
        ports[..opts.ports.len()].copy_from_slice(&opts.ports);
        let nports = opts.ports.len() as u32;
        let all_ports = u8::from(opts.all_ports);
        let quic = u8::from(opts.quic);
        let ringbuf = ring_bytes(opts.ringbuf_bytes).context("ring buffer too large")?;

        raise_memlock();
        let mut ebpf = EbpfLoader::new()
            .override_global("ports", &ports, true)
            .override_global("nports", &nports, true)
            .override_global("all_ports", &all_ports, true)
            .override_global("quic", &quic, true)
            .override_global("max_payload_per_dir", &opts.max_payload_per_dir, true)
            .override_global("wakeup_bytes", &(ringbuf / WAKEUP_FRACTION), true)
            .map_max_entries("events", ringbuf)
            .map_max_entries("flows", opts.kernel_flows)
            .load(BPF_OBJECT)
            .map_err(|e| explain(e, "cannot load the eBPF object"))?;

        let mut verified_insns = Vec::new();
        for (name, _) in PROGRAMS {
            let prog: &mut SchedClassifier = ebpf
                .program_mut(name)
                .with_context(|| format!("program {name} missing from the eBPF object"))?
                .try_into()?;
            // The error carries the verifier log (aya ProgramError::LoadError).
            // The verifier gives up with EAGAIN when a signal is pending on
            // the loading thread; libbpf retries such loads, aya does not.
            let mut tries = 1;
            loop {
                match prog.load() {
                    Err(ProgramError::LoadError { io_error, .. })
                        if io_error.raw_os_error() == Some(libc::EAGAIN) && tries < LOAD_TRIES =>
                    {
                        tries += 1
                    }
                    r => {
                        break r.map_err(|e| {
                            explain(e, &format!("the kernel refused eBPF program {name}"))
                        })?
                    }
                }
            }
            verified_insns.push((
                name,
                prog.info()
                    .ok()
                    .and_then(|i| i.verified_instruction_count()),
            ));
        }

        let events = RingBuf::try_from(ebpf.take_map("events").context("map events missing")?)?;
        let flows = BpfHashMap::try_from(ebpf.take_map("flows").context("map flows missing")?)?;
        let counters =
            PerCpuArray::try_from(ebpf.take_map("counters").context("map counters missing")?)?;

        Ok(Self {
            ebpf,
            events: EventRing::new(events),
            flows,
            counters,
            attachments: Vec::new(),
            our_clsact: Vec::new(),
            verified_insns,
            detached: false,
        })
    }

    fn attach_iface(&mut self, iface: &str, tcx: bool) -> Result<()> {
        if !tcx {
            match aya::programs::tc::qdisc_add_clsact(iface) {
                Ok(()) => self.our_clsact.push(iface.to_owned()),
                Err(aya::programs::tc::TcError::NetlinkError(e))
                    if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => {
                    return Err(explain(
                        e,
                        &format!("cannot add the clsact qdisc to {iface}"),
                    ))
                }
            }
        }
        let loopback = is_loopback(iface);
        for (name, hook) in PROGRAMS {
            // On loopback every packet passes egress and then ingress:
            // one hook sees everything once.
            if loopback && hook == TcAttachType::Ingress {
                continue;
            }
            let prog: &mut SchedClassifier = self
                .ebpf
                .program_mut(name)
                .context("program missing")?
                .try_into()?;
            let options = if tcx {
                // First in the chain: we see packets before anything that
                // might drop or rewrite them, and pass them on untouched.
                TcAttachOptions::TcxOrder(LinkOrder::first())
            } else {
                TcAttachOptions::Netlink(NlOptions::default())
            };
            let link = prog
                .attach_with_options(iface, hook, options)
                .map_err(|e| explain(e, &format!("cannot attach {name} to {iface}")))?;
            self.attachments.push(Attachment {
                program: name,
                iface: iface.to_owned(),
                link,
            });
        }
        Ok(())
    }

    /// Instructions the verifier processed for each program (Linux 5.16+).
    pub fn verified_instructions(&self) -> &[(&'static str, Option<u32>)] {
        &self.verified_insns
    }

    /// Waits up to `timeout` for events, then hands every available one to
    /// `f`. Returns the number of events. The kernel wakes this up early
    /// only when 1/[`WAKEUP_FRACTION`] of the ring buffer is pending, so
    /// fewer events wait out the timeout: keep it short (100 ms).
    pub fn poll(&mut self, timeout: Duration, f: &mut dyn FnMut(Event<'_>)) -> Result<usize> {
        self.events.poll(timeout, f)
    }

    /// Marks a flow done: the kernel forwards nothing more of it but
    /// FIN/RST. Works whichever direction `key` names.
    pub fn mark_done(&mut self, key: FlowTuple) -> Result<()> {
        let k = FlowKey::new(&key);
        // Read-modify-write: the kernel may add to the counters in between,
        // which only loses a few of those counts. A flow the LRU map evicted
        // is recreated as done, so it cannot start forwarding again.
        let mut state = match self.flows.get(&k, 0) {
            Ok(s) => s,
            Err(aya::maps::MapError::KeyNotFound) => FlowState::default(),
            Err(e) => return Err(e).context("reading the eBPF flow map"),
        };
        state.done = 1;
        self.flows
            .insert(k, state, 0)
            .context("updating the eBPF flow map")
    }

    /// The kernel's counters (summed over CPUs), by name.
    pub fn counters(&self) -> Result<Vec<(&'static str, u64)>> {
        COUNTER_NAMES
            .iter()
            .enumerate()
            .map(|(i, &name)| {
                let v = self
                    .counters
                    .get(&(i as u32), 0)
                    .with_context(|| format!("reading counter {name}"))?;
                Ok((name, v.iter().copied().fold(0u64, u64::wrapping_add)))
            })
            .collect()
    }

    /// Removes our programs and any clsact qdisc we added.
    pub fn detach(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        if self.detached {
            return Ok(());
        }
        self.detached = true;
        let mut errors = Vec::new();
        for a in self.attachments.drain(..) {
            let prog: Result<&mut SchedClassifier, _> = match self.ebpf.program_mut(a.program) {
                Some(p) => p.try_into().map_err(anyhow::Error::from),
                None => Err(anyhow::anyhow!("program {} missing", a.program)),
            };
            if let Err(e) = prog.and_then(|p| p.detach(a.link).map_err(anyhow::Error::from)) {
                errors.push(format!("{} on {}: {e:#}", a.program, a.iface));
            }
        }
        for iface in self.our_clsact.drain(..) {
            if let Err(e) = netlink::remove_clsact_if_unused(&iface) {
                errors.push(format!("removing the clsact qdisc of {iface}: {e:#}"));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            bail!("eBPF detach: {}", errors.join("; "))
        }
    }
}

impl Drop for EbpfCapture {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            log::warn!("{e:#}");
        }
    }
}
