/* ChaCha (RFC 8439) stream kernel for x86-64 AVX2.
 *
 * Widths, chosen per call from the remaining length:
 *   >= 512 bytes : 8 blocks per pass, one block per 32-bit ymm lane (state words
 *                  broadcast, counters +0..+7), 8x8 transposes.
 *   257..511     : the same 8-lane pass, output stops at the end of the data.
 *   129..256     : 4 blocks as two interleaved ymm "row" groups (one block per
 *                  128-bit lane, rows a/b/c/d in four registers).
 *   1..128       : 1-2 blocks, one ymm row group.
 * Output goes out in 32-byte pieces.  The piece that holds the end of the message
 * is finished in vector code: vpmaskmovd load/store for its whole dwords (masked
 * elements are never accessed, so nothing outside the buffers is touched), then
 * the last 0-3 bytes from the keystream dword extracted out of the same register.
 * No scalar block loop and no bounce buffer.  Built with function-level target
 * attributes only (the module itself is -O3). */
#if defined(__x86_64__)
#include <immintrin.h>
#include "vc_internal.h"
#include "chacha_x86.h"

#define TGT __attribute__((target("avx2")))
#define TGT_INLINE static inline __attribute__((always_inline, target("avx2")))

/* dst[0..n) = src[0..n) ^ k[0..n), n in 1..31. */
TGT_INLINE void xor_partial(uint8_t *dst, const uint8_t *src, size_t n, __m256i k)
{
    size_t nd = n >> 2, r = n & 3;
    if (nd) {
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nd),
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256i v = _mm256_maskload_epi32((const int *)src, m);
        _mm256_maskstore_epi32((int *)dst, m, _mm256_xor_si256(v, k));
    }
    if (r) {
        __m256i w = _mm256_permutevar8x32_epi32(k, _mm256_set1_epi32((int)nd));
        uint32_t kw = (uint32_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(w));
        size_t o = nd * 4;
        dst[o] = (uint8_t)(src[o] ^ (uint8_t)kw);
        if (r > 1) dst[o + 1] = (uint8_t)(src[o + 1] ^ (uint8_t)(kw >> 8));
        if (r > 2) dst[o + 2] = (uint8_t)(src[o + 2] ^ (uint8_t)(kw >> 16));
    }
}

/* Write 32-byte piece j of a pass, or finish it when the data ends inside it
 * (and return from the pass when the data ends at or before it).  With otk (the
 * AEAD's one-time Poly1305 key) the pass's first block is the key block: piece
 * 0 goes to otk, piece 1 is dropped, and the data starts at piece 2. */
#define OUT_PIECE(j, k)                                                         \
    do {                                                                        \
        if (otk && (j) < 2) {                                                   \
            if ((j) == 0)                                                       \
                _mm256_storeu_si256((__m256i *)otk, (k));                       \
            break;                                                              \
        }                                                                       \
        size_t at_ = (size_t)32 * (j) - (otk ? 64 : 0);                         \
        if (len >= at_ + 32) {                                                  \
            _mm256_storeu_si256((__m256i *)(dst + at_), _mm256_xor_si256(       \
                _mm256_loadu_si256((const __m256i *)(src + at_)), (k)));        \
        } else {                                                                \
            if (len > at_)                                                      \
                xor_partial(dst + at_, src + at_, len - at_, (k));              \
            return;                                                             \
        }                                                                       \
    } while (0)

#define ADD(a, b) _mm256_add_epi32(a, b)
#define XOR(a, b) _mm256_xor_si256(a, b)
#define ROT(v, n) _mm256_or_si256(_mm256_slli_epi32(v, n), _mm256_srli_epi32(v, 32 - (n)))
#define ROT16(v) _mm256_shuffle_epi8(v, rot16)
#define ROT8(v) _mm256_shuffle_epi8(v, rot8)
#define QR(a, b, c, d)                                                          \
    a = ADD(a, b); d = ROT16(XOR(d, a));                                        \
    c = ADD(c, d); b = ROT(XOR(b, c), 12);                                      \
    a = ADD(a, b); d = ROT8(XOR(d, a));                                         \
    c = ADD(c, d); b = ROT(XOR(b, c), 7)

