/* Portable 64-bit Poly1305 (RFC 8439 section 2.5): radix 2^44 limbs, 128-bit products. */
#include "vc_internal.h"

typedef unsigned __int128 u128;

typedef struct {
    uint64_t r[3], s[2];    /* r in 44/44/42-bit limbs; s = key[16..31] */
    uint64_t h[3];
    uint64_t pad[2];
    uint8_t  buf[16];
    size_t   buf_len;
} poly_generic;

_Static_assert(sizeof(poly_generic) <= sizeof(vc_poly1305_state), "state too small");

#define M44 0xfffffffffffULL
#define M42 0x3ffffffffffULL

static void pg_init(vc_poly1305_state *st, const uint8_t key[32]) {
    poly_generic *p = (poly_generic *)st->opaque;
    uint64_t t0 = vc_load64_le(key), t1 = vc_load64_le(key + 8);
    /* clamp */
    t0 &= 0x0ffffffc0fffffffULL;
    t1 &= 0x0ffffffc0ffffffcULL;
    p->r[0] = t0 & M44;
    p->r[1] = ((t0 >> 44) | (t1 << 20)) & M44;
    p->r[2] = (t1 >> 24) & M42;
    p->s[0] = vc_load64_le(key + 16);
    p->s[1] = vc_load64_le(key + 24);
    p->h[0] = p->h[1] = p->h[2] = 0;
    p->buf_len = 0;
}

static void pg_blocks(poly_generic *p, const uint8_t *m, size_t nblocks, uint64_t hibit) {
    uint64_t r0 = p->r[0], r1 = p->r[1], r2 = p->r[2];
    uint64_t s1 = r1 * (5 << 2), s2 = r2 * (5 << 2);
    uint64_t h0 = p->h[0], h1 = p->h[1], h2 = p->h[2];
    while (nblocks--) {
        uint64_t t0 = vc_load64_le(m), t1 = vc_load64_le(m + 8);
        h0 += t0 & M44;
        h1 += ((t0 >> 44) | (t1 << 20)) & M44;
        h2 += ((t1 >> 24) & M42) | (hibit << 40);
        u128 d0 = (u128)h0 * r0 + (u128)h1 * s2 + (u128)h2 * s1;
        u128 d1 = (u128)h0 * r1 + (u128)h1 * r0 + (u128)h2 * s2;
        u128 d2 = (u128)h0 * r2 + (u128)h1 * r1 + (u128)h2 * r0;
        uint64_t c;
        c = (uint64_t)(d0 >> 44); h0 = (uint64_t)d0 & M44;
        d1 += c; c = (uint64_t)(d1 >> 44); h1 = (uint64_t)d1 & M44;
        d2 += c; c = (uint64_t)(d2 >> 42); h2 = (uint64_t)d2 & M42;
        h0 += c * 5; c = h0 >> 44; h0 &= M44;
        h1 += c;
        m += 16;
    }
    p->h[0] = h0; p->h[1] = h1; p->h[2] = h2;
}

static void pg_update(vc_poly1305_state *st, const uint8_t *m, size_t len) {
    poly_generic *p = (poly_generic *)st->opaque;
    if (p->buf_len) {
        size_t want = 16 - p->buf_len;
        if (want > len) want = len;
        memcpy(p->buf + p->buf_len, m, want);
        p->buf_len += want; m += want; len -= want;
        if (p->buf_len < 16) return;
        pg_blocks(p, p->buf, 1, 1);
        p->buf_len = 0;
    }
    size_t full = len & ~(size_t)15;
    if (full) { pg_blocks(p, m, full / 16, 1); m += full; len -= full; }
    if (len) { memcpy(p->buf, m, len); p->buf_len = len; }
}

static void pg_final(vc_poly1305_state *st, uint8_t tag[16]) {
    poly_generic *p = (poly_generic *)st->opaque;
    if (p->buf_len) {
        p->buf[p->buf_len] = 1;
        memset(p->buf + p->buf_len + 1, 0, 16 - p->buf_len - 1);
        pg_blocks(p, p->buf, 1, 0);
    }
    uint64_t h0 = p->h[0], h1 = p->h[1], h2 = p->h[2], c;
    c = h1 >> 44; h1 &= M44; h2 += c;
    c = h2 >> 42; h2 &= M42; h0 += c * 5;
    c = h0 >> 44; h0 &= M44; h1 += c;
    c = h1 >> 44; h1 &= M44; h2 += c;
    c = h2 >> 42; h2 &= M42; h0 += c * 5;
    c = h0 >> 44; h0 &= M44; h1 += c;
    /* g = h + 5 - 2^130; select g if it did not borrow */
    uint64_t g0 = h0 + 5; c = g0 >> 44; g0 &= M44;
    uint64_t g1 = h1 + c; c = g1 >> 44; g1 &= M44;
    uint64_t g2 = h2 + c - (1ULL << 42);
    uint64_t mask = (g2 >> 63) - 1;   /* all ones if g2 did not go negative */
    g0 &= mask; g1 &= mask; g2 &= mask;
    mask = ~mask;
    h0 = (h0 & mask) | g0; h1 = (h1 & mask) | g1; h2 = (h2 & mask) | g2;
    /* h = (h + s) mod 2^128 */
    uint64_t t0 = h0 | (h1 << 44);
    uint64_t t1 = (h1 >> 20) | (h2 << 24);
    u128 acc = (u128)t0 + p->s[0];
    t0 = (uint64_t)acc;
    acc = (u128)t1 + p->s[1] + (uint64_t)(acc >> 64);
    t1 = (uint64_t)acc;
    vc_store64_le(tag, t0);
    vc_store64_le(tag + 8, t1);
    vc_wipe(p, sizeof *p);
}

const vc_poly1305_impl vc_poly1305_generic_impl = {
    "generic", pg_init, pg_update, pg_final, NULL,
};
