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
static const vc_poly1305_impl *const poly1305_all[] = {
    &vc_poly1305_generic_impl, &vc_poly1305_neon_impl,
    &vc_poly1305_avx2_impl, &vc_poly1305_avx512_impl,
};
static const vc_nh_impl *const nh_all[] = {
    &vc_nh_generic_impl, &vc_nh_neon_impl, &vc_nh_avx2_impl,
};
/* One registry per primitive P (chacha, poly1305, nh) over its table P_all of
 * kernel type T: the kernels compiled in (P_tab, P_n, written once by setup()
 * and read-only afterwards), the one in use (P_cur, NULL until setup() has
 * run) and the one that served this thread's last operation (P_last), with
 * the entry points vc_P_impl_count/_name/_available/_active/_select,
 * vc_P_current (the fast path: one acquire load; setup() runs on the first
 * call only) and vc_last_P_impl. */
static void ensure_setup(void);

#define VC_REGISTRY(P, T)                                                       \
    static const T *P##_tab[sizeof P##_all / sizeof P##_all[0]];                \
    static int P##_n;                                                           \
    static _Atomic(const T *) P##_cur;                                          \
    static __thread const T *P##_last;                                          \
    static int P##_avail(int i)                                                 \
    {                                                                           \
        return !P##_tab[i]->available || P##_tab[i]->available();               \
    }                                                                           \
    /* the kernels compiled in, in table order; the last one this CPU runs */  \
    static int P##_setup(void)                                                  \
    {                                                                           \
        int n = 0, best = 0;                                                    \
        for (size_t i = 0; i < sizeof P##_all / sizeof P##_all[0]; i++)         \
            if (P##_all[i])                                                     \
                P##_tab[n++] = P##_all[i];                                      \
        P##_n = n;                                                              \
        for (int i = 0; i < n; i++)                                             \
            if (P##_avail(i))                                                   \
                best = i;                                                       \
        return best;                                                            \
    }                                                                           \
    static int P##_index(const T *impl)                                         \
    {                                                                           \
        for (int i = 0; i < P##_n; i++)                                         \
            if (P##_tab[i] == impl)                                             \
                return i;                                                       \
        return -1;                                                              \
    }                                                                           \
    VC_API int vc_##P##_impl_count(void)                                        \
    {                                                                           \
        ensure_setup();                                                         \
        return P##_n;                                                           \
    }                                                                           \
    VC_API const char *vc_##P##_impl_name(int i)                                \
    {                                                                           \
        ensure_setup();                                                         \
        return (i >= 0 && i < P##_n) ? P##_tab[i]->name : NULL;                 \
    }                                                                           \
    VC_API int vc_##P##_impl_available(int i)                                   \
    {                                                                           \
        ensure_setup();                                                         \
        return i >= 0 && i < P##_n && P##_avail(i);                             \
    }                                                                           \
    const T *vc_##P##_current(void)                                             \
    {                                                                           \
        const T *c = atomic_load_explicit(&P##_cur, memory_order_acquire);      \
        if (__builtin_expect(c == NULL, 0)) {                                   \
            ensure_setup();                                                     \
            c = atomic_load_explicit(&P##_cur, memory_order_acquire);           \
        }                                                                       \
        return c;                                                               \
    }                                                                           \
    VC_API int vc_##P##_impl_active(void)                                       \
    {                                                                           \
        return P##_index(vc_##P##_current());                                   \
    }                                                                           \
    VC_API int vc_##P##_impl_select(int i)                                      \
    {                                                                           \
        if (!vc_##P##_impl_available(i))                                        \
            return VC_ERR_IMPL;                                                 \
        atomic_store_explicit(&P##_cur, P##_tab[i], memory_order_release);      \
        return VC_OK;                                                           \
    }                                                                           \
    VC_API int vc_last_##P##_impl(void)                                         \
    {                                                                           \
        ensure_setup();                                                         \
        return P##_last ? P##_index(P##_last) : -1;                             \
    }

VC_REGISTRY(chacha, vc_chacha_impl)
VC_REGISTRY(poly1305, vc_poly1305_impl)
VC_REGISTRY(nh, vc_nh_impl)

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

static void setup(void)
{
    int best = chacha_setup();
    const char *want = vc_chacha_preferred_name();
    for (int i = 0; want && i < chacha_n; i++)
        if (chacha_avail(i) && strcmp(chacha_tab[i]->name, want) == 0)
            best = i;
    int pbest = poly1305_setup();
    int nbest = nh_setup();
    atomic_store_explicit(&nh_cur, nh_tab[nbest], memory_order_release);
    atomic_store_explicit(&poly1305_cur, poly1305_tab[pbest], memory_order_release);
    atomic_store_explicit(&chacha_cur, chacha_tab[best], memory_order_release);
}

static void ensure_setup(void)
{
    pthread_once(&setup_once, setup);
}

void vc_note_kernels(const vc_chacha_impl *c, const vc_poly1305_impl *p)
{
    chacha_last = c;
    poly1305_last = p;
}

void vc_note_nh(const vc_nh_impl *n)
{
    nh_last = n;
}
