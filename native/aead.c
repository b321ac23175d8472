/* ChaCha20-Poly1305 (RFC 8439 section 2.8) and XChaCha20-Poly1305
 * (draft-irtf-cfrg-xchacha), one packet or a batch per call.
 *
 * Every operation reads the kernels in use once (dispatch.c) and runs on them
 * to the end.  Key material on the stack (the state, the one-time key, the
 * XChaCha subkey, the computed tag, the open scratch) is wiped on every way
 * out, error returns included. */
#include "vc_internal.h"
#include "vc_oneshot.h"

static const uint8_t zeros[16];

/* Sealing and opening: the kernels of one operation. */
typedef struct {
    const vc_chacha_impl *c;
    const vc_poly1305_impl *p;
} kernels;

static kernels current_kernels(void)
{
    kernels k = {vc_chacha_current(), vc_poly1305_current()};
    vc_note_kernels(k.c, k.p);
    return k;
}

static int counter_fits(uint32_t counter, size_t len)
{
    uint64_t blocks = ((uint64_t)len + 63) / 64;
    return blocks <= (uint64_t)0x100000000ULL - counter;
}

static int rounds_ok(int rounds)
{
    return rounds == 20 || rounds == 12 || rounds == 8;
}

VC_API int vc_chacha20_xor(uint8_t *dst, const uint8_t *src, size_t len,
                           const uint8_t key[32], const uint8_t nonce[12],
                           uint32_t counter, int rounds)
{
    if (!rounds_ok(rounds))
        return VC_ERR_ROUNDS;
    if (!counter_fits(counter, len))
        return VC_ERR_COUNTER;
    const vc_chacha_impl *c = vc_chacha_current();
    vc_note_kernels(c, NULL);
    uint32_t st[16];
    vc_chacha_init_state(st, key, counter, nonce);
    c->stream(dst, src, len, st, rounds);
    vc_wipe(st, sizeof st);
    return VC_OK;
}

static void hchacha(const vc_chacha_impl *c, uint8_t out[32], const uint8_t key[32],
                    const uint8_t nonce[16], int rounds)
{
    uint32_t st[16], o[8];
    /* HChaCha: the nonce takes the counter word and the three nonce words. */
    vc_chacha_init_state(st, key, vc_load32_le(nonce), nonce + 4);
    (c->hchacha ? c->hchacha : vc_hchacha_generic)(o, st, rounds);
    for (int i = 0; i < 8; i++)
        vc_store32_le(out + 4 * i, o[i]);
    vc_wipe(st, sizeof st);
    vc_wipe(o, sizeof o);
}

VC_API int vc_hchacha20(uint8_t out[32], const uint8_t key[32], const uint8_t nonce[16], int rounds)
{
    if (!rounds_ok(rounds))
        return VC_ERR_ROUNDS;
    const vc_chacha_impl *c = vc_chacha_current();
    vc_note_kernels(c, NULL);
    hchacha(c, out, key, nonce, rounds);
    return VC_OK;
}

VC_API void vc_poly1305(uint8_t tag[16], const uint8_t *msg, size_t len, const uint8_t key[32])
{
    const vc_poly1305_impl *p = vc_poly1305_current();
    vc_note_kernels(NULL, p);
    vc_poly1305_state st;
    p->init(&st, key);
    p->update(&st, msg, len);
    p->final(&st, tag);
}

/* Tag over aad || pad16 || ct || pad16 || le64(aad_len) || le64(ct_len). */
static void aead_tag(const vc_poly1305_impl *p, uint8_t tag[16], const uint8_t otk[32],
                     const uint8_t *aad, size_t aad_len, const uint8_t *ct, size_t len)
{
    vc_poly1305_state st;
    uint8_t lens[16];
    p->init(&st, otk);
    if (aad_len) {
        p->update(&st, aad, aad_len);
        if (aad_len & 15)
            p->update(&st, zeros, 16 - (aad_len & 15));
    }
    if (len) {
        p->update(&st, ct, len);
        if (len & 15)
            p->update(&st, zeros, 16 - (len & 15));
    }
    vc_store64_le(lens, (uint64_t)aad_len);
    vc_store64_le(lens + 8, (uint64_t)len);
    p->update(&st, lens, 16);
    p->final(&st, tag);
}

/* Constant time: two 64-bit XORs folded into one word, no branch and no early
 * exit on the data (the empty asm hides the value from the optimizer, so it
 * cannot turn the fold into a comparison chain). */
static int tags_equal(const uint8_t a[16], const uint8_t b[16])
{
    uint64_t d = (vc_load64_le(a) ^ vc_load64_le(b)) | (vc_load64_le(a + 8) ^ vc_load64_le(b + 8));
    __asm__("" : "+r"(d));
    return (int)(1 & ((d - 1) >> 63 & ~d >> 63));
}

