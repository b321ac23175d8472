/* The pieces of ChaCha (RFC 8439) that the x86-64 kernels (chacha_avx2.c,
 * chacha_avx512.c) share, as macros over the vector width V (256 or 512: the
 * intrinsics _mm<V>_... and the type __m<V>i), so every use is the same
 * machine code as the open-coded form. */
#ifndef VC_CHACHA_X86_H
#define VC_CHACHA_X86_H

/* The double round over the 16 state words x0..x15 (one word of every block
 * per register): four column quarter rounds, then four diagonal ones.  QR is
 * the kernel's quarter round QR(a, b, c, d). */
#define VC_CHACHA_DOUBLE_ROUND(QR)                                              \
    QR(x0, x4, x8, x12);                                                        \
    QR(x1, x5, x9, x13);                                                        \
    QR(x2, x6, x10, x14);                                                       \
    QR(x3, x7, x11, x15);                                                       \
    QR(x0, x5, x10, x15);                                                       \
    QR(x1, x6, x11, x12);                                                       \
    QR(x2, x7, x8, x13);                                                        \
    QR(x3, x4, x9, x14)

/* 4x4 dword transpose inside every 128-bit lane of a, b, c, d. */
#define VC_T4X4(V, a, b, c, d)                                                  \
    do {                                                                        \
        __m##V##i t0_ = _mm##V##_unpacklo_epi32(a, b), t1_ = _mm##V##_unpackhi_epi32(a, b); \
        __m##V##i t2_ = _mm##V##_unpacklo_epi32(c, d), t3_ = _mm##V##_unpackhi_epi32(c, d); \
        a = _mm##V##_unpacklo_epi64(t0_, t2_); b = _mm##V##_unpackhi_epi64(t0_, t2_); \
        c = _mm##V##_unpacklo_epi64(t1_, t3_); d = _mm##V##_unpackhi_epi64(t1_, t3_); \
    } while (0)

/* The four 4x4 transposes after a column pass: lane k of x(4g+m) then holds
 * words 4g..4g+3 of block 4k+m. */
#define VC_T4X4_ALL(V)                                                          \
    VC_T4X4(V, x0, x1, x2, x3);                                                 \
    VC_T4X4(V, x4, x5, x6, x7);                                                 \
    VC_T4X4(V, x8, x9, x10, x11);                                               \
    VC_T4X4(V, x12, x13, x14, x15)

/* In a kernel's stream function (dst, src, len, st, ctr, rounds): whole passes
 * of its widest pass WIDE, BLOCKS blocks of 64 bytes each, while len holds one;
 * after them fewer than 64 * BLOCKS bytes are left, from block ctr on. */
#define VC_CHACHA_WHOLE_PASSES(WIDE, BLOCKS)                                    \
    while (len >= 64 * (BLOCKS)) {                                              \
        WIDE(NULL, dst, src, 64 * (BLOCKS), st, ctr, rounds);                   \
        ctr += (BLOCKS); dst += 64 * (BLOCKS); src += 64 * (BLOCKS);            \
        len -= 64 * (BLOCKS);                                                   \
    }

/* In a kernel's stream_otk (dst, src, len, st, ctr = st[12], rounds), after its
 * first pass made the key block and the first `first` bytes: the rest of the
 * message through STREAM from block ctr + BLOCKS (the blocks that pass used),
 * on a copy of the state, wiped after (a copy of the state, so of the key). */
#define VC_CHACHA_OTK_REST(STREAM, BLOCKS)                                      \
    if (len > first) {                                                          \
        uint32_t rest[16];                                                      \
        memcpy(rest, st, sizeof rest);                                          \
        rest[12] = ctr + (BLOCKS);                                              \
        STREAM(dst + first, src + first, len - first, rest, rounds);            \
        vc_wipe(rest, sizeof rest);                                             \
    }

#endif
