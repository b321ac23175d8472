/* AllowedIPs: longest-prefix match over IPv4 and IPv6 prefixes.
 *
 * Every route is a node in a pool (stable ids) that sits in one chained hash
 * bucket, keyed by (family, prefix length, masked address), and in its
 * peer's doubly linked list.  A lookup masks the address to each prefix
 * length that has routes, longest first, and probes once per length: the
 * cost is bounded by the address length whatever the number of routes.
 * Adding, removing one route and removing a peer's routes touch only the
 * routes concerned.  The caller holds the table's lock. */
#include <stdlib.h>
#include "wg_internal.h"

static void mask_addr(uint8_t out[16], const uint8_t *addr, int bytes, int cidr)
{
    memset(out, 0, 16);
    for (int i = 0; i < bytes; i++) {
        int bits = cidr - 8 * i;
        uint8_t m = bits >= 8 ? 0xff : bits <= 0 ? 0 : (uint8_t)(0xff << (8 - bits));
        out[i] = addr[i] & m;
    }
}

static uint32_t route_hash(int family, int cidr, const uint8_t a[16])
{
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)(family * 131 + cidr);
    for (int i = 0; i < 16; i++)
        h = (h ^ a[i]) * 0x100000001b3ULL;
    return (uint32_t)(h ^ (h >> 32));
}

int wg_routes_init(wg_routes *r)
{
    memset(r, 0, sizeof *r);
    r->free_head = WG_NIL;
    r->nbuckets = 64;
    r->buckets = malloc(r->nbuckets * sizeof *r->buckets);
    if (!r->buckets)
        return -1;
    memset(r->buckets, 0xff, r->nbuckets * sizeof *r->buckets);
    return 0;
}

void wg_routes_free(wg_routes *r)
{
    free(r->nodes);
    free(r->buckets);
    memset(r, 0, sizeof *r);
}

static uint32_t find(const wg_routes *r, int family, int cidr, const uint8_t m[16])
{
    uint32_t id = r->buckets[route_hash(family, cidr, m) & (r->nbuckets - 1)];
    while (id != WG_NIL) {
        const wg_route *n = &r->nodes[id];
        if (n->family == family && n->cidr == cidr && memcmp(n->addr, m, 16) == 0)
            return id;
        id = n->bucket_next;
    }
    return WG_NIL;
}

int64_t wg_routes_lookup(const wg_routes *r, int family, const uint8_t *addr)
{
    if (family != 4 && family != 6)
        return -1;
    int v6 = family == 6, bytes = v6 ? 16 : 4;
    uint8_t m[16];
    for (int cidr = 8 * bytes; cidr >= 0; cidr--) {
        if (!r->per_cidr[v6][cidr])
            continue;
        mask_addr(m, addr, bytes, cidr);
        uint32_t id = find(r, family, cidr, m);
        if (id != WG_NIL)
            return r->nodes[id].peer;
    }
    return -1;
}

static int rehash(wg_routes *r, uint32_t nbuckets)
{
    uint32_t *fresh = malloc(nbuckets * sizeof *fresh);
    if (!fresh)
        return -1;
    memset(fresh, 0xff, nbuckets * sizeof *fresh);
    for (uint32_t id = 0; id < r->cap; id++) {
        wg_route *n = &r->nodes[id];
        if (!n->used)
            continue;
        uint32_t b = route_hash(n->family, n->cidr, n->addr) & (nbuckets - 1);
        n->bucket_next = fresh[b];
        fresh[b] = id;
    }
    free(r->buckets);
    r->buckets = fresh;
    r->nbuckets = nbuckets;
    return 0;
}

static uint32_t node_alloc(wg_routes *r)
{
    return wg_pool_take(&r->nodes, &r->cap, &r->free_head, sizeof *r->nodes,
                        offsetof(wg_route, bucket_next), 64, 0);
}

static void unlink_peer(vc_wg_table *t, uint32_t id)
{
    wg_route *n = &t->routes.nodes[id];
    if (n->peer_prev != WG_NIL)
        t->routes.nodes[n->peer_prev].peer_next = n->peer_next;
    else
        t->peers[n->peer].route_head = n->peer_next;
    if (n->peer_next != WG_NIL)
        t->routes.nodes[n->peer_next].peer_prev = n->peer_prev;
}

