/* libFuzzer harness for the TUN offloads (native/tun_offload.c).
 *
 * Byte 0 & 1 picks the target:
 *   0  vc_vnet_split: bytes 1..10 a vnet header, 11..12 the mtu (68..9067),
 *      13 the packets per call (1..8), the rest the packet (in a heap block of
 *      exactly its size, so ASan catches reads past it).  Checks: the result
 *      is a count or -EINVAL/-EMSGSIZE; the calls resume until segment 0; every
 *      packet lies in its slot, at most mtu long, nothing is written past the
 *      slab (a canary); every segment of a GSO packet has a valid IPv4 header
 *      checksum and a valid TCP/UDP checksum (summed here independently).
 *   1  vc_gro_coalesce: byte 1 the flags, then records (at most 96):
 *        r & 1 == 0  raw:  u16 length (% 2048), bytes
 *        r & 1 == 1  made: a packet over IPv4 or IPv6 from a template, fields
 *                    chosen by the next 8 bytes: a valid TCP segment or UDP
 *                    datagram of one of 4 flows (seq step, flags, payload
 *                    length, TTL, DF, IPv4 IDs random/fixed/counting, TCP
 *                    reserved bits, UDP checksum 0, the IPv4 reserved flag),
 *                    or a packet without ports between the same addresses
 *                    (ICMP, an IPv4 fragment, an IPv6 Fragment or
 *                    Destination Options header), so the coalescing paths
 *                    and the order rules are reached.
 *      Checks: every input packet is covered once (sum of per-write counts);
 *      a single-packet write is a zero vnet header and the packet unchanged;
 *      a super-packet splits (vc_vnet_split) into exactly its count of
 *      segments, each with valid checksums, of at most 65535 bytes in all.
 *      Then every delivered packet (single or segment) is matched to its
 *      input, and, stated again here from the kernel's GRO: a super-packet
 *      holds consecutive packets of one flow with valid checksums, equal IP
 *      fields (TOS/TTL/DF, traffic class/flow label/hop limit), IPv4 without
 *      options or fragment bits, IDs counting up or (DF) fixed; TCP: equal
 *      byte 12, flags but CWR/FIN/PSH, ACK, window and options, CWR only on
 *      the first, PSH/FIN only on the last; UDP: no checksum 0, at most 64;
 *      every payload but the last of the first's size.  Order: packets of one
 *      flow are delivered in input order, and a packet without ports neither
 *      overtakes nor is overtaken by any packet between its addresses.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vc_offload.h"

#define MAXP 96
#define CANARY 0xA7

static void fail(const char *why)
{
    fprintf(stderr, "fuzz_offload: %s\n", why);
    abort();
}

static uint32_t sum16(const uint8_t *p, size_t n, uint32_t s)
{
    for (size_t i = 0; i + 1 < n; i += 2)
        s += (uint32_t)(p[i] << 8 | p[i + 1]);
    if (n & 1)
        s += (uint32_t)p[n - 1] << 8;
    return s;
}

static int folds_to_ffff(uint32_t s)
{
    while (s >> 16)
        s = (s & 0xFFFF) + (s >> 16);
    return s == 0xFFFF;
}

/* A segment produced by split: checksums verify. */
static void check_segment(const uint8_t *p, size_t n)
{
    if (n < 20)
        fail("segment shorter than an IP header");
    size_t l3;
    const uint8_t *src;
    size_t alen;
    uint8_t proto;
    if ((p[0] >> 4) == 4) {
        l3 = (size_t)(p[0] & 15) * 4;
        if (!folds_to_ffff(sum16(p, l3, 0)))
            fail("bad IPv4 header checksum");
        if ((size_t)(p[2] << 8 | p[3]) != n)
            fail("IPv4 total length");
        src = p + 12, alen = 4, proto = p[9];
    } else {
        l3 = 40;
        if ((size_t)(p[4] << 8 | p[5]) + 40 != n)
            fail("IPv6 payload length");
        src = p + 8, alen = 16, proto = p[6];
    }
    uint32_t s = sum16(src, 2 * alen, 0) + proto + (uint32_t)(n - l3);
    if (!folds_to_ffff(sum16(p + l3, n - l3, s)))
        fail("bad transport checksum");
    if (proto == 17 && (size_t)(p[l3 + 4] << 8 | p[l3 + 5]) != n - l3)
        fail("UDP length");
}

