/* Poly1305 (RFC 8439 section 2.5) with AVX-512 IFMA: radix 2^44 limbs, 52-bit
 * multiply-add (vpmadd52luq / vpmadd52huq), 8 blocks in parallel.
 *
 * The hash lives in scalar radix-2^44 limbs between calls.  An update() that
 * brings at least AVX512_MIN_BLOCKS whole blocks runs them through the 8-lane
 * kernel: the n blocks are split into ceil(n/8) groups of 8, the first group
 * front-padded with zero blocks (no 2^128 bit), so lane p of every group holds
 * a block whose final power of r is 8 - p.  Each group step is H = H*r^8 + M;
 * the last step multiplies lane p by r^(8-p) and the lanes are summed back into
 * the scalar hash.  Short runs, the buffered partial block and the final
 * reduction use the scalar radix-2^44 code.  No branch or memory index depends
 * on the key or the message, only on lengths. */
#include "poly1305_scalar.h"

#if defined(__x86_64__)
#include <immintrin.h>



/* Measured crossover (see report): the vector path pays for computing
 * r^2..r^8 once per key (~40 ns); at 4 blocks the scalar code is still faster,
 * at 5 blocks the vector path wins on Zen 4. */
#ifndef AVX512_MIN_BLOCKS
#define AVX512_MIN_BLOCKS 5   /* must be >= 1 */
#endif

#define T512 __attribute__((target("avx512f,avx512vl,avx512ifma")))

typedef struct {
    __m512i   rp[3];     /* lane p: limb k of r^(8-p), 44/44/42-bit limbs */
    vc_poly44 base;      /* r, s, the hash and the partial block (scalar radix 2^44) */
    uint64_t  have_pow;  /* rp valid */
} poly_512;

/* ---- vector ---- */

typedef struct { __m512i l0, l1, l2; } v3;

/* x * y (lane-wise) + a, with one parallel carry round: the result has limbs
 * < 2^44 + 2^15 (limb 2 < 2^42 + 2^10).
 * Inputs: x limbs < 2^45 (limb 2 < 2^43), y limbs < 2^44 + 2^15 (limb 2 < 2^42 + 2^15),
 * ys = 20 * y limbs 1 and 2, a limbs < 2^45.
 * Each product (< 2^90) is split by IFMA into lo (bits 0..51) and hi (52..103);
 * the partial sums below stay < 2^54, far from 64-bit overflow. */
