//! Generates, from the committed text file `data/tls-ciphersuites.txt` (from
//! rusticata tls-parser, itself extracted from the IANA TLS parameters
//! registry), the IANA cipher-suite name table and the TLS 1.3 suite table
//! (AEAD, key length, hash), so suite facts are never typed by hand.
use std::{env, fs, path::Path};

fn main() {
    let src = "data/tls-ciphersuites.txt";
    println!("cargo:rerun-if-changed={src}");
    let text = fs::read_to_string(src).expect("read data/tls-ciphersuites.txt");
    let mut out = String::from(
        "/// IANA name of a TLS cipher suite (generated from data/tls-ciphersuites.txt).\n\
         pub fn cipher_suite_name(id: u16) -> Option<&'static str> {\n    match id {\n",
    );
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut fields = line.split(':');
        let (Some(id), Some(name)) = (fields.next(), fields.next()) else {
            panic!("bad line in {src}: {line}");
        };
        let id = u16::from_str_radix(id, 16).expect("hex cipher id");
        out.push_str(&format!("        0x{id:04x} => Some(\"{name}\"),\n"));
    }
    out.push_str("        _ => None,\n    }\n}\n");
    // TLS 1.3 suites: fields are id:name:kx:au:enc:mode:key_bits:mac:mac_bits:prf:prf_bits:...
    let mut suites = String::from("/// The TLS 1.3 suites (generated from data/tls-ciphersuites.txt).\npub const TLS13_SUITES: &[Tls13Suite] = &[\n");
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 11 || f[2] != "TLS13" {
            continue;
        }
        let id = u16::from_str_radix(f[0], 16).expect("hex cipher id");
        let aead = match (f[4], f[5], f[1].ends_with("_8_SHA256")) {
            ("AES", "GCM", _) => "Aead::AesGcm",
            ("CHACHA20_POLY1305", _, _) => "Aead::ChaCha20Poly1305",
            ("AES", "CCM", false) => "Aead::AesCcm",
            ("AES", "CCM", true) => "Aead::AesCcm8",
            ("SM4", "GCM", _) => "Aead::Sm4Gcm",
            ("SM4", "CCM", _) => "Aead::Sm4Ccm",
            // AEGIS (draft) and the integrity-only suites (RFC 9150).
            _ => "Aead::Other",
        };
        // ChaCha20-Poly1305's key is 256 bits (RFC 8439); the data file's
        // column gives 128 for it (its security level), so it is not read.
        let key_len: usize = if aead == "Aead::ChaCha20Poly1305" {
            32
        } else {
            f[6].parse::<usize>().expect("key bits") / 8
        };
        let hash_len: usize = f[10].parse::<usize>().expect("prf bits") / 8;
        suites.push_str(&format!(
            "    Tls13Suite {{ id: 0x{id:04x}, name: \"{}\", aead: {aead}, key_len: {key_len}, hash_len: {hash_len} }},\n",
            f[1]
        ));
    }
    suites.push_str("];\n");
    let dest = Path::new(&env::var("OUT_DIR").unwrap()).join("cipher_suites.rs");
    fs::write(dest, out).expect("write generated table");
    let dest = Path::new(&env::var("OUT_DIR").unwrap()).join("tls13_suites.rs");
    fs::write(dest, suites).expect("write generated table");
}