static void fuzz_split(const uint8_t *d, size_t n)
{
    if (n < 14)
        return;
    vc_vnet_hdr h;
    memcpy(&h, d + 1, sizeof h);
    size_t mtu = 68 + (size_t)((d[11] << 8 | d[12]) % 9000);
    int per = 1 + d[13] % 8;
    size_t plen = n - 14;
    uint8_t *pkt = malloc(plen ? plen : 1);
    memcpy(pkt, d + 14, plen);
    size_t slot = (mtu + 15) & ~(size_t)15;
    size_t slab_size = slot * (size_t)(per - 1) + mtu;
    uint8_t *slab = malloc(slab_size + 64);
    memset(slab + slab_size, CANARY, 64);
    uint32_t off[8], len[8], seg = 0;
    int gso = (h.gso_type & 0x7F) != 0, rounds = 0;
    do {
        int r = vc_vnet_split(pkt, plen, &h, mtu, slab, slab_size, off, len, per, &seg);
        if (r == -EINVAL || r == -EMSGSIZE) {
            if (rounds > 0)
                fail("a split failed after it had started");
            break;
        }
        if (r < 1 || r > per)
            fail("split count out of range");
        for (int i = 0; i < r; i++) {
            if (off[i] != (uint32_t)(i * slot) || len[i] > mtu || off[i] + len[i] > slab_size)
                fail("packet outside its slot");
            if (gso)
                check_segment(slab + off[i], len[i]);
        }
        for (int i = 0; i < 64; i++)
            if (slab[slab_size + i] != CANARY)
                fail("write past the slab");
        if (++rounds > 70000)
            fail("split does not progress");
    } while (seg != 0);
    free(slab);
    free(pkt);
}

static void put_sum(uint8_t *at, uint32_t s)
{
    while (s >> 16)
        s = (s & 0xFFFF) + (s >> 16);
    at[0] = (uint8_t)(~s >> 8), at[1] = (uint8_t)~s;
}

/* Length, protocol and (IPv4) header checksum of a packet of n bytes. */
static void ip_finish(uint8_t *p, int v6, size_t n, uint8_t proto)
{
    if (v6) {
        p[4] = (uint8_t)((n - 40) >> 8), p[5] = (uint8_t)(n - 40);
        p[6] = proto;
    } else {
        p[2] = (uint8_t)(n >> 8), p[3] = (uint8_t)n;
        p[9] = proto;
        put_sum(p + 10, sum16(p, 20, 0));
    }
}

