/* WireGuard transport data (message type 4) in batches: keypair table, replay
 * windows, AllowedIPs routing, sealing and opening.  See vc_wg.h. */
#include <stdlib.h>
#include "vc_internal.h"
#include "vc_wg.h"

#define REJECT_AFTER_MESSAGES 0xFFFFFFFFFFFFDFFFULL   /* 2^64 - 2^13 - 1 */
#define WINDOW_WORDS (VC_WG_WINDOW / 64)

/* ---------- receiving keypairs: open addressing on the local index ---------- */
typedef struct {
    uint32_t used, local_index, peer, _pad;
    double   expires;
    uint8_t  key[32];
    uint64_t last;                    /* greatest counter accepted */
    uint64_t bitmap[WINDOW_WORDS];
} rx_keypair;

typedef struct {
    vc_wg_peer_stats s;
    uint8_t  tx_key[32];
    double   tx_expires;
    uint32_t touched_gen;
    int32_t  in_use;
} peer_state;

typedef struct {
    uint8_t  used, family, cidr, _pad;
    uint32_t peer;
    uint8_t  addr[16];
} route;

struct vc_wg_table {
    uint32_t    max_peers;
    peer_state *peers;
    uint32_t    rx_cap, rx_count;     /* rx_cap is a power of two, at least 2 x max keypairs */
    uint32_t    rx_max;
    rx_keypair *rx;
    route      *routes;
    uint32_t    route_cap, route_count;
    uint32_t    cidr_count[2][129];   /* [0] IPv4, [1] IPv6: routes per prefix length */
    uint32_t    gen;
    uint64_t    drops[VC_WG_STATUS_COUNT];
};

static uint32_t pow2_at_least(uint32_t n) {
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

vc_wg_table *vc_wg_table_new(uint32_t max_peers, uint32_t max_keypairs) {
    if (max_peers == 0 || max_keypairs == 0 || max_keypairs > (1u << 24)) return NULL;
    vc_wg_table *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->max_peers = max_peers;
    t->rx_max = max_keypairs;
    t->rx_cap = pow2_at_least(2 * max_keypairs);
    t->route_cap = 64;
    t->peers = calloc(max_peers, sizeof *t->peers);
    t->rx = calloc(t->rx_cap, sizeof *t->rx);
    t->routes = calloc(t->route_cap, sizeof *t->routes);
    if (!t->peers || !t->rx || !t->routes) { vc_wg_table_free(t); return NULL; }
    return t;
}

void vc_wg_table_free(vc_wg_table *t) {
    if (!t) return;
    if (t->peers) { vc_wipe(t->peers, (size_t)t->max_peers * sizeof *t->peers); free(t->peers); }
    if (t->rx) { vc_wipe(t->rx, (size_t)t->rx_cap * sizeof *t->rx); free(t->rx); }
    free(t->routes);
    free(t);
}

static uint32_t rx_slot(const vc_wg_table *t, uint32_t idx) {
    return (idx * 0x9E3779B1u) & (t->rx_cap - 1);
}

static rx_keypair *rx_find(vc_wg_table *t, uint32_t idx) {
    for (uint32_t i = rx_slot(t, idx);; i = (i + 1) & (t->rx_cap - 1)) {
        rx_keypair *k = &t->rx[i];
        if (!k->used) return NULL;
        if (k->local_index == idx) return k;
    }
}

int vc_wg_rx_count(vc_wg_table *t) { return (int)t->rx_count; }

int vc_wg_rx_add(vc_wg_table *t, uint32_t idx, uint32_t peer, const uint8_t key[32], double expires) {
    if (peer >= t->max_peers) return -1;
    rx_keypair *k = rx_find(t, idx);
    if (!k) {
        if (t->rx_count >= t->rx_max) return -1;
        uint32_t i = rx_slot(t, idx);
        while (t->rx[i].used) i = (i + 1) & (t->rx_cap - 1);
        k = &t->rx[i];
        t->rx_count++;
    }
    memset(k, 0, sizeof *k);
    k->used = 1;
    k->local_index = idx;
    k->peer = peer;
    k->expires = expires;
    memcpy(k->key, key, 32);
    t->peers[peer].in_use = 1;
    return 0;
}

int vc_wg_rx_remove(vc_wg_table *t, uint32_t idx) {
    rx_keypair *k = rx_find(t, idx);
    if (!k) return -1;
    /* backward-shift deletion keeps probe chains intact without tombstones */
    uint32_t mask = t->rx_cap - 1, hole = (uint32_t)(k - t->rx);
    vc_wipe(k, sizeof *k);
    for (uint32_t j = (hole + 1) & mask; t->rx[j].used; j = (j + 1) & mask) {
        uint32_t home = rx_slot(t, t->rx[j].local_index);
        /* move j into the hole if its home is not cyclically in (hole, j] */
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            t->rx[hole] = t->rx[j];
            vc_wipe(&t->rx[j], sizeof t->rx[j]);
            hole = j;
        }
    }
    t->rx_count--;
    return 0;
}

