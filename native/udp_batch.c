/* Batch UDP I/O: recvmmsg with GRO splitting, sendmmsg with UDP_SEGMENT (GSO).
 * Plain Linux C (also built for aarch64). */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <linux/errqueue.h>

#include "vc_io.h"

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define VC_API __attribute__((visibility("default")))

/* Control buffer per message: UDP_GRO (an int, 24 bytes with its header),
 * SCM_TIMESTAMPNS (a timespec, 32), IPV6_PKTINFO (40) or IP_PKTINFO (32),
 * plus room for a cmsg another part of the program may have enabled;
 * MSG_CTRUNC is harmless.  A send uses UDP_SEGMENT (24) and a PKTINFO. */
#define CTRL_SIZE 160
typedef union {
    char buf[CTRL_SIZE];
    struct cmsghdr align;
} ctrl_buf;

typedef union {
    struct sockaddr sa;
    struct sockaddr_in in4;
    struct sockaddr_in6 in6;
} any_addr;

_Static_assert(sizeof(vc_endpoint) == 48, "vc_endpoint layout");
_Static_assert(sizeof(((vc_udp_rx *)0)->pend) / sizeof(vc_udp_pending) == VC_UDP_MAX_MSGS,
               "pend[] holds one recvmmsg call");

static const uint8_t v4mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static int sa_to_ep(vc_endpoint *ep, const struct sockaddr *sa, size_t salen)
{
    memset(ep, 0, sizeof *ep);
    if (salen >= sizeof(struct sockaddr_in) && sa->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
        ep->family = 4;
        ep->port = ntohs(s->sin_port);
        memcpy(ep->addr, &s->sin_addr, 4);
        return 0;
    }
    if (salen >= sizeof(struct sockaddr_in6) && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
        ep->port = ntohs(s->sin6_port);
        if (memcmp(s->sin6_addr.s6_addr, v4mapped_prefix, 12) == 0) {
            ep->family = 4;
            memcpy(ep->addr, s->sin6_addr.s6_addr + 12, 4);
        } else {
            ep->family = 6;
            ep->scope_id = s->sin6_scope_id;
            memcpy(ep->addr, s->sin6_addr.s6_addr, 16);
        }
        return 0;
    }
    return -EAFNOSUPPORT;
}

/* Returns the sockaddr length, 0 for an invalid endpoint. */
static socklen_t ep_to_sa(any_addr *a, const vc_endpoint *ep, int v6sock)
{
    memset(a, 0, sizeof *a);
    if (ep->family == 4 && !v6sock) {
        a->in4.sin_family = AF_INET;
        a->in4.sin_port = htons(ep->port);
        memcpy(&a->in4.sin_addr, ep->addr, 4);
        return sizeof(struct sockaddr_in);
    }
    if (ep->family == 4) {
        a->in6.sin6_family = AF_INET6;
        a->in6.sin6_port = htons(ep->port);
        memcpy(a->in6.sin6_addr.s6_addr, v4mapped_prefix, 12);
        memcpy(a->in6.sin6_addr.s6_addr + 12, ep->addr, 4);
        return sizeof(struct sockaddr_in6);
    }
    if (ep->family == 6) {
        a->in6.sin6_family = AF_INET6;
        a->in6.sin6_port = htons(ep->port);
        a->in6.sin6_scope_id = ep->scope_id;
        memcpy(a->in6.sin6_addr.s6_addr, ep->addr, 16);
        return sizeof(struct sockaddr_in6);
    }
    return 0;
}

/* Same peer address and same local source (a GSO batch shares both). */
static inline int ep_equal(const vc_endpoint *a, const vc_endpoint *b)
{
    size_t n = a->family == 4 ? 4 : 16;
    if (a->family != b->family || a->port != b->port || a->scope_id != b->scope_id ||
        memcmp(a->addr, b->addr, n) != 0)
        return 0;
    int sa = a->src_set == VC_EP_SRC_SET, sb = b->src_set == VC_EP_SRC_SET;
    if (sa != sb)
        return 0;
    return !sa || (a->src_ifindex == b->src_ifindex && memcmp(a->src, b->src, n) == 0);
}

