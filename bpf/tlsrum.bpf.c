// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * tlsrum TC programs: watch TCP (and, optionally, QUIC over UDP) flows on
 * the configured server ports and copy to user space, through a ring
 * buffer, only what the TLS analyzer needs: SYN/FIN/RST and the ACKs of the
 * handshake phase, each direction's TLS records as the record walk below
 * decides (application_data bodies never), QUIC long-header packets and
 * the first bytes of a few short-header ones. Once user space marks a flow
 * done, nothing but FIN/RST leaves the kernel, until a new SYN reopens the
 * tuple.
 *
 * A flow the kernel has no state for and whose SYN it did not see (state
 * evicted from the LRU map by a flood, or a connection older than the
 * agent) is never taken for a new one: its payload-less segments create no
 * state, and each direction is followed only from a hello (or, after the
 * peer's ServerHello, the client's next handshake record: adoptable()),
 * else kept quiet (only FIN/RST headers leave). The byte-budget fallback
 * is for directions followed from their SYN whose records the walk cannot
 * follow (not TLS, a hole in the handshake), never for one that is past
 * its handshake. README, "What leaves the kernel", lists it all.
 *
 * The programs never drop, redirect or change a packet: both always return
 * TC_ACT_UNSPEC (-1). With cls_bpf in direct-action mode that means "no
 * verdict, continue with the next filter", and with TCX (Linux 6.6+) it is
 * TCX_NEXT: the next program of the chain runs. TC_ACT_OK would end the
 * chain and hide the packet from the filters attached after us (cilium and
 * friends), so it is never returned.
 *
 * Needs Linux 5.8 (ring buffer). Helpers used: map lookup/update,
 * bpf_skb_load_bytes, bpf_skb_pull_data, bpf_ktime_get_boot_ns (5.7),
 * bpf_ringbuf_output and bpf_ringbuf_query (5.8). __sk_buff->gso_size needs 5.7.
 *
 * All TLS parsing happens in user space: this file only filters and copies.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "tlsrum.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* ---- settings, written by user space before load (.rodata) ---- */

/* Server ports (host order); the first nports entries are used. */
const volatile __u16 ports[TLSRUM_MAX_PORTS] = { 443 };
const volatile __u32 nports = 1;
/* Any TCP/UDP flow is a candidate: user space decides by content. */
const volatile __u8 all_ports = 0;
/* Also forward QUIC (UDP) on the ports. */
const volatile __u8 quic = 0;
/* Payload bytes forwarded per flow direction at most. */
const volatile __u32 max_payload_per_dir = 65536;
/* Pending ring-buffer bytes from which a record wakes the reader up. */
const volatile __u32 wakeup_bytes = 1 << 19;

/* ---- maps ---- */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	/* Overridden from user space (EbpfOptions::ringbuf_bytes). */
	__uint(max_entries, 8 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct tlsrum_flow_key);
	__type(value, struct tlsrum_flow_state);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TLSRUM_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* Where the record walk of one segment stands. Kept in the per-CPU
 * scratch map, not in registers: the verifier then knows nothing about
 * these values at the top of each step, so every step looks alike to it
 * and it checks the loop in a few passes instead of following every
 * combination of values through all WALK_STEPS steps. */
struct walk {
	__u32	pos;		/* payload offset of the next byte to look at */
	__u32	run;		/* first payload byte not sent yet */
	__u32	len;		/* payload bytes in the segment */
	__u32	data_seq;	/* sequence number of payload byte 0 */
	__u32	events;		/* events sent for the segment */
	__u32	state;		/* enum walk_state */
	__u32	payload_off;	/* where the payload starts in the skb */
	__u32	side;		/* sender's side of the flow key */
	__u32	flags;		/* event flags */
	__u32	closing;	/* the segment has FIN or RST */
	__u32	ack;		/* the segment's acknowledgement number */
	__u32	ack_ok;		/* ... and it has the ACK flag */
	__u32	over;		/* the handshake phase ended in this segment */
};

enum walk_state {
	WALK_GOING = 0,
	WALK_END,	/* segment done */
	WALK_LOST,	/* tracking lost; the bytes from `run` are not sent */
	WALK_CUT,	/* the byte budget cut the segment (and tracking) */
};

/* One record being built: header then payload, handed whole to
 * bpf_ringbuf_output, plus where the segment's payload lies in the skb.
 * Per CPU: TC programs run with bottom halves disabled, so two runs never
 * share it. Too big for the 512-byte stack. */
struct scratch {
	struct walk walk;
	struct tlsrum_flow_state init;
	__u32 payload_off;
	__u32 _pad;
	struct tlsrum_event hdr;
	__u8 data[TLSRUM_CHUNK];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

/* ---- packet parsing (xdp-tutorial parsing_helpers.h style) ---- */

#define VLAN_MAX_DEPTH		2
#define IPV6_EXT_MAX		6
/* Bytes made linear when the headers are not (see handle()). */
#define PULL_LEN		256

#define TCP_FLAG_FIN		0x01
#define TCP_FLAG_SYN		0x02
#define TCP_FLAG_RST		0x04
#define TCP_FLAG_ACK		0x10

#ifndef IPPROTO_HOPOPTS
#define IPPROTO_HOPOPTS		0
#endif
#ifndef IPPROTO_ROUTING
#define IPPROTO_ROUTING		43
#endif
#ifndef IPPROTO_FRAGMENT
#define IPPROTO_FRAGMENT	44
#endif
#ifndef IPPROTO_DSTOPTS
#define IPPROTO_DSTOPTS		60
#endif

struct hdr_cursor {
	void *pos;
};

struct vlan_hdr {
	__be16	h_vlan_TCI;
	__be16	h_vlan_encapsulated_proto;
};

/* linux/ipv6.h has no userspace struct for the fragment header. */
struct frag_hdr {
	__u8	nexthdr;
	__u8	reserved;
	__be16	frag_off;
	__be32	identification;
};

/* AH (RFC 4302): length in 4-byte units minus 2. */
struct auth_hdr {
	__u8	nexthdr;
	__u8	hdrlen;
	__be16	reserved;
};

union addr {
	__u8	b[16];
	__u32	w[4];
	__u64	d[2];
};

/* What the parser found. Offsets are from skb->data (the MAC header in
 * TC), as bpf_skb_load_bytes wants them. */
struct pkt {
	union addr	saddr;
	union addr	daddr;
	__u32		payload_off;
	__u32		payload_len;
	__u32		seq;
	__u32		ack;
	__u16		sport;
	__u16		dport;
	__u8		ip_version;
	__u8		proto;
	__u8		tcp_flags;
	__u8		first_fragment;
};

enum parse_result {
	PARSE_OK = 0,
	PARSE_IGNORE,	/* not IP, not TCP/UDP, non-first fragment */
	PARSE_ERROR,	/* malformed */
	PARSE_SHORT,	/* a header lies past the linear data */
};

static __always_inline void count(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);

	/* Per-CPU value: no other CPU writes it, a plain add is enough. */
	if (v)
		*v += n;
}

static __always_inline int proto_is_vlan(__u16 h_proto)
{
	return h_proto == bpf_htons(ETH_P_8021Q) ||
	       h_proto == bpf_htons(ETH_P_8021AD);
}

