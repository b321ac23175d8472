/* Rounds: one batch's socket and TUN I/O and its table work in one call (see
 * vc_wg.h).  The steps are the exported calls of udp_batch.c, tun_batch.c,
 * tun_offload.c and wg_data.c, in the order and with the checks of the
 * Python composition in vpncrypt/transport/native.py (Batch.receive, send,
 * seal_send), which stays for objects that are not bound to descriptors. */
#include <errno.h>
#include <sys/random.h>
#include <time.h>
#include "wg_internal.h"

#define VC_API __attribute__((visibility("default")))

/* vc_udp_send_batch's way of saying "the route cannot segment": every
 * datagram went (without GSO after the failure), and the errno is one GSO
 * gives.  UdpBatchSocket.send turns the socket's GSO off then. */
static int gso_refused(int e, int sent, int n, int gso)
{
    return gso && sent == n && (e == EIO || e == EINVAL || e == EMSGSIZE);
}

/* The error queue's errors (at most VC_WG_ROUND_ERRORS a round, so a flood of
 * ICMP costs a round a bounded time; what is left keeps the socket's fd
 * signalled, POLLERR, and the next round reads on) taken by the table. */
#define VC_WG_ROUND_ERRORS 8
static int read_errors(vc_wg_table *t, vc_wg_round *r, double now)
{
    vc_udp_error errs[VC_WG_ROUND_ERRORS];
    int n = vc_udp_read_errors(r->udp_fd, errs, VC_WG_ROUND_ERRORS);
    for (int i = 0; i < n; i++) {
        if (vc_wg_pmtu_learn(t, &errs[i], now) >= 0)
            r->io.pmtu_learned++;
        else
            r->io.pmtu_refused++;
    }
    return n;
}

/* After a send that said EMSGSIZE: this host's errors for it, one per
 * datagram refused (up to a batch of them: a GSO batch sent again datagram
 * by datagram), all read at once.  They set no socket error for a receive
 * to report, so one left in the queue would make the socket POLLERR with
 * nothing to say why, which stops libuv's watch of it (see the engine's
 * _rearm). */
static void read_local_errors(vc_wg_table *t, vc_wg_round *r, double now, int sent_max)
{
    for (int k = 0; k <= sent_max / VC_WG_ROUND_ERRORS; k++)
        if (read_errors(t, r, now) < VC_WG_ROUND_ERRORS)
            break;
}

/* The errors a receive returns for an error the socket got from ICMP (with
 * IP_RECVERR, the socket's error is set for each, and the next receive
 * reports it once): none stops the data plane. */
static int icmp_errno(int e)
{
    return e == EMSGSIZE || e == ECONNREFUSED || e == EHOSTUNREACH || e == ENETUNREACH ||
           e == EHOSTDOWN || e == ENETDOWN || e == EPROTO || e == ENOPROTOOPT || e == EACCES ||
           e == ETIMEDOUT;
}

static void udp_send(vc_wg_table *t, vc_wg_round *r, int n, int gso, uint32_t *sent, int32_t *err, double now)
{
    int e = 0;
    int s = vc_udp_send_batch(r->udp_fd, r->tx_slab, r->tx_off, r->tx_len, r->tx_ep, n, gso, &e);
    *sent = (uint32_t)s;
    *err = e;
    if (gso_refused(e, s, n, gso))
        r->io.gso_off = 1;
    if (e == EMSGSIZE)      /* a datagram above the interface's MTU: its error is queued */
        read_local_errors(t, r, now, n);
    vc_wg_forget_sources(t, r->touched, r->n_touched, r->tx_ep, (size_t)n);
}

VC_API int64_t vc_wg_round_open(vc_wg_table *t, vc_wg_round *r, uint8_t *buf, const uint32_t *off,
                                const uint32_t *len, const vc_endpoint *ep, size_t n, double now)
{
    if (n > r->cap)
        return VC_WG_ROUND_REFUSED;
    size_t nt = 0, nq = 0, nr = 0;
    size_t delivered = vc_wg_open_batch(t, buf, off, len, ep, n, now, r->status, r->deliver_off,
                                        r->deliver_len, r->tx_slab, r->stride, r->tx_len, r->tx_ep,
                                        &nr, &nq, r->touched, r->cap, &nt);
    if (delivered == (size_t)-1)
        return VC_WG_ROUND_REFUSED;
    r->n_touched = nt;
    r->n_queued = nq;
    r->n_reply = nr;
    return (int64_t)delivered;
}

/* The packets the Linux module answers with an ICMP error (wg_xmit: no peer
 * for the destination, or a peer without an endpoint), and those too big
 * for their peer's path (answered with "packet too big"). */
