//! Compiles the eBPF programs in `bpf/` with clang into OUT_DIR; the agent
//! embeds the object with `aya::include_bytes_aligned!`.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// Every file the object depends on: a change to any of them rebuilds it.
const SOURCES: &[&str] = &["tlsrum.bpf.c", "tlsrum.h"];

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let bpf_dir = manifest.join("..").join("bpf");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("tlsrum.bpf.o");
    for f in SOURCES {
        println!("cargo:rerun-if-changed={}", bpf_dir.join(f).display());
    }
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
    let clang = env::var("BPF_CLANG").unwrap_or_else(|_| "clang".to_owned());

    // <asm/types.h>, pulled in by the uapi headers, lives in the multiarch
    // include directory, which `-target bpf` does not search.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let (multiarch, target_arch) = match arch.as_str() {
        "x86_64" => ("x86_64-linux-gnu", "x86"),
        "aarch64" => ("aarch64-linux-gnu", "arm64"),
        "riscv64" => ("riscv64-linux-gnu", "riscv"),
        "powerpc64" => ("powerpc64le-linux-gnu", "powerpc"),
        "s390x" => ("s390x-linux-gnu", "s390"),
        other => panic!("tlsrum: no eBPF build settings for target arch {other:?}"),
    };

    let output = Command::new(&clang)
        .args(["-g", "-O2", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-D__TARGET_ARCH_{target_arch}"))
        .arg(format!("-I/usr/include/{multiarch}"))
        .arg("-I")
        .arg(&bpf_dir)
        .arg("-c")
        .arg(bpf_dir.join("tlsrum.bpf.c"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "tlsrum: cannot run {clang} to build the eBPF programs ({e}); \
                 install clang and libbpf-dev (scripts/install-deps.sh)"
            )
        });
    if !output.status.success() {
        panic!(
            "tlsrum: {clang} failed to compile bpf/tlsrum.bpf.c ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
