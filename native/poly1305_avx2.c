/* Poly1305 (RFC 8439 section 2.5) with AVX2: radix 2^26 limbs in 64-bit lanes
 * (vpmuludq), 4 blocks in parallel with precomputed r^1..r^4.
 *
 * The hash lives in scalar radix-2^44 limbs between calls.  An update() that
 * brings at least AVX2_MIN_BLOCKS whole blocks runs them through the 4-lane
 * kernel: the n blocks are split into ceil(n/4) groups of 4, the first group
 * front-padded with zero blocks (no 2^128 bit), so position p of every group
 * holds a block whose final power of r is 4 - p.  Each group step is
 * H = H*r^4 + M; the last step multiplies position p by r^(4-p) and the lanes
 * are summed back into the scalar hash.  Short runs, the buffered partial
 * block and the final reduction use the scalar radix-2^44 code.  No branch or
 * memory index depends on the key or the message, only on lengths. */
#include "poly1305_scalar.h"

#if defined(__x86_64__)
#include <immintrin.h>


#define M26 0x3ffffffULL

/* Measured crossover on Zen 4 (80 B: scalar faster, 96 B: vector faster); must be >= 4. */
#ifndef AVX2_MIN_BLOCKS
#define AVX2_MIN_BLOCKS 6
#endif

#define TAVX2 __attribute__((target("avx2")))

typedef struct {
    __m256i   rp[5];     /* lane l: limb k (radix 2^26) of r^(4 - pos(l)), pos = {0,2,1,3} */
    vc_poly44 base;      /* r, s, the hash and the partial block (scalar radix 2^44) */
    uint64_t  have_pow;  /* rp valid */
} poly_avx2;

/* ---- vector ---- */

typedef struct { __m256i l[5]; } v5;

/* Radix 2^44 (limbs l0 < 2^44, l1 <= 2^44 + 2^20, l2 < 2^42 + 2^20) to radix 2^26
 * limbs below 2^27, lane-wise; the value is preserved exactly. */
static inline TAVX2 v5 to26(__m256i l0, __m256i l1, __m256i l2)
{
    const __m256i m26 = _mm256_set1_epi64x(M26);
    v5 o;
    o.l[0] = _mm256_and_si256(l0, m26);
    o.l[1] = _mm256_add_epi64(_mm256_srli_epi64(l0, 26), _mm256_and_si256(_mm256_slli_epi64(l1, 18), m26));
    o.l[2] = _mm256_and_si256(_mm256_srli_epi64(l1, 8), m26);
    o.l[3] = _mm256_add_epi64(_mm256_srli_epi64(l1, 34), _mm256_and_si256(_mm256_slli_epi64(l2, 10), m26));
    o.l[4] = _mm256_srli_epi64(l2, 16);
    return o;
}

static inline TAVX2 __m256i times5(__m256i x)
{
    return _mm256_add_epi64(x, _mm256_slli_epi64(x, 2));
}

#define MUL(a, b) _mm256_mul_epu32(a, b)
#define ADD(a, b) _mm256_add_epi64(a, b)

/* x * y + a (lane-wise), carried to limbs < 2^26 + 2^9.
 * x limbs < 2^28, y limbs < 2^27 (s = 5 * y limbs 1..4), a limbs < 2^27. */
static inline TAVX2 v5 vmul(const v5 *x, const __m256i *y, const __m256i *s, const v5 *a)
{
    const __m256i m26 = _mm256_set1_epi64x(M26);
    __m256i x0 = x->l[0], x1 = x->l[1], x2 = x->l[2], x3 = x->l[3], x4 = x->l[4];
    __m256i d0, d1, d2, d3, d4, c0, c1, c2, c3, c4;
    d0 = ADD(ADD(ADD(MUL(x0, y[0]), MUL(x1, s[4])), ADD(MUL(x2, s[3]), MUL(x3, s[2]))),
             ADD(MUL(x4, s[1]), a->l[0]));
    d1 = ADD(ADD(ADD(MUL(x0, y[1]), MUL(x1, y[0])), ADD(MUL(x2, s[4]), MUL(x3, s[3]))),
             ADD(MUL(x4, s[2]), a->l[1]));
    d2 = ADD(ADD(ADD(MUL(x0, y[2]), MUL(x1, y[1])), ADD(MUL(x2, y[0]), MUL(x3, s[4]))),
             ADD(MUL(x4, s[3]), a->l[2]));
    d3 = ADD(ADD(ADD(MUL(x0, y[3]), MUL(x1, y[2])), ADD(MUL(x2, y[1]), MUL(x3, y[0]))),
             ADD(MUL(x4, s[4]), a->l[3]));
    d4 = ADD(ADD(ADD(MUL(x0, y[4]), MUL(x1, y[3])), ADD(MUL(x2, y[2]), MUL(x3, y[1]))),
             ADD(MUL(x4, y[0]), a->l[4]));
    c0 = _mm256_srli_epi64(d0, 26); d0 = _mm256_and_si256(d0, m26);
    c3 = _mm256_srli_epi64(d3, 26); d3 = _mm256_and_si256(d3, m26);
    d1 = ADD(d1, c0); d4 = ADD(d4, c3);
    c1 = _mm256_srli_epi64(d1, 26); d1 = _mm256_and_si256(d1, m26);
    c4 = _mm256_srli_epi64(d4, 26); d4 = _mm256_and_si256(d4, m26);
    d2 = ADD(d2, c1); d0 = ADD(d0, times5(c4));
    c2 = _mm256_srli_epi64(d2, 26); d2 = _mm256_and_si256(d2, m26);
    c0 = _mm256_srli_epi64(d0, 26); d0 = _mm256_and_si256(d0, m26);
    d3 = ADD(d3, c2); d1 = ADD(d1, c0);
    c3 = _mm256_srli_epi64(d3, 26); d3 = _mm256_and_si256(d3, m26);
    d4 = ADD(d4, c3);
    v5 o = {{d0, d1, d2, d3, d4}};
    return o;
}

