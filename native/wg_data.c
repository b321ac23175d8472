/* Transport data (WireGuard message type 4) in batches: sealing and opening
 * against the session table.  Both run under the table's read lock, so any
 * number of threads may seal and open at once; a sending counter is taken
 * with an atomic add, a replay window is updated under its keypair's lock.
 * See vc_wg.h. */
#include <math.h>
#include "wg_internal.h"

/* ---------------------------------------------------------------- IP headers */

/* The IP length and the source (dst == 0) or destination address of an inner
 * packet.  Returns the family (4 or 6), or 0 if it is not a whole IP packet. */
static int ip_parse(const uint8_t *p, size_t len, int dst, const uint8_t **addr, size_t *ip_len)
{
    if (len >= 20 && (p[0] >> 4) == 4) {
        size_t tot = ((size_t)p[2] << 8) | p[3];
        if (tot < 20 || tot > len)
            return 0;
        *ip_len = tot;
        *addr = p + (dst ? 16 : 12);
        return 4;
    }
    if (len >= 40 && (p[0] >> 4) == 6) {
        size_t tot = 40 + (((size_t)p[4] << 8) | p[5]);
        if (tot > len)
            return 0;
        *ip_len = tot;
        *addr = p + (dst ? 24 : 8);
        return 6;
    }
    return 0;
}

/* WireGuard's padding: the plaintext grows to a multiple of 16, but never
 * past the MTU (a packet longer than the MTU is padded as its last
 * MTU-sized unit would be). */
static size_t padded_length(size_t len, uint32_t mtu)
{
    if (!mtu)
        return (len + 15) & ~(size_t)15;
    size_t last = len > mtu ? len % mtu : len;
    size_t padded = (last + 15) & ~(size_t)15;
    if (padded > mtu)
        padded = mtu;
    return len + (padded - last);
}

/* The largest WireGuard message the peer's path takes now (0: no limit
 * known): its path MTU less the outer IP and UDP headers (its lock held). */
static uint32_t message_room(const wg_peer *p, double tnow)
{
    uint32_t mtu = p->ep_set ? wg_peer_pmtu(p, tnow) : 0;
    if (!mtu)
        return 0;
    uint32_t over = wg_outer_overhead(p->ep.family);
    return mtu > over ? mtu - over : 1;
}

/* An IPv6 packet of at most 1280 bytes: every link must carry it (RFC 8200
 * 5), and a sender told a smaller MTU still sends it (RFC 8201 4), so it is
 * never refused for the path MTU: its datagram leaves in outer fragments
 * (the kernel's, at the path MTU it learned), as the Linux module sends it. */
static int ipv6_minimum(const uint8_t *pkt, size_t len)
{
    return len >= 40 && (pkt[0] >> 4) == 6 && len <= 1280;
}

/* ---------------------------------------------------------------- replay window */

/* The window of wireguard-go and the Linux module: a ring of 128 64-bit words;
 * a counter more than VC_WG_WINDOW (8128) behind the greatest is too old. */
static int replay_fresh(const wg_keypair *k, uint64_t c, uint64_t limit)
{
    if (c >= limit)
        return 0;
    uint64_t g = __atomic_load_n(&k->greatest, __ATOMIC_RELAXED);
    if (c > g)
        return 1;
    if (g - c > VC_WG_WINDOW)
        return 0;
    return !((__atomic_load_n(&k->ring[(c >> 6) % WG_RING_WORDS], __ATOMIC_RELAXED) >> (c & 63)) & 1);
}

static int replay_record(wg_keypair *k, uint64_t c, uint64_t limit)
{
    if (c >= limit)
        return 0;
    wg_spin_lock(&k->replay_lock);
    int ok = 1;
    if (c > k->greatest) {
        uint64_t cur = k->greatest >> 6, diff = (c >> 6) - cur;
        if (diff > WG_RING_WORDS)
            diff = WG_RING_WORDS;
        for (uint64_t i = 1; i <= diff; i++)
            k->ring[(cur + i) % WG_RING_WORDS] = 0;
        k->greatest = c;
    } else if (k->greatest - c > VC_WG_WINDOW) {
        ok = 0;
    }
    if (ok) {
        uint64_t *w = &k->ring[(c >> 6) % WG_RING_WORDS], bit = 1ULL << (c & 63);
        if (*w & bit)
            ok = 0;
        else
            *w |= bit;
    }
    k->received_any = 1;
    wg_spin_unlock(&k->replay_lock);
    return ok;
}