VC_API int vc_endpoint_equal(const vc_endpoint *a, const vc_endpoint *b)
{
    return ep_equal(a, b);
}

VC_API int vc_endpoint_to_sockaddr(const vc_endpoint *ep, uint8_t *sa, size_t cap, int v6_socket)
{
    any_addr a;
    socklen_t n = ep_to_sa(&a, ep, v6_socket);
    if (n == 0 || n > cap)
        return 0;
    memcpy(sa, &a, n);
    return (int)n;
}

VC_API int vc_endpoint_from_sockaddr(vc_endpoint *ep, const uint8_t *sa, size_t salen)
{
    any_addr a;
    memset(&a, 0, sizeof a);
    if (salen > sizeof a)
        salen = sizeof a;
    memcpy(&a, sa, salen);
    return sa_to_ep(ep, &a.sa, salen);
}

VC_API int vc_udp_set_gro(int fd, int on)
{
    int v = on ? 1 : 0;
    if (setsockopt(fd, SOL_UDP, UDP_GRO, &v, sizeof v) != 0)
        return -errno;
    return 0;
}

VC_API int vc_udp_set_timestamps(int fd, int on)
{
    int v = on ? 1 : 0;
    if (setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &v, sizeof v) != 0)
        return -errno;
    return 0;
}

static int socket_domain(int fd)
{
    int dom = 0;
    socklen_t dl = sizeof dom;
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl) != 0)
        return -errno;
    return dom;
}

VC_API int vc_udp_set_pktinfo(int fd, int on)
{
    int v = on ? 1 : 0, dom = socket_domain(fd);
    if (dom < 0)
        return dom;
    /* a dual-stack socket reports IPv4 arrivals with IPV6_PKTINFO too (the
     * destination v4-mapped), so one option per socket */
    int r = dom == AF_INET6 ? setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &v, sizeof v)
                            : setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &v, sizeof v);
    return r == 0 ? 0 : -errno;
}

/* ---------------------------------------------------------------- path MTU */

VC_API int vc_udp_set_pmtu(int fd)
{
    int want4 = IP_PMTUDISC_WANT, want6 = IPV6_PMTUDISC_WANT, one = 1, dom = socket_domain(fd);
    if (dom < 0)
        return dom;
    /* IPv4 first: a dual-stack socket sends its IPv4 datagrams with them */
    if (setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &want4, sizeof want4) != 0 ||
        setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof one) != 0)
        return -errno;
    if (dom != AF_INET6)
        return 0;
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &want6, sizeof want6) != 0 ||
        setsockopt(fd, IPPROTO_IPV6, IPV6_RECVERR, &one, sizeof one) != 0)
        return -errno;
    return 0;
}

/* The extended error of one error-queue message (IP_RECVERR, or
 * IPV6_RECVERR: an IPv6 socket reports its IPv4 errors that way too). */
static int read_extended_err(struct msghdr *h, vc_udp_error *e)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
        if (!((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR) ||
              (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_RECVERR)) ||
            c->cmsg_len < CMSG_LEN(sizeof(struct sock_extended_err)))
            continue;
        struct sock_extended_err ee;
        memcpy(&ee, CMSG_DATA(c), sizeof ee);
        e->err = (int32_t)ee.ee_errno;
        e->info = ee.ee_info;
        e->origin = ee.ee_origin;
        e->type = ee.ee_type;
        e->code = ee.ee_code;
        return 1;
    }
    return 0;
}

