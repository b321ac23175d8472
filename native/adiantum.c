/* NHPoly1305 and Adiantum (Crowley and Biggers, "Adiantum: length-preserving
 * encryption for entry-level processors", 2018; the Linux kernel's
 * nhpoly1305, adiantum(xchacha12,aes) and adiantum(xchacha20,aes)).
 *
 * NHPoly1305: the message in NH messages of 1024 bytes (the last one
 * zero-padded to a multiple of 16), each hashed by the NH kernel in use
 * (vc_nh.h) to 32 bytes, and Poly1305 (the shared scalar code of
 * poly1305_scalar.h, with s = 0) over the NH hashes.
 *
 * Adiantum of P = P_L || P_R (P_R the last 16 bytes) under key K and tweak T:
 *     H(T, M) = Poly1305_{K_T}(bin128(8 |M|) || T) + NHPoly1305_{K_M}(M)  (mod 2^128)
 *     P_M = P_R + H(T, P_L);  C_M = AES-256_{K_E}(P_M)
 *     C_L = P_L xor XChaCha_K(nonce C_M || 1 || 0^7)
 *     C_R = C_M - H(T, C_L)
 * and K_E, K_T, K_M are the first 32 + 16 + 1088 bytes of XChaCha_K(nonce
 * 1 || 0^23).  The XChaCha rounds (12 or 20) are those of the HChaCha too.
 *
 * AES-256 (one block a message) is OpenSSL's libcrypto, loaded at run time
 * with dlopen: the package then builds without OpenSSL's headers and links no
 * library, and the block gets libcrypto's AES-NI / ARMv8 Crypto Extensions
 * code through EVP (constant time, unlike a table AES).  setkey makes one
 * keyed context per direction and a call borrows it under a try-lock (making
 * a context per call costs more than the rest of a 512-byte message); a call
 * that finds it taken by another thread makes a context of its own, so one key
 * may be used from many threads at once.  Without libcrypto (or with a VPNCRYPT_LIBCRYPTO that
 * names none) the calls return VC_ERR_AES; nothing else depends on it. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "poly1305_scalar.h"
#include "vc_nh.h"

/* ---- NHPoly1305 ---- */

static void nhpoly1305(const vc_nh_impl *nh, uint8_t out[16], const uint8_t *msg, size_t len,
                       const uint8_t key[1088])
{
    uint8_t pk[32] = {0}, hb[32], pad[16];
    uint64_t h[4], t[4];
    vc_poly44 p;
    memcpy(pk, key, 16);
    vc_poly44_init(&p, pk);
    const uint8_t *nk = key + 16;
    while (len) {
        size_t chunk = len < VC_NH_MESSAGE_MAX ? len : VC_NH_MESSAGE_MAX;
        size_t whole = chunk & ~(size_t)15, rem = chunk - whole;
        if (whole)
            nh->nh(nk, msg, whole, h);
        else
            h[0] = h[1] = h[2] = h[3] = 0;
        if (rem) {              /* the last unit, zero-padded (NH is a sum over units) */
            memset(pad, 0, sizeof pad);
            memcpy(pad, msg + whole, rem);
            nh->nh(nk + whole, pad, 16, t);
            for (int i = 0; i < 4; i++)
                h[i] += t[i];
        }
        for (int i = 0; i < 4; i++)
            vc_store64_le(hb + 8 * i, h[i]);
        vc_poly44_blocks(&p, hb, 2, 1);
        msg += chunk;
        len -= chunk;
    }
    vc_poly44_finish(&p, out);
    vc_wipe(&p, sizeof p);
    vc_wipe(pk, sizeof pk);
    vc_wipe(hb, sizeof hb);
    vc_wipe(pad, sizeof pad);
}

VC_API void vc_nhpoly1305(uint8_t out[16], const uint8_t *msg, size_t len, const uint8_t key[1088])
{
    const vc_nh_impl *nh = vc_nh_current();
    vc_note_nh(nh);
    nhpoly1305(nh, out, msg, len, key);
}

/* ---- AES-256, one block, from libcrypto ---- */

