/* The session table: configuration, clock, peers, indices, keypairs and the
 * one place where keypairs rotate.  See vc_wg.h. */
#include <math.h>
#include <stdlib.h>
#include "wg_internal.h"

#define WR_LOCK(t) pthread_rwlock_wrlock(&(t)->lock)
#define RD_LOCK(t) pthread_rwlock_rdlock(&(t)->lock)
#define UNLOCK(t) pthread_rwlock_unlock(&(t)->lock)

/* One of the table's counters, read under the read lock. */
static int read_count(vc_wg_table *t, const uint32_t *counter)
{
    RD_LOCK(t);
    int n = (int)*counter;
    UNLOCK(t);
    return n;
}

/* A configuration with WireGuard's values where the caller left 0, or -1 if
 * a value is out of range. */
static int config_ok(const vc_wg_config *in, vc_wg_config *c)
{
    *c = *in;
    wg_config_defaults(c);
    return c->reject_after_time > 0 && c->rekey_after_time > 0 && c->rekey_on_receive_age > 0 &&
           !isnan(c->reject_after_time) && !isnan(c->rekey_after_time) &&
           !isnan(c->rekey_on_receive_age) && c->reject_after_messages > 0 && c->mtu <= 65535 &&
           c->handshake_queue <= 65536 && c->under_load_hold > 0 && c->cookie_secret_age > 0 &&
           c->ratelimit_rate > 0 && c->ratelimit_burst >= 1 && c->ratelimit_sources <= (1u << 24) &&
           !isnan(c->under_load_hold) && !isinf(c->under_load_hold) &&
           !isinf(c->ratelimit_rate) && !isinf(c->ratelimit_burst);
}

/* ---------------------------------------------------------------- table */

VC_API vc_wg_table *vc_wg_table_new(const vc_wg_config *cfg)
{
    vc_wg_config c;
    if (!cfg || !config_ok(cfg, &c))
        return NULL;
    vc_wg_table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
#ifdef PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP
    /* batches come back to back: without this a control call could starve */
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    int rc = pthread_rwlock_init(&t->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc) {
        free(t);
        return NULL;
    }
    t->cfg = c;
    t->peer_free = t->kp_free = t->dead_head = WG_NIL;
    t->clock_last = -INFINITY;
    t->ix_cap = 64;
    t->ix = calloc(t->ix_cap, sizeof *t->ix);
    if (!t->ix || wg_routes_init(&t->routes)) {
        vc_wg_table_free(t);
        return NULL;
    }
    if (wg_admit_init(t)) {
        wg_routes_free(&t->routes);
        free(t->ix);
        pthread_rwlock_destroy(&t->lock);
        free(t);
        return NULL;
    }
    return t;
}

VC_API void vc_wg_table_free(vc_wg_table *t)
{
    if (!t)
        return;
    if (t->kps) {
        vc_wipe(t->kps, (size_t)t->kp_cap * sizeof *t->kps);
        free(t->kps);
    }
    free(t->peers);
    free(t->ix);
    wg_routes_free(&t->routes);
    wg_admit_free(t);
    pthread_rwlock_destroy(&t->lock);
    free(t);
}

VC_API int vc_wg_table_configure(vc_wg_table *t, const vc_wg_config *cfg)
{
    vc_wg_config c;
    if (!cfg || !config_ok(cfg, &c))
        return -1;
    WR_LOCK(t);
    int rc = wg_admit_configure(t, &c);
    if (!rc)
        t->cfg = c;
    UNLOCK(t);
    return rc;
}

/* The table's clock: the caller's time plus an offset that grows by the size
 * of every backward jump larger than WG_CLOCK_JUMP, so it never runs back
 * and ages never shrink.  Smaller steps back (two threads that read the
 * clock in one order and arrive in the other) read as "no time passed". */
double wg_clock(vc_wg_table *t, double now)
{
    wg_spin_lock(&t->clock_lock);
    double v = now + t->clock_offset;
    if (v < t->clock_last) {
        if (t->clock_last - v > WG_CLOCK_JUMP)
            t->clock_offset += t->clock_last - v;
        v = t->clock_last;
    }
    t->clock_last = v;
    wg_spin_unlock(&t->clock_lock);
    return v;
}

VC_API double vc_wg_clock(vc_wg_table *t, double now)
{
    return wg_clock(t, now);
}