VC_API int vc_udp_read_errors(int fd, vc_udp_error *out, int max)
{
    int n = 0;
    while (n < max) {
        any_addr name;
        ctrl_buf cb;
        uint8_t data[VC_UDP_QUOTE];
        struct iovec iov = {data, sizeof data};
        struct msghdr h;
        memset(&h, 0, sizeof h);
        h.msg_name = &name;
        h.msg_namelen = sizeof name;
        h.msg_iov = &iov;
        h.msg_iovlen = 1;
        h.msg_control = cb.buf;
        h.msg_controllen = sizeof cb.buf;
        ssize_t r = recvmsg(fd, &h, MSG_ERRQUEUE | MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK || n > 0)
                break;
            return -errno;
        }
        vc_udp_error *e = &out[n];
        memset(e, 0, sizeof *e);
        if (!read_extended_err(&h, e))
            continue;       /* not an error message: nothing to say */
        if (h.msg_namelen == 0 || sa_to_ep(&e->ep, &name.sa, h.msg_namelen) != 0)
            memset(&e->ep, 0, sizeof e->ep);
        e->quoted_len = (uint8_t)((size_t)r < sizeof data ? (size_t)r : sizeof data);
        memcpy(e->quoted, data, e->quoted_len);
        n++;
    }
    return n;
}

VC_API int vc_udp_gso_supported(int fd)
{
    int v = 0;
    socklen_t l = sizeof v;
    return getsockopt(fd, SOL_UDP, UDP_SEGMENT, &v, &l) == 0;
}

/* ---------------------------------------------------------------- receive */

/* The destination of a received datagram (a local address) and the
 * interface it came in on, from IP_PKTINFO or IPV6_PKTINFO (the latter
 * v4-mapped for an IPv4 arrival on a dual-stack socket). */
typedef struct {
    int family;             /* 0: no pktinfo */
    uint32_t ifindex;
    uint8_t addr[16];
} local_dst;

static void read_pktinfo(local_dst *d, const struct cmsghdr *c)
{
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO &&
        c->cmsg_len >= CMSG_LEN(sizeof(struct in_pktinfo))) {
        struct in_pktinfo pi;
        memcpy(&pi, CMSG_DATA(c), sizeof pi);
        d->family = 4;
        d->ifindex = (uint32_t)pi.ipi_ifindex;
        memcpy(d->addr, &pi.ipi_addr, 4);     /* the header's destination */
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO &&
               c->cmsg_len >= CMSG_LEN(sizeof(struct in6_pktinfo))) {
        struct in6_pktinfo pi;
        memcpy(&pi, CMSG_DATA(c), sizeof pi);
        d->ifindex = (uint32_t)pi.ipi6_ifindex;
        if (memcmp(pi.ipi6_addr.s6_addr, v4mapped_prefix, 12) == 0) {
            d->family = 4;
            memcpy(d->addr, pi.ipi6_addr.s6_addr + 12, 4);
        } else {
            d->family = 6;
            memcpy(d->addr, pi.ipi6_addr.s6_addr, 16);
        }
    }
}

/* One received message's control data: its GRO segment size, its kernel
 * receive time, its destination. */
static void read_control(struct msghdr *h, uint32_t *seg, int64_t *arrival, local_dst *dst)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
            int g;
            memcpy(&g, CMSG_DATA(c), sizeof g);
            if (g > 0)
                *seg = (uint32_t)g;
        } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS &&
                   c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof ts);
            *arrival = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        } else {
            read_pktinfo(dst, c);
        }
    }
}

static int link_local6(const uint8_t *a)
{
    return a[0] == 0xfe && (a[1] & 0xc0) == 0x80;
}

/* The endpoint's source: the address the datagram was sent to, as the Linux
 * module keeps it (IPv4: with the interface; IPv6: the interface only where
 * the address needs it, a link-local one).  A multicast or broadcast
 * destination is no address to answer from: routing picks then. */
static void set_source(vc_endpoint *e, const local_dst *d)
{
    if (d->family != e->family)
        return;
    if (d->family == 4) {
        if (d->addr[0] >= 224 || (d->addr[0] | d->addr[1] | d->addr[2] | d->addr[3]) == 0)
            return;         /* multicast, class E, limited broadcast; 0.0.0.0 */
        memcpy(e->src, d->addr, 4);
        e->src_ifindex = d->ifindex;
    } else {
        if (d->addr[0] == 0xff)
            return;         /* multicast */
        memcpy(e->src, d->addr, 16);
        e->src_ifindex = link_local6(d->addr) ? d->ifindex : 0;
    }
    e->src_set = VC_EP_SRC_SET;
}

