/* vpncrypt native batch I/O: UDP (recvmmsg/sendmmsg, GRO/GSO) and TUN.
 * Part of the cffi cdef (see build_native.py): plain declarations only.
 *
 * Conventions: every fd is non-blocking (MSG_DONTWAIT is passed anyway);
 * packets live in a caller-owned slab, packet i at slab+off[i] with length
 * len[i]; nothing is written outside the slab or beyond index max-1 of an
 * array.  Errors are negative errno values (or reported through *err).
 */
#ifndef VC_IO_H
#define VC_IO_H
#include <stddef.h>
#include <stdint.h>

#define VC_UDP_GRO_SLOT   65536  /* slab bytes per recvmmsg slot when GRO is on */
#define VC_UDP_MAX_MSGS   64     /* mmsghdr entries per recvmmsg/sendmmsg call */
#define VC_UDP_ROUND_BUFS 1024   /* buffers one receive call reports at most (its batch) */
#define VC_UDP_GSO_MAX_SEGS  64     /* datagrams per UDP_SEGMENT super-datagram */
#define VC_UDP_GSO_MAX_BYTES 65000  /* payload bytes per UDP_SEGMENT super-datagram */

/* A peer's address, and the local one its datagrams arrived at (the source
 * its replies leave from, as the Linux module's "sticky" source address:
 * the peer may know this host by only one of its addresses). */
typedef struct {
    uint8_t  family;    /* 4 or 6 (0: none) */
    uint8_t  src_set;   /* VC_EP_SRC_*: what src holds */
    uint16_t port;      /* host byte order */
    uint32_t scope_id;
    uint8_t  addr[16];  /* IPv4 in addr[0..3] */
    uint8_t  src[16];   /* the local address (the family's; IPv4 in src[0..3]) */
    uint32_t src_ifindex;  /* the interface it arrived on (IPv6: link-local src only, else 0) */
    uint32_t flags;     /* VC_EP_ALONE: (a send's) this datagram goes in no GSO batch */
} vc_endpoint;

/* A datagram sent on its own (never in a UDP_SEGMENT batch, which the kernel
 * sends without DF): with the kernel's IP_PMTUDISC_WANT it carries DF, so a
 * path narrower than it answers "fragmentation needed" (see vc_wg.h, path MTU). */
#define VC_EP_ALONE        1
#define VC_EP_SRC_NONE     0   /* no source: routing picks it (an endpoint set by the UAPI) */
#define VC_EP_SRC_SET      1   /* send from src */
#define VC_EP_SRC_REFUSED  2   /* the kernel refused src on a send (the address is gone, or
                                * not routable): sent from the routed one instead; the table
                                * forgets src for the peer (vc_udp_send_batch sets it) */

/* ---- fq_codel.c: CoDel and a fair queue, sans-I/O (times in ns, given) ----
 * CoDel (RFC 8289) decides, packet by packet at the head of a queue, whether
 * to drop it from its sojourn time: once the sojourn has stayed above target
 * for interval, it drops one and then one every interval/sqrt(count), until a
 * packet's sojourn is below target again (or the queue holds at most mtu
 * bytes).  Zero-initialise and vc_codel_init it. */
typedef struct {
    int64_t  target_ns, interval_ns;
    int64_t  first_above;   /* when above-target will have lasted interval (0: not above) */
    int64_t  drop_next;     /* the next drop, while dropping */
    uint32_t count;         /* drops since dropping began (the control law's count) */
    uint32_t lastcount;
    int32_t  dropping;
    uint32_t mtu;           /* a backlog of at most this many bytes is never dropped from */
    uint64_t drops;         /* verdicts "drop" */
} vc_codel;

void vc_codel_init(vc_codel *c, int64_t target_ns, int64_t interval_ns, uint32_t mtu);
/* The verdict for the packet at the head: 1 drop it (then ask again for the
 * next one), 0 deliver it.  backlog: bytes queued, this packet included. */
int vc_codel_verdict(vc_codel *c, int64_t now_ns, int64_t sojourn_ns, uint64_t backlog);
/* The queue went empty: leave the dropping state (RFC 8289's dodequeue). */
void vc_codel_empty(vc_codel *c);

/* A received buffer (or the rest of a GRO buffer) not yet reported. */
typedef struct {
    uint32_t off;       /* in the slab */
    uint32_t len;       /* bytes left */
    uint32_t seg;       /* GRO segment size, 0 if not coalesced */
    uint32_t pad;
    vc_endpoint ep;
    int64_t  arrival;   /* the kernel's receive time (CLOCK_REALTIME ns), 0 if unknown */
} vc_udp_pending;