static void link_peer(vc_wg_table *t, uint32_t id, uint32_t peer)
{
    wg_route *n = &t->routes.nodes[id];
    n->peer = peer;
    n->peer_prev = WG_NIL;
    n->peer_next = t->peers[peer].route_head;
    if (n->peer_next != WG_NIL)
        t->routes.nodes[n->peer_next].peer_prev = id;
    t->peers[peer].route_head = id;
}

int wg_routes_add(vc_wg_table *t, int family, const uint8_t *addr, int cidr, uint32_t peer)
{
    wg_routes *r = &t->routes;
    int bytes = family == 4 ? 4 : family == 6 ? 16 : 0;
    if (!bytes || cidr < 0 || cidr > 8 * bytes)
        return -1;
    uint8_t m[16];
    mask_addr(m, addr, bytes, cidr);
    uint32_t id = find(r, family, cidr, m);
    if (id != WG_NIL) {
        /* a prefix moves to the peer that claims it last, as in WireGuard */
        if (r->nodes[id].peer != peer) {
            unlink_peer(t, id);
            link_peer(t, id, peer);
        }
        return 0;
    }
    if (2 * (r->count + 1) > r->nbuckets && rehash(r, 2 * r->nbuckets))
        return -1;
    id = node_alloc(r);
    if (id == WG_NIL)
        return -1;
    wg_route *n = &r->nodes[id];
    n->used = 1;
    n->family = (uint8_t)family;
    n->cidr = (uint8_t)cidr;
    memcpy(n->addr, m, 16);
    uint32_t b = route_hash(family, cidr, m) & (r->nbuckets - 1);
    n->bucket_next = r->buckets[b];
    r->buckets[b] = id;
    link_peer(t, id, peer);
    r->count++;
    r->per_cidr[family == 6][cidr]++;
    return 0;
}

static void node_delete(vc_wg_table *t, uint32_t id)
{
    wg_routes *r = &t->routes;
    wg_route *n = &r->nodes[id];
    uint32_t *link = &r->buckets[route_hash(n->family, n->cidr, n->addr) & (r->nbuckets - 1)];
    while (*link != id)
        link = &r->nodes[*link].bucket_next;
    *link = n->bucket_next;
    unlink_peer(t, id);
    r->per_cidr[n->family == 6][n->cidr]--;
    r->count--;
    memset(n, 0, sizeof *n);
    n->bucket_next = r->free_head;
    r->free_head = id;
}

int wg_routes_remove(vc_wg_table *t, int family, const uint8_t *addr, int cidr, uint32_t peer)
{
    int bytes = family == 4 ? 4 : family == 6 ? 16 : 0;
    if (!bytes || cidr < 0 || cidr > 8 * bytes)
        return -1;
    uint8_t m[16];
    mask_addr(m, addr, bytes, cidr);
    uint32_t id = find(&t->routes, family, cidr, m);
    if (id == WG_NIL || t->routes.nodes[id].peer != peer)
        return -1;
    node_delete(t, id);
    return 0;
}

void wg_routes_clear_peer(vc_wg_table *t, uint32_t peer)
{
    while (t->peers[peer].route_head != WG_NIL)
        node_delete(t, t->peers[peer].route_head);
}

static int longer_first(const void *a, const void *b)
{
    const uint8_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] - y[0];         /* IPv4 before IPv6 */
    if (x[1] != y[1])
        return y[1] - x[1];         /* longer prefix first */
    return memcmp(x + 2, y + 2, 16);
}

int wg_routes_list(vc_wg_table *t, uint32_t peer, uint8_t *out, int cap)
{
    int n = 0;
    for (uint32_t id = t->peers[peer].route_head; id != WG_NIL; id = t->routes.nodes[id].peer_next) {
        const wg_route *r = &t->routes.nodes[id];
        if (n < cap) {
            uint8_t *e = out + 18 * n;
            e[0] = r->family;
            e[1] = r->cidr;
            memcpy(e + 2, r->addr, 16);
        }
        n++;
    }
    if (out && cap > 0)
        qsort(out, (size_t)(n < cap ? n : cap), 18, longer_first);
    return n;
}