VC_API double vc_wg_clock_offset(vc_wg_table *t)
{
    wg_spin_lock(&t->clock_lock);
    double o = t->clock_offset;
    wg_spin_unlock(&t->clock_lock);
    return o;
}

VC_API void vc_wg_table_drops(vc_wg_table *t, uint64_t out[VC_WG_STATUS_COUNT])
{
    for (int i = 0; i < VC_WG_STATUS_COUNT; i++)
        out[i] = __atomic_load_n(&t->drops[i], __ATOMIC_RELAXED);
}

void wg_peer_drop(vc_wg_table *t, wg_peer *p, int status, uint64_t n)
{
    WG_ADD(p ? &p->drops[status] : &t->drops[status], n);
}

/* ---------------------------------------------------------------- indices */

static uint32_t ix_home(const vc_wg_table *t, uint32_t index)
{
    return (index * 0x9E3779B1u) & (t->ix_cap - 1);
}

static wg_index_slot *ix_find(const vc_wg_table *t, uint32_t index)
{
    for (uint32_t i = ix_home(t, index);; i = (i + 1) & (t->ix_cap - 1)) {
        wg_index_slot *s = &t->ix[i];
        if (s->kind == IX_EMPTY)
            return NULL;
        if (s->index == index)
            return s;
    }
}

static int ix_grow(vc_wg_table *t)
{
    uint32_t cap = t->ix_cap * 2;
    wg_index_slot *fresh = calloc(cap, sizeof *fresh), *old = t->ix;
    if (!fresh)
        return -1;
    uint32_t old_cap = t->ix_cap;
    t->ix = fresh;
    t->ix_cap = cap;
    for (uint32_t i = 0; i < old_cap; i++) {
        if (old[i].kind == IX_EMPTY)
            continue;
        uint32_t j = ix_home(t, old[i].index);
        while (t->ix[j].kind != IX_EMPTY)
            j = (j + 1) & (cap - 1);
        t->ix[j] = old[i];
    }
    free(old);
    return 0;
}

static int ix_insert(vc_wg_table *t, uint32_t index, int kind, uint32_t id)
{
    if (ix_find(t, index))
        return -1;
    if (2 * (t->ix_count + 1) > t->ix_cap && ix_grow(t))
        return -1;
    uint32_t i = ix_home(t, index);
    while (t->ix[i].kind != IX_EMPTY)
        i = (i + 1) & (t->ix_cap - 1);
    t->ix[i] = (wg_index_slot){index, kind, id};
    t->ix_count++;
    return 0;
}

/* Backward-shift deletion: probe chains stay intact without tombstones. */
static void ix_delete(vc_wg_table *t, wg_index_slot *s)
{
    uint32_t mask = t->ix_cap - 1, hole = (uint32_t)(s - t->ix);
    t->ix[hole].kind = IX_EMPTY;
    for (uint32_t j = (hole + 1) & mask; t->ix[j].kind != IX_EMPTY; j = (j + 1) & mask) {
        uint32_t home = ix_home(t, t->ix[j].index);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            t->ix[hole] = t->ix[j];
            t->ix[j].kind = IX_EMPTY;
            hole = j;
        }
    }
    t->ix_count--;
}

int wg_index_kind(vc_wg_table *t, uint32_t index)
{
    wg_index_slot *s = ix_find(t, index);
    if (!s || (s->kind == IX_KEYPAIR && WG_LOAD(&t->kps[s->id].state) != KP_LIVE))
        return IX_EMPTY;            /* a keypair a batch retired is gone */
    return s->kind;
}

wg_keypair *wg_index_keypair(vc_wg_table *t, uint32_t index)
{
    wg_index_slot *s = ix_find(t, index);
    if (!s || s->kind != IX_KEYPAIR)
        return NULL;
    wg_keypair *k = &t->kps[s->id];
    return WG_LOAD(&k->state) == KP_LIVE ? k : NULL;
}

/* The slot of an index a handshake holds reserved (its id is the peer), or NULL. */
static wg_index_slot *ix_reserved(const vc_wg_table *t, uint32_t index)
{
    wg_index_slot *s = ix_find(t, index);
    return s && s->kind == IX_RESERVED ? s : NULL;
}

static int peer_note_reserved(wg_peer *p, uint32_t index)
{
    for (int i = 0; i < WG_MAX_RESERVED; i++) {
        if (p->reserved[i] == WG_NIL) {
            p->reserved[i] = index;
            return 0;
        }
    }
    return -1;
}

