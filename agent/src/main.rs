//! `tlsrum`: passive TLS handshake analysis of captures and live traffic.
//! This binary parses the command line and calls into the library.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use tlsrum::exit::{Exit, TABLE as EXIT_TABLE};
use tlsrum::{generate, live, replay};

// Per-connection state is many small allocations; mimalloc makes them cheap.
// Its heap is in 4 KiB pages (its `no_thp` feature: no `MADV_HUGEPAGE`).
// With transparent huge pages the first touch of any 2 MiB of heap zeroes
// all of it, and where the host takes back free guest memory (virtio-balloon
// free page reporting, as on this project's VM) that first touch is several
// times slower per byte than with small pages. Side by side (1 Dec,
// profile-guided): two threads 1.18-1.32x faster, one thread 1.01-1.07x,
// peak RSS 30-50 % lower, a million open handshakes 936 B each instead of
// 1,022 and 1.6x faster (bench/README.md, "the heap in 4 KiB pages"). The
// capture's mapping still gets the kernel's large folios: only the heap is
// affected.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "tlsrum",
    version,
    about = "Passive TLS handshake analyzer: which handshakes are full, resumed or 0-RTT, and what they cost",
    after_help = EXIT_TABLE
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Analyze pcap/pcapng captures offline.
    #[command(after_help = EXIT_TABLE)]
    Replay(replay::ReplayArgs),
    /// Watch live traffic (eBPF in the kernel, or libpcap) and serve Prometheus metrics.
    #[command(after_help = EXIT_TABLE)]
    Live(live::LiveArgs),
    /// Write the man pages (tlsrum.1, tlsrum-replay.1, tlsrum-live.1) into DIR.
    #[command(hide = true)]
    Manpages { dir: std::path::PathBuf },
    /// Print the completion script for SHELL (bash, zsh, fish, elvish, powershell).
    #[command(hide = true)]
    Completions { shell: generate::Shell },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(args) => replay::run(args),
        Command::Live(args) => live::run(args),
        Command::Manpages { dir } => {
            generate::manpages(Cli::command(), &dir).map(|()| ExitCode::SUCCESS)
        }
        Command::Completions { shell } => {
            generate::completions(Cli::command(), shell, &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // The whole cause chain, as ripgrep does.
            eprintln!("tlsrum: {e:#}");
            Exit::Fatal.into()
        }
    }
}
