//! Timing and byte counts from the records (TCP) or packets (QUIC) each
//! side sent. All times are at the observer; DESIGN.md explains why the
//! definitions below give the same figure at any vantage point.

use smallvec::SmallVec;

use super::event::Dir;
use super::machine::{alert_sized, Handshake, State};
use crate::record::{EarlyData, HandshakeBytes, Timing, Transport};
use crate::seq::Seq;
use crate::tls::enums::content_type as ct;
use crate::tls::record::RecordInfo;

/// Milliseconds, rounded to the microsecond.
pub fn ms(seconds: f64) -> f64 {
    (seconds * 1e6).round() / 1e3
}

/// Where the observer sits on the path, from TCP's three-way handshake
/// (seconds at the observer). At the client `to_server` is the whole round
/// trip and `to_client` about zero, at the server the reverse, in the
/// middle each is the round trip to that side (DESIGN.md "RTT from any
/// vantage point"). Think times are observed gaps minus these.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Vantage {
    /// SYN -> SYN-ACK.
    pub to_server: Option<f64>,
    /// SYN-ACK -> the client's ACK of it.
    pub to_client: Option<f64>,
    /// The client's ACK of the SYN-ACK: the TCP handshake's end.
    pub connected: Option<f64>,
    /// When the connection first retransmitted bytes (either side). Before
    /// the handshake's end it hides who waited (the copy the peer answered
    /// is unknown, as in Karn's algorithm): no split then.
    pub retransmission: Option<f64>,
}

/// What each side spent thinking (seconds), and how many round trips of
/// the handshake the split covered.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Think {
    server: f64,
    client: f64,
    rounds: u8,
}

/// What showed a handshake's end ([`Handshake::handshake_end`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum EndBy {
    /// The client's last flight (TLS 1.3, QUIC, resumed TLS 1.2).
    ClientFlight,
    /// Full TLS 1.2: the client's first application data.
    ClientData,
    /// Full TLS 1.2: the server's Finished plus the round trip to the client.
    FinishedReached,
    /// Full TLS 1.2: the client's ACK of the server's Finished, which only
    /// bounds the end (the server's side or the round trip unknown).
    ClientAck,
}

fn acked(rec: &RecordInfo, seq: u32) -> bool {
    rec.ack.is_some_and(|ack| Seq(ack) >= Seq(seq))
}

fn is_data(r: &&RecordInfo) -> bool {
    r.content_type == ct::APPLICATION_DATA
}

impl Handshake {
    /// When the client could send application data: TLS 1.3, QUIC and
    /// resumed TLS 1.2 complete with the client's own last flight; full TLS
    /// 1.2 completes when the server's Finished reaches the client, which
    /// the wire shows as the client's first application data.
    fn handshake_end(&self) -> Option<f64> {
        self.handshake_end_by().map(|(at, _)| at)
    }

    /// [`handshake_end`](Self::handshake_end) and what showed it.
    fn handshake_end_by(&self) -> Option<(f64, EndBy)> {
        if self.state != State::Complete || self.sslv2 {
            return None;
        }
        if self.is_tls13() || self.abbreviated {
            return self.late().completed_at.map(|at| (at, EndBy::ClientFlight));
        }
        // The client's first application data, or — for a client that sends
        // none right away (a pooled connection, a client waiting for its
        // user) — when the server's Finished reached it.
        let data = self
            .records
            .of(Dir::Client)
            .iter()
            .find(is_data)
            .map(|r| r.ts);
        match (data, self.late().client_acked_finished) {
            (Some(d), Some(a)) if d <= a => Some((d, EndBy::ClientData)),
            (_, Some(a)) => Some(self.server_finished_reached(a)),
            (d, None) => d.map(|d| (d, EndBy::ClientData)),
        }
    }

    /// When the server's Finished reached the client, as the observer would
    /// see the client's immediate answer: the Finished plus the observer's
    /// round trip to the client. The client's ACK of it (`acked`) may be
    /// delayed (Linux: 40 ms or more), so it only bounds this from above;
    /// without the server's side or the round trip, it stands in.
    fn server_finished_reached(&self, acked: f64) -> (f64, EndBy) {
        let finished = self.late().server_finished_end.and_then(|end| {
            self.records
                .of(Dir::Server)
                .iter()
                .find(|r| Seq(r.end) >= Seq(end))
                .map(|r| r.ts)
        });
        match finished.zip(self.to_client) {
            Some((fin, rt)) => (acked.min(fin + rt), EndBy::FinishedReached),
            None => (acked, EndBy::ClientAck),
        }
    }

