/* ChaCha (RFC 8439) stream kernel for x86-64 AVX-512 (F + VL + BW).
 *
 * Widths, chosen per call from the remaining length:
 *   >= 1024 bytes : 16 blocks per pass in zmm, one block per 32-bit lane
 *                   (state words broadcast, counters +0..+15), 16x16 transpose.
 *   513..1023     : the same 16-lane pass, stores stop at the end of the data.
 *   257..512      : 8 blocks as two "row" sets in zmm (below), their rounds
 *                   side by side: a row set's rounds are one chain of dependent
 *                   instructions, two chains fill the vector ports (an 8-lane
 *                   column pass in ymm costs what the 16-lane one in zmm does).
 *   129..256      : 4 blocks in zmm, "row" layout: one block per 128-bit lane,
 *                   a/b/c/d rows in four registers, diagonals via vpshufd.
 *   1..128        : 1-2 blocks in ymm, row layout.
 * Every pass writes its output as whole 64-byte blocks in zmm; the block that
 * holds the end of the message is written with a byte-masked load/xor/store
 * (AVX-512BW), so the kernel never touches a byte outside [src, src+len) and
 * [dst, dst+len), and never falls back to a scalar loop or a bounce buffer.
 * Built with function-level target attributes only (the module itself is -O3). */
#if defined(__x86_64__)
#include <immintrin.h>
#include "vc_internal.h"
#include "chacha_x86.h"

#define TGT __attribute__((target("avx512f,avx512vl,avx512bw")))
#define TGT_INLINE static inline __attribute__((always_inline, target("avx512f,avx512vl,avx512bw")))

/* XOR the 64-byte keystream block k into src writing dst; n (>= 1) bytes
 * remain from here, at most 64 are touched. */
TGT_INLINE void xor_block(uint8_t *dst, const uint8_t *src, size_t n, __m512i k)
{
    if (n >= 64) {
        _mm512_storeu_si512((void *)dst, _mm512_xor_si512(_mm512_loadu_si512((const void *)src), k));
    } else {
        __mmask64 m = (((uint64_t)1) << n) - 1;
        __m512i v = _mm512_maskz_loadu_epi8(m, src);
        _mm512_mask_storeu_epi8(dst, m, _mm512_xor_si512(v, k));
    }
}

/* Write block j of a pass, or stop the pass when the data ends before it.
 * With otk (the AEAD's one-time Poly1305 key) block 0 is keystream for otk
 * (its first 32 bytes) and the data starts at block 1. */
#define OUT_BLOCK(j, k)                                                         \
    do {                                                                        \
        if (otk && (j) == 0) {                                                  \
            _mm256_storeu_si256((__m256i *)otk, _mm512_castsi512_si256(k));     \
            break;                                                              \
        }                                                                       \
        size_t at_ = (size_t)64 * (j) - (otk ? 64 : 0);                         \
        if (len <= at_) return;                                                 \
        xor_block(dst + at_, src + at_, len - at_, (k));                        \
    } while (0)

/* The quarter round on V-bit vectors (AVX-512 rotates; VL for V = 256). */
#define QRV(V, a, b, c, d)                                                      \
    a = _mm##V##_add_epi32(a, b); d = _mm##V##_rol_epi32(_mm##V##_xor_si##V(d, a), 16); \
    c = _mm##V##_add_epi32(c, d); b = _mm##V##_rol_epi32(_mm##V##_xor_si##V(b, c), 12); \
    a = _mm##V##_add_epi32(a, b); d = _mm##V##_rol_epi32(_mm##V##_xor_si##V(d, a), 8);  \
    c = _mm##V##_add_epi32(c, d); b = _mm##V##_rol_epi32(_mm##V##_xor_si##V(b, c), 7)
#define QR512(a, b, c, d) QRV(512, a, b, c, d)
#define QR256(a, b, c, d) QRV(256, a, b, c, d)

/* The column layout, one block per 32-bit lane of V-bit vectors: the state
 * words broadcast (s0..s15, counters ctr + ctr_off), the rounds, the feed-forward
 * and the 4x4 transposes, leaving x0..x15 as VC_T4X4_ALL says. */
