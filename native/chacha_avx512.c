/* ChaCha (RFC 8439) stream kernel for x86-64 AVX-512 (F + VL + BW).
 *
 * Widths, chosen per call from the remaining length:
 *   >= 1024 bytes : 16 blocks per pass in zmm, one block per 32-bit lane
 *                   (state words broadcast, counters +0..+15), 16x16 transpose.
 *   513..1023     : the same 16-lane pass, stores stop at the end of the data.
 *   257..512      : 8 blocks in ymm (AVX-512VL rotates), one block per lane.
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

/* ---------------- 16 blocks, one per zmm lane ---------------- */
#define ADD16(a, b) _mm512_add_epi32(a, b)
#define XOR16(a, b) _mm512_xor_si512(a, b)
#define QR16(a, b, c, d)                                                        \
    a = ADD16(a, b); d = _mm512_rol_epi32(XOR16(d, a), 16);                     \
    c = ADD16(c, d); b = _mm512_rol_epi32(XOR16(b, c), 12);                     \
    a = ADD16(a, b); d = _mm512_rol_epi32(XOR16(d, a), 8);                      \
    c = ADD16(c, d); b = _mm512_rol_epi32(XOR16(b, c), 7)

/* 4x4 dword transpose inside every 128-bit lane. */
#define T4X4_512(a, b, c, d)                                                    \
    do {                                                                        \
        __m512i t0_ = _mm512_unpacklo_epi32(a, b), t1_ = _mm512_unpackhi_epi32(a, b); \
        __m512i t2_ = _mm512_unpacklo_epi32(c, d), t3_ = _mm512_unpackhi_epi32(c, d); \
        a = _mm512_unpacklo_epi64(t0_, t2_); b = _mm512_unpackhi_epi64(t0_, t2_); \
        c = _mm512_unpacklo_epi64(t1_, t3_); d = _mm512_unpackhi_epi64(t1_, t3_); \
    } while (0)

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
    const __m512i ctr_off = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i s0 = _mm512_set1_epi32((int)st[0]), s1 = _mm512_set1_epi32((int)st[1]);
    __m512i s2 = _mm512_set1_epi32((int)st[2]), s3 = _mm512_set1_epi32((int)st[3]);
    __m512i s4 = _mm512_set1_epi32((int)st[4]), s5 = _mm512_set1_epi32((int)st[5]);
    __m512i s6 = _mm512_set1_epi32((int)st[6]), s7 = _mm512_set1_epi32((int)st[7]);
    __m512i s8 = _mm512_set1_epi32((int)st[8]), s9 = _mm512_set1_epi32((int)st[9]);
    __m512i s10 = _mm512_set1_epi32((int)st[10]), s11 = _mm512_set1_epi32((int)st[11]);
    __m512i s12 = _mm512_add_epi32(_mm512_set1_epi32((int)ctr), ctr_off);
    __m512i s13 = _mm512_set1_epi32((int)st[13]), s14 = _mm512_set1_epi32((int)st[14]);
    __m512i s15 = _mm512_set1_epi32((int)st[15]);
    __m512i x0 = s0, x1 = s1, x2 = s2, x3 = s3, x4 = s4, x5 = s5, x6 = s6, x7 = s7;
    __m512i x8 = s8, x9 = s9, x10 = s10, x11 = s11, x12 = s12, x13 = s13, x14 = s14, x15 = s15;
    for (int i = 0; i < rounds; i += 2) {
        QR16(x0, x4, x8, x12);
        QR16(x1, x5, x9, x13);
        QR16(x2, x6, x10, x14);
        QR16(x3, x7, x11, x15);
        QR16(x0, x5, x10, x15);
        QR16(x1, x6, x11, x12);
        QR16(x2, x7, x8, x13);
        QR16(x3, x4, x9, x14);
    }
    x0 = ADD16(x0, s0); x1 = ADD16(x1, s1); x2 = ADD16(x2, s2); x3 = ADD16(x3, s3);
    x4 = ADD16(x4, s4); x5 = ADD16(x5, s5); x6 = ADD16(x6, s6); x7 = ADD16(x7, s7);
    x8 = ADD16(x8, s8); x9 = ADD16(x9, s9); x10 = ADD16(x10, s10); x11 = ADD16(x11, s11);
    x12 = ADD16(x12, s12); x13 = ADD16(x13, s13); x14 = ADD16(x14, s14); x15 = ADD16(x15, s15);
    /* After T4X4, lane k of x(4g+m) holds words 4g..4g+3 of block 4k+m. */
    T4X4_512(x0, x1, x2, x3);
    T4X4_512(x4, x5, x6, x7);
    T4X4_512(x8, x9, x10, x11);
    T4X4_512(x12, x13, x14, x15);
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

