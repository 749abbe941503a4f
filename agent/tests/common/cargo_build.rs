//! Binaries the tests run besides tlsrum, built with the test's own
//! profile every time (a no-op when current): `cargo test --test NAME`
//! builds only this package's binaries, and one left from before a change
//! would run stale.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The cargo profile of the binary under test: it sits in
/// target/<dir>/tlsrum, where <dir> is the profile's name ("debug" for the
/// dev profile).
pub fn profile() -> String {
    let tlsrum = Path::new(env!("CARGO_BIN_EXE_tlsrum"));
    match tlsrum
        .parent()
        .and_then(Path::file_name)
        .and_then(|d| d.to_str())
    {
        Some("debug") | None => "dev".to_string(),
        Some(dir) => dir.to_string(),
    }
}

/// Runs `cargo build --profile <the test's> ARGS` in the workspace.
pub fn cargo_build(args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .args(["build", "-q", "--profile", &profile()])
        .args(args)
        .status()
        .expect("running cargo build");
    assert!(status.success(), "cargo build {} failed", args.join(" "));
}

/// The tlsrum example `name` (agent/examples/), built.
pub fn example(name: &str) -> PathBuf {
    cargo_build(&["-p", "tlsrum", "--example", name]);
    let bin = Path::new(env!("CARGO_BIN_EXE_tlsrum"))
        .with_file_name("examples")
        .join(name);
    assert!(bin.exists(), "{} not found after building", bin.display());
    bin
}
