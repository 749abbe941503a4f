//! The TLS servers the tests start in a namespace: nginx (in the
//! foreground, one process, every file it writes under its own directory,
//! so that several run side by side) and `openssl s_server`.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};

use super::procs::{ns_cmd, run, Procs};

/// Writes `dir/nginx.conf` with `http` (the `http` block's own lines:
/// servers, logs, certificates) inside the common frame, checks it with
/// `nginx -t`, and starts nginx in namespace `ns` as `procs`' `name`
/// (stderr in `dir/stderr.log`). Does not wait for it to listen.
pub fn nginx(ns: &str, dir: &Path, http: &str, name: &str, procs: &mut Procs) {
    std::fs::create_dir_all(dir).unwrap();
    let d = dir.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log info;\nevents {{ worker_connections 256; }}\nhttp {{\n    \
         client_body_temp_path {d}/body;\n    proxy_temp_path {d}/proxy;\n    \
         fastcgi_temp_path {d}/fastcgi;\n    uwsgi_temp_path {d}/uwsgi;\n    \
         scgi_temp_path {d}/scgi;\n{http}}}\n"
    );
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let conf_s = conf_path.to_str().unwrap();
    let prefix = format!("{d}/");
    run(&[
        "ip", "netns", "exec", ns, "nginx", "-t", "-q", "-p", &prefix, "-c", conf_s,
    ]);
    let mut cmd = ns_cmd(ns, &["nginx", "-p", &prefix, "-c", conf_s]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(dir.join("stderr.log")).unwrap());
    procs.spawn(name, cmd);
}

/// `openssl s_server -accept ACCEPT` (a port, or `host:port`) with this
/// certificate and `extra` options, in namespace `ns`, as a command to
/// spawn. Its stdin is a pipe that stays open and silent: s_server stops
/// on its EOF and sends whatever it reads.
pub fn s_server(ns: &str, accept: &str, cert: &Path, key: &Path, extra: &[&str]) -> Command {
    let mut cmd = ns_cmd(ns, &["openssl", "s_server", "-accept", accept, "-cert"]);
    cmd.arg(cert).arg("-key").arg(key).args(extra);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}
