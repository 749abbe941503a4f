//! Generates the IANA cipher-suite name table from the committed text file
//! `data/tls-ciphersuites.txt` (from rusticata tls-parser, itself extracted
//! from the IANA TLS parameters registry), so names are never typed by hand.
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
    let dest = Path::new(&env::var("OUT_DIR").unwrap()).join("cipher_suites.rs");
    fs::write(dest, out).expect("write generated table");
}