/* Per-socket receive state, owned by the caller together with its slab;
 * zero-initialise it.  When one call receives more datagrams than fit in the
 * output arrays (GRO buffers carry up to 64 or more), the rest stays in the
 * slab and is reported first by the next call, which then receives nothing
 * new.  So: the slab contents of the previous call must stay untouched
 * outside the datagrams reported, and the slab must not change between calls
 * while npend > next. */
typedef struct {
    int32_t  npend;     /* pending buffers in pend[] */
    int32_t  next;      /* first pending buffer not yet drained */
    uint64_t dropped;   /* datagrams dropped: truncated (larger than the slot) */
    uint64_t buffers;   /* buffers received (one per recvmmsg slot filled) */
    uint64_t datagrams; /* datagrams reported */
    uint64_t syscalls;  /* recvmmsg calls made */
    vc_udp_pending pend[64];
    /* The kernel's receive time of each buffer the last call reported
     * (SCM_TIMESTAMPNS, CLOCK_REALTIME ns; 0: unknown), when the socket has
     * SO_TIMESTAMPNS on: one per buffer of a round, up to VC_UDP_ROUND_BUFS. */
    int64_t  arrival[VC_UDP_ROUND_BUFS];
    /* CoDel on the socket's sojourn time, used by the receive round
     * (vc_wg_receive_round), opt-in: aqm 0 = off (the default: every
     * datagram received is opened, as WireGuard does), 2 = wanted (the next
     * receive round turns SO_TIMESTAMPNS on and starts CoDel with
     * VC_UDP_AQM_TARGET_NS and VC_UDP_AQM_INTERVAL_NS), 1 = on, -1 = wanted
     * but SO_TIMESTAMPNS could not be set (off). */
    int32_t  aqm;
    int32_t  aqm_pad;
    vc_codel codel;
    uint64_t aqm_dropped; /* transport data messages CoDel dropped before opening */
} vc_udp_rx;

#define VC_UDP_AQM_TARGET_NS    1000000
#define VC_UDP_AQM_INTERVAL_NS  10000000
/* Turn SO_TIMESTAMPNS on (0 or -errno). */
int vc_udp_set_timestamps(int fd, int on);
/* CoDel on the n datagrams a receive call reported (st->arrival[] and segs[]
 * of its *nbufs buffers): in order, each WireGuard transport data message
 * (type 4, at least 32 bytes) of a buffer whose arrival is known is judged on
 * its sojourn (now_real - arrival) by st->codel at now_mono, with the bytes
 * from it to the end of the batch (plus one 65536 if more != 0: the socket
 * has more) as the backlog; those it drops are taken out of off/len/ep
 * (and segs/nbufs, st->arrival), the rest keep their order.  Anything else
 * (handshake messages, cookie replies, short or unknown datagrams) is never
 * dropped here.  Counts st->aqm_dropped; returns the datagrams left. */
int vc_udp_aqm_filter(vc_udp_rx *st, const uint8_t *slab, uint32_t *off, uint32_t *len,
                      vc_endpoint *ep, int n, uint32_t *segs, int *nbufs, int more,
                      int64_t now_mono, int64_t now_real);

/* Receive datagrams from a UDP socket (IPv4, IPv6, or dual-stack: v4-mapped
 * sources are reported as family 4) with recvmmsg (the endpoints' source is
 * the datagram's destination, with vc_udp_set_pktinfo on; a GRO buffer's
 * segments share it), until EAGAIN, until max
 * datagrams, or until the slab has no room for another slot.  Each slot is
 * VC_UDP_GRO_SLOT bytes if gro, else mtu rounded up to 16 (mtu = largest
 * datagram accepted; longer ones are truncated by the kernel and dropped).
 * GRO-coalesced buffers (cmsg UDP_GRO) are split into their segments in place.
 * Returns the number of datagrams (0 when the socket is empty), or -errno
 * (-EINVAL if max < 1 or the slab holds no slot; a socket error such as
 * -ECONNREFUSED is returned only if no datagram was received).  st may be NULL:
 * datagrams beyond max are then dropped (counted nowhere). */
int vc_udp_recv_batch(int fd, vc_udp_rx *st, uint8_t *slab, size_t slab_size, size_t mtu,
                      uint32_t *off, uint32_t *len, vc_endpoint *ep, int max, int gro);
/* The same, also reporting buffers: segs[b] = number of datagrams (consecutive,
 * same endpoint, all but the last of equal length) that came from buffer b,
 * b < *nbufs <= return value.  segs has room for max entries. */
int vc_udp_recv_batch_segs(int fd, vc_udp_rx *st, uint8_t *slab, size_t slab_size, size_t mtu,
                           uint32_t *off, uint32_t *len, vc_endpoint *ep, int max, int gro,
                           uint32_t *segs, int *nbufs);

