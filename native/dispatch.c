/* Kernel registry and run-time selection.
 *
 * Thread safety: the registry (which kernels exist, which this CPU can run,
 * the default) is built exactly once, under pthread_once, by whichever thread
 * first needs it.  After that the kernel in use is one atomic pointer per
 * primitive: a selection is a release store, and every operation loads the
 * pointer once (acquire) and uses that kernel to the end, so a thread that
 * switches kernels never leaves another thread's call half on one kernel and
 * half on the other. */
#include <pthread.h>
#include <stdatomic.h>

#include "vc_internal.h"
#include "vc_nh.h"

/* Weak references: a kernel that is not compiled for this architecture has a
 * NULL address and is left out of the table. */
#pragma weak vc_chacha_avx2_impl
#pragma weak vc_chacha_avx512_impl
#pragma weak vc_chacha_neon_impl
#pragma weak vc_chacha_neon4_impl
#pragma weak vc_poly1305_avx2_impl
#pragma weak vc_poly1305_avx512_impl
#pragma weak vc_poly1305_neon_impl
#pragma weak vc_nh_avx2_impl
#pragma weak vc_nh_neon_impl

/* Table order is the listing order; preference for the default is the reverse
 * (the last available entry wins), except where the CPU asks for another
 * (vc_chacha_preferred_name). */
static const vc_chacha_impl *const chacha_all[] = {
    &vc_chacha_generic_impl, &vc_chacha_neon4_impl, &vc_chacha_neon_impl,
    &vc_chacha_avx2_impl, &vc_chacha_avx512_impl,
};
static const vc_poly1305_impl *const poly_all[] = {
    &vc_poly1305_generic_impl, &vc_poly1305_neon_impl,
    &vc_poly1305_avx2_impl, &vc_poly1305_avx512_impl,
};
static const vc_nh_impl *const nh_all[] = {
    &vc_nh_generic_impl, &vc_nh_neon_impl, &vc_nh_avx2_impl,
};
#define N_CHACHA (sizeof chacha_all / sizeof chacha_all[0])
#define N_POLY (sizeof poly_all / sizeof poly_all[0])
#define N_NH (sizeof nh_all / sizeof nh_all[0])

/* Written once by setup(), read-only afterwards. */
static const vc_chacha_impl *chacha_tab[N_CHACHA];
static const vc_poly1305_impl *poly_tab[N_POLY];
static const vc_nh_impl *nh_tab[N_NH];
static int n_chacha, n_poly, n_nh;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

/* The kernels in use; NULL until setup() has run. */
static _Atomic(const vc_chacha_impl *) chacha_cur;
static _Atomic(const vc_poly1305_impl *) poly_cur;
static _Atomic(const vc_nh_impl *) nh_cur;

/* The kernels that served this thread's last operation (vc_last_*_impl). */
static __thread const vc_chacha_impl *last_chacha;
static __thread const vc_poly1305_impl *last_poly;
static __thread const vc_nh_impl *last_nh;

static int chacha_avail(int i)
{
    return !chacha_tab[i]->available || chacha_tab[i]->available();
}

static int poly_avail(int i)
{
    return !poly_tab[i]->available || poly_tab[i]->available();
}

static int nh_avail(int i)
{
    return !nh_tab[i]->available || nh_tab[i]->available();
}

static void setup(void)
{
    int nc = 0, np = 0;
    for (size_t i = 0; i < N_CHACHA; i++)
        if (chacha_all[i])
            chacha_tab[nc++] = chacha_all[i];
    for (size_t i = 0; i < N_POLY; i++)
        if (poly_all[i])
            poly_tab[np++] = poly_all[i];
    n_chacha = nc;
    n_poly = np;
    int best = 0;
    for (int i = 0; i < nc; i++)
        if (chacha_avail(i))
            best = i;
    const char *want = vc_chacha_preferred_name();
    for (int i = 0; want && i < nc; i++)
        if (chacha_avail(i) && strcmp(chacha_tab[i]->name, want) == 0)
            best = i;
    int pbest = 0;
    for (int i = 0; i < np; i++)
        if (poly_avail(i))
            pbest = i;
    int nn = 0, nbest = 0;
    for (size_t i = 0; i < N_NH; i++)
        if (nh_all[i])
            nh_tab[nn++] = nh_all[i];
    n_nh = nn;
    for (int i = 0; i < nn; i++)
        if (nh_avail(i))
            nbest = i;
    atomic_store_explicit(&nh_cur, nh_tab[nbest], memory_order_release);
    atomic_store_explicit(&poly_cur, poly_tab[pbest], memory_order_release);
    atomic_store_explicit(&chacha_cur, chacha_tab[best], memory_order_release);
}

static void ensure_setup(void)
{
    pthread_once(&setup_once, setup);
}

