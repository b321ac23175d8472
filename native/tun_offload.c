/* TUN offloads (IFF_VNET_HDR): split GSO super-packets read from the TUN,
 * coalesce packets written to it.  See vc_offload.h for the contract.
 *
 * Checksums are Internet checksums (RFC 1071) summed in native byte order: a
 * ones-complement sum does not depend on the byte order of its 16-bit words
 * as long as every term uses the same one, so 32-bit native loads are added
 * into a 64-bit accumulator and the result is folded (and byte-swapped only
 * when a host-order value is wanted).  Every region summed starts at an even
 * offset from the start of its checksummed area. */
#include <errno.h>
#include <arpa/inet.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "vc_offload.h"
#include "vc_tun_internal.h"

#define VC_API __attribute__((visibility("default")))

/* Linux 6.2 (USO); older userspace headers lack them. */
#ifndef TUN_F_USO4
#define TUN_F_USO4 0x20
#endif
#ifndef TUN_F_USO6
#define TUN_F_USO6 0x40
#endif

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_PSH 0x08
#define TCP_ACK 0x10
#define TCP_URG 0x20
#define TCP_ECE 0x40
#define TCP_CWR 0x80

#define PROTO_TCP 6
#define PROTO_UDP 17

/* vc_tun_read_offload: bytes of a read that go straight into the packet's
 * slot (the rest into rx->buf): more than any packet of a 1500-byte MTU. */
#define VC_TUN_READ_FIRST 2048

/* ---------------------------------------------------------------- helpers */

static inline uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Native-order sum of the bytes at p (a trailing odd byte is padded with a
 * zero byte after it, as RFC 1071 says).  Blocks of 64 bytes go through
 * 128-bit vectors (SSE2 on x86-64, NEON on arm64: the baseline of both): each
 * 64-bit lane adds the two 32-bit halves of the word it loads, so a lane
 * cannot overflow below 2^31 blocks; a 32-bit word stands for two 16-bit
 * words because 2^16 = 1 in ones-complement arithmetic. */
typedef uint64_t vc_u64x2 __attribute__((vector_size(16)));

static inline vc_u64x2 load_halves(const uint8_t *p)
{
    vc_u64x2 v;
    memcpy(&v, p, 16);
    return (v & 0xFFFFFFFFu) + (v >> 32);
}

static inline uint64_t csum_tail(uint64_t acc, const uint8_t *p, size_t n)
{
    while (n >= 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        acc += w;
        p += 4;
        n -= 4;
    }
    if (n >= 2) {
        uint16_t w;
        memcpy(&w, p, 2);
        acc += w;
        p += 2;
        n -= 2;
    }
    if (n) {
        uint8_t last[2] = {p[0], 0};
        uint16_t w;
        memcpy(&w, last, 2);
        acc += w;
    }
    return acc;
}

static uint64_t csum_add(uint64_t acc, const uint8_t *p, size_t n)
{
    vc_u64x2 a0 = {0, 0}, a1 = a0, a2 = a0, a3 = a0;
    while (n >= 64) {
        a0 += load_halves(p);
        a1 += load_halves(p + 16);
        a2 += load_halves(p + 32);
        a3 += load_halves(p + 48);
        p += 64;
        n -= 64;
    }
    while (n >= 16) {
        a0 += load_halves(p);
        p += 16;
        n -= 16;
    }
    vc_u64x2 a = a0 + a1 + a2 + a3;
    return csum_tail(acc + a[0] + a[1], p, n);
}

/* memcpy(dst, src, n) and csum_add(acc, src, n) in one pass over the data
 * (dst and src do not overlap). */
static uint64_t csum_copy(uint64_t acc, uint8_t *dst, const uint8_t *src, size_t n)
{
    vc_u64x2 a0 = {0, 0}, a1 = a0, a2 = a0, a3 = a0;
    while (n >= 64) {
        vc_u64x2 v0, v1, v2, v3;
        memcpy(&v0, src, 16);
        memcpy(&v1, src + 16, 16);
        memcpy(&v2, src + 32, 16);
        memcpy(&v3, src + 48, 16);
        memcpy(dst, &v0, 16);
        memcpy(dst + 16, &v1, 16);
        memcpy(dst + 32, &v2, 16);
        memcpy(dst + 48, &v3, 16);
        a0 += (v0 & 0xFFFFFFFFu) + (v0 >> 32);
        a1 += (v1 & 0xFFFFFFFFu) + (v1 >> 32);
        a2 += (v2 & 0xFFFFFFFFu) + (v2 >> 32);
        a3 += (v3 & 0xFFFFFFFFu) + (v3 >> 32);
        src += 64;
        dst += 64;
        n -= 64;
    }
    memcpy(dst, src, n);
    vc_u64x2 a = a0 + a1 + a2 + a3;
    return csum_add(acc + a[0] + a[1], src, n);
}

/* Folded to 16 bits, still native order. */
static uint16_t csum_fold_native(uint64_t acc)
{
    acc = (acc & 0xFFFFFFFFu) + (acc >> 32);
    acc = (acc & 0xFFFFFFFFu) + (acc >> 32);
    acc = (acc & 0xFFFFu) + (acc >> 16);
    acc = (acc & 0xFFFFu) + (acc >> 16);
    return (uint16_t)acc;
}

/* A host-order 16-bit value as a native-order term. */
static inline uint64_t term(uint32_t host16) { return htons((uint16_t)host16); }

static uint64_t pseudo_acc(const uint8_t *src, const uint8_t *dst, size_t alen, uint8_t proto,
                           uint32_t l4len)
{
    uint64_t acc = csum_add(0, src, alen);
    acc = csum_add(acc, dst, alen);
    return acc + term(proto) + term(l4len >> 16) + term(l4len & 0xFFFF);
}

