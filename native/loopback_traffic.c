/* In-memory traffic source and sink for the loopback bench (see vc_loopback.h). */
#include <time.h>
#include "vc_internal.h"
#include "vc_loopback.h"

VC_API uint64_t vc_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The payload pattern after the 24-byte preamble: 32-bit words seed + i * K
 * (an arithmetic progression the compiler vectorises), seeded by the sequence
 * number and stream id, so every byte depends on which packet it belongs to. */
#define PATTERN_K 0x9E3779B9u

static uint32_t pattern_seed(uint64_t seq, uint32_t stream)
{
    uint64_t x = (seq + 1) * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)stream << 29);
    return (uint32_t)(x ^ (x >> 32));
}

static void write_pattern(uint8_t *p, size_t n, uint32_t seed)
{
    size_t words = n / 4, i;
    for (i = 0; i < words; i++) {
        uint32_t w = seed + (uint32_t)i * PATTERN_K;
        memcpy(p + 4 * i, &w, 4);
    }
    uint32_t last = seed + (uint32_t)words * PATTERN_K;
    for (i = 4 * words; i < n; i++, last >>= 8) p[i] = (uint8_t)last;
}

static int pattern_ok(const uint8_t *p, size_t n, uint32_t seed)
{
    size_t words = n / 4, i;
    uint32_t diff = 0;
    for (i = 0; i < words; i++) {
        uint32_t w;
        memcpy(&w, p + 4 * i, 4);
        diff |= w ^ (seed + (uint32_t)i * PATTERN_K);
    }
    uint32_t last = seed + (uint32_t)words * PATTERN_K;
    for (i = 4 * words; i < n; i++, last >>= 8) diff |= p[i] ^ (uint8_t)last;
    return diff == 0;
}

static uint16_t ip_checksum(const uint8_t *h)
{
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2) sum += ((uint32_t)h[i] << 8) | h[i + 1];
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

VC_API int vc_traffic_fill(uint8_t *slab, size_t stride, uint32_t base, uint32_t *off, uint32_t *len,
                    const uint32_t *payload_len, size_t n, const uint8_t src[4],
                    const uint8_t dst[4], uint32_t stream, uint64_t seq0, uint64_t now_ns)
{
    for (size_t i = 0; i < n; i++) {
        size_t pl = payload_len[i], total = 28 + pl;
        if (pl < VC_TRAFFIC_MIN_PAYLOAD || total > stride || total > 65535) return -1;
        uint8_t *p = slab + i * stride;
        memset(p, 0, 28);
        p[0] = 0x45; p[2] = (uint8_t)(total >> 8); p[3] = (uint8_t)total;
        p[8] = 64; p[9] = 17;
        memcpy(p + 12, src, 4); memcpy(p + 16, dst, 4);
        uint16_t c = ip_checksum(p);
        p[10] = (uint8_t)(c >> 8); p[11] = (uint8_t)c;
        p[21] = 9; p[23] = 9;                       /* UDP ports 9 -> 9 (discard) */
        p[24] = (uint8_t)((8 + pl) >> 8); p[25] = (uint8_t)(8 + pl);
        uint64_t seq = seq0 + i;
        vc_store64_le(p + 28, seq);
        vc_store64_le(p + 36, now_ns);
        vc_store64_le(p + 44, stream);
        write_pattern(p + 52, pl - VC_TRAFFIC_MIN_PAYLOAD, pattern_seed(seq, stream));
        off[i] = base + (uint32_t)(i * stride);
        len[i] = (uint32_t)total;
    }
    return (int)n;
}

static size_t hist_bin(uint64_t ns)
{
    uint64_t us = ns / 1000;
    if (us < 1024) return (size_t)us;                      /* 1 us bins up to ~1 ms */
    size_t b = 1024 + (size_t)((us - 1024) / 64);          /* then 64 us bins */
    return b < VC_TRAFFIC_HIST_BINS ? b : VC_TRAFFIC_HIST_BINS - 1;
}

static double bin_ns(size_t b)
{
    if (b < 1024) return (b + 0.5) * 1000.0;
    return (1024 + (b - 1024) * 64.0 + 32.0) * 1000.0;
}

VC_API void vc_traffic_check(vc_traffic_sink *s, const uint8_t *buf, const uint32_t *off,
                      const uint32_t *len, size_t n, uint64_t now_ns, uint32_t stream,
                      uint64_t *seen, uint64_t window_bits)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = buf + off[i];
        size_t L = len[i];
        if (L < 28 + VC_TRAFFIC_MIN_PAYLOAD || p[0] != 0x45 || (((size_t)p[2] << 8) | p[3]) != L ||
            vc_load64_le(p + 44) != stream) {
            s->corrupted++;
            continue;
        }
        uint64_t seq = vc_load64_le(p + 28), ts = vc_load64_le(p + 36);
        if (!pattern_ok(p + 52, L - 52, pattern_seed(seq, stream))) { s->corrupted++; continue; }
        if (seq + window_bits <= s->max_seq) { s->too_old++; continue; }
        if (seq > s->max_seq) {
            /* clear the bits that the window slides over */
            uint64_t from = s->received ? s->max_seq + 1 : 0;
            if (seq - from >= window_bits) from = seq - window_bits + 1;
            for (uint64_t q = from; q <= seq; q++) seen[(q % window_bits) / 64] &= ~(1ULL << (q % 64));
            s->max_seq = seq;
        }
        uint64_t bit = seq % window_bits;
        if (seen[bit / 64] & (1ULL << (bit % 64))) { s->duplicated++; continue; }
        seen[bit / 64] |= 1ULL << (bit % 64);
        s->received++;
        s->bytes += L - 28;
        s->hist[hist_bin(now_ns > ts ? now_ns - ts : 0)]++;
    }
}

VC_API double vc_traffic_quantile(const vc_traffic_sink *s, double q)
{
    uint64_t total = 0;
    for (size_t b = 0; b < VC_TRAFFIC_HIST_BINS; b++) total += s->hist[b];
    if (!total) return 0.0;
    uint64_t want = (uint64_t)(q * (double)(total - 1)) + 1, acc = 0;
    for (size_t b = 0; b < VC_TRAFFIC_HIST_BINS; b++) {
        acc += s->hist[b];
        if (acc >= want) return bin_ns(b);
    }
    return bin_ns(VC_TRAFFIC_HIST_BINS - 1);
}
