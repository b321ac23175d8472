/* ChaCha20-Poly1305 (RFC 8439 section 2.8) and XChaCha20-Poly1305
 * (draft-irtf-cfrg-xchacha), one packet or a batch per call. */
#include "vc_internal.h"

static const uint8_t zeros[16];

static int counter_fits(uint32_t counter, size_t len) {
    uint64_t blocks = ((uint64_t)len + 63) / 64;
    return blocks <= (uint64_t)0x100000000ULL - counter;
}

int vc_chacha20_xor(uint8_t *dst, const uint8_t *src, size_t len,
                    const uint8_t key[32], const uint8_t nonce[12],
                    uint32_t counter, int rounds) {
    if (rounds != 20 && rounds != 12 && rounds != 8) return VC_ERR_ROUNDS;
    if (!counter_fits(counter, len)) return VC_ERR_COUNTER;
    uint32_t st[16];
    vc_chacha_init_state(st, key, counter, nonce);
    vc_chacha_current()->stream(dst, src, len, st, rounds);
    vc_wipe(st, sizeof st);
    return VC_OK;
}

int vc_hchacha20(uint8_t out[32], const uint8_t key[32], const uint8_t nonce[16], int rounds) {
    if (rounds != 20 && rounds != 12 && rounds != 8) return VC_ERR_ROUNDS;
    uint32_t st[16], o[8];
    /* HChaCha: the nonce takes the counter word and the three nonce words. */
    vc_chacha_init_state(st, key, vc_load32_le(nonce), nonce + 4);
    const vc_chacha_impl *impl = vc_chacha_current();
    (impl->hchacha ? impl->hchacha : vc_hchacha_generic)(o, st, rounds);
    for (int i = 0; i < 8; i++) vc_store32_le(out + 4 * i, o[i]);
    vc_wipe(st, sizeof st);
    vc_wipe(o, sizeof o);
    return VC_OK;
}

void vc_poly1305(uint8_t tag[16], const uint8_t *msg, size_t len, const uint8_t key[32]) {
    const vc_poly1305_impl *p = vc_poly1305_current();
    vc_poly1305_state st;
    p->init(&st, key);
    p->update(&st, msg, len);
    p->final(&st, tag);
}

/* Tag over aad || pad16 || ct || pad16 || le64(aad_len) || le64(ct_len). */
static void aead_tag(uint8_t tag[16], const uint8_t otk[32], const uint8_t *aad, size_t aad_len,
                     const uint8_t *ct, size_t len) {
    const vc_poly1305_impl *p = vc_poly1305_current();
    vc_poly1305_state st;
    uint8_t lens[16];
    p->init(&st, otk);
    if (aad_len) {
        p->update(&st, aad, aad_len);
        if (aad_len & 15) p->update(&st, zeros, 16 - (aad_len & 15));
    }
    if (len) {
        p->update(&st, ct, len);
        if (len & 15) p->update(&st, zeros, 16 - (len & 15));
    }
    vc_store64_le(lens, (uint64_t)aad_len);
    vc_store64_le(lens + 8, (uint64_t)len);
    p->update(&st, lens, 16);
    p->final(&st, tag);
}

static int tags_equal(const uint8_t a[16], const uint8_t b[16]) {
    volatile uint8_t d = 0;
    for (int i = 0; i < 16; i++) d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
}

/* One-time Poly1305 key: the first 32 bytes of block 0. */
static void one_time_key(uint8_t otk[32], const vc_chacha_impl *impl, uint32_t st[16]) {
    memset(otk, 0, 32);
    st[12] = 0;
    impl->stream(otk, otk, 32, st, 20);
    st[12] = 1;
}

