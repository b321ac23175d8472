/* The session table's insides, shared by wg_table.c (peers, indices,
 * keypairs, clock), wg_routes.c (AllowedIPs) and wg_data.c (seal and open).
 * Not part of the cffi API. */
#ifndef WG_INTERNAL_H
#define WG_INTERNAL_H
#include <pthread.h>
#include "vc_internal.h"
#include "vc_wg.h"

#define WG_NIL          0xFFFFFFFFu
#define WG_MAX_BATCH    1024        /* messages per batch call */
#define WG_RING_WORDS   128         /* replay bitmap: 128 x 64 bits, VC_WG_WINDOW usable */
#define WG_MAX_RESERVED 4           /* handshake indices a peer may hold at once */
#define WG_CLOCK_JUMP   1.0         /* seconds: a larger step back moves the clock offset */

/* ---- tiny spin lock (held for a few dozen instructions at most) ---- */
static inline void wg_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline void wg_spin_lock(int32_t *l)
{
    while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(l, __ATOMIC_RELAXED)) wg_cpu_relax();
}

static inline void wg_spin_unlock(int32_t *l)
{
    __atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

#define WG_ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define WG_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define WG_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

/* ---- keypairs: a pool with stable ids; peers name theirs by id ---- */
enum { KP_FREE = 0, KP_LIVE = 1, KP_DEAD = 2 };

typedef struct {
    uint8_t  send_key[32], recv_key[32];
    uint32_t local_index, remote_index, peer;
    int32_t  state;             /* KP_*; DEAD: retired by a batch, freed by maintain */
    int32_t  initiator;
    int32_t  replay_lock;
    double   born;              /* table time of install */
    uint64_t send_counter;      /* next counter to send: atomic fetch-and-add */
    uint64_t greatest;          /* greatest counter accepted */
    int32_t  received_any;
    uint32_t next_free;
    uint64_t ring[WG_RING_WORDS];
} wg_keypair;

/* ---- peers ---- */
typedef struct {
    int32_t  in_use;
    int32_t  lock;              /* spin: slots and endpoint */
    uint32_t cur, prev, next;   /* keypair ids or WG_NIL */
    int32_t  ep_set;
    vc_endpoint ep;
    uint64_t rx_bytes, rx_packets, tx_bytes, tx_packets, rx_wire, tx_wire;
    uint64_t drops[VC_WG_STATUS_COUNT];
    double   last_rx, last_tx;
    uint32_t pmtu;              /* the endpoint's path MTU learned (0: none) */
    double   pmtu_at;           /* ... when (table time): it expires VC_WG_PMTU_EXPIRES later */
    double   pmtu_checked;      /* when a datagram last went alone to find it (VC_WG_PMTU_CHECK) */
    uint32_t route_head;        /* first route node of this peer */
    uint32_t reserved[WG_MAX_RESERVED];  /* indices reserved for handshakes, WG_NIL if free */
    uint32_t next_free;
} wg_peer;

/* ---- AllowedIPs: nodes in a pool, chained hash buckets per (family, cidr,
 * masked address), and a doubly linked list per peer ---- */
typedef struct {
    uint8_t  used, family, cidr, _pad;
    uint32_t peer;
    uint32_t bucket_next;       /* next node in the same hash bucket */
    uint32_t peer_prev, peer_next;
    uint8_t  addr[16];          /* masked to cidr */
} wg_route;

typedef struct {
    wg_route *nodes;
    uint32_t  cap, count, free_head;
    uint32_t *buckets;          /* heads, WG_NIL if empty */
    uint32_t  nbuckets;         /* power of two */
    uint32_t  per_cidr[2][129]; /* [0] IPv4, [1] IPv6: routes per prefix length */
} wg_routes;

/* ---- index hash: local index -> reservation (peer) or keypair ---- */
enum { IX_EMPTY = 0, IX_RESERVED = 1, IX_KEYPAIR = 2 };

typedef struct {
    uint32_t index;
    int32_t  kind;
    uint32_t id;                /* peer for IX_RESERVED, keypair for IX_KEYPAIR */
} wg_index_slot;

/* ---- handshake messages (wg_admit.c): the queue, the cookie defence, the
 * rate limiter; all under `lock` (never held with a peer's spin lock) ---- */
typedef struct {
    uint8_t  data[VC_WG_HANDSHAKE_MAX];
    uint32_t len;
    vc_endpoint ep;
} wg_hs_slot;

typedef struct {
    uint8_t  family, _pad[3];
    uint8_t  addr[16];
    uint32_t next;              /* bucket chain */
    double   tokens, last;
} wg_rl_entry;

typedef struct {
    pthread_mutex_t lock;
    int32_t  has_key;
    uint8_t  mac1_key[32], cookie_key[32];
    uint8_t  secret[32];
    int32_t  secret_set;
    double   secret_born;
    uint8_t  drbg_key[32];      /* random bytes: BLAKE2s(key = drbg_key, counter) */
    uint64_t drbg_counter;
    double   load_until;
    wg_hs_slot *q;
    uint32_t q_cap, q_head, q_count;   /* q_head: the oldest */
    wg_rl_entry *rl;            /* allocated at first use (under load) */
    uint32_t *rl_buckets;
    uint32_t rl_cap, rl_count, rl_nbuckets;
    double   rl_last_prune;
} wg_admit_state;

struct vc_wg_table {
    pthread_rwlock_t lock;      /* write: control calls; read: batches */
    vc_wg_config cfg;

    wg_peer    *peers;
    uint32_t    peer_cap, peer_count, peer_free;

    wg_keypair *kps;
    uint32_t    kp_cap, kp_count, kp_free;
    int32_t     dead_lock;      /* spin: the dead list (batches push under the read lock) */
    uint32_t    dead_head;      /* keypairs in KP_DEAD, linked by next_free, freed by maintain */

    wg_index_slot *ix;
    uint32_t    ix_cap, ix_count;

    wg_routes   routes;

    int32_t     clock_lock;
    double      clock_offset, clock_last;

    uint64_t    drops[VC_WG_STATUS_COUNT];

    wg_admit_state admit;

    uint64_t    sources_forgotten;  /* peers' source addresses the kernel refused (given up) */

    uint32_t    listen_port;    /* the device's UDP port (0: unknown): wg_loop.c */
    int64_t     loop_peer;      /* the last peer a routing loop was cut for */
    uint64_t    loops;          /* packets dropped as VC_WG_ROUTING_LOOP, every peer's */
    uint64_t    pmtu_learned, pmtu_refused;   /* vc_wg_pmtu_learn's errors taken, refused */
};

/* wg_table.c */
/* Whether `peer` names a peer in use (the table's lock held). */
static inline int wg_peer_live(const vc_wg_table *t, uint32_t peer)
{
    return peer < t->peer_cap && t->peers[peer].in_use;
}
/* Take a free item from a pool of `size`-byte items whose free list
 * (WG_NIL-terminated, head *free_head) is linked through the uint32_t at
 * offset `link` of each item.  `items` is the address of the pool's item
 * pointer (a T ** for items of type T).  An empty pool first grows to twice
 * *cap items, or `first`: the new items are zero and on the free list, the
 * lowest index first out; `wipe`: the old memory held keys and is wiped
 * before it is freed.  Returns the item's index (off the free list; its
 * contents as they were), or WG_NIL with everything unchanged (no memory). */
uint32_t wg_pool_take(void *items, uint32_t *cap, uint32_t *free_head, size_t size, size_t link,
                      uint32_t first, int wipe);
double wg_clock(vc_wg_table *t, double now);
wg_keypair *wg_index_keypair(vc_wg_table *t, uint32_t index);
int  wg_index_kind(vc_wg_table *t, uint32_t index);           /* IX_* */
void wg_retire_keypair(vc_wg_table *t, uint32_t id);          /* write lock held */
void wg_kill_keypair(vc_wg_table *t, uint32_t id);            /* read lock held: freed later */
void wg_batch_begin(vc_wg_table *t);
void wg_batch_end(vc_wg_table *t);
void wg_peer_drop(vc_wg_table *t, wg_peer *p, int status, uint64_t n);

/* wg_loop.c: whether inner packet p is the device's own datagram to endpoint
 * ep (UDP from its listen port to ep's address and port): sealed for the
 * peer whose endpoint ep is, it would come back again, a routing loop.
 * wg_count_loop counts one such packet cut for `peer`. */
int  wg_is_own_datagram(const vc_wg_table *t, const uint8_t *p, size_t len, const vc_endpoint *ep);
void wg_count_loop(vc_wg_table *t, uint32_t peer);

/* blake2s.c: out = BLAKE2s(key, in), outlen 1..32, keylen 0..32 */
void wg_blake2s(uint8_t *out, size_t outlen, const uint8_t *key, size_t keylen,
                const uint8_t *in, size_t inlen);

/* wg_admit.c (admit runs under the table's read lock, from any thread) */
int  wg_admit_init(vc_wg_table *t);
void wg_admit_free(vc_wg_table *t);
int  wg_admit_configure(vc_wg_table *t, const vc_wg_config *cfg);   /* write lock held */
int  wg_admit(vc_wg_table *t, const uint8_t *m, size_t len, const vc_endpoint *ep, double now,
              uint8_t reply[VC_WG_COOKIE_REPLY]);
void wg_config_defaults(vc_wg_config *c);

/* The same remote address and port (the local source aside). */
static inline int wg_same_remote(const vc_endpoint *a, const vc_endpoint *b)
{
    return a->family == b->family && a->port == b->port && a->scope_id == b->scope_id &&
           memcmp(a->addr, b->addr, a->family == 4 ? 4 : 16) == 0;
}

/* Outer bytes below a WireGuard message: the IP header (RFC 791: 20 bytes
 * without options; RFC 8200: 40) and UDP's (RFC 768: 8). */
static inline uint32_t wg_outer_overhead(int family)
{
    return (family == 4 ? 20u : 40u) + 8u;
}

/* wg_pmtu.c: the peer's path MTU now (0: none; the peer's lock held) */
uint32_t wg_peer_pmtu(const wg_peer *p, double tnow);
/* A peer's endpoint changes to ep (its lock held): a new remote address or
 * port starts without a path MTU. */
void wg_peer_new_endpoint(wg_peer *p, const vc_endpoint *ep);

/* wg_routes.c (the table's lock is held by the caller) */
int  wg_routes_init(wg_routes *r);
void wg_routes_free(wg_routes *r);
int64_t wg_routes_lookup(const wg_routes *r, int family, const uint8_t *addr);
int  wg_routes_add(vc_wg_table *t, int family, const uint8_t *addr, int cidr, uint32_t peer);
int  wg_routes_remove(vc_wg_table *t, int family, const uint8_t *addr, int cidr, uint32_t peer);
void wg_routes_clear_peer(vc_wg_table *t, uint32_t peer);
int  wg_routes_list(vc_wg_table *t, uint32_t peer, uint8_t *out, int cap);
#endif
