//! The published Initial-protection vectors of the versions before v1
//! (RFC 9001 and RFC 9369 Appendix A are in `initial.rs`), each run
//! through the key schedule, the packet opener and the tracker:
//! * draft-ietf-quic-tls-23 A.1-A.3: keys and both Initials (salt unchanged
//!   to draft-28);
//! * draft-ietf-quic-tls-29 A.1-A.3: secrets and both Initials (salt
//!   unchanged to draft-32);
//! * draft-ietf-quic-v2-04 A.1-A.3: keys and both Initials of the
//!   provisional v2 number 0x709a50c4.
//!
//! The drafts' server Initials carry frames numbered before draft-16
//! (0x0d ACK, 0x18 CRYPTO): the vectors were not updated, so the tracker
//! test reads only their client Initials. draft-ietf-quic-tls-22 has no
//! usable vector: its Appendix A was left at draft-21 (version 0xff000015,
//! the older header, initial secret 4496d390... from draft-21's salt
//! 0xef4fb0ab...), so draft-22's salt (its §5.2) is tested, like the
//! versions with no published vectors, by Initials sealed here with the
//! version's key schedule ([`every_tls_version_makes_a_record`]).

use super::initial::tests::{check_keys, hex, open, CLIENT_PAYLOAD, DCID, SERVER_PAYLOAD};
use super::initial::{initial_secrets, InitialKeys};
use super::packet::{parse, LongType, Packet, Version};
use super::tracker::{QuicStats, QuicTracker};
use super::version::{classify, Class, TLS};
use crate::flow::table::Endpoint;
use crate::record::HandshakeKind;

fn version(wire: u32) -> Version {
    Version::from_wire(wire).expect("a version of the table")
}

const DRAFT_23: u32 = 0xff00_0017;
const DRAFT_29: u32 = 0xff00_001d;
const V2_DRAFT: u32 = 0x709a_50c4;

/// draft-ietf-quic-tls-23 and -29 A.2: a ClientHello for "server" in a
/// CRYPTO frame (the Initial pads it to 1162 bytes).
const DRAFT_CLIENT_PAYLOAD: &str = "
    060040c4010000c003036660261ff947 cea49cce6cfad687f457cf1b14531ba1
    4131a0e8f309a1d0b9c4000006130113 031302010000910000000b0009000006
    736572766572ff01000100000a001400 12001d00170018001901000101010201
    03010400230000003300260024001d00 204cfdfcd178b784bf328cae793b136f
    2aedce005ff183d7bb14952072366470 37002b0003020304000d0020001e0403
    05030603020308040805080604010501 060102010402050206020202002d0002
    0101001c00024001";

/// draft-ietf-quic-tls-23 and -29 A.3: the server's Initial payload.
const DRAFT_SERVER_PAYLOAD: &str = "
    0d0000000018410a020000560303eefc e7f7b37ba1d1632e96677825ddf73988
    cfc79825df566dc5430b9a045a120013 0100002e00330024001d00209d3c940d
    89690b84d08a60993c144eca684d1081 287c834d5311bcf32bb9da1a002b0002
    0304";

