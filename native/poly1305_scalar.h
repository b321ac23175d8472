/* The scalar Poly1305 (RFC 8439 section 2.5) that every kernel shares: radix
 * 2^44 limbs with 128-bit products, the partial-block buffer, and the final
 * reduction.  The generic kernel is this and nothing else; a SIMD kernel keeps
 * its hash here between calls, runs long runs of whole blocks through its
 * vector code (the `bulk` callback of vc_poly44_update) and leaves short runs,
 * the buffered block and the final reduction to these functions.
 * No branch or memory index depends on the key or the message. */
#ifndef VC_POLY1305_SCALAR_H
#define VC_POLY1305_SCALAR_H
#include "vc_internal.h"

typedef unsigned __int128 vc_u128;

#define VC_M44 0xfffffffffffULL
#define VC_M42 0x3ffffffffffULL

typedef struct {
    uint64_t r[3];      /* clamped r, limbs of 44/44/42 bits */
    uint64_t s[2];      /* key[16..31], added at the end */
    uint64_t h[3];      /* the hash, radix 2^44 (partially reduced) */
    uint64_t buf_len;
    uint8_t  buf[16];   /* a partial block waiting for more input */
} vc_poly44;

VC_INLINE void vc_poly44_init(vc_poly44 *p, const uint8_t key[32])
{
    uint64_t t0 = vc_load64_le(key) & 0x0ffffffc0fffffffULL;
    uint64_t t1 = vc_load64_le(key + 8) & 0x0ffffffc0ffffffcULL;
    p->r[0] = t0 & VC_M44;
    p->r[1] = ((t0 >> 44) | (t1 << 20)) & VC_M44;
    p->r[2] = (t1 >> 24) & VC_M42;
    p->s[0] = vc_load64_le(key + 16);
    p->s[1] = vc_load64_le(key + 24);
    p->h[0] = p->h[1] = p->h[2] = 0;
    p->buf_len = 0;
}

/* o = a * b mod 2^130 - 5, partially reduced (o0 < 2^44, o1 <= 2^44 + 2^20,
 * o2 < 2^42); o may alias a or b. */
VC_INLINE void vc_poly44_mul(uint64_t o[3], const uint64_t a[3], const uint64_t b[3])
{
    uint64_t s1 = b[1] * 20, s2 = b[2] * 20;        /* 2^132 = 4 * 5 mod p */
    vc_u128 d0 = (vc_u128)a[0] * b[0] + (vc_u128)a[1] * s2 + (vc_u128)a[2] * s1;
    vc_u128 d1 = (vc_u128)a[0] * b[1] + (vc_u128)a[1] * b[0] + (vc_u128)a[2] * s2;
    vc_u128 d2 = (vc_u128)a[0] * b[2] + (vc_u128)a[1] * b[1] + (vc_u128)a[2] * b[0];
    uint64_t c, x0, x1, x2;
    x0 = (uint64_t)d0 & VC_M44; c = (uint64_t)(d0 >> 44);
    d1 += c; x1 = (uint64_t)d1 & VC_M44; c = (uint64_t)(d1 >> 44);
    d2 += c; x2 = (uint64_t)d2 & VC_M42; c = (uint64_t)(d2 >> 42);
    x0 += c * 5; c = x0 >> 44; x0 &= VC_M44;
    x1 += c;
    o[0] = x0; o[1] = x1; o[2] = x2;
}

/* r^2, r^3 and r^4 for a kernel's table of powers (r3 may be NULL). */
VC_INLINE void vc_poly44_powers(const vc_poly44 *p, uint64_t r2[3], uint64_t r3[3], uint64_t r4[3])
{
    vc_poly44_mul(r2, p->r, p->r);
    if (r3) vc_poly44_mul(r3, r2, p->r);
    vc_poly44_mul(r4, r2, r2);
}

#if defined(__x86_64__)
#include <immintrin.h>
/* An x86 kernel's table of powers: v[k] = limb k of r^1..r^4 in a vector's
 * 64-bit lanes, lane j holding r^order[j] (order: constants, each in 1..4);
 * r4 gets r^4's limbs. */