/* ---------------------------------------------------------------- per-call peer set */

typedef struct {
    uint32_t kp;                /* seal: the sending keypair chosen for this call */
    uint32_t room;              /* seal: the largest message the path takes (0: no limit) */
    int32_t  check;             /* seal: the next big message goes alone (VC_WG_PMTU_CHECK) */
    int32_t  ep_set;
    vc_endpoint ep;             /* seal: where to send; open: last authenticated source */
    uint64_t inner_packets, inner_bytes;
} touch_extra;

typedef struct {
    vc_wg_touch *out;
    touch_extra *extra;
    size_t n;
    uint16_t map[2 * WG_MAX_BATCH];   /* 1 + entry, 0 empty; used past 8 entries */
    int mapped;
} touch_set;

static size_t touch_slot_of(touch_set *s, uint32_t peer)
{
    uint32_t mask = 2 * WG_MAX_BATCH - 1, h = (peer * 0x9E3779B1u) & mask;
    for (;; h = (h + 1) & mask) {
        if (!s->map[h])
            return (size_t)h | (size_t)1 << 31;
        if (s->out[s->map[h] - 1].peer == peer)
            return h;
    }
}

/* The call's entry for a peer, created on first touch. */
static size_t touch(touch_set *s, uint32_t peer, int *fresh)
{
    *fresh = 0;
    if (!s->mapped) {
        for (size_t i = 0; i < s->n; i++)
            if (s->out[i].peer == peer)
                return i;
        if (s->n == 8) {
            memset(s->map, 0, sizeof s->map);
            for (size_t i = 0; i < s->n; i++)
                s->map[touch_slot_of(s, s->out[i].peer) & 0xffff] = (uint16_t)(i + 1);
            s->mapped = 1;
        }
    }
    if (s->mapped) {
        size_t h = touch_slot_of(s, peer);
        if (!(h >> 31))
            return s->map[h] - 1;
        s->map[h & 0xffff] = (uint16_t)(s->n + 1);
    }
    size_t i = s->n++;
    memset(&s->out[i], 0, sizeof s->out[i]);
    memset(&s->extra[i], 0, sizeof s->extra[i]);
    s->out[i].peer = peer;
    *fresh = 1;
    return i;
}

/* ---------------------------------------------------------------- sealing */

