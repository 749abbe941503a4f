//! Shared pieces of the privileged tests: prerequisites (a missing one is a
//! skip locally and a failure under CI=true), two network namespaces joined
//! by a veth pair that are deleted on drop, and child processes that are
//! stopped on drop. Patterns from `ebpf_attach.rs`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const SERVER_IP: &str = "192.0.2.1"; // TEST-NET-1, only inside our namespaces
pub const CLIENT_IP: &str = "192.0.2.2";

/// Why the test cannot run here, if it cannot: not root, no BPF, or one of
/// `tools` missing.
pub fn missing_prerequisite(tools: &[&str]) -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    for tool in tools {
        if !have(tool) {
            return Some(format!("{tool} not installed (scripts/install-deps.sh)"));
        }
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists()
        && !Path::new("/proc/sys/net/core/bpf_jit_enable").exists()
    {
        return Some("kernel without BPF".into());
    }
    None
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// True if the test should return (skipped); panics under CI=true.
pub fn skip(test: &str, tools: &[&str]) -> bool {
    let Some(why) = missing_prerequisite(tools) else {
        return false;
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true but {test} cannot run: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    true
}

/// Runs a short command to completion; panics with its stderr on failure.
pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ip netns exec NS` followed by `args`, as a command to complete.
pub fn ns_cmd(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(args);
    c
}

/// Two namespaces and the veth between them; deleted on drop (which also
/// removes every TC program and capture attached to the veth).
pub struct Topology {
    pub server_ns: String,
    pub client_ns: String,
    /// The server's end (in `server_ns`).
    pub veth: String,
    /// The client's end (in `client_ns`).
    pub peer: String,
    pub dir: PathBuf,
}

impl Topology {
    /// `tag` keeps topologies of tests running at the same time apart.
    pub fn new(tag: &str) -> Self {
        let pid = std::process::id();
        let t = Topology {
            server_ns: format!("tlsrum-ls{tag}{pid}"),
            client_ns: format!("tlsrum-lc{tag}{pid}"),
            veth: format!("ls{tag}{pid}"),
            peer: format!("lc{tag}{pid}"),
            dir: std::env::temp_dir().join(format!("tlsrum-live-{tag}{pid}")),
        };
        let _ = std::fs::remove_dir_all(&t.dir);
        std::fs::create_dir_all(&t.dir).unwrap();
        // From here on, Drop cleans up whatever was made.
        run(&["ip", "netns", "add", &t.server_ns]);
        run(&["ip", "netns", "add", &t.client_ns]);
        t.create_veth();
        t
    }

    /// Makes the veth pair with its addresses (again, after a test deleted it).
    pub fn create_veth(&self) {
        run(&[
            "ip",
            "link",
            "add",
            &self.veth,
            "netns",
            &self.server_ns,
            "type",
            "veth",
            "peer",
            "name",
            &self.peer,
            "netns",
            &self.client_ns,
        ]);
        for (ns, dev, ip) in [
            (&self.server_ns, &self.veth, SERVER_IP),
            (&self.client_ns, &self.peer, CLIENT_IP),
        ] {
            run(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                dev,
            ]);
            run(&["ip", "-n", ns, "link", "set", dev, "up"]);
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
    }

    /// A self-signed ECDSA certificate for `cn` in the test directory: (key, cert).
    pub fn self_signed(&self, cn: &str) -> (PathBuf, PathBuf) {
        let (key, cert) = (self.path("key.pem"), self.path("cert.pem"));
        run(&[
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={cn}"),
            "-addext",
            &format!("subjectAltName=DNS:{cn}"),
            "-keyout",
            key.to_str().unwrap(),
            "-out",
            cert.to_str().unwrap(),
        ]);
        (key, cert)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Waits until something listens on TCP `port` in the server namespace.
    pub fn wait_listening(&self, port: u16, procs: &mut Procs) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = run(&[
                "ip",
                "netns",
                "exec",
                &self.server_ns,
                "ss",
                "-Hltn",
                &format!("sport = :{port}"),
            ]);
            if !out.trim().is_empty() {
                return;
            }
            procs.check_alive();
            assert!(Instant::now() < deadline, "nothing listens on port {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in [&self.server_ns, &self.client_ns] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
        if std::thread::panicking() {
            eprintln!("test files kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Long-running children, stopped on drop: SIGTERM, then SIGKILL. Each is
/// started through `ip netns exec`, which execs the program, so the pid is
/// the program's own.
#[derive(Default)]
pub struct Procs(Vec<(String, Child)>);

impl Procs {
    pub fn spawn(&mut self, name: &str, mut cmd: Command) -> u32 {
        let child = cmd.spawn().unwrap_or_else(|e| panic!("{name}: {e}"));
        let pid = child.id();
        self.0.push((name.to_owned(), child));
        pid
    }

    /// Panics if a child has exited on its own.
    pub fn check_alive(&mut self) {
        for (name, c) in &mut self.0 {
            if let Ok(Some(status)) = c.try_wait() {
                panic!("{name} exited early: {status}");
            }
        }
    }

    /// Sends `sig` to the named child and waits for it (SIGKILL after
    /// `grace`); returns its exit status.
    pub fn stop(&mut self, name: &str, sig: i32, grace: Duration) -> std::process::ExitStatus {
        let i = self
            .0
            .iter()
            .position(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no process {name}"));
        let (_, mut c) = self.0.remove(i);
        // SAFETY: kill on the pid of our own unreaped child.
        unsafe { libc::kill(c.id() as i32, sig) };
        let deadline = Instant::now() + grace;
        loop {
            if let Ok(Some(status)) = c.try_wait() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let status = c.wait().expect("wait");
                eprintln!("{name} did not stop within {grace:?}: killed");
                return status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            // SAFETY: as in stop().
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for (_, c) in &mut self.0 {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits until `path` contains `needle` (a program's log saying it is
/// ready); panics after `secs` or if a child died.
pub fn wait_for_text(path: &Path, needle: &str, secs: u64, procs: &mut Procs) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if std::fs::read_to_string(path).is_ok_and(|s| s.contains(needle)) {
            return;
        }
        procs.check_alive();
        assert!(
            Instant::now() < deadline,
            "{} never said {needle:?}: {}",
            path.display(),
            std::fs::read_to_string(path).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