/// draft-ietf-quic-tls-23 A.2: the protected client Initial.
const DRAFT_23_CLIENT: &str = "
    c0ff000017088394c8f03e5157080000 449e3b343aa8535064a4268a0d9d7b1c
    9d250ae355162276e9b1e3011ef6bbc0 ab48ad5bcc2681e953857ca62becd752
    4daac473e68d7405fbba4e9ee616c870 38bdbe908c06d9605d9ac49030359eec
    b1d05a14e117db8cede2bb09d0dbbfee 271cb374d8f10abec82d0f59a1dee29f
    e95638ed8dd41da07487468791b719c5 5c46968eb3b54680037102a28e53dc1d
    12903db0af5821794b41c4a93357fa59 ce69cfe7f6bdfa629eef78616447e1d6
    11c4baf71bf33febcb03137c2c75d253 17d3e13b684370f668411c0f00304b50
    1c8fd422bd9b9ad81d643b20da89ca05 25d24d2b142041cae0af205092e43008
    0cd8559ea4c5c6e4fa3f66082b7d303e 52ce0162baa958532b0bbc2bc785681f
    cf37485dff6595e01e739c8ac9efba31 b985d5f656cc092432d781db95221724
    87641c4d3ab8ece01e39bc85b1543661 4775a98ba8fa12d46f9b35e2a55eb72d
    7f85181a366663387ddc20551807e007 673bd7e26bf9b29b5ab10a1ca87cbb7a
    d97e99eb66959c2a9bc3cbde4707ff77 20b110fa95354674e395812e47a0ae53
    b464dcb2d1f345df360dc227270c7506 76f6724eb479f0d2fbb6124429990457
    ac6c9167f40aab739998f38b9eccb24f d47c8410131bf65a52af841275d5b3d1
    880b197df2b5dea3e6de56ebce3ffb6e 9277a82082f8d9677a6767089b671ebd
    244c214f0bde95c2beb02cd1172d58bd f39dce56ff68eb35ab39b49b4eac7c81
    5ea60451d6e6ab82119118df02a58684 4a9ffe162ba006d0669ef57668cab38b
    62f71a2523a084852cd1d079b3658dc2 f3e87949b550bab3e177cfc49ed190df
    f0630e43077c30de8f6ae081537f1e83 da537da980afa668e7b7fb25301cf741
    524be3c49884b42821f17552fbd1931a 813017b6b6590a41ea18b6ba49cd48a4
    40bd9a3346a7623fb4ba34a3ee571e3c 731f35a7a3cf25b551a680fa68763507
    b7fde3aaf023c50b9d22da6876ba337e b5e9dd9ec3daf970242b6c5aab3aa4b2
    96ad8b9f6832f686ef70fa938b31b4e5 ddd7364442d3ea72e73d668fb0937796
    f462923a81a47e1cee7426ff6d922126 9b5a62ec03d6ec94d12606cb485560ba
    b574816009e96504249385bb61a819be 04f62c2066214d8360a2022beb316240
    b6c7d78bbe56c13082e0ca272661210a bf020bf3b5783f1426436cf9ff418405
    93a5d0638d32fc51c5c65ff291a3a7a5 2fd6775e623a4439cc08dd25582febc9
    44ef92d8dbd329c91de3e9c9582e41f1 7f3d186f104ad3f90995116c682a2a14
    a3b4b1f547c335f0be710fc9fc03e0e5 87b8cda31ce65b969878a4ad4283e6d5
    b0373f43da86e9e0ffe1ae0fddd35162 55bd74566f36a38703d5f34249ded1f6
    6b3d9b45b9af2ccfefe984e13376b1b2 c6404aa48c8026132343da3f3a33659e
    c1b3e95080540b28b7f3fcd35fa5d843 b579a84c089121a60d8c1754915c344e
    eaf45a9bf27dc0c1e784161691220913 13eb0e87555abd706626e557fc36a04f
    cd191a58829104d6075c5594f627ca50 6bf181daec940f4a4f3af0074eee89da
    acde6758312622d4fa675b39f728e062 d2bee680d8f41a597c262648bb18bcfc
    13c8b3d97b1a77b2ac3af745d61a34cc 4709865bac824a94bb19058015e4e42d
    c9be6c7803567321829dd85853396269";

/// draft-ietf-quic-tls-23 A.3: the protected server Initial.
const DRAFT_23_SERVER: &str = "
    c9ff0000170008f067a5502a4262b500 4074168bf22b7002596f99ae67abf65a
    5852f54f58c37c808682e2e40492d8a3 899fb04fc0afe9aabc8767b18a0aa493
    537426373b48d502214dd856d63b78ce e37bc664b3fe86d487ac7a77c53038a3
    cd32f0b5004d9f5754c4f7f2d1f35cf3 f7116351c92b9cf9bb6d091ddfc8b32d
    432348a2c413";