VC_API size_t vc_wg_seal_batch(vc_wg_table *t, const uint8_t *in, const uint32_t *in_off,
                        const uint32_t *in_len, size_t n, int64_t peer, double now,
                        uint8_t *out, size_t stride, size_t out_cap, uint32_t *out_len,
                        vc_endpoint *out_ep, int32_t *status, int32_t *peer_of,
                        vc_wg_touch *touched, size_t touched_cap, size_t *n_touched)
{
    *n_touched = 0;
    if (n > WG_MAX_BATCH || out_cap < n || touched_cap < n || stride < VC_WG_OVERHEAD)
        return (size_t)-1;
    touch_extra extra[WG_MAX_BATCH];
    touch_set ts = {.out = touched, .extra = extra};
    double tnow = now;
    size_t sealed = 0;

    wg_batch_begin(t);
    const vc_wg_config cfg = t->cfg;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *pkt = in + in_off[i], *dst;
        size_t len = in_len[i], ip_len;
        int64_t pid = peer;
        int st = VC_WG_OK;
        if (pid < 0) {
            int fam = ip_parse(pkt, len, 1, &dst, &ip_len);
            if (!fam)
                st = VC_WG_MALFORMED;
            else if ((pid = wg_routes_lookup(&t->routes, fam, dst)) < 0)
                st = VC_WG_NO_ROUTE;
        } else if ((uint64_t)pid >= t->peer_cap || !t->peers[pid].in_use) {
            pid = -1;
            st = VC_WG_NO_ROUTE;
        }
        peer_of[i] = (int32_t)pid;
        if (st != VC_WG_OK) {
            status[i] = st;
            wg_peer_drop(t, NULL, st, 1);
            continue;
        }
        wg_peer *p = &t->peers[pid];
        int fresh;
        size_t e = touch(&ts, (uint32_t)pid, &fresh);
        touch_extra *x = &extra[e];
        if (fresh) {
            wg_spin_lock(&p->lock);
            x->kp = p->cur;
            x->ep_set = p->ep_set;
            x->ep = p->ep;
            x->room = message_room(p, tnow);
            x->check = !x->room && p->ep_set && tnow - p->pmtu_checked >= VC_WG_PMTU_CHECK;
            wg_spin_unlock(&p->lock);
        }
        size_t total = VC_WG_OVERHEAD + padded_length(len, cfg.mtu);
        wg_keypair *k = x->kp != WG_NIL ? &t->kps[x->kp] : NULL;
        uint64_t c = 0;
        /* As the Linux module (wg_xmit): a routed packet whose peer has no
         * endpoint is dropped before it could wait for a key (the caller
         * answers it with an ICMP error).  Otherwise, without a usable key
         * the packet waits for a handshake (the caller queues it); so do a
         * peer's own packets (peer >= 0: staged ones, keepalives), even while
         * the endpoint is still unknown. */
        if (peer < 0 && !x->ep_set) {
            st = VC_WG_NO_ENDPOINT;
        } else if (peer < 0 && x->room && total > x->room && !ipv6_minimum(pkt, len)) {
            st = VC_WG_PATH_MTU;    /* answered at once, key or not (the caller tells the sender) */
        } else if (!k || WG_LOAD(&k->state) != KP_LIVE || tnow - k->born >= cfg.reject_after_time) {
            st = VC_WG_NO_KEY;
        } else if (!x->ep_set) {
            st = VC_WG_NO_ENDPOINT;
        } else if (wg_is_own_datagram(t, pkt, len, &x->ep)) {
            st = VC_WG_ROUTING_LOOP;
            wg_count_loop(t, (uint32_t)pid);
        } else if (total > stride) {
            st = VC_WG_TOO_BIG;
        } else if (x->room && total > x->room && !ipv6_minimum(pkt, len)) {
            st = VC_WG_PATH_MTU;    /* a staged packet (peer >= 0) the path no longer takes */
        } else if ((c = WG_ADD(&k->send_counter, 1)) >= cfg.reject_after_messages) {
            __atomic_store_n(&k->send_counter, cfg.reject_after_messages, __ATOMIC_RELAXED);
            st = VC_WG_NO_KEY;
        }
        if (st == VC_WG_NO_KEY) {
            touched[e].flags |= VC_WG_EV_NEED_KEY;
            status[i] = st;
            continue;
        }
        if (st != VC_WG_OK) {
            status[i] = st;
            wg_peer_drop(t, p, st, 1);
            continue;
        }
        uint8_t *m = out + sealed * stride, nonce[12] = {0};
        size_t plen = total - VC_WG_OVERHEAD;
        vc_store64_le(nonce + 4, c);
        vc_store32_le(m, 4);
        vc_store32_le(m + 4, k->remote_index);
        vc_store64_le(m + 8, c);
        if (m + 16 != pkt)
            memmove(m + 16, pkt, len);
        memset(m + 16 + len, 0, plen - len);
        vc_aead_seal(m + 16, m + 16 + plen, m + 16, plen, NULL, 0, k->send_key, nonce);
        out_len[sealed] = (uint32_t)total;
        out_ep[sealed] = x->ep;
        out_ep[sealed].flags = 0;
        if (x->check && total + wg_outer_overhead(x->ep.family) > VC_WG_PMTU_CHECK_SIZE) {
            out_ep[sealed].flags = VC_EP_ALONE;
            x->check = 0;
            wg_spin_lock(&p->lock);
            p->pmtu_checked = tnow;
            wg_spin_unlock(&p->lock);
        }
        sealed++;
        status[i] = VC_WG_OK;
        vc_wg_touch *tp = &touched[e];
        tp->flags |= VC_WG_EV_SENT | (len ? VC_WG_EV_DATA_SENT : 0);
        tp->packets++;
        tp->bytes += total;
        x->inner_packets += len != 0;
        x->inner_bytes += len;
        if (c + 1 > cfg.rekey_after_messages || (k->initiator && tnow - k->born >= cfg.rekey_after_time))
            tp->flags |= VC_WG_EV_REKEY_TX;
    }
    for (size_t e = 0; e < ts.n; e++) {
        wg_peer *p = &t->peers[touched[e].peer];
        if (!touched[e].packets)
            continue;
        WG_ADD(&p->tx_packets, extra[e].inner_packets);
        WG_ADD(&p->tx_bytes, extra[e].inner_bytes);
        WG_ADD(&p->tx_wire, touched[e].bytes);
        wg_spin_lock(&p->lock);
        p->last_tx = tnow;
        wg_spin_unlock(&p->lock);
    }
    wg_batch_end(t);
    *n_touched = ts.n;
    return sealed;
}

