//! Timing and byte counts, computed from the records each side sent and
//! the TCP handshake. All times are at the observer; DESIGN.md explains
//! why the definitions below give the same figure at any vantage point.

use crate::classify::{Dir, State, TlsHandshake};
use crate::flow::reassembly::seq_diff;
use crate::record::{EarlyData, HandshakeBytes, Timing};
use crate::tls::enums::content_type as ct;
use crate::tls::record::RecordInfo;

/// Timestamps of the TCP three-way handshake.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TcpHandshake {
    /// The last SYN before the SYN-ACK (Karn: a retransmitted SYN is the one answered, if any).
    pub syn: Option<f64>,
    pub syn_ack: Option<f64>,
    /// The initiator's first segment acknowledging the SYN-ACK.
    pub ack: Option<f64>,
}

impl TcpHandshake {
    /// SYN -> SYN-ACK plus SYN-ACK -> ACK: the full round trip from any vantage point.
    pub fn rtt(&self) -> Option<f64> {
        match (self.syn, self.syn_ack, self.ack) {
            (Some(syn), Some(_), Some(ack)) if ack >= syn => Some(ack - syn),
            _ => None,
        }
    }
}

fn ms(seconds: f64) -> f64 {
    (seconds * 1e6).round() / 1e3
}

fn acked(rec: &RecordInfo, seq: u32) -> bool {
    rec.ack.is_some_and(|ack| seq_diff(ack, seq) >= 0)
}

/// When the client could send application data: TLS 1.3 and resumed TLS 1.2
/// complete with the client's own last flight; full TLS 1.2 completes when
/// the server's Finished reaches the client, which the wire shows as the
/// client's first application data.
fn handshake_end(hs: &TlsHandshake) -> Option<f64> {
    if hs.state != State::Complete || hs.sslv2 {
        return None;
    }
    if hs.is_tls13() || hs.abbreviated {
        return hs.completed_by.map(|r| r.ts);
    }
    // The client's first application data, or — for a client that sends
    // none — its acknowledgement of the server's Finished, whichever came first.
    let data = hs.records[Dir::Client as usize]
        .iter()
        .find(|r| r.content_type == ct::APPLICATION_DATA)
        .map(|r| r.ts);
    match (data, hs.client_acked_finished) {
        (Some(d), Some(a)) => Some(d.min(a)),
        (d, a) => d.or(a),
    }
}

/// The server's first application data. In TLS 1.3 the server's encrypted
/// handshake flight is application_data records too, so only records sent
/// after the server received the client's Finished (and the request that
/// followed it, if any) count.
fn first_server_data(hs: &TlsHandshake) -> Option<&RecordInfo> {
    let server = hs.records[Dir::Server as usize].iter().filter(|r| r.content_type == ct::APPLICATION_DATA);
    if !hs.is_tls13() {
        return server.clone().next().filter(|_| hs.state == State::Complete && !hs.sslv2);
    }
    let fin = hs.completed_by.filter(|_| hs.state == State::Complete)?;
    if hs.early_data() == EarlyData::Accepted {
        if let Some(r) = half_rtt_data(hs) {
            return Some(r);
        }
    }
    let request = hs.records[Dir::Client as usize]
        .iter()
        .find(|r| r.content_type == ct::APPLICATION_DATA && seq_diff(r.seq, fin.end) >= 0);
    let threshold = request.map_or(fin.end, |r| r.end);
    server.clone().find(|r| acked(r, threshold))
}

/// With 0-RTT accepted the server answers the early request before the
/// client's Finished reaches it (0.5-RTT data, RFC 8446 §2.3), so the rule
/// above would miss the response. Its encrypted flight under a PSK is
/// EncryptedExtensions then Finished; the first server record after the
/// first Finished-sized record that is not the flight's first record is
/// the response. Known limit, as for ttfb in general: a server that sends
/// NewSessionTicket right behind its Finished (RFC 8446 §4.6.1 allows it)
/// has that ticket counted as its first data.
fn half_rtt_data(hs: &TlsHandshake) -> Option<&RecordInfo> {
    let (_, fin_len) = hs.eoed_and_finished_lens()?;
    let sh_end = hs.server_hello_end?;
    let mut flight = hs.records[Dir::Server as usize]
        .iter()
        .filter(move |r| r.content_type == ct::APPLICATION_DATA && seq_diff(r.seq, sh_end) >= 0)
        .skip(1)
        .skip_while(|r| r.len != fin_len);
    flight.next()?;
    flight.next()
}

/// Whether the server's first application data has been seen: nothing
/// more about the handshake remains to be learnt from this connection.
pub fn fully_timed(hs: &TlsHandshake) -> bool {
    match hs.state {
        State::Failed => true,
        State::Complete => {
            handshake_end(hs).is_some()
                && first_server_data(hs).is_some()
                && (hs.is_tls13() || hs.abbreviated || hs.records[Dir::Client as usize].iter().any(|r| r.content_type == ct::APPLICATION_DATA) || hs.client_acked_finished.is_some())
        }
        _ => false,
    }
}

pub fn timing(hs: &TlsHandshake, tcp: &TcpHandshake) -> Timing {
    let start = hs.client_hello_ts;
    let since_hello = |t: Option<f64>| match (start, t) {
        (Some(s), Some(t)) if t >= s => Some(ms(t - s)),
        _ => None,
    };
    let tcp_rtt = tcp.rtt();
    Timing {
        tcp_rtt: tcp_rtt.map(ms),
        handshake: since_hello(handshake_end(hs)),
        ttfb: since_hello(first_server_data(hs).map(|r| r.ts)),
        round_trips: hs.round_trips(),
        avoidable: hs.avoidable_round_trips().zip(tcp_rtt).map(|(n, rtt)| ms(n as f64 * rtt)),
    }
}

/// Bytes of handshake records each way (headers included): the records
/// other than application_data before a direction's first application_data
/// record, so that an alert that follows data (in the same segment or
/// not) never counts, however the stream was cut into packets. TLS 1.3's
/// encrypted handshake records are counted up to the client's Finished
/// (from its EndOfEarlyData, if any: 0-RTT data before it is not handshake).
pub fn handshake_bytes(hs: &TlsHandshake) -> HandshakeBytes {
    let size = |r: &RecordInfo| 5 + r.len as u64;
    let before_data = |log: &[RecordInfo]| -> u64 {
        log.iter().take_while(|r| r.content_type != ct::APPLICATION_DATA).map(size).sum()
    };
    let [client, server] = &hs.records;
    let mut out = HandshakeBytes {
        client_handshake: before_data(client),
        server_handshake: before_data(server),
    };
    if hs.is_tls13() {
        let fin = hs.completed_by;
        let start = hs.client_flight_start;
        out.client_handshake += client
            .iter()
            .filter(|r| r.content_type == ct::APPLICATION_DATA)
            .filter(|r| start.is_some_and(|s| seq_diff(r.seq, s) >= 0))
            .filter(|r| fin.is_some_and(|f| seq_diff(r.seq, f.seq) <= 0))
            .map(size)
            .sum::<u64>();
        out.server_handshake += server
            .iter()
            .filter(|r| r.content_type == ct::APPLICATION_DATA)
            .filter(|r| fin.is_none_or(|f| !acked(r, f.end)))
            .map(size)
            .sum::<u64>();
    }
    out
}
