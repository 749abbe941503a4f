//! `tlsrum`: passive TLS handshake analysis of captures and live traffic.

mod replay;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "tlsrum", version, about = "Passive TLS handshake analyzer: which handshakes are full, resumed or 0-RTT, and what they cost")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Analyze pcap/pcapng captures offline.
    Replay(replay::ReplayArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(args) => replay::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // The whole cause chain, as ripgrep does.
            eprintln!("tlsrum: {e:#}");
            ExitCode::from(2)
        }
    }
}