/* RFC 6479-style window: a ring of 64-bit words; a counter more than
 * VC_WG_WINDOW - 64 behind the greatest one is too old. */
static int replay_ok(const rx_keypair *k, uint64_t c) {
    if (c >= REJECT_AFTER_MESSAGES) return 0;
    if (c > k->last) return 1;
    if (k->last - c >= VC_WG_WINDOW - 64) return 0;
    return !((k->bitmap[(c >> 6) % WINDOW_WORDS] >> (c & 63)) & 1);
}

static int replay_update(rx_keypair *k, uint64_t c) {
    if (!replay_ok(k, c)) return 0;
    if (c > k->last) {
        uint64_t cur = k->last >> 6, top = c >> 6;
        uint64_t diff = top - cur;
        if (diff > WINDOW_WORDS) diff = WINDOW_WORDS;
        for (uint64_t i = 1; i <= diff; i++) k->bitmap[(cur + i) % WINDOW_WORDS] = 0;
        k->last = c;
    }
    k->bitmap[(c >> 6) % WINDOW_WORDS] |= 1ULL << (c & 63);
    return 1;
}

/* ---------- peers ---------- */
int vc_wg_peer_reset(vc_wg_table *t, uint32_t peer) {
    if (peer >= t->max_peers) return -1;
    for (uint32_t i = 0; i < t->rx_cap;) {
        if (t->rx[i].used && t->rx[i].peer == peer) vc_wg_rx_remove(t, t->rx[i].local_index);
        else i++;
    }
    vc_wg_route_remove_peer(t, peer);
    vc_wipe(&t->peers[peer], sizeof t->peers[peer]);
    return 0;
}

int vc_wg_peer_set_endpoint(vc_wg_table *t, uint32_t peer, const vc_endpoint *ep) {
    if (peer >= t->max_peers) return -1;
    peer_state *p = &t->peers[peer];
    if (ep) { p->s.endpoint = *ep; p->s.endpoint_set = 1; }
    else { memset(&p->s.endpoint, 0, sizeof p->s.endpoint); p->s.endpoint_set = 0; }
    p->in_use = 1;
    return 0;
}

int vc_wg_peer_get(vc_wg_table *t, uint32_t peer, vc_wg_peer_stats *out) {
    if (peer >= t->max_peers) return -1;
    *out = t->peers[peer].s;
    return 0;
}

void vc_wg_table_drops(vc_wg_table *t, uint64_t out[VC_WG_STATUS_COUNT]) {
    memcpy(out, t->drops, sizeof t->drops);
}

void vc_wg_table_undrop(vc_wg_table *t, int status, uint64_t n) {
    if (status >= 0 && status < VC_WG_STATUS_COUNT && t->drops[status] >= n) t->drops[status] -= n;
}

int vc_wg_tx_set(vc_wg_table *t, uint32_t peer, uint32_t remote_index, const uint8_t key[32],
                 uint64_t counter, double expires) {
    if (peer >= t->max_peers) return -1;
    peer_state *p = &t->peers[peer];
    memcpy(p->tx_key, key, 32);
    p->s.tx_remote_index = remote_index;
    p->s.tx_counter = counter;
    p->tx_expires = expires;
    p->s.tx_valid = 1;
    p->in_use = 1;
    return 0;
}