    /// Only the client's direction, and the end is its ACK of the server's
    /// Finished: that ACK, perhaps delayed, only bounds the handshake's
    /// end, so `timing.handshake` is null (the end still serves for
    /// `idle_before_use`).
    fn end_unseen(&self) -> bool {
        self.missing == Some(Dir::Server)
            && matches!(self.handshake_end_by(), Some((_, EndBy::ClientAck)))
    }

    /// The observer's round trip to the client, from TCP's handshake
    /// ([`Vantage::to_client`]), for [`handshake_end`](Self::handshake_end).
    /// The flow passes it with every segment: the vantage may learn it
    /// (the client's ACK of the SYN-ACK) after this handshake began.
    pub fn set_to_client(&mut self, rt: Option<f64>) {
        if rt.is_some() {
            self.to_client = rt;
        }
    }

    /// When the client first used the connection: its first application
    /// data after the handshake's end ([`handshake_end`](Self::handshake_end)).
    /// TLS 1.3 0-RTT data (application_data the client wrote before its last
    /// flight) is use before the end: the end itself. TLS 1.3's encrypted
    /// Finished is an application_data record too: only records after it
    /// count. TCP only (QUIC shows no 1-RTT packet's contents: null).
    pub(super) fn first_use(&self) -> Option<f64> {
        if self.transport != Transport::Tcp {
            return None;
        }
        let end = self.handshake_end()?;
        let mut data = self.records.of(Dir::Client).iter().filter(is_data);
        if !self.is_tls13() {
            return data.next().map(|r| r.ts.max(end));
        }
        let fin = self.late().completed_by?;
        let flight = self.client_flight_start.unwrap_or(fin.seq);
        for r in data {
            if Seq(r.seq) < Seq(flight) {
                return Some(end);
            }
            if Seq(r.seq) >= Seq(fin.end) {
                return (!alert_sized(r)).then(|| r.ts.max(end));
            }
        }
        None
    }

    /// TLS 1.3 over TCP: whether the client's first application_data record
    /// after its Finished has an encrypted alert's length, i.e. the client
    /// closed (its close_notify) without using the connection. That record
    /// is no request and no use, and what the server sends once it has it
    /// (its own close_notify) is no answer.
    fn client_closed_unused(&self) -> bool {
        if self.transport != Transport::Tcp || !self.is_tls13() {
            return false;
        }
        let Some(fin) = self.late().completed_by else {
            return false;
        };
        self.records
            .of(Dir::Client)
            .iter()
            .filter(is_data)
            .find(|r| Seq(r.seq) >= Seq(fin.end))
            .is_some_and(alert_sized)
    }

    /// The handshake completed but the client has not used the connection
    /// yet (TCP): its record waits for that, or for the close, so that
    /// `idle_before_use` is not left out while it can still come. A client
    /// that closed without using it never will.
    pub fn awaits_use(&self) -> bool {
        self.transport == Transport::Tcp
            && self.state == State::Complete
            && self.handshake_end().is_some()
            && self.first_use().is_none()
            && !self.client_closed_unused()
    }

    /// A server record after its Finished that the key log opened as
    /// something other than application data (NewSessionTicket, KeyUpdate,
    /// an encrypted alert).
    fn post_handshake(&self, r: &RecordInfo) -> bool {
        self.late().server_post_handshake.contains(&r.seq)
    }

