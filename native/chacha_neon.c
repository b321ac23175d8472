/* ChaCha for arm64 (AdvSIMD is baseline there: no run-time check).
 *
 * "neon":  one call of the internal routine produces up to five blocks (320
 *          bytes): four in NEON registers, one block per lane, and a fifth in
 *          general-purpose registers on the scalar ALU, its rounds written in
 *          between the vector ones so that both units work at once.  Messages
 *          of at most 64 bytes take the ALU block alone; 65..256 bytes take the
 *          four NEON lanes alone.
 * "neon4": the four NEON lanes only, for every length (for comparison, and
 *          the default on in-order Cortex-A53/A55 cores, see
 *          vc_chacha_preferred_name below).
 *
 * Shortening the dependency chain.  A quarter round is a chain of twelve
 * dependent steps; on out-of-order cores the 4-lane loop is bound by its
 * latency, not by throughput.  Where a rotated word is next consumed by an
 * addition (rot12 -> a += b, rot8 -> c += d, rot7 -> next a += b), the addition
 * is done from the unrotated word t:  a + rotl(t, n) = usra(a, t, 32 - n) +
 * shl(t, n), two steps from t instead of three (shl, sri, add); the rotated
 * word itself (sri into the same shl) is still produced, off the critical path,
 * for the following XOR.  The "neon4" variant uses tbl for rotate-8 (one
 * instruction, best on in-order cores).
 *
 * Partial tails are finished here: the last full 64-byte window
 * [len-64, len) is loaded before any store, its keystream is cut out of the
 * last two blocks with tbl/tbx, and it is stored over the tail (the bytes it
 * shares with the block before get the same value twice).  A message shorter
 * than 64 bytes is covered by two overlapping windows of the largest power of
 * two not above its length (32/16/8/4/2/1 bytes, the narrow ones as lane
 * loads), with the keystream for the second window cut out by tbl.  Nothing is
 * read or written outside [src, src+len) and [dst, dst+len).
 */
#include "vc_internal.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__AARCH64EB__)
#error "chacha_neon.c assumes little-endian arm64"
#endif

#ifndef VC_NEON_FUSE  /* which rotates feed the next addition unrotated: 1 rot12, 2 rot8, 4 rot7 */
#define VC_NEON_FUSE 7
#endif
#define NEON_MAX5 320
#define NEON_MAX4 256

#define U8(x)  vreinterpretq_u8_u32(x)
#define U32(x) vreinterpretq_u32_u8(x)
#define ROTL32(v, n) (((v) << (n)) | ((v) >> (32 - (n))))

