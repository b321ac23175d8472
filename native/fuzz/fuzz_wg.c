/* libFuzzer harness for vc_wg_open_batch (native/wg_data.c, the session table,
 * and native/wg_admit.c, the cheap checks of handshake messages).
 *
 * A fresh table per input: 3 peers with AllowedIPs, 5 keypairs with known
 * receiving keys (one of them expired, one a responder's waiting for its
 * confirmation).  The input describes a batch of datagrams;
 * besides raw bytes, a record can ask the harness to seal a packet with a known
 * keypair (optionally tampered), or to repeat or cut an earlier datagram, so
 * mutations reach the authenticated paths.  The batch lies in one heap block
 * that ends exactly at the last datagram (ASan catches reads past it).  Checks:
 *   - statuses are in range; each touched peer once; counts within bounds;
 *   - a datagram that is not transport data is MALFORMED exactly when its size
 *     is not its type's (148, 92, 64), BAD_MAC1 exactly when an initiation's
 *     or response's mac1 is wrong (recomputed here); a COOKIE_SENT one has
 *     a cookie reply (64 bytes, type 3, its sender index) that opens under
 *     HASH("cookie--" || public key) with its mac1 as AAD; what is queued
 *     (HANDSHAKE) comes back from vc_wg_handshakes_take byte for byte,
 *     newest first, the oldest dropped past the queue's 16 slots; and sent
 *     again with the mac2 of the cookie it got, no message gets another
 *     cookie reply;
 *   - every delivered packet lies inside its datagram, which has status OK, and
 *     the datagram (as received) authenticates under the key of its index with
 *     the generic kernels: nothing is delivered that a known key did not seal;
 *     the plaintext delivered is what that open gives, its length the IP
 *     length, its source inside the peer's AllowedIPs;
 *   - no (index, counter) is delivered or accepted as a keepalive twice;
 *   - a datagram that fails authentication is left byte-for-byte unchanged;
 *   - an expired keypair delivers nothing.
 * The kernels used for the batch are chosen by the input.
 *
 * Input: byte 0 kernel choice, then records until the end (at most 64):
 *   r & 3 == 0  raw:    u16 length, bytes (r & 4: a handshake message instead: type
 *               1 + byte % 3, its exact size, receiver index byte % 4 of the known
 *               ones, mac1 right unless r & 8, the rest from the input)
 *   r & 3 == 1  sealed: key slot, u16 counter, shift, ip-kind, u16 length, payload
 *               (r & 4: flip bit (byte) of the result at u16 position; r & 8: no padding)
 *   r & 3 == 2  repeat: the datagram at (byte % count) again
 *   r & 3 == 3  cut:    the datagram at (byte % count), cut to (u16 % its length)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vpncrypt.h"
#include "vc_wg.h"
#include "wg_internal.h"        /* wg_blake2s, to recompute mac1 */

#define MAXD 64
#define MAXLEN 2048
#define NOW 100.0

/* expires: whether the keypair is past REJECT_AFTER_TIME at NOW (installed
 * long before); initiator 0: installed as a responder (next, until confirmed). */
typedef struct { uint32_t index, peer; int expires, initiator; } slot_t;
static const slot_t SLOTS[5] = {
    {1, 0, 0, 1}, {2, 1, 0, 1}, {0x01000000u, 2, 0, 0}, {0xFFFFFFFFu, 0, 0, 1}, {7, 1, 1, 1},
};
#define NSLOTS 5

static void slot_key(int s, uint8_t key[32])
{
    for (int j = 0; j < 32; j++) key[j] = (uint8_t)(s * 37 + j * 11 + 1);
}

