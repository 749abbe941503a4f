/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * thinkshim: an LD_PRELOAD shim that holds a chosen outgoing write of a
 * real TLS/QUIC peer for a configured time, so that the peer "thinks" for a
 * known extra span (agent/tests/think_time.rs, scripts/experiment/thinktime.py).
 *
 *   THINKSHIM_HOLD="N:MS[,N:MS...]"  hold the Nth payload write (1-based) on
 *                                    each connection for MS milliseconds
 *   THINKSHIM_NODELAY=1              set TCP_NODELAY on each TCP connection
 *                                    before its first write (see below)
 *   THINKSHIM_LOG=FILE               append one line per payload write:
 *                                    "W pid fd n len held_ms t_before t_after
 *                                    local_port peer_port head" (times in
 *                                    CLOCK_REALTIME seconds, the clock
 *                                    capture timestamps use; head = the
 *                                    first 6 bytes in hex: record type,
 *                                    version, length, message type), one
 *                                    per read that returned bytes
 *                                    "R pid fd 0 len 0 t t local_port
 *                                    peer_port -", and one per connect()
 *                                    that returned 0 "C pid fd 0 0 0 t t
 *                                    local_port peer_port -": the program's
 *                                    own time around each write. Every line
 *                                    ends with the thread's time spent
 *                                    runnable but waiting for a CPU
 *                                    (/proc/thread-self/schedstat, ms) at
 *                                    the event, and for W also before the
 *                                    hold: on a busy machine a peer woken by
 *                                    its input may wait for a CPU, which
 *                                    the wire shows as think time. A W
 *                                    line then ends with the bytes already
 *                                    received and not yet read on a TCP
 *                                    socket at the write (-1 otherwise):
 *                                    the reads after the write that return
 *                                    them finish the input it answered
 *                                    (a HelloRetryRequest's trailing
 *                                    ChangeCipherSpec), they are no input
 *                                    to the next write; and with the time
 *                                    the real call returned (the bytes are
 *                                    on the wire by then: a peer delayed
 *                                    between its hold and the call, say
 *                                    by the hypervisor, which no
 *                                    run-queue count shows, is slow by its
 *                                    own clock, not by the lab's). The W
 *                                    line is written once the call returns
 *
 * A "connection" is a TCP socket (counted from its creation by socket(),
 * accept() or accept4() until close()), or, for an unconnected UDP socket
 * (a QUIC server answering many clients through one socket), a socket and
 * destination address pair given to sendto()/sendmsg(). Only AF_INET and
 * AF_INET6 sockets count: log files, pipes and nginx's AF_UNIX channels are
 * passed through untouched, as are empty writes.
 *
 * The peers this is used with write each handshake flight in one call
 * (OpenSSL buffers a flight in its buffering BIO; GnuTLS and aioquic are
 * checked by the log above, which thinktime.py keeps): write 1 of a client
 * is its ClientHello, write 1 of a server its first flight (ServerHello ..,
 * or HelloRetryRequest), write 2 of a client its second flight (TLS 1.2:
 * ClientKeyExchange .. Finished; TLS 1.3: Finished), write 3 after a
 * HelloRetryRequest. The hold is a sleep before the real call, so the bytes
 * leave the host that much later: exactly what a slow peer looks like on
 * the wire.
 *
 * THINKSHIM_NODELAY is for peers that split a flight into several writes
 * and leave Nagle's algorithm on (gnutls-cli and gnutls-serv: a TLS 1.3
 * ServerHello+CCS, then the encrypted rest; a client's CCS, then its
 * Finished). The kernel then holds the second write until the first is
 * acknowledged: a round trip, plus the peer's delayed-ACK timer when the
 * peer has nothing to send. That wait is real on the wire, but it is TCP's
 * and scales with the RTT, so it is no program think time to measure.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_FD 4096
#define MAX_HOLDS 8
#define MAX_DESTS 1024

static unsigned counts[MAX_FD];
static struct {
	int n;
	double ms;
} holds[MAX_HOLDS];
static int nholds;
static int nodelay;
static FILE *logf;
/* A write's log line, finished with the real call's return time ("" when
 * none waits). */