static void peer_forget_reserved(wg_peer *p, uint32_t index)
{
    for (int i = 0; i < WG_MAX_RESERVED; i++)
        if (p->reserved[i] == index)
            p->reserved[i] = WG_NIL;
}

VC_API int vc_wg_index_reserve(vc_wg_table *t, uint32_t index, uint32_t peer)
{
    WR_LOCK(t);
    int rc = -1;
    if (wg_peer_live(t, peer) && !ix_find(t, index) &&
        peer_note_reserved(&t->peers[peer], index) == 0) {
        rc = ix_insert(t, index, IX_RESERVED, peer);
        if (rc)
            peer_forget_reserved(&t->peers[peer], index);
    }
    UNLOCK(t);
    return rc;
}

VC_API int vc_wg_index_release(vc_wg_table *t, uint32_t index)
{
    WR_LOCK(t);
    wg_index_slot *s = ix_reserved(t, index);
    if (s) {
        peer_forget_reserved(&t->peers[s->id], index);
        ix_delete(t, s);
    }
    UNLOCK(t);
    return s ? 0 : -1;
}

VC_API int64_t vc_wg_index_peer(vc_wg_table *t, uint32_t index)
{
    RD_LOCK(t);
    const wg_index_slot *s = ix_reserved(t, index);
    const wg_keypair *k = s ? NULL : wg_index_keypair(t, index);
    int64_t peer = s ? (int64_t)s->id : k ? (int64_t)k->peer : -1;
    UNLOCK(t);
    return peer;
}

VC_API int vc_wg_index_count(vc_wg_table *t)
{
    return read_count(t, &t->ix_count);
}

/* ---------------------------------------------------------------- pools */

static void *pool_grow(void *items, uint32_t *cap, uint32_t *free_head, size_t size, size_t link,
                   uint32_t first, int wipe)
{
    uint32_t old = *cap, n = old ? 2 * old : first;
    if (n <= old)
        return NULL;
    uint8_t *fresh = calloc(n, size);
    if (!fresh)
        return NULL;
    if (items) {
        memcpy(fresh, items, (size_t)old * size);
        if (wipe)
            vc_wipe(items, (size_t)old * size);
        free(items);
    }
    for (uint32_t i = n; i-- > old;) {
        memcpy(fresh + (size_t)i * size + link, free_head, sizeof *free_head);
        *free_head = i;
    }
    *cap = n;
    return fresh;
}

uint32_t wg_pool_take(void *items, uint32_t *cap, uint32_t *free_head, size_t size, size_t link,
                      uint32_t first, int wipe)
{
    uint8_t *base;
    memcpy(&base, items, sizeof base);
    if (*free_head == WG_NIL) {
        uint8_t *fresh = pool_grow(base, cap, free_head, size, link, first, wipe);
        if (!fresh)
            return WG_NIL;
        base = fresh;
        memcpy(items, &base, sizeof base);
    }
    uint32_t id = *free_head;
    memcpy(free_head, base + (size_t)id * size + link, sizeof *free_head);
    return id;
}

/* ---------------------------------------------------------------- keypairs */

static uint32_t kp_alloc(vc_wg_table *t)
{
    uint32_t id = wg_pool_take(&t->kps, &t->kp_cap, &t->kp_free, sizeof *t->kps,
                               offsetof(wg_keypair, next_free), 16, 1);
    if (id != WG_NIL)
        t->kp_count++;
    return id;
}

/* Free a keypair: wipe it, forget its index.  Write lock held. */
static void kp_free(vc_wg_table *t, uint32_t id)
{
    wg_keypair *k = &t->kps[id];
    wg_index_slot *s = ix_find(t, k->local_index);
    if (s && s->kind == IX_KEYPAIR && s->id == id)
        ix_delete(t, s);
    vc_wipe(k, sizeof *k);
    k->state = KP_FREE;
    k->next_free = t->kp_free;
    t->kp_free = id;
    t->kp_count--;
}

void wg_retire_keypair(vc_wg_table *t, uint32_t id)
{
    if (id != WG_NIL)
        kp_free(t, id);
}

/* A batch retires a keypair (the previous one, when `next` is confirmed):
 * from now on it opens nothing; its memory is wiped and freed by the next
 * control call or vc_wg_maintain, which hold the write lock. */