typedef struct vc_evp_ctx EVP_CTX;       /* OpenSSL's EVP_CIPHER_CTX, opaque here */
typedef struct vc_evp_cipher EVP_CIPH;   /* EVP_CIPHER */
typedef int (*evp_init_fn)(EVP_CTX *, const EVP_CIPH *, void *engine, const uint8_t *key,
                           const uint8_t *iv);
typedef int (*evp_update_fn)(EVP_CTX *, uint8_t *out, int *outl, const uint8_t *in, int inl);

static struct {
    EVP_CTX *(*ctx_new)(void);
    void (*ctx_free)(EVP_CTX *);
    const EVP_CIPH *(*aes_256_ecb)(void);
    evp_init_fn enc_init, dec_init;
    evp_update_fn enc_update, dec_update;
    int (*set_padding)(EVP_CTX *, int);
} evp;
static int evp_ok;
static pthread_once_t evp_once = PTHREAD_ONCE_INIT;

static void *sym(void *lib, const char *name, int *ok)
{
    void *p = dlsym(lib, name);
    if (!p)
        *ok = 0;
    return p;
}

static void evp_load(void)
{
    /* libcrypto 3 (Debian 12 and 13), else 1.1; both have these EVP calls. */
    static const char *const names[] = {"libcrypto.so.3", "libcrypto.so.1.1"};
    const char *only = getenv("VPNCRYPT_LIBCRYPTO");
    void *lib = NULL;
    if (only && *only)
        lib = dlopen(only, RTLD_NOW | RTLD_LOCAL);
    else
        for (size_t i = 0; !lib && i < sizeof names / sizeof names[0]; i++)
            lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return;
    int ok = 1;
    evp.ctx_new = (EVP_CTX *(*)(void))sym(lib, "EVP_CIPHER_CTX_new", &ok);
    evp.ctx_free = (void (*)(EVP_CTX *))sym(lib, "EVP_CIPHER_CTX_free", &ok);
    evp.aes_256_ecb = (const EVP_CIPH *(*)(void))sym(lib, "EVP_aes_256_ecb", &ok);
    evp.enc_init = (evp_init_fn)sym(lib, "EVP_EncryptInit_ex", &ok);
    evp.dec_init = (evp_init_fn)sym(lib, "EVP_DecryptInit_ex", &ok);
    evp.enc_update = (evp_update_fn)sym(lib, "EVP_EncryptUpdate", &ok);
    evp.dec_update = (evp_update_fn)sym(lib, "EVP_DecryptUpdate", &ok);
    evp.set_padding = (int (*)(EVP_CTX *, int))sym(lib, "EVP_CIPHER_CTX_set_padding", &ok);
    if (ok && evp.aes_256_ecb())
        evp_ok = 1;
    else
        dlclose(lib);
}

VC_API int vc_adiantum_aes_available(void)
{
    pthread_once(&evp_once, evp_load);
    return evp_ok;
}