/* st: the initial state (any counter); wiped before returning. */
static int seal_core(kernels k, uint8_t *ct, uint8_t tag[16], const uint8_t *pt, size_t len,
                     const uint8_t *aad, size_t aad_len, uint32_t st[16])
{
    if (!counter_fits(1, len)) {
        vc_wipe(st, 64);
        return VC_ERR_LENGTH;
    }
    uint8_t otk[32];
    st[12] = 0;
    k.c->stream_otk(otk, ct, pt, len, st, 20);
    aead_tag(k.p, tag, otk, aad, aad_len, ct, len);
    vc_wipe(otk, sizeof otk);
    vc_wipe(st, 64);
    return VC_OK;
}

/* The most any kernel's stream_otk covers in its first pass (otk_span). */
#define OPEN_SCRATCH 960

/* Opening in one pass where the kernel can: its stream_otk makes the one-time
 * key and decrypts the first otk_span bytes into a stack scratch (L1-resident)
 * together, instead of a latency-bound call for the key block alone.  Poly1305
 * then runs over the ciphertext, and only when the tag matches (constant-time
 * comparison) does plaintext reach pt: the scratch is copied out and the rest
 * of the message, if any, is decrypted straight from ct (verify first).  So a
 * forged packet leaves pt zeroed (or, in place, the ciphertext untouched), and
 * the scratch is wiped either way.  st: wiped before returning. */
static int open_core(kernels k, uint8_t *pt, const uint8_t *ct, size_t len, const uint8_t tag[16],
                     const uint8_t *aad, size_t aad_len, uint32_t st[16])
{
    if (!counter_fits(1, len)) {
        vc_wipe(st, 64);
        return VC_ERR_LENGTH;
    }
    _Alignas(64) uint8_t scratch[OPEN_SCRATCH];
    uint8_t otk[32], want[16];
    size_t first = k.c->open_first ? k.c->open_first(len) : k.c->otk_span;
    if (first > OPEN_SCRATCH)
        first = OPEN_SCRATCH;
    if (first > len)
        first = len;
    st[12] = 0;
    k.c->stream_otk(otk, scratch, ct, first, st, 20);
    aead_tag(k.p, want, otk, aad, aad_len, ct, len);
    int ok = tags_equal(want, tag);
    if (ok) {
        memcpy(pt, scratch, first);
        if (len > first) {
            st[12] = 1 + (uint32_t)(first / 64);
            k.c->stream(pt + first, ct + first, len - first, st, 20);
        }
    } else if (pt != ct && len) {
        memset(pt, 0, len);
    }
    vc_wipe(scratch, first);
    vc_wipe(otk, sizeof otk);
    vc_wipe(want, sizeof want);
    vc_wipe(st, 64);
    return ok ? VC_OK : VC_ERR_AUTH;
}

/* XChaCha on the kernels in force, which it returns: st = the ChaCha20 state of
 * subkey = HChaCha20(key, nonce[0..16]) and nonce' = 0^4 || nonce[16..24]. */
static kernels xchacha_state(uint32_t st[16], const uint8_t key[32], const uint8_t nonce[24])
{
    kernels k = current_kernels();
    uint8_t subkey[32], n12[12] = {0};
    hchacha(k.c, subkey, key, nonce, 20);
    memcpy(n12 + 4, nonce + 16, 8);
    vc_chacha_init_state(st, subkey, 0, n12);
    vc_wipe(subkey, sizeof subkey);
    return k;
}

VC_API int vc_aead_seal(uint8_t *ct, uint8_t tag[16], const uint8_t *pt, size_t len,
                        const uint8_t *aad, size_t aad_len,
                        const uint8_t key[32], const uint8_t nonce[12])
{
    uint32_t st[16];
    vc_chacha_init_state(st, key, 0, nonce);
    return seal_core(current_kernels(), ct, tag, pt, len, aad, aad_len, st);
}

VC_API int vc_aead_open(uint8_t *pt, const uint8_t *ct, size_t len, const uint8_t tag[16],
                        const uint8_t *aad, size_t aad_len,
                        const uint8_t key[32], const uint8_t nonce[12])
{
    uint32_t st[16];
    vc_chacha_init_state(st, key, 0, nonce);
    return open_core(current_kernels(), pt, ct, len, tag, aad, aad_len, st);
}

VC_API int vc_xaead_seal(uint8_t *ct, uint8_t tag[16], const uint8_t *pt, size_t len,
                         const uint8_t *aad, size_t aad_len,
                         const uint8_t key[32], const uint8_t nonce[24])
{
    uint32_t st[16];
    kernels k = xchacha_state(st, key, nonce);
    return seal_core(k, ct, tag, pt, len, aad, aad_len, st);
}

VC_API int vc_xaead_open(uint8_t *pt, const uint8_t *ct, size_t len, const uint8_t tag[16],
                         const uint8_t *aad, size_t aad_len,
                         const uint8_t key[32], const uint8_t nonce[24])
{
    uint32_t st[16];
    kernels k = xchacha_state(st, key, nonce);
    return open_core(k, pt, ct, len, tag, aad, aad_len, st);
}

/* ---- attached tag: what a language binding wants ---- */

/* out = ciphertext || tag (len + 16 bytes) on the given kernels. */
VC_INLINE int seal_attached(kernels k, uint8_t *out, const uint8_t *pt, size_t len,
                            const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                            const uint8_t nonce[12])
{
    uint32_t st[16];
    vc_chacha_init_state(st, key, 0, nonce);
    return seal_core(k, out, out + len, pt, len, aad, aad_len, st);
}

