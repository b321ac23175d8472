/* Portable NH (see vc_nh.h): the reference the SIMD kernels are tested against. */
#include "vc_nh.h"

void vc_nh_generic(const uint8_t *key, const uint8_t *msg, size_t len, uint64_t out[4])
{
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    /* The key word of unit i, pass p is k[4i + 4p + j]: a window of 16 words
     * that slides by 4 per unit. */
    uint32_t k[16];
    for (int j = 0; j < 12; j++)
        k[j] = vc_load32_le(key + 4 * j);
    for (size_t off = 0; off < len; off += 16) {
        uint32_t m0 = vc_load32_le(msg + off), m1 = vc_load32_le(msg + off + 4);
        uint32_t m2 = vc_load32_le(msg + off + 8), m3 = vc_load32_le(msg + off + 12);
        for (int j = 0; j < 4; j++)
            k[12 + j] = vc_load32_le(key + off + 48 + 4 * j);
#define NH_PASS(s, p) \
        s += (uint64_t)(uint32_t)(m0 + k[4 * (p)]) * (uint32_t)(m2 + k[4 * (p) + 2]) \
           + (uint64_t)(uint32_t)(m1 + k[4 * (p) + 1]) * (uint32_t)(m3 + k[4 * (p) + 3])
        NH_PASS(s0, 0);
        NH_PASS(s1, 1);
        NH_PASS(s2, 2);
        NH_PASS(s3, 3);
#undef NH_PASS
        memmove(k, k + 4, 12 * sizeof k[0]);
    }
    out[0] = s0; out[1] = s1; out[2] = s2; out[3] = s3;
}

const vc_nh_impl vc_nh_generic_impl = { .name = "generic", .nh = vc_nh_generic };
