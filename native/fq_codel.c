/* A fair queue with CoDel for the sending data path (see vc_io.h): RFC 8290's
 * fq_codel scheduler over RFC 8289's CoDel, sans-I/O (the caller gives the
 * time).  Plain C (also built for aarch64). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vc_io.h"

#define VC_API __attribute__((visibility("default")))

#define FQ_NIL       0xFFFFFFFFu
#define FQ_BUF       2048u        /* a packet buffer kept for reuse; longer ones are freed after use */
#define FQ_DROP_MAX  64           /* packets one over-limit event drops at most */

enum { LIST_NONE = 0, LIST_NEW = 1, LIST_OLD = 2 };

/* ------------------------------------------------------------------ CoDel */

VC_API void vc_codel_init(vc_codel *c, int64_t target_ns, int64_t interval_ns, uint32_t mtu)
{
    memset(c, 0, sizeof *c);
    c->target_ns = target_ns;
    c->interval_ns = interval_ns;
    c->mtu = mtu;
}

/* floor(sqrt(x)), bit by bit (no libm: the fuzz and bench builds link none) */
static uint64_t isqrt64(uint64_t x)
{
    uint64_t r = 0, bit = (uint64_t)1 << 62;
    while (bit > x)
        bit >>= 2;
    while (bit) {
        if (x >= r + bit) {
            x -= r + bit;
            r = (r >> 1) + bit;
        } else {
            r >>= 1;
        }
        bit >>= 2;
    }
    return r;
}

/* RFC 8289's control_law: t + interval / sqrt(count), in 16.16 fixed point:
 * sqrt(count << 32) is sqrt(count) * 65536 to within one part in 65536. */
static int64_t control_law(const vc_codel *c, int64_t t)
{
    uint64_t count = c->count ? c->count : 1;
    if (count > 0x7FFFFFFFu)
        count = 0x7FFFFFFFu;
    uint64_t root = isqrt64(count << 32);
    return t + (int64_t)(((uint64_t)c->interval_ns << 16) / root);
}

/* RFC 8289's dodequeue: is this packet's sojourn "ok to drop" on? */
static int ok_to_drop(vc_codel *c, int64_t now, int64_t sojourn, uint64_t backlog)
{
    if (sojourn < c->target_ns || backlog <= c->mtu) {
        c->first_above = 0;
        return 0;
    }
    if (c->first_above == 0) {
        c->first_above = now + c->interval_ns;
        if (c->first_above == 0)
            c->first_above = 1;
        return 0;
    }
    return now >= c->first_above;
}

VC_API int vc_codel_verdict(vc_codel *c, int64_t now, int64_t sojourn, uint64_t backlog)
{
    int ok = ok_to_drop(c, now, sojourn, backlog);
    if (c->dropping) {
        if (!ok) {
            c->dropping = 0;
            return 0;
        }
        if (now >= c->drop_next) {
            c->count++;
            c->drop_next = control_law(c, c->drop_next);
            c->drops++;
            return 1;
        }
        return 0;
    }
    if (!ok)
        return 0;
    /* enter the dropping state; start from the old count if it ended recently */
    c->dropping = 1;
    uint32_t delta = c->count - c->lastcount;
    c->count = 1;
    if (delta > 1 && now - c->drop_next < 16 * c->interval_ns)
        c->count = delta;
    c->drop_next = control_law(c, now);
    c->lastcount = c->count;
    c->drops++;
    return 1;
}

VC_API void vc_codel_empty(vc_codel *c)
{
    c->first_above = 0;
    c->dropping = 0;
}

/* ------------------------------------------------------------ the queue */

typedef struct {
    uint8_t *data;
    uint32_t len, cap;      /* cap: data's size (0: none) */
    uint32_t next;          /* in its flow, or in the free list */
    uint32_t pad;
    int64_t  t_in;
} fq_pkt;

