/* NH with AVX2 (see vc_nh.h): two 16-byte units per 256-bit register.
 *
 * vpmuludq multiplies the even 32-bit lanes, so each unit's words are put in
 * the order (w0, w2, w1, w3): then t = m + k is (t0, t2, t1, t3), and
 * vpmuludq(t, t >> 32) is the unit's two products (t0 t2, t1 t3) in its two
 * 64-bit lanes.  The message is shuffled once per step and shared by the four
 * passes; the key is read in 32-byte windows at 16-byte steps, and the window
 * that pass p uses at units (2i, 2i+1) is the one pass p - 2 uses at the next
 * step, so each window is loaded and shuffled once and used twice.  Each pass
 * has its own 4 x 64-bit accumulator, summed across lanes at the end.
 * An odd last unit runs the same steps in a 128-bit register. */
#include "vc_nh.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TAVX2 __attribute__((target("avx2")))
#define ORDER _MM_SHUFFLE(3, 1, 2, 0)

TAVX2 static inline __m256i load_shuf(const uint8_t *p)
{
    return _mm256_shuffle_epi32(_mm256_loadu_si256((const __m256i *)p), ORDER);
}

TAVX2 static inline __m256i pass(__m256i acc, __m256i m, __m256i k)
{
    __m256i t = _mm256_add_epi32(m, k);
    return _mm256_add_epi64(acc, _mm256_mul_epu32(t, _mm256_srli_epi64(t, 32)));
}

TAVX2 static inline __m128i pass128(__m128i acc, __m128i m, const uint8_t *key)
{
    __m128i k = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)key), ORDER);
    __m128i t = _mm_add_epi32(m, k);
    return _mm_add_epi64(acc, _mm_mul_epu32(t, _mm_srli_epi64(t, 32)));
}

TAVX2 static inline uint64_t hsum(__m256i v, __m128i tail)
{
    __m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi64(s, tail);
    return (uint64_t)_mm_cvtsi128_si64(s) + (uint64_t)_mm_extract_epi64(s, 1);
}

TAVX2 static void nh_avx2(const uint8_t *key, const uint8_t *msg, size_t len, uint64_t out[4])
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t pairs = len / 32, off = 0;
    if (pairs) {
        __m256i e = load_shuf(key), o = load_shuf(key + 16);   /* units (2i, 2i+1), (2i+1, 2i+2) */
        for (size_t i = 0; i < pairs; i++, off += 32) {
            __m256i m = load_shuf(msg + off);
            __m256i e2 = load_shuf(key + off + 32), o2 = load_shuf(key + off + 48);
            a0 = pass(a0, m, e);
            a1 = pass(a1, m, o);
            a2 = pass(a2, m, e2);
            a3 = pass(a3, m, o2);
            e = e2;
            o = o2;
        }
    }
    __m128i t0 = _mm_setzero_si128(), t1 = t0, t2 = t0, t3 = t0;
    if (len & 16) {
        __m128i m = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)(msg + off)), ORDER);
        t0 = pass128(t0, m, key + off);
        t1 = pass128(t1, m, key + off + 16);
        t2 = pass128(t2, m, key + off + 32);
        t3 = pass128(t3, m, key + off + 48);
    }
    out[0] = hsum(a0, t0);
    out[1] = hsum(a1, t1);
    out[2] = hsum(a2, t2);
    out[3] = hsum(a3, t3);
}

const vc_nh_impl vc_nh_avx2_impl = { .name = "avx2", .nh = nh_avx2, .available = vc_cpu_has_avx2 };
#endif