/* Ethernet and up to VLAN_MAX_DEPTH 802.1Q/802.1ad tags. Returns the
 * network protocol (network byte order) or -1 if the header is cut. In TC
 * the loopback device has an all-zero Ethernet header with a real type.
 * Tags the driver stripped into skb->vlan_tci are not in the packet. */
static __always_inline int parse_ethhdr(struct hdr_cursor *nh, void *data_end)
{
	struct ethhdr *eth = nh->pos;
	__u16 h_proto;
	int i;

	if ((void *)(eth + 1) > data_end)
		return -1;
	nh->pos = eth + 1;
	h_proto = eth->h_proto;

#pragma unroll
	for (i = 0; i < VLAN_MAX_DEPTH; i++) {
		struct vlan_hdr *vlh = nh->pos;

		if (!proto_is_vlan(h_proto))
			break;
		if ((void *)(vlh + 1) > data_end)
			return -1;
		h_proto = vlh->h_vlan_encapsulated_proto;
		nh->pos = vlh + 1;
	}
	return h_proto;
}

/* IPv4: sets addresses, the L4 protocol and *l3_end (offset of the end of
 * the IP packet: tot_len, or skb->len for BIG TCP's tot_len 0). */
static __always_inline int parse_ipv4(struct hdr_cursor *nh, void *data,
				      void *data_end, struct __sk_buff *skb,
				      struct pkt *p, __u32 *l3_end)
{
	struct iphdr *iph = nh->pos;
	__u32 hdrsize, tot_len, l3_off;
	__u16 frag;

	if ((void *)(iph + 1) > data_end)
		return PARSE_SHORT;
	if (iph->version != 4 || iph->ihl < 5)
		return PARSE_ERROR;
	hdrsize = iph->ihl * 4;
	if (nh->pos + hdrsize > data_end)
		return PARSE_SHORT;

	frag = bpf_ntohs(iph->frag_off);
	if (frag & 0x1fff) {
		/* Not the first fragment: no L4 header to read. */
		count(TLSRUM_CNT_FRAGMENT, 1);
		return PARSE_IGNORE;
	}
	if (frag & 0x2000) {
		count(TLSRUM_CNT_FRAGMENT, 1);
		p->first_fragment = 1;
	}

	l3_off = (void *)iph - data;
	tot_len = bpf_ntohs(iph->tot_len);
	if (tot_len == 0)
		*l3_end = skb->len;
	else if (tot_len < hdrsize)
		return PARSE_ERROR;
	else
		*l3_end = l3_off + tot_len;

	p->ip_version = 4;
	p->proto = iph->protocol;
	p->saddr.w[0] = iph->saddr;
	p->daddr.w[0] = iph->daddr;
	nh->pos += hdrsize;
	return PARSE_OK;
}

/* IPv6 and up to IPV6_EXT_MAX extension headers (hop-by-hop, routing,
 * destination options, fragment, AH). */
static __always_inline int parse_ipv6(struct hdr_cursor *nh, void *data,
				      void *data_end, struct __sk_buff *skb,
				      struct pkt *p, __u32 *l3_end)
{
	struct ipv6hdr *ip6h = nh->pos;
	__u32 plen, l3_off;
	__u8 nexthdr;
	int i;

	if ((void *)(ip6h + 1) > data_end)
		return PARSE_SHORT;
	if (ip6h->version != 6)
		return PARSE_ERROR;

	l3_off = (void *)ip6h - data;
	plen = bpf_ntohs(ip6h->payload_len);
	/* 0: jumbogram or BIG TCP, the skb knows the length. */
	*l3_end = plen ? l3_off + sizeof(*ip6h) + plen : skb->len;

	p->ip_version = 6;
	__builtin_memcpy(p->saddr.b, &ip6h->saddr, 16);
	__builtin_memcpy(p->daddr.b, &ip6h->daddr, 16);
	nexthdr = ip6h->nexthdr;
	nh->pos = ip6h + 1;

#pragma unroll
	for (i = 0; i < IPV6_EXT_MAX; i++) {
		switch (nexthdr) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS: {
			struct ipv6_opt_hdr *oh = nh->pos;
			__u32 len;

			if ((void *)(oh + 1) > data_end)
				return PARSE_SHORT;
			len = ((__u32)oh->hdrlen + 1) * 8;
			if (nh->pos + len > data_end)
				return PARSE_SHORT;
			nexthdr = oh->nexthdr;
			nh->pos += len;
			break;
		}
		case IPPROTO_FRAGMENT: {
			struct frag_hdr *fh = nh->pos;
			__u16 off;

			if ((void *)(fh + 1) > data_end)
				return PARSE_SHORT;
			off = bpf_ntohs(fh->frag_off);
			count(TLSRUM_CNT_FRAGMENT, 1);
			if (off & 0xfff8)
				return PARSE_IGNORE;
			p->first_fragment = 1;
			nexthdr = fh->nexthdr;
			nh->pos = fh + 1;
			break;
		}
		case IPPROTO_AH: {
			struct auth_hdr *ah = nh->pos;
			__u32 len;

			if ((void *)(ah + 1) > data_end)
				return PARSE_SHORT;
			len = ((__u32)ah->hdrlen + 2) * 4;
			if (nh->pos + len > data_end)
				return PARSE_SHORT;
			nexthdr = ah->nexthdr;
			nh->pos += len;
			break;
		}
		default:
			goto out;
		}
	}
out:
	p->proto = nexthdr;
	return PARSE_OK;
}

/* Parses the whole packet into *p. Reads skb->data/data_end itself, so a
 * call after bpf_skb_pull_data sees the new pointers. */
static __always_inline int parse_packet(struct __sk_buff *skb, struct pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct hdr_cursor nh = { .pos = data };
	__u32 l3_end = 0, l4_off, end;
	int h_proto, ret;

	h_proto = parse_ethhdr(&nh, data_end);
	if (h_proto < 0)
		return PARSE_SHORT;
	if (h_proto == bpf_htons(ETH_P_IP))
		ret = parse_ipv4(&nh, data, data_end, skb, p, &l3_end);
	else if (h_proto == bpf_htons(ETH_P_IPV6))
		ret = parse_ipv6(&nh, data, data_end, skb, p, &l3_end);
	else
		return PARSE_IGNORE;
	if (ret != PARSE_OK)
		return ret;

	/* Ethernet padding of short frames is in skb->len, not in l3_end;
	 * a lying IP length is capped by what the skb holds. */
	end = skb->len;
	if (l3_end < end)
		end = l3_end;
	l4_off = nh.pos - data;

	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = nh.pos;
		__u32 hdrsize;

		if ((void *)(th + 1) > data_end)
			return PARSE_SHORT;
		if (th->doff < 5)
			return PARSE_ERROR;
		/* Options are not read: no need for them to be linear. */
		hdrsize = th->doff * 4;
		p->sport = bpf_ntohs(th->source);
		p->dport = bpf_ntohs(th->dest);
		p->seq = bpf_ntohl(th->seq);
		p->ack = bpf_ntohl(th->ack_seq);
		p->tcp_flags = ((__u8 *)th)[13];
		p->payload_off = l4_off + hdrsize;
	} else if (p->proto == IPPROTO_UDP) {
		struct udphdr *uh = nh.pos;

		if ((void *)(uh + 1) > data_end)
			return PARSE_SHORT;
		p->sport = bpf_ntohs(uh->source);
		p->dport = bpf_ntohs(uh->dest);
		p->payload_off = l4_off + sizeof(*uh);
	} else {
		return PARSE_IGNORE;
	}
	if (p->payload_off > end)
		return PARSE_ERROR;
	p->payload_len = end - p->payload_off;
	return PARSE_OK;
}