static void count_unsealed(const int32_t *status, size_t n, vc_wg_round_io *io)
{
    uint32_t c = 0, big = 0;
    for (size_t i = 0; i < n; i++) {
        c += status[i] == VC_WG_NO_ROUTE || status[i] == VC_WG_NO_ENDPOINT;
        big += status[i] == VC_WG_PATH_MTU;
    }
    io->unroutable = c;
    io->too_big = big;
}

VC_API int64_t vc_wg_round_seal(vc_wg_table *t, vc_wg_round *r, const uint8_t *in, const uint32_t *off,
                                const uint32_t *len, size_t n, int64_t peer, double now)
{
    if (n > r->cap)
        return VC_WG_ROUND_REFUSED;
    size_t nt = 0;
    size_t k = vc_wg_seal_batch(t, in, off, len, n, peer, now, r->tx_slab, r->stride, r->cap,
                                r->tx_len, r->tx_ep, r->status, r->peer_of, r->touched, r->cap, &nt);
    if (k == (size_t)-1)
        return VC_WG_ROUND_REFUSED;
    r->n_touched = nt;
    r->io.unroutable = r->io.too_big = 0;
    if (k < n)          /* (only a packet that was not sealed can be one) */
        count_unsealed(r->status, n, &r->io);
    return (int64_t)k;
}

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The receive side's CoDel (vc_udp_rx.aqm), opt-in: off (0) unless wanted
 * (2), which the first round sets up (SO_TIMESTAMPNS on, CoDel started). */
static int aqm_on(vc_wg_round *r)
{
    vc_udp_rx *st = r->udp_rx;
    if (!st || st->aqm <= 0 || !r->udp_segs || !r->udp_nbufs)
        return 0;
    if (st->aqm == 2) {
        if (vc_udp_set_timestamps(r->udp_fd, 1) != 0) {
            st->aqm = -1;
            return 0;
        }
        vc_codel_init(&st->codel, VC_UDP_AQM_TARGET_NS, VC_UDP_AQM_INTERVAL_NS, 1514);
        st->aqm = 1;
    }
    return 1;
}

VC_API int64_t vc_wg_receive_round(vc_wg_table *t, vc_wg_round *r, double now, int gro, int gso)
{
    vc_wg_round_io *io = &r->io;
    int aqm = aqm_on(r);
    int n, n_open, errs = 0;
    io->pmtu_learned = io->pmtu_refused = 0;
    for (int tries = 0;; tries++) {
        n = vc_udp_recv_batch_segs(r->udp_fd, r->udp_rx, r->udp_slab, r->udp_slab_size,
                                   r->udp_mtu, r->udp_off, r->udp_len, r->udp_ep, r->udp_max, gro,
                                   r->udp_segs, r->udp_nbufs);
        if (n <= 0 && errs < 2 && (n == 0 || icmp_errno(-n))) {
            /* nothing came (a POLLERR wake-up?), or the socket's error of an
             * ICMP message: what the error queue holds; after an error, the
             * receive again (the datagrams wait behind it) */
            read_errors(t, r, now);
            errs++;
            if (n < 0)
                continue;
        }
        if (n < 0)
            return n;
        io->received = (uint32_t)n;
        io->replies = io->replies_sent = io->delivered = io->written = 0;
        io->send_errno = io->write_errno = io->gso_off = 0;
        io->aqm_dropped = io->unroutable = 0;
        if (n == 0) {
            if (aqm)
                vc_codel_empty(&r->udp_rx->codel);     /* the socket is empty */
            r->n_touched = r->n_queued = 0;
            return 0;
        }
        n_open = n;
        if (!aqm)
            break;
        vc_udp_rx *st = r->udp_rx;
        int more = n >= r->udp_max || st->next < st->npend;
        n_open = vc_udp_aqm_filter(st, r->udp_slab, r->udp_off, r->udp_len, r->udp_ep, n, r->udp_segs,
                                   r->udp_nbufs, more, clock_ns(CLOCK_MONOTONIC),
                                   clock_ns(CLOCK_REALTIME));
        io->aqm_dropped = (uint32_t)(n - n_open);
        if (n_open > 0)
            break;
        /* all dropped: take the next batch (what the socket state holds back
         * would not make the fd readable); after a few, as an empty round */
        if (!more || tries >= 3) {
            r->n_touched = r->n_queued = 0;
            return 0;
        }
    }
    int64_t delivered = vc_wg_round_open(t, r, r->udp_slab, r->udp_off, r->udp_len, r->udp_ep,
                                         (size_t)n_open, now);
    if (delivered < 0)
        return delivered;
    size_t nr = r->n_reply;
    if (nr) {
        io->replies = (uint32_t)nr;
        udp_send(t, r, (int)nr, gso, &io->replies_sent, &io->send_errno, now);
    }
    if (delivered) {
        int e = 0, w;
        io->delivered = (uint32_t)delivered;
        if (r->tun_rx)
            w = vc_tun_write_offload(r->tun_fd, r->udp_slab, r->deliver_off, r->deliver_len,
                                     (int)delivered, r->gro_out, r->gro_size, r->gro_flags,
                                     r->gro_stats, &e);
        else
            w = vc_tun_write_batch(r->tun_fd, r->udp_slab, r->deliver_off, r->deliver_len,
                                   (int)delivered, &e);
        io->written = (uint32_t)w;
        io->write_errno = e;
    }
    return n_open;
}