/* ---------------- 8 blocks, one per ymm lane (AVX-512VL) ---------------- */
#define ADD8(a, b) _mm256_add_epi32(a, b)
#define XOR8(a, b) _mm256_xor_si256(a, b)
#define QR8(a, b, c, d)                                                         \
    a = ADD8(a, b); d = _mm256_rol_epi32(XOR8(d, a), 16);                       \
    c = ADD8(c, d); b = _mm256_rol_epi32(XOR8(b, c), 12);                       \
    a = ADD8(a, b); d = _mm256_rol_epi32(XOR8(d, a), 8);                        \
    c = ADD8(c, d); b = _mm256_rol_epi32(XOR8(b, c), 7)

#define T4X4_256(a, b, c, d)                                                    \
    do {                                                                        \
        __m256i t0_ = _mm256_unpacklo_epi32(a, b), t1_ = _mm256_unpackhi_epi32(a, b); \
        __m256i t2_ = _mm256_unpacklo_epi32(c, d), t3_ = _mm256_unpackhi_epi32(c, d); \
        a = _mm256_unpacklo_epi64(t0_, t2_); b = _mm256_unpackhi_epi64(t0_, t2_); \
        c = _mm256_unpacklo_epi64(t1_, t3_); d = _mm256_unpackhi_epi64(t1_, t3_); \
    } while (0)

/* y0..y3: lane k = row 0..3 of block k (k = 0, 1) -> o0 = block 0, o1 = block 1. */
#define L2X4_256(y0, y1, y2, y3, o0, o1)                                        \
    do {                                                                        \
        __m512i u0_ = _mm512_inserti64x4(_mm512_castsi256_si512(y0), y1, 1);    \
        __m512i u1_ = _mm512_inserti64x4(_mm512_castsi256_si512(y2), y3, 1);    \
        o0 = _mm512_shuffle_i32x4(u0_, u1_, 0x88);                              \
        o1 = _mm512_shuffle_i32x4(u0_, u1_, 0xDD);                              \
    } while (0)