static int seal_with_state(uint8_t *ct, uint8_t tag[16], const uint8_t *pt, size_t len,
                           const uint8_t *aad, size_t aad_len, uint32_t st[16]) {
    if (!counter_fits(1, len)) return VC_ERR_LENGTH;
    const vc_chacha_impl *impl = vc_chacha_current();
    uint8_t otk[32];
    if (impl->stream_otk) {
        st[12] = 0;
        impl->stream_otk(otk, ct, pt, len, st, 20);
    } else {
        one_time_key(otk, impl, st);
        impl->stream(ct, pt, len, st, 20);
    }
    aead_tag(tag, otk, aad, aad_len, ct, len);
    vc_wipe(otk, sizeof otk);
    vc_wipe(st, 64);
    return VC_OK;
}

static int open_with_state(uint8_t *pt, const uint8_t *ct, size_t len, const uint8_t tag[16],
                           const uint8_t *aad, size_t aad_len, uint32_t st[16]) {
    if (!counter_fits(1, len)) return VC_ERR_LENGTH;
    const vc_chacha_impl *impl = vc_chacha_current();
    uint8_t otk[32], want[16];
    one_time_key(otk, impl, st);
    aead_tag(want, otk, aad, aad_len, ct, len);
    vc_wipe(otk, sizeof otk);
    int ok = tags_equal(want, tag);
    if (ok) {
        impl->stream(pt, ct, len, st, 20);
    } else if (pt != ct && len) {
        memset(pt, 0, len);
    }
    vc_wipe(st, 64);
    return ok ? VC_OK : VC_ERR_AUTH;
}

int vc_aead_seal(uint8_t *ct, uint8_t tag[16], const uint8_t *pt, size_t len,
                 const uint8_t *aad, size_t aad_len,
                 const uint8_t key[32], const uint8_t nonce[12]) {
    uint32_t st[16];
    vc_chacha_init_state(st, key, 0, nonce);
    return seal_with_state(ct, tag, pt, len, aad, aad_len, st);
}

int vc_aead_open(uint8_t *pt, const uint8_t *ct, size_t len, const uint8_t tag[16],
                 const uint8_t *aad, size_t aad_len,
                 const uint8_t key[32], const uint8_t nonce[12]) {
    uint32_t st[16];
    vc_chacha_init_state(st, key, 0, nonce);
    return open_with_state(pt, ct, len, tag, aad, aad_len, st);
}

/* XChaCha: subkey = HChaCha20(key, nonce[0..16]); nonce' = 0^4 || nonce[16..24]. */
static void xchacha_state(uint32_t st[16], const uint8_t key[32], const uint8_t nonce[24]) {
    uint8_t subkey[32], n12[12] = {0};
    vc_hchacha20(subkey, key, nonce, 20);
    memcpy(n12 + 4, nonce + 16, 8);
    vc_chacha_init_state(st, subkey, 0, n12);
    vc_wipe(subkey, sizeof subkey);
}

int vc_xaead_seal(uint8_t *ct, uint8_t tag[16], const uint8_t *pt, size_t len,
                  const uint8_t *aad, size_t aad_len,
                  const uint8_t key[32], const uint8_t nonce[24]) {
    uint32_t st[16];
    xchacha_state(st, key, nonce);
    return seal_with_state(ct, tag, pt, len, aad, aad_len, st);
}

int vc_xaead_open(uint8_t *pt, const uint8_t *ct, size_t len, const uint8_t tag[16],
                  const uint8_t *aad, size_t aad_len,
                  const uint8_t key[32], const uint8_t nonce[24]) {
    uint32_t st[16];
    xchacha_state(st, key, nonce);
    return open_with_state(pt, ct, len, tag, aad, aad_len, st);
}

int vc_aead_seal_attached(uint8_t *out, const uint8_t *pt, size_t len,
                          const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                          const uint8_t nonce[12]) {
    return vc_aead_seal(out, out + len, pt, len, aad, aad_len, key, nonce);
}

