//! Whole frames through `Analyzer::push_frame`, for every link type the
//! analyzer reads, with tiny caps switched on by the input.
//!
//! Input: byte 0 picks the link type (an index into `LinkType::all()`); byte 1 switches caps on
//! (bit 0 `max_flows` 2, bit 1 `max_flow_buffer` 64, bit 2
//! `max_handshake_message` 64, bit 3 only port 443, bit 4 idle timeout 1 s,
//! bit 5 report finished flows, bit 6 `max_memory` 4 KiB (which also parks
//! hello-only flows past 1 KiB of flow state), bit 7 `--record-at
//! close`: records held on their flows until FIN/RST); then frames, each a time step (1/16 s
//! units), a 16-bit length and the frame's bytes. `finish()` at the end.
//! Checks: every frame is counted once in `stats().packets`; the flow state
//! stays within `max_memory` after every frame and is 0 after `finish()`;
//! every TCP flow created ends counted once; every record encodes as one
//! NDJSON line of valid JSON.
#![no_main]

use analyzer::wire::LinkType;
use analyzer::{Analyzer, Config};
use libfuzzer_sys::fuzz_target;
use tlsrum_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let links: Vec<LinkType> = LinkType::all().collect();
    let link = links[usize::from(input.u8()) % links.len()];
    let caps = input.u8();
    let mut cfg = Config::default();
    if caps & 1 != 0 {
        cfg.max_flows = 2;
    }
    if caps & 2 != 0 {
        cfg.max_flow_buffer = 64;
    }
    if caps & 4 != 0 {
        cfg.max_handshake_message = 64;
    }
    if caps & 8 != 0 {
        cfg.server_ports = vec![443];
    }
    if caps & 16 != 0 {
        cfg.idle_timeout = 1.0;
    }
    cfg.report_stragglers = caps & 32 != 0;
    if caps & 64 != 0 {
        cfg.max_memory = 4096;
    }
    if caps & 128 != 0 {
        cfg.record_at = analyzer::RecordAt::Close;
    }
    let budget = cfg.max_memory;
    let mut a = Analyzer::new(cfg);
    let mut ts = 1_700_000_000.0;
    let mut frames = 0u64;
    let mut records = Vec::new();
    while !input.is_empty() {
        ts += f64::from(input.u8()) / 16.0;
        let frame = input.prefixed();
        a.push_frame(ts, link, frame);
        frames += 1;
        assert!(
            a.memory_used() <= budget,
            "{} bytes held over a {budget}-byte budget",
            a.memory_used()
        );
        if frames.is_multiple_of(8) {
            records.extend(a.take_records());
            a.take_stragglers();
        }
    }
    a.finish();
    records.extend(a.take_records());
    let s = a.stats();
    assert_eq!(s.packets, frames, "every frame counted once");
    assert_eq!(a.memory_used(), 0, "nothing held after finish()");
    assert_eq!(
        s.flows_created,
        s.tls_connections + s.non_tls_flows + s.unidentified_flows,
        "every flow ends counted once: {s:?}"
    );
    let mut out = Vec::new();
    for r in &records {
        out.clear();
        analyzer::output::ndjson::encode(&mut out, r);
        let line = std::str::from_utf8(&out).expect("NDJSON is UTF-8");
        let line = line.strip_suffix('\n').unwrap_or(line);
        assert!(!line.contains('\n'), "one line per record");
        tlsrum_fuzz::check_json(line);
    }
});