/// draft-ietf-quic-tls-29 A.2: the protected client Initial.
const DRAFT_29_CLIENT: &str = "
    c5ff00001d088394c8f03e5157080000 449e4a95245bfb66bc5f93032b7ddd89
    fe0ff15d9c4f7050fccdb71c1cd80512 d4431643a53aafa1b0b518b44968b18b
    8d3e7a4d04c30b3ed9410325b2abb2da fb1c12f8b70479eb8df98abcaf95dd8f
    3d1c78660fbc719f88b23c8aef6771f3 d50e10fdfb4c9d92386d44481b6c52d5
    9e5538d3d3942de9f13a7f8b702dc317 24180da9df22714d01003fc5e3d165c9
    50e630b8540fbd81c9df0ee63f949970 26c4f2e1887a2def79050ac2d86ba318
    e0b3adc4c5aa18bcf63c7cf8e85f5692 49813a2236a7e72269447cd1c755e451
    f5e77470eb3de64c8849d29282069802 9cfa18e5d66176fe6e5ba4ed18026f90
    900a5b4980e2f58e39151d5cd685b109 29636d4f02e7fad2a5a458249f5c0298
    a6d53acbe41a7fc83fa7cc01973f7a74 d1237a51974e097636b6203997f921d0
    7bc1940a6f2d0de9f5a11432946159ed 6cc21df65c4ddd1115f86427259a196c
    7148b25b6478b0dc7766e1c4d1b1f515 9f90eabc61636226244642ee148b464c
    9e619ee50a5e3ddc836227cad938987c 4ea3c1fa7c75bbf88d89e9ada642b2b8
    8fe8107b7ea375b1b64889a4e9e5c38a 1c896ce275a5658d250e2d76e1ed3a34
    ce7e3a3f383d0c996d0bed106c2899ca 6fc263ef0455e74bb6ac1640ea7bfedc
    59f03fee0e1725ea150ff4d69a7660c5 542119c71de270ae7c3ecfd1af2c4ce5
    51986949cc34a66b3e216bfe18b347e6 c05fd050f85912db303a8f054ec23e38
    f44d1c725ab641ae929fecc8e3cefa56 19df4231f5b4c009fa0c0bbc60bc75f7
    6d06ef154fc8577077d9d6a1d2bd9bf0 81dc783ece60111bea7da9e5a9748069
    d078b2bef48de04cabe3755b197d52b3 2046949ecaa310274b4aac0d008b1948
    c1082cdfe2083e386d4fd84c0ed0666d 3ee26c4515c4fee73433ac703b690a9f
    7bf278a77486ace44c489a0c7ac8dfe4 d1a58fb3a730b993ff0f0d61b4d89557
    831eb4c752ffd39c10f6b9f46d8db278 da624fd800e4af85548a294c1518893a
    8778c4f6d6d73c93df200960104e062b 388ea97dcf4016bced7f62b4f062cb6c
    04c20693d9a0e3b74ba8fe74cc012378 84f40d765ae56a51688d985cf0ceaef4
    3045ed8c3f0c33bced08537f6882613a cd3b08d665fce9dd8aa73171e2d3771a
    61dba2790e491d413d93d987e2745af2 9418e428be34941485c93447520ffe23
    1da2304d6a0fd5d07d08372202369661 59bef3cf904d722324dd852513df39ae
    030d8173908da6364786d3c1bfcb19ea 77a63b25f1e7fc661def480c5d00d444
    56269ebd84efd8e3a8b2c257eec76060 682848cbf5194bc99e49ee75e4d0d254
    bad4bfd74970c30e44b65511d4ad0e6e c7398e08e01307eeeea14e46ccd87cf3
    6b285221254d8fc6a6765c524ded0085 dca5bd688ddf722e2c0faf9d0fb2ce7a
    0c3f2cee19ca0ffba461ca8dc5d2c817 8b0762cf67135558494d2a96f1a139f0
    edb42d2af89a9c9122b07acbc29e5e72 2df8615c343702491098478a389c9872
    a10b0c9875125e257c7bfdf27eef4060 bd3d00f4c14fd3e3496c38d3c5d1a566
    8c39350effbc2d16ca17be4ce29f02ed 969504dda2a8c6b9ff919e693ee79e09
    089316e7d1d89ec099db3b2b268725d8 88536a4b8bf9aee8fb43e82a4d919d48
    43b1ca70a2d8d3f725ead1391377dcc0";

