//! The delay line (tools/delayline) the wide-area tests drive, and the
//! Python labs (scripts/experiment/) that run on it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The delay line next to the tlsrum binary under test, built with the
/// test's profile.
pub fn delayline() -> PathBuf {
    super::cargo_build::cargo_build(&["-p", "delayline"]);
    let path = PathBuf::from(env!("CARGO_BIN_EXE_tlsrum")).with_file_name("delayline");
    assert!(path.exists(), "{} not found after building", path.display());
    path
}

/// Runs a lab script of scripts/experiment/ at 20, 100 and 260 ms RTT with
/// the binaries under test, and returns the JSON document it wrote and the
/// work directory (the caller removes it once the test passed). A lab error
/// fails the test, naming where the logs are.
pub fn run_lab(script: &str, tag: &str) -> (serde_json::Value, PathBuf) {
    run_lab_at(script, tag, "20,100,260")
}

/// [`run_lab`] with the script's own `--rtt` argument.
pub fn run_lab_at(script: &str, tag: &str, rtt: &str) -> (serde_json::Value, PathBuf) {
    run_lab_args(script, tag, &["--rtt", rtt])
        .unwrap_or_else(|work| panic!("{script} failed (lab error); logs in {}", work.display()))
}

/// [`run_lab_at`] with further arguments for the script; `Err` with the
/// work directory when the script reported a lab error (exit status not 0).
pub fn run_lab_args(
    script: &str,
    tag: &str,
    args: &[&str],
) -> Result<(serde_json::Value, PathBuf), PathBuf> {
    let dl = delayline();
    let work = std::env::temp_dir().join(format!("tlsrum-{tag}-test-{}", std::process::id()));
    let out = work.join(format!("{tag}.json"));
    std::fs::create_dir_all(&work).unwrap();
    let status = Command::new("python3")
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../scripts/experiment")
                .join(script),
        )
        .args(args)
        .arg("--out")
        .arg(&out)
        .arg("--workdir")
        .arg(work.join("labs"))
        .env("TLSRUM", env!("CARGO_BIN_EXE_tlsrum"))
        .env("DELAYLINE", &dl)
        .status()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    if !status.success() {
        return Err(work);
    }
    let doc = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    Ok((doc, work))
}