/* Store ~sum at p (the bytes then verify to 0xFFFF). */
static inline void csum_store(uint8_t *p, uint64_t acc, int udp)
{
    uint16_t c = (uint16_t)~csum_fold_native(acc);
    if (udp && c == 0)
        c = 0xFFFF;          /* RFC 768: 0 means "no checksum" */
    memcpy(p, &c, 2);
}

static void ipv4_csum(uint8_t *ip, size_t ihl)
{
    ip[10] = ip[11] = 0;
    csum_store(ip + 10, csum_add(0, ip, ihl), 0);
}

VC_API uint16_t vc_csum_fold(const uint8_t *data, size_t n, uint32_t initial)
{
    return ntohs(csum_fold_native(csum_add(term(initial & 0xFFFF) + term(initial >> 16),
                                           data, n)));
}

VC_API uint16_t vc_csum_pseudo(const uint8_t *src, const uint8_t *dst, size_t addr_len,
                               uint8_t proto, uint32_t l4_len)
{
    return ntohs(csum_fold_native(pseudo_acc(src, dst, addr_len, proto, l4_len)));
}

/* Set the IP length fields of a packet of `total` bytes (IPv4: total length
 * and header checksum, so any other header change comes first) and point at
 * its addresses for the pseudo header; returns the address length. */
static size_t ip_finish(uint8_t *ip, size_t l3, int v6, size_t total, const uint8_t **src,
                        const uint8_t **dst)
{
    if (!v6) {
        put16(ip + 2, (uint32_t)total);
        ipv4_csum(ip, l3);
        *src = ip + 12;
        *dst = ip + 16;
        return 4;
    }
    put16(ip + 4, (uint32_t)(total - 40));
    *src = ip + 8;
    *dst = ip + 24;
    return 16;
}

/* ---------------------------------------------------------------- setup */

VC_API int vc_tun_has_vnet_hdr(int fd)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    if (ioctl(fd, TUNGETIFF, &ifr) < 0)
        return -errno;
    return (ifr.ifr_flags & IFF_VNET_HDR) != 0;
}

static unsigned tun_flags(int bits)
{
    unsigned f = 0;
    if (bits)
        f |= TUN_F_CSUM;
    if (bits & VC_TUN_OFFLOAD_TSO)
        f |= TUN_F_TSO4 | TUN_F_TSO6;
    if ((bits & VC_TUN_OFFLOAD_ECN) && (bits & VC_TUN_OFFLOAD_TSO))
        f |= TUN_F_TSO_ECN;
    if (bits & VC_TUN_OFFLOAD_USO)
        f |= TUN_F_USO4 | TUN_F_USO6;
    return f;
}

VC_API int vc_tun_set_offload(int fd, int want)
{
    int v = vc_tun_has_vnet_hdr(fd);
    if (v < 0)
        return v;
    if (!v)
        return -EINVAL;
    int sz = VC_VNET_HDR_LEN;
    if (ioctl(fd, TUNSETVNETHDRSZ, &sz) < 0)
        return -errno;
    want &= VC_TUN_OFFLOAD_CSUM | VC_TUN_OFFLOAD_TSO | VC_TUN_OFFLOAD_ECN | VC_TUN_OFFLOAD_USO;
    if (want & (VC_TUN_OFFLOAD_TSO | VC_TUN_OFFLOAD_USO))
        want |= VC_TUN_OFFLOAD_CSUM;        /* segmentation offloads need checksum offload */
    if (!(want & VC_TUN_OFFLOAD_TSO))
        want &= ~VC_TUN_OFFLOAD_ECN;
    /* Newest first: USO (6.2+) and TSO_ECN go first when the kernel refuses. */
    int tries[4] = {want, want & ~VC_TUN_OFFLOAD_USO,
                    want & ~(VC_TUN_OFFLOAD_USO | VC_TUN_OFFLOAD_ECN), 0};
    int err = 0;
    for (int i = 0; i < 4; i++) {
        if (i > 0 && tries[i] == tries[i - 1])
            continue;
        if (ioctl(fd, TUNSETOFFLOAD, (unsigned long)tun_flags(tries[i])) == 0)
            return tries[i];
        err = errno;
    }
    return -err;
}

/* ---------------------------------------------------------------- split */

/* Complete the checksum of a NEEDS_CSUM packet in place: the field holds the
 * pseudo-header sum, which is summed with everything from csum_start on. */
static int complete_csum(uint8_t *pkt, size_t n, const vc_vnet_hdr *h)
{
    size_t cs = h->csum_start, co = h->csum_offset;
    if (cs >= n || co > n - cs || n - cs - co < 2)
        return -EINVAL;
    uint8_t *field = pkt + cs + co;
    uint16_t initial;
    memcpy(&initial, field, 2);
    field[0] = field[1] = 0;
    int udp = co == 6 && n >= 20 &&
              (((pkt[0] >> 4) == 4 && pkt[9] == PROTO_UDP) ||
               ((pkt[0] >> 4) == 6 && n >= 40 && pkt[6] == PROTO_UDP));
    csum_store(field, csum_add(initial, pkt + cs, n - cs), udp);
    return 0;
}

typedef struct {
    size_t l3, hdr;       /* IP header length; IP + transport header length */
    size_t nseg;
    uint8_t proto, v6;
} gso_info;

/* Validate a GSO super-packet; the kernel's own hdr_len is not trusted (it
 * can be the whole linear part of the skb), the transport header is parsed. */