VC_API int64_t vc_wg_seal_send(vc_wg_table *t, vc_wg_round *r, const uint8_t *slab, const uint32_t *off,
                               const uint32_t *len, size_t n, int64_t peer, double now, int gso)
{
    vc_wg_round_io *io = &r->io;
    io->received = (uint32_t)n;
    io->replies = io->replies_sent = io->delivered = io->written = 0;
    io->write_errno = io->gso_off = 0;
    io->pmtu_learned = io->pmtu_refused = 0;
    int64_t k = vc_wg_round_seal(t, r, slab, off, len, n, peer, now);
    if (k < 0)
        return k;
    io->sealed = (uint32_t)k;
    io->sent = 0;
    io->send_errno = 0;
    if (k)
        udp_send(t, r, (int)k, gso, &io->sent, &io->send_errno, now);
    return k;
}

static int tun_read(vc_wg_round *r)
{
    if (r->tun_rx)
        return vc_tun_read_offload(r->tun_fd, r->tun_rx, r->tun_slab, r->tun_slab_size, r->tun_mtu,
                                   r->tun_off, r->tun_len, r->tun_max);
    return vc_tun_read_batch(r->tun_fd, r->tun_slab, r->tun_slab_size, r->tun_mtu, r->tun_off,
                             r->tun_len, r->tun_max);
}

static vc_fq *round_fq(vc_wg_round *r)
{
    if (r->fq || !r->fq_on)
        return r->fq;
    int64_t target = r->fq_target_ns > 0 ? r->fq_target_ns : VC_WG_FQ_TARGET_NS;
    int64_t interval = r->fq_interval_ns > 0 ? r->fq_interval_ns : VC_WG_FQ_INTERVAL_NS;
    /* the hash's perturbation, random as fq_codel's, so that a local sender
     * cannot aim its flows at another flow's queue (the clock and an address
     * only where the kernel has no entropy to give yet) */
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
        seed = (uint64_t)clock_ns(CLOCK_MONOTONIC) ^ (uint64_t)(uintptr_t)r;
    r->fq = vc_fq_new(VC_WG_FQ_FLOWS, VC_WG_FQ_BYTE_CAP, VC_WG_FQ_PACKET_CAP, VC_WG_FQ_QUANTUM,
                      target, interval, seed);
    if (!r->fq)
        r->fq_on = 0;       /* no memory: the round goes on without it */
    return r->fq;
}

static int64_t send_direct(vc_wg_table *t, vc_wg_round *r, double now, int gso)
{
    int n = tun_read(r);
    if (n < 0)
        return n;
    if (n == 0) {
        r->io.received = r->io.unroutable = r->io.too_big = 0;
        r->n_touched = 0;
        return 0;
    }
    int64_t k = vc_wg_seal_send(t, r, r->tun_slab, r->tun_off, r->tun_len, (size_t)n, -1, now, gso);
    return k < 0 ? k : n;
}

VC_API int64_t vc_wg_send_round(vc_wg_table *t, vc_wg_round *r, double now, int gso)
{
    vc_fq *q = round_fq(r);
    if (!q)
        return send_direct(t, r, now, gso);
    /* drain the TUN into the queue: the queue, not the TUN's ring, is where
     * a burst waits, so a sparse flow's packet goes first */
    int64_t stamp = clock_ns(CLOCK_MONOTONIC);
    int err = 0;
    for (int k = 0; k < VC_WG_FQ_READS; k++) {
        int n = tun_read(r);
        if (n < 0) {
            err = n;
            break;
        }
        for (int i = 0; i < n; i++)
            vc_fq_enqueue(q, r->tun_slab + r->tun_off[i], r->tun_len[i], stamp);
        if (n < r->tun_max)
            break;
    }
    size_t slot = (r->tun_mtu + 15) & ~(size_t)15;
    int m = vc_fq_dequeue(q, clock_ns(CLOCK_MONOTONIC), r->tun_slab, r->tun_slab_size, slot, r->tun_off, r->tun_len,
                          NULL, r->tun_max);
    if (m == 0) {
        r->io.received = r->io.unroutable = r->io.too_big = 0;
        r->n_touched = 0;
        return err;
    }
    int64_t k = vc_wg_seal_send(t, r, r->tun_slab, r->tun_off, r->tun_len, (size_t)m, -1, now, gso);
    return k < 0 ? k : m;
}