typedef struct {
    uint32_t *off, *len, *segs;
    vc_endpoint *ep;
    int count, max, nbufs;
    vc_udp_rx *st;
} rx_out;

/* Report the datagrams of one buffer [o, o+l) (GRO segment size seg, 0 if
 * none) until the output is full; the rest goes to st->pend (or is dropped). */
static void note_arrival(rx_out *o, int64_t arrival)
{
    if (o->st && o->nbufs < VC_UDP_ROUND_BUFS)
        o->st->arrival[o->nbufs] = arrival;
}

static void emit_buffer(rx_out *o, uint32_t at, uint32_t l, uint32_t seg, const vc_endpoint *ep,
                        int64_t arrival)
{
    int first = o->count;
    if (seg == 0 || seg >= l)
        seg = l ? l : 1;           /* one datagram (possibly empty) */
    do {
        if (o->count >= o->max) {
            if (o->st && o->st->npend < VC_UDP_MAX_MSGS) {
                vc_udp_pending *p = &o->st->pend[o->st->npend++];
                p->off = at;
                p->len = l;
                p->seg = seg;
                p->pad = 0;
                p->ep = *ep;
                p->arrival = arrival;
            }
            break;
        }
        uint32_t n = l < seg ? l : seg;
        o->off[o->count] = at;
        o->len[o->count] = n;
        o->ep[o->count] = *ep;
        o->count++;
        at += n;
        l -= n;
    } while (l > 0);
    if (o->count > first && o->segs)
        o->segs[o->nbufs] = (uint32_t)(o->count - first);
    if (o->count > first) {
        note_arrival(o, arrival);
        o->nbufs++;
    }
}

static int drain_pending(rx_out *o)
{
    vc_udp_rx *st = o->st;
    while (st->next < st->npend && o->count < o->max) {
        vc_udp_pending *p = &st->pend[st->next];
        int before = o->count;
        uint32_t seg = p->seg ? p->seg : (p->len ? p->len : 1);
        /* emit_buffer appends overflow to pend[]: do it by hand here. */
        uint32_t at = p->off, l = p->len;
        do {
            if (o->count >= o->max)
                break;
            uint32_t n = l < seg ? l : seg;
            o->off[o->count] = at;
            o->len[o->count] = n;
            o->ep[o->count] = p->ep;
            o->count++;
            at += n;
            l -= n;
        } while (l > 0);
        if (o->segs)
            o->segs[o->nbufs] = (uint32_t)(o->count - before);
        note_arrival(o, p->arrival);
        o->nbufs++;
        if (l > 0 && o->count >= o->max) {
            p->off = at;            /* the rest of this buffer waits again */
            p->len = l;
            break;
        }
        st->next++;
    }
    if (st->next >= st->npend)
        st->next = st->npend = 0;
    st->datagrams += (uint64_t)o->count;
    return o->count;
}

/* Report one message recvmmsg filled (its slot at `at`). */
static void take_message(rx_out *o, struct mmsghdr *m, const any_addr *name, uint32_t at, size_t slot)
{
    struct msghdr *h = &m->msg_hdr;
    uint32_t l = m->msg_len, seg = 0;
    int64_t arrival = 0;
    vc_endpoint e;
    local_dst dst = {0};
    if (o->st)
        o->st->buffers++;
    if (h->msg_flags & MSG_TRUNC) {
        if (o->st)
            o->st->dropped++;
        return;
    }
    if (l > slot)
        l = (uint32_t)slot;   /* cannot happen; never report beyond the slot */
    read_control(h, &seg, &arrival, &dst);
    if (h->msg_namelen == 0 || sa_to_ep(&e, &name->sa, h->msg_namelen) != 0)
        memset(&e, 0, sizeof e);
    else
        set_source(&e, &dst);
    emit_buffer(o, at, l, seg, &e, arrival);
}

