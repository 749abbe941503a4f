//! Kernel events become analyzer packets: a chunk of a big segment
//! continues its sequence numbers, a GSO batch of UDP datagrams is split,
//! and an application_data body the kernel kept comes back as zeros.

use analyzer::wire::{Packet, TcpHeader, Transport};

use super::abi::{EventHeader, EV_CUT, EV_SEEN, MAX_FILL};

/// One ring-buffer record.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    /// Wall-clock time of the packet at the hook, seconds since the epoch.
    pub ts: f64,
    pub header: &'a EventHeader,
    /// `header.len` bytes starting at `header.offset` in the segment.
    pub payload: &'a [u8],
}

impl<'a> Event<'a> {
    /// The event as a packet for the analyzer. A chunk after the first of a
    /// big segment starts at `seq + offset` (plus one if the segment carries
    /// SYN, which takes a sequence number before the data) and does not
    /// repeat SYN; FIN and RST, which come after the data, are kept on the
    /// segment's last chunk only. `truncated` says that bytes of the segment
    /// after this event's never left the kernel (byte budget, done flow,
    /// chunk limit, ring buffer full: see the counters).
    ///
    /// UDP events are whole datagrams unless the kernel handed over a GSO
    /// batch (`gso_size` set): see [`Event::datagrams`].
    pub fn to_packet(self) -> Packet<'a> {
        let h = self.header;
        let transport = if h.l4_proto == 6 {
            let syn = h.tcp_flags & 0x02 != 0;
            let first = h.offset == 0;
            let last = h.is_last_chunk();
            let seq = if first {
                h.seq
            } else {
                h.seq.wrapping_add(h.offset).wrapping_add(u32::from(syn))
            };
            Transport::Tcp(TcpHeader {
                src_port: h.sport,
                dst_port: h.dport,
                seq,
                ack: h.ack,
                syn: syn && first,
                ack_flag: h.tcp_flags & 0x10 != 0,
                // With a fill, FIN and RST go on the fill's packet.
                fin: h.tcp_flags & 0x01 != 0 && last && h.fill == 0,
                rst: h.tcp_flags & 0x04 != 0 && last && h.fill == 0,
            })
        } else {
            Transport::Udp {
                src_port: h.sport,
                dst_port: h.dport,
            }
        };
        Packet {
            src: h.src(),
            dst: h.dst(),
            transport,
            payload: self.payload,
            truncated: h.flags & EV_CUT != 0,
            // TCP: bytes of the segment reached user space before (a
            // retransmission; the kernel forwards each byte once).
            seen_before: h.l4_proto == 6 && h.flags & EV_SEEN != 0,
        }
    }

    /// The zeros standing for an application_data body the kernel kept
    /// (`fill`), as a segment right after this event's bytes; None without
    /// a fill. It carries the segment's ACK, and its FIN or RST if the
    /// event is the segment's last.
    pub fn fill_packet(self) -> Option<Packet<'static>> {
        static ZEROS: [u8; MAX_FILL] = [0; MAX_FILL];
        let h = self.header;
        if h.fill == 0 || h.l4_proto != 6 {
            return None;
        }
        let syn = h.tcp_flags & 0x02 != 0;
        let at = h.offset.wrapping_add(h.len);
        let seq = if at == 0 {
            h.seq
        } else {
            h.seq.wrapping_add(at).wrapping_add(u32::from(syn))
        };
        let last = h.is_last_chunk();
        Some(Packet {
            src: h.src(),
            dst: h.dst(),
            transport: Transport::Tcp(TcpHeader {
                src_port: h.sport,
                dst_port: h.dport,
                seq,
                ack: h.ack,
                syn: syn && at == 0,
                ack_flag: h.tcp_flags & 0x10 != 0,
                fin: h.tcp_flags & 0x01 != 0 && last,
                rst: h.tcp_flags & 0x04 != 0 && last,
            }),
            payload: &ZEROS[..(h.fill as usize).min(MAX_FILL)],
            truncated: false,
            seen_before: false,
        })
    }

    /// The packets of this event for the analyzer. UDP: its datagrams. A GSO
    /// batch (egress, `gso_size` set) holds datagrams of `gso_size` bytes
    /// back to back (the last may be shorter); one that straddles the
    /// boundary between two events is returned in pieces marked truncated.
    /// TCP: the one packet, then the fill's (see [`Event::fill_packet`]).
    pub fn datagrams(self) -> Datagrams<'a> {
        let h = *self.header;
        let gso = h.gso_size as usize;
        let fill = self.fill_packet();
        Datagrams {
            base: self.to_packet(),
            h,
            split: h.l4_proto == 17 && gso > 0 && (h.payload_len as usize) > gso,
            pos: 0,
            // A fill after no bytes: the fill's packet alone.
            base_done: h.len == 0 && fill.is_some(),
            fill,
        }
    }
}