/// draft-ietf-quic-tls-29 A.3: the protected server Initial.
const DRAFT_29_SERVER: &str = "
    caff00001d0008f067a5502a4262b500 4074aaf2f007823a5d3a1207c86ee491
    32824f0465243d082d868b107a38092b c80528664cbf9456ebf27673fb5fa506
    1ab573c9f001b81da028a00d52ab00b1 5bebaa70640e106cf2acd043e9c6b441
    1c0a79637134d8993701fe779e58c2fe 753d14b0564021565ea92e57bc6faf56
    dfc7a40870e6";

/// draft-ietf-quic-v2-04 A.2: the protected client Initial (payload as RFC 9001's).
const V2_DRAFT_CLIENT: &str = "
    dd709a50c4088394c8f03e5157080000 449e4391d84823b8e610589c83c92d0e
    97eb7a6e5003f57764c5c7f0095ba54b 90818f1bfeecc1c97c54fc731edbd2a2
    44e3b1e639a9bc75ed545b98649343b2 53615ec6b3e4df0fd2e7fe9d691a09e6
    a144b436d8a2c088a404262340dfd995 ec3865694e3026ecd8c6d2561a5a3667
    2a1005018168c0f081c10e2bf14d550c 977e28bb9a759c57d0f7ffb1cdfb40bd
    774dec589657542047dffefa56fc8089 a4d1ef379c81ba3df71a05ddc7928340
    775910feb3ce4cbcfd8d253edd05f161 458f9dc44bea017c3117cca7065a315d
    eda9464e672ec80c3f79ac993437b441 ef74227ecc4dc9d597f66ab0ab8d214b
    55840c70349d7616cbe38e5e1d052d07 f1fedb3dd3c4d8ce295724945e67ed2e
    efcd9fb52472387f318e3d9d233be7df c79d6bf6080dcbbb41feb180d7858849
    7c3e439d38c334748d2b56fd19ab364d 057a9bd5a699ae145d7fdbc8f5777518
    1b0a97c3bdedc91a555d6c9b8634e106 d8c9ca45a9d5450a7679edc545da9102
    5bc93a7cf9a023a066ffadb9717ffaf3 414c3b646b5738b3cc4116502d18d79d
    8227436306d9b2b3afc6c785ce3c817f eb703a42b9c83b59f0dcef1245d0b3e4
    0299821ec19549ce489714fe2611e72c d882f4f70dce7d3671296fc045af5c9f
    630d7b49a3eb821bbca60f1984dce664 91713bfe06001a56f51bb3abe92f7960
    547c4d0a70f4a962b3f05dc25a34bbe8 30a7ea4736d3b0161723500d82beda9b
    e3327af2aa413821ff678b2a876ec4b0 0bb605ffcc3917ffdc279f187daa2fce
    8cde121980bba8ec8f44ca562b0f1319 14c901cfbd847408b778e6738c7bb5b1
    b3f97d01b0a24dcca40e3bed29411b1b a8f60843c4a241021b23132b9500509b
    9a3516d4a9dd41d3bacbcd426b451393 521828afedcf20fa46ac24f44a8e2973
    30b16705d5d5f798eff9e9134a065979 87a1db4617caa2d93837730829d4d89e
    16413be4d8a8a38a7e6226623b64a820 178ec3a66954e10710e043ae73dd3fb2
    715a0525a46343fb7590e5eac7ee55fc 810e0d8b4b8f7be82cd5a214575a1b99
    629d47a9b281b61348c8627cab38e2a6 4db6626e97bb8f77bdcb0fee476aedd7
    ba8f5441acaab00f4432edab3791047d 9091b2a753f035648431f6d12f7d6a68
    1e64c861f4ac911a0f7d6ec0491a78c9 f192f96b3a5e7560a3f056bc1ca85983
    67ad6acb6f2e034c7f37beeb9ed470c4 304af0107f0eb919be36a86f68f37fa6
    1dae7aff14decd67ec3157a11488a14f ed0142828348f5f608b0fe03e1f3c0af
    3acca0ce36852ed42e220ae9abf8f890 6f00f1b86bff8504c8f16c784fd52d25
    e013ff4fda903e9e1eb453c1464b1196 6db9b28e8f26a3fc419e6a60a48d4c72
    14ee9c6c6a12b68a32cac8f61580c64f 29cb6922408783c6d12e725b014fe485
    cd17e484c5952bf99bc94941d4b1919d 04317b8aa1bd3754ecbaa10ec227de85
    40695bf2fb8ee56f6dc526ef366625b9 1aa4970b6ffa5c8284b9b5ab852b905f
    9d83f5669c0535bc377bcc05ad5e48e2 81ec0e1917ca3c6a471f8da0894bc82a
    c2a8965405d6eef3b5e293a88fda203f 09bdc72757b107ab14880eaa3ef7045b
    580f4821ce6dd325b5a90655d8c5b55f 76fb846279a9b518c5e9b9a21165c509
    3ed49baaacadf1f21873266c767f6769";