/* len in 1..512. */
static TGT void pass8(uint8_t *otk, uint8_t *dst, const uint8_t *src, size_t len,
                      const uint32_t st[16], uint32_t ctr, int rounds)
{
    const __m256i ctr_off = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i s0 = _mm256_set1_epi32((int)st[0]), s1 = _mm256_set1_epi32((int)st[1]);
    __m256i s2 = _mm256_set1_epi32((int)st[2]), s3 = _mm256_set1_epi32((int)st[3]);
    __m256i s4 = _mm256_set1_epi32((int)st[4]), s5 = _mm256_set1_epi32((int)st[5]);
    __m256i s6 = _mm256_set1_epi32((int)st[6]), s7 = _mm256_set1_epi32((int)st[7]);
    __m256i s8 = _mm256_set1_epi32((int)st[8]), s9 = _mm256_set1_epi32((int)st[9]);
    __m256i s10 = _mm256_set1_epi32((int)st[10]), s11 = _mm256_set1_epi32((int)st[11]);
    __m256i s12 = _mm256_add_epi32(_mm256_set1_epi32((int)ctr), ctr_off);
    __m256i s13 = _mm256_set1_epi32((int)st[13]), s14 = _mm256_set1_epi32((int)st[14]);
    __m256i s15 = _mm256_set1_epi32((int)st[15]);
    __m256i x0 = s0, x1 = s1, x2 = s2, x3 = s3, x4 = s4, x5 = s5, x6 = s6, x7 = s7;
    __m256i x8 = s8, x9 = s9, x10 = s10, x11 = s11, x12 = s12, x13 = s13, x14 = s14, x15 = s15;
    for (int i = 0; i < rounds; i += 2) {
        QR8(x0, x4, x8, x12);
        QR8(x1, x5, x9, x13);
        QR8(x2, x6, x10, x14);
        QR8(x3, x7, x11, x15);
        QR8(x0, x5, x10, x15);
        QR8(x1, x6, x11, x12);
        QR8(x2, x7, x8, x13);
        QR8(x3, x4, x9, x14);
    }
    x0 = ADD8(x0, s0); x1 = ADD8(x1, s1); x2 = ADD8(x2, s2); x3 = ADD8(x3, s3);
    x4 = ADD8(x4, s4); x5 = ADD8(x5, s5); x6 = ADD8(x6, s6); x7 = ADD8(x7, s7);
    x8 = ADD8(x8, s8); x9 = ADD8(x9, s9); x10 = ADD8(x10, s10); x11 = ADD8(x11, s11);
    x12 = ADD8(x12, s12); x13 = ADD8(x13, s13); x14 = ADD8(x14, s14); x15 = ADD8(x15, s15);
    T4X4_256(x0, x1, x2, x3);
    T4X4_256(x4, x5, x6, x7);
    T4X4_256(x8, x9, x10, x11);
    T4X4_256(x12, x13, x14, x15);
    __m512i b0, b1, b2, b3, b4, b5, b6, b7;
    L2X4_256(x0, x4, x8, x12, b0, b4);
    L2X4_256(x1, x5, x9, x13, b1, b5);
    L2X4_256(x2, x6, x10, x14, b2, b6);
    L2X4_256(x3, x7, x11, x15, b3, b7);
    OUT_BLOCK(0, b0); OUT_BLOCK(1, b1); OUT_BLOCK(2, b2); OUT_BLOCK(3, b3);
    OUT_BLOCK(4, b4); OUT_BLOCK(5, b5); OUT_BLOCK(6, b6); OUT_BLOCK(7, b7);
}

/* ---------------- row layout: one block per 128-bit lane ---------------- */
/* a, b, c, d hold rows 0..3 (words 0-3, 4-7, 8-11, 12-15) of each block. */
#define ROWQR(V, a, b, c, d)                                                    \
    a = _mm##V##_add_epi32(a, b); d = _mm##V##_rol_epi32(_mm##V##_xor_si##V(d, a), 16); \
    c = _mm##V##_add_epi32(c, d); b = _mm##V##_rol_epi32(_mm##V##_xor_si##V(b, c), 12); \
    a = _mm##V##_add_epi32(a, b); d = _mm##V##_rol_epi32(_mm##V##_xor_si##V(d, a), 8);  \
    c = _mm##V##_add_epi32(c, d); b = _mm##V##_rol_epi32(_mm##V##_xor_si##V(b, c), 7)
/* Column round, rotate rows so diagonals line up, diagonal round, rotate back. */
#define ROWDR(V, a, b, c, d)                                                    \
    ROWQR(V, a, b, c, d);                                                       \
    b = _mm##V##_shuffle_epi32(b, 0x39); c = _mm##V##_shuffle_epi32(c, 0x4E);   \
    d = _mm##V##_shuffle_epi32(d, 0x93);                                        \
    ROWQR(V, a, b, c, d);                                                       \
    b = _mm##V##_shuffle_epi32(b, 0x93); c = _mm##V##_shuffle_epi32(c, 0x4E);   \
    d = _mm##V##_shuffle_epi32(d, 0x39)