/* ---- flows ---- */

static __always_inline int port_match(__u16 sport, __u16 dport)
{
	int i;

	if (all_ports)
		return 1;
#pragma unroll
	for (i = 0; i < TLSRUM_MAX_PORTS; i++) {
		if (i >= nports)
			break;
		if (ports[i] == sport || ports[i] == dport)
			return 1;
	}
	return 0;
}

/* Builds the direction-independent key; returns the sender's side (0: the
 * source is side a). The order is documented in tlsrum.h. */
static __always_inline int flow_key(const struct pkt *p,
				    struct tlsrum_flow_key *key)
{
	int src_first;

	if (p->saddr.d[0] != p->daddr.d[0])
		src_first = p->saddr.d[0] < p->daddr.d[0];
	else if (p->saddr.d[1] != p->daddr.d[1])
		src_first = p->saddr.d[1] < p->daddr.d[1];
	else
		src_first = p->sport <= p->dport;

	if (src_first) {
		__builtin_memcpy(key->addr_a, p->saddr.b, 16);
		__builtin_memcpy(key->addr_b, p->daddr.b, 16);
		key->port_a = p->sport;
		key->port_b = p->dport;
	} else {
		__builtin_memcpy(key->addr_a, p->daddr.b, 16);
		__builtin_memcpy(key->addr_b, p->saddr.b, 16);
		key->port_a = p->dport;
		key->port_b = p->sport;
	}
	key->proto = p->proto;
	return src_first ? 0 : 1;
}

/* Creates the state of a flow the lookup did not find. *created tells
 * whether this packet created it (another CPU may have, meanwhile). NULL
 * (counted) if the map refuses. */
static __always_inline struct tlsrum_flow_state *
flow_create(struct tlsrum_flow_key *key, int side, int *created)
{
	struct tlsrum_flow_state *st, *init;
	struct scratch *sc;
	__u32 zero = 0;
	long err;

	/* The new state is built in the scratch map: 120 bytes would crowd
	 * the 512-byte stack. */
	sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!sc)
		return NULL;
	init = &sc->init;
	__builtin_memset(init, 0, sizeof(*init));
	init->initiator = side;
	err = bpf_map_update_elem(&flows, key, init, BPF_NOEXIST);
	if (err == 0) {
		*created = 1;
		count(TLSRUM_CNT_NEW_FLOWS, 1);
	} else if (err != -17 /* EEXIST: another CPU created it */) {
		count(TLSRUM_CNT_FLOW_MAP_ERROR, 1);
		return NULL;
	}
	st = bpf_map_lookup_elem(&flows, key);
	if (!st)
		count(TLSRUM_CNT_FLOW_MAP_ERROR, 1);
	return st;
}

/* ---- events ---- */

/* Waking the reader for a record is an interrupt (a self-IPI, a VM exit
 * in a guest): done per record it cost more than everything else these
 * programs do, about 1.5 us a record. So a record wakes the reader only
 * when it takes the pending bytes across a multiple of wakeup_bytes; below
 * the first, the reader finds the records when its poll times out (user
 * space polls with a timeout, 100 ms in `tlsrum live`). Only the crossing
 * wakes: waking for every record while wakeup_bytes or more were pending
 * cost each record sent before the woken reader had drained below it an
 * interrupt (3.5 us a record in kernel_cost). A crossing two CPUs race
 * past unseen is caught at the next multiple, or by the timeout. `bytes`
 * is the record's size in the ring: its 8-byte header, then the record
 * rounded up to 8 bytes. Writes the record, counted (sent, lost for a
 * full ring, woke the reader); -1 if the ring was full. */
static __always_inline int ring_output(void *data, __u64 size)
{
	__u64 pending = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 bytes = (8 + size + 7) & ~7ULL;
	__u64 flag = BPF_RB_NO_WAKEUP;

	if (pending / wakeup_bytes != (pending + bytes) / wakeup_bytes)
		flag = BPF_RB_FORCE_WAKEUP;
	if (bpf_ringbuf_output(&events, data, size, flag)) {
		count(TLSRUM_CNT_RINGBUF_FULL, 1);
		return -1;
	}
	count(TLSRUM_CNT_EVENTS_SENT, 1);
	if (flag == BPF_RB_FORCE_WAKEUP)
		count(TLSRUM_CNT_WAKEUPS, 1);
	return 0;
}

/* Writes the segment's header fields into the per-CPU scratch record;
 * emit_run() then sends ranges of its payload. NULL if the map refuses.
 * *ts is the packet's timestamp, read from the clock on first use (0 until
 * then): only packets that send something pay for the read, and every
 * event of one packet carries the same time. */
static __always_inline struct scratch *
prepare(struct __sk_buff *skb, const struct pkt *p, __u8 dir, __u64 *ts)
{
	struct tlsrum_event *ev;
	struct scratch *sc;
	__u32 zero = 0;

	sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!sc)
		return NULL;
	sc->payload_off = p->payload_off;
	ev = &sc->hdr;
	if (!*ts)
		*ts = bpf_ktime_get_boot_ns();
	ev->ts_ns = *ts;
	ev->ifindex = skb->ifindex;
	ev->seq = p->seq;
	ev->ack = p->ack;
	ev->payload_len = p->payload_len;
	ev->gso_size = skb->gso_size;
	ev->sport = p->sport;
	ev->dport = p->dport;
	__builtin_memcpy(ev->saddr, p->saddr.b, 16);
	__builtin_memcpy(ev->daddr, p->daddr.b, 16);
	ev->direction = dir;
	ev->ip_version = p->ip_version;
	ev->l4_proto = p->proto;
	ev->tcp_flags = p->tcp_flags;
	ev->_pad[0] = 0;
	ev->_pad[1] = 0;
	ev->_pad[2] = 0;
	ev->fill = 0;
	ev->_pad2 = 0;
	return sc;
}

/*
 * Sends payload bytes [off, off + len) of the segment prepare()d in the
 * scratch record, as records of at most TLSRUM_CHUNK bytes; the last one
 * carries `fill` and, if `flags` has it, TLSRUM_EV_CUT. len 0 sends the
 * header alone (at offset off). Every byte not sent is counted. Returns 0,
 * or -1 if bytes were lost.
 *
 * A global function: the verifier checks it once rather than at each of
 * its call sites, which sit inside the record walk's loop.
 */