/* Blocks at positions 0..3 of a group: a = positions 0,1; b = positions 2,3.
 * Lane order after the unpack is positions {0, 2, 1, 3}. */
static inline TAVX2 v5 split(__m256i a, __m256i b, __m256i hib)
{
    const __m256i m26 = _mm256_set1_epi64x(M26);
    __m256i t0 = _mm256_unpacklo_epi64(a, b), t1 = _mm256_unpackhi_epi64(a, b);
    v5 o;
    o.l[0] = _mm256_and_si256(t0, m26);
    o.l[1] = _mm256_and_si256(_mm256_srli_epi64(t0, 26), m26);
    o.l[2] = _mm256_and_si256(_mm256_or_si256(_mm256_srli_epi64(t0, 52), _mm256_slli_epi64(t1, 12)), m26);
    o.l[3] = _mm256_and_si256(_mm256_srli_epi64(t1, 14), m26);
    o.l[4] = _mm256_or_si256(_mm256_srli_epi64(t1, 40), hib);
    return o;
}

static TAVX2 __attribute__((noinline)) void compute_powers(poly_avx2 *p)
{
    /* lanes (positions 0,2,1,3) = r^4, r^2, r^3, r^1 */
    __m256i l[3];
    uint64_t r4[3];
    vc_poly44_power_lanes(&p->base, (const int[4]){4, 2, 3, 1}, l, r4);
    v5 t = to26(l[0], l[1], l[2]);
    for (int k = 0; k < 5; k++) p->rp[k] = t.l[k];
    p->have_pow = 1;
}

/* n >= 4 whole blocks, each with the 2^128 bit. */
static TAVX2 void vec_blocks(poly_avx2 *p, const uint8_t *m, size_t n)
{
    if (!p->have_pow) compute_powers(p);
    __m256i y[5], s[5], yt[5], st[5];
    for (int k = 0; k < 5; k++) {
        yt[k] = p->rp[k];
        st[k] = times5(yt[k]);
        y[k] = _mm256_permute4x64_epi64(yt[k], 0);   /* r^4 everywhere */
        s[k] = times5(y[k]);
    }
    const __m256i one24 = _mm256_set1_epi64x(1LL << 24);
    const __m256i zero = _mm256_setzero_si256();

    size_t groups = (n + 3) / 4;
    unsigned zpad = (unsigned)(groups * 4 - n);      /* 0..3 leading zero blocks */
    __m256i a, b;
    switch (zpad) {
    case 0:
        a = _mm256_loadu_si256((const __m256i *)m);
        b = _mm256_loadu_si256((const __m256i *)(m + 32));
        break;
    case 1:
        a = _mm256_inserti128_si256(zero, _mm_loadu_si128((const __m128i *)m), 1);
        b = _mm256_loadu_si256((const __m256i *)(m + 16));
        break;
    case 2:
        a = zero;
        b = _mm256_loadu_si256((const __m256i *)m);
        break;
    default:
        a = zero;
        b = _mm256_inserti128_si256(zero, _mm_loadu_si128((const __m128i *)m), 1);
        break;
    }
    /* lane l holds position pos(l); live positions are >= zpad; h joins position zpad */
    const __m256i pos = _mm256_set_epi64x(3, 1, 2, 0);
    __m256i live = _mm256_cmpgt_epi64(pos, _mm256_set1_epi64x((long long)zpad - 1));
    __m256i first = _mm256_cmpeq_epi64(pos, _mm256_set1_epi64x((long long)zpad));
    v5 h = split(a, b, _mm256_and_si256(live, one24));
    {
        v5 hs = to26(_mm256_set1_epi64x((long long)p->base.h[0]), _mm256_set1_epi64x((long long)p->base.h[1]),
                     _mm256_set1_epi64x((long long)p->base.h[2]));
        for (int k = 0; k < 5; k++) h.l[k] = ADD(h.l[k], _mm256_and_si256(first, hs.l[k]));
    }
    m += 16 * (4 - zpad);

    for (size_t g = 1; g < groups; g++) {
        v5 msg = split(_mm256_loadu_si256((const __m256i *)m),
                       _mm256_loadu_si256((const __m256i *)(m + 32)), one24);
        h = vmul(&h, y, s, &msg);
        m += 64;
    }
    v5 none = {{zero, zero, zero, zero, zero}};
    h = vmul(&h, yt, st, &none);

    /* horizontal sums, each < 2^29 */
    uint64_t l[5];
    for (int k = 0; k < 5; k++) {
        __m128i x = _mm_add_epi64(_mm256_castsi256_si128(h.l[k]), _mm256_extracti128_si256(h.l[k], 1));
        x = _mm_add_epi64(x, _mm_unpackhi_epi64(x, x));
        l[k] = (uint64_t)_mm_cvtsi128_si64(x);
    }
    vc_poly44_set_hash26(&p->base, l);
}

/* ---- interface ---- */

VC_POLY44_KERNEL(poly_avx2, have_pow, TAVX2, vec_blocks, AVX2_MIN_BLOCKS, 1,
                 vc_poly1305_avx2_impl, "avx2", vc_cpu_has_avx2)

#else
typedef int vc_poly1305_avx2_unused;
#endif