static EVP_CTX *aes_ctx(int encrypt, const uint8_t key[32])
{
    EVP_CTX *ctx = evp.ctx_new();
    if (!ctx)
        return NULL;
    int ok = (encrypt ? evp.enc_init : evp.dec_init)(ctx, evp.aes_256_ecb(), NULL, key, NULL) == 1
             && evp.set_padding(ctx, 0) == 1;
    if (!ok) {
        evp.ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

static int aes_run(EVP_CTX *ctx, int encrypt, const uint8_t in[16], uint8_t out[16])
{
    int outl = 0;
    int ok = (encrypt ? evp.enc_update : evp.dec_update)(ctx, out, &outl, in, 16) == 1;
    return ok && outl == 16 ? 0 : -1;
}

/* ---- Adiantum ---- */

#define KEY_MAGIC 0x6164696e7475756dULL   /* set while ctx[] may hold contexts */

typedef struct {
    uint64_t magic;
    EVP_CTX *ctx[2];        /* [1] encrypts, [0] decrypts; NULL: make one per call */
    atomic_flag busy[2];
    uint8_t stream[32];     /* K: the XChaCha key */
    uint8_t aes[32];        /* K_E */
    uint8_t poly_t[16];     /* K_T: Poly1305 r of the header hash */
    uint8_t nhpoly[1088];   /* K_M: Poly1305 r, then the NH key */
    uint8_t rounds;
} adiantum_key;

_Static_assert(sizeof(adiantum_key) <= sizeof(vc_adiantum_key), "vc_adiantum_key too small");
_Static_assert(_Alignof(adiantum_key) <= _Alignof(vc_adiantum_key), "vc_adiantum_key misaligned");

static void free_ctxs(adiantum_key *k)
{
    if (k->magic != KEY_MAGIC)
        return;
    for (int i = 0; i < 2; i++)
        if (k->ctx[i])
            evp.ctx_free(k->ctx[i]);     /* cleanses the key schedule */
    k->ctx[0] = k->ctx[1] = NULL;
}

/* out = AES-256_{K_E}(in) (encrypt) or its inverse; 0 on success. */
static int aes_block(adiantum_key *k, int encrypt, const uint8_t in[16], uint8_t out[16])
{
    if (k->ctx[encrypt] && !atomic_flag_test_and_set_explicit(&k->busy[encrypt], memory_order_acquire)) {
        int rc = aes_run(k->ctx[encrypt], encrypt, in, out);
        atomic_flag_clear_explicit(&k->busy[encrypt], memory_order_release);
        return rc;
    }
    EVP_CTX *ctx = aes_ctx(encrypt, k->aes);
    if (!ctx)
        return -1;
    int rc = aes_run(ctx, encrypt, in, out);
    evp.ctx_free(ctx);
    return rc;
}

#define TWEAK_MAX 32

static int rounds_ok(int r)
{
    return r == 8 || r == 12 || r == 20;
}

VC_API int vc_adiantum_setkey(vc_adiantum_key *kk, const uint8_t key[32], int rounds)
{
    if (!rounds_ok(rounds))
        return VC_ERR_ROUNDS;
    adiantum_key *k = (adiantum_key *)(void *)kk->opaque;
    uint8_t n16[16] = {1}, nonce12[12] = {0}, sub[32], buf[32 + 16 + 1088];
    free_ctxs(k);
    memset(kk, 0, sizeof *kk);
    atomic_flag_clear(&k->busy[0]);
    atomic_flag_clear(&k->busy[1]);
    memcpy(k->stream, key, 32);
    k->rounds = (uint8_t)rounds;
    vc_hchacha20(sub, key, n16, rounds);                 /* nonce 1 || 0^23 */
    memset(buf, 0, sizeof buf);
    vc_chacha20_xor(buf, buf, sizeof buf, sub, nonce12, 0, rounds);
    memcpy(k->aes, buf, 32);
    memcpy(k->poly_t, buf + 32, 16);
    memcpy(k->nhpoly, buf + 48, 1088);
    if (vc_adiantum_aes_available()) {
        k->ctx[1] = aes_ctx(1, k->aes);
        k->ctx[0] = aes_ctx(0, k->aes);
    }
    k->magic = KEY_MAGIC;
    vc_wipe(buf, sizeof buf);
    vc_wipe(sub, sizeof sub);
    return VC_OK;
}

VC_API void vc_adiantum_wipe(vc_adiantum_key *kk)
{
    free_ctxs((adiantum_key *)(void *)kk->opaque);
    vc_wipe(kk, sizeof *kk);
}

/* Poly1305_{K_T}(bin128(8 bulk) || T), fully reduced, low 128 bits. */
static void header_hash(const adiantum_key *k, size_t bulk, const uint8_t *tweak, size_t tlen,
                        uint8_t out[16])
{
    uint8_t pk[32] = {0}, hdr[16] = {0};
    vc_poly44 p;
    memcpy(pk, k->poly_t, 16);
    vc_poly44_init(&p, pk);
    vc_store64_le(hdr, (uint64_t)bulk * 8);
    vc_poly44_update(&p, hdr, 16, NULL, NULL);
    if (tlen)
        vc_poly44_update(&p, tweak, tlen, NULL, NULL);
    vc_poly44_finish(&p, out);
    vc_wipe(&p, sizeof p);
    vc_wipe(pk, sizeof pk);
}

/* out = a + b or a - b mod 2^128, little-endian */
static void add128(uint8_t out[16], const uint8_t a[16], const uint8_t b[16], int subtract)
{
    uint64_t a0 = vc_load64_le(a), a1 = vc_load64_le(a + 8);
    uint64_t b0 = vc_load64_le(b), b1 = vc_load64_le(b + 8);
    vc_u128 x = ((vc_u128)a1 << 64) | a0, y = ((vc_u128)b1 << 64) | b0;
    vc_u128 r = subtract ? x - y : x + y;
    vc_store64_le(out, (uint64_t)r);
    vc_store64_le(out + 8, (uint64_t)(r >> 64));
}

static void hash_bulk(const vc_nh_impl *nh, const adiantum_key *k, const uint8_t ht[16],
                      const uint8_t *bulk, size_t len, uint8_t out[16])
{
    uint8_t hm[16];
    nhpoly1305(nh, hm, bulk, len, k->nhpoly);
    add128(out, ht, hm, 0);
    vc_wipe(hm, sizeof hm);
}

static int adiantum(vc_adiantum_key *kk, uint8_t *dst, const uint8_t *src, size_t len,
                    const uint8_t *tweak, size_t tlen, int encrypt)
{
    if (len < 16 || tlen > TWEAK_MAX || (tlen && !tweak))
        return VC_ERR_LENGTH;
    size_t bulk = len - 16;
    if ((uint64_t)bulk > ((uint64_t)1 << 38))     /* 2^32 blocks of 64 bytes */
        return VC_ERR_COUNTER;
    if (!vc_adiantum_aes_available())
        return VC_ERR_AES;
    adiantum_key *k = (adiantum_key *)(void *)kk->opaque;
    const vc_nh_impl *nh = vc_nh_current();
    vc_note_nh(nh);
    int rc = VC_OK;
    uint8_t ht[16], h[16], mid[16], blk[16], sub[32];
    uint8_t nonce12[12] = {0, 0, 0, 0, 1};          /* the 24-byte nonce's last 8: 1 || 0^7 */
    header_hash(k, bulk, tweak, tlen, ht);
    hash_bulk(nh, k, ht, src, bulk, h);
    add128(mid, src + bulk, h, 0);                 /* P_M, or C_M when decrypting */
    if (encrypt) {
        if (aes_block(k, 1, mid, mid)) {            /* C_M */
            rc = VC_ERR_AES;
            goto out;
        }
    } else if (aes_block(k, 0, mid, blk)) {         /* P_M, before anything is written */
        rc = VC_ERR_AES;
        goto out;
    }
    vc_hchacha20(sub, k->stream, mid, k->rounds);  /* nonce C_M || 1 || 0^7 */
    vc_chacha20_xor(dst, src, bulk, sub, nonce12, 0, k->rounds);
    hash_bulk(nh, k, ht, dst, bulk, h);
    if (encrypt)
        add128(dst + bulk, mid, h, 1);             /* C_R = C_M - H(T, C_L) */
    else
        add128(dst + bulk, blk, h, 1);             /* P_R = P_M - H(T, P_L) */
out:
    vc_wipe(ht, sizeof ht);
    vc_wipe(h, sizeof h);
    vc_wipe(mid, sizeof mid);
    vc_wipe(blk, sizeof blk);
    vc_wipe(sub, sizeof sub);
    return rc;
}

VC_API int vc_adiantum_encrypt(vc_adiantum_key *k, uint8_t *dst, const uint8_t *src,
                               size_t len, const uint8_t *tweak, size_t tweak_len)
{
    return adiantum(k, dst, src, len, tweak, tweak_len, 1);
}

VC_API int vc_adiantum_decrypt(vc_adiantum_key *k, uint8_t *dst, const uint8_t *src,
                               size_t len, const uint8_t *tweak, size_t tweak_len)
{
    return adiantum(k, dst, src, len, tweak, tweak_len, 0);
}
