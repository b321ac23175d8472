/* vpncrypt native core: public C API (also the cffi cdef source, see build_native.py).
 *
 * Every function is safe for any alignment, never touches a byte outside the
 * buffers it is given, and allows dst == src (in place).
 */
#ifndef VPNCRYPT_H
#define VPNCRYPT_H
#include <stddef.h>
#include <stdint.h>

/* ---- status codes ---- */
#define VC_OK            0
#define VC_ERR_AUTH     -1   /* tag mismatch: output holds no plaintext */
#define VC_ERR_COUNTER  -2   /* the message would wrap the 32-bit block counter */
#define VC_ERR_ROUNDS   -3   /* rounds not in {8, 12, 20} */
#define VC_ERR_IMPL     -4   /* no such implementation, or not available on this CPU */
#define VC_ERR_LENGTH   -5   /* a length out of range */
#define VC_ERR_AES      -6   /* no AES-256 for Adiantum: libcrypto could not be loaded */

/* ---- implementation selection ---- */
/* ChaCha stream implementations: index 0 is "generic"; indices are stable
 * for one build.  available() says whether this CPU can run it. */
int         vc_chacha_impl_count(void);
const char *vc_chacha_impl_name(int index);
int         vc_chacha_impl_available(int index);
int         vc_chacha_impl_active(void);
int         vc_chacha_impl_select(int index);            /* VC_OK or VC_ERR_IMPL */

int         vc_poly1305_impl_count(void);
const char *vc_poly1305_impl_name(int index);
int         vc_poly1305_impl_available(int index);
int         vc_poly1305_impl_active(void);
int         vc_poly1305_impl_select(int index);

/* ---- primitives ---- */
/* XOR len bytes of the ChaCha keystream (RFC 8439 layout: 32-bit counter,
 * 96-bit nonce) into src, writing dst.  rounds is 8, 12 or 20. */
int vc_chacha20_xor(uint8_t *dst, const uint8_t *src, size_t len,
                    const uint8_t key[32], const uint8_t nonce[12],
                    uint32_t counter, int rounds);
int vc_hchacha20(uint8_t out[32], const uint8_t key[32], const uint8_t nonce[16], int rounds);
void vc_poly1305(uint8_t tag[16], const uint8_t *msg, size_t len, const uint8_t key[32]);

/* ---- AEAD (RFC 8439 ChaCha20-Poly1305, draft-irtf-cfrg-xchacha XChaCha20-Poly1305) ---- */
int vc_aead_seal(uint8_t *ct, uint8_t tag[16], const uint8_t *pt, size_t len,
                 const uint8_t *aad, size_t aad_len,
                 const uint8_t key[32], const uint8_t nonce[12]);
/* The tag is verified in constant time before any plaintext reaches pt: the
 * first stretch of keystream is applied in a stack scratch (in the same pass as
 * the one-time key), the rest only after the tag matched.  On VC_ERR_AUTH no
 * keystream has reached pt: if pt != ct, pt is zeroed; in place (pt == ct) the
 * ciphertext is left untouched. */
int vc_aead_open(uint8_t *pt, const uint8_t *ct, size_t len, const uint8_t tag[16],
                 const uint8_t *aad, size_t aad_len,
                 const uint8_t key[32], const uint8_t nonce[12]);
int vc_xaead_seal(uint8_t *ct, uint8_t tag[16], const uint8_t *pt, size_t len,
                  const uint8_t *aad, size_t aad_len,
                  const uint8_t key[32], const uint8_t nonce[24]);
int vc_xaead_open(uint8_t *pt, const uint8_t *ct, size_t len, const uint8_t tag[16],
                  const uint8_t *aad, size_t aad_len,
                  const uint8_t key[32], const uint8_t nonce[24]);

/* Attached-tag forms, one call per message (what a language binding wants):
 * sealing writes len + 16 bytes (ciphertext, then tag) to out; opening takes
 * sealed_len >= 16 bytes and writes sealed_len - 16 (zeroed on VC_ERR_AUTH). */
int vc_aead_seal_attached(uint8_t *out, const uint8_t *pt, size_t len,
                          const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                          const uint8_t nonce[12]);
int vc_aead_open_attached(uint8_t *out, const uint8_t *sealed, size_t sealed_len,
                          const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                          const uint8_t nonce[12]);
int vc_xaead_seal_attached(uint8_t *out, const uint8_t *pt, size_t len,
                           const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                           const uint8_t nonce[24]);
int vc_xaead_open_attached(uint8_t *out, const uint8_t *sealed, size_t sealed_len,
                           const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                           const uint8_t nonce[24]);