/* A packet from 8 bytes of choices (see the top). */
static size_t make_packet(const uint8_t *c, uint8_t *p, uint32_t *seqs, uint16_t *ids)
{
    int v6 = c[0] & 1, udp = (c[0] >> 1) & 1, flow = (c[0] >> 2) & 3, kind = c[0] >> 4;
    size_t pay = 1 + (size_t)((c[1] << 8 | c[2]) % 1500);
    size_t l3 = v6 ? 40 : 20, l4 = udp ? 8 : 20;
    uint8_t proto = udp ? 17 : 6;
    memset(p, 0, 64);
    if (v6) {
        p[0] = 0x60;
        p[7] = (c[4] & 1) ? 63 : 64;
        p[8] = 0xfd, p[23] = 1, p[24] = 0xfd, p[39] = (uint8_t)(2 + flow);
    } else {
        p[0] = 0x45;
        uint16_t id;
        switch ((c[4] >> 2) & 3) {
        case 0: id = (uint16_t)(c[5] << 8 | c[6]); break;      /* random */
        case 1: id = (uint16_t)(0x1000 * (flow + 1)); break;  /* fixed */
        default: id = ids[flow]++; break;                      /* counting up */
        }
        p[4] = (uint8_t)(id >> 8), p[5] = (uint8_t)id;
        p[6] = (uint8_t)(((c[4] & 2) ? 0x40 : 0) | ((c[4] & 0x40) ? 0x80 : 0));
        p[8] = (c[4] & 1) ? 63 : 64;
        p[12] = 10, p[15] = 1, p[16] = 10, p[19] = (uint8_t)(2 + flow);
    }
    if (kind >= 12) {
        /* no ports: ICMP / ICMPv6, an IPv4 non-first fragment, an IPv6
         * Fragment or Destination Options header before UDP */
        size_t n, body = 8 + pay % 64;
        uint8_t *x = p + l3;
        if (kind == 12 || kind == 13) {
            proto = v6 ? 58 : 1;
            memset(x, 0, body);
            x[0] = v6 ? 128 : 8;
            n = l3 + body;
        } else if (!v6) {
            proto = 17;
            memset(x, (int)c[3], body);
            p[6] = (uint8_t)(0x20 | ((c[5] & 0x1F)));           /* MF, offset */
            p[7] = (uint8_t)(c[6] | 1);
            n = l3 + body;
        } else {
            proto = kind == 14 ? 44 : 60;
            memset(x, 0, 16);
            x[0] = 17;
            if (kind == 15)
                x[2] = 1, x[3] = 4;                              /* PadN */
            x[8] = 0x9c, x[9] = (uint8_t)flow, x[10] = 0x14, x[11] = 0x51;
            x[12] = 0, x[13] = (uint8_t)(8 + body);
            memset(x + 16, (int)c[3], body);
            n = l3 + 8 + 8 + body;
        }
        ip_finish(p, v6, n, proto);
        return n;
    }
    size_t n = l3 + l4 + pay;
    memset(p + l3, 0, l4);
    for (size_t i = 0; i < pay; i++)
        p[l3 + l4 + i] = (uint8_t)(c[3] + i * 7);
    ip_finish(p, v6, n, proto);
    uint8_t *t = p + l3;
    t[0] = 0x9c, t[1] = (uint8_t)flow, t[2] = 0x14, t[3] = 0x51;
    if (udp) {
        t[4] = (uint8_t)((l4 + pay) >> 8), t[5] = (uint8_t)(l4 + pay);
    } else {
        uint32_t seq = seqs[flow] + ((c[7] & 3) == 3 ? 1u : 0u);   /* sometimes a gap */
        seqs[flow] = seq + (uint32_t)pay;
        t[4] = (uint8_t)(seq >> 24), t[5] = (uint8_t)(seq >> 16);
        t[6] = (uint8_t)(seq >> 8), t[7] = (uint8_t)seq;
        t[11] = 1;
        t[12] = (uint8_t)(0x50 | ((c[4] & 0x10) ? 1 : 0));         /* AccECN's AE */
        static const uint8_t fl[8] = {0x10, 0x10, 0x10, 0x18, 0x19, 0x90, 0x50, 0x12};
        t[13] = fl[(c[7] >> 2) & 7];
        t[14] = 1;
    }
    const uint8_t *src = v6 ? p + 8 : p + 12;
    size_t alen = v6 ? 16 : 4;
    int no_csum = udp && (c[4] & 0x20);
    if (no_csum && pay >= 2)
        t[8] = t[9] = 0;
    uint32_t s = sum16(src, 2 * alen, 0) + proto + (uint32_t)(l4 + pay);
    s = sum16(t, l4 + pay, s);
    while (s >> 16)
        s = (s & 0xFFFF) + (s >> 16);
    uint16_t c16 = (uint16_t)~s;
    if (udp && c16 == 0)
        c16 = 0xFFFF;
    if (no_csum) {
        /* checksum 0; with room, the first payload word makes the sum verify
         * anyway (a true checksum of 0, which RFC 768 would send as 0xFFFF) */
        c16 = 0;
        if (pay >= 2) {
            uint16_t word = (uint16_t)(0xFFFF - s);
            t[8] = (uint8_t)(word >> 8), t[9] = (uint8_t)word;
        }
    }
    size_t at = udp ? 6 : 16;
    t[at] = (uint8_t)(c16 >> 8), t[at + 1] = (uint8_t)c16;
    return n;
}

