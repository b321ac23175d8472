/* offload_bench: C-level cost of the TUN offload paths (native/tun_offload.c),
 * without system calls: ns per packet and GB/s for
 *   split     vc_vnet_split of one TCPv4 GSO super-packet (64 KB, the MSS of
 *             a 1420-byte tunnel MTU) into its segments, checksums included;
 *   coalesce  vc_gro_coalesce of those segments back into one super-packet
 *             (every segment's checksum checked, the payloads gathered);
 *   csum      vc_csum_fold over 1380 bytes (one segment's payload).
 *
 *   native/bench/build.sh builds it as native/bench/offload_bench (with cbench);
 *   native/bench/offload_bench [--seconds S] [--repeat N]
 *
 * Prints the fastest of N timed runs of S seconds each (on a shared machine
 * the fastest is the one least disturbed); still, compare only runs taken one
 * after another on the same machine. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vc_offload.h"

#define MTU 1420
#define MSS (MTU - 20 - 32)       /* IPv4 + TCP with timestamps */
#define NSEG 47                   /* 47 * 1368 = 64296 payload bytes */
#define SLOT ((MTU + 15) & ~15)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t super[65536], work[65536], slab[SLOT * 64], out[65536 + 64 * 16];
static uint32_t off[64], len[64], woff[64], wlen[64], wpk[64];
static size_t super_len;
static vc_vnet_hdr hdr;

static void put16(uint8_t *p, unsigned v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }

/* A TCPv4 super-packet as the kernel hands it with TSO: NEEDS_CSUM, the
 * checksum field holding the pseudo-header sum. */
static void make_super(void)
{
    size_t hl = 20 + 32, pay = (size_t)MSS * NSEG;
    super_len = hl + pay;
    uint8_t *ip = super, *t = super + 20;
    memset(super, 0, hl);
    ip[0] = 0x45;
    put16(ip + 2, (unsigned)super_len);
    put16(ip + 4, 0x1234);
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 6;
    memcpy(ip + 12, "\x0a\x4d\x00\x01", 4);
    memcpy(ip + 16, "\x0a\x4d\x00\x02", 4);
    put16(t, 40000);
    put16(t + 2, 5201);
    put16(t + 4, 0x1111);
    put16(t + 8, 0x2222);
    t[12] = 0x80;                 /* doff 8: 32 bytes (timestamps) */
    t[13] = 0x18;                 /* ACK | PSH */
    put16(t + 14, 502);
    memcpy(t + 20, "\x01\x01\x08\x0a\x00\x00\x00\x01\x00\x00\x00\x02", 12);
    for (size_t i = 0; i < pay; i++)
        super[hl + i] = (uint8_t)(i * 7 + 3);
    uint16_t ps = vc_csum_pseudo(ip + 12, ip + 16, 4, 6, (uint32_t)(super_len - 20));
    put16(t + 16, ps);
    hdr = (vc_vnet_hdr){VC_VNET_F_NEEDS_CSUM, VC_VNET_GSO_TCPV4, (uint16_t)hl, MSS, 20, 16};
}

static int split_once(void)
{
    memcpy(work, super, super_len);   /* split changes the checksum field in place */
    uint32_t seg = 0;
    int n = vc_vnet_split(work, super_len, &hdr, MTU, slab, sizeof slab, off, len, 64, &seg);
    if (n != NSEG || seg != 0) {
        fprintf(stderr, "offload_bench: split gave %d segments\n", n);
        exit(1);
    }
    return n;
}

static double fastest(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

int main(int argc, char **argv)
{
    double seconds = 0.3;
    int repeat = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--seconds S] [--repeat N]\n", argv[0]);
            return 2;
        }
    }
    if (repeat < 1 || repeat > 99)
        repeat = 7;
    make_super();
    double split_ns[99], copy_ns[99], co_ns[99], cs_ns[99];
    for (int r = 0; r < repeat; r++) {
        long it = 0;
        double t0 = now(), t;
        do {
            split_once();
            it++;
        } while ((t = now()) - t0 < seconds);
        split_ns[r] = (t - t0) / (double)it / NSEG * 1e9;
        /* the in-place copy that split_once makes first, to subtract */
        it = 0;
        t0 = now();
        do {
            memcpy(work, super, super_len);
            __asm__ volatile("" ::"r"(work) : "memory");
            it++;
        } while ((t = now()) - t0 < seconds);
        copy_ns[r] = (t - t0) / (double)it / NSEG * 1e9;
        split_once();
        it = 0;
        t0 = now();
        do {
            int consumed = 0;
            int w = vc_gro_coalesce(slab, off, len, NSEG, out, sizeof out, woff, wlen, wpk, 64,
                                    VC_GRO_TCP, &consumed, NULL);
            if (w != 1 || consumed != NSEG || wpk[0] != NSEG) {
                fprintf(stderr, "offload_bench: coalesce gave %d writes\n", w);
                return 1;
            }
            it++;
        } while ((t = now()) - t0 < seconds);
        co_ns[r] = (t - t0) / (double)it / NSEG * 1e9;
        it = 0;
        volatile uint16_t sink = 0;
        t0 = now();
        do {
            sink ^= vc_csum_fold(super + 52 + (it & 1) * 2, MSS, 0);
            it++;
        } while ((t = now()) - t0 < seconds);
        (void)sink;
        cs_ns[r] = (t - t0) / (double)it * 1e9;
    }
    double s = fastest(split_ns, repeat) - fastest(copy_ns, repeat);
    double c = fastest(co_ns, repeat), k = fastest(cs_ns, repeat);
    printf("TCPv4 super-packet of %d x %d-byte segments (MTU %d), fastest of %d x %.2f s\n", NSEG, MSS,
           MTU, repeat, seconds);
    printf("  split     %7.1f ns/segment  %6.2f GB/s\n", s, (MSS + 52) / s);
    printf("  coalesce  %7.1f ns/segment  %6.2f GB/s\n", c, (MSS + 52) / c);
    printf("  csum      %7.1f ns/%d B     %6.2f GB/s\n", k, MSS, MSS / k);
    return 0;
}