int vc_aead_open_attached(uint8_t *out, const uint8_t *sealed, size_t sealed_len,
                          const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                          const uint8_t nonce[12]) {
    if (sealed_len < 16) return VC_ERR_LENGTH;
    size_t len = sealed_len - 16;
    return vc_aead_open(out, sealed, len, sealed + len, aad, aad_len, key, nonce);
}

int vc_xaead_seal_attached(uint8_t *out, const uint8_t *pt, size_t len,
                           const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                           const uint8_t nonce[24]) {
    return vc_xaead_seal(out, out + len, pt, len, aad, aad_len, key, nonce);
}

int vc_xaead_open_attached(uint8_t *out, const uint8_t *sealed, size_t sealed_len,
                           const uint8_t *aad, size_t aad_len, const uint8_t key[32],
                           const uint8_t nonce[24]) {
    if (sealed_len < 16) return VC_ERR_LENGTH;
    size_t len = sealed_len - 16;
    return vc_xaead_open(out, sealed, len, sealed + len, aad, aad_len, key, nonce);
}

int vc_aead_seal_noad(uint8_t *out, const uint8_t *pt, size_t len, const uint8_t key[32],
                      const uint8_t nonce[12]) {
    return vc_aead_seal_attached(out, pt, len, NULL, 0, key, nonce);
}

int vc_aead_open_noad(uint8_t *out, const uint8_t *sealed, size_t sealed_len,
                      const uint8_t key[32], const uint8_t nonce[12]) {
    return vc_aead_open_attached(out, sealed, sealed_len, NULL, 0, key, nonce);
}

int vc_xaead_seal_noad(uint8_t *out, const uint8_t *pt, size_t len, const uint8_t key[32],
                       const uint8_t nonce[24]) {
    return vc_xaead_seal_attached(out, pt, len, NULL, 0, key, nonce);
}

int vc_xaead_open_noad(uint8_t *out, const uint8_t *sealed, size_t sealed_len,
                       const uint8_t key[32], const uint8_t nonce[24]) {
    return vc_xaead_open_attached(out, sealed, sealed_len, NULL, 0, key, nonce);
}

size_t vc_aead_seal_batch(vc_aead_item *it, size_t n) {
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        it[i].status = vc_aead_seal(it[i].out, it[i].out + it[i].in_len, it[i].input, it[i].in_len,
                                    it[i].aad, it[i].aad_len, it[i].key, it[i].nonce);
        ok += it[i].status == VC_OK;
    }
    return ok;
}

size_t vc_aead_open_batch(vc_aead_item *it, size_t n) {
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        if (it[i].in_len < 16) { it[i].status = VC_ERR_LENGTH; continue; }
        size_t len = it[i].in_len - 16;
        it[i].status = vc_aead_open(it[i].out, it[i].input, len, it[i].input + len, it[i].aad,
                                    it[i].aad_len, it[i].key, it[i].nonce);
        ok += it[i].status == VC_OK;
    }
    return ok;
}

size_t vc_aead_seal_packed(uint8_t *out, const uint8_t *in, const uint32_t *lens, size_t n,
                           const uint8_t *nonces, const uint8_t *aad, size_t aad_len,
                           const uint8_t key[32], int32_t *status) {
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = lens[i];
        status[i] = vc_aead_seal(out, out + len, in, len, aad, aad_len, key, nonces + 12 * i);
        ok += status[i] == VC_OK;
        in += len;
        out += len + 16;
    }
    return ok;
}

size_t vc_aead_open_packed(uint8_t *out, const uint8_t *in, const uint32_t *lens, size_t n,
                           const uint8_t *nonces, const uint8_t *aad, size_t aad_len,
                           const uint8_t key[32], int32_t *status) {
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = lens[i];
        if (len < 16) {
            status[i] = VC_ERR_LENGTH;
        } else {
            status[i] = vc_aead_open(out, in, len - 16, in + len - 16, aad, aad_len, key,
                                     nonces + 12 * i);
            ok += status[i] == VC_OK;
            out += len - 16;
        }
        in += len;
    }
    return ok;
}