/* 3-4 blocks in zmm; len in 1..256. */
static TGT void row4(uint8_t *otk, uint8_t *dst, const uint8_t *src, size_t len,
                     const uint32_t st[16], uint32_t ctr, int rounds)
{
    __m512i a0 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)st));
    __m512i b0 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(st + 4)));
    __m512i c0 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(st + 8)));
    __m128i drow = _mm_setr_epi32((int)ctr, (int)st[13], (int)st[14], (int)st[15]);
    __m512i d0 = _mm512_add_epi32(_mm512_broadcast_i32x4(drow),
                                  _mm512_setr_epi32(0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0));
    __m512i a = a0, b = b0, c = c0, d = d0;
    for (int i = 0; i < rounds; i += 2) {
        ROWDR(512, a, b, c, d);
    }
    a = _mm512_add_epi32(a, a0); b = _mm512_add_epi32(b, b0);
    c = _mm512_add_epi32(c, c0); d = _mm512_add_epi32(d, d0);
    __m512i k0, k1, k2, k3;
    L4X4_512(a, b, c, d, k0, k1, k2, k3);
    OUT_BLOCK(0, k0); OUT_BLOCK(1, k1); OUT_BLOCK(2, k2); OUT_BLOCK(3, k3);
}

/* 1-2 blocks in ymm; len in 1..128. */
static TGT void row2(uint8_t *otk, uint8_t *dst, const uint8_t *src, size_t len,
                     const uint32_t st[16], uint32_t ctr, int rounds)
{
    __m256i a0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)st));
    __m256i b0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(st + 4)));
    __m256i c0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(st + 8)));
    __m128i drow = _mm_setr_epi32((int)ctr, (int)st[13], (int)st[14], (int)st[15]);
    __m256i d0 = _mm256_add_epi32(_mm256_broadcastsi128_si256(drow),
                                  _mm256_setr_epi32(0, 0, 0, 0, 1, 0, 0, 0));
    __m256i a = a0, b = b0, c = c0, d = d0;
    for (int i = 0; i < rounds; i += 2) {
        ROWDR(256, a, b, c, d);
    }
    a = _mm256_add_epi32(a, a0); b = _mm256_add_epi32(b, b0);
    c = _mm256_add_epi32(c, c0); d = _mm256_add_epi32(d, d0);
    __m512i k0, k1;
    L2X4_256(a, b, c, d, k0, k1);
    OUT_BLOCK(0, k0); OUT_BLOCK(1, k1);
}

static TGT void chacha_avx512_stream(uint8_t *dst, const uint8_t *src, size_t len,
                                     const uint32_t st[16], int rounds)
{
    uint32_t ctr = st[12];
    while (len >= 1024) {
        pass16(NULL, dst, src, 1024, st, ctr, rounds);
        ctr += 16; dst += 1024; src += 1024; len -= 1024;
    }
    if (len > 512) pass16(NULL, dst, src, len, st, ctr, rounds);
    else if (len > 256) pass8(NULL, dst, src, len, st, ctr, rounds);
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
    else if (len + 64 > 256) { first = len; pass8(otk, dst, src, len, st, ctr, rounds); }
    else if (len + 64 > 128) { first = len; row4(otk, dst, src, len, st, ctr, rounds); }
    else { first = len; row2(otk, dst, src, len, st, ctr, rounds); }
    if (len > first) {
        uint32_t rest[16];
        memcpy(rest, st, sizeof rest);
        rest[12] = ctr + 16;
        chacha_avx512_stream(dst + first, src + first, len - first, rest, rounds);
        vc_wipe(rest, sizeof rest);     /* a copy of the state, so of the key */
    }
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
