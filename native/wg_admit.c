/* Handshake messages on the receive batch path: the checks that need no
 * Noise state (sizes, mac1, and under load mac2 with a cookie reply and the
 * per-source rate limit), and the bounded queue the protocol core takes them
 * from.  One owner: the cookie secret, the under-load state and the rate
 * limiter live here and nowhere else.  See vc_wg.h for the rules. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <sys/random.h>
#include "wg_internal.h"

#define MSG_INITIATION   1
#define MSG_RESPONSE     2
#define MSG_COOKIE_REPLY 3
#define INITIATION_LEN 148
#define RESPONSE_LEN    92
#define INIT_MAC1      116
#define RESP_MAC1       60

/* ---------------------------------------------------------------- config */

void wg_config_defaults(vc_wg_config *c)
{
    if (!c->handshake_queue)
        c->handshake_queue = 1024;          /* wireguard-go's QueueHandshakeSize */
    if (!c->under_load_depth)
        c->under_load_depth = 128;          /* an eighth of it */
    if (!c->ratelimit_sources)
        c->ratelimit_sources = 65536;
    if (c->under_load_hold == 0)
        c->under_load_hold = 1.0;           /* UnderLoadAfterTime */
    if (c->cookie_secret_age == 0)
        c->cookie_secret_age = 120.0;       /* COOKIE_SECRET_MAX_AGE */
    if (c->ratelimit_rate == 0)
        c->ratelimit_rate = 20.0;           /* packetsPerSecond */
    if (c->ratelimit_burst == 0)
        c->ratelimit_burst = 5.0;           /* packetsBurstable */
}

/* ---------------------------------------------------------------- random bytes */

/* 32 bytes of BLAKE2s(key = seed, counter): the cookie secret and the reply
 * nonces.  The seed comes from getrandom (or a test). */
static void drbg(wg_admit_state *a, uint8_t out[32])
{
    uint8_t ctr[8];
    vc_store64_le(ctr, a->drbg_counter++);
    wg_blake2s(out, 32, a->drbg_key, 32, ctr, sizeof ctr);
}

VC_API void vc_wg_seed(vc_wg_table *t, const uint8_t seed[32])
{
    wg_admit_state *a = &t->admit;
    pthread_mutex_lock(&a->lock);
    memcpy(a->drbg_key, seed, 32);
    a->drbg_counter = 0;
    a->secret_set = 0;
    pthread_mutex_unlock(&a->lock);
}

/* ---------------------------------------------------------------- life */

static int queue_alloc(wg_admit_state *a, uint32_t cap)
{
    wg_hs_slot *q = calloc(cap, sizeof *q);
    if (!q)
        return -1;
    free(a->q);
    a->q = q;
    a->q_cap = cap;
    a->q_head = a->q_count = 0;
    return 0;
}

int wg_admit_init(vc_wg_table *t)
{
    wg_admit_state *a = &t->admit;
    if (pthread_mutex_init(&a->lock, NULL))
        return -1;
    a->load_until = -INFINITY;
    a->rl_last_prune = 0.0;
    size_t got = 0;
    while (got < sizeof a->drbg_key) {
        ssize_t r = getrandom(a->drbg_key + got, sizeof a->drbg_key - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)r;
    }
    return queue_alloc(a, t->cfg.handshake_queue);
}

void wg_admit_free(vc_wg_table *t)
{
    wg_admit_state *a = &t->admit;
    if (a->q) {
        vc_wipe(a->q, (size_t)a->q_cap * sizeof *a->q);
        free(a->q);
    }
    free(a->rl);
    free(a->rl_buckets);
    vc_wipe(a->secret, sizeof a->secret);
    vc_wipe(a->drbg_key, sizeof a->drbg_key);
    pthread_mutex_destroy(&a->lock);
}

int wg_admit_configure(vc_wg_table *t, const vc_wg_config *cfg)
{
    wg_admit_state *a = &t->admit;
    int rc = 0;
    pthread_mutex_lock(&a->lock);
    if (cfg->handshake_queue != a->q_cap)
        rc = queue_alloc(a, cfg->handshake_queue);
    if (!rc && cfg->ratelimit_sources != t->cfg.ratelimit_sources) {
        free(a->rl);
        free(a->rl_buckets);
        a->rl = NULL;
        a->rl_buckets = NULL;
        a->rl_count = a->rl_cap = 0;
    }
    pthread_mutex_unlock(&a->lock);
    return rc;
}

VC_API void vc_wg_set_public_key(vc_wg_table *t, const uint8_t *public_key)
{
    static const uint8_t LABEL_MAC1[8] = "mac1----", LABEL_COOKIE[8] = "cookie--";
    wg_admit_state *a = &t->admit;
    uint8_t buf[40];
    pthread_mutex_lock(&a->lock);
    a->has_key = public_key != NULL;
    if (public_key) {
        memcpy(buf + 8, public_key, 32);
        memcpy(buf, LABEL_MAC1, 8);
        wg_blake2s(a->mac1_key, 32, NULL, 0, buf, sizeof buf);
        memcpy(buf, LABEL_COOKIE, 8);
        wg_blake2s(a->cookie_key, 32, NULL, 0, buf, sizeof buf);
    } else {
        memset(a->mac1_key, 0, 32);
        memset(a->cookie_key, 0, 32);
    }
    pthread_mutex_unlock(&a->lock);
}

