//! Child processes: short commands run to completion, long-running ones
//! stopped on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs a short command to completion; panics with its output on failure.
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

/// `ip netns exec NS` followed by `args`, as a command to complete. `ip`
/// execs the program, so a spawned child's pid is the program's own.
pub fn ns_cmd(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(args);
    c
}

/// Long-running children, stopped on drop: SIGTERM, then SIGKILL for what
/// still runs 5 s later.
#[derive(Default)]
pub struct Procs(Vec<(String, Child, Option<PathBuf>)>);

impl Procs {
    /// Starts `cmd` as it is set up; returns its pid.
    pub fn spawn(&mut self, name: &str, mut cmd: Command) -> u32 {
        let child = cmd.spawn().unwrap_or_else(|e| panic!("{name}: {e}"));
        let pid = child.id();
        self.0.push((name.to_owned(), child, None));
        pid
    }

    /// Starts `cmd` with stdin from /dev/null and stdout and stderr into
    /// `log`, which is shown if it dies early; returns its pid.
    pub fn spawn_logged(&mut self, name: &str, mut cmd: Command, log: &Path) -> u32 {
        let out = std::fs::File::create(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        let pid = self.spawn(name, cmd);
        self.0.last_mut().unwrap().2 = Some(log.to_owned());
        pid
    }

    /// Panics if a child has exited on its own.
    pub fn check_alive(&mut self) {
        for (name, c, log) in &mut self.0 {
            if let Ok(Some(status)) = c.try_wait() {
                let log = log
                    .as_ref()
                    .map(|l| std::fs::read_to_string(l).unwrap_or_default())
                    .unwrap_or_default();
                panic!("{name} exited early: {status}\n{log}");
            }
        }
    }

    /// Sends `sig` to the named child and waits for it (SIGKILL after
    /// `grace`); returns its exit status.
    pub fn stop(&mut self, name: &str, sig: i32, grace: Duration) -> std::process::ExitStatus {
        let i = self
            .0
            .iter()
            .position(|(n, _, _)| n == name)
            .unwrap_or_else(|| panic!("no process {name}"));
        let (_, mut c, _) = self.0.remove(i);
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
        for (_, c, _) in &mut self.0 {
            // SAFETY: as in stop().
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for (_, c, _) in &mut self.0 {
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

/// Waits until `ready()`; panics with `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
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