/* Inner source addresses the sealed records choose from (some outside every route). */
static const uint8_t SRC4[6][4] = {
    {10, 0, 0, 1}, {10, 0, 0, 200}, {10, 1, 2, 3}, {192, 168, 5, 5}, {10, 2, 0, 1}, {8, 8, 8, 8},
};
static const uint8_t SRC6[2][16] = {
    {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    {0xfd, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
};

static void fail(const char *what, size_t i)
{
    fprintf(stderr, "fuzz_wg: %s (datagram %zu)\n", what, i);
    abort();
}
#define CHECK(c, what, i) do { if (!(c)) fail(what, i); } while (0)

typedef struct {
    const uint8_t *d;
    size_t n, pos;
} rd_t;
static unsigned rbyte(rd_t *r) { return r->pos < r->n ? r->d[r->pos++] : 0; }
static unsigned ru16(rd_t *r) { unsigned a = rbyte(r); return a | rbyte(r) << 8; }

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The device's public key, and indices a handshake message may name: a
 * reservation (a handshake in flight), a keypair, and two nobody holds. */
static const uint8_t PUBLIC[32] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
static const uint32_t HS_INDEX[4] = {0x55, 1, 0x12345678u, 0};
#define QUEUE 16

static void mac1_key(uint8_t key[32], const char *label)
{
    uint8_t in[40];
    memcpy(in, label, 8);
    memcpy(in + 8, PUBLIC, 32);
    wg_blake2s(key, 32, NULL, 0, in, sizeof in);
}

static vc_wg_table *make_table(void)
{
    /* a small queue, under load from 4 waiting */
    vc_wg_config cfg = {
        .reject_after_time = 180.0,
        .rekey_after_time = 120.0,
        .rekey_on_receive_age = 165.0,
        .reject_after_messages = 0xFFFFFFFFFFFFDFFFULL,
        .rekey_after_messages = 1ULL << 60,
        .mtu = 1420,
        .handshake_queue = QUEUE,
        .under_load_depth = 4,   /* the fields left out are 0: WireGuard's values */
    };
    vc_wg_table *t = vc_wg_table_new(&cfg);
    if (!t) abort();
    static const uint8_t seed[32] = {1, 2, 3};
    vc_wg_set_public_key(t, PUBLIC);
    vc_wg_seed(t, seed);
    for (int p = 0; p < 3; p++) if (vc_wg_peer_add(t) != p) abort();
    if (vc_wg_index_reserve(t, HS_INDEX[0], 0)) abort();
    uint8_t key[32], other[32] = {0};
    /* the expired one first, so that peer 1's live keypair is current */
    static const int order[NSLOTS] = {4, 0, 1, 2, 3};
    for (int k = 0; k < NSLOTS; k++) {
        int s = order[k];
        slot_key(s, key);
        if (vc_wg_index_reserve(t, SLOTS[s].index, SLOTS[s].peer)) abort();
        if (vc_wg_install(t, SLOTS[s].peer, SLOTS[s].index, 99, other, key, SLOTS[s].initiator,
                          SLOTS[s].expires ? NOW - 200.0 : NOW)) abort();
    }
    static const uint8_t n0[4] = {10, 0, 0, 0}, n1[4] = {10, 1, 0, 0}, n2[4] = {192, 168, 0, 0};
    static const uint8_t v6[16] = {0xfd};
    vc_wg_route_add(t, 4, n0, 24, 0);
    vc_wg_route_add(t, 6, v6, 64, 0);
    vc_wg_route_add(t, 4, n1, 16, 1);
    vc_wg_route_add(t, 4, n2, 16, 2);
    return t;
}

/* Seal `pt` (len bytes) as a type-4 message for slot s, counter c, into out. */
static size_t seal_msg(uint8_t *out, int s, uint64_t c, const uint8_t *pt, size_t len)
{
    uint8_t key[32], nonce[12] = {0};
    slot_key(s, key);
    memcpy(out, "\x04\0\0\0", 4);
    for (int i = 0; i < 4; i++) out[4 + i] = (uint8_t)(SLOTS[s].index >> (8 * i));
    for (int i = 0; i < 8; i++) { out[8 + i] = (uint8_t)(c >> (8 * i)); nonce[4 + i] = out[8 + i]; }
    vc_aead_seal(out + 16, out + 16 + len, pt, len, NULL, 0, key, nonce);
    return len + 32;
}

static int key_slot(uint32_t index)
{
    for (int s = 0; s < NSLOTS; s++) if (SLOTS[s].index == index) return s;
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd_t r = {data, size, 0};
    static uint8_t dg[MAXD][MAXLEN + 64];
    static size_t dlen[MAXD];
    size_t n = 0;
    unsigned ksel = rbyte(&r);

    /* build the datagrams with the generic kernels */
    int c0 = vc_chacha_impl_active(), p0 = vc_poly1305_impl_active();
    vc_chacha_impl_select(0);
    vc_poly1305_impl_select(0);
    while (r.pos < r.n && n < MAXD) {
        unsigned rec = rbyte(&r);
        uint8_t *d = dg[n];
        size_t L = 0;
        switch (rec & 3) {
        case 0: {
            if (rec & 4) {
                unsigned type = 1 + rbyte(&r) % 3;
                uint32_t index = HS_INDEX[rbyte(&r) % 4];
                L = type == 1 ? 148 : type == 2 ? 92 : 64;
                memset(d, 0, L);
                size_t have = r.n - r.pos < L ? r.n - r.pos : L;
                memcpy(d, r.d + r.pos, have);
                r.pos += have;
                memcpy(d, "\0\0\0\0", 4);
                d[0] = (uint8_t)type;
                if (type > 1)
                    for (int b = 0; b < 4; b++) d[(type == 2 ? 8 : 4) + b] = (uint8_t)(index >> (8 * b));
                if (type < 3 && !(rec & 8)) {
                    uint8_t k[32];
                    size_t m1 = type == 1 ? 116 : 60;
                    mac1_key(k, "mac1----");
                    wg_blake2s(d + m1, 16, k, 32, d, m1);
                }
                break;
            }
            size_t want = ru16(&r) % (MAXLEN + 1);
            L = r.n - r.pos < want ? r.n - r.pos : want;
            memcpy(d, r.d + r.pos, L);
            r.pos += L;
            break;
        }
        case 1: {
            int s = (int)(rbyte(&r) % NSLOTS);
            uint64_t c = ru16(&r);
            c <<= rbyte(&r) % 56;
            unsigned kind = rbyte(&r);
            size_t want = ru16(&r) % 1500;
            size_t plen = r.n - r.pos < want ? r.n - r.pos : want;
            uint8_t pt[MAXLEN];
            size_t ip = 0;
            if ((kind & 3) == 0 || (kind & 3) == 1) {          /* IPv4 */
                ip = 20 + plen;
                memset(pt, 0, 20);
                pt[0] = 0x45;
                pt[2] = (uint8_t)(ip >> 8); pt[3] = (uint8_t)ip;
                memcpy(pt + 12, SRC4[(kind >> 2) % 6], 4);
                memcpy(pt + 16, SRC4[0], 4);
                memcpy(pt + 20, r.d + r.pos, plen);
                if (kind & 1) { pt[2] ^= (uint8_t)(kind >> 5); }   /* a lying total length */
            } else if ((kind & 3) == 2) {                       /* IPv6 */
                ip = 40 + plen;
                memset(pt, 0, 40);
                pt[0] = 0x60;
                pt[4] = (uint8_t)(plen >> 8); pt[5] = (uint8_t)plen;
                memcpy(pt + 8, SRC6[(kind >> 2) & 1], 16);
                memcpy(pt + 24, SRC6[0], 16);
                memcpy(pt + 40, r.d + r.pos, plen);
            } else {                                            /* raw (or a keepalive) */
                ip = plen;
                memcpy(pt, r.d + r.pos, plen);
            }
            r.pos += plen;
            size_t padded = (rec & 8) ? ip : (ip + 15) & ~(size_t)15;
            memset(pt + ip, 0, padded - ip);
            L = seal_msg(d, s, c, pt, padded);
            if (rec & 4) {
                unsigned at = ru16(&r) % L, bit = rbyte(&r) & 7;
                d[at] ^= (uint8_t)(1u << bit);
            }
            break;
        }
        case 2:
        case 3: {
            if (!n) continue;
            size_t j = rbyte(&r) % n;
            L = dlen[j];
            memcpy(d, dg[j], L);
            if ((rec & 3) == 3) L = L ? ru16(&r) % L : 0;
            break;
        }
        }
        dlen[n++] = L;
    }

    /* one heap block ending exactly at the last byte */
    size_t total = 0;
    uint32_t off[MAXD], len[MAXD];
    for (size_t i = 0; i < n; i++) { off[i] = (uint32_t)total; len[i] = (uint32_t)dlen[i]; total += dlen[i]; }
    uint8_t *buf = malloc(total ? total : 1);
    uint8_t *orig = malloc(total ? total : 1);
    if (!buf || !orig) abort();
    for (size_t i = 0; i < n; i++) memcpy(buf + off[i], dg[i], dlen[i]);
    memcpy(orig, buf, total);
    vc_endpoint ep[MAXD];
    memset(ep, 0, sizeof ep);
    for (size_t i = 0; i < n; i++) {
        ep[i].family = 4;
        ep[i].addr[0] = 10;
        ep[i].addr[3] = (uint8_t)(i % 3);     /* three sources, many ports */
        ep[i].port = (uint16_t)(1000 + i);
    }

    /* run the batch with the chosen kernels */
    int nc = vc_chacha_impl_count(), np = vc_poly1305_impl_count();
    int ci = (int)(ksel % (unsigned)nc), pi = (int)((ksel >> 4) % (unsigned)np);
    if (!vc_chacha_impl_available(ci)) ci = 0;
    if (!vc_poly1305_impl_available(pi)) pi = 0;
    vc_chacha_impl_select(ci);
    vc_poly1305_impl_select(pi);
    vc_wg_table *t = make_table();
    int32_t status[MAXD];
    uint32_t doff[MAXD], dln[MAXD], rlen[MAXD];
    static uint8_t replies[MAXD][64];
    vc_endpoint rep[MAXD];
    vc_wg_touch touched[MAXD];
    size_t n_reply = 99, n_queued = 99, n_touched = 99;
    size_t nd = vc_wg_open_batch(t, buf, off, len, ep, n, NOW, status, doff, dln, replies[0], 64,
                                 rlen, rep, &n_reply, &n_queued, touched, MAXD, &n_touched);
    vc_chacha_impl_select(0);
    vc_poly1305_impl_select(0);

    if (getenv("FUZZ_WG_VERBOSE")) {   /* for checking what the seeds reach */
        fprintf(stderr, "fuzz_wg: %zu datagrams, %zu delivered, statuses:", n, nd);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", status[i]);
        fprintf(stderr, "\n");
    }
    CHECK(nd <= n && n_reply <= n && n_queued <= n && n_touched <= 3, "counts out of range", 0);
    size_t o = 0, q = 0, q2 = 0, delivered = 0;
    size_t queued_at[2 * MAXD], again_at[MAXD];     /* the batch's, then the second tries */
    uint8_t ck[32], cookie_key[32];
    mac1_key(ck, "mac1----");
    mac1_key(cookie_key, "cookie--");
    uint64_t seen_ctr[MAXD];
    uint32_t seen_idx[MAXD];
    size_t n_seen = 0;
    for (size_t i = 0; i < n; i++) {
        int st = status[i];
        CHECK(st >= 0 && st < VC_WG_STATUS_COUNT && st != VC_WG_NO_ROUTE && st != VC_WG_NO_KEY
              && st != VC_WG_NO_ENDPOINT, "status out of range", i);
        const uint8_t *m = orig + off[i];
        int is_data = len[i] >= 4 && le32(m) == 4;
        if (!is_data) {
            unsigned type = len[i] >= 4 ? le32(m) : 0;
            size_t want = type == 1 ? 148 : type == 2 ? 92 : type == 3 ? 64 : 0;
            CHECK(memcmp(buf + off[i], m, len[i]) == 0, "a handshake message was modified", i);
            CHECK((st == VC_WG_MALFORMED) == (!want || len[i] != want), "size check", i);
            if (st == VC_WG_MALFORMED)
                continue;
            if (type < 3) {
                size_t m1 = type == 1 ? 116 : 60;
                uint8_t mac[16];
                wg_blake2s(mac, 16, ck, 32, m, m1);
                CHECK((st == VC_WG_BAD_MAC1) == (memcmp(mac, m + m1, 16) != 0), "mac1 check", i);
                if (st == VC_WG_COOKIE_SENT) {
                    const uint8_t *rp = replies[o];
                    uint8_t cookie[16];
                    CHECK(o < n_reply && rlen[o] == 64 && rep[o].port == ep[i].port, "no reply", i);
                    CHECK(le32(rp) == 3 && memcmp(rp + 4, m + 4, 4) == 0, "reply header", i);
                    CHECK(vc_xaead_open(cookie, rp + 32, 16, rp + 48, m + m1, 16, cookie_key, rp + 8)
                          == VC_OK, "a cookie reply that does not open", i);
                    /* the same message with the mac2 of that cookie: no second reply */
                    uint8_t again[148];
                    memcpy(again, m, len[i]);
                    wg_blake2s(again + m1 + 16, 16, cookie, 16, again, m1 + 16);
                    uint8_t r2[64];
                    uint32_t one_off = 0, one_len = len[i], rl2, dl2, do2;
                    int32_t st2;
                    vc_endpoint ep2;
                    size_t nr2, nq2, nt2;
                    vc_wg_touch t2[1];
                    vc_wg_open_batch(t, again, &one_off, &one_len, &ep[i], 1, NOW, &st2, &do2, &dl2,
                                     r2, 64, &rl2, &ep2, &nr2, &nq2, t2, 1, &nt2);
                    CHECK(st2 != VC_WG_COOKIE_SENT && nr2 == 0, "a valid mac2 got a cookie reply", i);
                    CHECK(st2 == VC_WG_HANDSHAKE || st2 == VC_WG_RATE_LIMITED ||
                          st2 == VC_WG_UNKNOWN_INDEX, "a valid mac2 refused", i);
                    if (st2 == VC_WG_HANDSHAKE) {
                        memcpy(dg[i], again, len[i]);    /* queued after the batch's */
                        again_at[q2++] = MAXD + i;
                    }
                    o++;
                }
            }
            CHECK(st == VC_WG_HANDSHAKE || st == VC_WG_BAD_MAC1 || st == VC_WG_COOKIE_SENT ||
                  st == VC_WG_UNKNOWN_INDEX, "a handshake status out of range", i);
            if (st == VC_WG_HANDSHAKE) {
                if (type == 2)
                    CHECK(le32(m + 8) == HS_INDEX[0], "a response queued for a non-reserved index", i);
                if (type == 3)
                    CHECK(key_slot(le32(m + 4)) >= 0 || le32(m + 4) == HS_INDEX[0],
                          "a cookie reply queued for an unknown index", i);
                queued_at[q++] = i;
            }
            continue;
        }
        int authed = st == VC_WG_OK || st == VC_WG_KEEPALIVE || st == VC_WG_NOT_ALLOWED
                     || (st == VC_WG_MALFORMED && len[i] >= 32);
        if (!authed) {
            /* unauthenticated, or refused before authentication: untouched */
            CHECK(memcmp(buf + off[i], m, len[i]) == 0, "a refused datagram was modified", i);
            continue;
        }
        /* authenticated: it must open under its index's key */
        CHECK(len[i] >= 32, "a short datagram authenticated", i);
        int s = key_slot(le32(m + 4));
        CHECK(s >= 0, "an unknown index authenticated", i);
        CHECK(!SLOTS[s].expires, "an expired keypair authenticated", i);
        uint64_t c = le64(m + 8);
        for (size_t k = 0; k < n_seen; k++)
            CHECK(!(seen_idx[k] == SLOTS[s].index && seen_ctr[k] == c), "a counter accepted twice", i);
        seen_idx[n_seen] = SLOTS[s].index;
        seen_ctr[n_seen++] = c;
        uint8_t key[32], nonce[12] = {0};
        slot_key(s, key);
        memcpy(nonce + 4, m + 8, 8);
        size_t clen = len[i] - 32;
        uint8_t *pt = malloc(clen ? clen : 1);
        CHECK(vc_aead_open(pt, m + 16, clen, m + 16 + clen, NULL, 0, key, nonce) == VC_OK,
              "delivered/accepted a datagram no known key sealed", i);
        CHECK(memcmp(buf + off[i] + 16, pt, clen) == 0, "opened plaintext differs from generic", i);
        CHECK((st == VC_WG_KEEPALIVE) == (clen == 0), "keepalive status vs length", i);
        if (st == VC_WG_OK) {
            CHECK(delivered < nd && doff[delivered] == off[i] + 16, "delivery list out of order", i);
            size_t dl = dln[delivered++];
            CHECK(dl >= 20 && dl <= clen, "delivered length outside the datagram", i);
            int v = pt[0] >> 4;
            size_t ip_len = v == 4 ? ((size_t)pt[2] << 8 | pt[3]) : 40 + ((size_t)pt[4] << 8 | pt[5]);
            CHECK((v == 4 || v == 6) && ip_len == dl, "delivered length is not the IP length", i);
            int owner = (int)vc_wg_route_lookup(t, v, pt + (v == 4 ? 12 : 8));
            CHECK(owner == (int)SLOTS[s].peer, "delivered a packet from outside the peer's AllowedIPs", i);
        }
        free(pt);
    }
    CHECK(o == n_reply, "replies without a COOKIE_SENT datagram", 0);
    CHECK(delivered == nd, "more deliveries than OK datagrams", 0);
    /* the queue: what went in, newest first, the 16 newest: the batch's own,
     * then the second tries with mac2 */
    for (size_t k = 0; k < q2; k++)
        queued_at[q++] = again_at[k];
    static uint8_t taken[MAXD * 2][VC_WG_HANDSHAKE_MAX];
    uint32_t tlen[MAXD * 2];
    vc_endpoint tep[MAXD * 2];
    size_t nt = vc_wg_handshakes_take(t, taken[0], tlen, tep, MAXD * 2);
    CHECK(nt == (q < QUEUE ? q : QUEUE), "the queue holds a wrong number", 0);
    for (size_t k = 0; k < nt; k++) {
        size_t at = queued_at[q - 1 - k], i = at >= MAXD ? at - MAXD : at;
        const uint8_t *want = at >= MAXD ? dg[i] : orig + off[i];
        CHECK(tlen[k] == len[i] && memcmp(taken[k], want, len[i]) == 0, "the queue changed a message", i);
        CHECK(tep[k].port == ep[i].port, "the queue changed a source", i);
    }
    for (size_t a = 0; a < n_touched; a++) {
        CHECK(touched[a].peer < 3, "touched a peer that does not exist", a);
        CHECK(touched[a].flags & VC_WG_EV_AUTH, "touched without an authenticated message", a);
        for (size_t b = 0; b < a; b++) CHECK(touched[a].peer != touched[b].peer, "a peer touched twice", a);
    }
    /* peer 2's responder keypair is current after a message on it authenticated */
    vc_wg_peer_stats ps;
    vc_wg_peer_get(t, 2, &ps, NOW);
    int confirmed = 0;
    for (size_t a = 0; a < n_touched; a++)
        if (touched[a].peer == 2) confirmed = (touched[a].flags & VC_WG_EV_CONFIRMED) != 0;
    CHECK(confirmed == (ps.current.valid && ps.current.local_index == 0x01000000u),
          "confirmation flag and the table disagree", 0);
    vc_wg_table_free(t);
    free(orig);
    free(buf);
    vc_chacha_impl_select(c0);
    vc_poly1305_impl_select(p0);
    return 0;
}