static int gso_parse(const uint8_t *pkt, size_t n, const vc_vnet_hdr *h, size_t mtu, gso_info *g)
{
    uint8_t type = h->gso_type & ~VC_VNET_GSO_ECN;
    if (n < 20 || n > VC_TUN_MAX_PACKET)
        return -EINVAL;
    int ver = pkt[0] >> 4;
    if (type == VC_VNET_GSO_TCPV4 && ver == 4)
        g->proto = PROTO_TCP;
    else if (type == VC_VNET_GSO_TCPV6 && ver == 6)
        g->proto = PROTO_TCP;
    else if (type == VC_VNET_GSO_UDP_L4 && (ver == 4 || ver == 6) &&
             !(h->gso_type & VC_VNET_GSO_ECN))
        g->proto = PROTO_UDP;
    else
        return -EINVAL;
    g->v6 = ver == 6;
    if (ver == 4) {
        g->l3 = (size_t)(pkt[0] & 15) * 4;
        if (g->l3 < 20 || g->l3 > n || pkt[9] != g->proto)
            return -EINVAL;
        if ((get16(pkt + 6) & 0x3FFF) != 0)     /* MF or a fragment offset */
            return -EINVAL;
    } else {
        /* Extension headers are refused: the pseudo header would need the
         * final destination of a routing header.  Local TCP/UDP sends none. */
        if (n < 40 || pkt[6] != g->proto)
            return -EINVAL;
        g->l3 = 40;
    }
    if (h->csum_start != g->l3 || h->csum_offset != (g->proto == PROTO_TCP ? 16 : 6))
        return -EINVAL;
    if (g->proto == PROTO_TCP) {
        if (n < g->l3 + 20)
            return -EINVAL;
        size_t doff = (size_t)(pkt[g->l3 + 12] >> 4) * 4;
        if (doff < 20 || n < g->l3 + doff)
            return -EINVAL;
        g->hdr = g->l3 + doff;
    } else {
        if (n < g->l3 + 8)
            return -EINVAL;
        g->hdr = g->l3 + 8;
    }
    if (h->hdr_len > n || h->gso_size == 0 || n == g->hdr)
        return -EINVAL;
    size_t payload = n - g->hdr, gso = h->gso_size;
    g->nseg = (payload + gso - 1) / gso;
    if (g->hdr + (payload < gso ? payload : gso) > mtu)
        return -EMSGSIZE;
    return 0;
}

/* Segment k of a validated super-packet, built at o. */
static size_t gso_segment(const uint8_t *pkt, size_t n, const vc_vnet_hdr *h, const gso_info *g,
                          size_t k, uint8_t *o)
{
    size_t gso = h->gso_size, start = g->hdr + k * gso;
    size_t dl = n - start < gso ? n - start : gso;
    size_t tl = g->hdr + dl;
    memcpy(o, pkt, g->hdr);
    /* the payload is summed as it is copied; the headers are summed after
     * their changes (g->hdr - g->l3 is even: 4-byte units) */
    uint64_t pay = csum_copy(0, o + g->hdr, pkt + start, dl);
    const uint8_t *src, *dst;
    if (!g->v6)
        put16(o + 4, get16(pkt + 4) + (uint32_t)k);     /* IDs increment, mod 2^16 */
    size_t alen = ip_finish(o, g->l3, g->v6, tl, &src, &dst);
    uint8_t *l4 = o + g->l3;
    if (g->proto == PROTO_TCP) {
        put32(l4 + 4, get32(pkt + g->l3 + 4) + (uint32_t)(k * gso));
        uint8_t fl = l4[13];
        if (k + 1 < g->nseg)
            fl &= (uint8_t)~(TCP_FIN | TCP_PSH);   /* only the last segment ends a push */
        if (k > 0)
            fl &= (uint8_t)~TCP_CWR;               /* only the first reports CWR */
        l4[13] = fl;
        l4[16] = l4[17] = 0;
        csum_store(l4 + 16, csum_add(pseudo_acc(src, dst, alen, PROTO_TCP, (uint32_t)(tl - g->l3)) + pay,
                                     l4, g->hdr - g->l3), 0);
    } else {
        put16(l4 + 4, (uint32_t)(tl - g->l3));
        l4[6] = l4[7] = 0;
        csum_store(l4 + 6, csum_add(pseudo_acc(src, dst, alen, PROTO_UDP, (uint32_t)(tl - g->l3)) + pay,
                                    l4, g->hdr - g->l3), 1);
    }
    return tl;
}

VC_API int vc_vnet_split(uint8_t *pkt, size_t pkt_len, const vc_vnet_hdr *h, size_t mtu,
                         uint8_t *slab, size_t slab_size, uint32_t *off, uint32_t *len, int max,
                         uint32_t *seg)
{
    if (!pkt || !h || !slab || !off || !len || !seg || max < 1 || mtu == 0 ||
        mtu > VC_TUN_MAX_MTU)
        return -EINVAL;
    if (slab_size > UINT32_MAX)
        slab_size = UINT32_MAX;
    if (slab_size < mtu)
        return -EINVAL;
    size_t slot = round16(mtu);
    if ((h->gso_type & ~VC_VNET_GSO_ECN) == VC_VNET_GSO_NONE) {
        if (h->gso_type != VC_VNET_GSO_NONE || *seg != 0 || pkt_len == 0 ||
            pkt_len > VC_TUN_MAX_PACKET)
            return -EINVAL;
        if ((h->flags & VC_VNET_F_NEEDS_CSUM) && complete_csum(pkt, pkt_len, h) < 0)
            return -EINVAL;
        if (pkt_len > mtu)
            return -EMSGSIZE;
        if (slab != pkt)
            memmove(slab, pkt, pkt_len);
        off[0] = 0;
        len[0] = (uint32_t)pkt_len;
        return 1;
    }
    gso_info g;
    int r = gso_parse(pkt, pkt_len, h, mtu, &g);
    if (r < 0)
        return r;
    if (*seg >= g.nseg)
        return -EINVAL;
    size_t k = *seg, pos = 0;
    int count = 0;
    while (k < g.nseg && count < max && pos <= slab_size && slab_size - pos >= mtu) {
        off[count] = (uint32_t)pos;
        len[count] = (uint32_t)gso_segment(pkt, pkt_len, h, &g, k, slab + pos);
        count++;
        k++;
        pos += slot;
    }
    *seg = k == g.nseg ? 0 : (uint32_t)k;
    return count;
}