/* ---- batch form: many packets in one call ---- */
typedef struct {
    const uint8_t *key;     /* 32 bytes */
    const uint8_t *nonce;   /* 12 bytes */
    const uint8_t *aad;
    size_t         aad_len;
    const uint8_t *input;   /* seal: plaintext; open: ciphertext followed by the 16-byte tag */
    size_t         in_len;
    uint8_t       *out;     /* seal: in_len + 16 bytes; open: in_len - 16 bytes */
    int32_t        status;  /* written: VC_OK, VC_ERR_AUTH, VC_ERR_LENGTH */
} vc_aead_item;

/* Return the number of items that succeeded; each item's status is set. */
size_t vc_aead_seal_batch(vc_aead_item *items, size_t n);
size_t vc_aead_open_batch(vc_aead_item *items, size_t n);

/* Packed batch form, one key for all packets (what a peer's session uses):
 * packet i has length lens[i] and lies right after packet i-1 in `in`; its
 * nonce is nonces[12*i .. 12*i+12].  Sealing writes each packet's ciphertext
 * and tag (lens[i] + 16 bytes) end to end in `out`; opening takes sealed
 * packets (lens[i] includes the tag) and writes lens[i] - 16 bytes each, end to
 * end.  status[i] is set for each packet; the return value counts successes. */
size_t vc_aead_seal_packed(uint8_t *out, const uint8_t *in, const uint32_t *lens, size_t n,
                           const uint8_t *nonces, const uint8_t *aad, size_t aad_len,
                           const uint8_t key[32], int32_t *status);
size_t vc_aead_open_packed(uint8_t *out, const uint8_t *in, const uint32_t *lens, size_t n,
                           const uint8_t *nonces, const uint8_t *aad, size_t aad_len,
                           const uint8_t key[32], int32_t *status);

/* ---- introspection ---- */
/* The ChaCha / Poly1305 kernel (an index as above) that served the calling
 * thread's last operation (stream, MAC, seal or open, one-shot or batch), or -1
 * if it has run none or the operation did not use that primitive.  Proof of
 * which kernel a call ran on, whatever binding made the call. */
int vc_last_chacha_impl(void);
int vc_last_poly1305_impl(void);

/* ---- NHPoly1305 and Adiantum (the Adiantum paper; the kernel's nhpoly1305,
 * adiantum(xchacha12,aes) and adiantum(xchacha20,aes)) ---- */
/* NH kernels (for NHPoly1305 and Adiantum's hash), selected like the ChaCha ones. */
int         vc_nh_impl_count(void);
const char *vc_nh_impl_name(int index);
int         vc_nh_impl_available(int index);
int         vc_nh_impl_active(void);
int         vc_nh_impl_select(int index);
/* The NH kernel that served the calling thread's last NHPoly1305 or Adiantum
 * call, or -1. */
int         vc_last_nh_impl(void);

/* NHPoly1305 of len bytes (any length): key is 16 bytes of Poly1305 r, then
 * the 1072-byte NH key (1088 in all); the result is the Poly1305 hash of the
 * NH hashes of the 1024-byte pieces (the last one zero-padded to 16 bytes),
 * fully reduced mod 2^130 - 5, low 128 bits (no s is added). */
void vc_nhpoly1305(uint8_t out[16], const uint8_t *msg, size_t len, const uint8_t key[1088]);

/* An Adiantum key with its derived subkeys (the XChaCha key, AES-256 key,
 * Poly1305 key of the header and NHPoly1305 key), its ChaCha rounds and its
 * AES contexts.  Start from zeroed memory (or a wiped key); setkey again re-keys. */
typedef struct { uint64_t opaque[152]; } vc_adiantum_key;
/* rounds: 12 (adiantum(xchacha12,aes)) or 20; 8 also works.  VC_OK or VC_ERR_ROUNDS. */
int  vc_adiantum_setkey(vc_adiantum_key *k, const uint8_t key[32], int rounds);
/* Wipe the key and free its AES contexts (call it once per key set). */
void vc_adiantum_wipe(vc_adiantum_key *k);
/* 1 if AES-256 (libcrypto, loaded at run time) is there for Adiantum, else 0. */
int  vc_adiantum_aes_available(void);
/* Encrypt or decrypt len >= 16 bytes (dst == src allowed) under a tweak of
 * 0..32 bytes.  VC_OK, VC_ERR_LENGTH (len < 16 or tweak too long; nothing is
 * written), VC_ERR_COUNTER (len over the 32-bit block counter's 256 GiB) or
 * VC_ERR_AES. */
int  vc_adiantum_encrypt(vc_adiantum_key *k, uint8_t *dst, const uint8_t *src, size_t len,
                         const uint8_t *tweak, size_t tweak_len);
int  vc_adiantum_decrypt(vc_adiantum_key *k, uint8_t *dst, const uint8_t *src, size_t len,
                         const uint8_t *tweak, size_t tweak_len);

/* ---- the one-shot table (vc_oneshot.h) for the vpncrypt._oneshot extension ---- */
typedef struct vc_oneshot_api vc_oneshot_api;
const vc_oneshot_api *vc_oneshot_table(void);

#endif
