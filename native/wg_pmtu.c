/* Path MTU: each peer's, learned from the socket's error queue and kept in
 * the session table next to the endpoint it belongs to (see vc_wg.h). */
#include <errno.h>
#include "wg_internal.h"

#define VC_API __attribute__((visibility("default")))

VC_API uint32_t vc_wg_inner_mtu(uint32_t path_mtu, int family)
{
    uint32_t over = wg_outer_overhead(family) + VC_WG_OVERHEAD;
    if (path_mtu <= over)
        return 0;
    return (path_mtu - over) & ~15u;
}

uint32_t wg_peer_pmtu(const wg_peer *p, double tnow)
{
    if (!p->pmtu || tnow - p->pmtu_at >= VC_WG_PMTU_EXPIRES)
        return 0;
    return p->pmtu;
}

void wg_peer_new_endpoint(wg_peer *p, const vc_endpoint *ep)
{
    if (!p->ep_set || !ep || !wg_same_remote(&p->ep, ep))
        p->pmtu = 0;
}

/* Whether the error is one that says "too big", and its MTU (0: none). */
static uint32_t too_big_mtu(const vc_udp_error *e)
{
    if (e->err != EMSGSIZE)
        return 0;
    if (e->origin == VC_UDP_EE_ICMP && !(e->type == 3 && e->code == 4))
        return 0;
    if (e->origin == VC_UDP_EE_ICMP6 && !(e->type == 2 && e->code == 0))
        return 0;
    if (e->origin != VC_UDP_EE_LOCAL && e->origin != VC_UDP_EE_ICMP && e->origin != VC_UDP_EE_ICMP6)
        return 0;
    return e->info;
}

/* Whether the quoted start of the datagram can be one this peer was sent:
 * a transport data message (type 4) to the receiver index of one of its
 * keypairs.  A quote too short to hold the index (RFC 792 asks for only
 * the 8 bytes of the UDP header) proves nothing either way. */
static int quote_is_peers(const vc_wg_table *t, const wg_peer *p, const vc_udp_error *e)
{
    if (e->quoted_len < 8)
        return 1;
    if (vc_load32_le(e->quoted) != 4)
        return 0;   /* a handshake message (148 bytes at most) is never too big */
    uint32_t idx = vc_load32_le(e->quoted + 4), ids[3] = {p->cur, p->prev, p->next};
    for (int i = 0; i < 3; i++)
        if (ids[i] != WG_NIL && t->kps[ids[i]].remote_index == idx)
            return 1;
    return 0;
}

/* Whether the error is about the peer's endpoint.  This host's own error
 * (a send above the interface's MTU) names the address but not the port on
 * an unconnected IPv4 socket (the kernel's ip_local_error gives the
 * socket's connected port, 0): it cannot be forged, and the interface's
 * MTU holds for every peer at that address, so the address suffices. */
static int about(const wg_peer *p, const vc_udp_error *e)
{
    if (!p->ep_set)
        return 0;
    if (e->origin != VC_UDP_EE_LOCAL)
        return wg_same_remote(&p->ep, &e->ep);
    return p->ep.family == e->ep.family && memcmp(p->ep.addr, e->ep.addr, e->ep.family == 4 ? 4 : 16) == 0;
}

/* The error's MTU for the peer (its lock held): the code it gets. */
static int64_t take(vc_wg_table *t, wg_peer *p, uint32_t id, const vc_udp_error *e, uint32_t mtu,
                    double tnow)
{
    uint32_t now_mtu = wg_peer_pmtu(p, tnow);
    if (!quote_is_peers(t, p, e))
        return VC_WG_PMTU_NOT_OURS;
    if (now_mtu && mtu >= now_mtu)
        return VC_WG_PMTU_NOT_LOWER;
    p->pmtu = mtu;
    p->pmtu_at = tnow;
    return id;
}

/* Every peer the error is about takes it (several only for a local error:
 * peers at one address behind different ports); returns the first that did,
 * else the code of the last refusal. */
static int64_t learn(vc_wg_table *t, const vc_udp_error *e, uint32_t mtu, double tnow)
{
    uint32_t floor = e->ep.family == 4 ? VC_WG_PMTU_FLOOR4 : VC_WG_PMTU_FLOOR6;
    if (mtu < floor)
        mtu = floor;
    int64_t code = VC_WG_PMTU_NO_PEER, first = -1;
    for (uint32_t id = 0; id < t->peer_cap; id++) {
        wg_peer *p = &t->peers[id];
        if (!p->in_use)
            continue;
        wg_spin_lock(&p->lock);
        if (about(p, e))
            code = take(t, p, id, e, mtu, tnow);
        wg_spin_unlock(&p->lock);
        if (code >= 0 && first < 0)
            first = code;
        if (first >= 0 && e->origin != VC_UDP_EE_LOCAL)
            break;
    }
    return first >= 0 ? first : code;
}

VC_API int64_t vc_wg_pmtu_learn(vc_wg_table *t, const vc_udp_error *e, double now)
{
    uint32_t mtu = too_big_mtu(e);
    int64_t code = VC_WG_PMTU_NOT_TOO_BIG;
    wg_batch_begin(t);
    double tnow = now;
    if (mtu && (e->ep.family == 4 || e->ep.family == 6))
        code = learn(t, e, mtu, tnow);
    wg_batch_end(t);
    WG_ADD(code >= 0 ? &t->pmtu_learned : &t->pmtu_refused, 1);
    return code;
}

VC_API void vc_wg_pmtu_counts(vc_wg_table *t, uint64_t *learned, uint64_t *refused)
{
    *learned = __atomic_load_n(&t->pmtu_learned, __ATOMIC_RELAXED);
    *refused = __atomic_load_n(&t->pmtu_refused, __ATOMIC_RELAXED);
}