VC_API int vc_tun_read_offload(int fd, vc_tun_rx *rx, uint8_t *slab, size_t slab_size, size_t mtu,
                               uint32_t *off, uint32_t *len, int max)
{
    if (!rx || !slab || !off || !len || max < 1 || mtu == 0 || mtu > VC_TUN_MAX_MTU)
        return -EINVAL;
    if (slab_size > UINT32_MAX)
        slab_size = UINT32_MAX;
    if (slab_size < mtu)
        return -EINVAL;
    size_t slot = round16(mtu), cursor = 0;
    int count = 0;
    if (rx->pend_len) {          /* the rest of a super-packet first */
        uint32_t seg = rx->pend_seg;
        int r = vc_vnet_split(rx->buf, rx->pend_len, &rx->pend_hdr, mtu, slab, slab_size,
                              off, len, max, &seg);
        if (r < 0) {             /* cannot happen: it was split before; drop it */
            rx->st.dropped++;
            rx->pend_len = 0;
            seg = 0;
        } else {
            rx->st.segments += (uint64_t)r;
            count = r;
            cursor = (size_t)r * slot;
        }
        rx->pend_seg = seg;
        if (seg != 0)
            return count;
        rx->pend_len = 0;
    }
    /* The first `first` bytes of a read land in the packet's own slot, the
     * rest in rx->buf after `first` bytes of room.  A packet that fits (every
     * packet of a tunnel MTU, and every segment) needs no copy; a super-packet
     * gets its head copied in front of the rest (first bytes, not the whole
     * packet: the slots of a large mtu would otherwise take the super-packet
     * whole and it would be copied whole), a larger single packet its tail
     * into its slot. */
    size_t first = mtu < VC_TUN_READ_FIRST ? mtu : VC_TUN_READ_FIRST;
    while (count < max && cursor <= slab_size && slab_size - cursor >= mtu) {
        struct iovec iov[3] = {
            {rx->hdr, VC_VNET_HDR_LEN},
            {slab + cursor, first},
            {rx->buf + first, VC_TUN_RX_BUF - first},
        };
        ssize_t r = readv(fd, iov, 3);
        int f = r > 0 ? 2 : r == 0 ? 1 : vc_tun_read_failed(errno, count);
        if (f == 0)
            continue;
        if (f == 1)
            break;
        if (f < 0)
            return f;
        rx->st.reads++;
        if ((size_t)r <= VC_VNET_HDR_LEN) {
            rx->st.dropped++;
            continue;
        }
        size_t plen = (size_t)r - VC_VNET_HDR_LEN;
        vc_vnet_hdr h;
        h.flags = rx->hdr[0];
        h.gso_type = rx->hdr[1];
        memcpy(&h.hdr_len, rx->hdr + 2, 2);    /* virtio fields: host byte order */
        memcpy(&h.gso_size, rx->hdr + 4, 2);
        memcpy(&h.csum_start, rx->hdr + 6, 2);
        memcpy(&h.csum_offset, rx->hdr + 8, 2);
        uint8_t *at = slab + cursor;
        if (h.gso_type == VC_VNET_GSO_NONE) {
            if (plen > mtu) {
                rx->st.too_big++;
                continue;
            }
            if (plen > first)
                memcpy(at + first, rx->buf + first, plen - first);
            if (h.flags & VC_VNET_F_NEEDS_CSUM) {
                if (complete_csum(at, plen, &h) < 0) {
                    rx->st.dropped++;
                    continue;
                }
                rx->st.csum_completed++;
            }
            off[count] = (uint32_t)cursor;
            len[count] = (uint32_t)plen;
            count++;
            cursor += slot;
            continue;
        }
        /* A super-packet: make it contiguous in rx->buf, then cut it into
         * slots from this one on. */
        memcpy(rx->buf, at, plen < first ? plen : first);
        uint32_t seg = 0;
        int s = vc_vnet_split(rx->buf, plen, &h, mtu, at, slab_size - cursor, off + count,
                              len + count, max - count, &seg);
        if (s < 0) {
            if (s == -EMSGSIZE)
                rx->st.too_big++;
            else
                rx->st.dropped++;
            continue;
        }
        for (int i = 0; i < s; i++)
            off[count + i] += (uint32_t)cursor;
        rx->st.superpackets++;
        rx->st.segments += (uint64_t)s;
        count += s;
        cursor += (size_t)s * slot;
        if (seg != 0) {
            rx->pend_hdr = h;
            rx->pend_len = (uint32_t)plen;
            rx->pend_seg = seg;
            break;
        }
    }
    return count;
}

/* ---------------------------------------------------------------- coalesce */

/* The rules are the Linux kernel's GRO (inet_gro_receive, ipv6_gro_receive,
 * tcp_gro_receive, udp_gro_receive_segment and inet_gro_flush in
 * include/net/gro.h), never looser: where vpncrypt differs it merges less.
 *
 * Order.  Items are written in the order their first packet came, and a
 * packet joins only an open item of its own flow, so a flow keeps its order
 * as long as every packet that cannot join closes its flow's item.  A packet
 * whose flow cannot be told (no ports: an IPv4 fragment, IPv6 extension
 * headers, ICMP, a truncated transport header) may belong to any flow between
 * its addresses: it closes every open item of that address pair (a
 * "barrier"), so nothing that came after it on the wire is written before it.
 * The kernel's GRO would let such a packet overtake the held ones; the
 * receiver without offloads sees the wire's order, and that is what vpncrypt
 * keeps. */

