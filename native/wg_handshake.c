/* The responder's Noise_IKpsk2 work for one initiation, in C, so that it runs
 * without the GIL (cffi releases it around each call) on the handshake
 * worker threads: the hashing (BLAKE2s, HMAC-BLAKE2s, HKDF), the
 * ChaCha20-Poly1305 of the static key, the timestamp and the empty payload.
 * X25519 is not implemented here: the caller passes the addresses of
 * libsodium's crypto_scalarmult and crypto_scalarmult_base (the ones the
 * Python side already uses, from PyNaCl), so this file needs no libsodium
 * headers.
 *
 * Three calls, with the Python side's checks between them (the peer lookup
 * by static key, the timestamp replay and rate checks): begin, finish,
 * respond.  The state between them is ck || h || k (96 bytes, the caller's
 * buffer, wiped by respond and on every failure).  The steps and their order
 * are vpncrypt/protocol/handshake.py's ik_responder_* exactly; the
 * differential test holds them to it. */
#include <string.h>
#include "wg_internal.h"
#include "vc_internal.h"
#include "vpncrypt.h"
#include "vc_wg.h"

typedef int (*x25519_fn)(uint8_t *q, const uint8_t *n, const uint8_t *p);
typedef int (*x25519_base_fn)(uint8_t *q, const uint8_t *n);

static const char CONSTRUCTION[] = "Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s";
static const char IDENTIFIER[] = "WireGuard v1 zx2c4 Jason@zx2c4.com";
static const uint8_t ZERO_NONCE[12];
static const uint8_t NOTHING[1];

#define CK(s) (s)
#define H(s) ((s) + 32)
#define K(s) ((s) + 64)

/* h = HASH(h || data), data at most 64 bytes */
static void mix_hash(uint8_t *st, const uint8_t *data, size_t len)
{
    uint8_t buf[32 + 64];
    memcpy(buf, H(st), 32);
    memcpy(buf + 32, data, len);
    wg_blake2s(H(st), 32, NULL, 0, buf, 32 + len);
    vc_wipe(buf, sizeof buf);
}

/* out = HMAC-BLAKE2s(key (32 bytes), data (at most 64 bytes)) */
static void hmac(uint8_t out[32], const uint8_t key[32], const uint8_t *data, size_t len)
{
    uint8_t buf[64 + 64], inner[32];
    memset(buf, 0x36, 64);
    for (int i = 0; i < 32; i++)
        buf[i] ^= key[i];
    if (len)
        memcpy(buf + 64, data, len);
    wg_blake2s(inner, 32, NULL, 0, buf, 64 + len);
    memset(buf, 0x5c, 64);
    for (int i = 0; i < 32; i++)
        buf[i] ^= key[i];
    memcpy(buf + 64, inner, 32);
    wg_blake2s(out, 32, NULL, 0, buf, 64 + 32);
    vc_wipe(buf, sizeof buf);
    vc_wipe(inner, sizeof inner);
}

/* WireGuard's KDF_n (n = 2 or 3) of the chaining key and ikm (at most 32 bytes) */
static void kdf(uint8_t *o1, uint8_t *o2, uint8_t *o3, const uint8_t ck[32],
                const uint8_t *ikm, size_t len)
{
    uint8_t t0[32], buf[33];
    hmac(t0, ck, ikm, len);
    buf[0] = 1;
    hmac(o1, t0, buf, 1);
    memcpy(buf, o1, 32);
    buf[32] = 2;
    hmac(o2, t0, buf, 33);
    if (o3) {
        memcpy(buf, o2, 32);
        buf[32] = 3;
        hmac(o3, t0, buf, 33);
    }
    vc_wipe(t0, sizeof t0);
    vc_wipe(buf, sizeof buf);
}

static void mix_key(uint8_t *st, const uint8_t *ikm, size_t len)
{
    uint8_t ck[32];
    kdf(ck, K(st), NULL, CK(st), ikm, len);
    memcpy(CK(st), ck, 32);
    vc_wipe(ck, sizeof ck);
}

