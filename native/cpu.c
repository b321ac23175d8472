/* Run-time CPU feature detection. */
#include "vc_internal.h"

/* memset, then a compiler barrier that claims to read the memory, so the
 * stores cannot be removed as dead (the explicit_bzero technique). */
void vc_wipe(void *p, size_t n) {
    memset(p, 0, n);
    __asm__ __volatile__("" : : "r"(p) : "memory");
}

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static int cpu_flags = -1;
enum { F_AVX2 = 1, F_AVX512 = 2, F_IFMA = 4 };

static int detect(void) {
    unsigned a, b, c, d;
    int f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx) return 0;
    uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return 0;             /* xmm + ymm state */
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    if ((b >> 5) & 1) f |= F_AVX2;
    int zmm_ok = (xcr0 & 0xe6) == 0xe6;            /* opmask + zmm_hi256 + hi16_zmm */
    int avx512f = (b >> 16) & 1, avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
    int ifma = (b >> 21) & 1;
    if (zmm_ok && avx512f && avx512bw && avx512vl) {
        f |= F_AVX512;
        if (ifma) f |= F_IFMA;
    }
    return f;
}

static int flags(void) {
    if (cpu_flags < 0) cpu_flags = detect();
    return cpu_flags;
}
int vc_cpu_has_avx2(void) { return (flags() & F_AVX2) != 0; }
int vc_cpu_has_avx512(void) { return (flags() & F_AVX512) != 0; }
int vc_cpu_has_avx512ifma(void) { return (flags() & F_IFMA) != 0; }
#else
int vc_cpu_has_avx2(void) { return 0; }
int vc_cpu_has_avx512(void) { return 0; }
int vc_cpu_has_avx512ifma(void) { return 0; }
#endif