typedef struct {
    uint32_t head, tail;    /* packets, FQ_NIL if none */
    uint32_t packets;
    uint32_t next;          /* in its list */
    uint64_t bytes;
    int64_t  deficit;
    int32_t  list;          /* LIST_* */
    int32_t  pad;
    vc_codel codel;
} fq_flow;

typedef struct {
    uint32_t head, tail;
} fq_list;

struct vc_fq {
    uint32_t nflows, quantum;
    uint64_t byte_cap;
    uint32_t packet_cap;
    uint32_t free_head;
    uint64_t seed;
    fq_list  newl, oldl;
    vc_fq_stats st;
    fq_flow *flows;
    fq_pkt  *pkts;
};

VC_API vc_fq *vc_fq_new(uint32_t flows, uint64_t byte_cap, uint32_t packet_cap, uint32_t quantum,
                        int64_t target_ns, int64_t interval_ns, uint64_t seed)
{
    if (flows == 0 || flows > 65536 || byte_cap == 0 || packet_cap == 0 || packet_cap >= FQ_NIL ||
        quantum == 0 || target_ns <= 0 || interval_ns <= 0)
        return NULL;
    vc_fq *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->flows = calloc(flows, sizeof *q->flows);
    q->pkts = calloc(packet_cap, sizeof *q->pkts);
    if (!q->flows || !q->pkts) {
        free(q->flows);
        free(q->pkts);
        free(q);
        return NULL;
    }
    q->nflows = flows;
    q->quantum = quantum;
    q->byte_cap = byte_cap;
    q->packet_cap = packet_cap;
    q->seed = seed;
    q->newl.head = q->newl.tail = q->oldl.head = q->oldl.tail = FQ_NIL;
    for (uint32_t i = 0; i < flows; i++) {
        q->flows[i].head = q->flows[i].tail = FQ_NIL;
        /* mtu: RFC 8290's quantum (an MTU-sized packet) */
        vc_codel_init(&q->flows[i].codel, target_ns, interval_ns, quantum);
    }
    for (uint32_t i = 0; i < packet_cap; i++)
        q->pkts[i].next = i + 1 < packet_cap ? i + 1 : FQ_NIL;
    q->free_head = 0;
    return q;
}

VC_API void vc_fq_free(vc_fq *q)
{
    if (!q)
        return;
    for (uint32_t i = 0; i < q->packet_cap; i++) {
        if (q->pkts[i].data) {
            memset(q->pkts[i].data, 0, q->pkts[i].cap);   /* inner plaintext */
            free(q->pkts[i].data);
        }
    }
    free(q->pkts);
    free(q->flows);
    free(q);
}

/* ---- the flow hash: the inner 5-tuple ---- */

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

static uint64_t mix_bytes(uint64_t h, const uint8_t *p, size_t n)
{
    uint64_t v;
    while (n >= 8) {
        memcpy(&v, p, 8);
        h = mix(h, v);
        p += 8;
        n -= 8;
    }
    v = 0;
    memcpy(&v, p, n);
    return mix(h, v);
}

static int has_ports(uint8_t proto)
{
    return proto == 6 || proto == 17 || proto == 132 || proto == 136;
}

VC_API uint32_t vc_fq_flow_of(const vc_fq *q, const uint8_t *p, uint32_t len)
{
    uint64_t h = q->seed;
    uint8_t proto = 0;
    const uint8_t *l4 = NULL;
    if (len >= 20 && (p[0] >> 4) == 4) {
        uint32_t ihl = (uint32_t)(p[0] & 15) * 4;
        proto = p[9];
        h = mix_bytes(h, p + 12, 8);
        /* ports only in a first (or whole) packet: later fragments have none */
        int frag = ((p[6] & 0x1f) | p[7]) != 0;
        if (ihl >= 20 && !frag && len >= ihl + 4)
            l4 = p + ihl;
    } else if (len >= 40 && (p[0] >> 4) == 6) {
        proto = p[6];
        h = mix_bytes(h, p + 8, 32);
        if (len >= 44)
            l4 = p + 40;
    } else {
        h = mix_bytes(h, p, len < 8 ? len : 8);
    }
    h = mix(h, proto);
    if (l4 && has_ports(proto)) {
        uint32_t ports;
        memcpy(&ports, l4, 4);
        h = mix(h, ports);
    }
    return (uint32_t)(((h >> 32) * (uint64_t)q->nflows) >> 32);
}

