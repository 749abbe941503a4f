//! The Debian package as a user installs it: `scripts/deb.sh` builds it
//! from this build's binary (cargo-deb; man pages and completions generated
//! from the command line), `scripts/deb-check.sh` installs it with `dpkg -i`
//! on a clean Debian 12 (a minimal bookworm from deb.debian.org, built once
//! into target/debian12/, under a throw-away overlay), checks dpkg refuses it
//! without libpcap0.8 and apt-get -f fetches that, the unit passes
//! `systemd-analyze verify`, /etc/default/tlsrum is a conffile (an edit
//! survives `dpkg -r`, `dpkg -P` removes it) and nothing is left behind.
//! Here: the installed binary's output equals this build's, its man pages
//! document every flag of `--help`, bash completes its subcommands.
//!
//! Needs root, cargo-deb, mmdebstrap, systemd-analyze and the Debian mirror
//! (scripts/install-deps.sh); missing ones fail under CI=true. The first
//! run builds the Debian root (about 2-4 minutes), later runs take seconds.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{skip_unless, Need};

const BIN: &str = env!("CARGO_BIN_EXE_tlsrum");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The long flags a `--help` lists.
fn flags(help: &str) -> BTreeSet<String> {
    help.split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
        .filter(|w| w.starts_with("--") && w.len() > 2)
        // The flag itself, not what prose puts after it ("--top's", "--x:").
        .map(|w| {
            w.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
        })
        .filter(|f| f.len() > 2)
        .collect()
}

#[test]
fn debian_package_installs_on_a_clean_debian_12() {
    if skip_unless(
        "debian_package_installs_on_a_clean_debian_12",
        &[
            Need::Root,
            Need::Tools(&[
                "cargo-deb",
                "mmdebstrap",
                "systemd-analyze",
                "unshare",
                "chroot",
            ]),
        ],
    ) {
        return;
    }
    // The profile this test was built with: its binary goes in the package.
    let profile = Path::new(BIN)
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    let built = ok(Command::new("bash")
        .arg(repo().join("scripts/deb.sh"))
        .arg(profile));
    let deb = PathBuf::from(built.trim());
    let deb = if deb.is_absolute() {
        deb
    } else {
        repo().join(deb)
    };
    assert!(deb.exists(), "deb.sh said {built:?}");

    let out = std::env::temp_dir().join(format!("tlsrum-ship-package-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let capture = repo().join("pcaps/curl-nginx-tls13-cache-only.pcapng");
    let said = ok(Command::new("bash")
        .arg(repo().join("scripts/deb-check.sh"))
        .arg(&deb)
        .arg(&capture)
        .arg(&out));
    eprintln!("{}", said.trim());

    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
    assert_eq!(read("version.txt"), ok(Command::new(BIN).arg("--version")));
    let here = ok(Command::new(BIN)
        .args(["replay", "--format", "ndjson"])
        .arg(&capture));
    assert!(here.lines().count() >= 2, "{here}");
    assert_eq!(
        read("replay.ndjson"),
        here,
        "the installed binary replays differently"
    );

    // Every flag of every command's --help is in its man page (roff writes
    // a dash as "\-").
    for (page, args) in [
        ("tlsrum-replay.1", &["replay", "--help"][..]),
        ("tlsrum-live.1", &["live", "--help"][..]),
        ("tlsrum.1", &["--help"][..]),
    ] {
        let text = read(&format!("man/{page}")).replace("\\-", "-");
        let want = flags(&ok(Command::new(BIN).args(args)));
        assert!(!want.is_empty());
        let absent: Vec<&String> = want.iter().filter(|f| !text.contains(f.as_str())).collect();
        assert!(absent.is_empty(), "{page} lacks {absent:?}");
    }
    assert_eq!(
        read("complete.txt").trim(),
        "live",
        "bash completing `tlsrum li`"
    );
    let _ = std::fs::remove_dir_all(&out);
}