/// draft-ietf-quic-v2-04 A.3: the protected server Initial.
const V2_DRAFT_SERVER: &str = "
    d0709a50c40008f067a5502a4262b500 4075103e63b4ebb7972fdce59d50e7e4
    9ff2a7e8de76b0cd8c10100a1f13d549 dd6fe801588fb14d279bef8d7c53ef62
    66a9a7a1a5f2fa026c236a5bf8df5aa0 f9d74773aeccfffe910b0f76814b5e33
    f7b7f8ec278d23fd8c7a9e66856b8bbe 72558135bca27c54d63fcc902253461c
    fc089d4e6b9b19";

#[test]
fn draft_23_keys() {
    check_keys(
        version(DRAFT_23),
        [
            "fda3953aecc040e48b34e27ef87de3a6098ecf0e38b7e032c5c57bcbd5975b84",
            "af7fd7efebd21878ff66811248983694",
            "8681359410a70bb9c92f0420",
            "a980b8b4fb7d9fbc13e814c23164253d",
            "554366b81912ff90be41f17e8022213090ab17d8149179bcadf222f29ff2ddd5",
            "5d51da9ee897a21b2659ccc7e5bfa577",
            "5e5ae651fd1e8495af13508b",
            "a8ed82e6664f865aedf6106943f95fb8",
        ],
    );
}

#[test]
fn draft_29_secrets() {
    let (c, s) = initial_secrets(version(DRAFT_29), &hex(DCID));
    assert_eq!(
        c.to_vec(),
        hex("0088119288f1d866733ceeed15ff9d50902cf82952eee27e9d4d4918ea371d87")
    );
    assert_eq!(
        s.to_vec(),
        hex("006f881359244dd9ad1acf85f595bad67c13f9f5586f5e64e1acae1d9ea8f616")
    );
}

#[test]
fn v2_draft_keys() {
    check_keys(
        version(V2_DRAFT),
        [
            "9fe72e1452e91f551b770005054034e47575d4a0fb4c27b7c6cb303a338423ae",
            "95df2be2e8d549c82e996fc9339f4563",
            "ea5e3c95f933db14b7020ad8",
            "091efb735702447d07908f6501845794",
            "3c9bf6a9c1c8c71819876967bd8b979efd98ec665edf27f22c06e9845ba0ae2f",
            "15d5b4d9a2b8916aa39b1bfe574d2aad",
            "a85e7ac31cd275cbb095c626",
            "b13861cfadbb9d11ff942dd80c8fc33b",
        ],
    );
}

/// Opens a version's published client and server Initials and checks the
/// unprotected headers and payloads.
fn check_packets(
    (client, client_header, client_payload): (&str, &str, &str),
    (server, server_header, server_payload): (&str, &str, &str),
) {
    let (pn, payload, header, ty) = open(client, true);
    assert_eq!((pn, ty), (2, LongType::Initial));
    assert_eq!(header, hex(client_header));
    let want = hex(client_payload);
    assert_eq!(payload[..want.len()], want[..]);
    assert!(payload[want.len()..].iter().all(|&b| b == 0), "PADDING");
    let (pn, payload, header, ty) = open(server, false);
    assert_eq!((pn, ty), (1, LongType::Initial));
    assert_eq!(header, hex(server_header));
    assert_eq!(payload, hex(server_payload));
}

