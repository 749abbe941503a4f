//! Initial packet protection (RFC 9001 §5.2, RFC 9369 §3.3): keys derived
//! from the client's first Destination Connection ID with a per-version
//! salt ([`version`](super::version) states each version's salt and
//! labels). Everything an observer can decrypt without the endpoints'
//! secrets; [`protection`](super::protection) opens the packets.

use hkdf::Hkdf;
use sha2::Sha256;

use super::packet::Version;
pub use super::protection::{DecryptError, DirKeys};
use crate::tls::keylog::expand_label;

/// The client and server Initial secrets for a Destination Connection ID.
pub fn initial_secrets(version: Version, dcid: &[u8]) -> ([u8; 32], [u8; 32]) {
    let (_, prk) = Hkdf::<Sha256>::extract(Some(version.initial_salt()), dcid);
    let mut client = [0; 32];
    let mut server = [0; 32];
    // Every length asked here is far below 255 * 32: neither can fail
    // (zeros if one did), nor can those of `key_iv_hp`.
    expand_label(&prk, "client in", &mut client);
    expand_label(&prk, "server in", &mut server);
    (client, server)
}

/// Key, IV and header-protection key of one direction (raw, for tests and logs).
pub fn key_iv_hp(version: Version, secret: &[u8; 32]) -> ([u8; 16], [u8; 12], [u8; 16]) {
    let [kl, il, hl] = version.labels();
    let (mut key, mut iv, mut hp) = ([0; 16], [0; 12], [0; 16]);
    // A 32-byte secret is a valid PRK: this cannot fail; zeros if it did.
    if let Ok(prk) = Hkdf::<Sha256>::from_prk(secret) {
        expand_label(&prk, kl, &mut key);
        expand_label(&prk, il, &mut iv);
        expand_label(&prk, hl, &mut hp);
    }
    (key, iv, hp)
}

/// Both directions' Initial keys for one connection attempt, as key bytes:
/// 88 bytes a connection instead of ~3 KB of expanded AES and GHASH keys
/// (a flood of client Initials keeps many). The few Initials a connection
/// has expand them again when they are opened.
pub struct InitialKeys {
    client: ([u8; 16], [u8; 12], [u8; 16]),
    server: ([u8; 16], [u8; 12], [u8; 16]),
}

impl InitialKeys {
    /// Keys from the Destination Connection ID of the client's first Initial
    /// (or, after a Retry, the Retry's Source Connection ID).
    pub fn new(version: Version, dcid: &[u8]) -> Self {
        let (c, s) = initial_secrets(version, dcid);
        InitialKeys {
            client: key_iv_hp(version, &c),
            server: key_iv_hp(version, &s),
        }
    }

    pub fn client(&self) -> DirKeys {
        let (key, iv, hp) = self.client;
        DirKeys::aes128(key, iv, hp)
    }

