//! The eBPF ring buffer's records as the agent reads them: a header
//! (`EventHeader::parse`), `len` payload bytes cut to the record, then
//! `Event::datagrams` (chunks of big segments, GSO batches, fills) into
//! `Analyzer::push_packet`, as `source/ebpf.rs` does.
//!
//! Input: records, each a 16-bit length and that many bytes (a
//! `struct tlsrum_event` of `EVENT_HEADER_LEN` bytes, native byte order,
//! then the payload). The ring reader's own slicing (`ring.rs`, private) is
//! repeated here. Checks: every packet is counted; a packet never carries
//! more than `CHUNK` + `MAX_FILL` bytes.
#![no_main]

use analyzer::{Analyzer, Config};
use libfuzzer_sys::fuzz_target;
use tlsrum::ebpf::{Event, EventHeader, CHUNK, EVENT_HEADER_LEN, MAX_FILL};
use tlsrum_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let cfg = Config {
        report_stragglers: true,
        ..Config::default()
    };
    let mut a = Analyzer::new(cfg);
    let mut packets = 0u64;
    while !input.is_empty() {
        let item = input.prefixed();
        // ring.rs: a record too short for a header is skipped.
        let Some(header) = EventHeader::parse(item) else {
            continue;
        };
        let end = (EVENT_HEADER_LEN + header.len as usize).min(item.len());
        let payload = &item[EVENT_HEADER_LEN..end];
        let ts = header.ts_ns as f64 / 1e9;
        let ev = Event {
            ts,
            header: &header,
            payload,
        };
        let _ = header.flow();
        for p in ev.datagrams() {
            assert!(
                p.payload.len() <= CHUNK.max(MAX_FILL) + item.len(),
                "packet larger than an event can carry"
            );
            a.push_packet(ts, &p);
            packets += 1;
        }
        a.take_stragglers();
    }
    a.finish();
    let _ = a.take_records();
    assert_eq!(a.stats().packets, packets, "every packet counted once");
});