/* ---------------------------------------------------------------- rate limiter */

/* A token bucket per source address (the port does not count): a new source
 * starts with `burst` tokens, a source earns `rate` per second up to `burst`,
 * a message takes one.  Sources whose bucket has refilled are forgotten once
 * a second (they would start full anyway), and when the table is full. */

static uint32_t rl_hash(const wg_admit_state *a, int family, const uint8_t *addr)
{
    uint32_t h = 2166136261u ^ (uint32_t)family;
    for (int i = 0; i < 16; i++)
        h = (h ^ addr[i]) * 16777619u;
    return h & (a->rl_nbuckets - 1);
}

static void rl_prune(wg_admit_state *a, const vc_wg_config *cfg, double now)
{
    double full = cfg->ratelimit_burst / cfg->ratelimit_rate;
    for (uint32_t b = 0; b < a->rl_nbuckets; b++)
        a->rl_buckets[b] = WG_NIL;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < a->rl_count; i++) {
        if (!(now - a->rl[i].last < full))
            continue;
        a->rl[kept] = a->rl[i];
        uint32_t h = rl_hash(a, a->rl[kept].family, a->rl[kept].addr);
        a->rl[kept].next = a->rl_buckets[h];
        a->rl_buckets[h] = kept++;
    }
    a->rl_count = kept;
    a->rl_last_prune = now;
}

static int rl_allow(wg_admit_state *a, const vc_wg_config *cfg, const vc_endpoint *ep, double now)
{
    if (!a->rl) {
        uint32_t nb = 1;
        while (nb < cfg->ratelimit_sources)
            nb <<= 1;
        a->rl = malloc((size_t)cfg->ratelimit_sources * sizeof *a->rl);
        a->rl_buckets = malloc((size_t)nb * sizeof *a->rl_buckets);
        if (!a->rl || !a->rl_buckets) {
            free(a->rl);
            free(a->rl_buckets);
            a->rl = NULL;
            a->rl_buckets = NULL;
            return 0;
        }
        a->rl_cap = cfg->ratelimit_sources;
        a->rl_nbuckets = nb;
        a->rl_count = 0;
        for (uint32_t b = 0; b < nb; b++)
            a->rl_buckets[b] = WG_NIL;
    }
    if (now - a->rl_last_prune >= 1.0)
        rl_prune(a, cfg, now);
    uint8_t addr[16] = {0};
    memcpy(addr, ep->addr, ep->family == 4 ? 4 : 16);
    uint32_t h = rl_hash(a, ep->family, addr);
    for (uint32_t i = a->rl_buckets[h]; i != WG_NIL; i = a->rl[i].next) {
        wg_rl_entry *e = &a->rl[i];
        if (e->family != ep->family || memcmp(e->addr, addr, 16))
            continue;
        double tokens = e->tokens + (now - e->last) * cfg->ratelimit_rate;
        if (tokens > cfg->ratelimit_burst)
            tokens = cfg->ratelimit_burst;
        e->last = now;
        if (tokens >= 1.0) {
            e->tokens = tokens - 1.0;
            return 1;
        }
        e->tokens = tokens;
        return 0;
    }
    if (a->rl_count >= a->rl_cap) {
        rl_prune(a, cfg, now);
        if (a->rl_count >= a->rl_cap)
            return 0;
        h = rl_hash(a, ep->family, addr);
    }
    wg_rl_entry *e = &a->rl[a->rl_count];
    memset(e, 0, sizeof *e);
    e->family = ep->family;
    memcpy(e->addr, addr, 16);
    e->tokens = cfg->ratelimit_burst - 1.0;
    e->last = now;
    e->next = a->rl_buckets[h];
    a->rl_buckets[h] = a->rl_count++;
    return 1;
}

/* ---------------------------------------------------------------- the checks */

static int mac_equal(const uint8_t *x, const uint8_t *y)
{
    uint8_t d = 0;
    for (int i = 0; i < 16; i++)
        d |= x[i] ^ y[i];
    return d == 0;
}

/* The cookie of a source: MAC(secret, address bytes || port big-endian). */
static void cookie_of(wg_admit_state *a, const vc_wg_config *cfg, const vc_endpoint *ep, double now,
                      uint8_t cookie[16])
{
    if (!a->secret_set || now - a->secret_born >= cfg->cookie_secret_age) {
        drbg(a, a->secret);
        a->secret_set = 1;
        a->secret_born = now;
    }
    uint8_t src[18];
    size_t n = ep->family == 4 ? 4 : 16;
    memcpy(src, ep->addr, n);
    src[n] = (uint8_t)(ep->port >> 8);
    src[n + 1] = (uint8_t)ep->port;
    wg_blake2s(cookie, 16, a->secret, 32, src, n + 2);
}