VC_API int vc_wg_round_fq_stats(const vc_wg_round *r, vc_fq_stats *out)
{
    if (!r || !r->fq)
        return -1;
    vc_fq_get_stats(r->fq, out);
    return 0;
}

VC_API void vc_wg_round_release(vc_wg_round *r)
{
    if (!r)
        return;
    vc_fq_free(r->fq);
    r->fq = NULL;
}

/* ---------------------------------------------------------------- rounds looped */

_Static_assert(VC_WG_EV_ROUTINE == (VC_WG_EV_AUTH | VC_WG_EV_DATA | VC_WG_EV_SENT | VC_WG_EV_DATA_SENT),
               "VC_WG_EV_ROUTINE is the routine set");
_Static_assert(sizeof(((vc_wg_loop *)0)->sizes) / sizeof(int64_t) == VC_WG_LOOP_MAX, "sizes[VC_WG_LOOP_MAX]");

#define RX_FLAGS (VC_WG_EV_AUTH | VC_WG_EV_DATA)

/* Whether round r (it returned n > 0) is routine, given the rounds before it
 * (loop's prefix; prefix_flags == 0: none touched a peer yet). */
static int routine(const vc_wg_round *r, const vc_wg_loop *loop, int rx)
{
    const vc_wg_round_io *io = &r->io;
    if (r->n_touched > 1 || io->replies)
        return 0;
    /* (each direction's round sets only its own of these) */
    if (rx ? r->n_queued || r->n_reply || io->written != io->delivered
           : io->sent != io->sealed || io->unroutable || io->too_big)
        return 0;
    if (io->gso_off || io->send_errno || io->write_errno || io->pmtu_learned || io->pmtu_refused)
        return 0;           /* (errors read: the caller may have to watch the socket again) */
    if (r->n_touched == 0)
        return 1;
    const vc_wg_touch *tc = &r->touched[0];
    if (tc->flags & ~(uint32_t)VC_WG_EV_ROUTINE)
        return 0;
    if (loop->prefix_flags &&
        (tc->peer != loop->prefix_peer || !(tc->flags & RX_FLAGS) != !(loop->prefix_flags & RX_FLAGS)))
        return 0;
    return 1;
}

static void add_to_prefix(const vc_wg_round *r, vc_wg_loop *loop)
{
    if (r->n_touched == 0)
        return;
    const vc_wg_touch *tc = &r->touched[0];
    loop->prefix_peer = tc->peer;
    loop->prefix_flags |= tc->flags;
    loop->prefix_data += (tc->flags & VC_WG_EV_DATA) != 0;
    loop->prefix_packets += tc->packets;
    loop->prefix_bytes += tc->bytes;
}

static uint32_t loop_start(vc_wg_loop *loop, int max_rounds)
{
    loop->rounds = 0;
    loop->prefix_peer = loop->prefix_flags = loop->prefix_data = loop->prefix_packets = 0;
    loop->prefix_bytes = 0;
    return max_rounds < 1 ? 1 : max_rounds > VC_WG_LOOP_MAX ? VC_WG_LOOP_MAX : (uint32_t)max_rounds;
}

/* Worker.more(): the next round runs if this one took half of a full round
 * or the object holds back what it read. */
static int again(int full, int64_t n, int holds)
{
    return 2 * n >= full || holds;
}

VC_API int64_t vc_wg_receive_rounds(vc_wg_table *t, vc_wg_round *r, double now, int gro, int gso,
                                    int max_rounds, int full, vc_wg_loop *loop)
{
    uint32_t most = loop_start(loop, max_rounds);
    for (;;) {
        int64_t n = vc_wg_receive_round(t, r, now, gro, gso);
        loop->sizes[loop->rounds++] = n;
        if (n <= 0 || loop->rounds >= most || !routine(r, loop, 1))
            return n;
        const vc_udp_rx *st = r->udp_rx;
        if (!again(full, n, st && st->next < st->npend))
            return n;
        add_to_prefix(r, loop);
    }
}

VC_API int64_t vc_wg_send_rounds(vc_wg_table *t, vc_wg_round *r, double now, int gso, int max_rounds,
                                 int full, vc_wg_loop *loop)
{
    uint32_t most = loop_start(loop, max_rounds);
    for (;;) {
        int64_t n = vc_wg_send_round(t, r, now, gso);
        loop->sizes[loop->rounds++] = n;
        if (n <= 0 || loop->rounds >= most || !routine(r, loop, 0))
            return n;
        if (!again(full, n, r->tun_rx && r->tun_rx->pend_len))
            return n;
        add_to_prefix(r, loop);
    }
}
