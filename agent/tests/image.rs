//! The container image as an operator runs it: `scripts/image.sh` builds it
//! from this build's binary with `buildah from scratch` (the binary and the
//! libraries it links, no base image pulled), then rootful `podman run`
//! watches real traffic with the systemd unit's capabilities only (all
//! others dropped) on a read-only root: nginx in one namespace, curl in
//! another, the container in the server's namespace (`--network
//! ns:/run/netns/...`, what `--network host` is on a host, without touching
//! this machine's interfaces), for each backend (eBPF and libpcap). Its
//! /metrics counts the handshakes curl made, its `--events -` NDJSON on
//! stdout has one record for each, and SIGTERM stops it with status 0.
//! The container's seccomp profile is deploy/seccomp/tlsrum.json, the
//! unit's SystemCallFilter (podman 4.3's default profile refuses bpf() to a
//! container without CAP_SYS_ADMIN).
//!
//! Needs root, network namespaces, BPF, buildah, podman, nginx, curl,
//! openssl (scripts/install-deps.sh); missing ones fail under CI=true.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{ns_cmd, run, skip_unless, wait_for, Need, Procs, Topology, SERVER_IP};

const BIN: &str = env!("CARGO_BIN_EXE_tlsrum");
const HOST: &str = "ship.test";
const METRICS_PORT: u16 = 19853;
const CONNECTIONS: usize = 3;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The image and any container of this test, removed whatever happens.
struct Image {
    name: String,
    container: String,
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "-f", "-i", &self.container])
            .output();
        let _ = Command::new("podman")
            .args(["rmi", "-f", &self.name])
            .output();
    }
}

/// The capabilities deploy/tlsrum.service grants, as podman names them.
fn unit_capabilities() -> Vec<String> {
    let unit = std::fs::read_to_string(repo().join("deploy/tlsrum.service")).unwrap();
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("AmbientCapabilities="))
        .expect("AmbientCapabilities= in the unit");
    line.split_whitespace().map(String::from).collect()
}