/* What the checks need of a packet, parsed here on their own. */
typedef struct {
    int ip;          /* 4 or 6 when the addresses can be read, else 0 */
    int keyed;       /* TCP or UDP with its ports and whole header */
    size_t l3, l4h;
    uint8_t proto;
} fpkt;

static fpkt fparse(const uint8_t *p, size_t n)
{
    fpkt f = {0, 0, 0, 0, 0};
    if (n < 20)
        return f;
    if ((p[0] >> 4) == 4) {
        f.ip = 4;
        f.l3 = (size_t)(p[0] & 15) * 4;
        if (f.l3 < 20 || n < f.l3 || ((p[6] << 8 | p[7]) & 0x1FFF))
            return f;
        f.proto = p[9];
    } else if ((p[0] >> 4) == 6 && n >= 40) {
        f.ip = 6;
        f.l3 = 40;
        f.proto = p[6];
    } else {
        return f;
    }
    if (f.proto == 6 && n >= f.l3 + 20) {
        f.l4h = (size_t)(p[f.l3 + 12] >> 4) * 4;
        f.keyed = f.l4h >= 20 && n >= f.l3 + f.l4h;
    } else if (f.proto == 17 && n >= f.l3 + 8) {
        f.l4h = 8;
        f.keyed = 1;
    }
    return f;
}

static int same_pair(const uint8_t *a, const fpkt *fa, const uint8_t *b, const fpkt *fb)
{
    if (!fa->ip || fa->ip != fb->ip)
        return 0;
    return fa->ip == 6 ? !memcmp(a + 8, b + 8, 32) : !memcmp(a + 12, b + 12, 8);
}

static int same_flow(const uint8_t *a, const fpkt *fa, const uint8_t *b, const fpkt *fb)
{
    return fa->keyed && fb->keyed && fa->proto == fb->proto && same_pair(a, fa, b, fb) &&
           !memcmp(a + fa->l3, b + fb->l3, 4);
}

/* A segment cut from a super-packet is input packet q: the same IP fields
 * that a merge keeps, ports, TCP fields but ID-like ones, and payload. */
static int segment_is(const uint8_t *s, size_t sn, const uint8_t *q, size_t qn)
{
    fpkt fs = fparse(s, sn), fq = fparse(q, qn);
    if (sn != qn || !fs.keyed || !same_flow(s, &fs, q, &fq) || fs.l4h != fq.l4h)
        return 0;
    if (fs.ip == 4 ? (s[1] != q[1] || s[8] != q[8] || s[6] != q[6])
                   : (memcmp(s, q, 4) != 0 || s[7] != q[7]))
        return 0;
    size_t h = fs.l3 + fs.l4h;
    if (fs.proto == 6 && (memcmp(s + fs.l3 + 4, q + fq.l3 + 4, 8) != 0 ||
                          s[fs.l3 + 12] != q[fq.l3 + 12] ||
                          ((s[fs.l3 + 13] ^ q[fq.l3 + 13]) & 0x76) != 0 ||
                          memcmp(s + fs.l3 + 14, q + fq.l3 + 14, 2) != 0 ||
                          memcmp(s + fs.l3 + 20, q + fq.l3 + 20, fs.l4h - 20) != 0))
        return 0;
    return memcmp(s + h, q + h, sn - h) == 0;
}

static int l4_sum_ok(const uint8_t *p, size_t n, const fpkt *f)
{
    const uint8_t *src = f->ip == 6 ? p + 8 : p + 12;
    size_t alen = f->ip == 6 ? 16 : 4;
    uint32_t s = sum16(src, 2 * alen, 0) + f->proto + (uint32_t)(n - f->l3);
    return folds_to_ffff(sum16(p + f->l3, n - f->l3, s));
}