__attribute__((noinline)) int emit_run(struct __sk_buff *skb, __u32 off,
					      __u32 len, __u32 fill, __u32 flags)
{
	struct scratch *sc;
	__u32 zero = 0, pos, cut = flags & TLSRUM_EV_CUT;
	int i;

	sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!sc)
		return -1;
	flags &= ~TLSRUM_EV_CUT;

	if (len == 0) {
		sc->hdr.offset = off;
		sc->hdr.len = 0;
		sc->hdr.fill = fill;
		sc->hdr.flags = flags | cut;
		return ring_output(&sc->hdr, sizeof(sc->hdr));
	}

	if (len > TLSRUM_MAX_CHUNKS * TLSRUM_CHUNK) {
		count(TLSRUM_CNT_PAYLOAD_TRUNCATED, 1);
		count(TLSRUM_CNT_BYTES_LOST, len - TLSRUM_MAX_CHUNKS * TLSRUM_CHUNK);
		len = TLSRUM_MAX_CHUNKS * TLSRUM_CHUNK;
		cut = TLSRUM_EV_CUT;
		fill = 0;
	}

	for (i = 0; i < TLSRUM_MAX_CHUNKS; i++) {
		__u64 n;
		int last;

		pos = i * TLSRUM_CHUNK;
		if (pos >= len)
			break;
		n = len - pos;
		if (n > TLSRUM_CHUNK)
			n = TLSRUM_CHUNK;
		/* Helper sizes must be provably in [1, TLSRUM_CHUNK], and
		 * clang would otherwise check a copy of n and pass another
		 * register to the helper: test the very register. */
		barrier_var(n);
		if (n == 0 || n > TLSRUM_CHUNK)
			break;
		last = pos + n >= len;
		sc->hdr.offset = off + pos;
		sc->hdr.len = n;
		sc->hdr.fill = last ? fill : 0;
		sc->hdr.flags = flags | (last ? cut : 0);
		if (bpf_skb_load_bytes(skb, sc->payload_off + off + pos, sc->data, n)) {
			count(TLSRUM_CNT_LOAD_ERROR, 1);
			count(TLSRUM_CNT_BYTES_LOST, len - pos);
			return -1;
		}
		if (ring_output(&sc->hdr, sizeof(sc->hdr) + n)) {
			count(TLSRUM_CNT_BYTES_LOST, len - pos);
			return -1;
		}
		count(TLSRUM_CNT_BYTES_SENT, n);
	}
	return 0;
}

/* The segment's header with its first send_len payload bytes (flagged cut
 * if that is not all of them). */
static __always_inline void emit(struct __sk_buff *skb, const struct pkt *p,
				 __u8 dir, __u32 send_len, __u8 flags)
{
	__u64 ts = 0;

	if (!prepare(skb, p, dir, &ts))
		return;
	if (p->first_fragment || send_len < p->payload_len)
		flags |= TLSRUM_EV_CUT;
	emit_run(skb, 0, send_len, 0, flags);
}

/* Reads the first payload byte (QUIC header form). -1 if unreadable. */
static __always_inline int first_payload_byte(struct __sk_buff *skb,
					       const struct pkt *p)
{
	__u8 b;

	if (bpf_skb_load_bytes(skb, p->payload_off, &b, 1)) {
		count(TLSRUM_CNT_LOAD_ERROR, 1);
		return -1;
	}
	return b;
}

/* ---- TCP: record tracking, the in-kernel cut-off ---- */

/* Record-walk steps per segment (a header, or a run of bytes of a record
 * the analyzer reads). A segment holding more records than this ends the
 * direction's tracking: the byte budget takes over. */
#define WALK_STEPS		32
/* QUIC short-header packets a side may send before the peer's first. */
#define QUIC_SHORT_BEFORE	8
/* Data segments of a quiet direction met without its SYN, or of one under
 * the byte budget, that are checked for a record to resume the walk at
 * (adoptable), as the analyzer looks for a ClientHello in a flow's first
 * 16 segments each way. */
#define QUIET_TRIES		16

static __always_inline int seq_before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

static __always_inline void track_start(struct tlsrum_dir_state *d, __u32 seq)
{
	d->next_rec = seq;
	d->fwd_until = seq;
	d->rcv_end = seq;
	d->plain_end = seq;
	d->hdr = 0;
	d->hdr_have = 0;
	d->records = 0;
	d->after_ccs = 0;
	d->track = TLSRUM_TRACK_ON;
}

/* The record boundaries of a direction are unknown from here. A direction
 * followed from its SYN and still in its plaintext handshake falls back to
 * the byte budget (the analyzer may still read a handshake the walk
 * cannot: a STARTTLS or CONNECT preamble, a hole from reordering before
 * the hook). One past its handshake (an application_data body was filled)
 * goes quiet for good: its bytes are application data. One met without
 * its SYN goes quiet too, and may resume at its next handshake record
 * (see adoptable). */
static __always_inline void track_lose(struct tlsrum_dir_state *d)
{
	if (d->track == TLSRUM_TRACK_ON)
		count(TLSRUM_CNT_UNTRACKED, 1);
	if (d->no_fallback) {
		if (d->track != TLSRUM_TRACK_QUIET)
			count(TLSRUM_CNT_LOST_QUIET, 1);
		d->track = TLSRUM_TRACK_QUIET;
		if (d->no_fallback & TLSRUM_NOFB_APPDATA)
			d->tries = QUIET_TRIES;
	} else {
		d->track = TLSRUM_TRACK_LOST;
	}
	/* Its records are unknown from here: no end of handshake from them. */
	d->post = 3;
}

enum adopt {
	ADOPT_NO = 0,
	ADOPT_HELLO,		/* a ClientHello or ServerHello */
	ADOPT_CLIENT_FLIGHT,	/* the client's flight after the ServerHello */
};

/*
 * Whether record tracking may begin at this segment in a direction whose
 * SYN the kernel did not see (or which lost its walk after starting so):
 * its payload starts with a TLS record header the analyzer's record layer
 * takes (version 3.0-3.4, length up to TLSRUM_MAX_RECORD) and
 * - a handshake record whose first message is a ClientHello (1) or a
 *   ServerHello (2): what starts a TLS stream;
 * - or, once the peer's records are followed from its ServerHello, the
 *   client's next flight: a ChangeCipherSpec (exactly 1 byte, 1), a
 *   plaintext alert (2 bytes, level 1 or 2), or a Certificate (11),
 *   ClientKeyExchange (16) or CertificateVerify (15) message.
 * Nothing else: any other segment may be application data. Ciphertext
 * starts with one of these by chance about once in 10^9 segments, and a
 * direction checks at most QUIET_TRIES + 1 segments.
 */