VC_INLINE __attribute__((target("avx2"))) void vc_poly44_power_lanes(const vc_poly44 *p,
                                                                     const int order[4],
                                                                     __m256i v[3], uint64_t r4[3])
{
    uint64_t r2[3], r3[3];
    vc_poly44_powers(p, r2, r3, r4);
    const uint64_t *pw[5] = {NULL, p->r, r2, r3, r4};
    for (int k = 0; k < 3; k++)
        v[k] = _mm256_set_epi64x((long long)pw[order[3]][k], (long long)pw[order[2]][k],
                                 (long long)pw[order[1]][k], (long long)pw[order[0]][k]);
}
#endif

/* h = (h + m_i + hibit * 2^128) * r for n whole 16-byte blocks. */
VC_INLINE void vc_poly44_blocks(vc_poly44 *p, const uint8_t *m, size_t n, uint64_t hibit)
{
    uint64_t r[3] = {p->r[0], p->r[1], p->r[2]};
    uint64_t h[3] = {p->h[0], p->h[1], p->h[2]};
    for (; n; n--, m += 16) {
        uint64_t t0 = vc_load64_le(m), t1 = vc_load64_le(m + 8);
        h[0] += t0 & VC_M44;
        h[1] += ((t0 >> 44) | (t1 << 20)) & VC_M44;
        h[2] += (t1 >> 24) | (hibit << 40);
        vc_poly44_mul(h, h, r);
    }
    p->h[0] = h[0]; p->h[1] = h[1]; p->h[2] = h[2];
}

/* Whole blocks for a kernel's own code: bulk(ctx, m, n) absorbs n >= 1 blocks. */
typedef void (*vc_poly44_bulk_fn)(void *ctx, const uint8_t *m, size_t n);

/* Absorb len bytes in any split: complete the buffered block first, hand the
 * whole blocks to bulk (or to the scalar code when bulk is NULL), keep the rest. */
VC_INLINE void vc_poly44_update(vc_poly44 *p, const uint8_t *m, size_t len,
                                vc_poly44_bulk_fn bulk, void *ctx)
{
    if (p->buf_len) {
        size_t want = 16 - p->buf_len;
        if (want > len) want = len;
        memcpy(p->buf + p->buf_len, m, want);
        p->buf_len += want; m += want; len -= want;
        if (p->buf_len < 16) return;
        vc_poly44_blocks(p, p->buf, 1, 1);
        p->buf_len = 0;
    }
    size_t n = len / 16;
    if (n) {
        if (bulk) bulk(ctx, m, n);
        else vc_poly44_blocks(p, m, n, 1);
        m += 16 * n; len -= 16 * n;
    }
    if (len) { memcpy(p->buf, m, len); p->buf_len = len; }
}

/* Store h0 + h1*2^44 + h2*2^88 (each limb < 2^63, the value unchanged mod
 * 2^130 - 5) as the hash, partially reduced as vc_poly44_mul leaves it: one carry
 * round h0 -> h1 -> h2 -> h0 (times 5), then h0 -> h1 once more. */
VC_INLINE void vc_poly44_set_hash(vc_poly44 *p, uint64_t h0, uint64_t h1, uint64_t h2)
{
    uint64_t c;
    c = h0 >> 44; h0 &= VC_M44; h1 += c;
    c = h1 >> 44; h1 &= VC_M44; h2 += c;
    c = h2 >> 42; h2 &= VC_M42; h0 += c * 5;
    c = h0 >> 44; h0 &= VC_M44; h1 += c;
    p->h[0] = h0; p->h[1] = h1; p->h[2] = h2;
}

/* A SIMD kernel's sum in radix 2^26 (l[k] at weight 2^(26k); l0 < 2^62 and
 * l1..l4 < 2^30, so no shift below overflows) back into the hash: l0 + l1*2^26 at 2^0, l2*2^52 = (l2 << 8)*2^44 and l3*2^78 =
 * (l3 << 34)*2^44 at 2^44, l4*2^104 = (l4 << 16)*2^88 at 2^88. */
VC_INLINE void vc_poly44_set_hash26(vc_poly44 *p, const uint64_t l[5])
{
    vc_poly44_set_hash(p, l[0] + (l[1] << 26), (l[2] << 8) + (l[3] << 34), l[4] << 16);
}