uint64_t vc_wg_tx_counter(vc_wg_table *t, uint32_t peer) {
    return peer < t->max_peers ? t->peers[peer].s.tx_counter : 0;
}

int vc_wg_tx_set_counter(vc_wg_table *t, uint32_t peer, uint64_t counter) {
    if (peer >= t->max_peers) return -1;
    t->peers[peer].s.tx_counter = counter;
    return 0;
}

int vc_wg_tx_clear(vc_wg_table *t, uint32_t peer) {
    if (peer >= t->max_peers) return -1;
    vc_wipe(t->peers[peer].tx_key, 32);
    t->peers[peer].s.tx_valid = 0;
    return 0;
}

/* ---------- AllowedIPs: one hash probe per prefix length present ---------- */
static void mask_addr(uint8_t out[16], const uint8_t *addr, int bytes, int cidr) {
    memset(out, 0, 16);
    for (int i = 0; i < bytes; i++) {
        int bits = cidr - 8 * i;
        uint8_t m = bits >= 8 ? 0xff : bits <= 0 ? 0 : (uint8_t)(0xff << (8 - bits));
        out[i] = addr[i] & m;
    }
}

static uint32_t route_hash(int family, int cidr, const uint8_t a[16]) {
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)(family * 131 + cidr);
    for (int i = 0; i < 16; i++) h = (h ^ a[i]) * 0x100000001b3ULL;
    return (uint32_t)(h ^ (h >> 32));
}

static route *route_find(vc_wg_table *t, int family, int cidr, const uint8_t m[16], int for_insert) {
    uint32_t mask = t->route_cap - 1;
    for (uint32_t i = route_hash(family, cidr, m) & mask;; i = (i + 1) & mask) {
        route *r = &t->routes[i];
        if (!r->used) return for_insert ? r : NULL;
        if (r->family == family && r->cidr == cidr && memcmp(r->addr, m, 16) == 0) return r;
    }
}

static int route_rebuild(vc_wg_table *t, uint32_t cap, int drop_peer, uint32_t peer) {
    route *old = t->routes;
    uint32_t old_cap = t->route_cap;
    route *fresh = calloc(cap, sizeof *fresh);
    if (!fresh) return -1;
    t->routes = fresh;
    t->route_cap = cap;
    t->route_count = 0;
    memset(t->cidr_count, 0, sizeof t->cidr_count);
    for (uint32_t i = 0; i < old_cap; i++) {
        route *r = &old[i];
        if (!r->used || (drop_peer && r->peer == peer)) continue;
        *route_find(t, r->family, r->cidr, r->addr, 1) = *r;
        t->route_count++;
        t->cidr_count[r->family == 6][r->cidr]++;
    }
    free(old);
    return 0;
}

int vc_wg_route_add(vc_wg_table *t, int family, const uint8_t *addr, int cidr, uint32_t peer) {
    int bytes = family == 4 ? 4 : family == 6 ? 16 : 0;
    if (!bytes || cidr < 0 || cidr > 8 * bytes || peer >= t->max_peers) return -1;
    if (2 * (t->route_count + 1) > t->route_cap && route_rebuild(t, 2 * t->route_cap, 0, 0)) return -1;
    uint8_t m[16];
    mask_addr(m, addr, bytes, cidr);
    route *r = route_find(t, family, cidr, m, 1);
    if (!r->used) {
        r->used = 1; r->family = (uint8_t)family; r->cidr = (uint8_t)cidr;
        memcpy(r->addr, m, 16);
        t->route_count++;
        t->cidr_count[family == 6][cidr]++;
    }
    r->peer = peer;   /* an allowed IP moves to the peer that claims it last */
    t->peers[peer].in_use = 1;
    return 0;
}

int vc_wg_route_remove_peer(vc_wg_table *t, uint32_t peer) {
    return route_rebuild(t, t->route_cap, 1, peer);
}

int vc_wg_route_clear(vc_wg_table *t) {
    memset(t->routes, 0, (size_t)t->route_cap * sizeof *t->routes);
    memset(t->cidr_count, 0, sizeof t->cidr_count);
    t->route_count = 0;
    return 0;
}

