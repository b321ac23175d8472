/* Portable 64-bit Poly1305 (RFC 8439 section 2.5): the shared radix-2^44
 * scalar code (poly1305_scalar.h) on its own. */
#include "poly1305_scalar.h"

_Static_assert(sizeof(vc_poly44) <= sizeof(vc_poly1305_state), "state too small");

static void pg_init(vc_poly1305_state *st, const uint8_t key[32])
{
    vc_poly44_init((vc_poly44 *)st->opaque, key);
}

static void pg_update(vc_poly1305_state *st, const uint8_t *m, size_t len)
{
    vc_poly44_update((vc_poly44 *)st->opaque, m, len, NULL, NULL);
}

static void pg_final(vc_poly1305_state *st, uint8_t tag[16])
{
    vc_poly44 *p = (vc_poly44 *)st->opaque;
    vc_poly44_finish(p, tag);
    vc_wipe(p, sizeof *p);
}

const vc_poly1305_impl vc_poly1305_generic_impl = {
    "generic", pg_init, pg_update, pg_final, NULL,
};