static __always_inline int adoptable(struct __sk_buff *skb, const struct pkt *p,
				     const struct tlsrum_dir_state *peer)
{
	__u8 b[6];
	__u32 rlen;

	if (p->payload_len < sizeof(b) || p->first_fragment)
		return ADOPT_NO;
	if (bpf_skb_load_bytes(skb, p->payload_off, b, sizeof(b))) {
		count(TLSRUM_CNT_LOAD_ERROR, 1);
		return ADOPT_NO;
	}
	rlen = ((__u32)b[3] << 8) | b[4];
	if (b[1] != 3 || b[2] > 4 || rlen > TLSRUM_MAX_RECORD)
		return ADOPT_NO;
	if (b[0] == 22 && (b[5] == 1 || b[5] == 2))
		return ADOPT_HELLO;
	if (peer->track != TLSRUM_TRACK_ON || peer->hello != 2)
		return ADOPT_NO;
	if ((b[0] == 20 && rlen == 1 && b[5] == 1) ||
	    (b[0] == 21 && rlen == 2 && (b[5] == 1 || b[5] == 2)) ||
	    (b[0] == 22 && (b[5] == 11 || b[5] == 15 || b[5] == 16)))
		return ADOPT_CLIENT_FLIGHT;
	return ADOPT_NO;
}

/*
 * The end of the handshake phase, seen from the kernel: the server sends
 * an application_data record in a segment acknowledging the client's
 * second application_data record sent after the server's handshake
 * records (its first if it has sent one only). The rule, why it never
 * fires before the analyzer's own (Handshake::fully_timed), and the test
 * that ties the two are stated once, in analyzer/src/handshake/timing.rs.
 */
static __always_inline void phase_check(struct walk *w,
					struct tlsrum_dir_state *me,
					struct tlsrum_dir_state *peer,
					__u32 rec_end, int split)
{
	if (me->hello == 1) {
		/* Client: count its records after the server's handshake. */
		if (split) {
			me->post = 3;
		} else if (me->post < 2 && w->ack_ok && peer->hello == 2 &&
			   peer->track == TLSRUM_TRACK_ON &&
			   !seq_before(w->ack, peer->plain_end)) {
			/* Acknowledging the ServerHello and what follows it:
			 * not 0-RTT data, sent before the ServerHello came.
			 * The first such record after the server's own
			 * application_data records is a TLS 1.3 Finished (a
			 * TLS 1.2 server sends none before the client's data,
			 * except a server-first protocol's greeting: a later
			 * cut, never an earlier one). It is not counted, so
			 * that the client's first use after the handshake
			 * (idle_before_use) reaches user space even when the
			 * server's NewSessionTicket comes first. */
			if (me->post == 0 && !me->sent_data && peer->sent_data) {
				me->sent_data = 1;
				return;
			}
			me->post++;
			me->post_end = rec_end;
		}
		return;
	}
	if (me->hello == 2)
		me->sent_data = 1;
	if (me->hello == 2 && peer->hello == 1 && !split && w->ack_ok &&
	    (peer->post == 1 || peer->post == 2) &&
	    peer->track == TLSRUM_TRACK_ON &&
	    !seq_before(w->ack, peer->post_end))
		w->over = 1;
}

/* Sends payload bytes [off, off + len) then `fill` zeros, within the
 * direction's byte budget. Returns 1 if the budget cut it (the rest of
 * the segment is not sent), else 0. */
static __always_inline int send_range(struct __sk_buff *skb,
				      struct tlsrum_flow_state *st, int side,
				      __u32 off, __u32 len, __u32 fill,
				      __u8 flags)
{
	__u32 budget = max_payload_per_dir, room;
	__u64 sent = st->bytes[side & 1];
	int cut = 0;

	room = sent >= budget ? 0 : budget - (__u32)sent;
	if (len > room) {
		count(TLSRUM_CNT_BUDGET, 1);
		len = room;
		fill = 0;
		flags |= TLSRUM_EV_CUT;
		cut = 1;
	}
	if (len)
		__sync_fetch_and_add(&st->bytes[side & 1], len);
	if (fill)
		count(TLSRUM_CNT_FILLED, fill);
	emit_run(skb, off, len, fill, flags);
	return cut;
}

/* One step: a record header, or the bytes of a record the analyzer reads
 * up to the next header. Returns 1 when the walk is over. */
static __always_inline int walk_step(struct __sk_buff *skb, struct walk *w,
				     struct tlsrum_flow_state *st)
{
	__u32 side = w->side & 1;
	struct tlsrum_dir_state *me = &st->dir[side];
	struct tlsrum_dir_state *peer = &st->dir[side ^ 1];
	__u32 pos = w->pos, len = w->len, run = w->run;
	__u32 rec = me->next_rec - w->data_seq;
	__u32 have, type, major, rlen, fill;
	__u64 raw = 0, h, n;

	if (pos >= len) {
		w->state = WALK_END;
		return 1;
	}
	if (me->hdr_have == 0 && pos != rec) {
		/* Inside a record the analyzer reads: sent as is. */
		if (rec < pos) {
			w->state = WALK_LOST;
			return 1;
		}
		w->pos = rec < len ? rec : len;
		return 0;
	}
	/* At a record header, or inside one split across segments: read
	 * what is missing of its 5 bytes (all in one load, no byte loop). */
	have = me->hdr_have;
	n = 5 - have;
	if (n > len - pos)
		n = len - pos;
	/* Test the very register passed to the helper (see emit_run). */
	barrier_var(n);
	if (n < 1 || n > 5) {
		w->state = WALK_LOST;
		return 1;
	}
	if (bpf_skb_load_bytes(skb, w->payload_off + pos, &raw, n)) {
		count(TLSRUM_CNT_LOAD_ERROR, 1);
		w->state = WALK_LOST;
		return 1;
	}
	/* The n bytes as a big-endian number, after the bytes kept before. */
	h = (me->hdr << (8 * n)) | (bpf_be64_to_cpu(raw) >> (64 - 8 * n));
	pos += n;
	if (have + n < 5) {
		/* The header goes on in the next segment. */
		me->hdr = h;
		me->hdr_have = have + n;
		w->pos = pos;
		w->state = WALK_END;
		return 1;
	}
	me->hdr = 0;
	me->hdr_have = 0;
	type = (h >> 32) & 0xff;
	major = (h >> 24) & 0xff;
	rlen = h & 0xffff;
	/* What the analyzer's record layer accepts (SSLv2 records, with
	 * another header, included out). */
	if (type < 20 || type > 24 || major != 3 || rlen > TLSRUM_MAX_RECORD) {
		w->state = WALK_LOST;
		return 1;
	}
	if (me->records == 0 && type == 22 && pos < len) {
		/* Which side says ClientHello (for phase_check). */
		__u8 msg = 0;

		if (bpf_skb_load_bytes(skb, w->payload_off + pos, &msg, 1) == 0)
			me->hello = msg;
	}
	me->records++;
	me->next_rec = me->next_rec + 5 + rlen;
	if (type == 23)
		phase_check(w, me, peer, me->next_rec, have > 0);
	if ((type == 23 || type == 24) && (!me->after_ccs || me->hello == 1)) {
		/* Encrypted: the header goes, the body is filled. A FIN or
		 * RST ends the stream: no fill past the segment then. The
		 * client's record after its ChangeCipherSpec too (its TLS 1.3
		 * Finished, or its first 0-RTT record: early application
		 * data): the analyzer reads only its length, and no key log
		 * opens it; user space still counts it as read (its ACK). */
		if (me->after_ccs) {
			me->after_ccs = 0;
			me->plain_end = me->next_rec;
		}
		fill = rlen;
		if (w->closing && pos + fill > len)
			fill = len - pos;
		/* Past its handshake (or in its early data): from here a lost
		 * walk means quiet, never the byte budget. */
		me->no_fallback |= TLSRUM_NOFB_APPDATA;
		w->events++;
		if (send_range(skb, st, side, run, pos - run, fill, w->flags)) {
			w->state = WALK_CUT;
			return 1;
		}
		w->pos = pos + rlen;
		w->run = pos + rlen;
		return 0;
	}
	/* Read by the analyzer: a ChangeCipherSpec marks the next record (a
	 * Finished, encrypted or not) as read too. */
	me->after_ccs = type == 20;
	me->plain_end = me->next_rec;
	w->pos = pos;
	return 0;
}

