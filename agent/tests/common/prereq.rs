//! What a privileged test needs, and what happens when it is missing: a
//! skip with the reason locally, a failure under CI.

use std::path::Path;
use std::process::{Command, Stdio};

/// One thing a test needs from the machine.
#[derive(Clone, Copy, Debug)]
pub enum Need<'a> {
    /// Effective uid 0.
    Root,
    /// A kernel with BPF (BTF or the JIT switch present).
    Bpf,
    /// Network namespaces (CONFIG_NET_NS).
    Netns,
    /// /dev/net/tun (tools/delayline).
    Tun,
    /// Programs on PATH.
    Tools(&'a [&'a str]),
    /// A module python3 can import.
    Python(&'a str),
    /// A file or directory, and how to get it.
    Path(&'a Path, &'a str),
}

/// True when running under CI (`CI=true` or `CI=1`): nothing may be skipped.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The first of `needs` this machine does not meet, as a reason.
pub fn missing(needs: &[Need]) -> Option<String> {
    for need in needs {
        let why = match *need {
            // SAFETY: geteuid has no preconditions.
            Need::Root if unsafe { libc::geteuid() } != 0 => "not root".to_owned(),
            Need::Bpf
                if !Path::new("/sys/kernel/btf/vmlinux").exists()
                    && !Path::new("/proc/sys/net/core/bpf_jit_enable").exists() =>
            {
                "kernel without BPF".to_owned()
            }
            Need::Netns if !Path::new("/proc/self/ns/net").exists() => {
                "kernel without network namespaces".to_owned()
            }
            Need::Tun if !Path::new("/dev/net/tun").exists() => "no /dev/net/tun".to_owned(),
            Need::Tools(tools) => match tools.iter().find(|t| !have(t)) {
                Some(tool) => format!("{tool} not installed (scripts/install-deps.sh)"),
                None => continue,
            },
            Need::Python(module) => {
                let ok = Command::new("python3")
                    .args(["-c", &format!("import {module}")])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if ok {
                    continue;
                }
                format!("python3 has no {module} (scripts/install-deps.sh)")
            }
            Need::Path(path, how) if !path.exists() => {
                format!("{} missing ({how})", path.display())
            }
            _ => continue,
        };
        return Some(why);
    }
    None
}

/// Why a namespace/eBPF test cannot run here, if it cannot: not root, no
/// network namespaces, no BPF, or one of `tools` missing.
pub fn missing_prerequisite(tools: &[&str]) -> Option<String> {
    missing(&[Need::Root, Need::Tools(tools), Need::Netns, Need::Bpf])
}

/// `test` cannot run, for `why`: panics under CI, else says so; true (the
/// caller returns).
pub fn not_here(test: &str, why: &str) -> bool {
    if ci() {
        panic!("CI=true but {test} cannot run: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    true
}

/// True if the test should return (skipped) because one of `needs` is
/// missing; panics under CI.
pub fn skip_unless(test: &str, needs: &[Need]) -> bool {
    match missing(needs) {
        Some(why) => not_here(test, &why),
        None => false,
    }
}

/// The usual privileged test: root, network namespaces, BPF and `tools`.
/// True if the test should return (skipped); panics under CI.
pub fn skip(test: &str, tools: &[&str]) -> bool {
    match missing_prerequisite(tools) {
        Some(why) => not_here(test, &why),
        None => false,
    }
}
