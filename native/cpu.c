/* Run-time CPU detection: x86-64 feature flags (cpuid, xgetbv) and the arm64
 * core class (in-order or not, from /proc/cpuinfo or MIDR_EL1), and the
 * ChaCha kernel preference that follows from it.
 *
 * Each detection is idempotent and cached in an atomic, so concurrent first
 * calls are safe (they may both detect, and store the same answer). */
#include <stdatomic.h>

#include "vc_internal.h"

/* memset, then a compiler barrier that claims to read the memory, so the
 * stores cannot be removed as dead (the explicit_bzero technique). */
void vc_wipe(void *p, size_t n)
{
    memset(p, 0, n);
    __asm__ __volatile__("" : : "r"(p) : "memory");
}

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

enum { F_AVX2 = 1, F_AVX512 = 2, F_IFMA = 4, F_DONE = 8 };
static atomic_int cpu_flags;

static int detect(void)
{
    unsigned a, b, c, d;
    int f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx)
        return 0;
    uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6)                       /* xmm + ymm state */
        return 0;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    if ((b >> 5) & 1)
        f |= F_AVX2;
    int zmm_ok = (xcr0 & 0xe6) == 0xe6;            /* opmask + zmm_hi256 + hi16_zmm */
    int avx512f = (b >> 16) & 1, avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
    int ifma = (b >> 21) & 1;
    if (zmm_ok && avx512f && avx512bw && avx512vl) {
        f |= F_AVX512;
        if (ifma)
            f |= F_IFMA;
    }
    return f;
}

static int flags(void)
{
    int f = atomic_load_explicit(&cpu_flags, memory_order_relaxed);
    if (!(f & F_DONE)) {
        f = detect() | F_DONE;
        atomic_store_explicit(&cpu_flags, f, memory_order_relaxed);
    }
    return f;
}

int vc_cpu_has_avx2(void)
{
    return (flags() & F_AVX2) != 0;
}

int vc_cpu_has_avx512(void)
{
    return (flags() & F_AVX512) != 0;
}

int vc_cpu_has_avx512ifma(void)
{
    return (flags() & F_IFMA) != 0;
}

const char *vc_chacha_preferred_name(void)
{
    return NULL;    /* the last available kernel: avx512, else avx2, else generic */
}

#else
int vc_cpu_has_avx2(void)
{
    return 0;
}

int vc_cpu_has_avx512(void)
{
    return 0;
}

int vc_cpu_has_avx512ifma(void)
{
    return 0;
}
#endif

#if defined(__aarch64__)
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>

#ifndef HWCAP_CPUID
#define HWCAP_CPUID (1UL << 11)
#endif

/* In-order cores: Cortex-A53 (0xd03) and Cortex-A55 (0xd05), implementer Arm
 * (0x41).  They run the pure 4-way NEON kernel faster than the 4+1 one. */
static int part_is_inorder(unsigned long implementer, unsigned long part)
{
    return implementer == 0x41 && (part == 0xd03 || part == 0xd05);
}

/* 1 if any core in the /proc/cpuinfo text is in-order (on big.LITTLE the
 * thread may run on either), 0 if none is, -1 if the text names no CPU part. */
int vc_cpu_inorder_from_cpuinfo(const char *text)
{
    unsigned long impl = 0x41;
    int seen = 0, inorder = 0;
    const char *p = text;
    while (p && *p) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        const char *colon = memchr(p, ':', n);
        if (colon) {
            size_t keylen = (size_t)(colon - p);
            while (keylen && (p[keylen - 1] == ' ' || p[keylen - 1] == '\t'))
                keylen--;
            const char *val = colon + 1;
            while (*val == ' ' || *val == '\t')
                val++;
            char *end;
            if (keylen == 15 && memcmp(p, "CPU implementer", 15) == 0) {
                impl = strtoul(val, &end, 0);
            } else if (keylen == 8 && memcmp(p, "CPU part", 8) == 0) {
                unsigned long part = strtoul(val, &end, 0);
                if (end != val) {
                    seen = 1;
                    if (part_is_inorder(impl, part))
                        inorder = 1;
                }
            }
        }
        p = eol ? eol + 1 : NULL;
    }
    return seen ? inorder : -1;
}

/* From a MIDR_EL1 value (as in /sys/.../regs/identification/midr_el1). */
int vc_cpu_inorder_from_midr(uint64_t midr)
{
    unsigned long impl = (unsigned long)((midr >> 24) & 0xff);
    unsigned long part = (unsigned long)((midr >> 4) & 0xfff);
    return part_is_inorder(impl, part);
}

static int detect_inorder(void)
{
    int inorder = -1;
    const char *env = getenv("VPNCRYPT_NEON_CPUINFO");  /* tests: a cpuinfo file to read instead */
    FILE *f = fopen(env && *env ? env : "/proc/cpuinfo", "r");
    if (f) {
        char *buf = malloc(65536);
        if (buf) {
            size_t n = fread(buf, 1, 65535, f);
            buf[n] = 0;
            inorder = vc_cpu_inorder_from_cpuinfo(buf);
            free(buf);
        }
        fclose(f);
    }
    if (inorder < 0) {
        /* qemu and some VMs list no CPU part: ask the kernel for the MIDR */
        f = fopen("/sys/devices/system/cpu/cpu0/regs/identification/midr_el1", "r");
        if (f) {
            char line[64];
            if (fgets(line, sizeof line, f))
                inorder = vc_cpu_inorder_from_midr(strtoull(line, NULL, 16));
            fclose(f);
        }
    }
    if (inorder < 0 && (getauxval(AT_HWCAP) & HWCAP_CPUID)) {
        /* No cpuinfo part and no sysfs (qemu-user, some containers): read
         * MIDR_EL1 itself, which the kernel (and qemu-user) emulates for EL0
         * when it sets HWCAP_CPUID.  The value is that of the core the
         * thread runs on now, hence the last resort on big.LITTLE. */
        uint64_t midr;
        __asm__ volatile("mrs %0, midr_el1" : "=r"(midr));
        inorder = vc_cpu_inorder_from_midr(midr);
    }
    return inorder;
}

const char *vc_chacha_preferred_name(void)
{
    static atomic_int cached = -2;     /* -2: not detected yet */
    int inorder = atomic_load_explicit(&cached, memory_order_relaxed);
    if (inorder == -2) {
        inorder = detect_inorder();
        atomic_store_explicit(&cached, inorder, memory_order_relaxed);
    }
    return inorder == 1 ? "neon4" : "neon";
}
#elif !defined(__x86_64__) && !defined(__i386__)
const char *vc_chacha_preferred_name(void)
{
    return NULL;
}
#endif