#define COLUMN_PASS(V, ctr_off)                                                 \
    __m##V##i s0 = _mm##V##_set1_epi32((int)st[0]), s1 = _mm##V##_set1_epi32((int)st[1]); \
    __m##V##i s2 = _mm##V##_set1_epi32((int)st[2]), s3 = _mm##V##_set1_epi32((int)st[3]); \
    __m##V##i s4 = _mm##V##_set1_epi32((int)st[4]), s5 = _mm##V##_set1_epi32((int)st[5]); \
    __m##V##i s6 = _mm##V##_set1_epi32((int)st[6]), s7 = _mm##V##_set1_epi32((int)st[7]); \
    __m##V##i s8 = _mm##V##_set1_epi32((int)st[8]), s9 = _mm##V##_set1_epi32((int)st[9]); \
    __m##V##i s10 = _mm##V##_set1_epi32((int)st[10]), s11 = _mm##V##_set1_epi32((int)st[11]); \
    __m##V##i s12 = _mm##V##_add_epi32(_mm##V##_set1_epi32((int)ctr), ctr_off); \
    __m##V##i s13 = _mm##V##_set1_epi32((int)st[13]), s14 = _mm##V##_set1_epi32((int)st[14]); \
    __m##V##i s15 = _mm##V##_set1_epi32((int)st[15]);                           \
    __m##V##i x0 = s0, x1 = s1, x2 = s2, x3 = s3, x4 = s4, x5 = s5, x6 = s6, x7 = s7; \
    __m##V##i x8 = s8, x9 = s9, x10 = s10, x11 = s11, x12 = s12, x13 = s13, x14 = s14, x15 = s15; \
    for (int i = 0; i < rounds; i += 2) {                                       \
        VC_CHACHA_DOUBLE_ROUND(QR##V);                                          \
    }                                                                           \
    x0 = _mm##V##_add_epi32(x0, s0); x1 = _mm##V##_add_epi32(x1, s1);           \
    x2 = _mm##V##_add_epi32(x2, s2); x3 = _mm##V##_add_epi32(x3, s3);           \
    x4 = _mm##V##_add_epi32(x4, s4); x5 = _mm##V##_add_epi32(x5, s5);           \
    x6 = _mm##V##_add_epi32(x6, s6); x7 = _mm##V##_add_epi32(x7, s7);           \
    x8 = _mm##V##_add_epi32(x8, s8); x9 = _mm##V##_add_epi32(x9, s9);           \
    x10 = _mm##V##_add_epi32(x10, s10); x11 = _mm##V##_add_epi32(x11, s11);     \
    x12 = _mm##V##_add_epi32(x12, s12); x13 = _mm##V##_add_epi32(x13, s13);     \
    x14 = _mm##V##_add_epi32(x14, s14); x15 = _mm##V##_add_epi32(x15, s15);     \
    VC_T4X4_ALL(V)

/* ---------------- 16 blocks, one per zmm lane ---------------- */

/* 4x4 transpose of 128-bit lanes: in: y0..y3 (lane k = 16 bytes of block k at
 * row 0..3); out: o0..o3 = blocks 0..3 (rows in order). */
#define L4X4_512(y0, y1, y2, y3, o0, o1, o2, o3)                                \
    do {                                                                        \
        __m512i u0_ = _mm512_shuffle_i32x4(y0, y1, 0x44);                       \
        __m512i u1_ = _mm512_shuffle_i32x4(y2, y3, 0x44);                       \
        __m512i u2_ = _mm512_shuffle_i32x4(y0, y1, 0xEE);                       \
        __m512i u3_ = _mm512_shuffle_i32x4(y2, y3, 0xEE);                       \
        o0 = _mm512_shuffle_i32x4(u0_, u1_, 0x88);                              \
        o1 = _mm512_shuffle_i32x4(u0_, u1_, 0xDD);                              \
        o2 = _mm512_shuffle_i32x4(u2_, u3_, 0x88);                              \
        o3 = _mm512_shuffle_i32x4(u2_, u3_, 0xDD);                              \
    } while (0)

/* One pass of up to 16 blocks: len in 1..1024 bytes (the whole pass when 1024), or
 * with otk, len in 0..960. */
static TGT void pass16(uint8_t *otk, uint8_t *dst, const uint8_t *src, size_t len,
                       const uint32_t st[16], uint32_t ctr, int rounds)
{
    COLUMN_PASS(512, _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    __m512i b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15;
    L4X4_512(x0, x4, x8, x12, b0, b4, b8, b12);
    L4X4_512(x1, x5, x9, x13, b1, b5, b9, b13);
    L4X4_512(x2, x6, x10, x14, b2, b6, b10, b14);
    L4X4_512(x3, x7, x11, x15, b3, b7, b11, b15);
    OUT_BLOCK(0, b0); OUT_BLOCK(1, b1); OUT_BLOCK(2, b2); OUT_BLOCK(3, b3);
    OUT_BLOCK(4, b4); OUT_BLOCK(5, b5); OUT_BLOCK(6, b6); OUT_BLOCK(7, b7);
    OUT_BLOCK(8, b8); OUT_BLOCK(9, b9); OUT_BLOCK(10, b10); OUT_BLOCK(11, b11);
    OUT_BLOCK(12, b12); OUT_BLOCK(13, b13); OUT_BLOCK(14, b14); OUT_BLOCK(15, b15);
}

/* ---------------- row layout: one block per 128-bit lane ---------------- */
/* a, b, c, d hold rows 0..3 (words 0-3, 4-7, 8-11, 12-15) of each block.
 * Column round, rotate rows so diagonals line up, diagonal round, rotate back. */
#define ROWDR(V, a, b, c, d)                                                    \
    QRV(V, a, b, c, d);                                                         \
    b = _mm##V##_shuffle_epi32(b, 0x39); c = _mm##V##_shuffle_epi32(c, 0x4E);   \
    d = _mm##V##_shuffle_epi32(d, 0x93);                                        \
    QRV(V, a, b, c, d);                                                         \
    b = _mm##V##_shuffle_epi32(b, 0x93); c = _mm##V##_shuffle_epi32(c, 0x4E);   \
    d = _mm##V##_shuffle_epi32(d, 0x39)

/* The row layout's pass on V-bit vectors: rows a0..d0 broadcast to every
 * 128-bit lane with BCAST, the counters ctr + d_off, the rounds and the
 * feed-forward, leaving the keystream rows in a, b, c, d. */
#define ROW_PASS(V, BCAST, d_off)                                               \
    __m##V##i a0 = BCAST(_mm_loadu_si128((const __m128i *)st));                 \
    __m##V##i b0 = BCAST(_mm_loadu_si128((const __m128i *)(st + 4)));           \
    __m##V##i c0 = BCAST(_mm_loadu_si128((const __m128i *)(st + 8)));           \
    __m128i drow = _mm_setr_epi32((int)ctr, (int)st[13], (int)st[14], (int)st[15]); \
    __m##V##i d0 = _mm##V##_add_epi32(BCAST(drow), d_off);                      \
    __m##V##i a = a0, b = b0, c = c0, d = d0;                                   \
    for (int i = 0; i < rounds; i += 2) {                                       \
        ROWDR(V, a, b, c, d);                                                   \
    }                                                                           \
    a = _mm##V##_add_epi32(a, a0); b = _mm##V##_add_epi32(b, b0);               \
    c = _mm##V##_add_epi32(c, c0); d = _mm##V##_add_epi32(d, d0)

/* 3-4 blocks in zmm; len in 1..256. */
static TGT void row4(uint8_t *otk, uint8_t *dst, const uint8_t *src, size_t len,
                     const uint32_t st[16], uint32_t ctr, int rounds)
{
    ROW_PASS(512, _mm512_broadcast_i32x4, _mm512_setr_epi32(0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0));
    __m512i k0, k1, k2, k3;
    L4X4_512(a, b, c, d, k0, k1, k2, k3);
    OUT_BLOCK(0, k0); OUT_BLOCK(1, k1); OUT_BLOCK(2, k2); OUT_BLOCK(3, k3);
}

/* y0..y3: lane k = row 0..3 of block k (k = 0, 1) -> o0 = block 0, o1 = block 1. */
#define L2X4_256(y0, y1, y2, y3, o0, o1)                                        \
    do {                                                                        \
        __m512i u0_ = _mm512_inserti64x4(_mm512_castsi256_si512(y0), y1, 1);    \
        __m512i u1_ = _mm512_inserti64x4(_mm512_castsi256_si512(y2), y3, 1);    \
        o0 = _mm512_shuffle_i32x4(u0_, u1_, 0x88);                              \
        o1 = _mm512_shuffle_i32x4(u0_, u1_, 0xDD);                              \
    } while (0)

/* 5-8 blocks in two row sets in zmm, blocks 0-3 and 4-7, whose rounds are
 * interleaved in one loop; len in 1..512. */
static TGT void row8(uint8_t *otk, uint8_t *dst, const uint8_t *src, size_t len,
                     const uint32_t st[16], uint32_t ctr, int rounds)
{
    __m512i a0 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)st));
    __m512i b0 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(st + 4)));
    __m512i c0 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(st + 8)));
    __m512i drow = _mm512_broadcast_i32x4(_mm_setr_epi32((int)ctr, (int)st[13], (int)st[14], (int)st[15]));
    __m512i d0 = _mm512_add_epi32(drow, _mm512_setr_epi32(0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0));
    __m512i h0 = _mm512_add_epi32(drow, _mm512_setr_epi32(4, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0, 7, 0, 0, 0));
    __m512i a = a0, b = b0, c = c0, d = d0, e = a0, f = b0, g = c0, h = h0;
    for (int i = 0; i < rounds; i += 2) {
        ROWDR(512, a, b, c, d);
        ROWDR(512, e, f, g, h);
    }
    a = _mm512_add_epi32(a, a0); b = _mm512_add_epi32(b, b0);
    c = _mm512_add_epi32(c, c0); d = _mm512_add_epi32(d, d0);
    e = _mm512_add_epi32(e, a0); f = _mm512_add_epi32(f, b0);
    g = _mm512_add_epi32(g, c0); h = _mm512_add_epi32(h, h0);
    __m512i k0, k1, k2, k3, k4, k5, k6, k7;
    L4X4_512(a, b, c, d, k0, k1, k2, k3);
    L4X4_512(e, f, g, h, k4, k5, k6, k7);
    OUT_BLOCK(0, k0); OUT_BLOCK(1, k1); OUT_BLOCK(2, k2); OUT_BLOCK(3, k3);
    OUT_BLOCK(4, k4); OUT_BLOCK(5, k5); OUT_BLOCK(6, k6); OUT_BLOCK(7, k7);
}