typedef struct {
    uint16_t l3, l4h, pay;
    uint8_t v6, proto, cand, keyed, pair, zero6;
    uint32_t hash;
} pinfo;

typedef struct {
    int head, last;
    uint32_t total, next_seq;
    uint16_t count, gso;
    uint8_t open, checked, fixed_id;
} gitem;

/* Parse packet p (n bytes): pair if its IP addresses can be read; keyed if it
 * also has the ports of a TCP or UDP flow; cand if it may be coalesced
 * (flags: VC_GRO_TCP/UDP enabled); zero6 for IPv6 UDP with checksum 0. */
static void gro_parse(const uint8_t *p, size_t n, int flags, pinfo *pi)
{
    memset(pi, 0, sizeof *pi);
    if (n < 20 || n > VC_TUN_MAX_PACKET)
        return;
    int ver = p[0] >> 4;
    size_t l3;
    int cand_ip;
    if (ver == 4) {
        pi->pair = 1;
        l3 = (size_t)(p[0] & 15) * 4;
        if (l3 < 20 || n < l3)
            return;
        uint16_t frag = get16(p + 6);
        if (frag & 0x1FFF)           /* not the first fragment: no ports */
            return;
        pi->proto = p[9];
        /* 0x45 (no options), of every flag bit only DF (0x4000): not a
         * fragment (MF 0x2000), not the reserved bit (0x8000); no padding;
         * a valid header checksum */
        cand_ip = l3 == 20 && !(frag & ~0x4000) && get16(p + 2) == n &&
                  csum_fold_native(csum_add(0, p, 20)) == 0xFFFF;
    } else if (ver == 6) {
        if (n < 40)
            return;
        pi->pair = 1;
        pi->v6 = 1;
        l3 = 40;
        pi->proto = p[6];            /* an extension header: no ports */
        cand_ip = get16(p + 4) + 40u == n;
    } else {
        return;
    }
    size_t l4h;
    if (pi->proto == PROTO_TCP) {
        if (n < l3 + 20)
            return;
        l4h = (size_t)(p[l3 + 12] >> 4) * 4;
        if (l4h < 20 || n < l3 + l4h)
            return;
        uint8_t fl = p[l3 + 13];
        pi->cand = cand_ip && (flags & VC_GRO_TCP) && (fl & TCP_ACK) &&
                   !(fl & (TCP_SYN | TCP_RST | TCP_URG)) && n > l3 + l4h;
    } else if (pi->proto == PROTO_UDP) {
        if (n < l3 + 8)
            return;
        l4h = 8;
        /* udp_gro_receive_segment: a checksum (not 0), a length that is the
         * packet's and more than the header */
        int zero = p[l3 + 6] == 0 && p[l3 + 7] == 0;
        pi->zero6 = (uint8_t)(zero && pi->v6);
        pi->cand = cand_ip && (flags & VC_GRO_UDP) && !zero && n > l3 + 8 &&
                   get16(p + l3 + 4) == n - l3;
    } else {
        return;
    }
    pi->keyed = 1;
    pi->l3 = (uint16_t)l3;
    pi->l4h = (uint16_t)l4h;
    pi->pay = (uint16_t)(n - l3 - l4h);
    /* FNV-1a over protocol, addresses and ports */
    const uint8_t *a = pi->v6 ? p + 8 : p + 12;
    size_t alen = pi->v6 ? 32 : 8;
    uint32_t h = 2166136261u ^ pi->proto;
    h *= 16777619u;
    for (size_t i = 0; i < alen; i++)
        h = (h ^ a[i]) * 16777619u;
    for (size_t i = 0; i < 4; i++)
        h = (h ^ p[l3 + i]) * 16777619u;
    pi->hash = h;
}

/* Same source and destination address (both packets have pair set). */
static int same_pair(const uint8_t *a, int a6, const uint8_t *b, int b6)
{
    if (a6 != b6)
        return 0;
    return a6 ? memcmp(a + 8, b + 8, 32) == 0 : memcmp(a + 12, b + 12, 8) == 0;
}

static int same_flow(const uint8_t *a, const pinfo *pa, const uint8_t *b, const pinfo *pb)
{
    if (pa->v6 != pb->v6 || pa->proto != pb->proto)
        return 0;
    size_t at = pa->v6 ? 8 : 12, alen = pa->v6 ? 32 : 8;
    return memcmp(a + at, b + at, alen) == 0 && memcmp(a + pa->l3, b + pb->l3, 4) == 0;
}

/* The transport checksum of a whole packet verifies (UDP checksum 0 never
 * gets here: such a datagram is no candidate). */
static int l4_csum_ok(const uint8_t *p, const pinfo *pi, size_t n)
{
    size_t l4len = n - pi->l3;
    const uint8_t *src = pi->v6 ? p + 8 : p + 12, *dst = pi->v6 ? p + 24 : p + 16;
    size_t alen = pi->v6 ? 16 : 4;
    uint64_t acc = csum_add(pseudo_acc(src, dst, alen, pi->proto, (uint32_t)l4len), p + pi->l3,
                            l4len);
    return csum_fold_native(acc) == 0xFFFF;
}

/* May packet p (pp) follow the item whose head is hp (ph)?  IP rules, then
 * the transport rules of the kernel's GRO. */
