//! The Kubernetes deployment without a cluster: the Helm chart
//! (deploy/helm/tlsrum) passes `helm lint --strict` and its values schema
//! refuses a bad value; the raw DaemonSet (deploy/kubernetes/tlsrum.yaml)
//! is the chart rendered with its defaults; both, and a rendering with
//! other values, decode strictly into the Kubernetes API's own types
//! (tools/k8s-validate: k8s.io/api, offline); and what they run agrees with
//! the systemd unit and the binary: the same capabilities as
//! deploy/tlsrum.service, flags `tlsrum live` knows, the metrics port the
//! Prometheus annotations name.
//!
//! Needs helm and k8s-validate (scripts/install-deps.sh: `go install`, in
//! $(go env GOPATH)/bin) and python3-yaml; missing ones fail under CI=true.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::prereq;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A Go tool: on PATH, else where `go install` puts it.
fn go_tool(name: &str) -> PathBuf {
    if prereq::have(name) {
        return PathBuf::from(name);
    }
    let gopath = Command::new("go").args(["env", "GOPATH"]).output();
    let dir = gopath.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    PathBuf::from(dir.unwrap_or_default())
        .join("bin")
        .join(name)
}

fn missing() -> Option<String> {
    for tool in ["helm", "k8s-validate"] {
        if !go_tool(tool).exists() && !prereq::have(tool) {
            return Some(format!("{tool} (scripts/install-deps.sh)"));
        }
    }
    prereq::missing(&[
        prereq::Need::Tools(&["python3"]),
        prereq::Need::Python("yaml"),
    ])
}

fn skip(test: &str) -> bool {
    match missing() {
        Some(why) => prereq::not_here(test, &why),
        None => false,
    }
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    out
}

fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn chart() -> PathBuf {
    repo().join("deploy/helm/tlsrum")
}

/// `helm template` of the chart with `--set` values.
fn render(set: &[&str]) -> String {
    let mut cmd = Command::new(go_tool("helm"));
    cmd.args(["template", "tlsrum"]).arg(chart());
    cmd.args(["--namespace", "monitoring"]);
    for s in set {
        cmd.args(["--set", s]);
    }
    ok(&mut cmd)
}

/// Every YAML document, as JSON.
fn documents(yaml: &str) -> Vec<Value> {
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        "import json, sys, yaml; json.dump([d for d in yaml.safe_load_all(sys.stdin) if d], sys.stdout)",
    ]);
    cmd.stdin(std::process::Stdio::piped());
    cmd.stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    match serde_json::from_slice(&out.stdout).unwrap() {
        Value::Array(docs) => docs,
        v => panic!("{v}"),
    }
}

/// Strict decoding into the Kubernetes API types; the objects it saw.
fn validate(yaml: &str, what: &str) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("tlsrum-ship-k8s-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{what}.yaml"));
    std::fs::write(&file, yaml).unwrap();
    let out = run(Command::new(go_tool("k8s-validate")).arg(&file));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{what}: k8s-validate:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// The capabilities deploy/tlsrum.service grants, as Kubernetes names them.
fn unit_capabilities() -> BTreeSet<String> {
    let unit = std::fs::read_to_string(repo().join("deploy/tlsrum.service")).unwrap();
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("AmbientCapabilities="))
        .expect("AmbientCapabilities= in the unit");
    let caps: BTreeSet<String> = line
        .split_whitespace()
        .map(|c| c.strip_prefix("CAP_").expect("CAP_ name").to_string())
        .collect();
    assert!(caps.len() >= 3, "{caps:?}");
    caps
}

/// The long flags `tlsrum live --help` lists.
fn live_flags() -> BTreeSet<String> {
    let help = ok(Command::new(env!("CARGO_BIN_EXE_tlsrum")).args(["live", "--help"]));
    help.split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
        .filter(|w| w.starts_with("--"))
        .map(|w| w.split(['=', '<']).next().unwrap().to_string())
        .collect()
}

