/* Kernel registry and run-time selection. */
#include "vc_internal.h"

/* Weak references: a kernel that is not compiled for this architecture has a
 * NULL address and is left out of the table. */
#pragma weak vc_chacha_avx2_impl
#pragma weak vc_chacha_avx512_impl
#pragma weak vc_chacha_neon_impl
#pragma weak vc_chacha_neon4_impl
#pragma weak vc_poly1305_avx2_impl
#pragma weak vc_poly1305_avx512_impl
#pragma weak vc_poly1305_neon_impl

/* Table order is the listing order; preference for the default is the reverse
 * (the last available entry wins), except where a kernel file overrides it. */
static const vc_chacha_impl *const chacha_all[] = {
    &vc_chacha_generic_impl, &vc_chacha_neon4_impl, &vc_chacha_neon_impl,
    &vc_chacha_avx2_impl, &vc_chacha_avx512_impl,
};
static const vc_poly1305_impl *const poly_all[] = {
    &vc_poly1305_generic_impl, &vc_poly1305_neon_impl,
    &vc_poly1305_avx2_impl, &vc_poly1305_avx512_impl,
};
#define N_CHACHA (sizeof chacha_all / sizeof chacha_all[0])
#define N_POLY (sizeof poly_all / sizeof poly_all[0])

static const vc_chacha_impl *chacha_tab[N_CHACHA];
static const vc_poly1305_impl *poly_tab[N_POLY];
static int n_chacha, n_poly;
static int chacha_cur = -1, poly_cur = -1;

/* Optional hook: a kernel file may define this to choose the default
 * (for example by core type); it returns a name or NULL. */
#pragma weak vc_chacha_preferred_name
const char *vc_chacha_preferred_name(void);

static int chacha_avail(int i) { return !chacha_tab[i]->available || chacha_tab[i]->available(); }
static int poly_avail(int i) { return !poly_tab[i]->available || poly_tab[i]->available(); }

static void setup(void) {
    if (chacha_cur >= 0) return;
    int nc = 0, np = 0;
    for (size_t i = 0; i < N_CHACHA; i++) if (chacha_all[i]) chacha_tab[nc++] = chacha_all[i];
    for (size_t i = 0; i < N_POLY; i++) if (poly_all[i]) poly_tab[np++] = poly_all[i];
    n_chacha = nc; n_poly = np;
    int best = 0;
    for (int i = 0; i < nc; i++) if (chacha_avail(i)) best = i;
    if (vc_chacha_preferred_name) {
        const char *want = vc_chacha_preferred_name();
        for (int i = 0; want && i < nc; i++)
            if (chacha_avail(i) && strcmp(chacha_tab[i]->name, want) == 0) best = i;
    }
    int pbest = 0;
    for (int i = 0; i < np; i++) if (poly_avail(i)) pbest = i;
    poly_cur = pbest;
    chacha_cur = best;
}

int vc_chacha_impl_count(void) { setup(); return n_chacha; }
const char *vc_chacha_impl_name(int i) { setup(); return (i >= 0 && i < n_chacha) ? chacha_tab[i]->name : NULL; }
int vc_chacha_impl_available(int i) { setup(); return i >= 0 && i < n_chacha && chacha_avail(i); }
int vc_chacha_impl_active(void) { setup(); return chacha_cur; }
int vc_chacha_impl_select(int i) {
    setup();
    if (!vc_chacha_impl_available(i)) return VC_ERR_IMPL;
    chacha_cur = i;
    return VC_OK;
}
int vc_poly1305_impl_count(void) { setup(); return n_poly; }
const char *vc_poly1305_impl_name(int i) { setup(); return (i >= 0 && i < n_poly) ? poly_tab[i]->name : NULL; }
int vc_poly1305_impl_available(int i) { setup(); return i >= 0 && i < n_poly && poly_avail(i); }
int vc_poly1305_impl_active(void) { setup(); return poly_cur; }
int vc_poly1305_impl_select(int i) {
    setup();
    if (!vc_poly1305_impl_available(i)) return VC_ERR_IMPL;
    poly_cur = i;
    return VC_OK;
}

const vc_chacha_impl *vc_chacha_current(void) { setup(); return chacha_tab[chacha_cur]; }
const vc_poly1305_impl *vc_poly1305_current(void) { setup(); return poly_tab[poly_cur]; }
