/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Structures shared by the TC programs in tlsrum.bpf.c and user space
 * (agent/src/ebpf/abi.rs mirrors every one of them with #[repr(C)] and a test
 * that checks sizes and offsets). All layouts are fixed: explicit padding,
 * no implicit holes, sizes a multiple of 8. Multi-byte fields are in host
 * byte order unless the comment says otherwise.
 */
#ifndef TLSRUM_H
#define TLSRUM_H

#include <linux/types.h>

/* Payload bytes carried by one ring-buffer event at most. */
#define TLSRUM_CHUNK		16384
/* Events per segment at most: 16 * 16 KiB = 256 KiB covers GSO/GRO packets
 * (64 KiB) and most BIG TCP ones; anything beyond is counted, never silent. */
#define TLSRUM_MAX_CHUNKS	16
/* Server ports the filter can hold. */
#define TLSRUM_MAX_PORTS	8
/* Records the analyzer keeps per direction (analyzer::caps::MAX_RECORDS_PER_DIR):
 * one more and it finishes the connection, so the kernel stops a flow once
 * a direction has sent this many + 1 record headers. */
#define TLSRUM_RECORDS_PER_DIR	48
/* Largest TLS record body (2^14 + 2048, as the analyzer's record layer). */
#define TLSRUM_MAX_RECORD	18432
/* Bytes of a QUIC short-header (1-RTT) packet sent to user space: the
 * first byte and the longest Destination Connection ID (RFC 9000 §17.3),
 * all the analyzer reads of it; the encrypted rest stays in the kernel. */
#define TLSRUM_QUIC_SHORT_KEEP	21

/* tlsrum_event.direction */
enum tlsrum_direction {
	TLSRUM_DIR_INGRESS	= 0,
	TLSRUM_DIR_EGRESS	= 1,
};

/* tlsrum_event.flags */
enum tlsrum_event_flag {
	/* Bytes of this segment after offset + len are in no event (byte
	 * budget, chunk limit, ring buffer full, IP fragment, load error). */
	TLSRUM_EV_CUT		= 1 << 0,
	/* The flow is marked done, or the sender's direction is quiet: a
	 * FIN/RST forwarded without payload. */
	TLSRUM_EV_DONE		= 1 << 1,
	/* First packet of the flow seen by the kernel (state created). */
	TLSRUM_EV_NEW_FLOW	= 1 << 2,
	/* The segment starts with bytes received before (a retransmission),
	 * which user space already has: nothing is missing. Set only while
	 * the sender's records are followed. */
	TLSRUM_EV_SEEN		= 1 << 3,
};

/* tlsrum_dir_state.track */
enum tlsrum_track {
	TLSRUM_TRACK_NONE	= 0,	/* no SYN and no payload seen yet */
	TLSRUM_TRACK_ON		= 1,	/* record boundaries known */
	TLSRUM_TRACK_LOST	= 2,	/* given up (gap, not TLS): byte budget */
	TLSRUM_TRACK_QUIET	= 3,	/* nothing of its payload leaves the kernel */
};

/* tlsrum_dir_state.no_fallback, bits */
enum tlsrum_no_fallback {
	/* Met without its SYN (state evicted, or older than the agent). */
	TLSRUM_NOFB_MIDSTREAM	= 1 << 0,
	/* An application_data body filled: past its handshake. */
	TLSRUM_NOFB_APPDATA	= 1 << 1,
};

/*
 * One ring-buffer record: this header, then `len` payload bytes.
 *
 * ts_ns is bpf_ktime_get_boot_ns() (CLOCK_BOOTTIME, available since 5.7 and
 * counting suspend); user space adds (CLOCK_REALTIME - CLOCK_BOOTTIME) to get
 * wall time. Addresses are in network byte order; IPv4 addresses fill the
 * first 4 bytes and the other 12 are zero. Ports, seq and ack are in host
 * byte order.
 *
 * A segment whose payload is larger than TLSRUM_CHUNK is sent as several
 * records with the same header fields except offset/len: the bytes of a
 * record start at TCP sequence number seq + offset.
 *
 * `fill` zero bytes follow the record's `len` bytes in the stream: the body
 * of an application_data record whose header this record carries. The
 * kernel never sends those bodies (they are encrypted and the analyzer only
 * needs their length); user space feeds zeros in their place, so the
 * analyzer's byte stream stays whole. A fill may reach past the segment:
 * the later segments holding the rest of the body are not sent at all.
 */
