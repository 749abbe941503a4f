//! Helpers shared by the fuzz targets: a cursor that turns the fuzzer's
//! bytes into choices (never failing: an exhausted input reads zeros), and a
//! QUIC Initial sealer (RFC 9001 §5), so that the QUIC target's packets pass
//! decryption and reach CRYPTO-frame and ClientHello parsing.
//!
//! Every target's input format is described at the top of its file;
//! `seeds/` writes seeds in those formats from `pcaps/`.

use aes::cipher::BlockEncrypt;
use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, KeyInit, Nonce};
use analyzer::quic::initial::{initial_secrets, key_iv_hp};
use analyzer::quic::packet::{LongType, Version};

/// Reads choices off the fuzzer's input.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }

    /// A 16-bit big-endian length, then that many bytes (fewer at the end).
    pub fn prefixed(&mut self) -> &'a [u8] {
        let n = usize::from(self.u16());
        self.bytes(n)
    }

    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

/// Which side's Initial keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

/// A QUIC long-header Initial packet, protected with the Initial keys
/// derived from `key_dcid` (the client's first Destination Connection ID)
/// as RFC 9001 §5.2 says, for `version` (its family's type bits: v1 00,
/// v2 01, RFC 9369 §3.2). `frames` is the plaintext; it is padded with PADDING
/// frames to `pad_to` bytes of packet, and to the 20 bytes that header
/// protection samples (RFC 9001 §5.4.2). Packet number on `pn_len` bytes.
#[allow(clippy::too_many_arguments)]
pub fn seal_initial(
    version: Version,
    side: Side,
    key_dcid: &[u8],
    dcid: &[u8],
    scid: &[u8],
    token: &[u8],
    pn: u32,
    pn_len: usize,
    frames: &[u8],
    pad_to: usize,
) -> Vec<u8> {
    let pn_len = pn_len.clamp(1, 4);
    let type_bits = version.type_bits(LongType::Initial);
    let mut header = vec![0xc0 | (type_bits << 4) | (pn_len as u8 - 1)];
    header.extend(version.wire().to_be_bytes());
    header.push(dcid.len() as u8);
    header.extend_from_slice(dcid);
    header.push(scid.len() as u8);
    header.extend_from_slice(scid);
    push_varint(&mut header, token.len() as u64);
    header.extend_from_slice(token);
    // The length is a two-byte varint: payloads stay under 16 KiB.
    let mut payload = frames[..frames.len().min(16_000)].to_vec();
    // The 16-byte sample starts 4 bytes after the packet number's first
    // byte: packet number, payload and tag together are at least 20 bytes.
    let min_payload = 4 - pn_len;
    let fixed = header.len() + 2 + pn_len + 16;
    let want = pad_to
        .min(16_000)
        .saturating_sub(fixed)
        .max(min_payload)
        .max(payload.len());
    payload.resize(want, 0);
    let length = pn_len + payload.len() + 16;
    header.extend([0x40 | (length >> 8) as u8, length as u8]);
    let pn_bytes = pn.to_be_bytes();
    header.extend_from_slice(&pn_bytes[4 - pn_len..]);

    let (client, server) = initial_secrets(version, key_dcid);
    let secret = if side == Side::Client { client } else { server };
    let (key, iv, hp) = key_iv_hp(version, &secret);
    let mut nonce = iv;
    for (n, p) in nonce[4..].iter_mut().zip(u64::from(pn).to_be_bytes()) {
        *n ^= p;
    }
    let aead = Aes128Gcm::new(&key.into());
    let mut body = payload;
    let tag = aead
        .encrypt_in_place_detached(Nonce::from_slice(&nonce), &header, &mut body)
        .expect("AES-GCM encrypts any length used here");
    let pn_offset = header.len() - pn_len;
    let mut out = header;
    out.extend_from_slice(&body);
    out.extend_from_slice(&tag);

    // Header protection (RFC 9001 §5.4.1, §5.4.3): AES-ECB of the sample.
    let hp = aes::Aes128::new(&hp.into());
    let mut block = aes::Block::default();
    block.copy_from_slice(&out[pn_offset + 4..pn_offset + 20]);
    hp.encrypt_block(&mut block);
    out[0] ^= block[0] & 0x0f;
    for i in 0..pn_len {
        out[pn_offset + i] ^= block[1 + i];
    }
    out
}

/// A QUIC variable-length integer (RFC 9000 §16).
pub fn push_varint(out: &mut Vec<u8>, v: u64) {
    if v < 1 << 6 {
        out.push(v as u8);
    } else if v < 1 << 14 {
        out.extend((0x4000 | v as u16).to_be_bytes());
    } else if v < 1 << 30 {
        out.extend((0x8000_0000 | v as u32).to_be_bytes());
    } else {
        out.extend((0xc000_0000_0000_0000 | v.min((1 << 62) - 1)).to_be_bytes());
    }
}

/// A CRYPTO frame (RFC 9000 §19.6).
pub fn crypto_frame(offset: u64, data: &[u8]) -> Vec<u8> {
    let mut f = vec![0x06];
    push_varint(&mut f, offset);
    push_varint(&mut f, data.len() as u64);
    f.extend_from_slice(data);
    f
}

/// Panics unless `line` is one valid JSON object (what NDJSON consumers parse).
pub fn check_json(line: &str) {
    match serde_json::from_str::<serde_json::Value>(line) {
        Ok(serde_json::Value::Object(_)) => {}
        Ok(other) => panic!("NDJSON record is not an object: {other}"),
        Err(e) => panic!("NDJSON record is not valid JSON ({e}): {line}"),
    }
}
