/* NH for arm64 NEON (see vc_nh.h); AdvSIMD is baseline there.
 *
 * ld2 of 64-bit elements splits 32 bytes (two units) into the words each unit
 * multiplies: lo = (w0, w1 | w4, w5), hi = (w2, w3 | w6, w7) of the pair, so
 * after t = m + k one umlal (low halves) and one umlal2 (high halves) of lo by
 * hi are the pair's four products, with no permute at all.  The key is read in
 * 32-byte windows at 16-byte steps, and the window pass p uses at units
 * (2i, 2i+1) is the one pass p - 2 uses at the next step: each window is loaded
 * once and used twice (the loop takes two pairs a turn, so that the windows
 * change roles without register copies).  The low and high products go to accumulators of their
 * own (eight in all), so that no umlal waits on the one before it: on an
 * in-order core (Cortex-A53) that is what keeps the multiplier busy.
 * An odd last unit is one ld1 and one umlal per pass. */
#include "vc_nh.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#if defined(__AARCH64EB__)
#error "nh_neon.c assumes little-endian arm64"
#endif

#if defined(VC_MCA_MARKERS)
#define NH_MCA_BEGIN(name) __asm__ volatile("# LLVM-MCA-BEGIN " name ::: "memory")
#define NH_MCA_END() __asm__ volatile("# LLVM-MCA-END" ::: "memory")
#else
#define NH_MCA_BEGIN(name) ((void)0)
#define NH_MCA_END() ((void)0)
#endif

typedef struct { uint32x4_t lo, hi; } pair32;

static inline pair32 load2(const uint8_t *p)
{
    uint64x2x2_t v = vld2q_u64((const uint64_t *)(const void *)p);
    pair32 r = { vreinterpretq_u32_u64(v.val[0]), vreinterpretq_u32_u64(v.val[1]) };
    return r;
}

#define NH_PASS(al, ah, m, k) do {                               \
        uint32x4_t tl = vaddq_u32((m).lo, (k).lo);                \
        uint32x4_t th = vaddq_u32((m).hi, (k).hi);                \
        al = vmlal_u32(al, vget_low_u32(tl), vget_low_u32(th));   \
        ah = vmlal_high_u32(ah, tl, th);                          \
    } while (0)

/* The four passes over one pair m, with the key windows of passes 0..3. */
#define NH_PAIR(m, k0, k1, k2, k3) do {                          \
        NH_PASS(a0l, a0h, m, k0);                                 \
        NH_PASS(a1l, a1h, m, k1);                                 \
        NH_PASS(a2l, a2h, m, k2);                                 \
        NH_PASS(a3l, a3h, m, k3);                                 \
    } while (0)

static inline uint64x2_t tail_pass(uint64x2_t acc, uint32x4_t m, const uint8_t *key)
{
    uint32x4_t t = vaddq_u32(m, vld1q_u32((const uint32_t *)(const void *)key));
    return vmlal_u32(acc, vget_low_u32(t), vget_high_u32(t));
}

static void nh_neon(const uint8_t *key, const uint8_t *msg, size_t len, uint64_t out[4])
{
    uint64x2_t a0l = vdupq_n_u64(0), a0h = a0l, a1l = a0l, a1h = a0l;
    uint64x2_t a2l = a0l, a2h = a0l, a3l = a0l, a3h = a0l;
    size_t off = 0;
    pair32 e = load2(key), o = load2(key + 16), e2, o2;
    /* Two pairs a turn, so the windows swap roles instead of being copied:
     * the second pair loads the next turn's windows into e and o. */
    NH_MCA_BEGIN("nh_loop");
    for (; off + 64 <= len; off += 64) {
        pair32 m = load2(msg + off);
        e2 = load2(key + off + 32);
        o2 = load2(key + off + 48);
        NH_PAIR(m, e, o, e2, o2);
        m = load2(msg + off + 32);
        e = load2(key + off + 64);
        o = load2(key + off + 80);
        NH_PAIR(m, e2, o2, e, o);
    }
    NH_MCA_END();
    if (len - off >= 32) {
        NH_PAIR(load2(msg + off), e, o, load2(key + off + 32), load2(key + off + 48));
        off += 32;
    }
    if (len & 16) {
        uint32x4_t m = vld1q_u32((const uint32_t *)(const void *)(msg + off));
        a0l = tail_pass(a0l, m, key + off);
        a1l = tail_pass(a1l, m, key + off + 16);
        a2l = tail_pass(a2l, m, key + off + 32);
        a3l = tail_pass(a3l, m, key + off + 48);
    }
    out[0] = vaddvq_u64(vaddq_u64(a0l, a0h));
    out[1] = vaddvq_u64(vaddq_u64(a1l, a1h));
    out[2] = vaddvq_u64(vaddq_u64(a2l, a2h));
    out[3] = vaddvq_u64(vaddq_u64(a3l, a3h));
}

const vc_nh_impl vc_nh_neon_impl = { .name = "neon", .nh = nh_neon };
#endif