struct tlsrum_event {
	__u64	ts_ns;		/*  0 */
	__u32	ifindex;	/*  8 */
	__u32	seq;		/* 12 TCP sequence number (0 for UDP) */
	__u32	ack;		/* 16 TCP acknowledgment number (0 for UDP) */
	__u32	payload_len;	/* 20 L4 payload bytes of the whole segment */
	__u32	offset;		/* 24 where this record's bytes start in it */
	__u32	len;		/* 28 payload bytes following this header */
	__u32	gso_size;	/* 32 skb gso_size (0: not a GSO/GRO packet) */
	__u16	sport;		/* 36 */
	__u16	dport;		/* 38 */
	__u8	saddr[16];	/* 40 */
	__u8	daddr[16];	/* 56 */
	__u8	direction;	/* 72 enum tlsrum_direction */
	__u8	ip_version;	/* 73 4 or 6 */
	__u8	l4_proto;	/* 74 IPPROTO_TCP or IPPROTO_UDP */
	__u8	tcp_flags;	/* 75 TCP header byte 13: FIN 0x01 SYN 0x02 RST 0x04 PSH 0x08 ACK 0x10 */
	__u8	flags;		/* 76 enum tlsrum_event_flag */
	__u8	_pad[3];	/* 77 */
	__u32	fill;		/* 80 zero bytes that follow this record's bytes */
	__u32	_pad2;		/* 84 */
};				/* 88 */

/*
 * Flow key, the same for both directions: side "a" is the (address, port)
 * that sorts first. The order compares the address as two native-endian
 * u64 words (bytes 0..8, then 8..16), then the port; user space builds keys
 * for mark_done the same way.
 */
struct tlsrum_flow_key {
	__u8	addr_a[16];	/*  0 */
	__u8	addr_b[16];	/* 16 */
	__u16	port_a;		/* 32 */
	__u16	port_b;		/* 34 */
	__u8	proto;		/* 36 */
	__u8	_pad[3];	/* 37 */
};				/* 40 */

/*
 * TLS record tracking of one TCP direction (the in-kernel cut-off).
 * Sequence numbers are the sender's. Everything before fwd_until has
 * reached user space, as bytes or as fill; it is always at a record
 * boundary or inside a record the analyzer reads, never inside an
 * application_data body.
 */
struct tlsrum_dir_state {
	__u32	next_rec;	/*  0 seq of the next record header */
	__u32	fwd_until;	/*  4 user space has every byte before this */
	__u32	plain_end;	/*  8 end of the last record the analyzer reads */
	__u32	acked;		/* 12 highest ack forwarded from this side */
	__u64	hdr;		/* 16 bytes of a header split across segments */
	__u16	records;	/* 24 record headers seen */
	__u8	track;		/* 26 enum tlsrum_track */
	__u8	hdr_have;	/* 27 how many bytes hdr holds (0-4) */
	__u8	after_ccs;	/* 28 the next record follows a ChangeCipherSpec */
	__u8	ack_valid;	/* 29 acked holds a value */
	__u8	hello;		/* 30 type of the first handshake message: 1 ClientHello, 2 ServerHello */
	__u8	post;		/* 31 client: application_data records sent after the server's handshake (0-2; 3: not counted) */
	__u32	post_end;	/* 32 client: end of the last of those */
	__u8	no_fallback;	/* 36 enum tlsrum_no_fallback: why losing the walk
				 *    makes it quiet, never the byte budget */
	__u8	tries;		/* 37 quiet or lost: data segments checked for a record to resume at */
	__u8	sent_data;	/* 38 server: it sent an application_data record;
				 *    client: its first one after the server's
				 *    handshake came after one of the server's
				 *    (TLS 1.3: it was its Finished, not data) */
	__u8	fin;		/* 39 it sent a FIN */
	__u32	rcv_end;	/* 40 tracked: end of the bytes received (fwd_until
				 *    runs ahead over filled bodies): a segment
				 *    starting before it is a retransmission */
	__u32	fin_ack;	/* 44 with fin: the ack number acknowledging its FIN */
};				/* 48 */