void wg_kill_keypair(vc_wg_table *t, uint32_t id)
{
    if (id == WG_NIL)
        return;
    wg_keypair *k = &t->kps[id];
    WG_STORE(&k->state, KP_DEAD);
    wg_spin_lock(&t->dead_lock);
    k->next_free = t->dead_head;
    t->dead_head = id;
    wg_spin_unlock(&t->dead_lock);
}

static void reap_dead(vc_wg_table *t)
{
    uint32_t id = t->dead_head;
    t->dead_head = WG_NIL;
    while (id != WG_NIL) {
        uint32_t next = t->kps[id].next_free;
        kp_free(t, id);
        id = next;
    }
}

VC_API void vc_wg_maintain(vc_wg_table *t)
{
    if (WG_LOAD(&t->dead_head) == WG_NIL)
        return;
    WR_LOCK(t);
    reap_dead(t);
    UNLOCK(t);
}

VC_API int vc_wg_install(vc_wg_table *t, uint32_t peer, uint32_t local_index, uint32_t remote_index,
                  const uint8_t send_key[32], const uint8_t recv_key[32], int initiator, double now)
{
    double born = now;
    WR_LOCK(t);
    reap_dead(t);
    int rc = -1;
    wg_index_slot *s = ix_reserved(t, local_index);
    if (peer >= t->peer_cap || !t->peers[peer].in_use || !s || s->id != peer)
        goto out;
    uint32_t id = kp_alloc(t);
    if (id == WG_NIL)
        goto out;
    s = ix_find(t, local_index);            /* kp_alloc does not move the index table */
    wg_keypair *k = &t->kps[id];
    memset(k, 0, sizeof *k);
    memcpy(k->send_key, send_key, 32);
    memcpy(k->recv_key, recv_key, 32);
    k->local_index = local_index;
    k->remote_index = remote_index;
    k->peer = peer;
    k->initiator = initiator != 0;
    k->born = born;
    k->state = KP_LIVE;
    s->kind = IX_KEYPAIR;
    s->id = id;

    wg_peer *p = &t->peers[peer];
    peer_forget_reserved(p, local_index);
    if (k->initiator) {
        if (p->next != WG_NIL) {
            wg_retire_keypair(t, p->prev);
            p->prev = p->next;
            p->next = WG_NIL;
            wg_retire_keypair(t, p->cur);
        } else {
            wg_retire_keypair(t, p->prev);
            p->prev = p->cur;
        }
        p->cur = id;
    } else {
        wg_retire_keypair(t, p->next);
        p->next = id;
        wg_retire_keypair(t, p->prev);
        p->prev = WG_NIL;
    }
    rc = 0;
out:
    UNLOCK(t);
    return rc;
}

/* ---------------------------------------------------------------- peers */

VC_API int64_t vc_wg_peer_add(vc_wg_table *t)
{
    WR_LOCK(t);
    int64_t id = wg_pool_take(&t->peers, &t->peer_cap, &t->peer_free, sizeof *t->peers,
                              offsetof(wg_peer, next_free), 16, 0);
    if (id == WG_NIL) {
        id = -1;
        goto out;
    }
    wg_peer *p = &t->peers[id];
    memset(p, 0, sizeof *p);
    p->in_use = 1;
    p->cur = p->prev = p->next = WG_NIL;
    p->route_head = WG_NIL;
    for (int i = 0; i < WG_MAX_RESERVED; i++)
        p->reserved[i] = WG_NIL;
    t->peer_count++;
out:
    UNLOCK(t);
    return id;
}

static void peer_zero(vc_wg_table *t, uint32_t peer)
{
    wg_peer *p = &t->peers[peer];
    reap_dead(t);
    wg_retire_keypair(t, p->cur);
    wg_retire_keypair(t, p->prev);
    wg_retire_keypair(t, p->next);
    p->cur = p->prev = p->next = WG_NIL;
    for (int i = 0; i < WG_MAX_RESERVED; i++) {
        wg_index_slot *s = p->reserved[i] != WG_NIL ? ix_reserved(t, p->reserved[i]) : NULL;
        if (s && s->id == peer)
            ix_delete(t, s);
        p->reserved[i] = WG_NIL;
    }
}