/* X25519 that refuses the all-zero result (libsodium's -1, or zero) */
static int dh(x25519_fn f, uint8_t out[32], const uint8_t priv[32], const uint8_t pub[32])
{
    uint8_t acc = 0;
    if (f(out, priv, pub) != 0)
        return -1;
    for (int i = 0; i < 32; i++)
        acc |= out[i];
    return acc ? 0 : -1;
}

static int fail(uint8_t *st, int code)
{
    vc_wipe(st, 96);
    return code;
}

int vc_wg_hs_begin(uintptr_t x25519, uint8_t state[96], const uint8_t s_priv[32],
                   const uint8_t s_pub[32], const uint8_t msg[116], uint8_t static_out[32])
{
    const uint8_t *e = msg + 8, *enc_static = msg + 40;
    uint8_t shared[32];
    wg_blake2s(CK(state), 32, NULL, 0, (const uint8_t *)CONSTRUCTION, sizeof CONSTRUCTION - 1);
    memcpy(H(state), CK(state), 32);
    mix_hash(state, (const uint8_t *)IDENTIFIER, sizeof IDENTIFIER - 1);
    mix_hash(state, s_pub, 32);
    mix_hash(state, e, 32);
    mix_key(state, e, 32);
    if (dh((x25519_fn)x25519, shared, s_priv, e)) {
        vc_wipe(shared, sizeof shared);
        return fail(state, VC_WG_HS_DH);
    }
    mix_key(state, shared, 32);
    vc_wipe(shared, sizeof shared);
    if (vc_aead_open(static_out, enc_static, 32, enc_static + 32, H(state), 32, K(state),
                     ZERO_NONCE) != VC_OK)
        return fail(state, VC_WG_HS_AUTH);
    mix_hash(state, enc_static, 48);
    return VC_OK;
}

int vc_wg_hs_finish(uint8_t state[96], const uint8_t dh_ss[32], const uint8_t msg[116],
                    uint8_t ts_out[12])
{
    const uint8_t *enc_ts = msg + 88;
    mix_key(state, dh_ss, 32);
    if (vc_aead_open(ts_out, enc_ts, 12, enc_ts + 12, H(state), 32, K(state), ZERO_NONCE) != VC_OK)
        return fail(state, VC_WG_HS_AUTH);
    mix_hash(state, enc_ts, 28);
    return VC_OK;
}

int vc_wg_hs_respond(uintptr_t x25519, uintptr_t x25519_base, uint8_t state[96],
                     const uint8_t e_priv[32], const uint8_t re_pub[32], const uint8_t rs_pub[32],
                     const uint8_t psk[32], uint8_t e_pub_out[32], uint8_t empty_out[16],
                     uint8_t send_key[32], uint8_t recv_key[32])
{
    uint8_t shared[32], ck[32], temp_h[32];
    if (((x25519_base_fn)x25519_base)(e_pub_out, e_priv) != 0)
        return fail(state, VC_WG_HS_DH);
    mix_hash(state, e_pub_out, 32);
    mix_key(state, e_pub_out, 32);
    if (dh((x25519_fn)x25519, shared, e_priv, re_pub))
        goto dh_failed;
    mix_key(state, shared, 32);
    if (dh((x25519_fn)x25519, shared, e_priv, rs_pub))
        goto dh_failed;
    mix_key(state, shared, 32);
    vc_wipe(shared, sizeof shared);
    kdf(ck, temp_h, K(state), CK(state), psk, 32);
    memcpy(CK(state), ck, 32);
    mix_hash(state, temp_h, 32);
    vc_aead_seal(ck, empty_out, NOTHING, 0, H(state), 32, K(state), ZERO_NONCE);
    mix_hash(state, empty_out, 16);
    kdf(recv_key, send_key, NULL, CK(state), NOTHING, 0);   /* (initiator->responder, responder->initiator) */
    vc_wipe(ck, sizeof ck);
    vc_wipe(temp_h, sizeof temp_h);
    vc_wipe(state, 96);
    return VC_OK;
dh_failed:
    vc_wipe(shared, sizeof shared);
    return fail(state, VC_WG_HS_DH);
}