static __thread char pending[256];

/* Unconnected UDP: counts per (fd, destination). */
static struct {
	int fd;
	socklen_t len;
	struct sockaddr_storage addr;
	unsigned count;
} dests[MAX_DESTS];
static int ndests;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_send)(int, const void *, size_t, int);
static ssize_t (*real_sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
static ssize_t (*real_sendmsg)(int, const struct msghdr *, int);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static int (*real_close)(int);
static int (*real_socket)(int, int, int);
static int (*real_accept)(int, struct sockaddr *, socklen_t *);
static int (*real_accept4)(int, struct sockaddr *, socklen_t *, int);
static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_recv)(int, void *, size_t, int);
static ssize_t (*real_recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
static ssize_t (*real_recvmsg)(int, struct msghdr *, int);
static ssize_t (*real_readv)(int, const struct iovec *, int);
static int (*real_connect)(int, const struct sockaddr *, socklen_t);

static void resolve(void)
{
	if (real_write)
		return;
	real_write = dlsym(RTLD_NEXT, "write");
	real_send = dlsym(RTLD_NEXT, "send");
	real_sendto = dlsym(RTLD_NEXT, "sendto");
	real_sendmsg = dlsym(RTLD_NEXT, "sendmsg");
	real_writev = dlsym(RTLD_NEXT, "writev");
	real_close = dlsym(RTLD_NEXT, "close");
	real_socket = dlsym(RTLD_NEXT, "socket");
	real_accept = dlsym(RTLD_NEXT, "accept");
	real_accept4 = dlsym(RTLD_NEXT, "accept4");
	real_read = dlsym(RTLD_NEXT, "read");
	real_recv = dlsym(RTLD_NEXT, "recv");
	real_recvfrom = dlsym(RTLD_NEXT, "recvfrom");
	real_recvmsg = dlsym(RTLD_NEXT, "recvmsg");
	real_readv = dlsym(RTLD_NEXT, "readv");
	real_connect = dlsym(RTLD_NEXT, "connect");
}

__attribute__((constructor)) static void init(void)
{
	resolve();
	/* Sleep to the microsecond: the default 50 µs slack would show up in
	 * every held write. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	const char *h = getenv("THINKSHIM_HOLD");
	while (h && *h && nholds < MAX_HOLDS) {
		char *end;
		long n = strtol(h, &end, 10);
		if (*end != ':')
			break;
		double ms = strtod(end + 1, &end);
		holds[nholds].n = (int)n;
		holds[nholds].ms = ms;
		nholds++;
		h = *end == ',' ? end + 1 : end;
	}
	const char *nd = getenv("THINKSHIM_NODELAY");
	nodelay = nd && *nd == '1';
	const char *l = getenv("THINKSHIM_LOG");
	if (l && *l) {
		logf = fopen(l, "a");
		if (logf)
			setvbuf(logf, NULL, _IOLBF, 0);
	}
}

static int inet_socket(int fd)
{
	struct stat st;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
		return 0;
	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return 0;
	return ss.ss_family == AF_INET || ss.ss_family == AF_INET6;
}

static double now_real(void);

/* Run-queue wait of the calling thread so far (ms), or -1. */
static double run_delay(void)
{
	static int fd = -1;
	static pid_t tid;
	char buf[128];
	pid_t me = (pid_t)syscall(SYS_gettid);
	if (fd < 0 || tid != me) { /* a fork (nginx's worker) or another thread */
		if (fd >= 0)
			real_close(fd);
		fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
		tid = me;
	}
	if (fd < 0)
		return -1;
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	unsigned long long run, wait;
	if (sscanf(buf, "%llu %llu", &run, &wait) != 2)
		return -1;
	return wait / 1e6;
}

static int port_of(const struct sockaddr *sa)
{
	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

static void log_write(int fd, unsigned n, size_t len, double held, double t0, double rq0,
		      const void *head, size_t headlen, const struct sockaddr *to)
{
	struct sockaddr_storage me, peer;
	socklen_t ml = sizeof(me), pl = sizeof(peer);
	int lport = getsockname(fd, (struct sockaddr *)&me, &ml) == 0 ? port_of((struct sockaddr *)&me) : 0;
	int pport = to ? port_of(to)
		       : getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 ? port_of((struct sockaddr *)&peer) : 0;
	char hex[13] = "";
	const unsigned char *b = head;
	for (size_t i = 0; b && i < headlen && i < 6; i++)
		snprintf(hex + 2 * i, 3, "%02x", b[i]);
	double rq = run_delay();
	char line[sizeof(pending)];
	char *out = n ? pending : line;
	int used = snprintf(out, sizeof(pending), "%c %d %d %u %zu %.3f %.6f %.6f %d %d %s %.3f %.3f",
			    n ? 'W' : (len ? 'R' : 'C'), (int)getpid(), fd, n, len, held, t0,
			    n ? now_real() : t0, lport, pport, hex[0] ? hex : "-", n || !len ? rq0 : rq, rq);
	if (!n) {
		fprintf(logf, "%s\n", line);
		return;
	}
	int queued = -1, type = 0;
	socklen_t tl = sizeof(type);
	if (to || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM ||
	    ioctl(fd, FIONREAD, &queued) != 0)
		queued = -1;
	if (used > 0 && (size_t)used < sizeof(pending))
		snprintf(pending + used, sizeof(pending) - used, " %d", queued);
}

/* After a payload write's real call: its line, with the time it returned. */
static void after_write(void)
{
	if (!pending[0])
		return;
	int saved = errno;
	fprintf(logf, "%s %.6f\n", pending, now_real());
	pending[0] = 0;
	errno = saved;
}

static double now_real(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned *counter(int fd, const struct sockaddr *to, socklen_t tolen)
{
	if (to && tolen > 0 && tolen <= sizeof(struct sockaddr_storage)) {
		for (int i = 0; i < ndests; i++)
			if (dests[i].fd == fd && dests[i].len == tolen &&
			    memcmp(&dests[i].addr, to, tolen) == 0)
				return &dests[i].count;
		if (ndests == MAX_DESTS)
			return NULL;
		dests[ndests].fd = fd;
		dests[ndests].len = tolen;
		memset(&dests[ndests].addr, 0, sizeof(dests[ndests].addr));
		memcpy(&dests[ndests].addr, to, tolen);
		dests[ndests].count = 0;
		return &dests[ndests++].count;
	}
	return fd >= 0 && fd < MAX_FD ? &counts[fd] : NULL;
}

/* Before a payload write: count it, and sleep if it is one to hold. */
static void before(int fd, const void *head, size_t headlen, size_t len, const struct sockaddr *to,
		   socklen_t tolen)
{
	if (len == 0 || (nholds == 0 && !logf && !nodelay) || !inet_socket(fd))
		return;
	unsigned *c = counter(fd, to, tolen);
	if (!c)
		return;
	unsigned n = ++*c;
	if (nodelay && n == 1 && !to) {
		int one = 1, type = 0;
		socklen_t tl = sizeof(type);
		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM)
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	double held = 0;
	for (int i = 0; i < nholds; i++)
		if ((unsigned)holds[i].n == n)
			held = holds[i].ms;
	int saved = errno;
	double t0 = now_real();
	double rq0 = logf ? run_delay() : 0;
	if (held > 0) {
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		long long ns = until.tv_nsec + (long long)(held * 1e6);
		until.tv_sec += ns / 1000000000LL;
		until.tv_nsec = ns % 1000000000LL;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
			;
	}
	if (logf)
		log_write(fd, n, len, held, t0, rq0, head, headlen, to);
	errno = saved;
}

static void forget(int fd)
{
	if (fd >= 0 && fd < MAX_FD)
		counts[fd] = 0;
	for (int i = 0; i < ndests; i++)
		if (dests[i].fd == fd)
			dests[i--] = dests[--ndests];
}

ssize_t write(int fd, const void *buf, size_t n)
{
	resolve();
	before(fd, buf, n, n, NULL, 0);
	ssize_t r = real_write(fd, buf, n);
	after_write();
	return r;
}

ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	resolve();
	before(fd, buf, n, n, NULL, 0);
	ssize_t r = real_send(fd, buf, n, flags);
	after_write();
	return r;
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *to, socklen_t tolen)
{
	resolve();
	before(fd, buf, n, n, to, tolen);
	ssize_t r = real_sendto(fd, buf, n, flags, to, tolen);
	after_write();
	return r;
}

static size_t iov_len(const struct iovec *iov, int cnt)
{
	size_t n = 0;
	for (int i = 0; iov && i < cnt; i++)
		n += iov[i].iov_len;
	return n;
}

/* The first non-empty buffer, for the log's head bytes. */
static const void *first_iov(const struct iovec *iov, int cnt, size_t *len)
{
	for (int i = 0; iov && i < cnt; i++)
		if (iov[i].iov_len) {
			*len = iov[i].iov_len;
			return iov[i].iov_base;
		}
	*len = 0;
	return NULL;
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	size_t hl;
	resolve();
	if (msg) {
		const void *h = first_iov(msg->msg_iov, (int)msg->msg_iovlen, &hl);
		before(fd, h, hl, iov_len(msg->msg_iov, (int)msg->msg_iovlen), msg->msg_name,
		       msg->msg_namelen);
	}
	ssize_t r = real_sendmsg(fd, msg, flags);
	after_write();
	return r;
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	size_t hl;
	resolve();
	const void *h = first_iov(iov, cnt, &hl);
	before(fd, h, hl, iov_len(iov, cnt), NULL, 0);
	ssize_t r = real_writev(fd, iov, cnt);
	after_write();
	return r;
}

int close(int fd)
{
	resolve();
	forget(fd);
	return real_close(fd);
}

int socket(int domain, int type, int proto)
{
	resolve();
	int fd = real_socket(domain, type, proto);
	forget(fd);
	return fd;
}

int accept(int s, struct sockaddr *a, socklen_t *l)
{
	resolve();
	int fd = real_accept(s, a, l);
	forget(fd);
	return fd;
}

int accept4(int s, struct sockaddr *a, socklen_t *l, int flags)
{
	resolve();
	int fd = real_accept4(s, a, l, flags);
	forget(fd);
	return fd;
}

/* Reads and connects are only logged (THINKSHIM_LOG): when the program had
 * its input, to tell its own time around a held write. */
static void after_read(int fd, ssize_t got, const struct sockaddr *from)
{
	if (!logf || got <= 0 || !inet_socket(fd))
		return;
	int saved = errno;
	log_write(fd, 0, (size_t)got, 0, now_real(), 0, NULL, 0, from);
	errno = saved;
}

ssize_t read(int fd, void *buf, size_t n)
{
	resolve();
	ssize_t r = real_read(fd, buf, n);
	after_read(fd, r, NULL);
	return r;
}

ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	resolve();
	ssize_t r = real_recv(fd, buf, n, flags);
	if (!(flags & MSG_PEEK))
		after_read(fd, r, NULL);
	return r;
}

ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *from, socklen_t *fl)
{
	resolve();
	ssize_t r = real_recvfrom(fd, buf, n, flags, from, fl);
	if (!(flags & MSG_PEEK))
		after_read(fd, r, from && fl && *fl ? from : NULL);
	return r;
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	resolve();
	ssize_t r = real_recvmsg(fd, msg, flags);
	if (!(flags & MSG_PEEK))
		after_read(fd, r, msg && msg->msg_namelen ? msg->msg_name : NULL);
	return r;
}

ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	resolve();
	ssize_t r = real_readv(fd, iov, cnt);
	after_read(fd, r, NULL);
	return r;
}

int connect(int fd, const struct sockaddr *to, socklen_t len)
{
	resolve();
	/* The run-queue wait so far at the call: a blocking connect() sleeps
	 * until the SYN-ACK, then the program may wait for a CPU before it
	 * returns -- its own time, which the ClientHello's delay includes. */
	double rq_call = logf ? run_delay() : 0;
	int r = real_connect(fd, to, len);
	if (r == 0 && logf && inet_socket(fd)) {
		int saved = errno;
		log_write(fd, 0, 0, 0, now_real(), rq_call, NULL, 0, NULL);
		errno = saved;
	}
	return r;
}
