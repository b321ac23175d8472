/* Routing loops: the device's own outer datagram coming back in on its TUN.
 *
 * When the route to a peer's endpoint leads into the tunnel itself (an
 * endpoint inside the AllowedIPs of a default route without the fwmark
 * rules, say), every datagram sent to the peer is read back from the TUN as
 * an inner packet, sealed again for the same peer, and so on: each lap adds
 * 32 bytes of WireGuard, 8 of UDP and 20 or 40 of IP.  The Linux module lets
 * such a lap die where it outgrows the MTU; a userspace daemon whose sockets
 * let the kernel fragment locally sees each fragment come back as a packet
 * of its own, so the laps multiply instead.  The packet is recognised here
 * before it is sealed: UDP from the device's listen port to the endpoint of
 * the very peer that AllowedIPs picked for it.  Only that peer's own
 * datagrams can match, so onion routing through the same interface (an
 * endpoint reached through another peer of the device, which the module
 * allows) still works.  See vc_wg.h. */
#include "wg_internal.h"

static const uint8_t V4_MAPPED[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* Whether an IPv4 destination address is the endpoint's (an IPv4 endpoint,
 * or the v4-mapped form a dual-stack socket may keep). */
static int same_v4(const uint8_t *dst, const vc_endpoint *ep)
{
    if (ep->family == 4)
        return memcmp(dst, ep->addr, 4) == 0;
    return ep->family == 6 && memcmp(ep->addr, V4_MAPPED, 12) == 0 && memcmp(dst, ep->addr + 12, 4) == 0;
}

int wg_is_own_datagram(const vc_wg_table *t, const uint8_t *p, size_t len, const vc_endpoint *ep)
{
    uint32_t port = __atomic_load_n(&t->listen_port, __ATOMIC_RELAXED);
    const uint8_t *udp;
    if (!port || !ep->port)
        return 0;
    if (len >= 28 && (p[0] >> 4) == 4) {
        size_t ihl = (size_t)(p[0] & 15) * 4;
        /* UDP, and the first fragment (or none): later ones carry no header */
        if (ihl < 20 || p[9] != 17 || (((p[6] & 0x1f) << 8) | p[7]) || len < ihl + 8 || !same_v4(p + 16, ep))
            return 0;
        udp = p + ihl;
    } else if (len >= 48 && (p[0] >> 4) == 6) {
        /* UDP right after the fixed header: the kernel's UDP sends carry no
         * extension header, and a fragment's (44) hides the ports */
        if (p[6] != 17 || ep->family != 6 || memcmp(p + 24, ep->addr, 16) != 0)
            return 0;
        udp = p + 40;
    } else {
        return 0;
    }
    return (((uint32_t)udp[0] << 8) | udp[1]) == port && (((uint32_t)udp[2] << 8) | udp[3]) == ep->port;
}

void wg_count_loop(vc_wg_table *t, uint32_t peer)
{
    WG_ADD(&t->loops, 1);
    __atomic_store_n(&t->loop_peer, (int64_t)peer, __ATOMIC_RELAXED);
}

VC_API void vc_wg_set_listen_port(vc_wg_table *t, uint32_t port)
{
    __atomic_store_n(&t->listen_port, port <= 65535 ? port : 0, __ATOMIC_RELAXED);
}

VC_API uint64_t vc_wg_routing_loops(vc_wg_table *t, int64_t *last_peer)
{
    *last_peer = __atomic_load_n(&t->loop_peer, __ATOMIC_RELAXED);
    return __atomic_load_n(&t->loops, __ATOMIC_RELAXED);
}
