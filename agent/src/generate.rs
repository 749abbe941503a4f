//! Man pages and shell completions generated from the command-line
//! definition itself (clap_mangen, clap_complete), so that they never drift
//! from `--help`. The hidden `tlsrum manpages DIR` and `tlsrum completions
//! SHELL` call these; `make deb` and the Debian package ship their output.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use clap::Command;
pub use clap_complete::Shell;

/// Writes `tlsrum.1` and one page per visible subcommand (`tlsrum-replay.1`,
/// `tlsrum-live.1`) into `dir`, creating it if needed.
pub fn manpages(cmd: Command, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(cmd, dir)
        .with_context(|| format!("writing man pages to {}", dir.display()))
}

/// Writes the completion script for `shell` to `out`.
pub fn completions(mut cmd: Command, shell: Shell, out: &mut dyn Write) {
    let name = cmd.get_name().to_string();
    clap_complete::generate(shell, &mut cmd, name, out);
}