#[test]
fn draft_23_packets_decrypt() {
    check_packets(
        (
            DRAFT_23_CLIENT,
            "c3ff000017088394c8f03e5157080000449e00000002",
            DRAFT_CLIENT_PAYLOAD,
        ),
        (
            DRAFT_23_SERVER,
            "c1ff0000170008f067a5502a4262b50040740001",
            DRAFT_SERVER_PAYLOAD,
        ),
    );
}

#[test]
fn draft_29_packets_decrypt() {
    check_packets(
        (
            DRAFT_29_CLIENT,
            "c3ff00001d088394c8f03e5157080000449e00000002",
            DRAFT_CLIENT_PAYLOAD,
        ),
        (
            DRAFT_29_SERVER,
            "c1ff00001d0008f067a5502a4262b50040740001",
            DRAFT_SERVER_PAYLOAD,
        ),
    );
}

#[test]
fn v2_draft_packets_decrypt() {
    check_packets(
        (
            V2_DRAFT_CLIENT,
            "d3709a50c4088394c8f03e5157080000449e00000002",
            CLIENT_PAYLOAD,
        ),
        (
            V2_DRAFT_SERVER,
            "d1709a50c40008f067a5502a4262b50040750001",
            SERVER_PAYLOAD,
        ),
    );
}

const C: Endpoint = (
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)),
    50000,
);
const S: Endpoint = (
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)),
    443,
);

/// Each published client Initial alone makes a record with the
/// ClientHello's server name, and the version's note.
#[test]
fn published_client_initials_make_records() {
    for (packet, sni, note) in [
        (DRAFT_23_CLIENT, "server", Some("quic_draft")),
        (DRAFT_29_CLIENT, "server", Some("quic_draft")),
        (V2_DRAFT_CLIENT, "example.com", Some("quic_v2_draft")),
    ] {
        let mut t = QuicTracker::new(100, 120.0);
        let mut st = QuicStats::default();
        t.on_datagram(1.0, C, S, &hex(packet), &mut st);
        t.finish_all(&mut st);
        assert_eq!(t.out.len(), 1, "{sni}: {st:?}");
        let r = &t.out[0];
        assert_eq!(r.sni.as_deref(), Some(sni));
        assert_eq!(r.handshake, Some(HandshakeKind::Incomplete));
        assert!(note.is_none_or(|n| r.notes.contains(&n)), "{:?}", r.notes);
        assert_eq!(st.decrypt_failed + st.unknown_version, 0);
    }
}

/// Drafts 33 and 34 use v1's salt (draft-ietf-quic-tls-33 §5.2), not
/// draft-29's: a draft-34 Initial built on the RFC 9001 vector opens with
/// the RFC's keys.
#[test]
fn drafts_33_and_34_take_the_v1_salt() {
    for wire in [0xff00_0021, 0xff00_0022] {
        assert_eq!(
            version(wire).initial_salt(),
            Version::V1.initial_salt(),
            "{wire:#x}"
        );
        assert_eq!(
            initial_secrets(version(wire), &hex(DCID)),
            initial_secrets(Version::V1, &hex(DCID))
        );
    }
    assert_ne!(
        version(0xff00_0020).initial_salt(),
        Version::V1.initial_salt()
    );
}

/// The two type bits and their inverse agree for every version and type.
#[test]
fn type_bits_round_trip() {
    for row in TLS {
        let v = version(row.wire);
        for ty in [
            LongType::Initial,
            LongType::ZeroRtt,
            LongType::Handshake,
            LongType::Retry,
        ] {
            assert_eq!(v.long_type(0xc0 | (v.type_bits(ty) << 4)), ty, "{v:?}");
        }
    }
}