VC_API int vc_udp_recv_batch_segs(int fd, vc_udp_rx *st, uint8_t *slab, size_t slab_size, size_t mtu,
                                  uint32_t *off, uint32_t *len, vc_endpoint *ep, int max, int gro,
                                  uint32_t *segs, int *nbufs)
{
    rx_out o = {off, len, segs, ep, 0, max, 0, st};
    if (nbufs)
        *nbufs = 0;
    if (max < 1 || !slab || !off || !len || !ep)
        return -EINVAL;
    if (st && st->next < st->npend) {
        int r = drain_pending(&o);
        if (nbufs)
            *nbufs = o.nbufs;
        return r;
    }
    if (st)
        st->npend = st->next = 0;

    size_t slot;
    if (gro) {
        slot = VC_UDP_GRO_SLOT;
    } else {
        if (mtu == 0)
            return -EINVAL;
        if (mtu > VC_UDP_GRO_SLOT)
            mtu = VC_UDP_GRO_SLOT;
        slot = (mtu + 15) & ~(size_t)15;
    }
    if (slab_size > UINT32_MAX)     /* offsets are 32-bit */
        slab_size = UINT32_MAX;
    if (slab_size < slot)
        return -EINVAL;

    struct mmsghdr msgs[VC_UDP_MAX_MSGS];
    struct iovec iov[VC_UDP_MAX_MSGS];
    any_addr names[VC_UDP_MAX_MSGS];
    ctrl_buf ctrl[VC_UDP_MAX_MSGS];
    size_t cursor = 0;
    int err = 0;

    while (o.count < max) {
        size_t room = (slab_size - cursor) / slot;
        int k = max - o.count;
        if ((size_t)k > room)
            k = (int)room;
        if (k > VC_UDP_MAX_MSGS)
            k = VC_UDP_MAX_MSGS;
        if (k <= 0)
            break;
        for (int j = 0; j < k; j++) {
            iov[j].iov_base = slab + cursor + (size_t)j * slot;
            iov[j].iov_len = slot;
            memset(&msgs[j].msg_hdr, 0, sizeof msgs[j].msg_hdr);
            msgs[j].msg_hdr.msg_name = &names[j];
            msgs[j].msg_hdr.msg_namelen = sizeof names[j];
            msgs[j].msg_hdr.msg_iov = &iov[j];
            msgs[j].msg_hdr.msg_iovlen = 1;
            msgs[j].msg_hdr.msg_control = ctrl[j].buf;
            msgs[j].msg_hdr.msg_controllen = sizeof ctrl[j].buf;
            msgs[j].msg_len = 0;
        }
        int r = recvmmsg(fd, msgs, (unsigned)k, MSG_DONTWAIT, NULL);
        if (st)
            st->syscalls++;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                err = -errno;
            break;
        }
        for (int j = 0; j < r; j++)
            take_message(&o, &msgs[j], &names[j], (uint32_t)(cursor + (size_t)j * slot), slot);
        cursor += (size_t)r * slot;
        if (r < k)
            break;          /* the queue was empty */
    }
    if (st)
        st->datagrams += (uint64_t)o.count;
    if (nbufs)
        *nbufs = o.nbufs;
    if (o.count == 0 && err)
        return err;
    return o.count;
}

VC_API int vc_udp_recv_batch(int fd, vc_udp_rx *st, uint8_t *slab, size_t slab_size, size_t mtu,
                             uint32_t *off, uint32_t *len, vc_endpoint *ep, int max, int gro)
{
    return vc_udp_recv_batch_segs(fd, st, slab, slab_size, mtu, off, len, ep, max, gro, NULL, NULL);
}

/* ---------------------------------------------------------------- CoDel */