/* ---- lists of flows ---- */

static void list_push(vc_fq *q, fq_list *l, uint32_t f, int which)
{
    q->flows[f].next = FQ_NIL;
    q->flows[f].list = which;
    if (l->tail == FQ_NIL)
        l->head = f;
    else
        q->flows[l->tail].next = f;
    l->tail = f;
}

static uint32_t list_pop(vc_fq *q, fq_list *l)
{
    uint32_t f = l->head;
    l->head = q->flows[f].next;
    if (l->head == FQ_NIL)
        l->tail = FQ_NIL;
    q->flows[f].next = FQ_NIL;
    q->flows[f].list = LIST_NONE;
    return f;
}

/* ---- packets ---- */

static void pkt_release(vc_fq *q, uint32_t i)
{
    fq_pkt *k = &q->pkts[i];
    if (k->cap > FQ_BUF) {
        memset(k->data, 0, k->cap);
        free(k->data);
        k->data = NULL;
        k->cap = 0;
    }
    k->next = q->free_head;
    q->free_head = i;
}

/* Take the head packet of flow f off its queue (the caller releases it). */
static uint32_t flow_pop(vc_fq *q, fq_flow *fl)
{
    uint32_t i = fl->head;
    fq_pkt *k = &q->pkts[i];
    fl->head = k->next;
    if (fl->head == FQ_NIL)
        fl->tail = FQ_NIL;
    fl->packets--;
    fl->bytes -= k->len;
    q->st.backlog_packets--;
    q->st.backlog_bytes -= k->len;
    if (fl->packets == 0)
        q->st.active_flows--;
    return i;
}

/* Over a cap: drop from the head of the fattest flow, half its bytes (at
 * most FQ_DROP_MAX packets, at least one). */
static void drop_from_fattest(vc_fq *q)
{
    uint32_t fat = 0;
    uint64_t most = 0;
    for (uint32_t f = 0; f < q->nflows; f++) {
        if (q->flows[f].bytes > most) {
            most = q->flows[f].bytes;
            fat = f;
        }
    }
    if (most == 0)
        return;
    fq_flow *fl = &q->flows[fat];
    uint64_t goal = fl->bytes / 2, dropped = 0;
    int n = 0;
    do {
        uint32_t i = flow_pop(q, fl);
        dropped += q->pkts[i].len;
        pkt_release(q, i);
        q->st.overlimit_drops++;
        n++;
    } while (fl->packets && dropped < goal && n < FQ_DROP_MAX);
}

VC_API int vc_fq_enqueue(vc_fq *q, const uint8_t *pkt, uint32_t len, int64_t now)
{
    if (!q || !pkt)
        return -EINVAL;
    if (len == 0 || len > 65535) {
        q->st.too_big++;        /* no IP packet: dropped, counted */
        return -EINVAL;
    }
    if (q->free_head == FQ_NIL)
        drop_from_fattest(q);
    if (q->free_head == FQ_NIL) {
        q->st.nomem_drops++;
        return -ENOMEM;
    }
    uint32_t i = q->free_head;
    fq_pkt *k = &q->pkts[i];
    if (k->cap < len) {
        uint32_t want = len <= FQ_BUF ? FQ_BUF : len;
        uint8_t *d = malloc(want);
        if (!d) {
            q->st.nomem_drops++;
            return -ENOMEM;
        }
        if (k->data) {
            memset(k->data, 0, k->cap);
            free(k->data);
        }
        k->data = d;
        k->cap = want;
    }
    q->free_head = k->next;
    memcpy(k->data, pkt, len);
    k->len = len;
    k->t_in = now;
    k->next = FQ_NIL;

    uint32_t f = vc_fq_flow_of(q, pkt, len);
    fq_flow *fl = &q->flows[f];
    if (fl->tail == FQ_NIL)
        fl->head = i;
    else
        q->pkts[fl->tail].next = i;
    fl->tail = i;
    if (fl->packets++ == 0)
        q->st.active_flows++;
    fl->bytes += len;
    q->st.backlog_packets++;
    q->st.backlog_bytes += len;
    q->st.enqueued++;
    q->st.bytes_in += len;
    if (fl->list == LIST_NONE) {
        list_push(q, &q->newl, f, LIST_NEW);
        fl->deficit = q->quantum;
        q->st.new_flow_count++;
    }
    if (q->st.backlog_bytes > q->st.max_backlog_bytes)
        q->st.max_backlog_bytes = q->st.backlog_bytes;
    while (q->st.backlog_bytes > q->byte_cap)
        drop_from_fattest(q);
    return (int)f;
}

