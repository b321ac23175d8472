/* BLAKE2s (RFC 7693), the hash of WireGuard's Noise construction, for the
 * session table's cheap checks of handshake messages (mac1, mac2, cookies)
 * and its random generator.  One-shot only: every input here is a few
 * hundred bytes at most.  Not part of the cffi API (see wg_internal.h). */
#include "wg_internal.h"

static const uint32_t IV[8] = {
    0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au,
    0x510E527Fu, 0x9B05688Cu, 0x1F83D9ABu, 0x5BE0CD19u,
};

static const uint8_t SIGMA[10][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
};

static inline uint32_t ror32(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

#define G(a, b, c, d, x, y) do {                              \
        v[a] = v[a] + v[b] + (x); v[d] = ror32(v[d] ^ v[a], 16); \
        v[c] = v[c] + v[d];       v[b] = ror32(v[b] ^ v[c], 12); \
        v[a] = v[a] + v[b] + (y); v[d] = ror32(v[d] ^ v[a], 8);  \
        v[c] = v[c] + v[d];       v[b] = ror32(v[b] ^ v[c], 7);  \
    } while (0)

static void compress(uint32_t h[8], const uint8_t block[64], uint64_t counter, int last)
{
    uint32_t m[16], v[16];
    for (int i = 0; i < 16; i++)
        m[i] = vc_load32_le(block + 4 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = IV[i];
    }
    v[12] ^= (uint32_t)counter;
    v[13] ^= (uint32_t)(counter >> 32);
    if (last)
        v[14] = ~v[14];
    for (int r = 0; r < 10; r++) {
        const uint8_t *s = SIGMA[r];
        G(0, 4, 8, 12, m[s[0]], m[s[1]]);
        G(1, 5, 9, 13, m[s[2]], m[s[3]]);
        G(2, 6, 10, 14, m[s[4]], m[s[5]]);
        G(3, 7, 11, 15, m[s[6]], m[s[7]]);
        G(0, 5, 10, 15, m[s[8]], m[s[9]]);
        G(1, 6, 11, 12, m[s[10]], m[s[11]]);
        G(2, 7, 8, 13, m[s[12]], m[s[13]]);
        G(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++)
        h[i] ^= v[i] ^ v[i + 8];
    vc_wipe(m, sizeof m);
    vc_wipe(v, sizeof v);
}

/* out = BLAKE2s(in) with outlen 1..32 bytes and an optional key of up to 32
 * bytes: HASH is (32, no key), WireGuard's MAC is (16, key). */
void wg_blake2s(uint8_t *out, size_t outlen, const uint8_t *key, size_t keylen,
                const uint8_t *in, size_t inlen)
{
    uint32_t h[8];
    uint8_t block[64];
    uint64_t counter = 0;
    memcpy(h, IV, sizeof h);
    h[0] ^= 0x01010000u ^ ((uint32_t)keylen << 8) ^ (uint32_t)outlen;
    if (keylen) {
        memset(block, 0, sizeof block);
        memcpy(block, key, keylen);
        counter = 64;
        if (!inlen) {
            compress(h, block, counter, 1);
            goto done;
        }
        compress(h, block, counter, 0);
    }
    while (inlen > 64) {
        counter += 64;
        compress(h, in, counter, 0);
        in += 64;
        inlen -= 64;
    }
    memset(block, 0, sizeof block);
    memcpy(block, in, inlen);
    counter += inlen;
    compress(h, block, counter, 1);
done:;
    uint8_t full[32];
    for (int i = 0; i < 8; i++)
        vc_store32_le(full + 4 * i, h[i]);
    memcpy(out, full, outlen);
    vc_wipe(full, sizeof full);
    vc_wipe(h, sizeof h);
    vc_wipe(block, sizeof block);
}
