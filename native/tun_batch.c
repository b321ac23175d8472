/* Batch TUN I/O (IFF_TUN|IFF_NO_PI, non-blocking fd): one read()/write() per
 * packet, many packets per call.  Plain Linux C (also built for aarch64). */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "vc_io.h"
#include "vc_tun_internal.h"

#define VC_API __attribute__((visibility("default")))

VC_API int vc_tun_read_batch(int fd, uint8_t *slab, size_t slab_size, size_t mtu,
                             uint32_t *off, uint32_t *len, int max)
{
    if (max < 1 || mtu == 0 || !slab || !off || !len)
        return -EINVAL;
    if (slab_size > UINT32_MAX)
        slab_size = UINT32_MAX;
    size_t slot = (mtu + 15) & ~(size_t)15;
    if (slab_size < mtu)
        return -EINVAL;
    size_t cursor = 0;
    int count = 0;
    while (count < max && slab_size - cursor >= mtu) {
        ssize_t r = read(fd, slab + cursor, mtu);
        if (r < 0) {
            int f = vc_tun_read_failed(errno, count);
            if (f == 0)
                continue;
            if (f == 1)
                break;
            return f;
        }
        if (r == 0)
            break;
        if ((size_t)r > mtu)        /* never report beyond the slot */
            continue;
        off[count] = (uint32_t)cursor;
        len[count] = (uint32_t)r;
        count++;
        cursor += slot;
        if (cursor > slab_size)
            break;
    }
    return count;
}

VC_API int vc_tun_write_batch(int fd, const uint8_t *buf, const uint32_t *off, const uint32_t *len,
                              int n, int *err)
{
    int done = 0, e0 = 0;
    if (err)
        *err = 0;
    for (int i = 0; i < n; i++) {
        ssize_t r = write(fd, buf + off[i], len[i]);
        if (r >= 0) {
            done++;
            continue;
        }
        int e = errno;
        if (e == EINTR) {
            i--;
            continue;
        }
        if (!e0)
            e0 = e;
        if (vc_tun_write_stops(e))
            break;
    }
    if (err)
        *err = e0;
    return done;
}
