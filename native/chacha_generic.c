/* Portable ChaCha (RFC 8439), the reference that every SIMD kernel is tested against. */
#include "vc_internal.h"

#define ROTL32(v, n) (((v) << (n)) | ((v) >> (32 - (n))))
#define QR(a, b, c, d)                                   \
    a += b; d ^= a; d = ROTL32(d, 16);                   \
    c += d; b ^= c; b = ROTL32(b, 12);                   \
    a += b; d ^= a; d = ROTL32(d, 8);                    \
    c += d; b ^= c; b = ROTL32(b, 7)

static void chacha_permute(uint32_t x[16], int rounds)
{
    for (int i = 0; i < rounds; i += 2) {
        QR(x[0], x[4], x[8], x[12]);
        QR(x[1], x[5], x[9], x[13]);
        QR(x[2], x[6], x[10], x[14]);
        QR(x[3], x[7], x[11], x[15]);
        QR(x[0], x[5], x[10], x[15]);
        QR(x[1], x[6], x[11], x[12]);
        QR(x[2], x[7], x[8], x[13]);
        QR(x[3], x[4], x[9], x[14]);
    }
}

void vc_chacha_init_state(uint32_t s[16], const uint8_t key[32], uint32_t counter,
                          const uint8_t nonce[12])
{
    s[0] = 0x61707865; s[1] = 0x3320646e; s[2] = 0x79622d32; s[3] = 0x6b206574;
    for (int i = 0; i < 8; i++) s[4 + i] = vc_load32_le(key + 4 * i);
    s[12] = counter;
    for (int i = 0; i < 3; i++) s[13 + i] = vc_load32_le(nonce + 4 * i);
}

/* Keystream block `counter` of state into ks (feed-forward done). */
static void block(uint32_t ks[16], const uint32_t state[16], uint32_t counter, int rounds)
{
    memcpy(ks, state, 64);
    ks[12] = counter;
    chacha_permute(ks, rounds);
    for (int w = 0; w < 16; w++)
        ks[w] += w == 12 ? counter : state[w];
}

void vc_chacha_stream_generic(uint8_t *dst, const uint8_t *src, size_t len,
                              const uint32_t state[16], int rounds)
{
    uint32_t ks[16];
    uint32_t counter = state[12];
    while (len > 0) {
        block(ks, state, counter, rounds);
        size_t n = len < 64 ? len : 64;
        for (size_t b = 0; b < n; b++)
            dst[b] = (uint8_t)(src[b] ^ (uint8_t)(ks[b / 4] >> (8 * (b % 4))));
        counter++;
        src += n; dst += n; len -= n;
    }
    vc_wipe(ks, sizeof ks);
}

/* The key block, then the data from the next block on (one block at a time
 * either way: this kernel has no wider pass to fold the key block into). */
static void chacha_generic_stream_otk(uint8_t otk[32], uint8_t *dst, const uint8_t *src,
                                      size_t len, const uint32_t state[16], int rounds)
{
    uint32_t ks[16], next[16];
    block(ks, state, state[12], rounds);
    for (int w = 0; w < 8; w++)
        vc_store32_le(otk + 4 * w, ks[w]);
    memcpy(next, state, sizeof next);
    next[12] = state[12] + 1;
    vc_chacha_stream_generic(dst, src, len, next, rounds);
    vc_wipe(ks, sizeof ks);
    vc_wipe(next, sizeof next);
}

void vc_hchacha_generic(uint32_t out[8], const uint32_t state[16], int rounds)
{
    uint32_t x[16];
    memcpy(x, state, sizeof x);
    chacha_permute(x, rounds);
    for (int i = 0; i < 4; i++) {
        out[i] = x[i];
        out[4 + i] = x[12 + i];
    }
    vc_wipe(x, sizeof x);
}

const vc_chacha_impl vc_chacha_generic_impl = {
    .name = "generic", .stream = vc_chacha_stream_generic, .hchacha = vc_hchacha_generic,
    .stream_otk = chacha_generic_stream_otk, .otk_span = 64,
};