static int can_append(const gitem *it, const uint8_t *hp, const pinfo *ph, const uint8_t *p,
                      const pinfo *pp)
{
    if (!it->open)
        return 0;
    if (!ph->v6) {
        if (hp[1] != p[1] || hp[8] != p[8] || hp[6] != p[6])
            return 0;            /* TOS, TTL, flag bits (DF; the rest are 0) */
        /* IDs count up by one from the head's, or, with DF, stay the head's
         * (inet_gro_flush: decided by the second packet) */
        uint16_t step = (uint16_t)(get16(p + 4) - get16(hp + 4));
        int fixed = (p[6] & 0x40) && step == 0 && (it->count == 1 || it->fixed_id);
        if (!fixed && (step != it->count || it->fixed_id))
            return 0;
    } else {
        if (memcmp(hp, p, 4) != 0 || hp[7] != p[7])
            return 0;            /* traffic class, flow label, hop limit */
    }
    if (pp->pay > it->gso || it->total + pp->pay > VC_TUN_MAX_PACKET)
        return 0;
    if (pp->proto == PROTO_UDP)
        return it->count < VC_GRO_UDP_MAX_SEGS;
    const uint8_t *ht = hp + ph->l3, *pt = p + pp->l3;
    uint8_t hf = ht[13], pf = pt[13];
    if (pf & TCP_CWR)
        return 0;
    /* tcp_gro_receive compares the word at byte 12: the data offset and the
     * four reserved bits (AccECN's AE among them), the flags but CWR, FIN and
     * PSH, and the window */
    if (ht[12] != pt[12] || ((hf ^ pf) & ~(TCP_CWR | TCP_FIN | TCP_PSH)))
        return 0;
    if (ph->l4h != pp->l4h || memcmp(ht + 8, pt + 8, 4) != 0 ||     /* ACK number */
        memcmp(ht + 14, pt + 14, 2) != 0 ||                          /* window */
        memcmp(ht + 20, pt + 20, (size_t)ph->l4h - 20) != 0)         /* options */
        return 0;
    return get32(pt + 4) == it->next_seq;
}

static void item_start(gitem *it, int i, const uint8_t *p, const pinfo *pi, size_t n)
{
    it->head = it->last = i;
    it->total = (uint32_t)n;
    it->count = 1;
    it->gso = pi->pay;
    it->checked = 0;
    it->fixed_id = 0;
    it->open = pi->cand;
    if (pi->cand && pi->proto == PROTO_TCP) {
        it->next_seq = get32(p + pi->l3 + 4) + pi->pay;
        if (p[pi->l3 + 13] & (TCP_PSH | TCP_FIN))
            it->open = 0;        /* a push or FIN ends the super-packet */
    }
}

/* Finish the headers of a super-packet at o (its vnet header, then the head
 * packet's IP and transport headers as they came): IP lengths (and IPv4
 * checksum), the last packet's PSH/FIN, the UDP length, the partial checksum
 * and the vnet header for an IP packet of `total` bytes. */
static void super_finish(uint8_t *o, const gitem *it, const pinfo *ph, size_t total, uint8_t last_flags)
{
    uint8_t *ip = o + VC_VNET_HDR_LEN;
    size_t hdr = (size_t)ph->l3 + ph->l4h;
    const uint8_t *src, *dst;
    size_t alen = ip_finish(ip, ph->l3, ph->v6, total, &src, &dst);
    uint8_t *l4 = ip + ph->l3;
    vc_vnet_hdr h = {VC_VNET_F_NEEDS_CSUM, 0, (uint16_t)hdr, it->gso, ph->l3, 0};
    if (ph->proto == PROTO_TCP) {
        l4[13] |= last_flags & (TCP_PSH | TCP_FIN);
        h.gso_type = ph->v6 ? VC_VNET_GSO_TCPV6 : VC_VNET_GSO_TCPV4;
        if (l4[13] & TCP_CWR)
            h.gso_type |= VC_VNET_GSO_ECN;
        h.csum_offset = 16;
    } else {
        put16(l4 + 4, (uint32_t)(total - ph->l3));
        h.gso_type = VC_VNET_GSO_UDP_L4;
        h.csum_offset = 6;
    }
    /* CHECKSUM_PARTIAL: the field holds the folded pseudo-header sum; the
     * kernel adds everything from csum_start on and complements. */
    uint16_t ps = csum_fold_native(pseudo_acc(src, dst, alen, ph->proto, (uint32_t)(total - ph->l3)));
    memcpy(l4 + h.csum_offset, &ps, 2);
    o[0] = h.flags;
    o[1] = h.gso_type;
    memcpy(o + 2, &h.hdr_len, 2);
    memcpy(o + 4, &h.gso_size, 2);
    memcpy(o + 6, &h.csum_start, 2);
    memcpy(o + 8, &h.csum_offset, 2);
}

/* Write item it at o: a zero vnet header and the packet, or a super-packet. */
static size_t item_write(const gitem *it, const int *nxt, const pinfo *pis, const uint8_t *in,
                         const uint32_t *off, const uint32_t *len, uint8_t *o)
{
    const uint8_t *hp = in + off[it->head];
    const pinfo *ph = &pis[it->head];
    memset(o, 0, VC_VNET_HDR_LEN);
    memcpy(o + VC_VNET_HDR_LEN, hp, len[it->head]);
    if (it->count == 1)
        return VC_VNET_HDR_LEN + len[it->head];
    uint8_t *ip = o + VC_VNET_HDR_LEN;
    size_t hdr = (size_t)ph->l3 + ph->l4h, pos = len[it->head];
    uint8_t last_flags = 0;
    for (int q = nxt[it->head]; q >= 0; q = nxt[q]) {
        memcpy(ip + pos, in + off[q] + hdr, pis[q].pay);
        pos += pis[q].pay;
        if (ph->proto == PROTO_TCP)
            last_flags = in[off[q] + ph->l3 + 13];
    }
    super_finish(o, it, ph, pos, last_flags);
    return VC_VNET_HDR_LEN + pos;
}

/* Headers of a super-packet: the vnet header, and IPv6 + TCP with options at most. */
#define SUPER_HDR_MAX (VC_VNET_HDR_LEN + 40 + 60)