/* The kernel interface around vc_poly44 for a SIMD kernel, from its state
 * type T (a struct with the member `vc_poly44 base` and a flag `pow` that says
 * its precomputed powers of r are valid) and its vector routine VEC(T *, m, n)
 * for n >= MIN whole blocks, n a multiple of GRAIN (a power of two); ATTR is
 * the routine's target attribute.  It makes the static init/update/final that
 * a vc_poly1305_impl names, and bulk: runs of MIN blocks or more go to VEC (less
 * a remainder of GRAIN - 1 at most), the rest to the scalar code.  The state
 * is wiped after the tag.  Last, the kernel's entry IMPL (vc_internal.h), named
 * NAME, usable when AVAILABLE() says so (NULL: always). */
#define VC_POLY44_KERNEL(T, pow, ATTR, VEC, MIN, GRAIN, IMPL, NAME, AVAILABLE)  \
    _Static_assert(sizeof(T) <= sizeof(vc_poly1305_state), "state too small"); \
    static ATTR void bulk(void *ctx, const uint8_t *m, size_t n)                \
    {                                                                           \
        T *p = ctx;                                                             \
        if (n >= (MIN)) {                                                       \
            size_t v = n & ~(size_t)((GRAIN) - 1);                              \
            VEC(p, m, v);                                                       \
            m += 16 * v; n -= v;                                                \
        }                                                                       \
        if (n) vc_poly44_blocks(&p->base, m, n, 1);                             \
    }                                                                           \
    static void init(vc_poly1305_state *st, const uint8_t key[32])              \
    {                                                                           \
        T *p = (T *)(void *)st->opaque;                                         \
        vc_poly44_init(&p->base, key);                                          \
        p->pow = 0;                                                             \
    }                                                                           \
    static void update(vc_poly1305_state *st, const uint8_t *m, size_t len)     \
    {                                                                           \
        T *p = (T *)(void *)st->opaque;                                         \
        vc_poly44_update(&p->base, m, len, bulk, p);                            \
    }                                                                           \
    static void final(vc_poly1305_state *st, uint8_t tag[16])                   \
    {                                                                           \
        T *p = (T *)(void *)st->opaque;                                         \
        vc_poly44_finish(&p->base, tag);                                        \
        vc_wipe(p, sizeof *p);                                                  \
    }                                                                           \
    const vc_poly1305_impl IMPL = {NAME, init, update, final, AVAILABLE};

/* The padded last block, the full reduction mod 2^130 - 5 (constant time),
 * plus s mod 2^128: the tag.  The caller wipes its state afterwards. */
VC_INLINE void vc_poly44_finish(vc_poly44 *p, uint8_t tag[16])
{
    if (p->buf_len) {
        p->buf[p->buf_len] = 1;
        memset(p->buf + p->buf_len + 1, 0, 15 - p->buf_len);
        vc_poly44_blocks(p, p->buf, 1, 0);
    }
    uint64_t h0 = p->h[0], h1 = p->h[1], h2 = p->h[2], c;
    for (int i = 0; i < 2; i++) {            /* carry fully: h < 2^130 + small */
        c = h0 >> 44; h0 &= VC_M44; h1 += c;
        c = h1 >> 44; h1 &= VC_M44; h2 += c;
        c = h2 >> 42; h2 &= VC_M42; h0 += c * 5;
    }
    c = h0 >> 44; h0 &= VC_M44; h1 += c;
    c = h1 >> 44; h1 &= VC_M44; h2 += c;
    /* g = h + 5 - 2^130: keep g when it did not borrow (h >= p) */
    uint64_t g0 = h0 + 5; c = g0 >> 44; g0 &= VC_M44;
    uint64_t g1 = h1 + c; c = g1 >> 44; g1 &= VC_M44;
    uint64_t g2 = h2 + c - (1ULL << 42);
    uint64_t use_g = (g2 >> 63) - 1;
    h0 = (h0 & ~use_g) | (g0 & use_g);
    h1 = (h1 & ~use_g) | (g1 & use_g);
    h2 = (h2 & ~use_g) | (g2 & use_g);
    uint64_t lo = h0 | (h1 << 44), hi = (h1 >> 20) | (h2 << 24);
    vc_u128 acc = (vc_u128)lo + p->s[0];
    lo = (uint64_t)acc;
    hi = hi + p->s[1] + (uint64_t)(acc >> 64);
    vc_store64_le(tag, lo);
    vc_store64_le(tag + 8, hi);
}
#endif
