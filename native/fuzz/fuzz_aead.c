/* libFuzzer harness for the vpncrypt crypto API (vpncrypt.h).
 *
 * From one input it derives a key, a 24-byte nonce, a counter, a round count,
 * buffer misalignments, an AAD/message split and a tamper position, then, with
 * every ChaCha and every Poly1305 kernel this CPU can run, checks against the
 * generic kernels:
 *   - vc_chacha20_xor (8/12/20 rounds, any counter; VC_ERR_COUNTER exactly
 *     when the block counter would wrap) and vc_hchacha20;
 *   - vc_poly1305;
 *   - vc_aead_seal / vc_xaead_seal: same ciphertext and tag as generic;
 *     open round-trips; a flipped bit in ciphertext, tag or AAD gives
 *     VC_ERR_AUTH with the output zeroed; in-place seal and open give the
 *     same bytes as out-of-place; a failed in-place open leaves the buffer
 *     as it was;
 *   - the attached-tag and batch/packed forms agree with the one-shot form;
 *   - vc_nhpoly1305 (the 1088-byte key: the input's key stretched with the
 *     generic ChaCha) on every NH kernel equals the generic NH, and Adiantum
 *     (12 or 20 rounds, a tweak of tsel % 33 bytes) on every NH kernel equals
 *     the generic run, round-trips, and gives the same bytes in place.
 * Buffers are heap blocks that end exactly where the data ends (ASan catches
 * a read or write past them) and start at the derived misalignment.
 *
 * Input layout (missing bytes are zero):
 *   [0..32) key  [32..56) nonce (the first 12 bytes for ChaCha20)
 *   [56..60) counter  60 rounds sel  61 src/dst misalignment  62 aad-length sel
 *   63 tamper sel  [64..68) tamper position  [68..96) reserved  [96..) data
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vpncrypt.h"

#define HDR 96

static void fail(const char *what, int ci, int pi, size_t len)
{
    fprintf(stderr, "fuzz_aead: %s (chacha=%s poly=%s len=%zu)\n", what,
            ci >= 0 ? vc_chacha_impl_name(ci) : "-", pi >= 0 ? vc_poly1305_impl_name(pi) : "-", len);
    abort();
}

#define CHECK(cond, what) do { if (!(cond)) fail(what, ci, pi, len); } while (0)

/* A block of n bytes starting `mis` bytes into its allocation, ending exactly at
 * the allocation's end. */
typedef struct { uint8_t *base, *p; } buf_t;
static buf_t balloc(size_t n, unsigned mis)
{
    buf_t b;
    b.base = malloc(n + mis ? n + mis : 1);
    if (!b.base) abort();
    b.p = b.base + mis;
    return b;
}
static void bfree(buf_t b) { free(b.base); }

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int zeroed(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) if (p[i]) return 0;
    return 1;
}

static void select_kernels(int ci, int pi)
{
    if (vc_chacha_impl_select(ci) != VC_OK || vc_poly1305_impl_select(pi) != VC_OK) abort();
}

