/* Poly1305 for arm64: radix 2^26 in NEON, four blocks per step.
 *
 * Two accumulators run side by side in the two lanes (A takes blocks 0, 2, 4,
 * ..., B blocks 1, 3, 5, ...).  With S the pair after adding pair P_j,
 *     S <- S * r^4 + P_(j+1) * r^2 + P_(j+2)        (four blocks per step)
 * and at the end h = A * r^2 + B * r.  Products are 32x32 -> 64-bit (umull /
 * umlal by element), reduced with a lazy carry chain so that the limbs stay
 * below 2^27.  Short inputs, an odd last block and the buffered partial block
 * use a scalar radix-2^44 path; h is kept in that form between calls.
 */
#include "poly1305_scalar.h"

#if defined(__aarch64__)
#include <arm_neon.h>


#define M26 0x3ffffffULL
#define NEON_MIN_BLOCKS 8

typedef struct {
    vc_poly44 base;         /* r, s, the hash (radix 2^44) and the partial block */
    uint32_t  pw[3][5];     /* r, r^2, r^4 in radix 2^26 (filled on first use) */
    int       have_pw;
} poly_neon;

/* radix 2^44 (carried) -> radix 2^26 */
static void to26(uint32_t o[5], const uint64_t a[3])
{
    uint64_t a0 = a[0], a1 = a[1], a2 = a[2], c;
    c = a0 >> 44; a0 &= VC_M44; a1 += c;
    c = a1 >> 44; a1 &= VC_M44; a2 += c;
    uint64_t lo = a0 | (a1 << 44), hi = (a1 >> 20) | (a2 << 24);
    o[0] = (uint32_t)(lo & M26);
    o[1] = (uint32_t)((lo >> 26) & M26);
    o[2] = (uint32_t)(((lo >> 52) | (hi << 12)) & M26);
    o[3] = (uint32_t)((hi >> 14) & M26);
    o[4] = (uint32_t)((hi >> 40) | ((a2 >> 40) << 24));
}

static void powers(poly_neon *p)
{
    uint64_t r2[3], r4[3];
    vc_poly44_powers(&p->base, r2, NULL, r4);
    to26(p->pw[0], p->base.r);
    to26(p->pw[1], r2);
    to26(p->pw[2], r4);
    p->have_pw = 1;
}

/* ---- NEON radix 2^26 ---- */

typedef struct { uint32x2_t l[5]; } v26;     /* 5 limbs, 2 lanes */
typedef struct { uint64x2_t d[5]; } v64;     /* 5 unreduced 64-bit sums, 2 lanes */
typedef struct { uint32x4_t a, b, c; } rpow;  /* (r0 r1 r2 r3) (r4 5r1 5r2 5r3) (5r4 . . .) */

VC_INLINE rpow load_pow(const uint32_t r[5])
{
    rpow o;
    uint32_t t[12] = {r[0], r[1], r[2], r[3], r[4], 5 * r[1], 5 * r[2], 5 * r[3], 5 * r[4], 0, 0, 0};
    o.a = vld1q_u32(t); o.b = vld1q_u32(t + 4); o.c = vld1q_u32(t + 8);
    return o;
}

/* two message blocks (32 bytes) as a lane pair, with the 2^128 bit */
VC_INLINE v26 load_pair(const uint8_t *m)
{
    uint64x2x2_t w = vld2q_u64((const uint64_t *)(const void *)m);  /* lo words, hi words */
    uint64x2_t lo = w.val[0], hi = w.val[1];
    uint32x2_t mask = vdup_n_u32((uint32_t)M26);
    v26 o;
    o.l[0] = vand_u32(vmovn_u64(lo), mask);
    o.l[1] = vand_u32(vshrn_n_u64(lo, 26), mask);
    o.l[2] = vand_u32(vmovn_u64(vsriq_n_u64(vshlq_n_u64(hi, 12), lo, 52)), mask);
    o.l[3] = vand_u32(vshrn_n_u64(hi, 14), mask);
    o.l[4] = vorr_u32(vmovn_u64(vshrq_n_u64(hi, 40)), vdup_n_u32(1u << 24));
    return o;
}

/* acc += s * r (both lanes by the same power) */
VC_INLINE void mul_acc(v64 *acc, const v26 *s, const rpow *r, int first)
{
#define MA(k, x, v, lane)                                                       \
    acc->d[k] = first && (x) == 0 ? vmull_laneq_u32(s->l[x], r->v, lane)          \
                                  : vmlal_laneq_u32(acc->d[k], s->l[x], r->v, lane)
    MA(0, 0, a, 0); MA(1, 0, a, 1); MA(2, 0, a, 2); MA(3, 0, a, 3); MA(4, 0, b, 0);
    MA(0, 1, c, 0); MA(1, 1, a, 0); MA(2, 1, a, 1); MA(3, 1, a, 2); MA(4, 1, a, 3);
    MA(0, 2, b, 3); MA(1, 2, c, 0); MA(2, 2, a, 0); MA(3, 2, a, 1); MA(4, 2, a, 2);
    MA(0, 3, b, 2); MA(1, 3, b, 3); MA(2, 3, c, 0); MA(3, 3, a, 0); MA(4, 3, a, 1);
    MA(0, 4, b, 1); MA(1, 4, b, 2); MA(2, 4, b, 3); MA(3, 4, c, 0); MA(4, 4, a, 0);
#undef MA
}

