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
#define VC_UDP_GSO_MAX_SEGS  64     /* datagrams per UDP_SEGMENT super-datagram */
#define VC_UDP_GSO_MAX_BYTES 65000  /* payload bytes per UDP_SEGMENT super-datagram */

typedef struct {
    uint8_t  family;    /* 4 or 6 (0: none) */
    uint8_t  pad;
    uint16_t port;      /* host byte order */
    uint32_t scope_id;
    uint8_t  addr[16];  /* IPv4 in addr[0..3] */
} vc_endpoint;

/* A received buffer (or the rest of a GRO buffer) not yet reported. */
typedef struct {
    uint32_t off;       /* in the slab */
    uint32_t len;       /* bytes left */
    uint32_t seg;       /* GRO segment size, 0 if not coalesced */
    uint32_t pad;
    vc_endpoint ep;
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
} vc_udp_rx;

/* Receive datagrams from a UDP socket (IPv4, IPv6, or dual-stack: v4-mapped
 * sources are reported as family 4) with recvmmsg, until EAGAIN, until max
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
 * connected socket) with sendmmsg.  With gso, consecutive datagrams to the
 * same endpoint with equal length (the last of a run may be shorter) go as one
 * UDP_SEGMENT super-datagram (at most VC_UDP_GSO_MAX_SEGS segments and
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
int vc_udp_send_batch(int fd, const uint8_t *buf, const uint32_t *off, const uint32_t *len,
                      const vc_endpoint *ep, int n, int gso, int *err);

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

#endif