/*
 * Walks the TLS records in the segment's new bytes (from me->fwd_until)
 * and sends what the analyzer reads: every byte of handshake, alert and
 * ChangeCipherSpec records and of the record after a ChangeCipherSpec,
 * and each application_data record's 5-byte header, whose body user space
 * fills with zeros (tlsrum.h). So after the handshake a direction costs
 * one small event per record header, and segments holding only record
 * bodies stay in the kernel. Returns the number of events sent, or -1
 * when tracking was lost before the segment's end (the rest not sent:
 * the caller falls back to the byte budget).
 */
__attribute__((noinline)) int walk_records(struct __sk_buff *skb,
					  struct tlsrum_flow_state *st)
{
	struct tlsrum_dir_state *me;
	__u32 zero = 0, pos, run, len, events, side, data_seq;
	struct scratch *sc;
	struct walk *w;
	int i;

	/* A global function, checked once by the verifier in a context of
	 * unknown values, so the loop is not followed again for each way
	 * the main program reaches it. Its inputs are in the scratch map,
	 * and the flow's state is the caller's: to the verifier a pointer to
	 * 120 bytes that may be NULL (global functions take those since
	 * Linux 5.6), which spares every segment sent a second hash lookup
	 * of its flow. */
	if (!st)
		return -1;
	sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!sc)
		return -1;
	w = &sc->walk;
	side = w->side & 1;
	me = &st->dir[side];
	data_seq = w->data_seq;
	w->pos = me->fwd_until - data_seq;
	w->run = w->pos;
	w->events = 0;
	w->state = WALK_GOING;
	w->over = 0;
	for (i = 0; i < WALK_STEPS; i++) {
		if (walk_step(skb, w, st))
			break;
	}
	pos = w->pos;
	run = w->run;
	len = w->len;
	events = w->events;
	if (w->over && !st->done) {
		/* After this segment's events: see phase_check. */
		st->done = 1;
		count(TLSRUM_CNT_HANDSHAKE_OVER, 1);
	}
	if (w->state == WALK_CUT) {
		track_lose(me);
		return events;
	}
	if (w->state == WALK_GOING && pos < len)
		w->state = WALK_LOST;	/* more records than steps */
	if (w->state == WALK_LOST) {
		track_lose(me);
		me->fwd_until = data_seq + run;
		return -1;
	}
	if (run < len && run < pos) {
		__u32 end = pos < len ? pos : len;

		events++;
		if (send_range(skb, st, side, run, end - run, 0, w->flags)) {
			track_lose(me);
			return events;
		}
	}
	me->fwd_until = data_seq + pos;
	return events;
}

/* Hands walk_records its inputs. */
static __always_inline int walk_segment(struct __sk_buff *skb,
					const struct pkt *p,
					struct tlsrum_flow_state *st, int side,
					__u32 data_seq, __u8 flags)
{
	__u32 zero = 0;
	struct scratch *sc;
	struct walk *w;

	sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!sc)
		return -1;
	w = &sc->walk;
	w->len = p->payload_len;
	w->data_seq = data_seq;
	w->payload_off = p->payload_off;
	w->side = side & 1;
	w->flags = flags;
	w->closing = !!(p->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST));
	w->ack = p->ack;
	w->ack_ok = !!(p->tcp_flags & TCP_FLAG_ACK);
	return walk_records(skb, st);
}

/* A data segment of a quiet direction: its payload stays in the kernel; a
 * FIN or RST goes as a header (flagged cut: the payload is missing). */
static __always_inline void quiet_segment(struct __sk_buff *skb,
					  const struct pkt *p, __u8 dir, __u8 flags)
{
	if (p->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) {
		emit(skb, p, dir, 0, flags | TLSRUM_EV_DONE);
		return;
	}
	count(TLSRUM_CNT_QUIET_SEGMENTS, 1);
}

/* Whether a segment with nothing new to send still matters for its ACK:
 * the analyzer reads acknowledgements of the records it reads (the TCP
 * handshake's ACK, a client acknowledging the server's Finished). */
static __always_inline int ack_wanted(struct tlsrum_flow_state *st, int side,
				      __u32 ack)
{
	struct tlsrum_dir_state *me = &st->dir[side & 1];
	struct tlsrum_dir_state *peer = &st->dir[(side & 1) ^ 1];

	/* Nothing of a quiet peer goes: nor do ACKs of its bytes. */
	if (peer->track == TLSRUM_TRACK_QUIET)
		return 0;
	/* An ACK past what user space has of the peer's stream tells the
	 * analyzer of bytes the hook never saw (capture loss): it goes too. */
	if (peer->track == TLSRUM_TRACK_ON)
		return !me->ack_valid || seq_before(me->acked, peer->plain_end) ||
		       seq_before(peer->fwd_until, ack);
	/* Untracked peer: while its bytes are still forwarded. */
	return st->bytes[(side & 1) ^ 1] < max_payload_per_dir;
}