/* lazy carry: limbs back below 2^26 + a little, narrowed to 32 bits */
VC_INLINE v26 carry(v64 a)
{
    uint64x2_t m = vdupq_n_u64(M26), c;
    c = vshrq_n_u64(a.d[0], 26); a.d[0] = vandq_u64(a.d[0], m); a.d[1] = vaddq_u64(a.d[1], c);
    c = vshrq_n_u64(a.d[3], 26); a.d[3] = vandq_u64(a.d[3], m); a.d[4] = vaddq_u64(a.d[4], c);
    c = vshrq_n_u64(a.d[1], 26); a.d[1] = vandq_u64(a.d[1], m); a.d[2] = vaddq_u64(a.d[2], c);
    c = vshrq_n_u64(a.d[4], 26); a.d[4] = vandq_u64(a.d[4], m);
    a.d[0] = vaddq_u64(a.d[0], vaddq_u64(c, vshlq_n_u64(c, 2)));
    c = vshrq_n_u64(a.d[2], 26); a.d[2] = vandq_u64(a.d[2], m); a.d[3] = vaddq_u64(a.d[3], c);
    c = vshrq_n_u64(a.d[0], 26); a.d[0] = vandq_u64(a.d[0], m); a.d[1] = vaddq_u64(a.d[1], c);
    c = vshrq_n_u64(a.d[3], 26); a.d[3] = vandq_u64(a.d[3], m); a.d[4] = vaddq_u64(a.d[4], c);
    v26 o;
    for (int i = 0; i < 5; i++) o.l[i] = vmovn_u64(a.d[i]);
    return o;
}

/* n blocks, n even and >= 4; h in and out in radix 2^44 */
static void blocks_neon(poly_neon *p, const uint8_t *m, size_t n)
{
    if (!p->have_pw) powers(p);
    rpow r2 = load_pow(p->pw[1]), r4 = load_pow(p->pw[2]);
    uint32_t h26[5];
    to26(h26, p->base.h);
    v26 s = load_pair(m);
    for (int i = 0; i < 5; i++) s.l[i] = vadd_u32(s.l[i], vset_lane_u32(h26[i], vdup_n_u32(0), 0));
    m += 32;
    size_t pairs = n / 2 - 1;
    for (; pairs >= 2; pairs -= 2, m += 64) {
        v64 acc;
        v26 p1 = load_pair(m), p2 = load_pair(m + 32);
        mul_acc(&acc, &s, &r4, 1);
        mul_acc(&acc, &p1, &r2, 0);
        s = carry(acc);
        for (int i = 0; i < 5; i++) s.l[i] = vadd_u32(s.l[i], p2.l[i]);
    }
    if (pairs) {
        v64 acc;
        v26 p1 = load_pair(m);
        mul_acc(&acc, &s, &r2, 1);
        s = carry(acc);
        for (int i = 0; i < 5; i++) s.l[i] = vadd_u32(s.l[i], p1.l[i]);
    }
    /* h = A * r^2 + B * r: lane multipliers (r^2, r) */
    uint32x2_t rr[5], rr5[5];
    for (int j = 0; j < 5; j++) {
        uint32_t t[2] = {p->pw[1][j], p->pw[0][j]};
        rr[j] = vld1_u32(t);
        rr5[j] = vmul_n_u32(rr[j], 5);
    }
    uint64x2_t d[5];
    for (int k = 0; k < 5; k++) {
        d[k] = vdupq_n_u64(0);
        for (int i = 0; i < 5; i++) {
            int j = k - i;
            d[k] = vmlal_u32(d[k], s.l[i], j >= 0 ? rr[j] : rr5[j + 5]);
        }
    }
    uint64_t e[5];
    for (int k = 0; k < 5; k++) e[k] = vaddvq_u64(d[k]);
    uint64_t c;
    c = e[0] >> 26; e[0] &= M26; e[1] += c;
    c = e[1] >> 26; e[1] &= M26; e[2] += c;
    c = e[2] >> 26; e[2] &= M26; e[3] += c;
    c = e[3] >> 26; e[3] &= M26; e[4] += c;
    c = e[4] >> 26; e[4] &= M26; e[0] += c * 5;     /* e0 < 2^37, e1..e4 < 2^26 */
    vc_poly44_set_hash26(&p->base, e);
}

/* blocks_neon takes an even count: an odd last block goes to the scalar code */
VC_POLY44_KERNEL(poly_neon, have_pw, , blocks_neon, NEON_MIN_BLOCKS, 2,
                 vc_poly1305_neon_impl, "neon", NULL)
#endif /* __aarch64__ */