/// What podman needs from this machine besides defaults. Raising a
/// container's limits to podman's defaults (nofile 1048576) needs
/// CAP_SYS_RESOURCE, which a sandboxed CI machine may lack: then ask for
/// limits within this process's. crun refuses cgroup v1 with controllers
/// left on the v2 hierarchy ("hybrid mode"); runc copes.
fn podman_global_and_run_args() -> (Vec<String>, Vec<String>) {
    let mut global = Vec::new();
    let mut run_args = Vec::new();
    let hybrid = std::fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers")
        .is_ok_and(|c| !c.trim().is_empty());
    if hybrid {
        global.extend(["--runtime".into(), "runc".into()]);
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
        .unwrap();
    const CAP_SYS_RESOURCE: u32 = 24;
    if cap_eff & (1 << CAP_SYS_RESOURCE) == 0 {
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        let hard = |name: &str| -> u64 {
            let line = limits.lines().find(|l| l.starts_with(name)).unwrap();
            line[name.len()..]
                .split_whitespace()
                .nth(1)
                .unwrap()
                .parse()
                .unwrap()
        };
        let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let nofile = hard("Max open files");
        let nproc = hard("Max processes").min(pid_max);
        run_args.extend([
            "--ulimit".into(),
            format!("nofile={nofile}:{nofile}"),
            "--ulimit".into(),
            format!("nproc={nproc}:{nproc}"),
        ]);
    }
    (global, run_args)
}

/// deploy/seccomp/tlsrum.json, checked to be what
/// scripts/seccomp-profile.py makes of the unit's SystemCallFilter now.
fn seccomp_profile() -> PathBuf {
    let committed = repo().join("deploy/seccomp/tlsrum.json");
    let fresh =
        std::env::temp_dir().join(format!("tlsrum-ship-seccomp-{}.json", std::process::id()));
    run(&[
        "python3",
        repo().join("scripts/seccomp-profile.py").to_str().unwrap(),
        fresh.to_str().unwrap(),
    ]);
    let same = std::fs::read(&fresh).unwrap() == std::fs::read(&committed).unwrap();
    let _ = std::fs::remove_file(&fresh);
    assert!(
        same,
        "deploy/seccomp/tlsrum.json differs from the unit's SystemCallFilter: run scripts/seccomp-profile.py"
    );
    committed
}

fn start_nginx(topo: &Topology, procs: &mut Procs) {
    let (key, cert) = topo.self_signed(HOST);
    let http = format!(
        "    access_log off;\n    server {{\n        \
         listen {SERVER_IP}:443 ssl;\n        server_name {HOST};\n        \
         ssl_certificate {};\n        ssl_certificate_key {};\n        \
         location / {{ return 200 \"ok\\n\"; }}\n    }}\n",
        cert.display(),
        key.display(),
    );
    common::servers::nginx(&topo.server_ns, &topo.path("nginx"), &http, "nginx", procs);
    topo.wait_listening(443, procs);
}

fn scrape(topo: &Topology) -> String {
    let out = ns_cmd(
        &topo.server_ns,
        &[
            "curl",
            "-s",
            &format!("http://127.0.0.1:{METRICS_PORT}/metrics"),
        ],
    )
    .output()
    .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The sum of `tls_handshakes_total` for our server name.
fn handshakes(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("tls_handshakes_total{") && l.contains(&format!("server_name=\"{HOST}\""))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// One container run with `backend`: counts what curl did.
fn watch(topo: &Topology, image: &Image, backend: &str) {
    let (global, limits) = podman_global_and_run_args();
    let caps = unit_capabilities().join(",");
    let netns = format!("ns:/run/netns/{}", topo.server_ns);
    let metrics = format!("127.0.0.1:{METRICS_PORT}");
    let mut cmd = Command::new("podman");
    cmd.args(&global)
        .args([
            "run",
            "--rm",
            "--name",
            &image.container,
            "--network",
            &netns,
        ])
        .args(["--cap-drop", "ALL", "--cap-add", &caps, "--read-only"])
        .args([
            "--security-opt",
            &format!("seccomp={}", seccomp_profile().display()),
        ])
        .args(&limits)
        .arg(&image.name)
        .args(["live", "--backend", backend, "--iface", &topo.veth])
        .args(["--metrics", &metrics, "--events", "-"]);
    let events = topo.path(&format!("events-{backend}.ndjson"));
    let stderr = topo.path(&format!("stderr-{backend}.log"));
    cmd.stdin(Stdio::null())
        .stdout(File::create(&events).unwrap())
        .stderr(File::create(&stderr).unwrap());
    // Removed by `Image`'s drop (podman rm -f) if the test fails.
    let mut child = cmd.spawn().unwrap();
    let log = || std::fs::read_to_string(&stderr).unwrap_or_default();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !scrape(topo).contains("# EOF") {
        let alive = child.try_wait().unwrap().is_none();
        assert!(
            alive && std::time::Instant::now() < deadline,
            "{backend}: no /metrics from the container (running: {alive}):\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for _ in 0..CONNECTIONS {
        let url = format!("https://{HOST}/");
        let resolve = format!("{HOST}:443:{SERVER_IP}");
        let out = ns_cmd(
            &topo.client_ns,
            &["curl", "-sk", "--resolve", &resolve, &url],
        )
        .output()
        .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "ok\n",
            "curl: {out:?}"
        );
    }
    let mut seen = 0.0;
    wait_for(
        &format!("{backend}: {CONNECTIONS} handshakes in /metrics"),
        Duration::from_secs(20),
        || {
            seen = handshakes(&scrape(topo));
            seen >= CONNECTIONS as f64
        },
    );
    assert_eq!(seen, CONNECTIONS as f64, "{backend}: {}", log());
    // podman run passes SIGTERM on to the agent, which detaches and exits.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{backend}: still running 20 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        status.success(),
        "{backend}: container exited {status:?}:\n{}",
        log()
    );
    let ndjson = std::fs::read_to_string(&events).unwrap();
    let records: Vec<serde_json::Value> = ndjson
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let ours = records.iter().filter(|r| r["sni"] == HOST).count();
    assert_eq!(
        ours, CONNECTIONS,
        "{backend}: records in --events -:\n{ndjson}"
    );
    eprintln!("{backend}: {CONNECTIONS} handshakes in /metrics and in the events, exit 0");
}

#[test]
fn image_from_scratch_watches_traffic_under_podman() {
    if skip_unless(
        "image_from_scratch_watches_traffic_under_podman",
        &[
            Need::Root,
            Need::Netns,
            Need::Bpf,
            Need::Tools(&["buildah", "podman", "nginx", "curl", "openssl", "ldd"]),
        ],
    ) {
        return;
    }
    let pid = std::process::id();
    let image = Image {
        name: format!("localhost/tlsrum:ship-test-{pid}"),
        container: format!("tlsrum-ship-test-{pid}"),
    };
    let built = run(&[
        "bash",
        repo().join("scripts/image.sh").to_str().unwrap(),
        BIN,
        &image.name,
    ]);
    assert_eq!(built.trim(), image.name);
    // Nothing but the binary and its libraries: no shell to run.
    let (global, limits) = podman_global_and_run_args();
    let shell = Command::new("podman")
        .args(&global)
        .args(["run", "--rm"])
        .args(&limits)
        .args(["--entrypoint", "/bin/sh", &image.name, "-c", "true"])
        .output()
        .unwrap();
    assert!(!shell.status.success(), "the image has a shell");
    let version = Command::new("podman")
        .args(&global)
        .args(["run", "--rm"])
        .args(&limits)
        .args([&image.name, "--version"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&version.stdout),
        run(&[BIN, "--version"]),
        "{}",
        String::from_utf8_lossy(&version.stderr)
    );

    let topo = Topology::new("shp");
    let mut procs = Procs::default();
    start_nginx(&topo, &mut procs);
    for backend in ["ebpf", "pcap"] {
        watch(&topo, &image, backend);
    }
}