static inline T512 v3 vmul(v3 x, __m512i y0, __m512i y1, __m512i y2, __m512i ys1, __m512i ys2,
                           v3 a)
{
    const __m512i z = _mm512_setzero_si512();
    const __m512i m44 = _mm512_set1_epi64(VC_M44), m42 = _mm512_set1_epi64(VC_M42);
    /* two independent accumulation chains per sum to halve the IFMA latency */
    __m512i d0 = _mm512_madd52lo_epu64(a.l0, x.l0, y0);
    __m512i d1 = _mm512_madd52lo_epu64(a.l1, x.l0, y1);
    __m512i d2 = _mm512_madd52lo_epu64(a.l2, x.l0, y2);
    __m512i e0 = _mm512_madd52hi_epu64(z, x.l0, y0);
    __m512i e1 = _mm512_madd52hi_epu64(z, x.l0, y1);
    __m512i e2 = _mm512_madd52hi_epu64(z, x.l0, y2);
    __m512i f0 = _mm512_madd52lo_epu64(z, x.l1, ys2);
    __m512i f1 = _mm512_madd52lo_epu64(z, x.l1, y0);
    __m512i f2 = _mm512_madd52lo_epu64(z, x.l1, y1);
    __m512i g0 = _mm512_madd52hi_epu64(z, x.l1, ys2);
    __m512i g1 = _mm512_madd52hi_epu64(z, x.l1, y0);
    __m512i g2 = _mm512_madd52hi_epu64(z, x.l1, y1);
    d0 = _mm512_madd52lo_epu64(d0, x.l2, ys1);
    d1 = _mm512_madd52lo_epu64(d1, x.l2, ys2);
    d2 = _mm512_madd52lo_epu64(d2, x.l2, y0);
    e0 = _mm512_madd52hi_epu64(e0, x.l2, ys1);
    e1 = _mm512_madd52hi_epu64(e1, x.l2, ys2);
    e2 = _mm512_madd52hi_epu64(e2, x.l2, y0);
    d0 = _mm512_add_epi64(d0, f0); d1 = _mm512_add_epi64(d1, f1); d2 = _mm512_add_epi64(d2, f2);
    e0 = _mm512_add_epi64(e0, g0); e1 = _mm512_add_epi64(e1, g1); e2 = _mm512_add_epi64(e2, g2);
    /* hi parts weigh 2^52 more than their lo parts: e0*2^52 = (e0*2^8)*2^44 goes to
     * limb 1, e1*2^8 to limb 2, e2*2^(88+52) = e2*2^140 == e2*5*2^10 (mod 2^130-5)
     * to limb 0.  e0 < 2^40.5, e1 < 2^39, e2 < 2^37.6, so each of these products
     * is below 2^50 and a 52-bit multiply-add gives it exactly. */
    d1 = _mm512_madd52lo_epu64(d1, e0, _mm512_set1_epi64(1 << 8));
    d2 = _mm512_madd52lo_epu64(d2, e1, _mm512_set1_epi64(1 << 8));
    d0 = _mm512_madd52lo_epu64(d0, e2, _mm512_set1_epi64(5 << 10));
    /* d0, d1, d2 < 2^54: one carry round, all limbs at once */
    __m512i c0 = _mm512_srli_epi64(d0, 44), c1 = _mm512_srli_epi64(d1, 44), c2 = _mm512_srli_epi64(d2, 42);
    d0 = _mm512_add_epi64(_mm512_and_si512(d0, m44), _mm512_add_epi64(c2, _mm512_slli_epi64(c2, 2)));
    d1 = _mm512_add_epi64(_mm512_and_si512(d1, m44), c0);
    d2 = _mm512_add_epi64(_mm512_and_si512(d2, m42), c1);
    v3 o = {d0, d1, d2};
    return o;
}

static inline T512 __m512i times20(__m512i x)
{
    return _mm512_add_epi64(_mm512_slli_epi64(x, 4), _mm512_slli_epi64(x, 2));
}

/* Split 8 blocks into limbs.  t0/t1: low/high 64 bits of each lane's block. */
static inline T512 v3 split(__m512i t0, __m512i t1, __m512i hib)
{
    const __m512i m44 = _mm512_set1_epi64(VC_M44);
    v3 o;
    o.l0 = _mm512_and_si512(t0, m44);
    o.l1 = _mm512_and_si512(_mm512_or_si512(_mm512_srli_epi64(t0, 44), _mm512_slli_epi64(t1, 20)), m44);
    o.l2 = _mm512_or_si512(_mm512_srli_epi64(t1, 24), hib);
    return o;
}

static T512 __attribute__((noinline)) void compute_powers(poly_512 *p)
{
    /* [r^4, r^3, r^2, r^1] * r^4 = [r^8, r^7, r^6, r^5], 4 lanes */
    __m256i a[3];
    uint64_t r4[3];
    vc_poly44_power_lanes(&p->base, (const int[4]){4, 3, 2, 1}, a, r4);
    __m256i a0 = a[0], a1 = a[1], a2 = a[2];
    v3 x = {_mm512_zextsi256_si512(a0), _mm512_zextsi256_si512(a1), _mm512_zextsi256_si512(a2)};
    __m512i y0 = _mm512_set1_epi64((long long)r4[0]);
    __m512i y1 = _mm512_set1_epi64((long long)r4[1]);
    __m512i y2 = _mm512_set1_epi64((long long)r4[2]);
    v3 zero = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    v3 hi = vmul(x, y0, y1, y2, times20(y1), times20(y2), zero);
    p->rp[0] = _mm512_inserti64x4(hi.l0, a0, 1);
    p->rp[1] = _mm512_inserti64x4(hi.l1, a1, 1);
    p->rp[2] = _mm512_inserti64x4(hi.l2, a2, 1);
    p->have_pow = 1;
}

