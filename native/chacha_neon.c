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
 *          vc_chacha_preferred_name in cpu.c).
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

#if defined(__AARCH64EB__)
#error "chacha_neon.c assumes little-endian arm64"
#endif

#ifndef VC_NEON_FUSE  /* which rotates feed the next addition unrotated: 1 rot12, 2 rot8, 4 rot7 */
#define VC_NEON_FUSE 7
#endif
#ifndef VC_NEON5_TBL  /* 1: the 4+1 routine rotates by 8 with tbl */
#define VC_NEON5_TBL 0
#endif
#define NEON_MAX5 320
#define NEON_MAX4 256

#define U8(x)  vreinterpretq_u8_u32(x)
#define U32(x) vreinterpretq_u32_u8(x)
#define ROTL32(v, n) (((v) << (n)) | ((v) >> (32 - (n))))

static const uint8_t rot8_idx[16] = {3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10, 15, 12, 13, 14};
static const uint8_t iota16[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static const uint32_t lane_ctr[4] = {0, 1, 2, 3};

VC_INLINE uint32x4_t rot16v(uint32x4_t x)
{
    return vreinterpretq_u32_u16(vrev32q_u16(vreinterpretq_u16_u32(x)));
}

#if defined(VC_MCA_MARKERS)
#define MCA_BEGIN(name) __asm__ volatile("# LLVM-MCA-BEGIN " name ::: "memory")
#define MCA_END() __asm__ volatile("# LLVM-MCA-END" ::: "memory")
#else
#define MCA_BEGIN(name) ((void)0)
#define MCA_END() ((void)0)
#endif

/* Every state word, vector and scalar, is a named variable (x0..x15, y0..y15),
 * never an array element: gcc keeps arrays whose address it sees (the SLP
 * vectorizer and the inlined helpers take it) on the stack, and then loads and
 * stores them in the double-round loop. */
#if defined(VC_MCA_UNROLL)
#if defined(__clang__)
#define MCA_UNROLL _Pragma("clang loop unroll(full)")
#else
#define MCA_UNROLL _Pragma("GCC unroll 16")
#endif
#else
#define MCA_UNROLL
#endif

/* ---- scalar quarter round (the ALU block), in four steps of three ---- */
#define S1(a, b, d)  (y##a += y##b, y##d ^= y##a, y##d = ROTL32(y##d, 16))
#define S2(c, d, b)  (y##c += y##d, y##b ^= y##c, y##b = ROTL32(y##b, 12))
#define S3(a, b, d)  (y##a += y##b, y##d ^= y##a, y##d = ROTL32(y##d, 8))
#define S4(c, d, b)  (y##c += y##d, y##b ^= y##c, y##b = ROTL32(y##b, 7))
#define SQR(a, b, c, d) (S1(a, b, d), S2(c, d, b), S3(a, b, d), S4(c, d, b))

/* ---- vector quarter round, split in its twelve steps so that the four
 * columns (and the ALU block) can be written interleaved.
 * px##b, ps##b: b's pending rotate-7: b = rotl(px, 7), ps = px << 7. */
#define V_A_ADD_B(a, b)                                                           \
    (x##a = (VC_NEON_FUSE & 4) ? vaddq_u32(vsraq_n_u32(x##a, px##b, 25), ps##b)     \
                               : vaddq_u32(x##a, vsriq_n_u32(ps##b, px##b, 25)))
#define V_D_XOR_ROT16(a, d) (x##d = rot16v(veorq_u32(x##d, x##a)))
#define V_C_ADD_D(c, d)  (x##c = vaddq_u32(x##c, x##d))
/* rot = rotl(t, n), then sum += rot.  fuse: sum takes t's two halves itself
 * (a shift-right-accumulate and an add), so it need not wait for rot; the
 * same value either way. */
#define V_ROTL_ADD(rot, sum, t, n, fuse)                                          \
    do {                                                                          \
        uint32x4_t s_ = vshlq_n_u32(t, n);                                        \
        if (fuse) {                                                               \
            sum = vaddq_u32(vsraq_n_u32(sum, t, 32 - (n)), s_);                   \
            rot = vsriq_n_u32(s_, t, 32 - (n));                                   \
        } else {                                                                  \
            rot = vsriq_n_u32(s_, t, 32 - (n));                                   \
            sum = vaddq_u32(sum, rot);                                            \
        }                                                                         \
    } while (0)
#define V_B_ROT12(a, b, c)                                                        \
    do {                                                                          \
        uint32x4_t t_ = veorq_u32(vsriq_n_u32(ps##b, px##b, 25), x##c);           \
        V_ROTL_ADD(x##b, x##a, t_, 12, VC_NEON_FUSE & 1);                         \
    } while (0)
#define V_D_ROT8_C(a, c, d)                                                       \
    do {                                                                          \
        uint32x4_t t_ = veorq_u32(x##d, x##a);                                    \
        if (use_tbl) {                                                            \
            x##d = U32(vqtbl1q_u8(U8(t_), r8));                                   \
            x##c = vaddq_u32(x##c, x##d);                                         \
        } else {                                                                  \
            V_ROTL_ADD(x##d, x##c, t_, 8, VC_NEON_FUSE & 2);                      \
        }                                                                         \
    } while (0)
#define V_B_ROT7(b, c)                                                            \
    do {                                                                          \
        px##b = veorq_u32(x##b, x##c);                                            \
        ps##b = vshlq_n_u32(px##b, 7);                                            \
    } while (0)

/* One half round: four vector columns (a_i, b_i, c_i, d_i) and the ALU block's
 * four quarter rounds on the same word indices.  The ALU block's 48 steps are
 * spread in quarter-round steps among the vector ones, so that each decode
 * group mixes both units. */
#define HALF_ROUND(A0, B0, C0, D0, A1, B1, C1, D1, A2, B2, C2, D2, A3, B3, C3, D3)  \
    do {                                                                          \
        V_A_ADD_B(A0, B0); V_A_ADD_B(A1, B1); V_A_ADD_B(A2, B2); V_A_ADD_B(A3, B3); \
        if (alu) { S1(A0, B0, D0); S1(A1, B1, D1); }                              \
        V_D_XOR_ROT16(A0, D0); V_D_XOR_ROT16(A1, D1);                             \
        V_D_XOR_ROT16(A2, D2); V_D_XOR_ROT16(A3, D3);                             \
        if (alu) { S1(A2, B2, D2); S1(A3, B3, D3); }                              \
        V_C_ADD_D(C0, D0); V_C_ADD_D(C1, D1); V_C_ADD_D(C2, D2); V_C_ADD_D(C3, D3); \
        if (alu) { S2(C0, D0, B0); S2(C1, D1, B1); }                              \
        V_B_ROT12(A0, B0, C0); V_B_ROT12(A1, B1, C1);                             \
        if (alu) { S2(C2, D2, B2); S2(C3, D3, B3); }                              \
        V_B_ROT12(A2, B2, C2); V_B_ROT12(A3, B3, C3);                             \
        if (alu) { S3(A0, B0, D0); S3(A1, B1, D1); }                              \
        V_D_ROT8_C(A0, C0, D0); V_D_ROT8_C(A1, C1, D1);                           \
        if (alu) { S3(A2, B2, D2); S3(A3, B3, D3); }                              \
        V_D_ROT8_C(A2, C2, D2); V_D_ROT8_C(A3, C3, D3);                           \
        if (alu) { S4(C0, D0, B0); S4(C1, D1, B1); }                              \
        V_B_ROT7(B0, C0); V_B_ROT7(B1, C1);                                       \
        if (alu) { S4(C2, D2, B2); S4(C3, D3, B3); }                              \
        V_B_ROT7(B2, C2); V_B_ROT7(B3, C3);                                       \
    } while (0)

#define DOUBLE_ROUND()                                                            \
    do {                                                                          \
        HALF_ROUND(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);         \
        HALF_ROUND(0, 5, 10, 15, 1, 6, 11, 12, 2, 7, 8, 13, 3, 4, 9, 14);         \
    } while (0)

/* 64-bit lane transposes.  Written as trn1/trn2 .2d: compilers otherwise pick
 * zip1/zip2 .2d or an element insert, which some cores (Cortex-A57) run as
 * several micro-ops. */
VC_INLINE uint64x2_t trn1_64(uint64x2_t a, uint64x2_t b)
{
    uint64x2_t r;
    __asm__("trn1 %0.2d, %1.2d, %2.2d" : "=w"(r) : "w"(a), "w"(b));
    return r;
}
VC_INLINE uint64x2_t trn2_64(uint64x2_t a, uint64x2_t b)
{
    uint64x2_t r;
    __asm__("trn2 %0.2d, %1.2d, %2.2d" : "=w"(r) : "w"(a), "w"(b));
    return r;
}

/* A block's keystream: four 16-byte vectors.  A struct of four named vectors,
 * not uint8x16x4_t: gcc builds its register tuples through the stack. */
typedef struct { uint8x16_t val[4]; } ks_t;
VC_INLINE uint8x16x4_t ks_tuple(ks_t k)
{
    uint8x16x4_t t = {{k.val[0], k.val[1], k.val[2], k.val[3]}};
    return t;
}

/* Group g (words 4g..4g+3) of the four NEON blocks, from the word vectors a, b,
 * c, d (one block per lane), plus the feed-forward row. */
#define TRANSPOSE_GROUP(g, a, b, c, d, row)                                         \
    do {                                                                            \
        uint64x2_t u0_ = vreinterpretq_u64_u32(vtrn1q_u32(a, b));                   \
        uint64x2_t u1_ = vreinterpretq_u64_u32(vtrn2q_u32(a, b));                   \
        uint64x2_t u2_ = vreinterpretq_u64_u32(vtrn1q_u32(c, d));                   \
        uint64x2_t u3_ = vreinterpretq_u64_u32(vtrn2q_u32(c, d));                   \
        kb0.val[g] = U8(vaddq_u32(vreinterpretq_u32_u64(trn1_64(u0_, u2_)), row));  \
        kb1.val[g] = U8(vaddq_u32(vreinterpretq_u32_u64(trn1_64(u1_, u3_)), row));  \
        kb2.val[g] = U8(vaddq_u32(vreinterpretq_u32_u64(trn2_64(u0_, u2_)), row));  \
        kb3.val[g] = U8(vaddq_u32(vreinterpretq_u32_u64(trn2_64(u1_, u3_)), row));  \
    } while (0)

/* XOR one full 64-byte block.  Single-register loads and stores (the compiler
 * pairs them): gcc moves ld1/st1 register tuples through the stack. */
VC_INLINE void xor_block(uint8_t *dst, const uint8_t *src, ks_t k)
{
    uint8x16_t m0 = vld1q_u8(src), m1 = vld1q_u8(src + 16);
    uint8x16_t m2 = vld1q_u8(src + 32), m3 = vld1q_u8(src + 48);
    vst1q_u8(dst, veorq_u8(m0, k.val[0]));
    vst1q_u8(dst + 16, veorq_u8(m1, k.val[1]));
    vst1q_u8(dst + 32, veorq_u8(m2, k.val[2]));
    vst1q_u8(dst + 48, veorq_u8(m3, k.val[3]));
}

/* The last full window [len-64, len), already loaded into w: its keystream is
 * the 128-byte concatenation p || c (p = the last full block, c = the partial
 * one) shifted by s = len mod 64 bytes. */
VC_INLINE void xor_window(uint8_t *dst_end, ks_t w, ks_t p_, ks_t c_, unsigned s)
{
    uint8x16x4_t p = ks_tuple(p_), c = ks_tuple(c_);
    uint8x16_t idx = vaddq_u8(vld1q_u8(iota16), vdupq_n_u8((uint8_t)s));
    uint8x16_t sixteen = vdupq_n_u8(16), m64 = vdupq_n_u8(64);
    for (int j = 0; j < 4; j++) {
        uint8x16_t ks = vqtbx4q_u8(vqtbl4q_u8(p, idx), c, vsubq_u8(idx, m64));
        vst1q_u8(dst_end - 64 + 16 * j, veorq_u8(w.val[j], ks));
        idx = vaddq_u8(idx, sixteen);
    }
}

VC_INLINE ks_t load_window(const uint8_t *src_end)
{
    ks_t w;
    w.val[0] = vld1q_u8(src_end - 64); w.val[1] = vld1q_u8(src_end - 48);
    w.val[2] = vld1q_u8(src_end - 32); w.val[3] = vld1q_u8(src_end - 16);
    return w;
}

/* A whole message of 1..63 bytes against the 64-byte keystream k: two
 * overlapping windows of w bytes (w the largest power of two <= len), at 0 and
 * at len - w, both loaded before either is stored. */
static void xor_short(uint8_t *dst, const uint8_t *src, size_t len, ks_t k)
{
    uint8x16x4_t kt4 = ks_tuple(k);
    uint8x16_t iota = vld1q_u8(iota16);
    if (len >= 32) {
        uint8x16_t a0 = vld1q_u8(src), a1 = vld1q_u8(src + 16);
        uint8x16_t b0 = vld1q_u8(src + len - 32), b1 = vld1q_u8(src + len - 16);
        uint8x16_t i0 = vaddq_u8(iota, vdupq_n_u8((uint8_t)(len - 32)));
        uint8x16_t i1 = vaddq_u8(i0, vdupq_n_u8(16));
        uint8x16_t kb0 = vqtbl4q_u8(kt4, i0), kb1 = vqtbl4q_u8(kt4, i1);
        vst1q_u8(dst, veorq_u8(a0, k.val[0]));
        vst1q_u8(dst + 16, veorq_u8(a1, k.val[1]));
        vst1q_u8(dst + len - 32, veorq_u8(b0, kb0));
        vst1q_u8(dst + len - 16, veorq_u8(b1, kb1));
    } else if (len >= 16) {
        uint8x16_t a = vld1q_u8(src), b = vld1q_u8(src + len - 16);
        uint8x16x2_t kt = {{k.val[0], k.val[1]}};
        uint8x16_t kb = vqtbl2q_u8(kt, vaddq_u8(iota, vdupq_n_u8((uint8_t)(len - 16))));
        vst1q_u8(dst, veorq_u8(a, k.val[0]));
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
        uint8x16_t o = veorq_u8(m, vqtbl1q_u8(k.val[0], idx));
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

/* 1 <= len <= 256 bytes against the keystream blocks k0..k3 (in order). */
VC_INLINE void xor_upto4(uint8_t *dst, const uint8_t *src, size_t len,
                         ks_t k0, ks_t k1, ks_t k2, ks_t k3)
{
    unsigned nfull = (unsigned)(len / 64), s = (unsigned)(len % 64);
    if (nfull == 0) {
        xor_short(dst, src, len, k0);
        return;
    }
    ks_t w = k0;
    if (s) w = load_window(src + len);
    xor_block(dst, src, k0);
    switch (nfull) {
    case 1:
        if (s) xor_window(dst + len, w, k0, k1, s);
        break;
    case 2:
        xor_block(dst + 64, src + 64, k1);
        if (s) xor_window(dst + len, w, k1, k2, s);
        break;
    case 3:
        xor_block(dst + 64, src + 64, k1);
        xor_block(dst + 128, src + 128, k2);
        if (s) xor_window(dst + len, w, k2, k3, s);
        break;
    default:
        xor_block(dst + 64, src + 64, k1);
        xor_block(dst + 128, src + 128, k2);
        xor_block(dst + 192, src + 192, k3);
        break;
    }
}

VC_INLINE uint64_t ld64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

VC_INLINE void st64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}
#define W64(lo, hi) ((uint64_t)(lo) | ((uint64_t)(hi) << 32))

/* The ALU block's keystream (feed-forward done) as byte vectors. */
#define ALU_TO_VEC(k)                                                                 \
    do {                                                                              \
        k.val[0] = vreinterpretq_u8_u64(vcombine_u64(vcreate_u64(W64(y0, y1)), vcreate_u64(W64(y2, y3))));     \
        k.val[1] = vreinterpretq_u8_u64(vcombine_u64(vcreate_u64(W64(y4, y5)), vcreate_u64(W64(y6, y7))));     \
        k.val[2] = vreinterpretq_u8_u64(vcombine_u64(vcreate_u64(W64(y8, y9)), vcreate_u64(W64(y10, y11))));   \
        k.val[3] = vreinterpretq_u8_u64(vcombine_u64(vcreate_u64(W64(y12, y13)), vcreate_u64(W64(y14, y15)))); \
    } while (0)
#define ALU_XOR_FULL(d, s)                                                            \
    do {                                                                              \
        st64((d) + 0, ld64((s) + 0) ^ W64(y0, y1));                                   \
        st64((d) + 8, ld64((s) + 8) ^ W64(y2, y3));                                   \
        st64((d) + 16, ld64((s) + 16) ^ W64(y4, y5));                                 \
        st64((d) + 24, ld64((s) + 24) ^ W64(y6, y7));                                 \
        st64((d) + 32, ld64((s) + 32) ^ W64(y8, y9));                                 \
        st64((d) + 40, ld64((s) + 40) ^ W64(y10, y11));                               \
        st64((d) + 48, ld64((s) + 48) ^ W64(y12, y13));                               \
        st64((d) + 56, ld64((s) + 56) ^ W64(y14, y15));                               \
    } while (0)
#define ALU_OTK(o)                                                                    \
    do {                                                                              \
        st64((o) + 0, W64(y0, y1)); st64((o) + 8, W64(y2, y3));                       \
        st64((o) + 16, W64(y4, y5)); st64((o) + 24, W64(y6, y7));                     \
    } while (0)
#define ALU_LOAD(ctr_)                                                                \
    uint32_t y0 = st[0], y1 = st[1], y2 = st[2], y3 = st[3], y4 = st[4], y5 = st[5],  \
             y6 = st[6], y7 = st[7], y8 = st[8], y9 = st[9], y10 = st[10],            \
             y11 = st[11], y12 = (ctr_), y13 = st[13], y14 = st[14], y15 = st[15]
#define ALU_FEED(ctr_)                                                                \
    do {                                                                              \
        y0 += st[0]; y1 += st[1]; y2 += st[2]; y3 += st[3]; y4 += st[4]; y5 += st[5]; \
        y6 += st[6]; y7 += st[7]; y8 += st[8]; y9 += st[9]; y10 += st[10];            \
        y11 += st[11]; y12 += (ctr_); y13 += st[13]; y14 += st[14]; y15 += st[15];    \
    } while (0)

/* The core: blocks from counter ctr, 20, 12 or 8 rounds.  alu, use_tbl and
 * has_otk are compile-time constants at each call.
 *  - alu, no otk:  256 < len <= 320: NEON lanes ctr..ctr+3, the ALU block ctr+4.
 *  - alu, otk:     0 <= len <= 256: the ALU block is ctr (the one-time key, its
 *                  first 32 bytes to otk), the NEON lanes ctr+1..ctr+4 the data.
 *  - !alu, no otk: 1 <= len <= 256: NEON lanes ctr..ctr+3.
 *  - !alu, otk:    0 <= len <= 192: lane 0 (ctr) the key, lanes 1..3 the data. */
VC_INLINE void chacha_core(uint8_t *dst, const uint8_t *src, size_t len, const uint32_t st[16],
                           uint32_t ctr, int rounds, const int alu, const int use_tbl,
                           const int has_otk, uint8_t *otk)
{
    const uint32_t vctr = ctr + (alu && has_otk ? 1 : 0);
    const uint32_t yctr = alu && !has_otk ? ctr + 4 : ctr;
    uint8x16_t r8 = vld1q_u8(rot8_idx);
    (void)r8;
    uint32x4_t ctrv = vaddq_u32(vdupq_n_u32(vctr), vld1q_u32(lane_ctr));
    uint32x4_t row0 = vld1q_u32(st), row1 = vld1q_u32(st + 4);
    uint32x4_t row2 = vld1q_u32(st + 8), row3 = vld1q_u32(st + 12);
    uint32x4_t x0 = vdupq_laneq_u32(row0, 0), x1 = vdupq_laneq_u32(row0, 1);
    uint32x4_t x2 = vdupq_laneq_u32(row0, 2), x3 = vdupq_laneq_u32(row0, 3);
    uint32x4_t x4, x5, x6, x7;
    uint32x4_t x8 = vdupq_laneq_u32(row2, 0), x9 = vdupq_laneq_u32(row2, 1);
    uint32x4_t x10 = vdupq_laneq_u32(row2, 2), x11 = vdupq_laneq_u32(row2, 3);
    uint32x4_t x12 = ctrv, x13 = vdupq_laneq_u32(row3, 1);
    uint32x4_t x14 = vdupq_laneq_u32(row3, 2), x15 = vdupq_laneq_u32(row3, 3);
    /* b words start in pending form: px holds b's low 7 bits on top, ps the
     * rest (then usra(a, px, 25) + ps = a + b and sri(ps, px, 25) = b) */
    uint32x4_t m7f = vdupq_n_u32(0x7f);
    uint32x4_t px4 = vshlq_n_u32(vdupq_laneq_u32(row1, 0), 25), ps4 = vbicq_u32(vdupq_laneq_u32(row1, 0), m7f);
    uint32x4_t px5 = vshlq_n_u32(vdupq_laneq_u32(row1, 1), 25), ps5 = vbicq_u32(vdupq_laneq_u32(row1, 1), m7f);
    uint32x4_t px6 = vshlq_n_u32(vdupq_laneq_u32(row1, 2), 25), ps6 = vbicq_u32(vdupq_laneq_u32(row1, 2), m7f);
    uint32x4_t px7 = vshlq_n_u32(vdupq_laneq_u32(row1, 3), 25), ps7 = vbicq_u32(vdupq_laneq_u32(row1, 3), m7f);
    /* a compiler barrier: read the ALU block's words from memory, not out of
     * the vector registers loaded above (lane moves cost more than loads) */
    if (alu) __asm__ volatile("" ::: "memory");
    ALU_LOAD(yctr);
    MCA_BEGIN("dround");
    /* rounds is 8, 12 or 20: two double rounds per iteration */
    MCA_UNROLL
    for (int r = 0; r < rounds; r += 4) {
        DOUBLE_ROUND();
        DOUBLE_ROUND();
    }
    MCA_END();
    MCA_BEGIN("tail");
    x4 = vsriq_n_u32(ps4, px4, 25); x5 = vsriq_n_u32(ps5, px5, 25);
    x6 = vsriq_n_u32(ps6, px6, 25); x7 = vsriq_n_u32(ps7, px7, 25);
    /* feed-forward: the counter word before the transpose, the rest after it
     * (one row vector per group, the same for all four blocks) */
    x12 = vaddq_u32(x12, ctrv);
    ks_t kb0, kb1, kb2, kb3, ka;
    TRANSPOSE_GROUP(0, x0, x1, x2, x3, row0);
    TRANSPOSE_GROUP(1, x4, x5, x6, x7, row1);
    TRANSPOSE_GROUP(2, x8, x9, x10, x11, row2);
    TRANSPOSE_GROUP(3, x12, x13, x14, x15, vsetq_lane_u32(0, row3, 0));
    if (alu) ALU_FEED(yctr);
    if (alu && !has_otk) {
        /* 256 < len <= 320: four full NEON blocks, then the ALU block */
        unsigned s = (unsigned)(len % 64);
        if (len == NEON_MAX5) {
            xor_block(dst, src, kb0);
            xor_block(dst + 64, src + 64, kb1);
            xor_block(dst + 128, src + 128, kb2);
            xor_block(dst + 192, src + 192, kb3);
            ALU_XOR_FULL(dst + 256, src + 256);
        } else {
            ks_t w = load_window(src + len);
            xor_block(dst, src, kb0);
            xor_block(dst + 64, src + 64, kb1);
            xor_block(dst + 128, src + 128, kb2);
            xor_block(dst + 192, src + 192, kb3);
            ALU_TO_VEC(ka);
            xor_window(dst + len, w, kb3, ka, s);
        }
    } else if (alu) {
        ALU_OTK(otk);
        if (len) xor_upto4(dst, src, len, kb0, kb1, kb2, kb3);
    } else if (has_otk) {
        vst1q_u8(otk, kb0.val[0]);
        vst1q_u8(otk + 16, kb0.val[1]);
        if (len) xor_upto4(dst, src, len, kb1, kb2, kb3, kb3);
    } else {
        xor_upto4(dst, src, len, kb0, kb1, kb2, kb3);
    }
    (void)ka;
    MCA_END();
}

/* The one-block path (len <= 64): the ALU block alone. */
VC_INLINE void chacha_alu1(uint8_t *dst, const uint8_t *src, size_t len, const uint32_t st[16],
                           uint32_t ctr, int rounds)
{
    ALU_LOAD(ctr);
    MCA_BEGIN("alu1");
    MCA_UNROLL
    for (int r = 0; r < rounds; r += 2) {
        SQR(0, 4, 8, 12); SQR(1, 5, 9, 13); SQR(2, 6, 10, 14); SQR(3, 7, 11, 15);
        SQR(0, 5, 10, 15); SQR(1, 6, 11, 12); SQR(2, 7, 8, 13); SQR(3, 4, 9, 14);
    }
    ALU_FEED(ctr);
    if (len == 64) {
        ALU_XOR_FULL(dst, src);
    } else {
        ks_t k;
        ALU_TO_VEC(k);
        xor_short(dst, src, len, k);
    }
    MCA_END();
}

/* The 4+1 routines keep gcc's pre-allocation schedule and source order (the
 * ALU steps spread among the vector ones): gcc's post-allocation pass, with
 * its generic tuning, bunches the scalar steps, and the decode-bound
 * (3-wide) Cortex-A57 loses 2 cycles per double round (llvm-mca, cortex-a57:
 * 320-byte call 2.98 -> 2.95 c/b; the A53 model +1%, and A53-class cores run
 * "neon4").  Only scheduling changes. */
#if defined(__GNUC__) && !defined(__clang__)
#define VC_SCHED5 __attribute__((noinline, optimize("no-schedule-insns2")))
#else
#define VC_SCHED5 __attribute__((noinline))
#endif

/* Internal routines, one call each: any 1 <= len <= 320 (resp. 256). */
VC_SCHED5 void vc_chacha_neon_call5(uint8_t *dst, const uint8_t *src, size_t len,
                                                    const uint32_t st[16], uint32_t ctr, int rounds)
{
    chacha_core(dst, src, len, st, ctr, rounds, 1, VC_NEON5_TBL, 0, NULL);
}
__attribute__((noinline)) void vc_chacha_neon_call4(uint8_t *dst, const uint8_t *src, size_t len,
                                                    const uint32_t st[16], uint32_t ctr, int rounds)
{
    chacha_core(dst, src, len, st, ctr, rounds, 0, 0, 0, NULL);
}
__attribute__((noinline)) void vc_chacha_neon4_call(uint8_t *dst, const uint8_t *src, size_t len,
                                                    const uint32_t st[16], uint32_t ctr, int rounds)
{
    chacha_core(dst, src, len, st, ctr, rounds, 0, 1, 0, NULL);
}
__attribute__((noinline)) void vc_chacha_neon_call1(uint8_t *dst, const uint8_t *src, size_t len,
                                                    const uint32_t st[16], uint32_t ctr, int rounds)
{
    chacha_alu1(dst, src, len, st, ctr, rounds);
}
/* The sealing forms' first call: the key block and up to 256 (resp. 192) bytes. */
VC_SCHED5 void vc_chacha_neon_otk5(uint8_t otk[32], uint8_t *dst, const uint8_t *src,
                                                   size_t len, const uint32_t st[16], uint32_t ctr,
                                                   int rounds)
{
    chacha_core(dst, src, len, st, ctr, rounds, 1, VC_NEON5_TBL, 1, otk);
}
__attribute__((noinline)) void vc_chacha_neon_otk4(uint8_t otk[32], uint8_t *dst, const uint8_t *src,
                                                   size_t len, const uint32_t st[16], uint32_t ctr,
                                                   int rounds)
{
    chacha_core(dst, src, len, st, ctr, rounds, 0, 0, 1, otk);
}
__attribute__((noinline)) void vc_chacha_neon4_otk(uint8_t otk[32], uint8_t *dst, const uint8_t *src,
                                                   size_t len, const uint32_t st[16], uint32_t ctr,
                                                   int rounds)
{
    chacha_core(dst, src, len, st, ctr, rounds, 0, 1, 1, otk);
}

static void stream_neon_from(uint8_t *dst, const uint8_t *src, size_t len, const uint32_t st[16],
                             uint32_t ctr, int rounds)
{
    while (len >= NEON_MAX5) {
        vc_chacha_neon_call5(dst, src, NEON_MAX5, st, ctr, rounds);
        ctr += 5; src += NEON_MAX5; dst += NEON_MAX5; len -= NEON_MAX5;
    }
    if (len > NEON_MAX4) vc_chacha_neon_call5(dst, src, len, st, ctr, rounds);
    else if (len > 64) vc_chacha_neon_call4(dst, src, len, st, ctr, rounds);
    else if (len) vc_chacha_neon_call1(dst, src, len, st, ctr, rounds);
}

static void stream_neon(uint8_t *dst, const uint8_t *src, size_t len, const uint32_t st[16],
                        int rounds)
{
    stream_neon_from(dst, src, len, st, st[12], rounds);
}

static void stream_neon4_from(uint8_t *dst, const uint8_t *src, size_t len, const uint32_t st[16],
                              uint32_t ctr, int rounds)
{
    while (len >= NEON_MAX4) {
        vc_chacha_neon4_call(dst, src, NEON_MAX4, st, ctr, rounds);
        ctr += 4; src += NEON_MAX4; dst += NEON_MAX4; len -= NEON_MAX4;
    }
    if (len) vc_chacha_neon4_call(dst, src, len, st, ctr, rounds);
}

static void stream_neon4(uint8_t *dst, const uint8_t *src, size_t len, const uint32_t st[16],
                         int rounds)
{
    stream_neon4_from(dst, src, len, st, st[12], rounds);
}

/* stream_otk: block st[12] gives the one-time key, the data starts at the next
 * block, and the first call computes both.  "neon": more than 192 bytes take a
 * 4+1 call whose ALU block is the key block (the four lanes then cover 256 bytes
 * of data); up to 192 bytes take four lanes, lane 0 the key.  A 1472-byte seal
 * is 24 blocks in 5 calls (5+5+5+5+4). */
static void stream_otk_neon(uint8_t otk[32], uint8_t *dst, const uint8_t *src, size_t len,
                            const uint32_t st[16], int rounds)
{
    uint32_t ctr = st[12];
    if (len > 192) {
        size_t first = len < NEON_MAX4 ? len : NEON_MAX4;
        vc_chacha_neon_otk5(otk, dst, src, first, st, ctr, rounds);
        stream_neon_from(dst + first, src + first, len - first, st, ctr + 5, rounds);
    } else {
        vc_chacha_neon_otk4(otk, dst, src, len, st, ctr, rounds);
    }
}

static void stream_otk_neon4(uint8_t otk[32], uint8_t *dst, const uint8_t *src, size_t len,
                             const uint32_t st[16], int rounds)
{
    uint32_t ctr = st[12];
    size_t first = len < 192 ? len : 192;
    vc_chacha_neon4_otk(otk, dst, src, first, st, ctr, rounds);
    stream_neon4_from(dst + first, src + first, len - first, st, ctr + 4, rounds);
}

/* HChaCha: one block, rows in four vectors, diagonals by lane rotation. */
static void hchacha_neon(uint32_t out[8], const uint32_t st[16], int rounds)
{
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

const vc_chacha_impl vc_chacha_neon_impl = {
    .name = "neon", .stream = stream_neon, .hchacha = hchacha_neon,
    .stream_otk = stream_otk_neon, .otk_span = NEON_MAX4,
};
const vc_chacha_impl vc_chacha_neon4_impl = {
    .name = "neon4", .stream = stream_neon4, .hchacha = hchacha_neon,
    .stream_otk = stream_otk_neon4, .otk_span = 192,
};

#endif /* __aarch64__ */
