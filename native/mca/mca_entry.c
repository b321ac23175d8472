/* llvm-mca entry points (never built into the package): the arm64 ChaCha
 * routines with constant length and 20 rounds, so that the whole call compiles
 * to one loop (or, with VC_MCA_UNROLL, straight-line code) that llvm-mca can
 * analyse.  Compiled by mca_report.py with aarch64-linux-gnu-gcc (default, the
 * compiler the package ships with) or clang --target=aarch64-linux-gnu. */
#include "../chacha_neon.c"

#define ENTRY(name, body)                                                        \
    void name(uint8_t *dst, const uint8_t *src, const uint32_t st[16], uint32_t ctr) { body; }
#define ENTRY5(name, body)  /* the 4+1 routines' attributes, as shipped */     \
    VC_SCHED5 void name(uint8_t *dst, const uint8_t *src, const uint32_t st[16], uint32_t ctr) { body; }
#define ENTRY_OTK(name, body)                                                    \
    VC_SCHED5 void name(uint8_t *otk, uint8_t *dst, const uint8_t *src, const uint32_t st[16], uint32_t ctr) { body; }

#define ENTRY_OTK4(name, body)                                                   \
    void name(uint8_t *otk, uint8_t *dst, const uint8_t *src, const uint32_t st[16], uint32_t ctr) { body; }

ENTRY5(mca_neon_320, chacha_core(dst, src, 320, st, ctr, 20, 1, VC_NEON5_TBL, 0, NULL))   /* 4 NEON + 1 ALU, full call */
ENTRY(mca_neon_192, chacha_core(dst, src, 192, st, ctr, 20, 0, 0, 0, NULL))   /* remainder of a 1472-byte packet */
ENTRY(mca_neon_256, chacha_core(dst, src, 256, st, ctr, 20, 0, 0, 0, NULL))   /* "neon", 4 lanes */
ENTRY(mca_neon_64, chacha_alu1(dst, src, 64, st, ctr, 20))                 /* "neon" one-block path (ALU) */
ENTRY(mca_neon4_256, chacha_core(dst, src, 256, st, ctr, 20, 0, 1, 0, NULL))  /* "neon4", full call */
ENTRY(mca_neon4_64, chacha_core(dst, src, 64, st, ctr, 20, 0, 1, 0, NULL))    /* "neon4", one block */
ENTRY_OTK(mca_neon_otk_256, chacha_core(dst, src, 256, st, ctr, 20, 1, VC_NEON5_TBL, 1, otk))  /* seal: key block (ALU) + 256 B */
ENTRY_OTK4(mca_neon4_otk_192, chacha_core(dst, src, 192, st, ctr, 20, 0, 1, 1, otk)) /* neon4 seal: key + 192 B */
