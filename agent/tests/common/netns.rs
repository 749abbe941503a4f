//! Network namespaces that clean up after themselves.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::procs::{run, Procs};

pub const SERVER_IP: &str = "192.0.2.1"; // TEST-NET-1, only inside our namespaces
pub const CLIENT_IP: &str = "192.0.2.2";
pub const SERVER_IP6: &str = "2001:db8::1"; // documentation prefix, likewise
pub const CLIENT_IP6: &str = "2001:db8::2";

/// Kills what still runs in namespace `ns` (only the test's own children
/// can be there; never this process, whose thread may have entered it) and
/// deletes it.
fn delete_netns(ns: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
        let me = std::process::id() as i32;
        for pid in String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .filter(|p| *p != me)
        {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    let _ = Command::new("ip")
        .args(["netns", "del", ns])
        .stderr(Stdio::null())
        .status();
}

/// Keeps a test's files when it failed or TLSRUM_KEEP_TEST_DIR is set.
fn remove_dir(dir: &std::path::Path) {
    if std::thread::panicking() || std::env::var_os("TLSRUM_KEEP_TEST_DIR").is_some() {
        eprintln!("test files kept in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// One network namespace with its loopback up; deleted on drop (with
/// whatever still runs in it).
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// `tag` keeps namespaces of tests running at the same time apart.
    pub fn new(tag: &str) -> Self {
        let ns = Netns {
            name: format!("tlsrum-n{tag}{}", std::process::id()),
        };
        run(&["ip", "netns", "add", &ns.name]);
        run(&["ip", "-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        delete_netns(&self.name);
    }
}

/// A self-signed ECDSA P-256 certificate for `cn` (also its DNS name),
/// written to `dir` as key.pem and cert.pem: (key, cert).
pub fn self_signed(dir: &Path, cn: &str) -> (PathBuf, PathBuf) {
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
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

/// Gives `dev` in namespace `ns` the address `cidr` and brings it up.
pub fn address_up(ns: &str, dev: &str, cidr: &str) {
    run(&["ip", "-n", ns, "addr", "add", cidr, "dev", dev]);
    run(&["ip", "-n", ns, "link", "set", dev, "up"]);
}

/// Two namespaces, the veth between them and a scratch directory; on drop
/// (also when the test fails) whatever still runs in the namespaces is
/// killed, the namespaces are deleted (which also removes every TC program
/// and capture attached to the veth) and the directory removed, unless the
/// test failed or TLSRUM_KEEP_TEST_DIR is set.
pub struct Topology {
    pub server_ns: String,
    pub client_ns: String,
    /// The server's end (in `server_ns`).
    pub veth: String,
    /// The client's end (in `client_ns`).
    pub peer: String,
    pub dir: PathBuf,
    /// SERVER_IP6/CLIENT_IP6 on the veth too.
    pub ipv6: bool,
}

impl Topology {
    /// IPv4 only. `tag` keeps topologies of tests running at the same time
    /// apart (and must be short: interface names have 15 characters).
    pub fn new(tag: &str) -> Self {
        Self::make(tag, false)
    }

    /// IPv4 and IPv6 (without duplicate address detection, so that the
    /// addresses work at once).
    pub fn dual_stack(tag: &str) -> Self {
        Self::make(tag, true)
    }

    fn make(tag: &str, ipv6: bool) -> Self {
        let pid = std::process::id();
        let t = Topology {
            server_ns: format!("tlsrum-ls{tag}{pid}"),
            client_ns: format!("tlsrum-lc{tag}{pid}"),
            veth: format!("ls{tag}{pid}"),
            peer: format!("lc{tag}{pid}"),
            dir: std::env::temp_dir().join(format!("tlsrum-live-{tag}{pid}")),
            ipv6,
        };
        assert!(
            t.veth.len() <= 15,
            "tag {tag:?} too long for an interface name"
        );
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
        for (ns, dev, ip, ip6) in [
            (&self.server_ns, &self.veth, SERVER_IP, SERVER_IP6),
            (&self.client_ns, &self.peer, CLIENT_IP, CLIENT_IP6),
        ] {
            if self.ipv6 {
                run(&[
                    "ip",
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{ip6}/64"),
                    "dev",
                    dev,
                    "nodad",
                ]);
            }
            address_up(ns, dev, &format!("{ip}/24"));
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
    }

    /// A self-signed ECDSA certificate for `cn` in the test directory: (key, cert).
    pub fn self_signed(&self, cn: &str) -> (PathBuf, PathBuf) {
        self_signed(&self.dir, cn)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Waits until something listens on TCP `port` in the server namespace;
    /// panics after 10 s or if one of `procs` died.
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

    /// `tc qdisc show` on the server's veth.
    pub fn qdiscs(&self) -> String {
        run(&[
            "tc",
            "-n",
            &self.server_ns,
            "qdisc",
            "show",
            "dev",
            &self.veth,
        ])
    }

    /// `tc filter show` on the server's veth, `hook` ingress or egress.
    pub fn filters(&self, hook: &str) -> String {
        run(&[
            "tc",
            "-n",
            &self.server_ns,
            "filter",
            "show",
            "dev",
            &self.veth,
            hook,
        ])
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in [&self.server_ns, &self.client_ns] {
            delete_netns(ns);
        }
        remove_dir(&self.dir);
    }
}

/// This thread inside a namespace (aya's netlink and if_nametoindex work in
/// the caller's namespace); back to its own on drop.
pub struct InNetns(File);

impl InNetns {
    pub fn enter(ns: &str) -> Self {
        let orig = File::open("/proc/thread-self/ns/net").unwrap();
        let target = File::open(format!("/var/run/netns/{ns}")).unwrap();
        // SAFETY: setns on valid namespace fds; affects this thread only.
        assert_eq!(
            unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) },
            0,
            "setns"
        );
        InNetns(orig)
    }
}

impl Drop for InNetns {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::setns(self.0.as_raw_fd(), libc::CLONE_NEWNET) };
    }
}