/* Per-flow state. Index 0 of the arrays is side a of the key (sender). */
struct tlsrum_flow_state {
	__u64	bytes[2];	/*  0 payload bytes forwarded per sender */
	__u32	done;		/* 16 set to 1 by user space: forward only FIN/RST */
	__u8	initiator;	/* 20 side of the first packet seen (0 = a, 1 = b) */
	__u8	quic_short[2];	/* 21 QUIC: short-header packets forwarded per sender */
	__u8	quic_after;	/* 23 QUIC: bit per sender, its first short header after the peer's went */
	struct tlsrum_dir_state dir[2];	/* 24 TCP record tracking per sender */
};				/* 120 */

/* Index in the per-CPU `counters` array. Names in agent/src/ebpf/abi.rs. */
enum tlsrum_counter {
	TLSRUM_CNT_EVENTS_SENT = 0,	/* records written to the ring buffer */
	TLSRUM_CNT_BYTES_SENT,		/* payload bytes in those records */
	TLSRUM_CNT_RINGBUF_FULL,	/* records lost: ring buffer full */
	TLSRUM_CNT_PAYLOAD_TRUNCATED,	/* segments over TLSRUM_MAX_CHUNKS chunks */
	TLSRUM_CNT_BYTES_LOST,		/* wanted payload bytes lost (ring buffer, chunks, load) */
	TLSRUM_CNT_BUDGET,		/* segments cut by max_payload_per_dir */
	TLSRUM_CNT_DONE,		/* packets of done flows not forwarded */
	TLSRUM_CNT_PARSE_ERROR,		/* IP/TCP/UDP headers malformed or cut */
	TLSRUM_CNT_FRAGMENT,		/* IP fragments (non-first ones are skipped) */
	TLSRUM_CNT_LOAD_ERROR,		/* bpf_skb_load_bytes failed */
	TLSRUM_CNT_FLOW_MAP_ERROR,	/* flow state could not be created */
	TLSRUM_CNT_NEW_FLOWS,		/* flow states created */
	TLSRUM_CNT_PULLED,		/* headers not linear: bpf_skb_pull_data */
	TLSRUM_CNT_OPAQUE,		/* segments kept in the kernel: application data */
	TLSRUM_CNT_FILLED,		/* application_data body bytes user space fills */
	TLSRUM_CNT_UNTRACKED,		/* directions whose record tracking was given up */
	TLSRUM_CNT_RECORD_LIMIT,	/* flows stopped after TLSRUM_RECORDS_PER_DIR records */
	TLSRUM_CNT_HANDSHAKE_OVER,	/* flows stopped once the analyzer had all it reads */
	TLSRUM_CNT_UNKNOWN_FLOW_EMPTY,	/* payload-less non-SYN segments of flows without state: none created */
	TLSRUM_CNT_MIDSTREAM_FLOWS,	/* flow states created by a data segment without SYN */
	TLSRUM_CNT_MIDSTREAM_ADOPTED,	/* directions without SYN whose tracking began at a hello */
	TLSRUM_CNT_MIDSTREAM_QUIET,	/* directions without SYN kept quiet (no hello first) */
	TLSRUM_CNT_LOST_QUIET,		/* directions that lost tracking where no fallback may apply: quiet */
	TLSRUM_CNT_QUIET_SEGMENTS,	/* data segments of quiet directions kept in the kernel */
	TLSRUM_CNT_FALLBACK_SEGMENTS,	/* segments sent (in part) under the byte-budget fallback */
	TLSRUM_CNT_FALLBACK_BYTES,	/* payload bytes sent under the byte-budget fallback */
	TLSRUM_CNT_QUIC_SHORT_UNKNOWN,	/* QUIC short-header packets of flows without state: none created */
	TLSRUM_CNT_QUIC_SHORT_CUT,	/* QUIC short-header packets sent as their header only */
	TLSRUM_CNT_LOST_RESUMED,	/* directions under the byte budget that resumed their walk at a hello */
	TLSRUM_CNT_WAKEUPS,		/* records that woke the reader (see ring_output) */
	TLSRUM_CNT_CLOSED,		/* flow states deleted: the connection closed (see flow_closed) */
	TLSRUM_CNT_MAX,
};

