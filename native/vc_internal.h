/* vpncrypt native core: the interface between the dispatcher and the kernels.
 * Not part of the cffi API.
 *
 * C style of the native core (follow it in new code):
 *  - Linux kernel brace placement: a function's opening brace on a line of its
 *    own; braces of if/for/while/switch/struct on the same line, "} else {"
 *    cuddled; a one-statement body may go without braces.
 *  - A function of the public C API (vpncrypt.h, vc_io.h, ...) carries VC_API
 *    on its definition (the headers stay plain C for the cffi cdef); everything
 *    else is static or hidden (the module builds with -fvisibility=hidden).
 *  - 4-space indents, lines up to about 100 columns, comments that say why.
 *  - Key material and keystream on the stack are wiped with vc_wipe() on every
 *    path out, error paths included.
 */
#ifndef VC_INTERNAL_H
#define VC_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "vpncrypt.h"

#if defined(__GNUC__)
#define VC_INLINE static inline __attribute__((always_inline))
#else
#define VC_INLINE static inline
#endif

#ifndef VC_API
#define VC_API __attribute__((visibility("default")))
#endif


VC_INLINE uint32_t vc_load32_le(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

VC_INLINE void vc_store32_le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

VC_INLINE uint64_t vc_load64_le(const uint8_t *p)
{
    return (uint64_t)vc_load32_le(p) | ((uint64_t)vc_load32_le(p + 4) << 32);
}

VC_INLINE void vc_store64_le(uint8_t *p, uint64_t v)
{
    vc_store32_le(p, (uint32_t)v); vc_store32_le(p + 4, (uint32_t)(v >> 32));
}

/* Wipe memory in a way the compiler may not elide. */
void vc_wipe(void *p, size_t n);

/* ---- ChaCha kernels ----
 * stream: XOR len bytes of keystream into src, writing dst (dst == src allowed,
 * any alignment, len may be 0 or any value).  state is the full 16-word initial
 * state (constants, key, state[12] = block counter, state[13..15] = nonce); the
 * kernel uses state[12] + i for block i.  The caller guarantees that
 * state[12] + ceil(len / 64) - 1 does not wrap past 2^32 - 1.  rounds is 8, 12 or 20.
 * The kernel must not read or write outside [src, src+len) and [dst, dst+len),
 * and must finish a partial tail inside its own SIMD code (no temp-buffer memcpy,
 * no fallback to a one-block loop). */
typedef void (*vc_chacha_stream_fn)(uint8_t *dst, const uint8_t *src, size_t len,
                                    const uint32_t state[16], int rounds);
/* hchacha: out = words 0..3 and 12..15 of the permuted state (no feed-forward). */
typedef void (*vc_hchacha_fn)(uint32_t out[8], const uint32_t state[16], int rounds);

/* stream_otk: the AEAD's form.  Block state[12] yields the one-time Poly1305
 * key (its first 32 bytes go to otk) and the len bytes of data are XORed with
 * the blocks after it, in one pass where the kernel can (the key block is one
 * more lane of the first pass instead of a latency-bound call of its own). */
typedef void (*vc_chacha_stream_otk_fn)(uint8_t otk[32], uint8_t *dst, const uint8_t *src,
                                        size_t len, const uint32_t state[16], int rounds);

typedef struct {
    const char             *name;
    vc_chacha_stream_fn     stream;
    vc_hchacha_fn           hchacha;     /* NULL: use the generic one */
    int                   (*available)(void); /* NULL: always available */
    vc_chacha_stream_otk_fn stream_otk;  /* required */
    /* Bytes of data that stream_otk's first pass covers besides the key block
     * (a multiple of 64): opening decrypts up to that much into a stack
     * scratch in the same pass as the key block, see aead.c. */
    size_t                  otk_span;
    /* Optional: how much of a len-byte message opening should decrypt with the
     * key block (at most otk_span, a multiple of 64 unless it is len), so that
     * the passes before and after the tag check are the ones sealing makes in
     * one go.  NULL: min(len, otk_span). */
    size_t                (*open_first)(size_t len);
} vc_chacha_impl;

/* ---- Poly1305 kernels ----
 * A one-shot-or-incremental MAC.  update() accepts any length in any number of
 * calls (the kernel buffers partial blocks itself). */
typedef struct { _Alignas(64) uint8_t opaque[512]; } vc_poly1305_state;

typedef struct {
    const char *name;
    void (*init)(vc_poly1305_state *st, const uint8_t key[32]);
    void (*update)(vc_poly1305_state *st, const uint8_t *msg, size_t len);
    void (*final)(vc_poly1305_state *st, uint8_t tag[16]);  /* also wipes st */
    int  (*available)(void);                                 /* NULL: always */
} vc_poly1305_impl;

/* Kernels, each defined in its own file.  The dispatcher (dispatch.c) holds weak
 * references, so a kernel file that is not built for this architecture simply
 * leaves its entry out. */
extern const vc_chacha_impl vc_chacha_generic_impl;     /* chacha_generic.c */
extern const vc_chacha_impl vc_chacha_avx2_impl;        /* chacha_avx2.c    (x86-64) */
extern const vc_chacha_impl vc_chacha_avx512_impl;      /* chacha_avx512.c  (x86-64) */
extern const vc_chacha_impl vc_chacha_neon_impl;        /* chacha_neon.c    (aarch64, 4 NEON + 1 ALU) */
extern const vc_chacha_impl vc_chacha_neon4_impl;       /* chacha_neon.c    (aarch64, pure 4-way) */

extern const vc_poly1305_impl vc_poly1305_generic_impl; /* poly1305_generic.c (64-bit, radix 2^44) */
extern const vc_poly1305_impl vc_poly1305_avx2_impl;    /* poly1305_avx2.c    (x86-64) */
extern const vc_poly1305_impl vc_poly1305_avx512_impl;  /* poly1305_avx512.c  (x86-64, IFMA) */
extern const vc_poly1305_impl vc_poly1305_neon_impl;    /* poly1305_neon.c    (aarch64) */

/* ---- CPU features (cpu.c) ---- */
int vc_cpu_has_avx2(void);
int vc_cpu_has_avx512(void);      /* F + VL + BW, with OS support for zmm state */
int vc_cpu_has_avx512ifma(void);
/* The ChaCha kernel this CPU prefers over the default (the last available
 * one), or NULL: on arm64, "neon4" on in-order cores, else "neon". */
const char *vc_chacha_preferred_name(void);
#if defined(__aarch64__)
/* arm64 core class: 1 in-order (Cortex-A53/A55), 0 out-of-order, -1 unknown,
 * from /proc/cpuinfo text or a MIDR_EL1 value (tests/arm64/midr_test.c). */
int vc_cpu_inorder_from_cpuinfo(const char *text);
int vc_cpu_inorder_from_midr(uint64_t midr);
#endif

/* The generic kernels, callable directly (the reference for the SIMD ones). */
void vc_chacha_stream_generic(uint8_t *dst, const uint8_t *src, size_t len,
                              const uint32_t state[16], int rounds);
void vc_hchacha_generic(uint32_t out[8], const uint32_t state[16], int rounds);

/* Build the initial state. */
void vc_chacha_init_state(uint32_t state[16], const uint8_t key[32], uint32_t counter,
                          const uint8_t nonce[12]);

/* ---- dispatch.c ---- */
/* The kernels in use now (safe to call from any thread, at any time). */
const vc_chacha_impl *vc_chacha_current(void);
const vc_poly1305_impl *vc_poly1305_current(void);
/* Record the kernels that serve the calling thread's current operation
 * (reported by vc_last_chacha_impl / vc_last_poly1305_impl). */
void vc_note_kernels(const vc_chacha_impl *c, const vc_poly1305_impl *p);
#endif