/* sealed = ciphertext || tag (sealed_len >= 16) into sealed_len - 16 bytes of out. */
VC_INLINE int open_attached(kernels k, uint8_t *out, const uint8_t *sealed, size_t sealed_len,
                            const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                            const uint8_t nonce[12])
{
    if (sealed_len < 16)
        return VC_ERR_LENGTH;
    size_t len = sealed_len - 16;
    uint32_t st[16];
    vc_chacha_init_state(st, key, 0, nonce);
    return open_core(k, out, sealed, len, sealed + len, aad, aad_len, st);
}

VC_API int vc_aead_seal_attached(uint8_t *out, const uint8_t *pt, size_t len,
                                 const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                                 const uint8_t nonce[12])
{
    return seal_attached(current_kernels(), out, pt, len, aad, aad_len, key, nonce);
}

VC_API int vc_aead_open_attached(uint8_t *out, const uint8_t *sealed, size_t sealed_len,
                                 const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                                 const uint8_t nonce[12])
{
    return open_attached(current_kernels(), out, sealed, sealed_len, aad, aad_len, key, nonce);
}

VC_API int vc_xaead_seal_attached(uint8_t *out, const uint8_t *pt, size_t len,
                                  const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                                  const uint8_t nonce[24])
{
    return vc_xaead_seal(out, out + len, pt, len, aad, aad_len, key, nonce);
}

VC_API int vc_xaead_open_attached(uint8_t *out, const uint8_t *sealed, size_t sealed_len,
                                  const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                                  const uint8_t nonce[24])
{
    if (sealed_len < 16)
        return VC_ERR_LENGTH;
    size_t len = sealed_len - 16;
    return vc_xaead_open(out, sealed, len, sealed + len, aad, aad_len, key, nonce);
}

/* ---- batches: the kernels are read once per batch ---- */

/* One attached-tag operation on the given kernels; `open` is a constant at
 * every call site, so each batch below compiles to its own direct loop. */
VC_INLINE int attached(int open, kernels k, uint8_t *out, const uint8_t *in, size_t in_len,
                       const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                       const uint8_t nonce[12])
{
    return open ? open_attached(k, out, in, in_len, aad, aad_len, key, nonce)
                : seal_attached(k, out, in, in_len, aad, aad_len, key, nonce);
}

VC_INLINE size_t run_batch(int open, vc_aead_item *it, size_t n)
{
    kernels k = current_kernels();
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        it[i].status = attached(open, k, it[i].out, it[i].input, it[i].in_len, it[i].aad,
                                it[i].aad_len, it[i].key, it[i].nonce);
        ok += it[i].status == VC_OK;
    }
    return ok;
}

/* Packed: the messages one after another in `in`, their results one after
 * another in `out` (len + 16 bytes each sealing, len - 16 opening; nothing for
 * an opened message shorter than a tag). */
VC_INLINE size_t run_packed(int open, uint8_t *out, const uint8_t *in, const uint32_t *lens,
                            size_t n, const uint8_t *nonces, const uint8_t *aad, size_t aad_len,
                            const uint8_t key[32], int32_t *status)
{
    kernels k = current_kernels();
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = lens[i];
        status[i] = attached(open, k, out, in, len, aad, aad_len, key, nonces + 12 * i);
        ok += status[i] == VC_OK;
        if (!open)
            out += len + 16;
        else if (len >= 16)
            out += len - 16;
        in += len;
    }
    return ok;
}

VC_API size_t vc_aead_seal_batch(vc_aead_item *it, size_t n)
{
    return run_batch(0, it, n);
}

VC_API size_t vc_aead_open_batch(vc_aead_item *it, size_t n)
{
    return run_batch(1, it, n);
}

VC_API size_t vc_aead_seal_packed(uint8_t *out, const uint8_t *in, const uint32_t *lens, size_t n,
                                  const uint8_t *nonces, const uint8_t *aad, size_t aad_len,
                                  const uint8_t key[32], int32_t *status)
{
    return run_packed(0, out, in, lens, n, nonces, aad, aad_len, key, status);
}

VC_API size_t vc_aead_open_packed(uint8_t *out, const uint8_t *in, const uint32_t *lens, size_t n,
                                  const uint8_t *nonces, const uint8_t *aad, size_t aad_len,
                                  const uint8_t key[32], int32_t *status)
{
    return run_packed(1, out, in, lens, n, nonces, aad, aad_len, key, status);
}

/* ---- the one-shot table ---- */

static const struct vc_oneshot_api oneshot = {
    .abi = VC_ONESHOT_ABI,
    .size = sizeof(struct vc_oneshot_api),
    .seal = vc_aead_seal_attached,
    .open = vc_aead_open_attached,
    .xseal = vc_xaead_seal_attached,
    .xopen = vc_xaead_open_attached,
    .chacha20_xor = vc_chacha20_xor,
};

VC_API const vc_oneshot_api *vc_oneshot_table(void)
{
    return &oneshot;
}
