/* llvm-mca entry points (never built into the package): the arm64 ChaCha
 * routines with constant length and 20 rounds, so that with VC_MCA_UNROLL the
 * whole call compiles to straight-line code that llvm-mca can analyse once.
 * Compiled by run_mca.sh with clang --target=aarch64-linux-gnu. */
#include "../chacha_neon.c"

#define ENTRY(name, body)                                                        \
    void name(uint8_t *dst, const uint8_t *src, const uint32_t st[16], uint32_t ctr) { body; }

ENTRY(mca_neon_320, chacha_core(dst, src, 320, st, ctr, 20, 1, 0))   /* 4 NEON + 1 ALU, full call */
ENTRY(mca_neon_192, chacha_core(dst, src, 192, st, ctr, 20, 0, 0))   /* remainder of a 1472-byte packet */
ENTRY(mca_neon_256, chacha_core(dst, src, 256, st, ctr, 20, 0, 0))   /* "neon", 4 lanes */
ENTRY(mca_neon_64, chacha_alu1(dst, src, 64, st, ctr, 20))           /* "neon" one-block path (ALU) */
ENTRY(mca_neon4_256, chacha_core(dst, src, 256, st, ctr, 20, 0, 1))  /* "neon4", full call */
ENTRY(mca_neon4_64, chacha_core(dst, src, 64, st, ctr, 20, 0, 1))    /* "neon4", one block */