/* NHPoly1305 and Adiantum on every NH kernel against the generic one. */
static void wide_block(const uint8_t key[32], const uint8_t *tw, const uint8_t *msg, size_t len,
                       int rounds, unsigned tsel)
{
    int ci = -1, pi = -1, n0 = vc_nh_impl_active(), nn = vc_nh_impl_count();
    uint8_t nhkey[1088] = {0}, zero12[12] = {0}, ref[16], h[16];
    vc_chacha20_xor(nhkey, nhkey, sizeof nhkey, key, zero12, 0, 20);
    size_t tl = tsel % 33 > 24 ? 24 : tsel % 33;    /* the tweak: bytes of the nonce field */
    vc_nh_impl_select(0);
    vc_nhpoly1305(ref, msg, len, nhkey);
    int ad = len >= 16 && vc_adiantum_aes_available();
    vc_adiantum_key *k = calloc(1, sizeof *k);
    buf_t ct = balloc(len, 0), back = balloc(len, 0), inplace = balloc(len, 0);
    if (!k) abort();
    CHECK(vc_adiantum_setkey(k, key, rounds) == VC_OK, "adiantum setkey failed");
    if (ad)
        CHECK(vc_adiantum_encrypt(k, ct.p, msg, len, tw, tl) == VC_OK, "generic adiantum failed");
    for (int i = 0; i < nn; i++) {
        if (vc_nh_impl_select(i) != VC_OK) continue;
        vc_nhpoly1305(h, msg, len, nhkey);
        CHECK(memcmp(h, ref, 16) == 0, "nhpoly1305 differs from the generic NH");
        if (!ad) continue;
        CHECK(vc_adiantum_encrypt(k, back.p, msg, len, tw, tl) == VC_OK
              && memcmp(back.p, ct.p, len) == 0, "adiantum differs from the generic NH");
        CHECK(vc_adiantum_decrypt(k, back.p, ct.p, len, tw, tl) == VC_OK
              && memcmp(back.p, msg, len) == 0, "adiantum does not round-trip");
        memcpy(inplace.p, msg, len);
        CHECK(vc_adiantum_encrypt(k, inplace.p, inplace.p, len, tw, tl) == VC_OK
              && memcmp(inplace.p, ct.p, len) == 0, "in-place adiantum differs");
    }
    if (len < 16)
        CHECK(vc_adiantum_encrypt(k, back.p, msg, len, tw, tl) == VC_ERR_LENGTH, "short adiantum");
    vc_adiantum_wipe(k);
    free(k);
    bfree(inplace); bfree(back); bfree(ct);
    vc_nh_impl_select(n0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t hdr[HDR] = {0};
    memcpy(hdr, data, size < HDR ? size : HDR);
    const uint8_t *body = size > HDR ? data + HDR : data + size;
    size_t blen = size > HDR ? size - HDR : 0;
    const uint8_t *key = hdr, *nonce = hdr + 32;
    uint32_t counter = le32(hdr + 56);
    uint8_t rsel = hdr[60], mis = hdr[61], asel = hdr[62], tsel = hdr[63];
    uint32_t tpos = le32(hdr + 64);
    static const int rounds_tab[4] = {20, 12, 8, 20};
    int rounds = (rsel & 0x80) ? (int)(rsel & 31) : rounds_tab[rsel & 3];
    /* counters near the top exercise the wrap check */
    if (rsel & 0x40) counter = 0xFFFFFFFFu - (counter & 0x3F);
    unsigned smis = mis & 63, dmis = (mis >> 3) & 63;
    size_t aad_len = blen ? (size_t)asel * blen / 256 : 0;
    const uint8_t *aad = body;
    const uint8_t *msg = body + aad_len;
    size_t len = blen - aad_len;
    int ci = -1, pi = -1;

    int nc = vc_chacha_impl_count(), np = vc_poly1305_impl_count();
    int c0 = vc_chacha_impl_active(), p0 = vc_poly1305_impl_active();

    /* references from the generic kernels */
    select_kernels(0, 0);
    buf_t src = balloc(len, smis);
    memcpy(src.p, msg, len);
    buf_t aadb = balloc(aad_len, 0);
    memcpy(aadb.p, aad, aad_len);
    buf_t ref_x = balloc(len, 0), ref_ct = balloc(len, 0), ref_xct = balloc(len, 0);
    uint8_t ref_tag[16], ref_xtag[16], ref_mac[16], ref_h[32];
    int ref_xrc = vc_chacha20_xor(ref_x.p, src.p, len, key, nonce, counter, rounds);
    int ref_hrc = vc_hchacha20(ref_h, key, nonce, rounds);
    vc_poly1305(ref_mac, src.p, len, key);
    CHECK(vc_aead_seal(ref_ct.p, ref_tag, src.p, len, aadb.p, aad_len, key, nonce) == VC_OK,
          "generic seal failed");
    CHECK(vc_xaead_seal(ref_xct.p, ref_xtag, src.p, len, aadb.p, aad_len, key, nonce) == VC_OK,
          "generic xseal failed");
    {
        uint64_t blocks = ((uint64_t)len + 63) / 64;
        int want = (rounds != 8 && rounds != 12 && rounds != 20) ? VC_ERR_ROUNDS
                 : blocks > 0x100000000ULL - counter ? VC_ERR_COUNTER : VC_OK;
        CHECK(ref_xrc == want, "chacha20_xor status");
        CHECK(ref_hrc == (want == VC_ERR_ROUNDS ? VC_ERR_ROUNDS : VC_OK), "hchacha20 status");
    }

    for (ci = 0; ci < nc; ci++) {
        if (!vc_chacha_impl_available(ci)) continue;
        /* the stream and hchacha with each ChaCha kernel */
        pi = 0;
        select_kernels(ci, 0);
        buf_t x = balloc(len, dmis);
        int rc = vc_chacha20_xor(x.p, src.p, len, key, nonce, counter, rounds);
        CHECK(rc == ref_xrc, "chacha20_xor status differs from generic");
        if (rc == VC_OK) CHECK(!len || memcmp(x.p, ref_x.p, len) == 0, "chacha20_xor differs from generic");
        /* in place */
        buf_t ip = balloc(len, smis);
        memcpy(ip.p, src.p, len);
        rc = vc_chacha20_xor(ip.p, ip.p, len, key, nonce, counter, rounds);
        if (rc == VC_OK) CHECK(!len || memcmp(ip.p, ref_x.p, len) == 0, "in-place chacha20_xor differs");
        bfree(ip);
        bfree(x);
        uint8_t h[32];
        CHECK(vc_hchacha20(h, key, nonce, rounds) == ref_hrc, "hchacha20 status differs");
        if (ref_hrc == VC_OK) CHECK(memcmp(h, ref_h, 32) == 0, "hchacha20 differs from generic");

        for (pi = 0; pi < np; pi++) {
            if (!vc_poly1305_impl_available(pi)) continue;
            select_kernels(ci, pi);
            if (ci == 0) {
                uint8_t mac[16];
                vc_poly1305(mac, src.p, len, key);
                CHECK(memcmp(mac, ref_mac, 16) == 0, "poly1305 differs from generic");
            }
            for (int xn = 0; xn < 2; xn++) {
                int (*seal)(uint8_t *, uint8_t *, const uint8_t *, size_t, const uint8_t *, size_t,
                            const uint8_t *, const uint8_t *) = xn ? vc_xaead_seal : vc_aead_seal;
                int (*open)(uint8_t *, const uint8_t *, size_t, const uint8_t *, const uint8_t *, size_t,
                            const uint8_t *, const uint8_t *) = xn ? vc_xaead_open : vc_aead_open;
                const uint8_t *rct = xn ? ref_xct.p : ref_ct.p, *rtag = xn ? ref_xtag : ref_tag;
                buf_t ct = balloc(len, dmis);
                uint8_t tag[16];
                CHECK(seal(ct.p, tag, src.p, len, aadb.p, aad_len, key, nonce) == VC_OK, "seal failed");
                CHECK((!len || memcmp(ct.p, rct, len) == 0) && memcmp(tag, rtag, 16) == 0,
                      "seal differs from generic");
                /* open round-trips */
                buf_t pt = balloc(len, smis);
                CHECK(open(pt.p, ct.p, len, tag, aadb.p, aad_len, key, nonce) == VC_OK, "open failed");
                CHECK(!len || memcmp(pt.p, src.p, len) == 0, "open does not round-trip");
                /* in-place seal and open */
                buf_t io = balloc(len, smis);
                memcpy(io.p, src.p, len);
                uint8_t tag2[16];
                CHECK(seal(io.p, tag2, io.p, len, aadb.p, aad_len, key, nonce) == VC_OK, "in-place seal failed");
                CHECK((!len || memcmp(io.p, rct, len) == 0) && memcmp(tag2, rtag, 16) == 0,
                      "in-place seal differs");
                CHECK(open(io.p, io.p, len, tag2, aadb.p, aad_len, key, nonce) == VC_OK, "in-place open failed");
                CHECK(!len || memcmp(io.p, src.p, len) == 0, "in-place open does not round-trip");
                /* tamper: one bit of ciphertext, tag or aad */
                size_t span = len + 16 + aad_len;
                size_t at = tpos % span;
                uint8_t bit = (uint8_t)(1u << (tsel & 7));
                buf_t tct = balloc(len, dmis);
                memcpy(tct.p, ct.p, len);
                uint8_t ttag[16];
                memcpy(ttag, tag, 16);
                buf_t taad = balloc(aad_len, 0);
                memcpy(taad.p, aadb.p, aad_len);
                if (at < len) tct.p[at] ^= bit;
                else if (at < len + 16) ttag[at - len] ^= bit;
                else taad.p[at - len - 16] ^= bit;
                memset(pt.p, 0xA5, len);
                CHECK(open(pt.p, tct.p, len, ttag, taad.p, aad_len, key, nonce) == VC_ERR_AUTH,
                      "tampered message opened");
                CHECK(zeroed(pt.p, len), "failed open left output not zeroed");
                /* a failed in-place open leaves the ciphertext as it was */
                memcpy(io.p, tct.p, len);
                CHECK(open(io.p, io.p, len, ttag, taad.p, aad_len, key, nonce) == VC_ERR_AUTH,
                      "tampered message opened in place");
                CHECK(!len || memcmp(io.p, tct.p, len) == 0, "failed in-place open changed the buffer");
                /* wrong key */
                uint8_t k2[32];
                memcpy(k2, key, 32);
                k2[tsel & 31] ^= bit;
                CHECK(open(pt.p, ct.p, len, tag, aadb.p, aad_len, k2, nonce) == VC_ERR_AUTH,
                      "opened with the wrong key");
                bfree(taad); bfree(tct); bfree(io); bfree(pt);

                /* attached-tag form agrees */
                buf_t att = balloc(len + 16, dmis);
                CHECK((xn ? vc_xaead_seal_attached : vc_aead_seal_attached)(
                          att.p, src.p, len, aadb.p, aad_len, key, nonce) == VC_OK,
                      "seal_attached failed");
                CHECK((!len || memcmp(att.p, rct, len) == 0) && memcmp(att.p + len, rtag, 16) == 0,
                      "seal_attached differs");
                buf_t back = balloc(len, 0);
                CHECK((xn ? vc_xaead_open_attached : vc_aead_open_attached)(
                          back.p, att.p, len + 16, aadb.p, aad_len, key, nonce) == VC_OK,
                      "open_attached failed");
                CHECK(!len || memcmp(back.p, src.p, len) == 0, "open_attached does not round-trip");
                bfree(back); bfree(att);
                bfree(ct);
            }
            /* batch and packed forms (ChaCha20-Poly1305 only): split the message in two */
            {
                size_t l1 = len / 3, l2 = len - l1;
                uint8_t n2[24];
                memcpy(n2, nonce, 12);
                memcpy(n2 + 12, nonce, 12);
                n2[12] ^= 1;
                buf_t out = balloc(len + 32, 0);
                uint32_t lens[2] = {(uint32_t)l1, (uint32_t)l2};
                int32_t st[2];
                CHECK(vc_aead_seal_packed(out.p, src.p, lens, 2, n2, aadb.p, aad_len, key, st) == 2,
                      "seal_packed failed");
                uint8_t t1[16];
                buf_t one = balloc(l1, 0);
                vc_aead_seal(one.p, t1, src.p, l1, aadb.p, aad_len, key, n2);
                CHECK((!l1 || memcmp(out.p, one.p, l1) == 0) && memcmp(out.p + l1, t1, 16) == 0,
                      "seal_packed differs from seal");
                buf_t back = balloc(len, 0);
                uint32_t slens[2] = {(uint32_t)l1 + 16, (uint32_t)l2 + 16};
                CHECK(vc_aead_open_packed(back.p, out.p, slens, 2, n2, aadb.p, aad_len, key, st) == 2,
                      "open_packed failed");
                CHECK(!len || memcmp(back.p, src.p, len) == 0, "open_packed does not round-trip");
                vc_aead_item it[2] = {
                    {key, n2, aadb.p, aad_len, out.p, l1 + 16, back.p, 0},
                    {key, n2 + 12, aadb.p, aad_len, out.p + l1 + 16, l2 + 16, back.p + l1, 0},
                };
                out.p[(tpos % (l2 + 16)) + l1 + 16] ^= 1;   /* the second one is forged */
                CHECK(vc_aead_open_batch(it, 2) == 1 && it[0].status == VC_OK
                      && it[1].status == VC_ERR_AUTH, "open_batch statuses");
                CHECK(zeroed(back.p + l1, l2), "open_batch left a forged output not zeroed");
                bfree(back); bfree(one); bfree(out);
            }
        }
        pi = -1;
    }
    bfree(ref_xct); bfree(ref_ct); bfree(ref_x); bfree(aadb); bfree(src);
    select_kernels(c0, p0);
    wide_block(key, nonce, msg, len, rounds == 20 ? 20 : 12, tsel);
    return 0;
}