/* 1-2 blocks in ymm; len in 1..128. */
static TGT void row2(uint8_t *otk, uint8_t *dst, const uint8_t *src, size_t len,
                     const uint32_t st[16], uint32_t ctr, int rounds)
{
    ROW_PASS(256, _mm256_broadcastsi128_si256, _mm256_setr_epi32(0, 0, 0, 0, 1, 0, 0, 0));
    __m512i k0, k1;
    L2X4_256(a, b, c, d, k0, k1);
    OUT_BLOCK(0, k0); OUT_BLOCK(1, k1);
}

static TGT void chacha_avx512_stream(uint8_t *dst, const uint8_t *src, size_t len,
                                     const uint32_t st[16], int rounds)
{
    uint32_t ctr = st[12];
    VC_CHACHA_WHOLE_PASSES(pass16, 16)
    if (len > 512) pass16(NULL, dst, src, len, st, ctr, rounds);
    else if (len > 256) row8(NULL, dst, src, len, st, ctr, rounds);
    else if (len > 128) row4(NULL, dst, src, len, st, ctr, rounds);
    else if (len > 0) row2(NULL, dst, src, len, st, ctr, rounds);
}

/* The AEAD form: block st[12] gives the 32-byte one-time key, the data starts at
 * the next block, and the first pass computes both (no separate one-block pass). */
