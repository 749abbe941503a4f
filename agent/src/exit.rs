//! The exit status of `tlsrum`: one table, used by the commands, shown by
//! `--help` and copied in the README (a test holds the two the same).

use std::process::ExitCode;

/// What a run's exit status says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Every input was read to its end.
    Ok = 0,
    /// Some input was damaged or could not be read: the others' results
    /// (and what the damaged ones held up to the damage) were printed.
    Damaged = 1,
    /// A usage error, or nothing could be read: standard output is empty.
    Fatal = 2,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e as u8)
    }
}

/// The table as `--help` shows it (clap's `after_help`) and the README
/// copies it.
pub const TABLE: &str = "\
Exit status:
  0  every input was read to its end
  1  some input was damaged or unreadable; the results of the rest (and of
     the damaged part read before the damage) are still printed
  2  usage error, or nothing could be read; nothing is printed on stdout";