#define ROT_CONSTS                                                              \
    const __m256i rot16 = _mm256_setr_epi8(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13, \
                                           2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13); \
    const __m256i rot8 = _mm256_setr_epi8(3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10, 15, 12, 13, 14, \
                                          3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10, 15, 12, 13, 14)

/* ---------------- 8 blocks, one per ymm lane; len in 1..512 ---------------- */
/* (with otk: len in 0..448) */
static TGT void pass8(uint8_t *otk, uint8_t *dst, const uint8_t *src, size_t len,
                      const uint32_t st[16], uint32_t ctr, int rounds)
{
    ROT_CONSTS;
    __m256i x0 = _mm256_set1_epi32((int)st[0]), x1 = _mm256_set1_epi32((int)st[1]);
    __m256i x2 = _mm256_set1_epi32((int)st[2]), x3 = _mm256_set1_epi32((int)st[3]);
    __m256i x4 = _mm256_set1_epi32((int)st[4]), x5 = _mm256_set1_epi32((int)st[5]);
    __m256i x6 = _mm256_set1_epi32((int)st[6]), x7 = _mm256_set1_epi32((int)st[7]);
    __m256i x8 = _mm256_set1_epi32((int)st[8]), x9 = _mm256_set1_epi32((int)st[9]);
    __m256i x10 = _mm256_set1_epi32((int)st[10]), x11 = _mm256_set1_epi32((int)st[11]);
    __m256i x12 = _mm256_add_epi32(_mm256_set1_epi32((int)ctr),
                                   _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i x13 = _mm256_set1_epi32((int)st[13]), x14 = _mm256_set1_epi32((int)st[14]);
    __m256i x15 = _mm256_set1_epi32((int)st[15]);
    const __m256i ctrv = x12;
    for (int i = 0; i < rounds; i += 2) {
        VC_CHACHA_DOUBLE_ROUND(QR);
    }
#define FF(i) x##i = ADD(x##i, _mm256_set1_epi32((int)st[i]))
    FF(0); FF(1); FF(2); FF(3); FF(4); FF(5); FF(6); FF(7);
    FF(8); FF(9); FF(10); FF(11); FF(13); FF(14); FF(15);
#undef FF
    x12 = ADD(x12, ctrv);
    VC_T4X4_ALL(256);
    /* Block m: lo half = (x_m lane0 | x_{4+m} lane0), hi half = (x_{8+m} | x_{12+m});
     * block 4+m: the same with lane 1. */
#define LO(p, q) _mm256_permute2x128_si256(p, q, 0x20)
#define HI(p, q) _mm256_permute2x128_si256(p, q, 0x31)
    OUT_PIECE(0, LO(x0, x4));  OUT_PIECE(1, LO(x8, x12));
    OUT_PIECE(2, LO(x1, x5));  OUT_PIECE(3, LO(x9, x13));
    OUT_PIECE(4, LO(x2, x6));  OUT_PIECE(5, LO(x10, x14));
    OUT_PIECE(6, LO(x3, x7));  OUT_PIECE(7, LO(x11, x15));
    OUT_PIECE(8, HI(x0, x4));  OUT_PIECE(9, HI(x8, x12));
    OUT_PIECE(10, HI(x1, x5)); OUT_PIECE(11, HI(x9, x13));
    OUT_PIECE(12, HI(x2, x6)); OUT_PIECE(13, HI(x10, x14));
    OUT_PIECE(14, HI(x3, x7)); OUT_PIECE(15, HI(x11, x15));
}

/* ---------------- row layout: one block per 128-bit lane ---------------- */
#define ROWDR(a, b, c, d)                                                       \
    QR(a, b, c, d);                                                             \
    b = _mm256_shuffle_epi32(b, 0x39); c = _mm256_shuffle_epi32(c, 0x4E);       \
    d = _mm256_shuffle_epi32(d, 0x93);                                          \
    QR(a, b, c, d);                                                             \
    b = _mm256_shuffle_epi32(b, 0x93); c = _mm256_shuffle_epi32(c, 0x4E);       \
    d = _mm256_shuffle_epi32(d, 0x39)

#define ROW_INIT                                                                \
    const __m256i ra = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)st)); \
    const __m256i rb = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(st + 4))); \
    const __m256i rc = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(st + 8))); \
    const __m256i rd = _mm256_add_epi32(_mm256_broadcastsi128_si256(              \
        _mm_setr_epi32((int)ctr, (int)st[13], (int)st[14], (int)st[15])),       \
        _mm256_setr_epi32(0, 0, 0, 0, 1, 0, 0, 0))