/* The kernel's GRO rules over the inputs q[0..m-1] one super-packet holds. */
static void check_merge(const uint8_t *in, const uint32_t *off, const uint32_t *len,
                        const int *q, int m)
{
    const uint8_t *h = in + off[q[0]];
    fpkt fh = fparse(h, len[q[0]]);
    size_t hpay = len[q[0]] - fh.l3 - fh.l4h;
    if (fh.proto == 17 && m > 64)
        fail("more than 64 datagrams in one");
    for (int k = 0; k < m; k++) {
        const uint8_t *p = in + off[q[k]];
        size_t n = len[q[k]];
        fpkt f = fparse(p, n);
        size_t pay = n - f.l3 - f.l4h;
        if (k > 0 && q[k] <= q[k - 1])
            fail("a super-packet out of input order");
        if (!same_flow(h, &fh, p, &f) || !l4_sum_ok(p, n, &f) || pay == 0)
            fail("merged: another flow, a bad checksum or no payload");
        if (pay > hpay || (k < m - 1 && pay != hpay))
            fail("merged: a payload of another size before the last");
        if (f.ip == 4) {
            uint16_t fw = (uint16_t)(p[6] << 8 | p[7]);
            uint16_t step = (uint16_t)((p[4] << 8 | p[5]) - (h[4] << 8 | h[5]));
            uint16_t step1 = m > 1 ? (uint16_t)((in[off[q[1]] + 4] << 8 | in[off[q[1]] + 5]) -
                                                (h[4] << 8 | h[5])) : 1;
            int fixed = step1 == 0 && (fw & 0x4000);
            if (p[0] != 0x45 || (fw != 0x4000 && fw != 0) || (p[2] << 8 | p[3]) != (int)n)
                fail("merged: IPv4 options, fragment bits or padding");
            if (step != (fixed ? 0 : (uint16_t)k))
                fail("merged: IPv4 IDs neither counting up nor fixed with DF");
            if (p[1] != h[1] || p[8] != h[8] || p[6] != h[6])
                fail("merged: TOS, TTL or DF differ");
        } else if (memcmp(p, h, 4) != 0 || p[7] != h[7] || (p[4] << 8 | p[5]) + 40 != (int)n) {
            fail("merged: traffic class, flow label, hop limit or length");
        }
        const uint8_t *t = p + f.l3, *ht = h + fh.l3;
        if (f.proto == 17) {
            if (t[6] == 0 && t[7] == 0)
                fail("merged: a UDP checksum of 0");
            if ((size_t)(t[4] << 8 | t[5]) != n - f.l3)
                fail("merged: UDP length");
            continue;
        }
        if (t[12] != ht[12] || ((t[13] ^ ht[13]) & ~0x89) || memcmp(t + 8, ht + 8, 4) != 0 ||
            memcmp(t + 14, ht + 14, 2) != 0 || memcmp(t + 20, ht + 20, f.l4h - 20) != 0)
            fail("merged: TCP byte 12, flags, ACK, window or options differ");
        if (!(t[13] & 0x10) || (t[13] & 0x26))
            fail("merged: no ACK, or SYN/RST/URG");
        if ((k > 0 && (t[13] & 0x80)) || (k < m - 1 && (t[13] & 0x09)))
            fail("merged: CWR after the first, or PSH/FIN before the last");
    }
}