static TGT void chacha_avx512_stream_otk(uint8_t otk[32], uint8_t *dst, const uint8_t *src,
                                         size_t len, const uint32_t st[16], int rounds)
{
    uint32_t ctr = st[12];
    size_t first;
    if (len + 64 > 512) { first = len < 960 ? len : 960; pass16(otk, dst, src, first, st, ctr, rounds); }
    else if (len + 64 > 256) { first = len; row8(otk, dst, src, len, st, ctr, rounds); }
    else if (len + 64 > 128) { first = len; row4(otk, dst, src, len, st, ctr, rounds); }
    else { first = len; row2(otk, dst, src, len, st, ctr, rounds); }
    VC_CHACHA_OTK_REST(chacha_avx512_stream, 16)
}

/* Opening: the key block goes into the pass that sealing would make last (the
 * one with fewer than 16 blocks), so that the passes after the tag check are
 * whole 16-block ones and only that short pass's data goes through the stack
 * scratch: 1472 bytes (key + 23 blocks) open as 8 blocks (key + 448 bytes)
 * before the check and 16 after; 1000 bytes as the key block alone, then 16. */
static size_t chacha_avx512_open_first(size_t len)
{
    size_t blocks = 1 + (len + 63) / 64;           /* the key block and the data */
    size_t short_pass = blocks % 16 ? blocks % 16 : 16;
    size_t first = 64 * (short_pass - 1);
    return first < len ? first : len;
}

const vc_chacha_impl vc_chacha_avx512_impl = {
    .name = "avx512", .stream = chacha_avx512_stream, .available = vc_cpu_has_avx512,
    .stream_otk = chacha_avx512_stream_otk, .otk_span = 960, .open_first = chacha_avx512_open_first,
};
#endif