/* Send n datagrams (i at buf+off[i], len[i], to ep[i]; ep == NULL for a
 * connected socket) with sendmmsg, each from its endpoint's source address
 * when it has one (src_set VC_EP_SRC_SET: IP_PKTINFO / IPV6_PKTINFO).  With
 * gso, consecutive datagrams to the same endpoint (source included) with
 * equal length (the last of a run may be shorter) go as one UDP_SEGMENT
 * super-datagram (at most VC_UDP_GSO_MAX_SEGS segments and
 * VC_UDP_GSO_MAX_BYTES bytes).  Returns the number of datagrams handed to the
 * kernel; *err (may be NULL) gets the first errno seen, 0 if none.
 *   - EAGAIN/EWOULDBLOCK/ENOBUFS/ENOMEM stop the batch: the rest is not sent.
 *   - ECONNREFUSED (an earlier datagram's ICMP error pending on a connected
 *     socket) is reported and the message is retried once.
 *   - other errors (EMSGSIZE of a single datagram, ENETUNREACH, EAFNOSUPPORT
 *     for a bad endpoint, ...) drop that message and the batch goes on.
 *   - a super-datagram the route cannot segment (EIO, EINVAL, or EMSGSIZE:
 *     segments above the path MTU, which GSO never fragments) is resent without
 *     GSO, which stays off for the rest of the call; *err = EIO, EINVAL or
 *     EMSGSIZE with a return of n means: turn GSO off for this socket. */
/*   - a message whose source the kernel refuses (EINVAL, EADDRNOTAVAIL,
 *     ENETUNREACH: the address was removed, ...) is sent again without it
 *     (routing picks); when that goes, its datagrams' ep[i].src_set becomes
 *     VC_EP_SRC_REFUSED (the one change made to ep) and the error is not
 *     reported. */
int vc_udp_send_batch(int fd, const uint8_t *buf, const uint32_t *off, const uint32_t *len,
                      vc_endpoint *ep, int n, int gso, int *err);
/* Whether two endpoints are the same: address, port, scope, and source (the
 * same one, or none on both; VC_EP_SRC_REFUSED counts as none). */
int vc_endpoint_equal(const vc_endpoint *a, const vc_endpoint *b);
/* Report each datagram's destination (IPV6_RECVPKTINFO on an IPv6 socket,
 * dual-stack ones too; IP_PKTINFO on an IPv4 one): the receive calls then
 * fill the endpoints' source (0 or -errno). */
int vc_udp_set_pktinfo(int fd, int on);

/* ---- path MTU ----
 * The socket learns each peer's path MTU (vc_udp_set_pmtu): the errors come
 * in on its error queue (IP_RECVERR, IPV6_RECVERR): ICMP "fragmentation
 * needed" / "packet too big" from the path, and this host's EMSGSIZE.  The
 * session table keeps the MTU with its own checks (vc_wg_pmtu_learn) and
 * refuses what exceeds it, so no datagram above a learned path MTU leaves.
 * The kernel's own discovery stays on, explicitly (IP_PMTUDISC_WANT,
 * IPV6_PMTUDISC_WANT, whatever net.ipv4.ip_no_pmtu_disc says): DF on every
 * IPv4 datagram that fits the route's MTU the kernel knows, and a datagram
 * above it fragmented by this host.  Not DF everywhere (IP_PMTUDISC_PROBE):
 * on a path that filters ICMP (a black hole for DF), the UDP GSO batches,
 * which the kernel sends without DF, are what R can still fragment (the
 * only way data crosses such a path without probing), and an IPv6 inner
 * packet of at most 1280 bytes (which no sender makes smaller, RFC 8201 4)
 * must still go, in outer fragments, where the path is narrower.  Returns
 * 0, or -errno of the first option refused (the options before it stay
 * set). */
int vc_udp_set_pmtu(int fd);
#define VC_UDP_EE_LOCAL  1      /* SO_EE_ORIGIN_LOCAL: this host's stack */
#define VC_UDP_EE_ICMP   2      /* SO_EE_ORIGIN_ICMP */
#define VC_UDP_EE_ICMP6  3      /* SO_EE_ORIGIN_ICMP6 */
#define VC_UDP_QUOTE     16     /* bytes of the quoted datagram kept (a WireGuard header) */
/* One error from a socket's error queue. */
typedef struct {
    vc_endpoint ep;             /* where the datagram it is about went (msg_name); no source */
    int32_t  err;               /* ee_errno (EMSGSIZE: too big for the path) */
    uint32_t info;              /* ee_info: the MTU, for EMSGSIZE */
    uint8_t  origin, type, code;   /* VC_UDP_EE_*, the ICMP type and code */
    uint8_t  quoted_len;        /* bytes of quoted[] that the error carried (0 to 16) */
    uint8_t  quoted[16];        /* the start of the datagram's UDP payload, as quoted */
} vc_udp_error;
/* Read up to max errors from the error queue (MSG_ERRQUEUE, non-blocking).
 * Returns how many (0: the queue is empty) or -errno. */