/* The same bytes as item_write, as an iovec list for writev(): the headers
 * built in hb (SUPER_HDR_MAX bytes; a single packet's vnet header is
 * zero_hdr), every payload where it lies in `in`.  Returns the count of
 * iovecs (at most it->count + 1). */
static const uint8_t zero_hdr[VC_VNET_HDR_LEN];

static int item_iov(const gitem *it, const int *nxt, const pinfo *pis, const uint8_t *in,
                    const uint32_t *off, const uint32_t *len, uint8_t *hb, struct iovec *iov)
{
    const uint8_t *hp = in + off[it->head];
    const pinfo *ph = &pis[it->head];
    if (it->count == 1) {
        iov[0].iov_base = (void *)zero_hdr;
        iov[0].iov_len = VC_VNET_HDR_LEN;
        iov[1].iov_base = (void *)hp;
        iov[1].iov_len = len[it->head];
        return 2;
    }
    size_t hdr = (size_t)ph->l3 + ph->l4h, pos = len[it->head];
    memcpy(hb + VC_VNET_HDR_LEN, hp, hdr);
    iov[0].iov_base = hb;
    iov[0].iov_len = VC_VNET_HDR_LEN + hdr;
    iov[1].iov_base = (void *)(hp + hdr);
    iov[1].iov_len = len[it->head] - hdr;
    int k = 2;
    uint8_t last_flags = 0;
    for (int q = nxt[it->head]; q >= 0; q = nxt[q]) {
        iov[k].iov_base = (void *)(in + off[q] + hdr);
        iov[k].iov_len = pis[q].pay;
        k++;
        pos += pis[q].pay;
        if (ph->proto == PROTO_TCP)
            last_flags = in[off[q] + ph->l3 + 13];
    }
    super_finish(hb, it, ph, pos, last_flags);
    return k;
}

#define GRO_TABLE 512          /* open-addressing flow table, > 2 x VC_GRO_ROUND */

/* A packet without ports between these addresses: close every open item of
 * the pair.  openl lists the items that were open when started; those closed
 * since are dropped from it on the way. */
static void gro_barrier(gitem *items, const pinfo *pis, const uint8_t *in, const uint32_t *off,
                        int16_t *openl, int *nopen, const uint8_t *p, int v6)
{
    int k = 0;
    for (int j = 0; j < *nopen; j++) {
        gitem *it = &items[openl[j]];
        if (!it->open)
            continue;
        if (same_pair(in + off[it->head], pis[it->head].v6, p, v6)) {
            it->open = 0;
            continue;
        }
        openl[k++] = openl[j];
    }
    *nopen = k;
}

/* The plan of one round: its packets' parses, the items (writes) and, per
 * packet, the next packet of its item. */
typedef struct {
    pinfo pis[VC_GRO_ROUND];
    gitem items[VC_GRO_ROUND];
    int nxt[VC_GRO_ROUND];
} gro_plan;

/* Plan one round of at most VC_GRO_ROUND packets, with `room` output bytes
 * (every write: its vnet header and packet) and max_writes writes; returns
 * the number of items, *consumed the packets they cover. */
static int gro_plan_round(gro_plan *pl, const uint8_t *in, const uint32_t *off, const uint32_t *len,
                          int n, size_t room, int max_writes, int flags, int *consumed,
                          vc_gro_stats *st)
{
    pinfo *pis = pl->pis;
    gitem *items = pl->items;
    int *nxt = pl->nxt;
    int16_t table[GRO_TABLE];
    int16_t openl[VC_GRO_ROUND];
    memset(table, 0xFF, sizeof table);
    int nitems = 0, nopen = 0;
    size_t need = 0, out_size = room;
    int i;
    for (i = 0; i < n; i++) {
        const uint8_t *p = in + off[i];
        size_t plen = len[i];
        pinfo *pi = &pis[i];
        gro_parse(p, plen, flags, pi);
        nxt[i] = -1;
        int slot = -1;
        gitem *flow = NULL;
        if (pi->keyed) {
            for (unsigned k = pi->hash & (GRO_TABLE - 1);; k = (k + 1) & (GRO_TABLE - 1)) {
                if (table[k] < 0) {
                    slot = (int)k;
                    break;
                }
                gitem *it = &items[table[k]];
                if (same_flow(in + off[it->head], &pis[it->head], p, pi)) {
                    slot = (int)k;
                    flow = it;
                    break;
                }
            }
        }
        if (flow && pi->cand && flow->open &&
            can_append(flow, in + off[flow->head], &pis[flow->head], p, pi)) {
            if (need + pi->pay > out_size)
                break;
            int ok = 1;
            if (!flow->checked) {
                flow->checked = 1;
                if (!l4_csum_ok(in + off[flow->head], &pis[flow->head], len[flow->head])) {
                    ok = 0;          /* the head goes alone; this one may start anew */
                    if (st)
                        st->bad_csum++;
                }
            }
            if (ok && !l4_csum_ok(p, pi, plen)) {
                if (st)
                    st->bad_csum++;
                pi->cand = 0;        /* written alone, in its place; the kernel drops it */
                ok = 0;
            }
            if (ok) {
                if (flow->count == 1 && !pi->v6)
                    flow->fixed_id = get16(p + 4) == get16(in + off[flow->head] + 4);
                nxt[flow->last] = i;
                flow->last = i;
                flow->count++;
                flow->total += pi->pay;
                need += pi->pay;
                if (pi->proto == PROTO_TCP) {
                    flow->next_seq += pi->pay;
                    if (p[pi->l3 + 13] & (TCP_PSH | TCP_FIN))
                        flow->open = 0;
                }
                if (pi->pay < flow->gso)
                    flow->open = 0;      /* a short segment ends the super-packet */
                if (st)
                    st->coalesced++;
                continue;
            }
        }
        if (nitems == max_writes || need + VC_VNET_HDR_LEN + plen > out_size)
            break;
        /* Nothing more joins the flow's item: this packet (alone, or the head
         * of the flow's next item) comes after it. */
        if (flow)
            flow->open = 0;
        else if (!pi->keyed && pi->pair)
            gro_barrier(items, pis, in, off, openl, &nopen, p, pi->v6);
        if (pi->zero6 && (flags & VC_GRO_UDP) && st)
            st->bad_csum++;              /* IPv6 UDP checksum 0: alone, as it came */
        item_start(&items[nitems], i, p, pi, plen);
        if (items[nitems].open)
            openl[nopen++] = (int16_t)nitems;
        if (pi->keyed && (pi->cand || !flow))
            table[slot] = (int16_t)nitems;
        nitems++;
        need += VC_VNET_HDR_LEN + plen;
    }
    *consumed = i;
    return nitems;
}

