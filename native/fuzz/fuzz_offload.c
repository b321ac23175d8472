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
 *        r & 1 == 1  made: a valid TCP or UDP packet over IPv4 or IPv6 from a
 *                    template, fields chosen by the next bytes (flow, seq step,
 *                    flags, payload length, TTL, DF), checksums right, so the
 *                    coalescing paths are reached.
 *      Checks: every input packet is covered once (sum of per-write counts);
 *      a single-packet write is a zero vnet header and the packet unchanged;
 *      a super-packet splits (vc_vnet_split) into exactly its count of
 *      segments, each with valid checksums, of at most 65535 bytes in all.
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

/* A valid packet from 8 bytes of choices. */
static size_t make_packet(const uint8_t *c, uint8_t *p, uint32_t *seqs)
{
    int v6 = c[0] & 1, udp = (c[0] >> 1) & 1, flow = (c[0] >> 2) & 3;
    size_t pay = 1 + (size_t)((c[1] << 8 | c[2]) % 1500);
    size_t l3 = v6 ? 40 : 20, l4 = udp ? 8 : 20;
    size_t n = l3 + l4 + pay;
    memset(p, 0, l3 + l4);
    for (size_t i = 0; i < pay; i++)
        p[l3 + l4 + i] = (uint8_t)(c[3] + i * 7);
    uint8_t proto = udp ? 17 : 6;
    if (v6) {
        p[0] = 0x60;
        p[4] = (uint8_t)((n - 40) >> 8), p[5] = (uint8_t)(n - 40);
        p[6] = proto;
        p[7] = (c[4] & 1) ? 63 : 64;
        p[8] = 0xfd, p[23] = 1, p[24] = 0xfd, p[39] = (uint8_t)(2 + flow);
    } else {
        p[0] = 0x45;
        p[2] = (uint8_t)(n >> 8), p[3] = (uint8_t)n;
        p[4] = c[5], p[5] = c[6];
        p[6] = (c[4] & 2) ? 0x40 : 0;
        p[8] = (c[4] & 1) ? 63 : 64;
        p[9] = proto;
        p[12] = 10, p[15] = 1, p[16] = 10, p[19] = (uint8_t)(2 + flow);
        uint32_t s = sum16(p, 20, 0);
        while (s >> 16)
            s = (s & 0xFFFF) + (s >> 16);
        p[10] = (uint8_t)(~s >> 8), p[11] = (uint8_t)~s;
    }
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
        t[12] = 0x50;
        static const uint8_t fl[8] = {0x10, 0x10, 0x10, 0x18, 0x19, 0x90, 0x50, 0x12};
        t[13] = fl[(c[7] >> 2) & 7];
        t[14] = 1;
    }
    const uint8_t *src = v6 ? p + 8 : p + 12;
    size_t alen = v6 ? 16 : 4;
    uint32_t s = sum16(src, 2 * alen, 0) + proto + (uint32_t)(l4 + pay);
    s = sum16(t, l4 + pay, s);
    while (s >> 16)
        s = (s & 0xFFFF) + (s >> 16);
    uint16_t c16 = (uint16_t)~s;
    if (udp && c16 == 0)
        c16 = 0xFFFF;
    size_t at = udp ? 6 : 16;
    t[at] = (uint8_t)(c16 >> 8), t[at + 1] = (uint8_t)c16;
    return n;
}

static void fuzz_coalesce(const uint8_t *d, size_t n)
{
    if (n < 2)
        return;
    int flags = d[1] & 3;
    size_t pos = 2, total = 0;
    uint8_t *in = malloc((size_t)MAXP * 2048);
    uint32_t off[MAXP], len[MAXP], seqs[4] = {1000, 2000, 3000, 4000};
    int np = 0;
    while (pos < n && np < MAXP) {
        uint8_t r = d[pos++];
        size_t l;
        if (r & 1) {
            if (n - pos < 8)
                break;
            l = make_packet(d + pos, in + total, seqs);
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
    int next_single = 0;
    uint8_t *slab = malloc((size_t)65536 * 70);
    static uint32_t soff[70000], slen[70000];
    for (int i = 0; i < w; i++) {
        if (woff[i] + wlen[i] > out_size || wlen[i] < 10 || wlen[i] > 10 + 65535)
            fail("write outside the output");
        covered += wpk[i];
        const uint8_t *f = out + woff[i];
        if (wpk[i] == 1) {
            static const uint8_t zero[10];
            if (memcmp(f, zero, 10) != 0)
                fail("a single packet with a vnet header");
            int found = 0;      /* it is some input packet, unchanged */
            for (int k = next_single; k < np && !found; k++)
                if (len[k] == wlen[i] - 10 && memcmp(in + off[k], f + 10, len[k]) == 0)
                    found = 1;
            for (int k = 0; k < next_single && !found; k++)
                if (len[k] == wlen[i] - 10 && memcmp(in + off[k], f + 10, len[k]) == 0)
                    found = 1;
            if (!found)
                fail("a single packet changed");
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
        for (int k = 0; k < r; k++)
            check_segment(slab + soff[k], slen[k]);
        free(copy);
    }
    if (covered != (uint32_t)np)
        fail("packets lost or doubled");
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