static __always_inline void handle_tcp(struct __sk_buff *skb, const struct pkt *p,
				       struct tlsrum_flow_state *st, int side,
				       __u8 dir, __u8 flags)
{
	struct tlsrum_dir_state *me = &st->dir[side & 1];
	struct tlsrum_dir_state *peer = &st->dir[(side & 1) ^ 1];
	__u8 tf = p->tcp_flags;
	__u32 data_seq = p->seq + ((tf & TCP_FLAG_SYN) ? 1 : 0);
	__u32 len = p->payload_len;
	__u64 ts = 0;
	int events = 0, tracked, resent = 0;

	/* The stream starts after the SYN: its records can be followed. A
	 * retransmitted SYN, or a new one before any data, starts again. */
	if ((tf & TCP_FLAG_SYN) &&
	    (me->track == TLSRUM_TRACK_NONE ||
	     (me->records == 0 && me->hdr_have == 0 && me->fwd_until == me->next_rec &&
	      me->fwd_until == me->plain_end)))
		track_start(me, data_seq);

	/* A hole (reordering, loss before the hook): the record boundaries
	 * are unknown from here. Checked before the walk so that a direction
	 * met without its SYN may resume at this very segment (below). */
	if (len && me->track == TLSRUM_TRACK_ON && seq_before(me->fwd_until, data_seq))
		track_lose(me);

	/* Payload in a direction whose SYN the kernel never saw: the flow's
	 * state was evicted from the map (or the connection is older than
	 * the agent, or its SYN went by unseen). Its records can be followed
	 * only from where adoptable() says; any other byte may be application
	 * data, so the direction stays quiet, and its next few data segments
	 * are checked again. Neither ever falls back to the byte budget.
	 * A direction under the byte budget (a STARTTLS, CONNECT or PROXY
	 * preamble) resumes its walk the same way: from its hello on, its
	 * application data stays in the kernel. */
	if (len && (me->track == TLSRUM_TRACK_NONE ||
		    ((me->track == TLSRUM_TRACK_QUIET || me->track == TLSRUM_TRACK_LOST) &&
		     me->tries < QUIET_TRIES))) {
		int how = adoptable(skb, p, peer);
		__u8 was = me->track;

		if (was == TLSRUM_TRACK_NONE)
			me->no_fallback |= TLSRUM_NOFB_MIDSTREAM;
		else
			me->tries++;
		if (how != ADOPT_NO) {
			track_start(me, data_seq);
			if (how == ADOPT_CLIENT_FLIGHT)
				me->hello = 1;
			count(was == TLSRUM_TRACK_LOST ? TLSRUM_CNT_LOST_RESUMED :
			      TLSRUM_CNT_MIDSTREAM_ADOPTED, 1);
		} else if (was == TLSRUM_TRACK_NONE) {
			me->track = TLSRUM_TRACK_QUIET;
			count(TLSRUM_CNT_MIDSTREAM_QUIET, 1);
		}
	}
	if (me->track == TLSRUM_TRACK_QUIET) {
		/* Both directions quiet: nothing of the flow but FIN/RST is
		 * wanted, which the done path (no state writes) does. */
		if (peer->track == TLSRUM_TRACK_QUIET && !st->done)
			st->done = 1;
		if (len) {
			quiet_segment(skb, p, dir, flags);
			return;
		}
	}

	tracked = me->track == TLSRUM_TRACK_ON;
	if (len && tracked && !p->first_fragment) {
		/* Bytes received before come again: a retransmission, which
		 * the analyzer's think-time split must know of (the copy the
		 * peer answered is unknown). Without holes (tracked) the bytes
		 * received so far end at rcv_end. */
		resent = seq_before(data_seq, me->rcv_end);
		if (seq_before(me->rcv_end, data_seq + len))
			me->rcv_end = data_seq + len;
		if (!seq_before(me->fwd_until, data_seq + len)) {
			/* Nothing new: sent or filled before. */
			events = 0;
		} else {
			if (!prepare(skb, p, dir, &ts))
				return;
			/* Starting before what was received: a retransmission
			 * that carries new bytes too (TLSRUM_EV_SEEN). */
			events = walk_segment(skb, p, st, side, data_seq,
					      flags | (resent ? TLSRUM_EV_SEEN : 0));
		}
	} else if (len && tracked) {
		track_lose(me);
	}

	/* Tracking lost in this segment where no fallback may apply, before
	 * any of its new bytes went out. */
	if (me->track == TLSRUM_TRACK_QUIET && len && events <= 0) {
		quiet_segment(skb, p, dir, flags);
		return;
	}
	/* Byte-budget fallback: tracking lost (now or before) in a direction
	 * followed from its SYN, before any of this segment's new bytes went
	 * out. */
	if (me->track == TLSRUM_TRACK_LOST && len && (!tracked || events <= 0)) {
		/* Byte budget: the segment from the first byte not yet sent. */
		__u32 budget = max_payload_per_dir, room, off = 0, send_len;
		__u64 sent = st->bytes[side & 1];

		if (events < 0)
			off = me->fwd_until - data_seq;
		if (off > len)
			off = len;
		room = sent >= budget ? 0 : budget - (__u32)sent;
		send_len = len - off < room ? len - off : room;
		if (send_len < len - off)
			count(TLSRUM_CNT_BUDGET, 1);
		if (send_len || (tf & (TCP_FLAG_SYN | TCP_FLAG_FIN | TCP_FLAG_RST))) {
			if (send_len) {
				__sync_fetch_and_add(&st->bytes[side & 1], send_len);
				count(TLSRUM_CNT_FALLBACK_SEGMENTS, 1);
				count(TLSRUM_CNT_FALLBACK_BYTES, send_len);
			}
			if (!prepare(skb, p, dir, &ts))
				return;
			if (p->first_fragment || off + send_len < len)
				flags |= TLSRUM_EV_CUT;
			emit_run(skb, off, send_len, 0, flags);
			events = 1;
		} else {
			/* Data past the budget: stays in the kernel. */
			return;
		}
	}

	if (events <= 0) {
		/* Nothing new to send: a flag or a wanted ACK still goes, and so
		 * does a retransmission in a direction whose records are followed
		 * (the analyzer's think-time split must know a flight was sent
		 * twice; bounded like the records themselves). */
		if (!(tf & (TCP_FLAG_SYN | TCP_FLAG_FIN | TCP_FLAG_RST)) &&
		    !((tf & TCP_FLAG_ACK) && ack_wanted(st, side, p->ack)) &&
		    !resent) {
			if (len)
				count(TLSRUM_CNT_OPAQUE, 1);
			return;
		}
		if (!prepare(skb, p, dir, &ts))
			return;
		emit_run(skb, len, 0, 0, flags | (resent ? TLSRUM_EV_SEEN : 0));
	}

	if (tf & TCP_FLAG_ACK) {
		if (!me->ack_valid || seq_before(me->acked, p->ack))
			me->acked = p->ack;
		me->ack_valid = 1;
	}
	if (me->records > TLSRUM_RECORDS_PER_DIR && !st->done) {
		/* The analyzer has finished this connection by now. */
		st->done = 1;
		count(TLSRUM_CNT_RECORD_LIMIT, 1);
	}
}

/*
 * The end of a TCP connection: each side's FIN is noted with the ack
 * number that acknowledges it; a segment from a side that sent its FIN
 * before, acknowledging the peer's, is the connection's last, and its
 * state is deleted (after the segment was handled). So the map holds open
 * connections only: a closed one no longer waits for the LRU to evict it
 * (evicting the least recently used, possibly an idle open connection),
 * and a new flow takes a recently freed entry, still in the cache, not the
 * coldest. A RST ends it too once the peer has sent its FIN (a server's
 * answer to a client's FIN, often): the peer sends no more data. A RST
 * before that deletes nothing: the peer may still send data it had in
 * flight, which would then look like a flow met mid-stream. A FIN or RST
 * that comes later goes as a header, as for any flow without state;
 * nothing else of it is wanted. Returns 1 when the state is to be deleted.
 */
static __always_inline int flow_closed(const struct pkt *p,
				       struct tlsrum_flow_state *st, int side)
{
	struct tlsrum_dir_state *me = &st->dir[side & 1];
	struct tlsrum_dir_state *peer = &st->dir[(side & 1) ^ 1];
	__u8 tf = p->tcp_flags, fin_before = me->fin;

	if ((tf & TCP_FLAG_FIN) && !me->fin) {
		me->fin = 1;
		me->fin_ack = p->seq + ((tf & TCP_FLAG_SYN) ? 1 : 0) + p->payload_len + 1;
	}
	if ((tf & TCP_FLAG_RST) && peer->fin)
		return 1;
	return fin_before && peer->fin && (tf & TCP_FLAG_ACK) && p->ack == peer->fin_ack;
}