static void make_reply(wg_admit_state *a, const uint8_t *m, size_t mac1_off, const uint8_t cookie[16],
                       uint8_t reply[VC_WG_COOKIE_REPLY])
{
    uint8_t nonce[32];
    drbg(a, nonce);
    vc_store32_le(reply, MSG_COOKIE_REPLY);
    memcpy(reply + 4, m + 4, 4);                /* the sender index of the message */
    memcpy(reply + 8, nonce, 24);
    vc_xaead_seal(reply + 32, reply + 48, cookie, 16, m + mac1_off, 16, a->cookie_key, reply + 8);
}

static int enqueue(wg_admit_state *a, const uint8_t *m, size_t len, const vc_endpoint *ep)
{
    int dropped = 0;
    if (a->q_count == a->q_cap) {
        a->q_head = (a->q_head + 1) % a->q_cap;
        a->q_count--;
        dropped = 1;
    }
    wg_hs_slot *s = &a->q[(a->q_head + a->q_count) % a->q_cap];
    memcpy(s->data, m, len);
    s->len = (uint32_t)len;
    s->ep = *ep;
    a->q_count++;
    return dropped;
}

int wg_admit(vc_wg_table *t, const uint8_t *m, size_t len, const vc_endpoint *ep, double now,
             uint8_t reply[VC_WG_COOKIE_REPLY])
{
    uint32_t type = len >= 4 ? vc_load32_le(m) : 0;
    size_t mac1_off;
    if (type == MSG_INITIATION && len == INITIATION_LEN)
        mac1_off = INIT_MAC1;
    else if (type == MSG_RESPONSE && len == RESPONSE_LEN)
        mac1_off = RESP_MAC1;
    else if (type == MSG_COOKIE_REPLY && len == VC_WG_COOKIE_REPLY)
        mac1_off = 0;
    else
        return VC_WG_MALFORMED;
    const vc_wg_config *cfg = &t->cfg;
    wg_admit_state *a = &t->admit;
    int st = VC_WG_HANDSHAKE;
    pthread_mutex_lock(&a->lock);
    if (mac1_off) {
        uint8_t mac[16];
        if (!a->has_key) {
            st = VC_WG_UNKNOWN_PEER;
            goto out;
        }
        wg_blake2s(mac, 16, a->mac1_key, 32, m, mac1_off);
        if (!mac_equal(mac, m + mac1_off)) {
            st = VC_WG_BAD_MAC1;
            goto out;
        }
        int under_load = a->q_count + 1 >= cfg->under_load_depth;
        if (under_load)
            a->load_until = now + cfg->under_load_hold;
        else
            under_load = now < a->load_until;
        if (under_load) {
            uint8_t cookie[16];
            cookie_of(a, cfg, ep, now, cookie);
            wg_blake2s(mac, 16, cookie, 16, m, mac1_off + 16);
            if (!mac_equal(mac, m + mac1_off + 16)) {
                make_reply(a, m, mac1_off, cookie, reply);
                vc_wipe(cookie, sizeof cookie);
                st = VC_WG_COOKIE_SENT;
                goto out;
            }
            vc_wipe(cookie, sizeof cookie);
            if (!rl_allow(a, cfg, ep, now)) {
                st = VC_WG_RATE_LIMITED;
                goto out;
            }
        }
    }
    if (type != MSG_INITIATION) {
        int kind = wg_index_kind(t, vc_load32_le(m + (type == MSG_RESPONSE ? 8 : 4)));
        if (type == MSG_RESPONSE ? kind != IX_RESERVED : kind == IX_EMPTY) {
            st = VC_WG_UNKNOWN_INDEX;
            goto out;
        }
    }
    if (enqueue(a, m, len, ep))
        wg_peer_drop(t, NULL, VC_WG_QUEUE_FULL, 1);
out:
    pthread_mutex_unlock(&a->lock);
    return st;
}

/* ---------------------------------------------------------------- the protocol core's side */

VC_API size_t vc_wg_handshakes_take(vc_wg_table *t, uint8_t *out, uint32_t *len, vc_endpoint *ep,
                                    size_t cap)
{
    wg_admit_state *a = &t->admit;
    size_t n = 0;
    pthread_mutex_lock(&a->lock);
    while (n < cap && a->q_count) {
        wg_hs_slot *s = &a->q[(a->q_head + a->q_count - 1) % a->q_cap];
        memcpy(out + n * VC_WG_HANDSHAKE_MAX, s->data, s->len);
        len[n] = s->len;
        ep[n] = s->ep;
        a->q_count--;
        n++;
    }
    pthread_mutex_unlock(&a->lock);
    return n;
}

VC_API size_t vc_wg_handshakes_waiting(vc_wg_table *t, double now, int32_t *under_load)
{
    wg_admit_state *a = &t->admit;
    pthread_mutex_lock(&a->lock);
    size_t n = a->q_count;
    if (under_load)
        *under_load = n >= t->cfg.under_load_depth || now < a->load_until;
    pthread_mutex_unlock(&a->lock);
    return n;
}
