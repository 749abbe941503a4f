//! TLS handshake message parsers: hellos (and SSLv2's), certificate lists
//! (and the leaf's names, through x509-parser), TLS 1.2 tickets, and the
//! EncryptedExtensions readers of the key-log path.
//!
//! Input: byte 0 picks the parser (mod 7), the rest is the message body
//! (without the 4-byte handshake header). Checks: what a parser returns
//! borrows from the body and fits in it.
#![no_main]

use analyzer::tls::handshake::{
    parse_certificate_list, parse_new_session_ticket12, ClientHello, ServerHello,
};
use analyzer::tls::keylog::{accepts_early_data, early_data_in_extensions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    match which % 7 {
        0 => {
            if let Ok(ch) = ClientHello::parse(body) {
                let _ = ch.offers_tls13();
                let _ = format!("{ch:?}");
            }
        }
        1 => {
            if let Ok(ch) = ClientHello::parse_sslv2(body) {
                let _ = ch.offers_tls13();
                let _ = format!("{ch:?}");
            }
        }
        2 => {
            if let Ok(sh) = ServerHello::parse(body) {
                let _ = sh.version();
                let _ = format!("{sh:?}");
            }
        }
        3 => {
            if let Ok(certs) = parse_certificate_list(body) {
                let total: usize = certs.iter().map(|c| c.len()).sum();
                assert!(total <= body.len(), "certificates longer than their list");
                if let Some(leaf) = certs.first() {
                    let _ = analyzer::handshake::leaf_names(leaf);
                }
            }
        }
        4 => {
            if let Ok(n) = parse_new_session_ticket12(body) {
                assert!(n <= body.len(), "ticket longer than its message");
            }
        }
        5 => {
            let _ = accepts_early_data(body);
        }
        _ => {
            let _ = early_data_in_extensions(body);
        }
    }
});