    pub fn server(&self) -> DirKeys {
        let (key, iv, hp) = self.server;
        DirKeys::aes128(key, iv, hp)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::quic::packet::{parse, LongType, Packet};

    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    pub(crate) const DCID: &str = "8394c8f03e515708";

    /// RFC 9001 A.2 (and RFC 9369 A.2): the CRYPTO frame with the ClientHello; PADDING follows.
    pub(crate) const CLIENT_PAYLOAD: &str = "060040f1010000ed0303ebf8fa56f12939b9584a3896472ec40bb863cfd3e86804fe3a47f06a2b69484c00000413011302010000c000000010000e00000b6578616d706c652e636f6dff01000100000a00080006001d0017001800100007000504616c706e000500050100000000003300260024001d00209370b2c9caa47fbabaf4559fedba753de171fa71f50f1ce15d43e994ec74d748002b0003020304000d0010000e0403050306030203080408050806002d00020101001c00024001003900320408ffffffffffffffff05048000ffff07048000ffff0801100104800075300901100f088394c8f03e51570806048000ffff";

    /// RFC 9001 A.3 (and RFC 9369 A.3): ACK frame + CRYPTO frame with the ServerHello.
    pub(crate) const SERVER_PAYLOAD: &str = "02000000000600405a020000560303eefce7f7b37ba1d1632e96677825ddf73988cfc79825df566dc5430b9a045a1200130100002e00330024001d00209d3c940d89690b84d08a60993c144eca684d1081287c834d5311bcf32bb9da1a002b00020304";

    /// RFC 9001 A.2: the protected client Initial (1200 bytes).
    pub(crate) const V1_CLIENT: &str = "c000000001088394c8f03e5157080000449e7b9aec34d1b1c98dd7689fb8ec11d242b123dc9bd8bab936b47d92ec356c0bab7df5976d27cd449f63300099f3991c260ec4c60d17b31f8429157bb35a1282a643a8d2262cad67500cadb8e7378c8eb7539ec4d4905fed1bee1fc8aafba17c750e2c7ace01e6005f80fcb7df621230c83711b39343fa028cea7f7fb5ff89eac2308249a02252155e2347b63d58c5457afd84d05dfffdb20392844ae812154682e9cf012f9021a6f0be17ddd0c2084dce25ff9b06cde535d0f920a2db1bf362c23e596d11a4f5a6cf3948838a3aec4e15daf8500a6ef69ec4e3feb6b1d98e610ac8b7ec3faf6ad760b7bad1db4ba3485e8a94dc250ae3fdb41ed15fb6a8e5eba0fc3dd60bc8e30c5c4287e53805db059ae0648db2f64264ed5e39be2e20d82df566da8dd5998ccabdae053060ae6c7b4378e846d29f37ed7b4ea9ec5d82e7961b7f25a9323851f681d582363aa5f89937f5a67258bf63ad6f1a0b1d96dbd4faddfcefc5266ba6611722395c906556be52afe3f565636ad1b17d508b73d8743eeb524be22b3dcbc2c7468d54119c7468449a13d8e3b95811a198f3491de3e7fe942b330407abf82a4ed7c1b311663ac69890f4157015853d91e923037c227a33cdd5ec281ca3f79c44546b9d90ca00f064c99e3dd97911d39fe9c5d0b23a229a234cb36186c4819e8b9c5927726632291d6a418211cc2962e20fe47feb3edf330f2c603a9d48c0fcb5699dbfe5896425c5bac4aee82e57a85aaf4e2513e4f05796b07ba2ee47d80506f8d2c25e50fd14de71e6c418559302f939b0e1abd576f279c4b2e0feb85c1f28ff18f58891ffef132eef2fa09346aee33c28eb130ff28f5b766953334113211996d20011a198e3fc433f9f2541010ae17c1bf202580f6047472fb36857fe843b19f5984009ddc324044e847a4f4a0ab34f719595de37252d6235365e9b84392b061085349d73203a4a13e96f5432ec0fd4a1ee65accdd5e3904df54c1da510b0ff20dcc0c77fcb2c0e0eb605cb0504db87632cf3d8b4dae6e705769d1de354270123cb11450efc60ac47683d7b8d0f811365565fd98c4c8eb936bcab8d069fc33bd801b03adea2e1fbc5aa463d08ca19896d2bf59a071b851e6c239052172f296bfb5e72404790a2181014f3b94a4e97d117b438130368cc39dbb2d198065ae3986547926cd2162f40a29f0c3c8745c0f50fba3852e566d44575c29d39a03f0cda721984b6f440591f355e12d439ff150aab7613499dbd49adabc8676eef023b15b65bfc5ca06948109f23f350db82123535eb8a7433bdabcb909271a6ecbcb58b936a88cd4e8f2e6ff5800175f113253d8fa9ca8885c2f552e657dc603f252e1a8e308f76f0be79e2fb8f5d5fbbe2e30ecadd220723c8c0aea8078cdfcb3868263ff8f0940054da48781893a7e49ad5aff4af300cd804a6b6279ab3ff3afb64491c85194aab760d58a606654f9f4400e8b38591356fbf6425aca26dc85244259ff2b19c41b9f96f3ca9ec1dde434da7d2d392b905ddf3d1f9af93d1af5950bd493f5aa731b4056df31bd267b6b90a079831aaf579be0a39013137aac6d404f518cfd46840647e78bfe706ca4cf5e9c5453e9f7cfd2b8b4c8d169a44e55c88d4a9a7f9474241e221af44860018ab0856972e194cd934";

    /// RFC 9001 A.3: the protected server Initial.
    const V1_SERVER: &str = "cf000000010008f067a5502a4262b5004075c0d95a482cd0991cd25b0aac406a5816b6394100f37a1c69797554780bb38cc5a99f5ede4cf73c3ec2493a1839b3dbcba3f6ea46c5b7684df3548e7ddeb9c3bf9c73cc3f3bded74b562bfb19fb84022f8ef4cdd93795d77d06edbb7aaf2f58891850abbdca3d20398c276456cbc42158407dd074ee";

    /// RFC 9369 A.2: the protected v2 client Initial.
    pub(crate) const V2_CLIENT: &str = "d76b3343cf088394c8f03e5157080000449ea0c95e82ffe67b6abcdb4298b485dd04de806071bf03dceebfa162e75d6c96058bdbfb127cdfcbf903388e99ad049f9a3dd4425ae4d0992cfff18ecf0fdb5a842d09747052f17ac2053d21f57c5d250f2c4f0e0202b70785b7946e992e58a59ac52dea6774d4f03b55545243cf1a12834e3f249a78d395e0d18f4d766004f1a2674802a747eaa901c3f10cda5500cb9122faa9f1df66c392079a1b40f0de1c6054196a11cbea40afb6ef5253cd6818f6625efce3b6def6ba7e4b37a40f7732e093daa7d52190935b8da58976ff3312ae50b187c1433c0f028edcc4c2838b6a9bfc226ca4b4530e7a4ccee1bfa2a3d396ae5a3fb512384b2fdd851f784a65e03f2c4fbe11a53c7777c023462239dd6f7521a3f6c7d5dd3ec9b3f233773d4b46d23cc375eb198c63301c21801f6520bcfb7966fc49b393f0061d974a2706df8c4a9449f11d7f3d2dcbb90c6b877045636e7c0c0fe4eb0f697545460c806910d2c355f1d253bc9d2452aaa549e27a1fac7cf4ed77f322e8fa894b6a83810a34b361901751a6f5eb65a0326e07de7c1216ccce2d0193f958bb3850a833f7ae432b65bc5a53975c155aa4bcb4f7b2c4e54df16efaf6ddea94e2c50b4cd1dfe06017e0e9d02900cffe1935e0491d77ffb4fdf85290fdd893d577b1131a610ef6a5c32b2ee0293617a37cbb08b847741c3b8017c25ca9052ca1079d8b78aebd47876d330a30f6a8c6d61dd1ab5589329de714d19d61370f8149748c72f132f0fc99f34d766c6938597040d8f9e2bb522ff99c63a344d6a2ae8aa8e51b7b90a4a806105fcbca31506c446151adfeceb51b91abfe43960977c87471cf9ad4074d30e10d6a7f03c63bd5d4317f68ff325ba3bd80bf4dc8b52a0ba031758022eb025cdd770b44d6d6cf0670f4e990b22347a7db848265e3e5eb72dfe8299ad7481a408322cac55786e52f633b2fb6b614eaed18d703dd84045a274ae8bfa73379661388d6991fe39b0d93debb41700b41f90a15c4d526250235ddcd6776fc77bc97e7a417ebcb31600d01e57f32162a8560cacc7e27a096d37a1a86952ec71bd89a3e9a30a2a26162984d7740f81193e8238e61f6b5b984d4d3dfa033c1bb7e4f0037febf406d91c0dccf32acf423cfa1e7071010d3f270121b493ce85054ef58bada42310138fe081adb04e2bd901f2f13458b3d6758158197107c14ebb193230cd1157380aa79cae1374a7c1e5bbcb80ee23e06ebfde206bfb0fcbc0edc4ebec309661bdd908d532eb0c6adc38b7ca7331dce8dfce39ab71e7c32d318d136b6100671a1ae6a6600e3899f31f0eed19e3417d134b90c9058f8632c798d4490da4987307cba922d61c39805d072b589bd52fdf1e86215c2d54e6670e07383a27bbffb5addf47d66aa85a0c6f9f32e59d85a44dd5d3b22dc2be80919b490437ae4f36a0ae55edf1d0b5cb4e9a3ecabee93dfc6e38d209d0fa6536d27a5d6fbb17641cde27525d61093f1b28072d111b2b4ae5f89d5974ee12e5cf7d5da4d6a31123041f33e61407e76cffcdcfd7e19ba58cf4b536f4c4938ae79324dc402894b44faf8afbab35282ab659d13c93f70412e85cb199a37ddec600545473cfb5a05e08d0b209973b2172b4d21fb69745a262ccde96ba18b2faa745b6fe189cf772a9f84cbfc";

    /// RFC 9369 A.3: the protected v2 server Initial.
    const V2_SERVER: &str = "dc6b3343cf0008f067a5502a4262b5004075d92faaf16f05d8a4398c47089698baeea26b91eb761d9b89237bbf87263017915358230035f7fd3945d88965cf17f9af6e16886c61bfc703106fbaf3cb4cfa52382dd16a393e42757507698075b2c984c707f0a0812d8cd5a6881eaf21ceda98f4bd23f6fe1a3e2c43edd9ce7ca84bed8521e2e140";

    pub(crate) fn check_keys(version: Version, want: [&str; 8]) {
        let (c, s) = initial_secrets(version, &hex(DCID));
        assert_eq!(c.to_vec(), hex(want[0]), "client secret");
        assert_eq!(s.to_vec(), hex(want[4]), "server secret");
        for (secret, w) in [(c, &want[1..4]), (s, &want[5..8])] {
            let (key, iv, hp) = key_iv_hp(version, &secret);
            assert_eq!(key.to_vec(), hex(w[0]), "key");
            assert_eq!(iv.to_vec(), hex(w[1]), "iv");
            assert_eq!(hp.to_vec(), hex(w[2]), "hp");
        }
    }

    #[test]
    fn rfc9001_a1_keys() {
        check_keys(
            Version::V1,
            [
                "c00cf151ca5be075ed0ebfb5c80323c42d6b7db67881289af4008f1f6c357aea",
                "1f369613dd76d5467730efcbe3b1a22d",
                "fa044b2f42a3fd3b46fb255c",
                "9f50449e04a0e810283a1e9933adedd2",
                "3c199828fd139efd216c155ad844cc81fb82fa8d7446fa7d78be803acdda951b",
                "cf3a5331653c364c88f0f379b6067e37",
                "0ac1493ca1905853b0bba03e",
                "c206b8d9b9f0f37644430b490eeaa314",
            ],
        );
    }

    #[test]
    fn rfc9369_a1_keys() {
        check_keys(
            Version::V2,
            [
                "14ec9d6eb9fd7af83bf5a668bc17a7e283766aade7ecd0891f70f9ff7f4bf47b",
                "8b1a0bc121284290a29e0971b5cd045d",
                "91f73e2351d8fa91660e909f",
                "45b95e15235d6f45a6b19cbcb0294ba9",
                "0263db1782731bf4588e7e4d93b7463907cb8cd8200b5da55a8bd488eafc37c1",
                "82db637861d55e1d011f19ea71d5d2a7",
                "dd13c276499c0249d3310652",
                "edf6d05c83121201b436e16877593c3a",
            ],
        );
    }

    /// Parses and opens a protected packet; returns (pn, plaintext, unprotected header).
    pub(crate) fn open(packet: &str, client: bool) -> (u64, Vec<u8>, Vec<u8>, LongType) {
        let bytes = hex(packet);
        let (Packet::Long(l), used) = parse(&bytes).unwrap() else {
            panic!("not a long header")
        };
        assert_eq!(used, bytes.len());
        let keys = InitialKeys::new(l.version, &hex(DCID));
        let mut buf = l.bytes.to_vec();
        let dir = if client { keys.client() } else { keys.server() };
        let (pn, range) = dir.open(&mut buf, l.pn_offset, None).unwrap();
        (
            pn,
            buf[range.clone()].to_vec(),
            buf[..range.start].to_vec(),
            l.ty,
        )
    }

    #[test]
    fn rfc9001_a2_a3_packets_decrypt() {
        let (pn, payload, header, ty) = open(V1_CLIENT, true);
        assert_eq!((pn, ty), (2, LongType::Initial));
        assert_eq!(header, hex("c300000001088394c8f03e5157080000449e00000002"));
        let mut want = hex(CLIENT_PAYLOAD);
        want.resize(1162, 0);
        assert_eq!(payload, want);
        let (pn, payload, header, _) = open(V1_SERVER, false);
        assert_eq!(pn, 1);
        assert_eq!(header, hex("c1000000010008f067a5502a4262b50040750001"));
        assert_eq!(payload, hex(SERVER_PAYLOAD));
    }

    #[test]
    fn rfc9369_a2_a3_packets_decrypt() {
        let (pn, payload, header, ty) = open(V2_CLIENT, true);
        assert_eq!((pn, ty), (2, LongType::Initial));
        assert_eq!(header, hex("d36b3343cf088394c8f03e5157080000449e00000002"));
        let mut want = hex(CLIENT_PAYLOAD);
        want.resize(1162, 0);
        assert_eq!(payload, want);
        let (pn, payload, header, ty) = open(V2_SERVER, false);
        assert_eq!((pn, ty), (1, LongType::Initial));
        assert_eq!(header, hex("d16b3343cf0008f067a5502a4262b50040750001"));
        assert_eq!(payload, hex(SERVER_PAYLOAD));
    }

    #[test]
    fn wrong_keys_or_corruption_fail_cleanly() {
        let bytes = hex(V1_CLIENT);
        let (Packet::Long(l), _) = parse(&bytes).unwrap() else {
            panic!()
        };
        let keys = InitialKeys::new(Version::V1, b"other cid");
        let mut buf = l.bytes.to_vec();
        assert_eq!(
            keys.client().open(&mut buf, l.pn_offset, None).unwrap_err(),
            DecryptError::Aead
        );
        let keys = InitialKeys::new(Version::V1, &hex(DCID));
        let mut buf = l.bytes.to_vec();
        buf[600] ^= 1;
        assert_eq!(
            keys.client().open(&mut buf, l.pn_offset, None).unwrap_err(),
            DecryptError::Aead
        );
        let mut short = l.bytes[..l.pn_offset + 10].to_vec();
        assert_eq!(
            keys.client()
                .open(&mut short, l.pn_offset, None)
                .unwrap_err(),
            DecryptError::Short
        );
    }
}