/// What the DaemonSet runs, checked against the unit and the binary;
/// returns the container's arguments.
fn check_daemonset(docs: &[Value], what: &str) -> Vec<String> {
    let ds: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "DaemonSet").collect();
    assert_eq!(ds.len(), 1, "{what}: one DaemonSet");
    let pod = &ds[0]["spec"]["template"];
    let spec = &pod["spec"];
    assert_eq!(spec["hostNetwork"], true, "{what}: the host's interfaces");
    let containers = spec["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "{what}");
    let c = &containers[0];
    let sc = &c["securityContext"];
    let add: BTreeSet<String> = sc["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        add,
        unit_capabilities(),
        "{what}: capabilities differ from deploy/tlsrum.service"
    );
    assert_eq!(
        sc["capabilities"]["drop"],
        serde_json::json!(["ALL"]),
        "{what}"
    );
    assert_eq!(sc["privileged"], false, "{what}");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert!(
        sc["seccompProfile"]["type"].is_string(),
        "{what}: a seccomp profile"
    );
    for kind in ["requests", "limits"] {
        for r in ["cpu", "memory"] {
            assert!(
                c["resources"][kind][r].is_string(),
                "{what}: resources.{kind}.{r}"
            );
        }
    }

    let args: Vec<String> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        args.first().map(String::as_str),
        Some("live"),
        "{what}: {args:?}"
    );
    let known = live_flags();
    for a in &args[1..] {
        let flag = a.split('=').next().unwrap();
        assert!(
            known.contains(flag),
            "{what}: `tlsrum live` has no {flag} ({args:?})"
        );
    }
    // The port Prometheus is told to scrape is the one /metrics is on.
    let port = c["ports"][0]["containerPort"].as_u64().unwrap();
    assert_eq!(c["ports"][0]["name"], "metrics");
    let notes = &pod["metadata"]["annotations"];
    assert_eq!(notes["prometheus.io/scrape"], "true", "{what}");
    assert_eq!(notes["prometheus.io/port"], port.to_string(), "{what}");
    assert_eq!(notes["prometheus.io/path"], "/metrics", "{what}");
    let metrics = args
        .iter()
        .find_map(|a| a.strip_prefix("--metrics="))
        .expect("--metrics");
    assert_eq!(metrics, format!("$(NODE_IP):{port}"), "{what}");
    let env = &c["env"][0];
    assert_eq!(env["name"], "NODE_IP");
    assert_eq!(env["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
    args
}

#[test]
fn helm_chart_lints_and_its_schema_refuses_bad_values() {
    if skip("helm_chart_lints_and_its_schema_refuses_bad_values") {
        return;
    }
    ok(Command::new(go_tool("helm"))
        .args(["lint", "--strict"])
        .arg(chart()));
    for bad in ["backend=xdp", "metrics.port=0", "interfacs[0]=eth0"] {
        let out = run(Command::new(go_tool("helm"))
            .args(["lint", "--strict", "--set", bad])
            .arg(chart()));
        assert!(!out.status.success(), "helm lint accepted --set {bad}");
    }
}

#[test]
fn raw_daemonset_is_the_chart_rendered_and_valid() {
    if skip("raw_daemonset_is_the_chart_rendered_and_valid") {
        return;
    }
    let raw = std::fs::read_to_string(repo().join("deploy/kubernetes/tlsrum.yaml")).unwrap();
    let body = &raw[raw.find("---").expect("a YAML document")..];
    assert!(
        body == render(&[]),
        "deploy/kubernetes/tlsrum.yaml is not the chart rendered with its defaults: run `make k8s-manifest`"
    );
    assert_eq!(
        validate(&raw, "raw"),
        ["apps/v1 DaemonSet monitoring/tlsrum"]
    );
    let docs = documents(&raw);
    let args = check_daemonset(&docs, "raw");
    // The chart's appVersion is the agent's version: `make image` tags it so.
    let image = &docs[0]["spec"]["template"]["spec"]["containers"][0]["image"];
    assert_eq!(
        image,
        &format!("localhost/tlsrum:{}", env!("CARGO_PKG_VERSION"))
    );
    for want in [
        "--backend=ebpf",
        "--iface=eth0",
        "--port=443",
        "--top-server-names=20",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
    }
}

#[test]
fn chart_values_reach_the_command_line() {
    if skip("chart_values_reach_the_command_line") {
        return;
    }
    let yaml = render(&[
        "backend=pcap",
        "interfaces={eth1,ens5}",
        "ports={443}",
        "topServerNames=50",
        "hashServerNamesSalt=pepper",
        "extraArgs={--all-ports}",
        "metrics.port=9100",
        "image.tag=test",
        "seccompProfile.type=Localhost",
        "seccompProfile.localhostProfile=tlsrum.json",
    ]);
    assert_eq!(
        validate(&yaml, "values"),
        ["apps/v1 DaemonSet monitoring/tlsrum"]
    );
    let docs = documents(&yaml);
    let args = check_daemonset(&docs, "values");
    let want = [
        "live",
        "--backend=pcap",
        "--iface=eth1",
        "--iface=ens5",
        "--port=443",
        "--metrics=$(NODE_IP):9100",
        "--top-server-names=50",
        "--hash-server-names=pepper",
        "--all-ports",
    ];
    assert_eq!(args, want);
    let image = docs[0]["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap();
    assert_eq!(image, "localhost/tlsrum:test");
    let sc = &docs[0]["spec"]["template"]["spec"]["containers"][0]["securityContext"];
    assert_eq!(
        sc["seccompProfile"],
        serde_json::json!({"type": "Localhost", "localhostProfile": "tlsrum.json"})
    );
}