/* One round of at most VC_GRO_ROUND packets, written to out from *opos. */
static int gro_round(const uint8_t *in, const uint32_t *off, const uint32_t *len, int n,
                     uint8_t *out, size_t out_size, size_t *opos, uint32_t *woff, uint32_t *wlen,
                     uint32_t *wpk, int max_writes, int flags, int *consumed, vc_gro_stats *st)
{
    gro_plan pl;
    int nitems = gro_plan_round(&pl, in, off, len, n, out_size - *opos, max_writes, flags, consumed, st);
    size_t pos = *opos;
    for (int w = 0; w < nitems; w++) {
        woff[w] = (uint32_t)pos;
        wlen[w] = (uint32_t)item_write(&pl.items[w], pl.nxt, pl.pis, in, off, len, out + pos);
        wpk[w] = pl.items[w].count;
        pos += wlen[w];
    }
    *opos = pos;
    return nitems;
}

VC_API int vc_gro_coalesce(const uint8_t *in, const uint32_t *off, const uint32_t *len, int n,
                           uint8_t *out, size_t out_size, uint32_t *woff, uint32_t *wlen,
                           uint32_t *wpk, int max_writes, int flags, int *consumed,
                           vc_gro_stats *st)
{
    if (consumed)
        *consumed = 0;
    if (n < 0 || (n > 0 && (!in || !off || !len || !out || !woff || !wlen || !wpk)) ||
        !consumed || max_writes < 0)
        return -EINVAL;
    size_t opos = 0;
    int writes = 0, done = 0;
    while (done < n && writes < max_writes) {
        int chunk = n - done < VC_GRO_ROUND ? n - done : VC_GRO_ROUND;
        int used = 0;
        int w = gro_round(in, off + done, len + done, chunk, out, out_size, &opos,
                          woff + writes, wlen + writes, wpk + writes, max_writes - writes, flags,
                          &used, st);
        writes += w;
        done += used;
        if (used < chunk)
            break;               /* out or the write list is full */
    }
    *consumed = done;
    if (st) {
        st->packets += (uint64_t)done;
        st->writes += (uint64_t)writes;
    }
    return writes;
}

/* Write items of one plan with writev(): returns 0, or the errno that stops
 * the batch (*delivered counts the input packets written). */
static int write_plan(int fd, const gro_plan *pl, int nitems, const uint8_t *in, const uint32_t *off,
                      const uint32_t *len, vc_gro_stats *st, int *delivered, int *e0)
{
    struct iovec iov[VC_GRO_ROUND + 1];
    uint8_t hb[SUPER_HDR_MAX];
    for (int w = 0; w < nitems; w++) {
        int k = item_iov(&pl->items[w], pl->nxt, pl->pis, in, off, len, hb, iov);
        ssize_t r;
        do
            r = writev(fd, iov, k);
        while (r < 0 && errno == EINTR);
        if (r >= 0) {
            *delivered += (int)pl->items[w].count;
            continue;
        }
        int e = errno;
        if (st)
            st->write_errors++;
        if (!*e0)
            *e0 = e;
        if (vc_tun_write_stops(e))
            return e;
    }
    return 0;
}

VC_API int vc_tun_write_offload(int fd, const uint8_t *in, const uint32_t *off, const uint32_t *len,
                                int n, uint8_t *out, size_t out_size, int flags, vc_gro_stats *st,
                                int *err)
{
    int delivered = 0, e0 = 0, done = 0;
    if (err)
        *err = 0;
    if (n < 0 || (n > 0 && (!in || !off || !len || !out)) ||
        out_size < VC_VNET_HDR_LEN + VC_TUN_MAX_PACKET)
        return -EINVAL;
    /* The packets are planned as vc_gro_coalesce does and written with
     * writev() from where they lie: no copy but the headers of each
     * super-packet (out is no longer needed; its size is still checked). */
    gro_plan pl;
    while (done < n) {
        if (len[done] > VC_TUN_MAX_PACKET) {      /* a packet longer than 65535 bytes */
            if (!e0)
                e0 = EMSGSIZE;
            done++;
            continue;
        }
        int chunk = 0;
        while (chunk < VC_GRO_ROUND && done + chunk < n && len[done + chunk] <= VC_TUN_MAX_PACKET)
            chunk++;
        int used = 0;
        int nw = gro_plan_round(&pl, in, off + done, len + done, chunk, SIZE_MAX, VC_GRO_ROUND, flags,
                                &used, st);
        if (st) {
            st->packets += (uint64_t)used;
            st->writes += (uint64_t)nw;
        }
        if (write_plan(fd, &pl, nw, in, off + done, len + done, st, &delivered, &e0))
            break;
        done += used;
    }
    if (err)
        *err = e0;
    return delivered;
}
