/* llvm-mca entry points for NH (never built into the package): the NEON and
 * the portable NH kernels as shipped (the length is a run-time value, as in
 * the package, so the loops stay loops), compiled by native/mca/nh_mca.py with
 * aarch64-linux-gnu-gcc and the package's CFLAGS. */
#include "../nh_generic.c"
#include "../nh_neon.c"

void mca_nh_neon(const uint8_t *key, const uint8_t *msg, size_t len, uint64_t out[4])
{
    nh_neon(key, msg, len, out);
}

void mca_nh_generic(const uint8_t *key, const uint8_t *msg, size_t len, uint64_t out[4])
{
    vc_nh_generic(key, msg, len, out);
}
