//! Key logs (`KeyLog::parse`) and TLS 1.3 record decryption with a logged
//! secret (`decrypt_record`), then the EncryptedExtensions readers.
//!
//! Input: text up to the first NUL byte is a key log; after it, a suite
//! byte (mod 6: 0x1301-0x1305, or a random one from the next 2 bytes), a
//! secret length byte (mod 65) and secret, a sequence number byte, a
//! 5-byte record header and the payload. Checks: the log holds no more
//! entries than lines, and a lookup finds what a line named.
#![no_main]

use analyzer::tls::keylog::{accepts_early_data, decrypt_record, KeyLog};
use libfuzzer_sys::fuzz_target;
use tlsrum_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let (text, rest) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    let log = KeyLog::parse(&text);
    let lines = text.lines().count();
    assert!(
        log.len() + log.bad_lines <= lines,
        "more entries than lines"
    );
    // The first well-formed line's random must be found.
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 3
            && f[0] == "SERVER_HANDSHAKE_TRAFFIC_SECRET"
            && !line.trim_start().starts_with('#')
            && f[1].len() == 64
            && f[2].len().is_multiple_of(2)
        {
            let random: Option<Vec<u8>> = (0..32)
                .map(|i| {
                    f[1].get(2 * i..2 * i + 2)
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                })
                .collect();
            let ok_secret = f[2].as_bytes().chunks(2).all(|h| {
                std::str::from_utf8(h)
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .is_some()
            });
            if let (Some(random), true) = (random, ok_secret) {
                let random: [u8; 32] = random.try_into().unwrap();
                assert!(
                    log.get(&random)
                        .is_some_and(|s| s.server_handshake.is_some()),
                    "a logged secret was not found: {line:?}"
                );
            }
            break;
        }
    }

    let mut input = Input::new(rest);
    let suite = match input.u8() % 6 {
        5 => input.u16(),
        n => 0x1301 + u16::from(n),
    };
    let secret_len = usize::from(input.u8() % 65);
    let secret = input.bytes(secret_len);
    let seq = u64::from(input.u8());
    let mut header = [0u8; 5];
    header.copy_from_slice(&{
        let h = input.bytes(5);
        let mut b = [0u8; 5];
        b[..h.len()].copy_from_slice(h);
        b
    });
    let payload = input.rest();
    if let Some((_ct, plain)) = decrypt_record(suite, secret, seq, &header, payload) {
        assert!(
            plain.len() < payload.len(),
            "plaintext not shorter than ciphertext"
        );
        let _ = accepts_early_data(&plain);
    }
    let _ = accepts_early_data(payload);
});