/* RFC 8290's dequeue of one packet: the index of the packet (its flow in
 * *flow), or FQ_NIL when every queue is empty. */
static uint32_t dequeue_one(vc_fq *q, int64_t now, uint32_t *flow)
{
    for (;;) {
        fq_list *l = q->newl.head != FQ_NIL ? &q->newl : &q->oldl;
        if (l->head == FQ_NIL)
            return FQ_NIL;
        uint32_t f = l->head;
        fq_flow *fl = &q->flows[f];
        if (fl->deficit <= 0) {
            fl->deficit += q->quantum;
            list_pop(q, l);
            list_push(q, &q->oldl, f, LIST_OLD);
            continue;
        }
        /* CoDel at the head of the flow */
        uint32_t i = FQ_NIL;
        while (fl->head != FQ_NIL) {
            uint32_t h = fl->head;
            uint64_t backlog = q->st.backlog_bytes;
            if (!vc_codel_verdict(&fl->codel, now, now - q->pkts[h].t_in, backlog)) {
                i = flow_pop(q, fl);
                break;
            }
            pkt_release(q, flow_pop(q, fl));
            q->st.codel_drops++;
        }
        if (i == FQ_NIL) {
            vc_codel_empty(&fl->codel);
            /* an empty new flow goes to the old list once (no starvation of
             * the old flows by flows that keep coming back new) */
            list_pop(q, l);
            if (l == &q->newl)
                list_push(q, &q->oldl, f, LIST_OLD);
            continue;
        }
        fl->deficit -= q->pkts[i].len;
        *flow = f;
        return i;
    }
}

VC_API int vc_fq_dequeue(vc_fq *q, int64_t now, uint8_t *slab, size_t slab_size, size_t slot,
                         uint32_t *off, uint32_t *len, uint32_t *flow, int max)
{
    if (!q || !slab || !off || !len || slot == 0 || slot > UINT32_MAX)
        return 0;
    int n = 0;
    size_t at = 0;
    while (n < max && at + slot <= slab_size && at <= UINT32_MAX) {
        uint32_t f;
        uint32_t i = dequeue_one(q, now, &f);
        if (i == FQ_NIL)
            break;
        fq_pkt *k = &q->pkts[i];
        if (k->len > slot) {        /* never cut a packet: drop it, counted */
            q->st.too_big++;
            pkt_release(q, i);
            continue;
        }
        memcpy(slab + at, k->data, k->len);
        off[n] = (uint32_t)at;
        len[n] = k->len;
        if (flow)
            flow[n] = f;
        q->st.dequeued++;
        q->st.bytes_out += k->len;
        pkt_release(q, i);
        n++;
        at += slot;
    }
    return n;
}

VC_API void vc_fq_get_stats(const vc_fq *q, vc_fq_stats *out)
{
    if (q && out)
        *out = q->st;
}

VC_API uint32_t vc_fq_flow_packets(const vc_fq *q, uint32_t flow)
{
    if (!q || flow >= q->nflows)
        return 0;
    return q->flows[flow].packets;
}