    /// When the server's first application data left. QUIC: its first 1-RTT
    /// packet after the client's. TLS 1.3 over TCP: the server's encrypted
    /// handshake flight is application_data records too, so only records
    /// sent after the server received the client's Finished (and the
    /// request that followed it, if any) count; and with a key log, not
    /// those that opened as NewSessionTicket, KeyUpdate or an alert
    /// (without one, a ticket sent before the response counts as the
    /// first data). A client that closed without a request
    /// ([`client_closed_unused`](Self::client_closed_unused)) had no
    /// answer: null (what the server sent is a ticket or its close_notify).
    fn first_server_data(&self) -> Option<f64> {
        if self.transport == Transport::Quic {
            return self
                .late()
                .server_data
                .filter(|_| self.state == State::Complete);
        }
        let server = self.records.of(Dir::Server);
        if !self.is_tls13() {
            if self.state != State::Complete || self.sslv2 {
                return None;
            }
            return server
                .iter()
                .find(|r| is_data(r) && !self.post_handshake(r))
                .map(|r| r.ts);
        }
        let fin = self
            .late()
            .completed_by
            .filter(|_| self.state == State::Complete)?;
        if self.early_data() == EarlyData::Accepted {
            if let Some(r) = self.half_rtt_data() {
                return Some(r.ts);
            }
        }
        if self.client_closed_unused() {
            return None;
        }
        let request = self
            .records
            .of(Dir::Client)
            .iter()
            .find(|r| is_data(r) && Seq(r.seq) >= Seq(fin.end));
        let threshold = request.map_or(fin.end, |r| r.end);
        // The acknowledgement first: the key log's list is looked up only
        // for the records past it.
        server
            .iter()
            .find(|r| is_data(r) && acked(r, threshold) && !self.post_handshake(r))
            .map(|r| r.ts)
    }

    /// With 0-RTT accepted the server answers the early request before the
    /// client's Finished reaches it (0.5-RTT data, RFC 8446 §2.3), so the rule
    /// above would miss the response. Its encrypted flight under a PSK is
    /// EncryptedExtensions then Finished; the first server record after the
    /// first Finished-sized record that is not the flight's first record is
    /// the response. Known limit, as for ttfb in general: without a key log,
    /// a server that sends NewSessionTicket right behind its Finished (RFC
    /// 8446 §4.6.1 allows it) has that ticket counted as its first data.
    fn half_rtt_data(&self) -> Option<&RecordInfo> {
        let (_, fin_len) = self.eoed_and_finished_lens()?;
        let sh_end = self.server_hello_end?;
        let mut flight = self
            .records
            .of(Dir::Server)
            .iter()
            .filter(move |r| r.content_type == ct::APPLICATION_DATA && Seq(r.seq) >= Seq(sh_end))
            .skip(1)
            .skip_while(|r| r.len != fin_len);
        flight.next()?;
        flight.find(|r| !self.post_handshake(r))
    }

    /// Whether the server's first application data has been seen (or the
    /// client closed without a request, so none will answer one): nothing
    /// more about the handshake remains to be learnt from this connection.
    ///
    /// # The kernel's cut-off, which must never come before this
    ///
    /// The eBPF program stops forwarding a TLS-over-TCP flow on its own
    /// (`phase_check` in `bpf/tlsrum.bpf.c`, counted as
    /// `handshake_over`) when the server sends an application_data record
    /// in a segment acknowledging the client's second application_data
    /// record sent after the server's handshake records (its first, if it
    /// has sent only one). By then this rule has fired: the completion (the
    /// client's Finished or CCS) came earlier, and so did the client's first
    /// data and the server's first data after the request -- the TLS 1.3
    /// threshold in `first_server_data` is the end of the client's record
    /// after its Finished (or of the Finished; if that record is a close
    /// alert, the rule fired on it),
    /// TLS 1.2 takes any server data. Where the kernel cannot tell (a record header split across
    /// segments, tracking lost, a client that never acknowledges the
    /// server's handshake) it does not cut, and the record cap
    /// ([`MAX_RECORDS_PER_DIR`](crate::caps::MAX_RECORDS_PER_DIR), which
    /// the kernel mirrors as `TLSRUM_RECORDS_PER_DIR`: one more record and
    /// both sides stop) or user space stops the flow instead. A change to
    /// either side must keep the kernel later: `agent/tests/kernel_corpus.rs`
    /// runs the real TC program over `pcaps/` and the public corpus (whole
    /// and cut into small segments) and requires every record built from the
    /// kernel's events to equal replay's.
    pub fn fully_timed(&self) -> bool {
        match self.state {
            State::Failed => true,
            State::Complete => {
                self.handshake_end().is_some()
                    && (self.first_server_data().is_some() || self.client_closed_unused())
                    && (self.is_tls13()
                        || self.abbreviated
                        || self.records.of(Dir::Client).iter().any(|r| is_data(&r))
                        || self.late().client_acked_finished.is_some())
            }
            _ => false,
        }
    }