VC_API int vc_udp_aqm_filter(vc_udp_rx *st, const uint8_t *slab, uint32_t *off, uint32_t *len,
                             vc_endpoint *ep, int n, uint32_t *segs, int *nbufs, int more,
                             int64_t now_mono, int64_t now_real)
{
    if (!st || !slab || !off || !len || !ep || !segs || !nbufs || n <= 0)
        return n;
    uint64_t backlog = more ? 65536 : 0;
    for (int i = 0; i < n; i++)
        backlog += len[i];
    int i = 0, kept = 0, kept_bufs = 0, nb = *nbufs;
    for (int b = 0; b < nb && i < n; b++) {
        int64_t arrival = b < VC_UDP_ROUND_BUFS ? st->arrival[b] : 0;
        int64_t sojourn = arrival ? now_real - arrival : 0;
        if (sojourn < 0)
            sojourn = 0;
        uint32_t in_buf = segs[b], left = 0;
        for (uint32_t k = 0; k < in_buf && i < n; k++, i++) {
            const uint8_t *d = slab + off[i];
            int data = len[i] >= 32 && d[0] == 4 && d[1] == 0 && d[2] == 0 && d[3] == 0;
            uint32_t l = len[i];
            int drop = data && arrival && vc_codel_verdict(&st->codel, now_mono, sojourn, backlog);
            backlog -= l;
            if (drop) {
                st->aqm_dropped++;
                continue;
            }
            off[kept] = off[i];
            len[kept] = l;
            ep[kept] = ep[i];
            kept++;
            left++;
        }
        if (left) {
            segs[kept_bufs] = left;
            if (kept_bufs < VC_UDP_ROUND_BUFS && b < VC_UDP_ROUND_BUFS)
                st->arrival[kept_bufs] = arrival;
            kept_bufs++;
        }
    }
    for (; i < n; i++) {        /* datagrams beyond the buffers counted: kept as they are */
        off[kept] = off[i];
        len[kept] = len[i];
        ep[kept] = ep[i];
        kept++;
    }
    *nbufs = kept_bufs;
    return kept;
}

/* ---------------------------------------------------------------- send */

#define TX_IOV_CAP 512

static int transient(int e)
{
    return e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS || e == ENOMEM;
}

static int fatal(int e)
{
    return e == EBADF || e == ENOTSOCK || e == EFAULT || e == EPIPE;
}

/* UDP_SEGMENT and IPV6_PKTINFO, the most a send puts in a message's control */
#define TX_CTRL_MAX (CMSG_SPACE(sizeof(uint16_t)) + CMSG_SPACE(sizeof(struct in6_pktinfo)))
_Static_assert(TX_CTRL_MAX <= CTRL_SIZE, "a send's control data fits the buffer");

/* The control data of one message: UDP_SEGMENT when it is a GSO batch
 * (seglen > 0), the source address when the endpoint has one (IP_PKTINFO on
 * an IPv4 socket; IPV6_PKTINFO on an IPv6 one, v4-mapped for an IPv4 peer,
 * which the kernel's IPv4 path of a dual-stack socket takes).  The source
 * alone is given, no interface (but for a link-local IPv6 one): routing
 * picks the way out, as the Linux module's route lookup with a source does. */
static void set_control(struct msghdr *h, ctrl_buf *cb, uint16_t seglen, const vc_endpoint *ep,
                        int v6sock)
{
    size_t used = 0;
    memset(cb->buf, 0, TX_CTRL_MAX);
    h->msg_control = cb->buf;
    h->msg_controllen = sizeof cb->buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(h);
    if (seglen) {
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof seglen);
        memcpy(CMSG_DATA(c), &seglen, sizeof seglen);
        used += CMSG_SPACE(sizeof seglen);
        c = (struct cmsghdr *)(cb->buf + used);
    }
    if (ep && ep->src_set == VC_EP_SRC_SET && v6sock) {
        struct in6_pktinfo pi;
        memset(&pi, 0, sizeof pi);
        if (ep->family == 4) {
            memcpy(pi.ipi6_addr.s6_addr, v4mapped_prefix, 12);
            memcpy(pi.ipi6_addr.s6_addr + 12, ep->src, 4);
        } else {
            memcpy(pi.ipi6_addr.s6_addr, ep->src, 16);
            pi.ipi6_ifindex = (int)ep->src_ifindex;
        }
        c->cmsg_level = IPPROTO_IPV6;
        c->cmsg_type = IPV6_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof pi);
        memcpy(CMSG_DATA(c), &pi, sizeof pi);
        used += CMSG_SPACE(sizeof pi);
    } else if (ep && ep->src_set == VC_EP_SRC_SET && ep->family == 4) {
        struct in_pktinfo pi;
        memset(&pi, 0, sizeof pi);
        memcpy(&pi.ipi_spec_dst, ep->src, 4);
        c->cmsg_level = IPPROTO_IP;
        c->cmsg_type = IP_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof pi);
        memcpy(CMSG_DATA(c), &pi, sizeof pi);
        used += CMSG_SPACE(sizeof pi);
    }
    h->msg_controllen = used;
    if (!used)
        h->msg_control = NULL;
}