/* 1-2 blocks; len in 1..128 (with otk: 0..64). */
static TGT void row2(uint8_t *otk, uint8_t *dst, const uint8_t *src, size_t len,
                     const uint32_t st[16], uint32_t ctr, int rounds)
{
    ROT_CONSTS;
    ROW_INIT;
    __m256i a = ra, b = rb, c = rc, d = rd;
    for (int i = 0; i < rounds; i += 2) {
        ROWDR(a, b, c, d);
    }
    a = ADD(a, ra); b = ADD(b, rb); c = ADD(c, rc); d = ADD(d, rd);
    OUT_PIECE(0, LO(a, b)); OUT_PIECE(1, LO(c, d));
    OUT_PIECE(2, HI(a, b)); OUT_PIECE(3, HI(c, d));
}

/* 3-4 blocks as two interleaved row groups; len in 1..256 (with otk: 0..192). */
static TGT void row4(uint8_t *otk, uint8_t *dst, const uint8_t *src, size_t len,
                     const uint32_t st[16], uint32_t ctr, int rounds)
{
    ROT_CONSTS;
    ROW_INIT;
    const __m256i rd2 = _mm256_add_epi32(rd, _mm256_setr_epi32(2, 0, 0, 0, 2, 0, 0, 0));
    __m256i a = ra, b = rb, c = rc, d = rd;
    __m256i e = ra, f = rb, g = rc, h = rd2;
    for (int i = 0; i < rounds; i += 2) {
        ROWDR(a, b, c, d);
        ROWDR(e, f, g, h);
    }
    a = ADD(a, ra); b = ADD(b, rb); c = ADD(c, rc); d = ADD(d, rd);
    e = ADD(e, ra); f = ADD(f, rb); g = ADD(g, rc); h = ADD(h, rd2);
    OUT_PIECE(0, LO(a, b)); OUT_PIECE(1, LO(c, d));
    OUT_PIECE(2, HI(a, b)); OUT_PIECE(3, HI(c, d));
    OUT_PIECE(4, LO(e, f)); OUT_PIECE(5, LO(g, h));
    OUT_PIECE(6, HI(e, f)); OUT_PIECE(7, HI(g, h));
}

static TGT void chacha_avx2_stream(uint8_t *dst, const uint8_t *src, size_t len,
                                   const uint32_t st[16], int rounds)
{
    uint32_t ctr = st[12];
    VC_CHACHA_WHOLE_PASSES(pass8, 8)
    if (len > 256)
        pass8(NULL, dst, src, len, st, ctr, rounds);
    else if (len > 128)
        row4(NULL, dst, src, len, st, ctr, rounds);
    else if (len > 0)
        row2(NULL, dst, src, len, st, ctr, rounds);
}

/* The AEAD form: block st[12] gives the one-time key and the data starts at the
 * next block; the key block is one more lane of the first pass. */
static TGT void chacha_avx2_stream_otk(uint8_t otk[32], uint8_t *dst, const uint8_t *src,
                                       size_t len, const uint32_t st[16], int rounds)
{
    uint32_t ctr = st[12];
    size_t first = len < 448 ? len : 448;
    if (first > 192)
        pass8(otk, dst, src, first, st, ctr, rounds);
    else if (first > 64)
        row4(otk, dst, src, first, st, ctr, rounds);
    else
        row2(otk, dst, src, first, st, ctr, rounds);
    VC_CHACHA_OTK_REST(chacha_avx2_stream, 8)
}

const vc_chacha_impl vc_chacha_avx2_impl = {
    .name = "avx2", .stream = chacha_avx2_stream, .available = vc_cpu_has_avx2,
    .stream_otk = chacha_avx2_stream_otk, .otk_span = 448,
};
#endif
