//! The delay line (tools/delayline) the wide-area tests drive.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The delay line next to the tlsrum binary under test; built if missing
/// (`cargo test --workspace` builds it already, for its own tests).
pub fn delayline() -> PathBuf {
    let tlsrum = PathBuf::from(env!("CARGO_BIN_EXE_tlsrum"));
    let path = tlsrum.with_file_name("delayline");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        // The same profile as the binary under test: target/<dir>/tlsrum,
        // where <dir> is the profile's name ("debug" for the dev profile).
        let profile = match tlsrum
            .parent()
            .and_then(Path::file_name)
            .and_then(|d| d.to_str())
        {
            Some("debug") | None => "dev".to_string(),
            Some(dir) => dir.to_string(),
        };
        let mut cmd = Command::new(cargo);
        cmd.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
            .args(["build", "-p", "delayline", "--profile", &profile]);
        let status = cmd.status().expect("run cargo build -p delayline");
        assert!(status.success(), "cargo build -p delayline failed");
    }
    assert!(path.exists(), "{} not found after building", path.display());
    path
}