/* What a send with a source address says when that address cannot be used
 * (removed: EINVAL from the route lookup or the IPv6 address check;
 * EADDRNOTAVAIL; a source-based rule with no route: ENETUNREACH). */
static int source_refused(int e)
{
    return e == EINVAL || e == EADDRNOTAVAIL || e == ENETUNREACH;
}

typedef struct {
    struct mmsghdr msgs[VC_UDP_MAX_MSGS];
    struct iovec iov[TX_IOV_CAP];
    any_addr names[VC_UDP_MAX_MSGS];
    ctrl_buf ctrl[VC_UDP_MAX_MSGS];
    int first[VC_UDP_MAX_MSGS], count[VC_UDP_MAX_MSGS];
    uint8_t src[VC_UDP_MAX_MSGS];   /* 1: sent with a source; 2: retried without it */
    uint16_t seglen[VC_UDP_MAX_MSGS];
} tx_chunk;

/* Datagrams sent from an endpoint's source which the kernel refused and that
 * went without it: their endpoints say VC_EP_SRC_REFUSED (the caller's table
 * forgets that source). */
static void sent_without_source(tx_chunk *c, vc_endpoint *ep, int from, int to)
{
    for (int k = from; k < to; k++)
        if (c->src[k] == 2)
            for (int d = 0; d < c->count[k]; d++)
                ep[c->first[k] + d].src_set = VC_EP_SRC_REFUSED;
}

/* The length of the GSO run from datagram j (1: none). */
static int gso_run(const uint32_t *len, const vc_endpoint *ep, int j, int n)
{
    int g = 1;
    uint32_t seglen = len[j];
    size_t total = seglen;
    if (seglen == 0 || seglen > VC_UDP_GSO_MAX_BYTES)
        return 1;
    while (j + g < n && g < VC_UDP_GSO_MAX_SEGS) {
        uint32_t l = len[j + g];
        if (l == 0 || l > seglen || total + l > VC_UDP_GSO_MAX_BYTES)
            break;
        if (ep && (!ep_equal(&ep[j], &ep[j + g]) || (ep[j].flags | ep[j + g].flags) & VC_EP_ALONE))
            break;
        total += l;
        g++;
        if (l < seglen)
            break;      /* a shorter datagram ends the run */
    }
    return g;
}

#define CHUNK_SENT -1     /* send_chunk: every message sent or dropped */
#define CHUNK_STOP -2     /* ... a transient or fatal error: the rest is not sent */

/* sendmmsg the nm messages of a chunk; on a failure, skip, retry or stop.
 * Adds the datagrams sent to *sent and the first error to *e0.  Returns
 * CHUNK_SENT, CHUNK_STOP, or the first datagram of a GSO message the route
 * cannot segment (the caller resends from there without GSO). */