/// Iterator returned by [`Event::datagrams`].
pub struct Datagrams<'a> {
    base: Packet<'a>,
    h: EventHeader,
    split: bool,
    pos: usize,
    base_done: bool,
    fill: Option<Packet<'static>>,
}

impl<'a> Iterator for Datagrams<'a> {
    type Item = Packet<'a>;

    fn next(&mut self) -> Option<Packet<'a>> {
        if !self.split {
            if !self.base_done {
                self.base_done = true;
                return Some(self.base);
            }
            return self.fill.take();
        }
        let (h, payload, gso) = (&self.h, self.base.payload, self.h.gso_size as usize);
        if self.pos >= payload.len() {
            return None;
        }
        // Datagram boundaries are at multiples of gso_size in the segment.
        let seg_pos = h.offset as usize + self.pos;
        let dgram_start = seg_pos - seg_pos % gso;
        let dgram_end = (dgram_start + gso).min(h.payload_len as usize);
        let end_here = dgram_end
            .saturating_sub(h.offset as usize)
            .min(payload.len());
        if end_here <= self.pos {
            // Bytes past the segment's declared length (an inconsistent
            // event): the rest goes as one piece marked truncated, and the
            // iterator ends (it used to yield empty pieces forever).
            let piece = &payload[self.pos..];
            self.pos = payload.len();
            return Some(Packet {
                payload: piece,
                truncated: true,
                ..self.base
            });
        }
        let piece = &payload[self.pos..end_here];
        let whole = dgram_start == seg_pos && h.offset as usize + end_here == dgram_end;
        self.pos = end_here;
        Some(Packet {
            payload: piece,
            truncated: !whole || (self.base.truncated && self.pos >= payload.len()),
            ..self.base
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ebpf::abi::tests::header;
    use crate::ebpf::abi::EV_SEEN;
    use std::net::IpAddr;

    #[test]
    fn a_fill_follows_the_header_and_takes_the_fin() {
        let mut h = header(0, 0x11, 1000, 1448, 100, 5);
        h.fill = 16401;
        let bytes = [23u8, 3, 3, 0x40, 0x11];
        let ev = Event {
            ts: 1.0,
            header: &h,
            payload: &bytes,
        };
        let got: Vec<Packet<'_>> = ev.datagrams().collect();
        assert_eq!(got.len(), 2);
        let tcp = |p: &Packet<'_>| match p.transport {
            Transport::Tcp(t) => t,
            _ => panic!("not TCP"),
        };
        assert_eq!(got[0].payload, &bytes);
        assert_eq!(tcp(&got[0]).seq, 1100);
        assert!(!tcp(&got[0]).fin);
        assert_eq!(got[1].payload.len(), 16401);
        assert!(got[1].payload.iter().all(|&b| b == 0));
        assert_eq!(tcp(&got[1]).seq, 1105);
        assert_eq!(tcp(&got[1]).ack, 7);
        assert!(tcp(&got[1]).fin);
        assert!(!got[0].truncated && !got[1].truncated);

        assert!(!got[0].seen_before && !got[1].seen_before);

        // A header-only event for a segment already delivered (a
        // retransmission): one empty packet, not truncated, after the
        // segment's bytes, that says so.
        let mut h = header(EV_SEEN, 0x10, 5000, 1448, 1448, 0);
        h.fill = 0;
        let ev = Event {
            ts: 1.0,
            header: &h,
            payload: &[],
        };
        let got: Vec<Packet<'_>> = ev.datagrams().collect();
        assert_eq!(got.len(), 1);
        assert!(got[0].payload.is_empty() && !got[0].truncated);
        assert!(got[0].seen_before);
        assert_eq!(tcp(&got[0]).seq, 6448);
    }

    #[test]
    fn chunks_of_a_big_segment_continue_the_sequence() {
        // SYN+data split in two: the second chunk starts after the SYN's
        // sequence number and does not repeat SYN; FIN only at the end.
        let first = header(0, 0x02 | 0x01, 1000, 20000, 0, 16384);
        let second = header(0, 0x02 | 0x01, 1000, 20000, 16384, 3616);
        let data = [0u8; 16384];
        let p1 = Event {
            ts: 0.0,
            header: &first,
            payload: &data,
        }
        .to_packet();
        let p2 = Event {
            ts: 0.0,
            header: &second,
            payload: &data[..3616],
        }
        .to_packet();
        let (Transport::Tcp(t1), Transport::Tcp(t2)) = (p1.transport, p2.transport) else {
            panic!("tcp")
        };
        assert_eq!((t1.seq, t1.syn, t1.fin), (1000, true, false));
        assert_eq!((t2.seq, t2.syn, t2.fin), (1000 + 16384 + 1, false, true));
        assert_eq!(p1.src, "192.0.2.2".parse::<IpAddr>().unwrap());
        assert!(!p1.truncated && !p2.truncated);

        // Without SYN, seq + offset, wrapping.
        let h = header(EV_CUT, 0x10, u32::MAX - 10, 40000, 16384, 100);
        let p = Event {
            ts: 0.0,
            header: &h,
            payload: &data[..100],
        }
        .to_packet();
        let Transport::Tcp(t) = p.transport else {
            panic!("tcp")
        };
        assert_eq!(t.seq, (u32::MAX - 10).wrapping_add(16384));
        assert!(p.truncated);
    }

    #[test]
    fn gso_udp_batches_split_into_datagrams() {
        let mut h = header(0, 0, 0, 2500, 0, 2500);
        h.l4_proto = 17;
        h.gso_size = 1200;
        let data: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        let ev = Event {
            ts: 0.0,
            header: &h,
            payload: &data,
        };
        let d: Vec<_> = ev.datagrams().collect();
        assert_eq!(
            d.iter().map(|p| p.payload.len()).collect::<Vec<_>>(),
            vec![1200, 1200, 100]
        );
        assert!(d.iter().all(|p| !p.truncated));
        assert_eq!(d[1].payload[0], 1200u32 as u8);
        // Straddling the chunk boundary: the pieces are marked truncated.
        let mut h2 = h;
        h2.payload_len = 40000;
        h2.offset = 16384;
        h2.len = 2000;
        let ev = Event {
            ts: 0.0,
            header: &h2,
            payload: &data[..2000],
        };
        let d: Vec<_> = ev.datagrams().collect();
        assert_eq!(
            d.iter().map(|p| p.payload.len()).collect::<Vec<_>>(),
            vec![416, 1200, 384]
        );
        assert_eq!(
            d.iter().map(|p| p.truncated).collect::<Vec<_>>(),
            vec![true, false, true]
        );
    }

    /// Regression (fuzz ebpf_event, gso-bytes-past-payload-len-loop): bytes
    /// past the segment's declared length made the iterator yield empty
    /// pieces forever; an offset past it underflowed.
    #[test]
    fn gso_bytes_past_the_declared_length_end_the_datagrams() {
        let data = [7u8; 3000];
        for (payload_len, offset) in [(1000, 0), (1000, 2000), (0, 5)] {
            let mut h = header(0, 0, 0, 2500, offset, 3000);
            h.l4_proto = 17;
            h.gso_size = 800;
            h.payload_len = payload_len;
            let ev = Event {
                ts: 0.0,
                header: &h,
                payload: &data,
            };
            let d: Vec<_> = ev.datagrams().take(100).collect();
            assert!(d.len() < 100, "{payload_len} {offset}: endless");
            assert_eq!(
                d.iter().map(|p| p.payload.len()).sum::<usize>(),
                3000,
                "every byte once"
            );
        }
    }
}