static int route_lookup(vc_wg_table *t, int family, const uint8_t *addr) {
    int v6 = family == 6, bytes = v6 ? 16 : 4;
    uint8_t m[16];
    for (int cidr = 8 * bytes; cidr >= 0; cidr--) {
        if (!t->cidr_count[v6][cidr]) continue;
        mask_addr(m, addr, bytes, cidr);
        route *r = route_find(t, family, cidr, m, 0);
        if (r) return (int)r->peer;
    }
    return -1;
}

int vc_wg_route_lookup(vc_wg_table *t, int family, const uint8_t *addr) {
    if (family != 4 && family != 6) return -1;
    return route_lookup(t, family, addr);
}

/* The IP length and the address at `which` (12 = IPv4 source, 16 = IPv4
 * destination; IPv6: 8 and 24).  Returns the family or 0 if malformed. */
static int ip_parse(const uint8_t *p, size_t len, int dst, const uint8_t **addr, size_t *ip_len) {
    if (len >= 20 && (p[0] >> 4) == 4) {
        size_t tot = ((size_t)p[2] << 8) | p[3];
        if (tot < 20 || tot > len) return 0;
        *ip_len = tot;
        *addr = p + (dst ? 16 : 12);
        return 4;
    }
    if (len >= 40 && (p[0] >> 4) == 6) {
        size_t tot = 40 + (((size_t)p[4] << 8) | p[5]);
        if (tot > len) return 0;
        *ip_len = tot;
        *addr = p + (dst ? 24 : 8);
        return 6;
    }
    return 0;
}

/* ---------- sealing ---------- */
static int seal_one(peer_state *p, const uint8_t *in, size_t len, uint32_t mtu, double now,
                    uint8_t *out, size_t room, uint32_t *out_len) {
    if (!p->s.tx_valid || now >= p->tx_expires) return VC_WG_NO_KEY;
    if (p->s.tx_counter >= REJECT_AFTER_MESSAGES) return VC_WG_EXPIRED;
    size_t padded = (len + 15) & ~(size_t)15;
    if (padded > mtu && len <= mtu) padded = mtu;
    if (padded < len) padded = len;
    if (VC_WG_OVERHEAD + padded > room) return VC_WG_MALFORMED;
    uint64_t c = p->s.tx_counter++;
    uint8_t nonce[12] = {0};
    vc_store64_le(nonce + 4, c);
    vc_store32_le(out, 4);
    vc_store32_le(out + 4, p->s.tx_remote_index);
    vc_store64_le(out + 8, c);
    if (out + 16 != in) memmove(out + 16, in, len);
    memset(out + 16 + len, 0, padded - len);
    vc_aead_seal(out + 16, out + 16 + padded, out + 16, padded, NULL, 0, p->tx_key, nonce);
    *out_len = (uint32_t)(VC_WG_OVERHEAD + padded);
    p->s.tx_packets += len != 0;
    p->s.tx_bytes += len;
    p->s.tx_wire_bytes += *out_len;
    p->s.last_tx = now;
    return VC_WG_OK;
}

size_t vc_wg_seal_batch(vc_wg_table *t, const uint8_t *in, const uint32_t *in_off,
                        const uint32_t *in_len, size_t n, uint32_t mtu, double now,
                        uint8_t *out, size_t stride, uint32_t *out_len, vc_endpoint *out_ep,
                        int32_t *status, int32_t *peer, uint32_t *touched, size_t *n_touched) {
    size_t ok = 0, nt = 0;
    uint32_t gen = ++t->gen;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *pkt = in + in_off[i], *dst;
        size_t ip_len;
        peer[i] = -1;
        int fam = ip_parse(pkt, in_len[i], 1, &dst, &ip_len);
        int st;
        if (!fam) {
            st = VC_WG_MALFORMED;
        } else {
            int pid = route_lookup(t, fam, dst);
            peer[i] = pid;
            if (pid < 0) {
                st = VC_WG_NO_ROUTE;
            } else if (!t->peers[pid].s.endpoint_set) {
                st = VC_WG_NO_ENDPOINT;
            } else {
                peer_state *p = &t->peers[pid];
                st = seal_one(p, pkt, in_len[i], mtu, now, out + ok * stride, stride, &out_len[ok]);
                if (st == VC_WG_OK) {
                    out_ep[ok] = p->s.endpoint;
                    if (p->touched_gen != gen) { p->touched_gen = gen; touched[nt++] = (uint32_t)pid; }
                }
            }
        }
        status[i] = st;
        if (st == VC_WG_OK) ok++;
        else if (peer[i] >= 0 && st != VC_WG_NO_KEY) t->peers[peer[i]].s.drops[st]++;
        else if (st != VC_WG_NO_KEY) t->drops[st]++;
    }
    *n_touched = nt;
    return ok;
}

