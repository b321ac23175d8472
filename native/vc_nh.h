/* NH (the Adiantum paper, section 6.3; the kernel's nhpoly1305): the kernels'
 * interface.  Not part of the cffi API.
 *
 * NH here is the one Adiantum and the kernel's "nhpoly1305" use: 32-bit words,
 * a message unit of 16 bytes (4 words), 4 passes, a stride of 2, NH messages
 * of up to 1024 bytes (64 units), a key of 1072 bytes (268 words: 256 for the
 * message plus 12 for the passes' offsets).  Pass p of an NH message of n units
 * m[0..4n) with key k is
 *
 *     sum over units i of  (m[4i]   + k[4i+4p])   * (m[4i+2] + k[4i+4p+2])
 *                        + (m[4i+1] + k[4i+4p+1]) * (m[4i+3] + k[4i+4p+3])
 *
 * with the additions mod 2^32 and the products and the sum mod 2^64; the hash
 * is the four passes as little-endian 64-bit words (32 bytes).
 */
#ifndef VC_NH_H
#define VC_NH_H
#include "vc_internal.h"

#define VC_NH_UNIT        16
#define VC_NH_MESSAGE_MAX 1024
#define VC_NH_KEY_BYTES   1072
#define VC_NH_HASH_BYTES  32

/* out[p] = pass p of NH over msg[0..len), len a multiple of 16 in 16..1024;
 * key is the NH key from the word of this message's first unit on (it reads
 * key[0 .. len + 48)).  Any alignment of msg and key. */
typedef void (*vc_nh_fn)(const uint8_t *key, const uint8_t *msg, size_t len, uint64_t out[4]);

typedef struct {
    const char *name;
    vc_nh_fn    nh;
    int       (*available)(void);   /* NULL: always available */
} vc_nh_impl;

extern const vc_nh_impl vc_nh_generic_impl;   /* nh_generic.c */
extern const vc_nh_impl vc_nh_avx2_impl;      /* nh_avx2.c (x86-64) */
extern const vc_nh_impl vc_nh_neon_impl;      /* nh_neon.c (aarch64) */

void vc_nh_generic(const uint8_t *key, const uint8_t *msg, size_t len, uint64_t out[4]);

/* dispatch.c: the NH kernel in use now, and the record of the one that served
 * the calling thread's last NHPoly1305 or Adiantum call (vc_last_nh_impl). */
const vc_nh_impl *vc_nh_current(void);
void vc_note_nh(const vc_nh_impl *n);
#endif