/* op(t, peer) under the write lock when peer is in use: 0, else -1. */
static int on_live_peer(vc_wg_table *t, uint32_t peer, void (*op)(vc_wg_table *, uint32_t))
{
    WR_LOCK(t);
    int live = wg_peer_live(t, peer);
    if (live)
        op(t, peer);
    UNLOCK(t);
    return live ? 0 : -1;
}

/* peer_zero, its routes, then its slot back to the free list. */
static void peer_remove(vc_wg_table *t, uint32_t peer)
{
    peer_zero(t, peer);
    wg_routes_clear_peer(t, peer);
    wg_peer *p = &t->peers[peer];
    memset(p, 0, sizeof *p);
    p->next_free = t->peer_free;
    t->peer_free = peer;
    t->peer_count--;
}

VC_API int vc_wg_peer_zero(vc_wg_table *t, uint32_t peer)
{
    return on_live_peer(t, peer, peer_zero);
}

VC_API int vc_wg_peer_remove(vc_wg_table *t, uint32_t peer)
{
    return on_live_peer(t, peer, peer_remove);
}

VC_API int vc_wg_peer_count(vc_wg_table *t)
{
    return read_count(t, &t->peer_count);
}

/* No source: routing picks it (and no stale bytes, so equal endpoints
 * compare equal). */
static void clear_source(vc_endpoint *ep)
{
    ep->src_set = VC_EP_SRC_NONE;
    ep->src_ifindex = ep->flags = 0;
    memset(ep->src, 0, sizeof ep->src);
}

VC_API int vc_wg_peer_set_endpoint(vc_wg_table *t, uint32_t peer, const vc_endpoint *ep)
{
    RD_LOCK(t);            /* only this peer's fields change: its own lock suffices */
    int rc = -1;
    if (wg_peer_live(t, peer)) {
        wg_peer *p = &t->peers[peer];
        wg_spin_lock(&p->lock);
        wg_peer_new_endpoint(p, ep);
        if (ep) {
            p->ep = *ep;
            p->ep_set = 1;
            if (ep->src_set != VC_EP_SRC_SET)
                clear_source(&p->ep);
        } else {
            memset(&p->ep, 0, sizeof p->ep);
            p->ep_set = 0;
        }
        wg_spin_unlock(&p->lock);
        rc = 0;
    }
    UNLOCK(t);
    return rc;
}

static void kp_info(const vc_wg_table *t, uint32_t id, double now, int is_current, vc_wg_keypair_info *out)
{
    memset(out, 0, sizeof *out);
    if (id == WG_NIL)
        return;
    const wg_keypair *k = &t->kps[id];
    out->valid = 1;
    out->local_index = k->local_index;
    out->remote_index = k->remote_index;
    out->initiator = k->initiator;
    out->age = now - k->born;
    out->send_counter = __atomic_load_n(&k->send_counter, __ATOMIC_RELAXED);
    out->greatest_received = k->greatest;
    out->usable = is_current && out->age < t->cfg.reject_after_time &&
                  out->send_counter < t->cfg.reject_after_messages;
}

VC_API int vc_wg_peer_get(vc_wg_table *t, uint32_t peer, vc_wg_peer_stats *out, double now)
{
    double tnow = now;
    RD_LOCK(t);
    int rc = -1;
    if (wg_peer_live(t, peer)) {
        wg_peer *p = &t->peers[peer];
        memset(out, 0, sizeof *out);
        out->rx_bytes = __atomic_load_n(&p->rx_bytes, __ATOMIC_RELAXED);
        out->rx_packets = __atomic_load_n(&p->rx_packets, __ATOMIC_RELAXED);
        out->tx_bytes = __atomic_load_n(&p->tx_bytes, __ATOMIC_RELAXED);
        out->tx_packets = __atomic_load_n(&p->tx_packets, __ATOMIC_RELAXED);
        out->rx_wire_bytes = __atomic_load_n(&p->rx_wire, __ATOMIC_RELAXED);
        out->tx_wire_bytes = __atomic_load_n(&p->tx_wire, __ATOMIC_RELAXED);
        for (int i = 0; i < VC_WG_STATUS_COUNT; i++)
            out->drops[i] = __atomic_load_n(&p->drops[i], __ATOMIC_RELAXED);
        wg_spin_lock(&p->lock);
        out->last_rx = p->last_rx;
        out->last_tx = p->last_tx;
        out->endpoint = p->ep;
        out->endpoint_set = p->ep_set;
        out->path_mtu = p->ep_set ? wg_peer_pmtu(p, tnow) : 0;
        out->inner_mtu = out->path_mtu ? vc_wg_inner_mtu(out->path_mtu, p->ep.family) : 0;
        uint32_t cur = p->cur, prev = p->prev, next = p->next;
        wg_spin_unlock(&p->lock);
        kp_info(t, cur, tnow, 1, &out->current);
        kp_info(t, prev, tnow, 0, &out->previous);
        kp_info(t, next, tnow, 0, &out->next);
        rc = 0;
    }
    UNLOCK(t);
    return rc;
}

