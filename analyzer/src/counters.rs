//! Counters, each defined once: the [`counters!`](macro@crate::counters) macro
//! turns one list of documented fields into the struct, its `merge`, its
//! `--stats` JSON (serde) and the walk that exporters (Prometheus) use, so
//! a new counter cannot be forgotten on one of those ways out.
//!
//! ```
//! use analyzer::counters::{Counter, QuicStats, Stats};
//! let mut a = Stats { capture_loss_bytes: 3, ..Stats::default() };
//! a.merge(&Stats { capture_loss_bytes: 4, ..Stats::default() });
//! let mut seen = Vec::new();
//! a.visit(&mut |c: Counter| seen.push((c.group, c.name, c.value)));
//! assert!(seen.contains(&("analyzer", "capture_loss_bytes", 7)));
//! assert_eq!(seen.len(), Stats::NAMES.len() + QuicStats::NAMES.len());
//! ```

/// One counter as exporters see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter {
    /// Which layer counts it: `analyzer`, `quic` (a struct's `GROUP`).
    pub group: &'static str,
    /// The field's name, also its key in `--stats`.
    pub name: &'static str,
    /// The field's doc comment.
    pub help: &'static str,
    pub value: u64,
}

/// Defines a counter struct: `u64` fields, each with a doc comment (the
/// metric's help), then optionally `;` and nested counter structs (walked
/// and merged as well, serialized as nested objects).
#[macro_export]
macro_rules! counters {
    (
        $(#[$meta:meta])*
        pub struct $name:ident in $group:literal {
            $( $(#[doc = $doc:literal])+ $field:ident, )*
            $( ; $( $(#[doc = $ndoc:literal])+ $nested:ident : $nty:ty, )* )?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, serde::Serialize, PartialEq, Eq)]
        pub struct $name {
            $( $(#[doc = $doc])+ pub $field: u64, )*
            $( $( $(#[doc = $ndoc])+ pub $nested: $nty, )* )?
        }

        impl $name {
            /// The layer these counters belong to (a metric name prefix).
            pub const GROUP: &'static str = $group;
            /// The struct's own counters, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($field)),*];

            /// Adds another instance's counters (one per file or per CPU).
            pub fn merge(&mut self, o: &Self) {
                $( self.$field += o.$field; )*
                $( $( self.$nested.merge(&o.$nested); )* )?
            }

            /// Every counter, nested ones included, in declaration order.
            pub fn visit(&self, f: &mut dyn FnMut($crate::counters::Counter)) {
                $( f($crate::counters::Counter {
                    group: $group,
                    name: stringify!($field),
                    help: concat!($($doc),+).trim_ascii(),
                    value: self.$field,
                }); )*
                $( $( self.$nested.visit(f); )* )?
            }

            /// Every counter set to `v` (tests of the ways out).
            pub fn filled(v: u64) -> Self {
                $name {
                    $( $field: v, )*
                    $( $( $nested: <$nty>::filled(v), )* )?
                }
            }
        }
    };
}

counters! {
    /// What the analyzer saw, skipped, lost or capped.
    pub struct Stats in "analyzer" {
        /// Frames or packets handed to the analyzer.
        packets,
        /// Their bytes (frames whole; decoded packets: payload).
        bytes,
        /// TCP segments.
        tcp_packets,
        /// UDP datagrams.
        udp_packets,
        /// Frames that carry no IP packet.
        not_ip,
        /// Frames whose headers are cut short or wrong.
        malformed_packets,
        /// IP fragments, and 802.11 and CAPWAP fragments (not reassembled).
        ip_fragments,
        /// IP packets that are neither TCP nor UDP.
        other_transport,
        /// Frames of a link type tlsrum does not read (the capture's link
        /// type is named once, in words, when it is read).
        unknown_link_frames,
        /// Frames encrypted below IP, not decrypted: 802.11 frames with the
        /// Protected bit (WEP, WPA), DTLS-protected CAPWAP data.
        link_encrypted_frames,
        /// 802.11 A-MSDU frames (several packets in one frame): not unpacked.
        link_aggregate_frames,
        /// TCP flows created.
        flows_created,
        /// TCP flows evicted from the full flow table (`--max-flows`).
        flows_evicted,
        /// TCP flows and QUIC connections finished early, least recently
        /// used first, to keep their state within `--max-memory`.
        memory_evictions,
        /// Records held for `--record-at close` that went out before
        /// their connection's FIN/RST (capture end, idle timeout, eviction,
        /// memory budget, a new connection on the tuple): lifetime unknown.
        held_records_unclosed,
        /// TCP flows still being followed (TLS, or not identified yet)
        /// ended by the idle timeout.
        flows_expired,
        /// TCP flows recognised as not TLS.
        non_tls_flows,
        /// TCP connections seen again after they ended, with the same tuple
        /// and initial sequence number (a capture concatenated with itself,
        /// a duplicate in a merged capture): skipped, one record each.
        repeated_connections,
        /// Segments with payload of a TCP connection that had ended (its
        /// FIN/RST, its record out, evicted or idle), near where its streams
        /// ended and within `--idle-timeout`: a close_notify reordered after
        /// the FINs, a retransmission. Skipped as that connection's, by its
        /// tombstone, instead of opening a second flow.
        late_segments,
        /// Tombstones of ended connections forgotten, oldest first, to keep
        /// to their cap (65,536) or the memory budget: a late segment of
        /// such a connection may open a flow of its own again.
        tombstones_evicted,
        /// TCP flows set aside after their ClientHello while the flow state
        /// was over its parking threshold: kept as the hello's bytes, their
        /// handshake state made again, identically, at their next packet.
        hellos_parked,
        /// TLS-over-TCP connection records emitted.
        tls_connections,
        /// PROXY protocol headers (v1 or v2) read in front of a stream: a
        /// load balancer's backend; the record's `proxied_client`.
        proxy_protocol_headers,
        /// TCP flows that ended (closed, evicted, idle, end of capture)
        /// before tlsrum could tell whether they carry TLS: a SYN only, or
        /// too few bytes. Every flow created ends counted once, as
        /// `tls_connections`, `non_tls_flows` or this.
        unidentified_flows,
        /// TLS record streams that could not be followed (bad record header, caps).
        stream_errors,
        /// Times a TLS record stream found its framing again after bytes
        /// the capture lost: a segment started with a plausible record
        /// header. Noted on the record as `client_resync` / `server_resync`.
        stream_resyncs,
        /// Handshake messages that did not parse.
        handshake_parse_errors,
        /// Holes in a TCP stream the capture never filled and no ACK
        /// explained, skipped to read what followed (when waiting behind
        /// them would break a cap, or the flow ended), or that the stream
        /// ends in (a segment cut short by the snap length). Noted as
        /// `client_gap` / `server_gap`.
        reassembly_gaps,
        /// Of those, skipped because out-of-order segments hit the
        /// per-direction limit (too many holes at once).
        reassembly_hole_limit,
        /// Payload bytes seen more than once.
        retransmitted_bytes,
        /// Segments whose bytes differ from the copy of the same bytes
        /// already read (checked over each direction's first record, the
        /// hello), or that replaced a first copy which was no ClientHello:
        /// corruption or a forged copy. Noted on the record as
        /// `client_conflicting_retransmission` / `server_conflicting_retransmission`.
        conflicting_retransmissions,
        /// Segments cut short by the capture's snap length.
        truncated_segments,
        /// Bytes of a TCP stream the capture never showed, skipped to read
        /// what followed: acknowledged by the peer (noted `client_capture_loss`
        /// / `server_capture_loss`), or in a hole counted in `reassembly_gaps`.
        capture_loss_bytes,
        /// Connections that hit the per-direction record limit.
        record_limit_hits,
        ;
        /// QUIC counters, by reason.
        quic: QuicStats,
    }
}

counters! {
    /// QUIC counters, by reason. Every cap hit and every packet tlsrum could
    /// not use is counted here.
    pub struct QuicStats in "quic" {
        /// UDP datagrams handed to the QUIC tracker.
        datagrams,
        /// QUIC packets read (coalesced packets counted one by one).
        packets,
        /// QUIC connection records emitted.
        connections,
        /// Datagrams that are not QUIC (or short headers of no known connection).
        not_quic,
        /// Long headers whose fields overrun the datagram or break the rules.
        bad_header,
        /// Connection IDs longer than 20 bytes, or a first Initial's DCID shorter than 8.
        bad_cid_len,
        /// Long headers of versions in no table (a future or private
        /// number): their values are listed in `undecoded_versions`.
        unknown_version,
        /// Packets of Google QUIC versions whose handshake is QUIC Crypto,
        /// not TLS (Q043, Q046, Q050...): known, counted, not decoded.
        not_tls_version,
        /// Long headers of known versions tlsrum cannot decrypt: IETF
        /// drafts before 22 (older header), vendor experiments whose keys
        /// were never published, the reserved 0x?a?a?a?a numbers that force
        /// Version Negotiation.
        undecodable_version,
        /// Initial packets that did not decrypt (wrong keys, corruption, truncation).
        decrypt_failed,
        /// Handshake packets opened with key-log secrets.
        keylog_opened,
        /// Handshake packets that did not open with the key log's secrets for
        /// their connection (a stale or foreign key log).
        keylog_failed,
        /// Decryption attempts skipped: the per-tuple or per-connection cap was hit.
        decrypt_capped,
        /// Would-be first Initials in datagrams below 1200 bytes.
        short_initial,
        /// Long-header packets (not a first Initial) of no known connection.
        orphan_packets,
        /// Initial payloads with a frame tlsrum cannot read.
        bad_frames,
        /// Connections whose CRYPTO stream kept a hole to the end.
        crypto_gap,
        /// CRYPTO bytes dropped by the stream caps.
        crypto_capped,
        /// ClientHello/ServerHello bodies that did not parse.
        hello_parse_errors,
        /// Connections evicted from the full table.
        evicted,
        /// Connections finished by the idle timeout.
        expired,
        /// Version Negotiation packets.
        version_negotiation,
        /// Retry packets that restarted a connection's handshake.
        retry,
        ;
        /// The version values of the three counters above, with packets
        /// per value (bounded: `MAX_VERSIONS_SEEN` values, the rest as `other`).
        undecoded_versions: crate::quic::version::VersionsSeen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field reaches merge, visit and the JSON (the macro writes all
    /// three from one list).
    #[test]
    fn merge_visit_and_json_cover_every_counter() {
        let mut total = Stats::default();
        total.merge(&Stats::filled(1));
        total.merge(&Stats::filled(2));
        let mut seen = Vec::new();
        total.visit(&mut |c| seen.push(c));
        assert_eq!(seen.len(), Stats::NAMES.len() + QuicStats::NAMES.len());
        for c in &seen {
            assert_eq!(c.value, 3, "{}.{} not merged", c.group, c.name);
            assert!(!c.help.is_empty(), "{}.{} has no help", c.group, c.name);
        }
        let json = serde_json::to_value(&total).unwrap();
        for c in &seen {
            let v = if c.group == QuicStats::GROUP {
                &json["quic"][c.name]
            } else {
                &json[c.name]
            };
            assert_eq!(v, 3, "{}.{} missing from --stats", c.group, c.name);
        }
    }
}