/* ---------------------------------------------------------------- opening */

/* After a message on keypair `kp` authenticated: the first one on the peer's
 * `next` keypair confirms it (it becomes current, current becomes previous,
 * the old previous is retired); and WireGuard's initiator starts a handshake
 * when it still hears from the peer on a current keypair of its own that is
 * close to expiring (REJECT_AFTER_TIME - KEEPALIVE_TIMEOUT - REKEY_TIMEOUT).
 * Returns VC_WG_EV_* flags. */
static uint32_t after_authentic(vc_wg_table *t, wg_peer *p, uint32_t kp, double tnow, const vc_wg_config *cfg)
{
    uint32_t flags = 0;
    if (__atomic_load_n(&p->next, __ATOMIC_RELAXED) == kp) {
        uint32_t retire = WG_NIL;
        wg_spin_lock(&p->lock);
        if (p->next == kp) {
            retire = p->prev;
            p->prev = p->cur;
            p->cur = kp;
            p->next = WG_NIL;
            flags |= VC_WG_EV_CONFIRMED;
        }
        wg_spin_unlock(&p->lock);
        wg_kill_keypair(t, retire);
    }
    uint32_t cur = __atomic_load_n(&p->cur, __ATOMIC_ACQUIRE);
    if (cur != WG_NIL) {
        const wg_keypair *k = &t->kps[cur];
        if (WG_LOAD(&k->state) == KP_LIVE && k->initiator && tnow - k->born >= cfg->rekey_on_receive_age)
            flags |= VC_WG_EV_REKEY_RX;
    }
    return flags;
}