    /// Splits a TLS-over-TCP handshake into round trips and each side's
    /// think time, from the record logs' timestamps and acknowledgement
    /// numbers alone (any vantage point, no decryption).
    ///
    /// The client's records up to the handshake's end fall into flights: a
    /// record starts a new flight when its sender had by then received a
    /// server record sent in answer to the current flight (one whose ACK
    /// covers the flight's first record). Each such turn is a round trip:
    /// the server thought from the last client record its answer had seen
    /// to the last answer record the client had received when it answered
    /// in turn, minus the observer's round trip to the server; the client
    /// thought from there to the end of its next flight (the handshake's
    /// end for the last), minus the observer's round trip to the client.
    /// Causality by ACK rather than by alternation keeps records a side
    /// wrote without waiting (0-RTT data, a compatibility-mode
    /// ChangeCipherSpec, False Start data) in the flight they belong to.
    /// Terms within noise of zero are clamped at zero.
    fn think_tcp(&self, v: Vantage) -> Option<Think> {
        let (to_server, to_client) = (v.to_server?, v.to_client?);
        if self.missing.is_some() || self.transport != Transport::Tcp {
            return None;
        }
        let end = self.handshake_end()?;
        if v.retransmission.is_some_and(|t| t <= end) {
            return None;
        }
        let (client, server) = self.records.both();
        // A TLS 1.3 client's middlebox-compatibility ChangeCipherSpec
        // (RFC 8446 D.4) is no answer to anything: GnuTLS writes it as soon
        // as the ServerHello arrives, before the rest of the server's
        // flight, and its ACK then made the ServerHello the flight's last
        // record the client had heard, so the wait for the rest went to
        // the client's think time. Its Finished is the answer.
        let tls13 = self.is_tls13();
        // On the stack: a handshake's client records are a few.
        let mut sent: SmallVec<[RecordInfo; 8]> = client
            .iter()
            .skip_while(|r| r.content_type != ct::HANDSHAKE)
            .filter(|r| !(tls13 && r.content_type == ct::CHANGE_CIPHER_SPEC))
            .take_while(|r| r.ts <= end)
            .copied()
            .collect();
        // Full TLS 1.2 ending with the client's ACK of the server's
        // Finished (no data of its own): that ACK is the last reaction.
        if sent.last().is_none_or(|r| r.ts < end) {
            let fin = self.late().server_finished_end?;
            let at = sent.last()?.end;
            sent.push(RecordInfo {
                ts: end,
                content_type: 0,
                minor: 0,
                len: 0,
                seq: at,
                end: at,
                ack: Some(fin),
            });
        }
        let answers = |first: &RecordInfo, s: &RecordInfo| acked(s, first.end);
        let mut think = Think::default();
        let mut flight = (0usize, 0usize);
        // The last server record of the previous answer, once the client
        // answered it: the client's think time runs from there.
        let mut answered_at: Option<f64> = None;
        for i in 1..sent.len() {
            let (r, first) = (&sent[i], &sent[flight.0]);
            let got = server
                .iter()
                .rfind(|s| answers(first, s) && acked(r, s.end) && s.ts <= r.ts);
            let Some(got) = got else {
                flight.1 = i;
                continue;
            };
            let began = server.iter().find(|s| answers(first, s))?;
            let heard = sent[flight.0..=flight.1]
                .iter()
                .rfind(|c| began.ack.is_some_and(|a| Seq(a) >= Seq(c.end)))?;
            if let Some(at) = answered_at {
                think.client += (sent[flight.1].ts - at - to_client).max(0.0);
            }
            think.server += (got.ts - heard.ts - to_server).max(0.0);
            think.rounds = think.rounds.saturating_add(1);
            answered_at = Some(got.ts);
            flight = (i, i);
        }
        think.client += (end - answered_at? - to_client).max(0.0);
        Some(think)
    }

    /// QUIC: the server's think time on the client's Initial. The gap from
    /// the client Initial it answers to its first Initial (`rtt`, the QUIC
    /// RTT sample) less the observer's round trip to the server, which the
    /// server's prompt answer to the client's first 1-RTT packet (its
    /// HANDSHAKE_DONE and ACKs: nothing to compute) gives. The client's
    /// think time has no such counterpart: clients acknowledge the server's
    /// Initial together with their Finished, after verifying the
    /// certificate, so no packet shows the round trip to the client alone.
    fn think_quic(&self, rtt: Option<f64>) -> Option<f64> {
        if self.transport != Transport::Quic || self.missing.is_some() {
            return None;
        }
        let to_server = self.late().server_data? - self.late().completed_at?;
        Some((rtt? - to_server).max(0.0))
    }