int vc_wg_seal_for_peer(vc_wg_table *t, uint32_t peer, const uint8_t *in, size_t len,
                        uint32_t mtu, double now, uint8_t *out, uint32_t *out_len) {
    if (peer >= t->max_peers) return VC_WG_NO_ROUTE;
    return seal_one(&t->peers[peer], in, len, mtu, now, out, VC_WG_OVERHEAD + len + 16, out_len);
}

/* ---------- opening ---------- */
size_t vc_wg_open_batch(vc_wg_table *t, uint8_t *buf, const uint32_t *off, const uint32_t *len,
                        const vc_endpoint *ep, size_t n, double now, int32_t *status,
                        uint32_t *deliver_off, uint32_t *deliver_len,
                        uint32_t *other, size_t *n_other, uint32_t *touched, size_t *n_touched) {
    size_t nd = 0, no = 0, nt = 0;
    uint32_t gen = ++t->gen;
    for (size_t i = 0; i < n; i++) {
        uint8_t *m = buf + off[i];
        size_t L = len[i];
        int st;
        peer_state *p = NULL;
        if (L < 4 || vc_load32_le(m) != 4) {
            status[i] = VC_WG_NOT_DATA;
            other[no++] = (uint32_t)i;
            continue;
        }
        rx_keypair *k;
        if (L < VC_WG_OVERHEAD) {
            st = VC_WG_MALFORMED;
        } else if (!(k = rx_find(t, vc_load32_le(m + 4)))) {
            st = VC_WG_UNKNOWN_INDEX;
        } else {
            uint64_t c = vc_load64_le(m + 8);
            size_t clen = L - VC_WG_OVERHEAD;
            p = &t->peers[k->peer];
            if (now >= k->expires) {
                st = VC_WG_EXPIRED;
            } else if (!replay_ok(k, c)) {
                st = VC_WG_REPLAY;
            } else {
                uint8_t nonce[12] = {0};
                vc_store64_le(nonce + 4, c);
                if (vc_aead_open(m + 16, m + 16, clen, m + 16 + clen, NULL, 0, k->key, nonce) != VC_OK) {
                    st = VC_WG_BAD_TAG;
                } else if (!replay_update(k, c)) {
                    st = VC_WG_REPLAY;             /* a duplicate within this batch */
                } else {
                    /* authenticated: roaming, liveness, and the inner packet */
                    p->s.endpoint = ep[i];
                    p->s.endpoint_set = 1;
                    p->s.last_rx = now;
                    p->s.last_rx_index = k->local_index;
                    p->s.rx_wire_bytes += L;
                    if (p->touched_gen != gen) { p->touched_gen = gen; touched[nt++] = k->peer; }
                    const uint8_t *src;
                    size_t ip_len;
                    int fam;
                    if (clen == 0) {
                        st = VC_WG_KEEPALIVE;
                    } else if (!(fam = ip_parse(m + 16, clen, 0, &src, &ip_len))) {
                        st = VC_WG_MALFORMED;
                    } else if (route_lookup(t, fam, src) != (int)k->peer) {
                        st = VC_WG_NOT_ALLOWED;
                    } else {
                        st = VC_WG_OK;
                        p->s.rx_packets++;
                        p->s.rx_bytes += ip_len;
                        deliver_off[nd] = off[i] + 16;
                        deliver_len[nd] = (uint32_t)ip_len;
                        nd++;
                    }
                }
            }
        }
        status[i] = st;
        if (st != VC_WG_OK && st != VC_WG_KEEPALIVE) {
            if (p) p->s.drops[st]++;
            else t->drops[st]++;
        }
    }
    *n_other = no;
    *n_touched = nt;
    return nd;
}