VC_API size_t vc_wg_open_batch(vc_wg_table *t, uint8_t *buf, const uint32_t *off, const uint32_t *len,
                        const vc_endpoint *ep, size_t n, double now, int32_t *status,
                        uint32_t *deliver_off, uint32_t *deliver_len,
                        uint8_t *reply, size_t reply_stride, uint32_t *reply_len,
                        vc_endpoint *reply_ep, size_t *n_reply, size_t *n_queued,
                        vc_wg_touch *touched, size_t touched_cap, size_t *n_touched)
{
    *n_reply = *n_queued = *n_touched = 0;
    if (n > WG_MAX_BATCH || touched_cap < n || reply_stride < VC_WG_COOKIE_REPLY)
        return (size_t)-1;
    touch_extra extra[WG_MAX_BATCH];
    touch_set ts = {.out = touched, .extra = extra};
    double tnow = now;
    size_t nd = 0, nr = 0, nq = 0;

    wg_batch_begin(t);
    const vc_wg_config cfg = t->cfg;
    for (size_t i = 0; i < n; i++) {
        uint8_t *m = buf + off[i];
        size_t L = len[i];
        if (L < 4 || vc_load32_le(m) != 4) {
            int hs = wg_admit(t, m, L, &ep[i], tnow, reply + nr * reply_stride);
            status[i] = hs;
            if (hs == VC_WG_HANDSHAKE) {
                nq++;
                continue;
            }
            if (hs == VC_WG_COOKIE_SENT) {
                reply_len[nr] = VC_WG_COOKIE_REPLY;
                reply_ep[nr++] = ep[i];
            }
            wg_peer_drop(t, NULL, hs, 1);
            continue;
        }
        wg_keypair *k = NULL;
        wg_peer *p = NULL;
        int st;
        if (L < VC_WG_OVERHEAD) {
            st = VC_WG_MALFORMED;
        } else if (!(k = wg_index_keypair(t, vc_load32_le(m + 4)))) {
            st = VC_WG_UNKNOWN_INDEX;
        } else {
            p = &t->peers[k->peer];
            uint64_t c = vc_load64_le(m + 8);
            size_t clen = L - VC_WG_OVERHEAD;
            uint8_t nonce[12] = {0};
            vc_store64_le(nonce + 4, c);
            if (tnow - k->born >= cfg.reject_after_time) {
                st = VC_WG_STALE_KEYPAIR;
            } else if (!replay_fresh(k, c, cfg.reject_after_messages)) {
                st = VC_WG_REPLAY;
            } else if (vc_aead_open(m + 16, m + 16, clen, m + 16 + clen, NULL, 0, k->recv_key, nonce) != VC_OK) {
                st = VC_WG_BAD_TAG;
            } else if (!replay_record(k, c, cfg.reject_after_messages)) {
                st = VC_WG_REPLAY;          /* a duplicate within this batch, or another thread's */
            } else {
                int fresh;
                size_t e = touch(&ts, k->peer, &fresh);
                vc_wg_touch *tp = &touched[e];
                touch_extra *x = &extra[e];
                tp->flags |= VC_WG_EV_AUTH;
                tp->packets++;
                tp->bytes += L;
                x->ep = ep[i];
                x->ep_set = 1;
                tp->flags |= after_authentic(t, p, (uint32_t)(k - t->kps), tnow, &cfg);
                const uint8_t *src;
                size_t ip_len;
                int fam;
                if (clen == 0) {
                    st = VC_WG_KEEPALIVE;
                } else {
                    tp->flags |= VC_WG_EV_DATA;
                    if (!(fam = ip_parse(m + 16, clen, 0, &src, &ip_len))) {
                        st = VC_WG_MALFORMED;
                    } else if (wg_routes_lookup(&t->routes, fam, src) != (int64_t)k->peer) {
                        st = VC_WG_NOT_ALLOWED;
                    } else {
                        st = VC_WG_OK;
                        x->inner_packets++;
                        x->inner_bytes += ip_len;
                        deliver_off[nd] = off[i] + VC_WG_HEADER;
                        deliver_len[nd] = (uint32_t)ip_len;
                        nd++;
                    }
                }
            }
        }
        status[i] = st;
        if (st != VC_WG_OK && st != VC_WG_KEEPALIVE)
            wg_peer_drop(t, p, st, 1);
    }
    for (size_t e = 0; e < ts.n; e++) {
        wg_peer *p = &t->peers[touched[e].peer];
        WG_ADD(&p->rx_packets, extra[e].inner_packets);
        WG_ADD(&p->rx_bytes, extra[e].inner_bytes);
        WG_ADD(&p->rx_wire, touched[e].bytes);
        wg_spin_lock(&p->lock);
        p->last_rx = tnow;
        /* the endpoint and the local address it sent to go together (the
         * source of the replies); only a new remote address is a roam */
        if (!p->ep_set || !wg_same_remote(&p->ep, &extra[e].ep))
            touched[e].flags |= VC_WG_EV_ROAMED;
        if (touched[e].flags & VC_WG_EV_ROAMED || !vc_endpoint_equal(&p->ep, &extra[e].ep)) {
            wg_peer_new_endpoint(p, &extra[e].ep);
            p->ep = extra[e].ep;
            p->ep_set = 1;
        }
        wg_spin_unlock(&p->lock);
    }
    wg_batch_end(t);
    *n_reply = nr;
    *n_queued = nq;
    *n_touched = ts.n;
    return nd;
}