static void fuzz_coalesce(const uint8_t *d, size_t n)
{
    if (n < 2)
        return;
    int flags = d[1] & 3;
    size_t pos = 2, total = 0;
    uint8_t *in = malloc((size_t)MAXP * 2048);
    uint32_t off[MAXP], len[MAXP], seqs[4] = {1000, 2000, 3000, 4000};
    uint16_t ids[4] = {10, 20, 0xFFFE, 40};
    int np = 0;
    while (pos < n && np < MAXP) {
        uint8_t r = d[pos++];
        size_t l;
        if (r & 1) {
            if (n - pos < 8)
                break;
            l = make_packet(d + pos, in + total, seqs, ids);
            pos += 8;
        } else {
            if (n - pos < 2)
                break;
            l = (size_t)((d[pos] << 8 | d[pos + 1]) % 2048);
            pos += 2;
            if (l > n - pos)
                l = n - pos;
            memcpy(in + total, d + pos, l);
            pos += l;
        }
        off[np] = (uint32_t)total;
        len[np] = (uint32_t)l;
        total += l;
        np++;
    }
    size_t out_size = total + 10 * (size_t)np + 1;
    uint8_t *out = malloc(out_size);
    uint32_t woff[MAXP], wlen[MAXP], wpk[MAXP];
    int consumed = -1;
    vc_gro_stats st;
    memset(&st, 0, sizeof st);
    int w = vc_gro_coalesce(in, off, len, np, out, out_size, woff, wlen, wpk, MAXP, flags,
                            &consumed, &st);
    if (w < 0 || consumed != np)
        fail("coalesce did not cover the batch");
    uint32_t covered = 0;
    uint8_t *slab = malloc((size_t)65536 * 70);
    static uint32_t soff[70000], slen[70000];
    int at[MAXP], used[MAXP] = {0}, ndel = 0;      /* at[input] = its place delivered */
    for (int i = 0; i < w; i++) {
        if (woff[i] + wlen[i] > out_size || wlen[i] < 10 || wlen[i] > 10 + 65535)
            fail("write outside the output");
        covered += wpk[i];
        if (covered > (uint32_t)np)
            fail("packets doubled");
        const uint8_t *f = out + woff[i];
        if (wpk[i] == 1) {
            static const uint8_t zero[10];
            if (memcmp(f, zero, 10) != 0)
                fail("a single packet with a vnet header");
            int k = 0;          /* it is some input packet, unchanged: the first unused */
            while (k < np && (used[k] || len[k] != wlen[i] - 10 ||
                              memcmp(in + off[k], f + 10, len[k]) != 0))
                k++;
            if (k == np)
                fail("a single packet changed");
            used[k] = 1;
            at[k] = ndel++;
            continue;
        }
        vc_vnet_hdr h;
        memcpy(&h, f, sizeof h);
        uint8_t *copy = malloc(wlen[i] - 10);
        memcpy(copy, f + 10, wlen[i] - 10);
        uint32_t seg = 0;
        int r = vc_vnet_split(copy, wlen[i] - 10, &h, 65535, slab, (size_t)65536 * 70, soff, slen,
                              70000, &seg);
        if (r != (int)wpk[i] || seg != 0)
            fail("a super-packet does not split into its packets");
        int q[MAXP];
        for (int k = 0; k < r; k++) {
            check_segment(slab + soff[k], slen[k]);
            int j = 0;
            while (j < np && (used[j] || !segment_is(slab + soff[k], slen[k], in + off[j], len[j])))
                j++;
            if (j == np)
                fail("a segment is no input packet");
            used[j] = 1;
            at[j] = ndel++;
            q[k] = j;
        }
        check_merge(in, off, len, q, r);
        free(copy);
    }
    if (covered != (uint32_t)np)
        fail("packets lost or doubled");
    fpkt fp[MAXP];
    for (int i = 0; i < np; i++)
        fp[i] = fparse(in + off[i], len[i]);
    for (int i = 0; i < np; i++)
        for (int j = i + 1; j < np; j++) {
            const uint8_t *a = in + off[i], *b = in + off[j];
            if (!same_pair(a, &fp[i], b, &fp[j]))
                continue;
            if ((!fp[i].keyed || !fp[j].keyed || same_flow(a, &fp[i], b, &fp[j])) && at[i] > at[j])
                fail("delivered out of order");
        }
    free(slab);
    free(out);
    free(in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        fuzz_coalesce(data, size);
    else
        fuzz_split(data, size);
    return 0;
}