VC_API int vc_chacha_impl_count(void)
{
    ensure_setup();
    return n_chacha;
}

VC_API const char *vc_chacha_impl_name(int i)
{
    ensure_setup();
    return (i >= 0 && i < n_chacha) ? chacha_tab[i]->name : NULL;
}

VC_API int vc_chacha_impl_available(int i)
{
    ensure_setup();
    return i >= 0 && i < n_chacha && chacha_avail(i);
}

static int chacha_index(const vc_chacha_impl *impl)
{
    for (int i = 0; i < n_chacha; i++)
        if (chacha_tab[i] == impl)
            return i;
    return -1;
}

static int poly_index(const vc_poly1305_impl *impl)
{
    for (int i = 0; i < n_poly; i++)
        if (poly_tab[i] == impl)
            return i;
    return -1;
}

VC_API int vc_chacha_impl_active(void)
{
    return chacha_index(vc_chacha_current());
}

VC_API int vc_chacha_impl_select(int i)
{
    if (!vc_chacha_impl_available(i))
        return VC_ERR_IMPL;
    atomic_store_explicit(&chacha_cur, chacha_tab[i], memory_order_release);
    return VC_OK;
}

VC_API int vc_poly1305_impl_count(void)
{
    ensure_setup();
    return n_poly;
}

VC_API const char *vc_poly1305_impl_name(int i)
{
    ensure_setup();
    return (i >= 0 && i < n_poly) ? poly_tab[i]->name : NULL;
}

VC_API int vc_poly1305_impl_available(int i)
{
    ensure_setup();
    return i >= 0 && i < n_poly && poly_avail(i);
}

VC_API int vc_poly1305_impl_active(void)
{
    return poly_index(vc_poly1305_current());
}

VC_API int vc_poly1305_impl_select(int i)
{
    if (!vc_poly1305_impl_available(i))
        return VC_ERR_IMPL;
    atomic_store_explicit(&poly_cur, poly_tab[i], memory_order_release);
    return VC_OK;
}

/* The fast path is one acquire load; setup() runs on the first call only. */
const vc_chacha_impl *vc_chacha_current(void)
{
    const vc_chacha_impl *c = atomic_load_explicit(&chacha_cur, memory_order_acquire);
    if (__builtin_expect(c == NULL, 0)) {
        ensure_setup();
        c = atomic_load_explicit(&chacha_cur, memory_order_acquire);
    }
    return c;
}

const vc_poly1305_impl *vc_poly1305_current(void)
{
    const vc_poly1305_impl *p = atomic_load_explicit(&poly_cur, memory_order_acquire);
    if (__builtin_expect(p == NULL, 0)) {
        ensure_setup();
        p = atomic_load_explicit(&poly_cur, memory_order_acquire);
    }
    return p;
}

void vc_note_kernels(const vc_chacha_impl *c, const vc_poly1305_impl *p)
{
    last_chacha = c;
    last_poly = p;
}

VC_API int vc_last_chacha_impl(void)
{
    ensure_setup();
    return last_chacha ? chacha_index(last_chacha) : -1;
}

VC_API int vc_last_poly1305_impl(void)
{
    ensure_setup();
    return last_poly ? poly_index(last_poly) : -1;
}

/* ---- NH (vc_nh.h): the same registry, for NHPoly1305 and Adiantum ---- */
VC_API int vc_nh_impl_count(void)
{
    ensure_setup();
    return n_nh;
}

VC_API const char *vc_nh_impl_name(int i)
{
    ensure_setup();
    return (i >= 0 && i < n_nh) ? nh_tab[i]->name : NULL;
}

VC_API int vc_nh_impl_available(int i)
{
    ensure_setup();
    return i >= 0 && i < n_nh && nh_avail(i);
}

static int nh_index(const vc_nh_impl *impl)
{
    for (int i = 0; i < n_nh; i++)
        if (nh_tab[i] == impl)
            return i;
    return -1;
}

VC_API int vc_nh_impl_active(void)
{
    return nh_index(vc_nh_current());
}

VC_API int vc_nh_impl_select(int i)
{
    if (!vc_nh_impl_available(i))
        return VC_ERR_IMPL;
    atomic_store_explicit(&nh_cur, nh_tab[i], memory_order_release);
    return VC_OK;
}

const vc_nh_impl *vc_nh_current(void)
{
    const vc_nh_impl *n = atomic_load_explicit(&nh_cur, memory_order_acquire);
    if (__builtin_expect(n == NULL, 0)) {
        ensure_setup();
        n = atomic_load_explicit(&nh_cur, memory_order_acquire);
    }
    return n;
}

void vc_note_nh(const vc_nh_impl *n)
{
    last_nh = n;
}

VC_API int vc_last_nh_impl(void)
{
    ensure_setup();
    return last_nh ? nh_index(last_nh) : -1;
}