/*
 * A packet of a flow the kernel has no state for: whether it may create
 * state. A SYN, a TCP segment with payload (handle_tcp decides what of a
 * flow first seen mid-stream may leave) and a QUIC long-header packet
 * may. A payload-less TCP segment (the ACK, FIN or RST of a flow evicted
 * from the map, or older than the agent) and a QUIC short-header packet
 * (1-RTT, of a connection whose start the kernel did not see) may not:
 * nothing of them is wanted, and creating state for them would let such
 * traffic evict live flows. A FIN or RST still goes, as a header: user
 * space may be following the flow still.
 */
static __always_inline int flow_wanted(struct __sk_buff *skb,
				       const struct pkt *p, __u8 dir)
{
	int b;

	if (p->proto == IPPROTO_TCP) {
		if ((p->tcp_flags & TCP_FLAG_SYN) || p->payload_len)
			return 1;
		count(TLSRUM_CNT_UNKNOWN_FLOW_EMPTY, 1);
		if (p->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST))
			emit(skb, p, dir, 0, 0);
		return 0;
	}
	if (p->payload_len == 0)
		return 0;
	b = first_payload_byte(skb, p);
	if (b < 0)
		return 0;
	if (b & 0x80)
		return 1;
	count(TLSRUM_CNT_QUIC_SHORT_UNKNOWN, 1);
	return 0;
}

static __always_inline void handle(struct __sk_buff *skb, __u8 dir)
{
	struct tlsrum_flow_state *st;
	struct tlsrum_flow_key key = {};
	struct pkt p = {};
	__u32 send_len, room, keep, budget = max_payload_per_dir;
	__u64 sent;
	__u8 flags = 0;
	int ret, side, created = 0, b;

	ret = parse_packet(skb, &p);
	if (ret == PARSE_SHORT && skb->len > skb->data_end - skb->data) {
		/* Headers in paged data (some drivers, tunnels). Make the
		 * first PULL_LEN bytes linear and parse again: the helper
		 * invalidates all packet pointers, parse_packet reloads them.
		 * This does not change the packet's bytes. */
		__u32 len = skb->len < PULL_LEN ? skb->len : PULL_LEN;

		count(TLSRUM_CNT_PULLED, 1);
		__builtin_memset(&p, 0, sizeof(p));
		if (bpf_skb_pull_data(skb, len) == 0)
			ret = parse_packet(skb, &p);
	}
	if (ret == PARSE_IGNORE)
		return;
	if (ret != PARSE_OK) {
		count(TLSRUM_CNT_PARSE_ERROR, 1);
		return;
	}

	if (p.proto == IPPROTO_UDP && !quic)
		return;
	if (!port_match(p.sport, p.dport))
		return;

	side = flow_key(&p, &key);
	st = bpf_map_lookup_elem(&flows, &key);
	if (!st) {
		if (!flow_wanted(skb, &p, dir))
			return;
		st = flow_create(&key, side, &created);
		if (!st)
			return;
		if (created && p.proto == IPPROTO_TCP && !(p.tcp_flags & TCP_FLAG_SYN))
			count(TLSRUM_CNT_MIDSTREAM_FLOWS, 1);
	}
	if (created)
		flags |= TLSRUM_EV_NEW_FLOW;
	/* A SYN without ACK on a known tuple opens a new connection (a client
	 * reusing its port, a capture replayed twice): forget the old one's
	 * done mark, byte budget and FINs, or the new handshake would never leave
	 * the kernel. A retransmitted SYN finds nothing to reset. */
	if (!created && p.proto == IPPROTO_TCP &&
	    (p.tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN &&
	    (st->done || st->bytes[0] || st->bytes[1] ||
	     st->dir[0].no_fallback || st->dir[1].no_fallback ||
	     st->dir[0].fin || st->dir[1].fin)) {
		__builtin_memset(st->dir, 0, sizeof(st->dir));
		st->done = 0;
		st->bytes[0] = 0;
		st->bytes[1] = 0;
		st->quic_short[0] = 0;
		st->quic_short[1] = 0;
		st->quic_after = 0;
		st->initiator = side;
		flags |= TLSRUM_EV_NEW_FLOW;
		count(TLSRUM_CNT_NEW_FLOWS, 1);
	}
	if (p.proto == IPPROTO_TCP) {
		/* The bulk of a connection ends at the done mark: no write to
		 * the flow's state but a FIN's (the two directions run on
		 * different CPUs and would bounce its cache line). */
		if (!st->done)
			handle_tcp(skb, &p, st, side & 1, dir, flags);
		else if (p.tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST))
			emit(skb, &p, dir, 0, flags | TLSRUM_EV_DONE);
		else
			count(TLSRUM_CNT_DONE, 1);
		if (flow_closed(&p, st, side) &&
		    bpf_map_delete_elem(&flows, &key) == 0)
			count(TLSRUM_CNT_CLOSED, 1);
		return;
	}
	if (st->done) {
		count(TLSRUM_CNT_DONE, 1);
		return;
	}

	/* QUIC: long-header packets up to the byte budget, and the header of
	 * the first short-header packet each way. */
	if (p.payload_len == 0)
		return;
	b = first_payload_byte(skb, &p);
	if (b < 0)
		return;
	keep = p.payload_len;
	if (!(b & 0x80)) {
		/* Short header (1-RTT). The analyzer times the client's first
		 * and the server's first after it; a server may send some
		 * before the client's first (0.5-RTT data), so up to
		 * QUIC_SHORT_BEFORE go while the peer has sent none, then the
		 * first one after the peer's first. */
		__u8 mine = st->quic_short[side & 1];
		__u8 bit = 1 << (side & 1);

		if (st->quic_short[(side & 1) ^ 1] == 0) {
			if (mine >= QUIC_SHORT_BEFORE)
				return;
		} else if (st->quic_after & bit) {
			return;
		} else {
			st->quic_after |= bit;
		}
		if (mine < 255)
			st->quic_short[side & 1] = mine + 1;
		/* The analyzer reads its time and Destination Connection ID;
		 * the rest is 1-RTT ciphertext (application data). */
		if (keep > TLSRUM_QUIC_SHORT_KEEP) {
			keep = TLSRUM_QUIC_SHORT_KEEP;
			count(TLSRUM_CNT_QUIC_SHORT_CUT, 1);
		}
	}
	sent = st->bytes[side & 1];
	room = sent >= budget ? 0 : budget - (__u32)sent;
	send_len = keep < room ? keep : room;
	if (send_len < keep)
		count(TLSRUM_CNT_BUDGET, 1);
	if (send_len == 0)
		return;
	__sync_fetch_and_add(&st->bytes[side & 1], send_len);
	emit(skb, &p, dir, send_len, flags);
}

SEC("classifier")
int tlsrum_ingress(struct __sk_buff *skb)
{
	handle(skb, TLSRUM_DIR_INGRESS);
	return TC_ACT_UNSPEC;
}

SEC("classifier")
int tlsrum_egress(struct __sk_buff *skb)
{
	handle(skb, TLSRUM_DIR_EGRESS);
	return TC_ACT_UNSPEC;
}