/* n >= 1 whole blocks, each with the 2^128 bit. */
static T512 void vec_blocks(poly_512 *p, const uint8_t *m, size_t n)
{
    if (!p->have_pow) compute_powers(p);
    const __m512i rp0 = p->rp[0], rp1 = p->rp[1], rp2 = p->rp[2];
    const __m512i zero = _mm512_setzero_si512();
    /* r^8 in every lane */
    const __m512i r0 = _mm512_permutexvar_epi64(zero, rp0);
    const __m512i r1 = _mm512_permutexvar_epi64(zero, rp1);
    const __m512i r2 = _mm512_permutexvar_epi64(zero, rp2);
    const __m512i rs1 = times20(r1), rs2 = times20(r2);
    const __m512i one40 = _mm512_set1_epi64(1ULL << 40);
    const __m512i ev = _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i od = _mm512_set_epi64(15, 13, 11, 9, 7, 5, 3, 1);

    size_t groups = (n + 7) / 8;
    unsigned zpad = (unsigned)(groups * 8 - n);         /* 0..7 leading zero blocks */
    __mmask8 live = (__mmask8)(0xffu << zpad);
    /* First group: lane p holds block p - zpad, lanes below zpad are zero. */
    __m512i a, b;
    if (n >= 8) {
        a = _mm512_loadu_si512((const void *)m);
        b = _mm512_loadu_si512((const void *)(m + 64));
    } else {
        /* fewer than 8 blocks: load exactly the 2n quadwords of the message
         * (masked-off lanes are not accessed) */
        unsigned q = 2 * (unsigned)n;
        a = _mm512_maskz_loadu_epi64((__mmask8)((1u << (q < 8 ? q : 8)) - 1), (const void *)m);
        b = q > 8 ? _mm512_maskz_loadu_epi64((__mmask8)((1u << (q - 8)) - 1), (const void *)(m + 64))
                  : _mm512_setzero_si512();
    }
    __m512i shift = _mm512_set1_epi64((long long)(2 * zpad));
    __m512i t0 = _mm512_maskz_permutex2var_epi64(live, a, _mm512_sub_epi64(ev, shift), b);
    __m512i t1 = _mm512_maskz_permutex2var_epi64(live, a, _mm512_sub_epi64(od, shift), b);
    v3 h = split(t0, t1, _mm512_maskz_mov_epi64(live, one40));
    /* the running hash joins the first real block */
    __mmask8 hl = (__mmask8)(1u << zpad);
    h.l0 = _mm512_mask_add_epi64(h.l0, hl, h.l0, _mm512_set1_epi64((long long)p->base.h[0]));
    h.l1 = _mm512_mask_add_epi64(h.l1, hl, h.l1, _mm512_set1_epi64((long long)p->base.h[1]));
    h.l2 = _mm512_mask_add_epi64(h.l2, hl, h.l2, _mm512_set1_epi64((long long)p->base.h[2]));
    m += 16 * (8 - zpad);

    for (size_t g = 1; g < groups; g++) {
        a = _mm512_loadu_si512((const void *)m);
        b = _mm512_loadu_si512((const void *)(m + 64));
        v3 msg = split(_mm512_permutex2var_epi64(a, ev, b), _mm512_permutex2var_epi64(a, od, b), one40);
        h = vmul(h, r0, r1, r2, rs1, rs2, msg);
        m += 128;
    }
    v3 none = {zero, zero, zero};
    h = vmul(h, rp0, rp1, rp2, times20(rp1), times20(rp2), none);

    vc_poly44_set_hash(&p->base, (uint64_t)_mm512_reduce_add_epi64(h.l0),
                       (uint64_t)_mm512_reduce_add_epi64(h.l1), (uint64_t)_mm512_reduce_add_epi64(h.l2));
}

/* ---- interface ---- */

VC_POLY44_KERNEL(poly_512, have_pow, T512, vec_blocks, AVX512_MIN_BLOCKS, 1,
                 vc_poly1305_avx512_impl, "avx512", vc_cpu_has_avx512ifma)

#else
typedef int vc_poly1305_avx512_unused;
#endif