static int send_chunk(int fd, tx_chunk *ch, vc_endpoint *ep, int nm, int v6sock, int *sent, int *e0)
{
    struct mmsghdr *msgs = ch->msgs;
    int done = 0, retried = -1;
    while (done < nm) {
        int r = sendmmsg(fd, msgs + done, (unsigned)(nm - done), MSG_DONTWAIT);
        if (r > 0) {
            for (int k = done; k < done + r; k++)
                *sent += ch->count[k];
            sent_without_source(ch, ep, done, done + r);
            done += r;
            continue;
        }
        int e = r < 0 ? errno : EAGAIN;
        if (e == EINTR)
            continue;
        if (ch->src[done] == 1 && source_refused(e)) {
            /* "sticky but not too sticky": the source address may be
             * gone; send again from the one routing picks (not yet an
             * error: if that goes, the endpoint's source is given up) */
            ch->src[done] = 2;
            set_control(&msgs[done].msg_hdr, &ch->ctrl[done], ch->seglen[done], NULL, v6sock);
            continue;
        }
        if (!*e0)
            *e0 = e;
        if (transient(e) || fatal(e))
            return CHUNK_STOP;
        if (e == ECONNREFUSED && retried != done) {
            /* a pending ICMP error of an earlier datagram (connected
             * socket), now consumed: this message was not tried yet */
            retried = done;
            continue;
        }
        if (ch->count[done] > 1 && (e == EIO || e == EINVAL || e == EMSGSIZE)) {
            /* the route cannot segment (EMSGSIZE: the segments exceed the
             * path MTU, and GSO segments are never fragmented): resend
             * without GSO from here, as single datagrams the kernel may
             * fragment (each from its source again, if it had one) */
            return ch->first[done];
        }
        done++;         /* drop this message, go on */
    }
    return CHUNK_SENT;
}

VC_API int vc_udp_send_batch(int fd, const uint8_t *buf, const uint32_t *off, const uint32_t *len,
                             vc_endpoint *ep, int n, int gso, int *err)
{
    tx_chunk ch;
    struct mmsghdr *msgs = ch.msgs;
    int sent = 0, e0 = 0, v6sock = 0;
    int i = 0;

    if (err)
        *err = 0;
    if (n <= 0)
        return 0;
    if (ep) {
        int dom = socket_domain(fd);
        if (dom < 0) {
            if (err)
                *err = -dom;
            return 0;
        }
        v6sock = dom == AF_INET6;
    }

    while (i < n) {
        /* Build one sendmmsg chunk from datagram i on. */
        int nm = 0, niov = 0, j = i;
        while (j < n && nm < VC_UDP_MAX_MSGS) {
            int g = gso ? gso_run(len, ep, j, n) : 1;
            if (niov + g > TX_IOV_CAP)
                break;
            struct msghdr *h = &msgs[nm].msg_hdr;
            memset(h, 0, sizeof *h);
            if (ep) {
                socklen_t sl = ep_to_sa(&ch.names[nm], &ep[j], v6sock);
                if (sl == 0) {
                    /* invalid endpoint: drop these datagrams without a syscall */
                    if (!e0)
                        e0 = EAFNOSUPPORT;
                    j += g;
                    continue;
                }
                h->msg_name = &ch.names[nm];
                h->msg_namelen = sl;
            }
            for (int k = 0; k < g; k++) {
                ch.iov[niov + k].iov_base = (void *)(buf + off[j + k]);
                ch.iov[niov + k].iov_len = len[j + k];
            }
            h->msg_iov = &ch.iov[niov];
            h->msg_iovlen = (size_t)g;
            ch.seglen[nm] = g > 1 ? (uint16_t)len[j] : 0;
            ch.src[nm] = ep && ep[j].src_set == VC_EP_SRC_SET;
            if (g > 1 || ch.src[nm])
                set_control(h, &ch.ctrl[nm], ch.seglen[nm], ep ? &ep[j] : NULL, v6sock);
            ch.first[nm] = j;
            ch.count[nm] = g;
            niov += g;
            nm++;
            j += g;
        }
        if (nm == 0) {
            i = j;
            continue;
        }

        int at = send_chunk(fd, &ch, ep, nm, v6sock, &sent, &e0);
        if (at == CHUNK_STOP)
            break;
        if (at >= 0) {
            gso = 0;        /* the route cannot segment: resend from `at` without GSO */
            i = at;
        } else {
            i = j;
        }
    }
    if (err)
        *err = e0;
    return sent;
}