/* ---------------------------------------------------------------- routes (locking) */

VC_API int vc_wg_route_add(vc_wg_table *t, int family, const uint8_t *addr, int cidr, uint32_t peer)
{
    WR_LOCK(t);
    int rc = wg_peer_live(t, peer) ? wg_routes_add(t, family, addr, cidr, peer) : -1;
    UNLOCK(t);
    return rc;
}

VC_API int vc_wg_route_remove(vc_wg_table *t, int family, const uint8_t *addr, int cidr, uint32_t peer)
{
    WR_LOCK(t);
    int rc = wg_routes_remove(t, family, addr, cidr, peer);
    UNLOCK(t);
    return rc;
}

VC_API int vc_wg_route_clear_peer(vc_wg_table *t, uint32_t peer)
{
    return on_live_peer(t, peer, wg_routes_clear_peer);
}

VC_API int64_t vc_wg_route_lookup(vc_wg_table *t, int family, const uint8_t *addr)
{
    RD_LOCK(t);
    int64_t peer = wg_routes_lookup(&t->routes, family, addr);
    UNLOCK(t);
    return peer;
}

VC_API int vc_wg_route_list(vc_wg_table *t, uint32_t peer, uint8_t *out, int cap)
{
    RD_LOCK(t);
    int n = wg_peer_live(t, peer) ? wg_routes_list(t, peer, out, cap) : 0;
    UNLOCK(t);
    return n;
}

/* ---------------------------------------------------------------- batch locking */

void wg_batch_begin(vc_wg_table *t)
{
    RD_LOCK(t);
}

void wg_batch_end(vc_wg_table *t)
{
    UNLOCK(t);
}

/* The kernel refused a source on a send (vc_udp_send_batch marked those
 * datagrams VC_EP_SRC_REFUSED): a peer of the batch still sending from it
 * gives it up, as the Linux module clears a source its route lookup refuses
 * ("sticky, but not too sticky"); the next datagram that arrives from the
 * peer teaches the table the address it now reaches us at. */
static size_t forget_source(vc_wg_table *t, const vc_wg_touch *touched, size_t n_touched,
                            const vc_endpoint *refused)
{
    vc_endpoint was = *refused;
    size_t forgot = 0;
    was.src_set = VC_EP_SRC_SET;
    for (size_t e = 0; e < n_touched; e++) {
        if (!wg_peer_live(t, touched[e].peer))
            continue;
        wg_peer *p = &t->peers[touched[e].peer];
        wg_spin_lock(&p->lock);
        if (p->ep_set && vc_endpoint_equal(&p->ep, &was)) {
            clear_source(&p->ep);
            forgot++;
        }
        wg_spin_unlock(&p->lock);
    }
    return forgot;
}

VC_API size_t vc_wg_forget_sources(vc_wg_table *t, const vc_wg_touch *touched, size_t n_touched,
                                   const vc_endpoint *ep, size_t n)
{
    size_t forgot = 0, i = 0;
    const vc_endpoint *last = NULL;
    while (i < n && ep[i].src_set != VC_EP_SRC_REFUSED)
        i++;
    if (i == n)
        return 0;           /* the usual case: no lock taken */
    RD_LOCK(t);
    for (; i < n; i++) {
        if (ep[i].src_set != VC_EP_SRC_REFUSED || (last && memcmp(last, &ep[i], sizeof *last) == 0))
            continue;       /* (a batch to one peer repeats its endpoint) */
        last = &ep[i];
        forgot += forget_source(t, touched, n_touched, &ep[i]);
    }
    UNLOCK(t);
    if (forgot)
        WG_ADD(&t->sources_forgotten, forgot);
    return forgot;
}

VC_API uint64_t vc_wg_sources_forgotten(vc_wg_table *t)
{
    return __atomic_load_n(&t->sources_forgotten, __ATOMIC_RELAXED);
}