/// Wireshark's `quic_version_vals`, every row: each number is in tlsrum's
/// table, decoded or known (none falls through to "unknown").
#[test]
fn complete_against_wiresharks_table() {
    let wireshark: &[(u32, u32)] = &[
        (0x0000_0001, 0x0000_0001),
        (0x4547_4700, 0x4547_47ff),
        (0x5043_5130, 0x5043_5131),
        (0x5052_4f58, 0x5052_4f58),
        (0x5130_3433, 0x5130_3433),
        (0x5130_3434, 0x5130_3434),
        (0x5130_3436, 0x5130_3436),
        (0x5130_3530, 0x5130_3530),
        (0x5147_4f00, 0x5147_4fff),
        (0x5430_3530, 0x5430_3530),
        (0x5430_3531, 0x5430_3531),
        (0x91c1_7000, 0x91c1_70ff),
        (0xabcd_0000, 0xabcd_000f),
        (0xf0f0_f0f0, 0xf0f0_f0ff),
        (0xf0f0_f1f0, 0xf0f0_f1ff),
        (0xf123_f0c0, 0xf123_f0cf),
        (0xface_b001, 0xface_b00f),
        (0xff00_0004, 0xff00_0022),
        (0xff02_0000, 0xff02_0000),
        (0x709a_50c4, 0x709a_50c4),
        (0x6b33_43cf, 0x6b33_43cf),
    ];
    for &(lo, hi) in wireshark {
        for v in lo..=hi {
            assert!(
                !matches!(classify(v), Class::Unknown | Class::Negotiation),
                "{v:#010x}"
            );
        }
    }
    // What Wireshark decrypts, tlsrum decrypts (its quic_draft_version:
    // drafts, mvfst 001/002/00e, T050/T051, v1, v2; Q050 is not TLS).
    for v in (0xff00_0016..=0xff00_0022).chain([
        0xface_b001,
        0xface_b002,
        0xface_b00e,
        0x5430_3530,
        0x5430_3531,
        0x0000_0001,
        0x6b33_43cf,
    ]) {
        assert!(matches!(classify(v), Class::Tls(_)), "{v:#010x}");
    }
}

/// Every decodable version, published vectors or not (T050, T051, mvfst,
/// the drafts between the vectors): an Initial sealed with the version's
/// key schedule each way makes a record with the ClientHello's name and
/// the ServerHello's version.
#[test]
fn every_tls_version_makes_a_record() {
    let dcid = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88];
    let ch = hex(CLIENT_PAYLOAD);
    let sh = hex(SERVER_PAYLOAD);
    for row in TLS {
        let v = version(row.wire);
        let keys = InitialKeys::new(v, &dcid);
        let client = seal_initial(v, &keys.client(), &dcid, &[0xc1; 4], &ch, 1200);
        let server = seal_initial(v, &keys.server(), &[0xc1; 4], &[0x5e; 5], &sh, 0);
        let mut t = QuicTracker::new(100, 120.0);
        let mut st = QuicStats::default();
        t.on_datagram(1.0, C, S, &client, &mut st);
        t.on_datagram(1.01, S, C, &server, &mut st);
        t.finish_all(&mut st);
        assert_eq!(t.out.len(), 1, "{}: {st:?}", row.name);
        let r = &t.out[0];
        assert_eq!(r.sni.as_deref(), Some("example.com"), "{}", row.name);
        assert_eq!(r.version, Some("TLS1.3"), "{}", row.name);
        assert!(
            row.note.is_none_or(|n| r.notes.contains(&n)),
            "{}: {:?}",
            row.name,
            r.notes
        );
        assert_eq!(st.decrypt_failed + st.bad_frames, 0, "{}", row.name);
    }
}

/// An Initial of `version` sealed with `keys`, padded to `pad_to` bytes.
fn seal_initial(
    version: Version,
    keys: &super::initial::DirKeys,
    dcid: &[u8],
    scid: &[u8],
    frames: &[u8],
    pad_to: usize,
) -> Vec<u8> {
    let mut header = vec![0xc3 | (version.type_bits(LongType::Initial) << 4)];
    header.extend(version.wire().to_be_bytes());
    header.push(dcid.len() as u8);
    header.extend_from_slice(dcid);
    header.push(scid.len() as u8);
    header.extend_from_slice(scid);
    header.push(0); // no token
    let mut payload = frames.to_vec();
    let fixed = header.len() + 2 + 4 + 16;
    if pad_to > fixed + payload.len() {
        payload.resize(pad_to - fixed, 0);
    }
    let len = 4 + payload.len() + 16;
    header.extend([0x40 | (len >> 8) as u8, len as u8]);
    header.extend(7u32.to_be_bytes());
    let d = keys.seal(&header, 4, 7, &payload);
    assert!(matches!(parse(&d), Ok((Packet::Long(_), n)) if n == d.len()));
    d
}