    /// Round trips the `handshake` field spans: `round_trips`, except that
    /// TLS 1.3 with early data (accepted or of unknown outcome) still waits
    /// one for the client's Finished.
    fn spanned_round_trips(&self) -> Option<u8> {
        if self.is_tls13() && self.state == State::Complete && self.early_data() != EarlyData::None
        {
            let extra =
                u8::from(self.hrr) + u8::from(self.retry) + u8::from(self.version_negotiation);
            return Some(1 + extra);
        }
        self.round_trips()
    }

    /// The record's timing; `rtt` is the transport's round trip (seconds):
    /// TCP's three-way handshake, QUIC's Initial exchange.
    pub fn timing(&self, rtt: Option<f64>, vantage: Vantage) -> Timing {
        let since_start = |t: Option<f64>| match (self.started, t) {
            (Some(s), Some(t)) if t >= s => Some(ms(t - s)),
            _ => None,
        };
        // The server's direction alone shows no client times.
        let shows_client = self.missing != Some(Dir::Client);
        // A split whose turns disagree with the classification's round
        // trips (a capture hole, an unusual stack) is not reported.
        let think = self
            .think_tcp(vantage)
            .filter(|t| Some(t.rounds) == self.spanned_round_trips());
        let client_hello_delay = match (self.transport, vantage.connected, self.started) {
            (Transport::Tcp, Some(c), Some(s)) if shows_client => Some(ms((s - c).max(0.0))),
            _ => None,
        };
        Timing {
            tcp_rtt: rtt.map(ms),
            handshake: since_start(self.handshake_end())
                .filter(|_| shows_client && !self.end_unseen()),
            ttfb: since_start(self.first_server_data()).filter(|_| shows_client),
            round_trips: self.round_trips(),
            avoidable: self
                .avoidable_round_trips()
                .zip(rtt)
                .map(|(n, rtt)| ms(f64::from(n) * rtt)),
            client_hello_delay,
            server_think: think
                .map(|t| t.server)
                .or_else(|| self.think_quic(rtt))
                .map(ms),
            client_think: think.map(|t| ms(t.client)),
            idle_before_use: self
                .first_use()
                .zip(self.handshake_end())
                .map(|(used, end)| ms(used - end))
                .filter(|_| shows_client),
            lifetime: None,
        }
    }

    /// Bytes of handshake records each way (headers included), over TCP:
    /// the records other than application_data before a direction's first
    /// application_data record, so that an alert that follows data (in the
    /// same segment or not) never counts, however the stream was cut into
    /// packets. TLS 1.3's encrypted handshake records are counted up to the
    /// client's Finished (from its EndOfEarlyData, if any: 0-RTT data
    /// before it is not handshake).
    pub fn record_bytes(&self) -> HandshakeBytes {
        let size = |r: &RecordInfo| 5 + u64::from(r.len);
        let before_data = |log: &[RecordInfo]| -> u64 {
            log.iter()
                .take_while(|r| r.content_type != ct::APPLICATION_DATA)
                .map(size)
                .sum()
        };
        let (client, server) = self.records.both();
        let mut client_bytes = before_data(client);
        let mut server_bytes = before_data(server);
        if self.is_tls13() {
            let fin = self.late().completed_by;
            let start = self.client_flight_start;
            // The server's flight: what it sent before it had the client's
            // Finished (without the client's direction: before it
            // acknowledged anything past the hellos).
            let flight_end = match self.missing {
                Some(Dir::Client) => self.server_hello_ack.map(|a| a.wrapping_add(1)),
                _ => fin.map(|f| f.end),
            };
            client_bytes += client
                .iter()
                .filter(is_data)
                .filter(|r| start.is_some_and(|s| Seq(r.seq) >= Seq(s)))
                .filter(|r| fin.is_some_and(|f| Seq(r.seq) <= Seq(f.seq)))
                .map(size)
                .sum::<u64>();
            server_bytes += server
                .iter()
                .filter(is_data)
                .filter(|r| flight_end.is_none_or(|end| !acked(r, end)))
                .map(size)
                .sum::<u64>();
        }
        HandshakeBytes {
            client_handshake: (self.missing != Some(Dir::Client)).then_some(client_bytes),
            server_handshake: (self.missing != Some(Dir::Server)).then_some(server_bytes),
            client_app: None,
            server_app: None,
        }
    }
}