int vc_udp_read_errors(int fd, vc_udp_error *out, int max);

int vc_udp_set_gro(int fd, int on);       /* 0 or -errno */
int vc_udp_gso_supported(int fd);         /* 1 if setsockopt-level UDP_SEGMENT exists, else 0 */

/* TUN (IFF_TUN|IFF_NO_PI, non-blocking fd): read packets into mtu-sized slots
 * (mtu rounded up to 16) until EAGAIN, max, or the slab is full; returns the
 * count or -errno (if the first read fails; -EINVAL for a slab < mtu). */
int vc_tun_read_batch(int fd, uint8_t *slab, size_t slab_size, size_t mtu,
                      uint32_t *off, uint32_t *len, int max);
/* Write n packets, one write() each.  Returns the number written; *err gets
 * the first errno.  EAGAIN/ENOBUFS/ENOMEM/EIO/EBADF stop; other errors
 * (EINVAL for a malformed packet, ...) drop the packet and go on. */
int vc_tun_write_batch(int fd, const uint8_t *buf, const uint32_t *off, const uint32_t *len,
                       int n, int *err);

/* Convert between vc_endpoint and a sockaddr (sockaddr_in or sockaddr_in6)
 * given as bytes.  to_sockaddr writes at most cap bytes and returns the
 * sockaddr length (0 if it does not fit or the endpoint is invalid);
 * v6_socket != 0 maps family 4 to ::ffff:a.b.c.d.  from_sockaddr returns 0 or
 * -EAFNOSUPPORT. */
int vc_endpoint_to_sockaddr(const vc_endpoint *ep, uint8_t *sa, size_t cap, int v6_socket);
int vc_endpoint_from_sockaddr(vc_endpoint *ep, const uint8_t *sa, size_t salen);


/* A fair queue of IP packets (RFC 8290's fq_codel): packets are hashed by
 * their inner 5-tuple (addresses, protocol, ports of TCP/UDP/SCTP/UDP-Lite;
 * IPv4 or IPv6) into `flows` queues, each FIFO with CoDel on its packets'
 * sojourn; dequeue serves new (sparse) flows before old ones, each by
 * deficit round robin of `quantum` bytes.  Memory is bounded: above
 * byte_cap bytes or packet_cap packets it drops from the head of the flow
 * with the most bytes (up to half of them, at most 64 packets), as
 * fq_codel does.  Packets are copied in.  Not thread-safe: one owner. */
typedef struct vc_fq vc_fq;

typedef struct {
    uint64_t enqueued, dequeued;          /* packets */
    uint64_t bytes_in, bytes_out;
    uint64_t codel_drops;                 /* dropped by CoDel at dequeue */
    uint64_t overlimit_drops;             /* dropped for the byte or packet cap */
    uint64_t too_big;                     /* longer than the dequeue's slot: dropped */
    uint64_t new_flow_count;              /* times a flow became new (sparse) */
    uint64_t backlog_bytes;               /* queued now */
    uint32_t backlog_packets;
    uint32_t active_flows;                /* flows with a packet queued */
    uint64_t max_backlog_bytes;           /* high-water mark */
    uint64_t nomem_drops;                 /* no memory for the packet's buffer: dropped */
} vc_fq_stats;

/* NULL on a bad argument (flows 0 or above 65536, caps 0, quantum 0, target
 * or interval <= 0) or no memory.  seed perturbs the flow hash. */
vc_fq *vc_fq_new(uint32_t flows, uint64_t byte_cap, uint32_t packet_cap, uint32_t quantum,
                 int64_t target_ns, int64_t interval_ns, uint64_t seed);
void vc_fq_free(vc_fq *q);
/* The queue index a packet hashes to. */
uint32_t vc_fq_flow_of(const vc_fq *q, const uint8_t *pkt, uint32_t len);
/* Copy one packet in (len 1 to 65535); returns its flow index, or -EINVAL or
 * -ENOMEM (nothing queued then). */
int vc_fq_enqueue(vc_fq *q, const uint8_t *pkt, uint32_t len, int64_t now_ns);
/* Up to max packets out, in service order, packet i copied to slab + i*slot
 * (off[i], len[i]; flow[i] its flow index if flow != NULL) while slab_size
 * allows; CoDel drops on the way are counted (and a packet longer than slot is
 * dropped, counted in too_big).  Returns the count. */
int vc_fq_dequeue(vc_fq *q, int64_t now_ns, uint8_t *slab, size_t slab_size, size_t slot,
                  uint32_t *off, uint32_t *len, uint32_t *flow, int max);
void vc_fq_get_stats(const vc_fq *q, vc_fq_stats *out);
/* Packets and bytes queued in one flow (0 for an index out of range). */
uint32_t vc_fq_flow_packets(const vc_fq *q, uint32_t flow);

#endif