/* The layouts above are a contract with agent/src/ebpf/abi.rs, whose tests
 * assert the same numbers with std::mem::offset_of!. */
#define TLSRUM_ASSERT_OFFSET(type, field, off) \
	_Static_assert(__builtin_offsetof(struct type, field) == (off), \
		       #type "." #field " moved")
TLSRUM_ASSERT_OFFSET(tlsrum_event, ifindex, 8);
TLSRUM_ASSERT_OFFSET(tlsrum_event, seq, 12);
TLSRUM_ASSERT_OFFSET(tlsrum_event, ack, 16);
TLSRUM_ASSERT_OFFSET(tlsrum_event, payload_len, 20);
TLSRUM_ASSERT_OFFSET(tlsrum_event, offset, 24);
TLSRUM_ASSERT_OFFSET(tlsrum_event, len, 28);
TLSRUM_ASSERT_OFFSET(tlsrum_event, gso_size, 32);
TLSRUM_ASSERT_OFFSET(tlsrum_event, sport, 36);
TLSRUM_ASSERT_OFFSET(tlsrum_event, dport, 38);
TLSRUM_ASSERT_OFFSET(tlsrum_event, saddr, 40);
TLSRUM_ASSERT_OFFSET(tlsrum_event, daddr, 56);
TLSRUM_ASSERT_OFFSET(tlsrum_event, direction, 72);
TLSRUM_ASSERT_OFFSET(tlsrum_event, ip_version, 73);
TLSRUM_ASSERT_OFFSET(tlsrum_event, l4_proto, 74);
TLSRUM_ASSERT_OFFSET(tlsrum_event, tcp_flags, 75);
TLSRUM_ASSERT_OFFSET(tlsrum_event, flags, 76);
TLSRUM_ASSERT_OFFSET(tlsrum_event, fill, 80);
_Static_assert(sizeof(struct tlsrum_event) == 88, "tlsrum_event size");
TLSRUM_ASSERT_OFFSET(tlsrum_flow_key, addr_b, 16);
TLSRUM_ASSERT_OFFSET(tlsrum_flow_key, port_a, 32);
TLSRUM_ASSERT_OFFSET(tlsrum_flow_key, port_b, 34);
TLSRUM_ASSERT_OFFSET(tlsrum_flow_key, proto, 36);
_Static_assert(sizeof(struct tlsrum_flow_key) == 40, "tlsrum_flow_key size");
TLSRUM_ASSERT_OFFSET(tlsrum_flow_state, done, 16);
TLSRUM_ASSERT_OFFSET(tlsrum_flow_state, initiator, 20);
TLSRUM_ASSERT_OFFSET(tlsrum_flow_state, quic_short, 21);
TLSRUM_ASSERT_OFFSET(tlsrum_flow_state, dir, 24);
_Static_assert(sizeof(struct tlsrum_flow_state) == 120, "tlsrum_flow_state size");
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, fwd_until, 4);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, plain_end, 8);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, acked, 12);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, hdr, 16);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, records, 24);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, track, 26);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, hdr_have, 27);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, after_ccs, 28);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, ack_valid, 29);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, hello, 30);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, post, 31);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, post_end, 32);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, no_fallback, 36);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, tries, 37);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, fin, 39);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, rcv_end, 40);
TLSRUM_ASSERT_OFFSET(tlsrum_dir_state, fin_ack, 44);
_Static_assert(sizeof(struct tlsrum_dir_state) == 48, "tlsrum_dir_state size");
_Static_assert(TLSRUM_CNT_MAX == 31, "counter names in ebpf/abi.rs");

#endif /* TLSRUM_H */
