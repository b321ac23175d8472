/* The one-shot entry points as a table of function pointers.
 *
 * The cffi module (vpncrypt._native) holds the one copy of the kernel registry
 * and of the selection (dispatch.c).  The CPython extension vpncrypt._oneshot
 * (native/pyext/oneshot.c), which serves the Python API's one-message calls
 * without cffi's per-call costs, links no crypto code of its own: at import it
 * is handed this table's address (vc_oneshot_table(), through cffi) and calls
 * through it, so use_implementation() switches its kernels too. */
#ifndef VC_ONESHOT_H
#define VC_ONESHOT_H
#include <stddef.h>
#include <stdint.h>

/* Bumped whenever the table's layout or a function's contract changes; the
 * extension refuses a table of another version. */
#define VC_ONESHOT_ABI 1

struct vc_oneshot_api {
    uint32_t abi;       /* VC_ONESHOT_ABI */
    uint32_t size;      /* sizeof(struct vc_oneshot_api) */
    /* vpncrypt.h's attached forms: seal writes len + 16 bytes, open takes
     * sealed_len >= 16 and writes sealed_len - 16 (zeroed on VC_ERR_AUTH). */
    int (*seal)(uint8_t *out, const uint8_t *pt, size_t len, const uint8_t *aad, size_t aad_len,
                const uint8_t key[32], const uint8_t nonce[12]);
    int (*open)(uint8_t *out, const uint8_t *sealed, size_t sealed_len, const uint8_t *aad,
                size_t aad_len, const uint8_t key[32], const uint8_t nonce[12]);
    int (*xseal)(uint8_t *out, const uint8_t *pt, size_t len, const uint8_t *aad, size_t aad_len,
                 const uint8_t key[32], const uint8_t nonce[24]);
    int (*xopen)(uint8_t *out, const uint8_t *sealed, size_t sealed_len, const uint8_t *aad,
                 size_t aad_len, const uint8_t key[32], const uint8_t nonce[24]);
    int (*chacha20_xor)(uint8_t *dst, const uint8_t *src, size_t len, const uint8_t key[32],
                        const uint8_t nonce[12], uint32_t counter, int rounds);
};
#endif