static const uint8_t rot8_idx[16] = {3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10, 15, 12, 13, 14};
static const uint8_t iota16[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static const uint32_t lane_ctr[4] = {0, 1, 2, 3};

VC_INLINE uint32x4_t rot16v(uint32x4_t x) {
    return vreinterpretq_u32_u16(vrev32q_u16(vreinterpretq_u16_u32(x)));
}

#if defined(VC_MCA_MARKERS)
#define MCA_BEGIN(name) __asm__ volatile("# LLVM-MCA-BEGIN " name ::: "memory")
#define MCA_END() __asm__ volatile("# LLVM-MCA-END" ::: "memory")
#else
#define MCA_BEGIN(name) ((void)0)
#define MCA_END() ((void)0)
#endif

/* ---- scalar quarter round (the ALU block) ---- */
#define SQR(y, a, b, c, d)                                              \
    do {                                                                \
        y[a] += y[b]; y[d] ^= y[a]; y[d] = ROTL32(y[d], 16);            \
        y[c] += y[d]; y[b] ^= y[c]; y[b] = ROTL32(y[b], 12);            \
        y[a] += y[b]; y[d] ^= y[a]; y[d] = ROTL32(y[d], 8);             \
        y[c] += y[d]; y[b] ^= y[c]; y[b] = ROTL32(y[b], 7);             \
    } while (0)

/* ---- vector quarter round, split in its twelve steps so that the four
 * columns (and the ALU block) can be written interleaved.
 * px[b], ps[b]: b's pending rotate-7: b = rotl(px, 7), ps = px << 7. */
#define V_A_ADD_B(a, b)                                                 \
    (x[a] = (VC_NEON_FUSE & 4) ? vaddq_u32(vsraq_n_u32(x[a], px[b], 25), ps[b])   \
                       : vaddq_u32(x[a], vsriq_n_u32(ps[b], px[b], 25)))
#define V_D_XOR_ROT16(a, d) (x[d] = rot16v(veorq_u32(x[d], x[a])))
#define V_C_ADD_D(c, d)  (x[c] = vaddq_u32(x[c], x[d]))
#define V_B_ROT12(a, b, c)                                              \
    do {                                                                \
        uint32x4_t t_ = veorq_u32(vsriq_n_u32(ps[b], px[b], 25), x[c]); \
        uint32x4_t s_ = vshlq_n_u32(t_, 12);                            \
        if (VC_NEON_FUSE & 1) {                                                 \
            x[a] = vaddq_u32(vsraq_n_u32(x[a], t_, 20), s_);            \
            x[b] = vsriq_n_u32(s_, t_, 20);                             \
        } else {                                                        \
            x[b] = vsriq_n_u32(s_, t_, 20);                             \
            x[a] = vaddq_u32(x[a], x[b]);                               \
        }                                                               \
    } while (0)
#define V_D_ROT8_C(a, c, d)                                             \
    do {                                                                \
        uint32x4_t t_ = veorq_u32(x[d], x[a]);                          \
        if (use_tbl) {                                                  \
            x[d] = U32(vqtbl1q_u8(U8(t_), r8));                         \
            x[c] = vaddq_u32(x[c], x[d]);                               \
        } else {                                                        \
            uint32x4_t s_ = vshlq_n_u32(t_, 8);                         \
            if (VC_NEON_FUSE & 2) {                                             \
                x[c] = vaddq_u32(vsraq_n_u32(x[c], t_, 24), s_);        \
                x[d] = vsriq_n_u32(s_, t_, 24);                         \
            } else {                                                    \
                x[d] = vsriq_n_u32(s_, t_, 24);                         \
                x[c] = vaddq_u32(x[c], x[d]);                           \
            }                                                           \
        }                                                               \
    } while (0)
#define V_B_ROT7(b, c)                                                  \
    do {                                                                \
        px[b] = veorq_u32(x[b], x[c]);                                  \
        ps[b] = vshlq_n_u32(px[b], 7);                                  \
    } while (0)

/* One half round: four vector columns (a_i, b_i, c_i, d_i) and the ALU block's
 * four quarter rounds on the same word indices. */
#define HALF_ROUND(A0, B0, C0, D0, A1, B1, C1, D1, A2, B2, C2, D2, A3, B3, C3, D3)  \
    do {                                                                          \
        V_A_ADD_B(A0, B0); V_A_ADD_B(A1, B1); V_A_ADD_B(A2, B2); V_A_ADD_B(A3, B3); \
        if (alu) SQR(y, A0, B0, C0, D0);                                          \
        V_D_XOR_ROT16(A0, D0); V_D_XOR_ROT16(A1, D1);                             \
        V_D_XOR_ROT16(A2, D2); V_D_XOR_ROT16(A3, D3);                             \
        V_C_ADD_D(C0, D0); V_C_ADD_D(C1, D1); V_C_ADD_D(C2, D2); V_C_ADD_D(C3, D3); \
        if (alu) SQR(y, A1, B1, C1, D1);                                          \
        V_B_ROT12(A0, B0, C0); V_B_ROT12(A1, B1, C1);                             \
        V_B_ROT12(A2, B2, C2); V_B_ROT12(A3, B3, C3);                             \
        if (alu) SQR(y, A2, B2, C2, D2);                                          \
        V_D_ROT8_C(A0, C0, D0); V_D_ROT8_C(A1, C1, D1);                           \
        V_D_ROT8_C(A2, C2, D2); V_D_ROT8_C(A3, C3, D3);                           \
        if (alu) SQR(y, A3, B3, C3, D3);                                          \
        V_B_ROT7(B0, C0); V_B_ROT7(B1, C1); V_B_ROT7(B2, C2); V_B_ROT7(B3, C3);   \
    } while (0)

/* 64-bit lane transposes.  Written as trn1/trn2 .2d: compilers otherwise pick
 * zip1/zip2 .2d or an element insert, which some cores (Cortex-A57) run as
 * several micro-ops. */
VC_INLINE uint64x2_t trn1_64(uint64x2_t a, uint64x2_t b) {
    uint64x2_t r;
    __asm__("trn1 %0.2d, %1.2d, %2.2d" : "=w"(r) : "w"(a), "w"(b));
    return r;
}
VC_INLINE uint64x2_t trn2_64(uint64x2_t a, uint64x2_t b) {
    uint64x2_t r;
    __asm__("trn2 %0.2d, %1.2d, %2.2d" : "=w"(r) : "w"(a), "w"(b));
    return r;
}

/* The four NEON blocks' keystream, as 16 byte vectors k[4 * block + group]. */
VC_INLINE void transpose_out(uint8x16_t k[16], const uint32x4_t x[16]) {
    for (int g = 0; g < 4; g++) {
        uint32x4_t t0 = vtrn1q_u32(x[4 * g], x[4 * g + 1]);
        uint32x4_t t1 = vtrn2q_u32(x[4 * g], x[4 * g + 1]);
        uint32x4_t t2 = vtrn1q_u32(x[4 * g + 2], x[4 * g + 3]);
        uint32x4_t t3 = vtrn2q_u32(x[4 * g + 2], x[4 * g + 3]);
        uint64x2_t u0 = vreinterpretq_u64_u32(t0), u1 = vreinterpretq_u64_u32(t1);
        uint64x2_t u2 = vreinterpretq_u64_u32(t2), u3 = vreinterpretq_u64_u32(t3);
        k[0 + g] = vreinterpretq_u8_u64(trn1_64(u0, u2));
        k[4 + g] = vreinterpretq_u8_u64(trn1_64(u1, u3));
        k[8 + g] = vreinterpretq_u8_u64(trn2_64(u0, u2));
        k[12 + g] = vreinterpretq_u8_u64(trn2_64(u1, u3));
    }
}

/* XOR one full 64-byte block. */
VC_INLINE void xor_block(uint8_t *dst, const uint8_t *src, const uint8x16_t *k) {
    uint8x16x4_t m = vld1q_u8_x4(src);
    for (int i = 0; i < 4; i++) m.val[i] = veorq_u8(m.val[i], k[i]);
    vst1q_u8_x4(dst, m);
}

/* The last full window [len-64, len), already loaded into w: its keystream is
 * the 128-byte concatenation p || c (p = the last full block, c = the partial
 * one) shifted by s = len mod 64 bytes. */
VC_INLINE void xor_window(uint8_t *dst_end, const uint8x16_t w[4], const uint8x16_t *p,
                          const uint8x16_t *c, unsigned s) {
    uint8x16x4_t pt = {{p[0], p[1], p[2], p[3]}};
    uint8x16x4_t ct = {{c[0], c[1], c[2], c[3]}};
    uint8x16_t idx = vaddq_u8(vld1q_u8(iota16), vdupq_n_u8((uint8_t)s));
    uint8x16_t sixteen = vdupq_n_u8(16), m64 = vdupq_n_u8(64);
    for (int j = 0; j < 4; j++) {
        uint8x16_t ks = vqtbx4q_u8(vqtbl4q_u8(pt, idx), ct, vsubq_u8(idx, m64));
        vst1q_u8(dst_end - 64 + 16 * j, veorq_u8(w[j], ks));
        idx = vaddq_u8(idx, sixteen);
    }
}

VC_INLINE void load_window(uint8x16_t w[4], const uint8_t *src_end) {
    w[0] = vld1q_u8(src_end - 64); w[1] = vld1q_u8(src_end - 48);
    w[2] = vld1q_u8(src_end - 32); w[3] = vld1q_u8(src_end - 16);
}

/* A whole message of 1..63 bytes against the 64-byte keystream k[0..3]: two
 * overlapping windows of w bytes (w the largest power of two <= len), at 0 and
 * at len - w, both loaded before either is stored. */
static void xor_short(uint8_t *dst, const uint8_t *src, size_t len, const uint8x16_t k[4]) {
    uint8x16_t iota = vld1q_u8(iota16);
    if (len >= 32) {
        uint8x16_t a0 = vld1q_u8(src), a1 = vld1q_u8(src + 16);
        uint8x16_t b0 = vld1q_u8(src + len - 32), b1 = vld1q_u8(src + len - 16);
        uint8x16x4_t kt = {{k[0], k[1], k[2], k[3]}};
        uint8x16_t i0 = vaddq_u8(iota, vdupq_n_u8((uint8_t)(len - 32)));
        uint8x16_t i1 = vaddq_u8(i0, vdupq_n_u8(16));
        uint8x16_t kb0 = vqtbl4q_u8(kt, i0), kb1 = vqtbl4q_u8(kt, i1);
        vst1q_u8(dst, veorq_u8(a0, k[0]));
        vst1q_u8(dst + 16, veorq_u8(a1, k[1]));
        vst1q_u8(dst + len - 32, veorq_u8(b0, kb0));
        vst1q_u8(dst + len - 16, veorq_u8(b1, kb1));
    } else if (len >= 16) {
        uint8x16_t a = vld1q_u8(src), b = vld1q_u8(src + len - 16);
        uint8x16x2_t kt = {{k[0], k[1]}};
        uint8x16_t kb = vqtbl2q_u8(kt, vaddq_u8(iota, vdupq_n_u8((uint8_t)(len - 16))));
        vst1q_u8(dst, veorq_u8(a, k[0]));
        vst1q_u8(dst + len - 16, veorq_u8(b, kb));
    } else {
        /* lanes: window A in the low half, window B in the high half */
        uint8x16_t m = vdupq_n_u8(0), idx;
        size_t w;
        if (len >= 8) {
            w = 8;
            m = vcombine_u8(vld1_u8(src), vld1_u8(src + len - 8));
        } else if (len >= 4) {
            w = 4;
            uint32x4_t v = vdupq_n_u32(0);
            v = vld1q_lane_u32((const uint32_t *)(const void *)src, v, 0);
            v = vld1q_lane_u32((const uint32_t *)(const void *)(src + len - 4), v, 2);
            m = U8(v);
        } else if (len >= 2) {
            w = 2;
            uint16x8_t v = vdupq_n_u16(0);
            v = vld1q_lane_u16((const uint16_t *)(const void *)src, v, 0);
            v = vld1q_lane_u16((const uint16_t *)(const void *)(src + len - 2), v, 4);
            m = vreinterpretq_u8_u16(v);
        } else {
            w = 1;
            m = vld1q_lane_u8(src, m, 0);
            m = vld1q_lane_u8(src, m, 8);
        }
        /* keystream index: bytes 0..7 -> 0..7, bytes 8..15 -> len - w + 0..7 */
        uint8x8_t lo = vld1_u8(iota16);
        idx = vcombine_u8(lo, vadd_u8(lo, vdup_n_u8((uint8_t)(len - w))));
        uint8x16_t o = veorq_u8(m, vqtbl1q_u8(k[0], idx));
        if (w == 8) {
            vst1_u8(dst, vget_low_u8(o));
            vst1_u8(dst + len - 8, vget_high_u8(o));
        } else if (w == 4) {
            vst1q_lane_u32((uint32_t *)(void *)dst, vreinterpretq_u32_u8(o), 0);
            vst1q_lane_u32((uint32_t *)(void *)(dst + len - 4), vreinterpretq_u32_u8(o), 2);
        } else if (w == 2) {
            vst1q_lane_u16((uint16_t *)(void *)dst, vreinterpretq_u16_u8(o), 0);
            vst1q_lane_u16((uint16_t *)(void *)(dst + len - 2), vreinterpretq_u16_u8(o), 4);
        } else {
            vst1q_lane_u8(dst, o, 0);
        }
    }
}

VC_INLINE uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
VC_INLINE void st64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* The ALU block's keystream y (16 words, feed-forward done) as byte vectors. */
VC_INLINE void alu_to_vec(uint8x16_t k[4], const uint32_t y[16]) {
    for (int g = 0; g < 4; g++) {
        uint64_t lo = (uint64_t)y[4 * g] | ((uint64_t)y[4 * g + 1] << 32);
        uint64_t hi = (uint64_t)y[4 * g + 2] | ((uint64_t)y[4 * g + 3] << 32);
        k[g] = vreinterpretq_u8_u64(vcombine_u64(vcreate_u64(lo), vcreate_u64(hi)));
    }
}

VC_INLINE void alu_xor_full(uint8_t *dst, const uint8_t *src, const uint32_t y[16]) {
    for (int i = 0; i < 8; i++) {
        uint64_t k = (uint64_t)y[2 * i] | ((uint64_t)y[2 * i + 1] << 32);
        st64(dst + 8 * i, ld64(src + 8 * i) ^ k);
    }
}

/* The core: len bytes, 1 <= len <= 320 (alu) or 256 (!alu), blocks from
 * counter ctr.  alu and use_tbl are compile-time constants at each call. */
VC_INLINE void chacha_core(uint8_t *dst, const uint8_t *src, size_t len, const uint32_t st[16],
                           uint32_t ctr, int rounds, const int alu, const int use_tbl) {
    uint32x4_t x[16], px[16], ps[16];
    uint32_t y[16];
    uint8x16_t r8 = vld1q_u8(rot8_idx);
    (void)r8;
    uint32x4_t ctrv = vaddq_u32(vdupq_n_u32(ctr), vld1q_u32(lane_ctr));
    {
        uint32x4_t row[4] = {vld1q_u32(st), vld1q_u32(st + 4), vld1q_u32(st + 8), vld1q_u32(st + 12)};
        for (int i = 0; i < 4; i++) {
            x[4 * i + 0] = vdupq_laneq_u32(row[i], 0);
            x[4 * i + 1] = vdupq_laneq_u32(row[i], 1);
            x[4 * i + 2] = vdupq_laneq_u32(row[i], 2);
            x[4 * i + 3] = vdupq_laneq_u32(row[i], 3);
        }
    }
    x[12] = ctrv;
    /* b words start in pending form: px holds b's low 7 bits on top, ps the
     * rest (then usra(a, px, 25) + ps = a + b and sri(ps, px, 25) = b) */
    for (int i = 4; i < 8; i++) {
        px[i] = vshlq_n_u32(x[i], 25);
        ps[i] = vbicq_u32(x[i], vdupq_n_u32(0x7f));
    }
    if (alu) {
        /* a compiler barrier: read the ALU block's words from memory, not out of
         * the vector registers loaded above (lane moves cost more than loads) */
        __asm__ volatile("" ::: "memory");
        for (int i = 0; i < 16; i++) y[i] = st[i];
        y[12] = ctr + 4;
    }
    MCA_BEGIN("dround");
    /* rounds is 8, 12 or 20: two double rounds per iteration */
#if defined(VC_MCA_UNROLL)
    _Pragma("clang loop unroll(full)")
#endif
    for (int r = 0; r < rounds; r += 4) {
        HALF_ROUND(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        HALF_ROUND(0, 5, 10, 15, 1, 6, 11, 12, 2, 7, 8, 13, 3, 4, 9, 14);
        HALF_ROUND(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        HALF_ROUND(0, 5, 10, 15, 1, 6, 11, 12, 2, 7, 8, 13, 3, 4, 9, 14);
    }
    MCA_END();
    MCA_BEGIN("tail");
    for (int i = 4; i < 8; i++) x[i] = vsriq_n_u32(ps[i], px[i], 25);
    /* feed-forward: the counter word before the transpose, the rest after it
     * (one row vector per group, the same for all four blocks) */
    x[12] = vaddq_u32(x[12], ctrv);
    if (alu) {
        for (int i = 0; i < 16; i++) y[i] += st[i];
        y[12] += 4 - st[12] + ctr;
    }
    uint8x16_t k[16];
    transpose_out(k, x);
    {
        uint32x4_t row[4] = {vld1q_u32(st), vld1q_u32(st + 4), vld1q_u32(st + 8),
                             vsetq_lane_u32(0, vld1q_u32(st + 12), 0)};
        for (int i = 0; i < 16; i++) k[i] = U8(vaddq_u32(U32(k[i]), row[i & 3]));
    }
    unsigned nfull = (unsigned)(len / 64), s = (unsigned)(len % 64);
    if (alu) {
        /* 256 < len <= 320: four full NEON blocks, then the ALU block */
        if (s == 0) {
            xor_block(dst, src, k);
            xor_block(dst + 64, src + 64, k + 4);
            xor_block(dst + 128, src + 128, k + 8);
            xor_block(dst + 192, src + 192, k + 12);
            alu_xor_full(dst + 256, src + 256, y);
        } else {
            uint8x16_t w[4], ka[4];
            load_window(w, src + len);
            xor_block(dst, src, k);
            xor_block(dst + 64, src + 64, k + 4);
            xor_block(dst + 128, src + 128, k + 8);
            xor_block(dst + 192, src + 192, k + 12);
            alu_to_vec(ka, y);
            xor_window(dst + len, w, k + 12, ka, s);
        }
    } else if (nfull == 0) {
        xor_short(dst, src, len, k);
    } else {
        uint8x16_t w[4];
        if (s) load_window(w, src + len);
        xor_block(dst, src, k);
        switch (nfull) {
        case 1:
            if (s) xor_window(dst + len, w, k, k + 4, s);
            break;
        case 2:
            xor_block(dst + 64, src + 64, k + 4);
            if (s) xor_window(dst + len, w, k + 4, k + 8, s);
            break;
        case 3:
            xor_block(dst + 64, src + 64, k + 4);
            xor_block(dst + 128, src + 128, k + 8);
            if (s) xor_window(dst + len, w, k + 8, k + 12, s);
            break;
        default:
            xor_block(dst + 64, src + 64, k + 4);
            xor_block(dst + 128, src + 128, k + 8);
            xor_block(dst + 192, src + 192, k + 12);
            break;
        }
    }
    MCA_END();
}

/* The one-block path (len <= 64): the ALU block alone. */
VC_INLINE void chacha_alu1(uint8_t *dst, const uint8_t *src, size_t len, const uint32_t st[16],
                        uint32_t ctr, int rounds) {
    uint32_t y[16];
    for (int i = 0; i < 16; i++) y[i] = st[i];
    y[12] = ctr;
    MCA_BEGIN("alu1");
#if defined(VC_MCA_UNROLL)
    _Pragma("clang loop unroll(full)")
#endif
    for (int r = 0; r < rounds; r += 2) {
        SQR(y, 0, 4, 8, 12); SQR(y, 1, 5, 9, 13); SQR(y, 2, 6, 10, 14); SQR(y, 3, 7, 11, 15);
        SQR(y, 0, 5, 10, 15); SQR(y, 1, 6, 11, 12); SQR(y, 2, 7, 8, 13); SQR(y, 3, 4, 9, 14);
    }
    for (int i = 0; i < 16; i++) y[i] += st[i];
    y[12] += ctr - st[12];
    if (len == 64) {
        alu_xor_full(dst, src, y);
    } else {
        uint8x16_t k[4];
        alu_to_vec(k, y);
        xor_short(dst, src, len, k);
    }
    MCA_END();
}

/* Internal routines, one call each: any 1 <= len <= 320 (resp. 256). */
__attribute__((noinline)) void vc_chacha_neon_call5(uint8_t *dst, const uint8_t *src, size_t len,
                                                    const uint32_t st[16], uint32_t ctr, int rounds) {
    chacha_core(dst, src, len, st, ctr, rounds, 1, 0);
}
__attribute__((noinline)) void vc_chacha_neon_call4(uint8_t *dst, const uint8_t *src, size_t len,
                                                    const uint32_t st[16], uint32_t ctr, int rounds) {
    chacha_core(dst, src, len, st, ctr, rounds, 0, 0);
}
__attribute__((noinline)) void vc_chacha_neon4_call(uint8_t *dst, const uint8_t *src, size_t len,
                                                    const uint32_t st[16], uint32_t ctr, int rounds) {
    chacha_core(dst, src, len, st, ctr, rounds, 0, 1);
}
__attribute__((noinline)) void vc_chacha_neon_call1(uint8_t *dst, const uint8_t *src, size_t len,
                                                    const uint32_t st[16], uint32_t ctr, int rounds) {
    chacha_alu1(dst, src, len, st, ctr, rounds);
}

static void stream_neon(uint8_t *dst, const uint8_t *src, size_t len, const uint32_t st[16],
                        int rounds) {
    uint32_t ctr = st[12];
    while (len >= NEON_MAX5) {
        vc_chacha_neon_call5(dst, src, NEON_MAX5, st, ctr, rounds);
        ctr += 5; src += NEON_MAX5; dst += NEON_MAX5; len -= NEON_MAX5;
    }
    if (len > NEON_MAX4) vc_chacha_neon_call5(dst, src, len, st, ctr, rounds);
    else if (len > 64) vc_chacha_neon_call4(dst, src, len, st, ctr, rounds);
    else if (len) vc_chacha_neon_call1(dst, src, len, st, ctr, rounds);
}

static void stream_neon4(uint8_t *dst, const uint8_t *src, size_t len, const uint32_t st[16],
                         int rounds) {
    uint32_t ctr = st[12];
    while (len >= NEON_MAX4) {
        vc_chacha_neon4_call(dst, src, NEON_MAX4, st, ctr, rounds);
        ctr += 4; src += NEON_MAX4; dst += NEON_MAX4; len -= NEON_MAX4;
    }
    if (len) vc_chacha_neon4_call(dst, src, len, st, ctr, rounds);
}

/* HChaCha: one block, rows in four vectors, diagonals by lane rotation. */
static void hchacha_neon(uint32_t out[8], const uint32_t st[16], int rounds) {
    uint32x4_t a = vld1q_u32(st), b = vld1q_u32(st + 4), c = vld1q_u32(st + 8), d = vld1q_u32(st + 12);
    uint8x16_t r8 = vld1q_u8(rot8_idx);
#define HQR()                                                                   \
    a = vaddq_u32(a, b); d = rot16v(veorq_u32(d, a));                           \
    c = vaddq_u32(c, d); b = veorq_u32(b, c); b = vsriq_n_u32(vshlq_n_u32(b, 12), b, 20); \
    a = vaddq_u32(a, b); d = U32(vqtbl1q_u8(U8(veorq_u32(d, a)), r8));         \
    c = vaddq_u32(c, d); b = veorq_u32(b, c); b = vsriq_n_u32(vshlq_n_u32(b, 7), b, 25)
    for (int r = 0; r < rounds; r += 2) {
        HQR();
        b = vextq_u32(b, b, 1); c = vextq_u32(c, c, 2); d = vextq_u32(d, d, 3);
        HQR();
        b = vextq_u32(b, b, 3); c = vextq_u32(c, c, 2); d = vextq_u32(d, d, 1);
    }
#undef HQR
    vst1q_u32(out, a);
    vst1q_u32(out + 4, d);
}

const vc_chacha_impl vc_chacha_neon_impl = {.name = "neon", .stream = stream_neon, .hchacha = hchacha_neon};
const vc_chacha_impl vc_chacha_neon4_impl = {.name = "neon4", .stream = stream_neon4, .hchacha = hchacha_neon};

/* ---- default choice by core type ----
 * In-order cores (Cortex-A53 0xd03, Cortex-A55 0xd05, both implementer 0x41)
 * run the pure 4-way variant faster; everything else gets "neon". */
static int part_is_inorder(unsigned long implementer, unsigned long part) {
    return implementer == 0x41 && (part == 0xd03 || part == 0xd05);
}

/* Decide from /proc/cpuinfo text: "neon4" if any core is A53/A55 class (a
 * big.LITTLE system runs the thread on either), else "neon"; NULL when the text
 * names no CPU part. */
const char *vc_chacha_choice_from_cpuinfo(const char *text) {
    unsigned long impl = 0x41;
    int seen = 0, inorder = 0;
    const char *p = text;
    while (p && *p) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        const char *colon = memchr(p, ':', n);
        if (colon) {
            size_t keylen = (size_t)(colon - p);
            while (keylen && (p[keylen - 1] == ' ' || p[keylen - 1] == '\t')) keylen--;
            const char *val = colon + 1;
            while (*val == ' ' || *val == '\t') val++;
            char *end;
            if (keylen == 15 && memcmp(p, "CPU implementer", 15) == 0) {
                impl = strtoul(val, &end, 0);
            } else if (keylen == 8 && memcmp(p, "CPU part", 8) == 0) {
                unsigned long part = strtoul(val, &end, 0);
                if (end != val) {
                    seen = 1;
                    if (part_is_inorder(impl, part)) inorder = 1;
                }
            }
        }
        p = eol ? eol + 1 : NULL;
    }
    if (!seen) return NULL;
    return inorder ? "neon4" : "neon";
}

/* Decide from a MIDR_EL1 value (as in /sys/.../regs/identification/midr_el1). */
const char *vc_chacha_choice_from_midr(uint64_t midr) {
    unsigned long impl = (unsigned long)((midr >> 24) & 0xff);
    unsigned long part = (unsigned long)((midr >> 4) & 0xfff);
    return part_is_inorder(impl, part) ? "neon4" : "neon";
}

const char *vc_chacha_preferred_name(void) {
    static const char *choice;
    static int done;
    if (done) return choice;
    const char *env = getenv("VPNCRYPT_NEON_CPUINFO");  /* tests: a cpuinfo file to read instead */
    FILE *f = fopen(env && *env ? env : "/proc/cpuinfo", "r");
    if (f) {
        char *buf = malloc(65536);
        if (buf) {
            size_t n = fread(buf, 1, 65535, f);
            buf[n] = 0;
            choice = vc_chacha_choice_from_cpuinfo(buf);
            free(buf);
        }
        fclose(f);
    }
    if (!choice) {
        f = fopen("/sys/devices/system/cpu/cpu0/regs/identification/midr_el1", "r");
        if (f) {
            char line[64];
            if (fgets(line, sizeof line, f)) choice = vc_chacha_choice_from_midr(strtoull(line, NULL, 16));
            fclose(f);
        }
    }
    if (!choice) choice = "neon";
    done = 1;
    return choice;
}
#endif /* __aarch64__ */
